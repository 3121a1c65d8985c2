"""Subscriber: the read side of a topic, anonymous or a member of a group.

A subscriber registers itself as a *reader* on every channel (its filter and
converter run there; an anonymous subscriber's cursor lives there) and opens
a receive *session* at one channel actor, its home (see
``raytopic.actors.receive_session``). ``receive()`` is one actor call to the home,
submitted from this process, so the returned ObjectRef belongs to this
process and survives the channel actor.

A group member also joins the group at the topic's coordinator, which
assigns it channels (with leases the channels check on every take and
commit) and hears its heartbeats.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import cloudpickle
import ray

from raytopic.actors.cursors import Lease
from raytopic.actors.receive_session import CursorState, SessionSpec
from raytopic.actors.wire import ReaderSpec, pack_request
from raytopic.config import Start, check_name, check_positive_int, check_timeout
from raytopic.coordinator import notices
from raytopic.errors import (
    GroupNotFoundError,
    InvalidTypeError,
    NotOwnerError,
    StaleSequenceError,
    SubscriberClosedError,
    unwrap_ray_error,
)
from raytopic.records import CommitResult, Element, OwnershipChange, Position
from raytopic.resequencing import ResequencedElements

if TYPE_CHECKING:
    from raytopic.coordinator.groups import MemberView
    from raytopic.resequencer import Resequence, ResequencerStats
    from raytopic.topic import Topic

logger = logging.getLogger(__name__)

__all__ = ["Subscriber"]

_CHECK_INTERVAL = 0.005
"""Seconds a group member trusts its view before a receive checks its group's version."""

_TAIL = 1 << 62
"""A sequence past any tail: seeking there clamps to the tail."""

ITERATION_BATCH = 4000
"""Elements one prefetching receive asks for while iterating."""

