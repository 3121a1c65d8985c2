"""Subscriber: the read side of a topic, anonymous or a member of a group.

A subscriber registers itself as a *reader* on every channel (its filter and
converter run there; an anonymous subscriber's cursor lives there). Reading
goes straight to the channels:

- ``receive_batch()`` and ``receive()`` are ONE actor call each, submitted
  from this process (so the ObjectRef belongs to this process and survives
  the channel actor), to the channel the subscriber picks: the next owned
  channel in turn for a batch, its *home* for a single element. That
  channel's receive session takes from its own channel in-process, and only
  when that one is empty from the others (see ``raytopic.actors.
  receive_session``); receives sent while earlier ones are still out go to
  the same channel, so they complete in order.
- Iteration keeps a few receives in flight at EVERY owned channel at once,
  each scoped to its channel: no element is relayed through another actor.

A group member also joins the group at the topic's coordinator, which
assigns it channels (with leases the channels check on every take and
commit); its view of the group is kept fresh by :mod:`raytopic.membership`,
never by a call on the receive path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
import uuid
import weakref
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import cloudpickle
import ray

from raytopic.acks import check_delay, check_lease, check_own, send_many
from raytopic.actors.receive_session import CursorState
from raytopic.actors.wire import ReaderSpec, pack_request
from raytopic.config import Start, check_name, check_positive_int, check_timeout
from raytopic.errors import (
    GroupModeError,
    GroupNotFoundError,
    InvalidArgumentError,
    InvalidTypeError,
    NotOwnerError,
    SubscriberClosedError,
    unwrap_ray_error,
)
from raytopic.membership import Heartbeats, Membership
from raytopic.records import AckStatus, CommitResult, Element, OwnershipChange, Position
from raytopic.resequencer import Resequence
from raytopic.shared_group import SharedGroup, check_mode
from raytopic.topic import ensure_dead_letter_topic

if TYPE_CHECKING:
    from raytopic.actors.cursors import Lease
    from raytopic.coordinator.groups import MemberView
    from raytopic.resequencer import ResequencerStats
    from raytopic.topic import Topic

logger = logging.getLogger(__name__)

__all__ = ["Subscriber"]

_TAIL = 1 << 62
"""A sequence past any tail: seeking there clamps to the tail."""

ITERATION_BATCH = 4000
"""Elements an iteration asks for per round, over all the channels it reads."""

ITERATION_SHARE = 1000
"""Fewest elements one iteration receive asks of one channel."""

ITERATION_DEPTH = 2
"""Receives an iteration keeps in flight per channel."""

_ITERATION_LOOK = 1.0
"""Seconds an iteration waits for data before it looks at its view again."""


@dataclass(slots=True)
class _ChannelReads:
    """One stream of receives at one channel: its numbering, and (an iteration's)
    the receives in flight."""

    stream: str
    next_number: int = 0
    refs: deque[Any] = field(default_factory=deque)
    drained: bool = False  # with complete_on_empty: the channel answered "empty"


class Subscriber:
    """Receives a topic's elements: all of them (anonymous) or its group's share.

    **Ordering**: elements of one channel arrive in position order, and the
    ObjectRefs of one subscriber's receives complete in order per channel.

    **Delivery**: anonymous subscribers see every element published after
    they start (or every retained one with ``start="earliest"``). In a group,
    each element goes to one member; after a member closes, dies or times out,
    what it had not committed is delivered again (at least once).

    **Back-pressure**: ``window=N`` stops receives at N received but
    uncommitted elements until commits free room.

    **Shared groups** (``mode="shared"``): any member receives any element
    of any channel, and acknowledges each one (``ack``, ``nack``) instead of
    committing positions. What a member holds goes to another member when it
    nacks, closes, dies or holds it past the group's ``ack_timeout``; its
    ``window`` counts what it holds unacknowledged.

    A Subscriber pickles: the copy in another process is the same subscriber
    (same cursor or membership, receiving in its own order); closing any
    copy closes it.
    """

    def __init__(
        self,
        topic: Topic,
        *,
        group: str | SharedGroup | None = None,
        start: str | None = None,
        filter: Callable[[Any], bool] | None = None,
        converter: Callable[[Any], Any] | None = None,
        complete_on_empty: bool = False,
        window: int | None = None,
        timeout: float = 30.0,
        on_ownership_change: Callable[[OwnershipChange], None] | None = None,
        resequence: Resequence | None = None,
        mode: str | None = None,
        _attach: dict[str, Any] | None = None,
    ) -> None:
        self._topic = topic
        self._definition = group if isinstance(group, SharedGroup) else None
        if self._definition is not None:
            group = self._definition.name
        self._group = None if group is None else check_name(group, "group")
        self._shared: bool = (_attach or {}).get("shared", False)
        if _attach is None:
            mode = check_mode(mode or ("shared" if self._definition is not None else "owned"))
            if self._definition is not None and mode != "shared":
                raise GroupModeError("a SharedGroup is joined with mode='shared'")
            self._shared = mode == "shared"
            if self._shared and self._group is None:
                raise InvalidArgumentError("mode='shared' needs a group")
            if self._shared and resequence is not None:
                raise InvalidArgumentError("a shared group's member cannot resequence")
            if self._shared and type(window) is int and window < 0:
                window = None  # the group's (or the topic's) default
            start_latest = _start_latest(start, group)
            for name, function in (
                ("filter", filter),
                ("converter", converter),
                ("on_ownership_change", on_ownership_change),
            ):
                if function is not None and not callable(function):
                    raise InvalidTypeError(
                        f"{name} must be callable, got {type(function).__name__}"
                    )
            if window is not None:
                check_positive_int(window, "window")
            if resequence is not None and not isinstance(resequence, Resequence):
                raise InvalidTypeError(
                    f"resequence must be a raytopic.Resequence, got {type(resequence).__name__}"
                )
            if not isinstance(complete_on_empty, bool):
                raise InvalidTypeError("complete_on_empty must be a bool")
            self._timeout = check_timeout(timeout, "timeout", allow_none=False)
            self._id = uuid.uuid4().hex
            self._spec = ReaderSpec(
                self._group,
                start_latest,
                cloudpickle.dumps(filter) if filter is not None else None,
                cloudpickle.dumps(converter) if converter is not None else None,
                complete_on_empty,
                window,
                cloudpickle.dumps(resequence) if resequence is not None else None,
            )
        else:
            self._timeout = _attach["timeout"]
            self._id = _attach["id"]
            self._spec = _attach["spec"]
        self._listener = on_ownership_change
        self._lock = threading.RLock()
        self._view_lock = threading.RLock()  # the membership's view
        self._notifying = threading.RLock()  # listener calls, one at a time
        self._changes: deque[OwnershipChange] = deque()  # to tell the listener, in order
        self._closed = False
        self._on_close: list[Callable[[], None]] = []
        # Receives: the user's go to one channel at a time (see _route), each
        # channel numbering its stream of them; an iteration's have a stream
        # per channel too.
        self._stream_prefix = uuid.uuid4().hex[:12]
        self._user_streams: dict[int, _ChannelReads] = {}
        self._target: int | None = None
        self._in_flight: deque[Any] = deque()  # the user's receives not seen done
        self._home_seed = zlib.crc32(self._id.encode())
        self._turn = self._home_seed  # where the next batch receive goes
        # Iteration: direct receives per channel, or (window, resequence) spread ones.
        self._reads: dict[int, _ChannelReads] = {}
        self._spread: deque[Any] = deque()
        self._buffer: deque[Element] = deque()  # elements an iteration left over
        # Group membership.
        self._membership: Membership | None = None if self._group is None else Membership()
        self._heartbeats: Heartbeats | None = None
        # Per channel, the cursor jump count after the latest seek or reset:
        # what was received before carries a lower count (see _is_stale).
        self._jumps: dict[int, int] = {} if self._membership is None else self._membership.jumps
        self._last_active = time.monotonic()  # last receive, for the heartbeats
        self._outstanding: deque[Any] = deque()  # a member's receives, for the heartbeats
        if _attach is None:
            self._register()
        elif self._group is not None:
            # The same member: learn its view; its heartbeats start on its first
            # receive (a copy handed to a task may never receive).
            self._ask_coordinator(touch=True)

    # -- set-up ----------------------------------------------------------------

    def _register(self) -> None:
        coordinator = self._topic._coordinator
        if self._shared:
            self._ensure_shared_group()
        elif self._group is not None:
            self._call(coordinator.ensure_group.remote(self._group, self._spec.start_latest))
        self._call(coordinator.open_reader.remote(self._id, self._spec))
        if self._group is not None:
            # Synchronous: the assignment is in force when this returns.
            view: MemberView = self._call(
                coordinator.join.remote(self._group, self._id, self._timeout)
            )
            self._apply_view(view)
            self._start_heartbeats()

    def _ensure_shared_group(self) -> None:
        """Join (or create) the shared group: its filter must be this member's, if it
        gives one (the group applies it: not this reader); the window defaults
        to the group's, then the topic's."""
        spec = self._spec
        definition: SharedGroup = self._call(
            self._topic._coordinator.ensure_group.remote(
                self._group, spec.start_latest, "shared", self._definition, spec.filter
            )
        )
        ensure_dead_letter_topic(definition, self._topic.namespace)
        window = spec.window or definition.window or self._topic.config.default_window
        self._spec = dataclasses.replace(spec, filter=None, window=window)

    def __reduce__(self) -> tuple[Any, ...]:
        state = {
            "id": self._id,
            "timeout": self._timeout,
            "spec": self._spec,
            "shared": self._shared,
        }
        return (_attached_subscriber, (self._topic, self._group, state))

    # -- properties ---------------------------------------------------------------

    @property
    def topic(self) -> Topic:
        """The topic."""
        return self._topic

    @property
    def group(self) -> str | None:
        """The group, or None for an anonymous subscriber."""
        return self._group

    @property
    def subscriber_id(self) -> str:
        """This subscriber's id (its member id in a group)."""
        return self._id

    @property
    def channel_count(self) -> int:
        """Channels of the topic (not only the owned ones)."""
        return self._topic.channel_count

    @property
    def channels(self) -> tuple[int, ...]:
        """The channels this subscriber owns now (all, for an anonymous one).

        A member answers from its view (kept fresh by its heartbeats); a
        timed-out member owns nothing until its next receive or heartbeat. A
        member silent for longer than its timeout may have timed out a moment
        ago: that one asks the coordinator (no other read does).
        """
        self._check_open()
        membership = self._membership
        if (
            membership is not None
            and not membership.timed_out
            and time.monotonic() - self._last_active > self._timeout
        ):
            self._ask_coordinator(touch=False)
        return self._owned()

    def is_owner(self, channel: int) -> bool:
        """Whether this subscriber owns ``channel`` now."""
        return channel in self.channels

    @property
    def resequencer_stats(self) -> ResequencerStats | None:
        """With ``resequence``: how many elements were released, skipped as gaps,
        dropped as late, and are held now (by the resequencer in its home
        channel's session); else None."""
        if self._spec.resequence is None:
            return None
        home = self._topic._channel_actors[self._home_channel]
        return self._call(home.resequencer_stats.remote(self._id))

    @property
    def is_active(self) -> bool:
        """False once closed."""
        return not self._closed

    @property
    def _home_channel(self) -> int:
        """The channel a single ``receive()`` goes to: an owned one, fixed by this
        subscriber's id while the view holds. A resequencing subscriber's home
        never moves: its resequencer lives in the home's session."""
        owned = () if self._spec.resequence is not None else self._owned(catch_up=False)
        if not owned:
            return self._home_seed % self.channel_count
        return owned[self._home_seed % len(owned)]

    def _owned(self, *, catch_up: bool = True) -> tuple[int, ...]:
        """The channels owned now; first (``catch_up``) apply view news that came,
        which may call the listener: never with the subscriber's lock held."""
        membership = self._membership
        if membership is None:
            return tuple(range(self.channel_count))
        if catch_up and self._heartbeats is not None:
            self._heartbeats.catch_up()
        return membership.channels

    # -- receiving -----------------------------------------------------------------

    def receive(self) -> Any:
        """Receive one element: ``ObjectRef[Element | None]``.

        The ref completes when an element arrives on any owned channel; with
        ``complete_on_empty`` it completes with None at once when there is
        none; after ``close()`` it completes with None.

        Raises:
            SubscriberClosedError: the subscriber is closed.
        """
        self._check_open()
        leftover = self._reclaim_iteration(1)
        if leftover:
            return ray.put(leftover[0])
        return self._receive(1, single=True)

    def receive_batch(self, max_elements: int) -> Any:
        """Receive up to ``max_elements``: ``ObjectRef[list[Element]]``.

        They come from the channel the receive was sent to while it has data
        (from others when it has none). Fewer does not mean the topic is empty.
        """
        check_positive_int(max_elements, "max_elements")
        self._check_open()
        leftover = self._reclaim_iteration(max_elements)
        if leftover:
            return ray.put(leftover)
        return self._receive(max_elements, single=False)

    def _receive(self, count: int, single: bool, spread: bool = False) -> Any:
        """One receive on the user's stream, at the channel :meth:`_route` picks."""
        self._check_open()
        view = self._before_receive()
        with self._lock:
            spec = self._spec
            stream = self._route(single or spread or bool(spec.window or spec.resequence))
            assert self._target is not None
            ref = self._send_receive(self._target, stream, count, single, spread, False, view)
            self._in_flight.append(ref)
        return ref

    def _send_receive(
        self,
        channel: int,
        stream: _ChannelReads,
        count: int,
        single: bool,
        spread: bool,
        here_only: bool,
        view: tuple[int, dict[int, Lease]] | None,
    ) -> Any:
        """With the lock held: submit the next receive of ``stream`` to ``channel``."""
        number = stream.next_number
        stream.next_number += 1
        packed = pack_request(
            "receive", self._id, stream.stream, number, count, single, spread, here_only, view
        )
        ref = self._topic._channel_actors[channel].request.remote(packed)
        if self._membership is not None:
            self._outstanding.append(ref)  # a waiting receive keeps its member alive
        return ref

    def _route(self, home: bool) -> _ChannelReads:
        """With the lock held: pick the channel for the next user receive
        (``self._target``); return its stream there.

        While an earlier receive is out, the same channel (so receives complete
        in order: one session serves them in turn). Otherwise the home for a
        single receive (or with a window, which one session counts), the next
        owned channel in turn for a batch: bulk reads go where the data is.
        """
        if self._target is not None and self._in_flight:
            pending = list(self._in_flight)
            _, waiting = ray.wait(pending, num_returns=len(pending), timeout=0)
            self._in_flight = deque(waiting)
            if waiting:
                return self._user_streams[self._target]
        if home:
            target = self._home_channel
        else:
            owned = self._owned(catch_up=False) or tuple(range(self.channel_count))
            self._turn += 1
            target = owned[self._turn % len(owned)]
        self._target = target
        return self._stream_at(self._user_streams, target, "u")

    def _stream_at(
        self, streams: dict[int, _ChannelReads], channel: int, kind: str
    ) -> _ChannelReads:
        reads = streams.get(channel)
        if reads is None:
            reads = streams[channel] = _ChannelReads(f"{self._stream_prefix}.{kind}{channel}")
        return reads

    def _before_receive(self) -> tuple[int, dict[int, Lease]] | None:
        """A member's bookkeeping before a receive: record activity (for the
        heartbeats), rejoin if it timed out; return the view the receive carries."""
        membership = self._membership
        if membership is None:
            return None
        self._last_active = time.monotonic()
        if self._heartbeats is None:
            self._start_heartbeats()
        self._rejoin_if_needed()
        return membership.request_view()

    def __iter__(self) -> Iterator[Element]:
        """Iterate element by element, blocking; receives are prefetched in batches.

        Ends when the subscriber closes, or (with ``complete_on_empty``) when
        nothing is left. A StaleSequenceError is raised once and iteration can
        go on.
        """
        return _Iteration(self)

    # -- iteration's receives ---------------------------------------------------------

    def _prefetch_direct(self) -> list[Any]:
        """Keep ITERATION_DEPTH receives in flight at every owned channel (none once
        closed); return the oldest one of each channel, the ones to wait on."""
        owned = self._owned()
        view = self._before_receive()
        share = max(ITERATION_SHARE, ITERATION_BATCH // max(1, len(owned)))
        with self._lock:  # a receive on another thread may reclaim them meanwhile
            for channel in owned:
                reads = self._stream_at(self._reads, channel, "i")
                while not self._closed and not reads.drained and len(reads.refs) < ITERATION_DEPTH:
                    reads.refs.append(
                        self._send_receive(channel, reads, share, False, False, True, view)
                    )
            return [reads.refs[0] for reads in self._reads.values() if reads.refs]

    def _take_direct(self, ref: Any) -> list[Element]:
        """The elements of a direct iteration receive (the oldest of its channel);
        [] if a receive on another thread reclaimed it meanwhile (its elements
        wait in the buffer)."""
        with self._lock:
            for reads in self._reads.values():
                if reads.refs and reads.refs[0] == ref:
                    reads.refs.popleft()
                    break
            else:
                return []
        elements = self._call(ref)
        if not elements and self._spec.complete_on_empty:
            reads.drained = True
        return elements

    def _prefetch_spread(self) -> None:
        """With a window or a resequencer: ITERATION_DEPTH receives through the home's
        session (which counts the window, or holds the resequencer)."""
        while not self._closed and len(self._spread) < ITERATION_DEPTH:
            self._spread.append(self._receive(ITERATION_BATCH, single=False, spread=True))

    def _reclaim_iteration(self, count: int) -> list[Element]:
        """Elements an abandoned iteration prefetched come first, in order.

        Its receives still waiting are told to stop waiting, and what each
        returns is buffered. (Not ``ray.cancel``: a cancel that lands just after
        a receive took its elements drops the reply, and the elements with it.)
        The result is put in the object store by this process, so this process
        owns it.
        """
        pending = self._interrupt_iteration()
        first_error: BaseException | None = None
        for ref in pending:  # read every one: a later batch holds taken elements
            try:
                self._buffer.extend(self._call(ref) or ())
            except SubscriberClosedError:
                pass
            except Exception as error:
                first_error = first_error or error
        if first_error is not None:
            raise first_error
        taken: list[Element] = []
        while self._buffer and len(taken) < count:
            element = self._buffer.popleft()
            if not self._is_stale(element):
                taken.append(element)
        return taken

    def _interrupt_iteration(self) -> list[Any]:
        """Tell every channel with iteration receives out to stop their waits;
        return those receives, oldest first per channel."""
        actors = self._topic._channel_actors
        pending: list[Any] = []
        with self._lock:  # an iteration on another thread may be prefetching
            for channel, reads in self._reads.items():
                if reads.refs:
                    actors[channel].interrupt_receives.remote(
                        self._id, reads.stream, reads.next_number - 1
                    )
                    pending.extend(reads.refs)
                    reads.refs.clear()
        if self._spread:
            with self._lock:
                target = self._target
                assert target is not None
                stream = self._user_streams[target]
            actors[target].interrupt_receives.remote(
                self._id, stream.stream, stream.next_number - 1
            )
            pending.extend(self._spread)
            self._spread.clear()
        return pending

    # -- positions -----------------------------------------------------------------

    def seek(self, channel: int, to: Position | datetime) -> Position:
        """Move an owned channel so the next element received is the first after ``to``.

        ``to`` is a Position of this channel, or a datetime (the first published
        after it). Clamped to the head and tail; returns the Position set.
        Seeking back before the commit rolls the commit back.

        Raises:
            NotOwnerError: the channel is not owned by this subscriber.
            PositionMismatchError: a Position of another topic or channel.
        """
        return self._seek(channel, to, commit=False)

    def seek_and_commit(self, channel: int, to: Position | datetime) -> Position:
        """``seek``, and set the commit to the Position set."""
        return self._seek(channel, to, commit=True)

    def seek_to_head(self, *channels: int) -> dict[int, Position]:
        """Move channels (default: all owned) to their heads; their commits reset too."""
        return {c: self._seek_to(c, -1, commit=False) for c in self._pick(channels)}

    def seek_to_tail(self, *channels: int) -> dict[int, Position]:
        """Move channels (default: all owned) to their tails: only new elements follow."""
        return {c: self._seek_to(c, _TAIL, commit=False) for c in self._pick(channels)}

    def seek_to_tail_and_commit(self, *channels: int) -> dict[int, Position]:
        """``seek_to_tail`` and commit there."""
        return {c: self._seek_to(c, _TAIL, commit=True) for c in self._pick(channels)}

    def _seek(self, channel: int, to: Position | datetime, commit: bool) -> Position:
        self._check_open()
        channel = self._topic._check_channel(channel)
        if isinstance(to, Position):
            to.check_belongs(self._topic.topic_id, channel)
            return self._seek_to(channel, to.sequence, commit)
        if isinstance(to, datetime):
            return self._seek_to(channel, to.timestamp(), commit, by_time=True)
        raise InvalidTypeError(f"to must be a Position or a datetime, got {type(to).__name__}")

    def _seek_to(
        self, channel: int, target: int | float, commit: bool, by_time: bool = False
    ) -> Position:
        self._refuse_shared("seek")
        fence = self._fence(channel, required=True)
        actors = self._topic._channel_actors
        with self._lock:
            at = self._target
            stream = None if at is None else self._user_streams[at]
        if stream is not None and stream.next_number:
            # Receives sent before the seek complete before it takes effect
            # (unless they wait for data: those see the new position).
            self._call(
                actors[at].settle_receives.remote(self._id, stream.stream, stream.next_number - 1)
            )
        try:
            position, jumps = self._call(
                actors[channel].seek.remote(self._id, fence, target, by_time, commit)
            )
        finally:
            if stream is not None and stream.next_number:
                actors[at].resume_receives.remote(self._id)
        with self._lock:
            # What an iteration prefetched before the seek carries a lower jump
            # count and is dropped (see _is_stale).
            self._jumps[channel] = max(jumps, self._jumps.get(channel, 0))
        return self._topic.position(channel, position)

    def _pick(self, channels: tuple[int, ...]) -> list[int]:
        self._check_open()
        if not channels:
            return list(self.channels)
        return [self._topic._check_channel(channel) for channel in channels]

    def heads(self) -> dict[int, Position]:
        """Per owned channel, the position this subscriber reads next."""
        return {c: self._topic.position(c, s.next) for c, s in self._states().items()}

    def tails(self) -> dict[int, Position]:
        """Per owned channel, the last element's position (before the first if none)."""
        return {c: self._topic.position(c, s.tail) for c, s in self._states().items()}

    def last_committed(self) -> dict[int, Position]:
        """Per owned channel that has a commit, the last committed position."""
        return {
            c: self._topic.position(c, s.committed)
            for c, s in self._states().items()
            if s.has_commit
        }

    def remaining_messages(self, channel: int | None = None) -> int:
        """Elements from the read position to the tail (before filters), over owned
        channels or one channel (0 if not owned)."""
        states = self._states()
        if channel is not None:
            channel = self._topic._check_channel(channel)
            states = {channel: states[channel]} if channel in states else {}
        return sum(max(0, s.tail - s.next + 1) for s in states.values())

    def _states(self) -> dict[int, CursorState]:
        """The cursor of every owned channel, read at the channels (one call each)."""
        self._check_open()
        actors = self._topic._channel_actors
        owned = self._owned()
        refs = [actors[c].cursor_state.remote(self._id, self._fence(c)) for c in owned]
        states = {}
        for channel, ref in zip(owned, refs, strict=True):
            try:
                states[channel] = self._call(ref)
            except NotOwnerError:
                continue  # lost it a moment ago
        return states

    # -- committing ------------------------------------------------------------------

    def commit(self, channel: int, position: Position) -> CommitResult:
        """Commit ``position`` and every earlier one of ``channel``.

        Never raises for ownership: the status says NOT_OWNER, ALREADY_COMMITTED,
        REJECTED or COMMITTED.

        Raises:
            PositionMismatchError: a Position of another topic or channel.
        """
        return self._call(self.commit_async(channel, position))

    def commit_async(self, channel: int, position: Position) -> Any:
        """``commit`` without waiting: ``ObjectRef[CommitResult]``."""
        self._check_open()
        self._refuse_shared("commit")
        channel = self._topic._check_channel(channel)
        if not isinstance(position, Position):
            raise InvalidTypeError(f"position must be a Position, got {type(position).__name__}")
        position.check_belongs(self._topic.topic_id, channel)
        actor = self._topic._channel_actors[channel]
        fence = self._fence(channel, refresh=True)
        return actor.commit.remote(self._id, position.sequence, fence)

    # -- acknowledging (shared groups) -------------------------------------------------

    @property
    def mode(self) -> str:
        """ "shared" for a shared group's member, else "owned" (anonymous too)."""
        return "shared" if self._shared else "owned"

    def ack(self, elements: Iterable[Element]) -> list[AckStatus]:
        """Acknowledge elements this member received in its shared group, in one call
        per channel; returns each one's status (REJECTED: no longer held by this
        member under that delivery, so nothing changed for it).

        Raises:
            ForeignElementError: an element this subscriber did not receive in its
                shared group (nothing is acknowledged).
        """
        return self._call(self.ack_async(elements))

    def ack_async(self, elements: Iterable[Element]) -> Any:
        """``ack`` without waiting: ``ObjectRef[list[AckStatus]]``."""
        return send_many(self._own(elements), "ack")

    def nack(self, elements: Iterable[Element], delay: float | None = None) -> list[AckStatus]:
        """Give elements back to the group, to be delivered again (to any member),
        after ``delay`` seconds if given; past the group's ``max_deliveries``
        they go to its dead-letter topic.

        Raises:
            InvalidArgumentError: a negative delay.
            ForeignElementError: as ``ack``.
        """
        return self._call(self.nack_async(elements, delay))

    def nack_async(self, elements: Iterable[Element], delay: float | None = None) -> Any:
        """``nack`` without waiting: ``ObjectRef[list[AckStatus]]``."""
        return send_many(self._own(elements), "nack", check_delay(delay))

    def extend_lease(
        self, elements: Iterable[Element], seconds: float | None = None
    ) -> list[AckStatus]:
        """Keep holding elements: their ack leases end ``seconds`` from now (default:
        the group's ``ack_timeout``). EXTENDED, or REJECTED for one no longer held."""
        return self._call(send_many(self._own(elements), "extend_lease", check_lease(seconds)))

    def _own(self, elements: Iterable[Element]) -> list[Element]:
        self._check_open()
        if not self._shared:
            raise GroupModeError("only a shared group's members acknowledge elements: commit")
        return check_own(elements, self._id, self._topic.topic_id)

    def _refuse_shared(self, what: str) -> None:
        if self._shared:
            raise GroupModeError(
                f"a shared group's member acknowledges elements (ack, nack) and cannot {what}"
            )

    # -- membership ----------------------------------------------------------------

    def heartbeat(self) -> None:
        """Tell the group this member is alive (a no-op for anonymous subscribers).

        A member that timed out rejoins here, with a new generation.
        """
        self._check_open()
        if self._membership is not None:
            self._last_active = time.monotonic()
            self._ask_coordinator(touch=True)
            self._rejoin_if_needed()

    def _fence(
        self, channel: int, *, required: bool = False, refresh: bool = False
    ) -> Lease | None:
        """This member's lease on ``channel``; not known here: ask the coordinator
        (a channel may be ours before the heartbeats have told us)."""
        membership = self._membership
        if membership is None:
            return None
        self._owned()  # applies news that has arrived
        lease = membership.leases.get(channel)
        if lease is None and (required or refresh):
            self._ask_coordinator(touch=False)
            lease = membership.leases.get(channel)
            if lease is None and required:
                raise NotOwnerError(f"channel {channel} is not owned by this subscriber")
        return lease

    def _ask_coordinator(self, touch: bool) -> None:
        """Read this member's view at the coordinator now (and report it alive)."""
        assert self._membership is not None and self._group is not None
        coordinator = self._topic._coordinator
        try:
            view = self._call(
                coordinator.heartbeat.remote(self._group, self._id, self._membership.version, touch)
            )
        except GroupNotFoundError as error:
            raise SubscriberClosedError(f"group {self._group!r} was destroyed") from error
        self._apply_view(view)

    def _rejoin_if_needed(self) -> None:
        """Join again after a timeout (a new generation; it resumes after the commits)."""
        membership = self._membership
        assert membership is not None and self._group is not None
        self._owned()  # applies news that has arrived
        if not membership.timed_out:
            return
        coordinator = self._topic._coordinator
        with self._lock:
            if not membership.timed_out:
                return
            try:
                view = self._call(coordinator.join.remote(self._group, self._id, self._timeout))
            except GroupNotFoundError as error:
                raise SubscriberClosedError(f"group {self._group!r} was destroyed") from error
            self._adopt_view(view, rejoined=True)
        self._tell_listener()

    def _apply_view(self, view: MemberView | None, *, rejoined: bool = False) -> None:
        """Adopt a view from the coordinator (None: this member timed out), and tell
        the listener."""
        self._adopt_view(view, rejoined=rejoined)
        self._tell_listener()

    def _adopt_view(self, view: MemberView | None, *, rejoined: bool = False) -> None:
        """Adopt a view; queue the change for the listener.

        Under its own lock, never the subscriber's: the heartbeat thread adopts
        while a receive (holding the subscriber's lock) may wait to read the view.
        """
        membership = self._membership
        assert membership is not None
        with self._view_lock:
            if self._closed:
                return  # a poll answered after close() (it left): nothing to tell
            change = (
                membership.lose() if view is None else membership.apply(view, rejoined=rejoined)
            )
            if change is not None:
                self._changes.append(change)

    def _tell_listener(self) -> None:
        """Tell the listener the queued changes, one at a time, in order, holding no
        lock of the subscriber's (it may call this subscriber, or wait on a thread
        that does)."""
        with self._notifying:
            while self._changes:
                self._notify(self._changes.popleft())

    def _notify(self, change: OwnershipChange) -> None:
        if self._listener is None:
            return
        try:
            self._listener(change)
        except Exception:
            logger.exception("on_ownership_change listener failed")

    def _is_stale(self, element: Element) -> bool:
        return element._origin.jumps < self._jumps.get(element.channel, 0)

    def _start_heartbeats(self) -> None:
        membership = self._membership
        assert membership is not None and self._group is not None
        coordinator, group, member = self._topic._coordinator, self._group, self._id

        def poll(version: int, touch: bool, idle: float, wait: float) -> Any:
            return coordinator.heartbeat.remote(group, member, version, touch, idle, wait)

        # Weak: a subscriber dropped without close() (a copy a task was handed)
        # ends its thread instead of being kept alive by it.
        activity = weakref.WeakMethod(self._activity)
        adopt, tell = weakref.WeakMethod(self._adopt_view), weakref.WeakMethod(self._tell_listener)
        self._heartbeats = Heartbeats(
            name=f"raytopic-heartbeat-{self._id[:8]}",
            interval=max(0.05, self._timeout / 4),
            poll=poll,
            activity=lambda: _call_if_alive(activity),
            timeout=self._timeout,
            apply=lambda view: _call_if_alive(adopt, view),
            notify=lambda: _call_if_alive(tell),
            version=lambda: membership.version,
            timed_out=lambda: membership.timed_out,
        )
        self._heartbeats.start()

    def _activity(self) -> tuple[float, bool] | None:
        """(time of the last receive, whether a receive waits for data now); None
        when Ray is down in this process."""
        pending = list(self._outstanding)
        if not pending:
            return self._last_active, False
        try:
            ready, waiting = ray.wait(pending, num_returns=len(pending), timeout=0)
        except Exception as error:
            if not ray.is_initialized():
                return None
            logger.warning("heartbeat: could not check waiting receives: %s", error)
            return self._last_active, False
        for ref in ready:
            with contextlib.suppress(ValueError):
                self._outstanding.remove(ref)
        return self._last_active, bool(waiting)

    # -- closing -------------------------------------------------------------------

    def on_close(self, action: Callable[[], None]) -> None:
        """Run ``action`` when this subscriber closes."""
        if not callable(action):
            raise InvalidTypeError("on_close needs a callable")
        self._on_close.append(action)

    def close(self) -> None:
        """Leave the group (if any), end the sessions, complete waiting receives with
        None. Idempotent; every on_close action runs even if one raises."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._heartbeats is not None:
            self._heartbeats.stop()
        coordinator = self._topic._coordinator
        try:
            if self._group is not None:
                self._call(coordinator.leave.remote(self._group, self._id))
            self._call(coordinator.close_reader.remote(self._id))
        except Exception as error:
            logger.warning("closing subscriber %s: %s", self._id, error)
        for action in self._on_close:
            try:
                action()
            except Exception:
                logger.exception("on_close action failed")

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = f"group={self._group!r}" if self._group else "anonymous"
        state = "closed" if self._closed else "active"
        return f"Subscriber({self._topic.name!r}, {kind}, {state})"

    # -- helpers ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SubscriberClosedError("the subscriber is closed")

    @staticmethod
    def _call(ref: Any) -> Any:
        with unwrap_ray_error():
            return ray.get(ref)


class _Iteration:
    """Blocking iteration: receives in flight at every owned channel at once."""

    def __init__(self, subscriber: Subscriber) -> None:
        self._subscriber = subscriber
        for reads in subscriber._reads.values():
            reads.drained = False  # a new iteration looks again

    def __iter__(self) -> _Iteration:
        return self

    def __next__(self) -> Element:
        subscriber = self._subscriber
        buffer, jumps = subscriber._buffer, subscriber._jumps
        while True:
            while buffer:
                element = buffer.popleft()
                if not jumps or element._origin.jumps >= jumps.get(element.channel, 0):
                    return element
            elements = self._next_batch()
            if elements is None:
                raise StopIteration
            buffer.extend(elements)

    def _next_batch(self) -> list[Element] | None:
        """The next received batch (maybe empty); None when the iteration ends."""
        subscriber = self._subscriber
        if subscriber._spec.window is not None or subscriber._spec.resequence is not None:
            return self._next_spread_batch()
        if subscriber._closed:
            pending = subscriber._interrupt_iteration()
            return self._drain(pending)
        heads = subscriber._prefetch_direct()
        if not heads:
            if subscriber._spec.complete_on_empty:
                return None  # every owned channel said "empty" (or none is owned)
            time.sleep(0.05)  # owns nothing: wait for an assignment
            return []
        ready, _ = ray.wait(heads, num_returns=1, timeout=_ITERATION_LOOK)
        if not ready:
            return []  # look at the view again
        try:
            return subscriber._take_direct(ready[0])
        except SubscriberClosedError:
            return None

    def _next_spread_batch(self) -> list[Element] | None:
        subscriber = self._subscriber
        refs = subscriber._spread
        if subscriber._closed and not refs:
            return None
        subscriber._prefetch_spread()
        try:
            elements = subscriber._call(refs.popleft())
        except SubscriberClosedError:
            return None
        if not elements and (subscriber._closed or subscriber._spec.complete_on_empty):
            return None
        return elements

    def _drain(self, pending: list[Any]) -> list[Element] | None:
        """After close: what the interrupted receives still bring, then the end."""
        elements: list[Element] = []
        for ref in pending:
            with contextlib.suppress(SubscriberClosedError):
                elements.extend(self._subscriber._call(ref) or ())
        return elements or None


def _call_if_alive(method: weakref.WeakMethod[Any], *args: Any) -> Any:
    """Call a weakly held method; None when its subscriber is gone."""
    bound = method()
    return None if bound is None else bound(*args)


def _start_latest(start: str | None, group: str | None) -> bool:
    if start is None:
        return group is None  # anonymous: new messages; a new group: from the head
    return Start.parse(start) is Start.LATEST


def _attached_subscriber(topic: Topic, group: str | None, state: dict[str, Any]) -> Subscriber:
    return Subscriber(topic, group=group, _attach=state)