ITERATION_DEPTH = 2
"""Receives kept in flight while iterating."""


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

    A Subscriber pickles: the copy in another process is the same subscriber
    (same cursor or membership, receiving in its own order); closing any
    copy closes it.
    """

    def __init__(
        self,
        topic: Topic,
        *,
        group: str | None = None,
        start: str | None = None,
        filter: Callable[[Any], bool] | None = None,
        converter: Callable[[Any], Any] | None = None,
        complete_on_empty: bool = False,
        window: int | None = None,
        timeout: float = 30.0,
        on_ownership_change: Callable[[OwnershipChange], None] | None = None,
        resequence: Resequence | None = None,
        _attach: dict[str, Any] | None = None,
    ) -> None:
        self._topic = topic
        self._group = None if group is None else check_name(group, "group")
        if _attach is None:
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
            if not isinstance(complete_on_empty, bool):
                raise InvalidTypeError("complete_on_empty must be a bool")
            self._timeout = check_timeout(timeout, "timeout", allow_none=False)
            self._id = uuid.uuid4().hex
            self._spec = ReaderSpec(
                self._group,
                start_latest,
                cloudpickle.dumps(filter) if filter is not None else None,
                cloudpickle.dumps(converter) if converter is not None else None,
            )
            self._session_spec = SessionSpec(self._id, complete_on_empty, window)
        else:
            self._timeout = _attach["timeout"]
            self._id = _attach["id"]
            self._spec = _attach["spec"]
            self._session_spec = _attach["session_spec"]
        self._listener = on_ownership_change
        self._resequence = resequence
        self._resequenced = (
            None if resequence is None else ResequencedElements(resequence, self._id[:8])
        )
        self._stream = uuid.uuid4().hex[:12]  # this handle's numbering of receives
        self._lock = threading.RLock()
        self._next_request = 0
        self._closed = False
        self._on_close: list[Callable[[], None]] = []
        self._jumps: dict[int, int] = {}
        self._leases: dict[int, Lease] = {}
        self._view_version = -1
        self._generation = 0
        self._last_check = 0.0
        self._last_active = time.monotonic()  # last receive, for the heartbeat thread
        self._reported_active = self._last_active
        self._outstanding: deque[Any] = deque()
        self._heartbeats: threading.Thread | None = None
        self._stop_heartbeats = threading.Event()
        self._prefetched: deque[Any] = deque()  # receive refs an iteration left over
        self._buffer: deque[Element] = deque()  # elements an iteration left over
        channels = topic._channel_actors
        if _attach is None:
            self._register(channels)
        else:
            self._home_channel = _attach["home"]
            self._home = channels[self._home_channel]
            if self._group is not None:
                self._sync(force=True)

    # -- set-up ----------------------------------------------------------------

    def _register(self, channels: tuple[Any, ...]) -> None:
        coordinator = self._topic._coordinator
        if self._group is not None:
            self._call(coordinator.ensure_group.remote(self._group, self._spec.start_latest))
        self._call_all(actor.open_reader.remote(self._id, self._spec) for actor in channels)
        if self._group is None:
            self._home_channel = zlib.crc32(self._id.encode()) % len(channels)
            self._home = channels[self._home_channel]
            self._call(
                self._home.open_session.remote(
                    self._session_spec, dict.fromkeys(range(len(channels)))
                )
            )
            return
        # Join first (synchronous: the assignment is in force when it returns),
        # then host the session at a channel the member owns, if it owns any.
        view: MemberView = self._call(
            coordinator.join.remote(self._group, self._id, self._timeout, -1)
        )
        owned = sorted(view.leases)
        self._home_channel = owned[0] if owned else zlib.crc32(self._id.encode()) % len(channels)
        self._home = channels[self._home_channel]
        self._call(self._home.open_session.remote(self._session_spec, dict(view.leases)))
        self._call(coordinator.set_home.remote(self._group, self._id, self._home_channel))
        self._apply_view(view, rejoined=False)
        self._start_heartbeats()

    def __reduce__(self) -> tuple[Any, ...]:
        state = {
            "id": self._id,
            "timeout": self._timeout,
            "spec": self._spec,
            "session_spec": self._session_spec,
            "home": self._home_channel,
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
        """The channels this subscriber owns now (all, for an anonymous one)."""
        self._check_open()
        if self._group is None:
            return tuple(range(self.channel_count))
        # Learn the current view, but do not rejoin: a timed-out member owns
        # nothing until its next receive or heartbeat.
        self._sync(force=True, rejoin=False)
        return tuple(sorted(self._leases))

    def is_owner(self, channel: int) -> bool:
        """Whether this subscriber owns ``channel`` now."""
        return channel in self.channels

    @property
    def resequencer_stats(self) -> ResequencerStats | None:
        """With ``resequence``: how many elements were released, skipped as gaps,
        dropped as late, and are held now; else None."""
        return None if self._resequenced is None else self._resequenced.stats

    @property
    def is_active(self) -> bool:
        """False once closed."""
        return not self._closed

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
        if self._resequenced is not None:
            released = self._pull_resequenced(1)
            return ray.put(released[0] if released else None)
        leftover = self._reclaim_iteration(1)
        if leftover:
            return ray.put(leftover[0])
        return self._receive(1, single=True)

    def receive_batch(self, max_elements: int) -> Any:
        """Receive up to ``max_elements`` from one channel: ``ObjectRef[list[Element]]``.

        Fewer does not mean the topic is empty.
        """
        check_positive_int(max_elements, "max_elements")
        self._check_open()
        if self._resequenced is not None:
            return ray.put(self._pull_resequenced(max_elements))
        leftover = self._reclaim_iteration(max_elements)
        if leftover:
            return ray.put(leftover)
        return self._receive(max_elements, single=False)

    def _reclaim_iteration(self, count: int) -> list[Element]:
        """Elements an abandoned iteration prefetched come first, in order.

        Its receives still waiting are told to stop waiting, and what each
        returns is buffered. (Not ``ray.cancel``: a cancel that lands just after
        a receive took its elements drops the reply, and the elements with it.)
        The result is put in the object store by this process, so this process
        owns it.
        """
        if self._prefetched:
            pending = list(self._prefetched)
            self._prefetched.clear()
            with self._lock:
                last = self._next_request - 1  # the iteration's receives are the latest
            self._home.interrupt_receives.remote(self._id, self._stream, last)
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

    def _pull_resequenced(self, count: int) -> list[Element]:
        """With ``resequence``: wait until the resequencer releases elements.

        Returns [] once closed, or (with ``complete_on_empty``) when the owned
        channels are empty and the resequencer holds nothing. The receives are
        submitted here, so ``receive()`` of a resequencing subscriber waits
        and returns a ref to what was released (put by this process).
        """
        released, refs = self._resequenced, self._prefetched
        assert released is not None
        while True:
            taken = released.take(count)
            if taken or self._closed:
                return taken
            self._prefetch()
            ready, _ = ray.wait([refs[0]], timeout=released.poll_interval)
            if not ready:
                taken = released.take(count, wait=released.poll_interval)
                if taken:
                    return taken
                continue
            try:
                elements = self._call(refs.popleft())
            except SubscriberClosedError:
                return []
            if elements:
                released.feed(e for e in elements if not self._is_stale(e))
            elif self._session_spec.complete_on_empty:
                if not released.held:
                    return released.take(count)
                taken = released.take(count, wait=released.poll_interval)
                if taken:
                    return taken

    def _prefetch(self) -> None:
        """Keep ITERATION_DEPTH batch receives in flight (none once closed)."""
        while not self._closed and len(self._prefetched) < ITERATION_DEPTH:
            self._prefetched.append(self._receive(ITERATION_BATCH, single=False, spread=True))

    def _receive(self, count: int, single: bool, spread: bool = False) -> Any:
        self._check_open()
        if self._group is not None:
            # Heartbeat first: a timed-out member rejoins before its receive
            # reaches its session, which would otherwise find no channels.
            self._sync(force=False)
        with self._lock:
            number = self._next_request
            self._next_request += 1
        ref = self._home.request.remote(
            pack_request("receive", self._id, self._stream, number, count, single, spread)
        )
        if self._group is not None:
            self._outstanding.append(ref)
        return ref

    def __iter__(self) -> Iterator[Element]:
        """Iterate element by element, blocking; receives are prefetched in batches.

        Ends when the subscriber closes, or (with ``complete_on_empty``) when
        nothing is left. A StaleSequenceError is raised once and iteration can
        go on.
        """
        return _Iteration(self)

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
        fence = self._fence(channel, required=True)
        actor = self._topic._channel_actors[channel]
        with self._lock:
            last = self._next_request - 1
        if last >= 0:
            # Receives sent before the seek complete before it takes effect
            # (unless they wait for data: those see the new position).
            self._call(self._home.settle_receives.remote(self._id, self._stream, last))
        sequence, jumps = self._call(actor.seek.remote(self._id, fence, target, by_time, commit))
        with self._lock:
            # What an iteration prefetched before the seek carries an older
            # jump count and is dropped (see _is_stale).
            self._jumps[channel] = max(jumps, self._jumps.get(channel, 0))
        return self._topic.position(channel, sequence)

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
        self._check_open()
        actors = self._topic._channel_actors
        owned = self.channels
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
        channel = self._topic._check_channel(channel)
        if not isinstance(position, Position):
            raise InvalidTypeError(f"position must be a Position, got {type(position).__name__}")
        position.check_belongs(self._topic.topic_id, channel)
        actor = self._topic._channel_actors[channel]
        fence = self._fence(channel, refresh=True)
        return actor.commit.remote(self._id, position.sequence, fence)

    # -- membership ----------------------------------------------------------------

    def heartbeat(self) -> None:
        """Tell the group this member is alive (a no-op for anonymous subscribers)."""
        self._check_open()
        if self._group is not None:
            self._sync(force=True)

    def _fence(
        self, channel: int, *, required: bool = False, refresh: bool = False
    ) -> Lease | None:
        """This member's lease on ``channel``; not known here: ask the coordinator
        (the session may already read a channel the handle has not heard of)."""
        if self._group is None:
            return None
        lease = self._leases.get(channel)
        if lease is None and (required or refresh):
            self._sync(force=True, rejoin=False)
            lease = self._leases.get(channel)
            if lease is None and required:
                raise NotOwnerError(f"channel {channel} is not owned by this subscriber")
        return lease

    def _sync(self, *, force: bool, rejoin: bool = True) -> None:
        """Learn the current view; with ``force``, also heartbeat.

        Unforced (every receive): records activity for the heartbeat thread
        and reads the group's published version (see coordinator.notices);
        only when it moved does it ask the coordinator. With ``rejoin=False``
        it only reads the view: no heartbeat, and a timed-out member learns it
        lost its channels but does not rejoin.
        """
        if self._closed or self._group is None:
            return
        now = time.monotonic()
        if not force:
            self._last_active = now
            if now - self._last_check < _CHECK_INTERVAL:
                return
            self._last_check = now
            try:
                version = notices.read_version(self._topic.namespace, self._topic.name, self._group)
            except Exception:
                version = None
            if version is not None and version == self._view_version:
                return
        self._call_coordinator(rejoin, idle=0.0)

    def _call_coordinator(self, rejoin: bool, idle: float) -> None:
        """Heartbeat (unless ``rejoin`` is False) and apply the view it returns."""
        coordinator = self._topic._coordinator
        with self._lock:
            try:
                view = self._call(
                    coordinator.heartbeat.remote(
                        self._group, self._id, self._view_version, rejoin, idle
                    )
                )
            except GroupNotFoundError as error:
                raise SubscriberClosedError(f"group {self._group!r} was destroyed") from error
            if view is None:
                # Timed out: the channels are gone; rejoin with a new generation.
                self._apply_lost()
                if not rejoin:
                    return
                view = self._call(
                    coordinator.join.remote(
                        self._group, self._id, self._timeout, self._home_channel
                    )
                )
                self._apply_view(view, rejoined=True)
            elif view.version != self._view_version:
                self._apply_view(view, rejoined=False)

    def _apply_lost(self) -> None:
        lost = frozenset(self._leases)
        if not lost:
            return  # told already (or it owned nothing)
        self._leases = {}
        self._notify(OwnershipChange(frozenset(), frozenset(), lost, frozenset()))

    def _apply_view(self, view: MemberView, *, rejoined: bool) -> None:
        with self._lock:
            first = self._view_version < 0
            old = set(self._leases)
            new = set(view.leases)
            self._leases = dict(view.leases)
            self._view_version = view.version
            self._generation = view.generation
            for channel, jumps in view.jumps.items():
                if jumps > self._jumps.get(channel, 0):
                    self._jumps[channel] = jumps
            if rejoined or not first:
                # Tell the home at once, so a waiting receive reads the new channels.
                self._home.update_session.remote(self._id, view.version, dict(view.leases))
        if first or old != new:
            self._notify(
                OwnershipChange(
                    frozenset(new - old),
                    frozenset(old - new),
                    frozenset(),
                    frozenset(new),
                )
            )

    def _notify(self, change: OwnershipChange) -> None:
        if self._listener is None:
            return
        if not (change.assigned or change.revoked or change.lost) and change.channels:
            return
        try:
            self._listener(change)
        except Exception:
            logger.exception("on_ownership_change listener failed")

    def _is_stale(self, element: Element) -> bool:
        return element._origin.jumps < self._jumps.get(element.channel, 0)

    def _start_heartbeats(self) -> None:
        self._heartbeats = threading.Thread(
            target=self._heartbeat_while_waiting,
            name=f"raytopic-heartbeat-{self._id[:8]}",
            daemon=True,
        )
        self._heartbeats.start()

    def _heartbeat_while_waiting(self) -> None:
        """Background: a member is alive while it receives (the last receive is
        reported with how long ago it was) and while one of its receives waits."""
        interval = max(0.05, self._timeout / 4)
        while not self._stop_heartbeats.wait(interval):
            waiting = self._receives_waiting()
            if waiting is None:
                return  # Ray was shut down in this process: nothing to keep alive
            active = self._last_active
            if not waiting and active == self._reported_active:
                continue  # nothing happened since the last report: let it time out
            self._reported_active = active
            idle = 0.0 if waiting else time.monotonic() - active
            if idle >= self._timeout:
                continue  # it did time out: its next receive rejoins, not this thread
            try:
                self._call_coordinator(rejoin=True, idle=idle)
            except Exception as error:
                logger.warning("heartbeat failed: %s", error)

    def _receives_waiting(self) -> bool | None:
        """Whether a receive of this member waits for data (None: Ray is down)."""
        pending = list(self._outstanding)
        if not pending:
            return False
        try:
            ready, waiting = ray.wait(pending, num_returns=len(pending), timeout=0)
        except Exception as error:
            if not ray.is_initialized():
                return None
            logger.warning("heartbeat: could not check waiting receives: %s", error)
            return False
        for ref in ready:
            with contextlib.suppress(ValueError):
                self._outstanding.remove(ref)
        return bool(waiting)

    # -- closing -------------------------------------------------------------------

    def on_close(self, action: Callable[[], None]) -> None:
        """Run ``action`` when this subscriber closes."""
        if not callable(action):
            raise InvalidTypeError("on_close needs a callable")
        self._on_close.append(action)

    def close(self) -> None:
        """Leave the group (if any), end the session, complete waiting receives with
        None. Idempotent; every on_close action runs even if one raises."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop_heartbeats.set()
        if self._resequenced is not None:
            self._resequenced.close()
        actors = self._topic._channel_actors
        try:
            if self._group is not None:
                self._call(self._topic._coordinator.leave.remote(self._group, self._id))
            self._call_all(actor.close_reader.remote(self._id) for actor in actors)
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

    @staticmethod
    def _call_all(refs: Any) -> list[Any]:
        with unwrap_ray_error():
            return ray.get(list(refs))


class _Iteration:
    """Blocking iteration with a few batch receives in flight."""

    def __init__(self, subscriber: Subscriber) -> None:
        self._subscriber = subscriber

    def __iter__(self) -> _Iteration:
        return self

    def __next__(self) -> Element:
        subscriber = self._subscriber
        buffer, refs = subscriber._buffer, subscriber._prefetched
        if subscriber._resequenced is not None:
            if not buffer:
                buffer.extend(subscriber._pull_resequenced(ITERATION_BATCH))
            if not buffer:
                raise StopIteration
            return buffer.popleft()
        # A group member learns of resets here too (rate-limited), so what it
        # prefetched before a reset is dropped instead of handed out.
        subscriber._sync(force=False)
        while True:
            while buffer:
                element = buffer.popleft()
                if not subscriber._is_stale(element):
                    return element
            if subscriber._closed and not refs:
                raise StopIteration
            subscriber._prefetch()
            ref = refs.popleft()
            try:
                elements = subscriber._call(ref)
            except SubscriberClosedError:
                raise StopIteration from None
            except StaleSequenceError:
                raise
            if not elements:
                if subscriber._closed or subscriber._session_spec.complete_on_empty:
                    raise StopIteration
                continue
            buffer.extend(elements)


def _start_latest(start: str | None, group: str | None) -> bool:
    if start is None:
        return group is None  # anonymous: new messages; a new group: from the head
    return Start.parse(start) is Start.LATEST


def _attached_subscriber(topic: Topic, group: str | None, state: dict[str, Any]) -> Subscriber:
    return Subscriber(topic, group=group, _attach=state)
