"""A subscriber's receives: the channel each one goes to, and iteration's flow of them.

Reading goes straight to the channels:

- ``receive_batch()`` and ``receive()`` are ONE actor call each, submitted
  from this process (so the ObjectRef belongs to this process and survives
  the channel actor), to the channel :class:`ChannelChoice` picks: its *host*,
  or for a batch that completes at once when there is nothing (complete on
  empty) the next owned channel in turn. That channel's receive session takes
  from its own channel in-process, and only when that one is empty from the
  others (see ``raytopic.actors.receive_session``); receives sent while
  earlier ones are still out go to the same channel, so they complete in order.
  What a session took at a sibling and never handed over (its host died with
  the reply) is read again by the session that replaces it before it answers
  the retried receive: the next batch in turn, sent after that answer, reads
  that sibling after the commit.
  A receive that may wait reads the other channels through fetches whose
  offers its session confirms later: it goes to the host, the one session
  that reads them for it.
- Iteration keeps a few receives in flight at EVERY owned channel at once,
  each scoped to its channel: no element is relayed through another actor.
  Before it begins, and before its next batch once the user sent a receive
  meanwhile, the host's session is paused, so the reader's read position at
  every channel stands where that session read on. With a window
  or a resequencer it goes through the host's session instead, which counts
  the window or holds the resequencer.

A seek or a group reset bumps a channel's cursor *jump count*; elements read
before it (in a buffer, or in a receive that was in flight) carry a lower
count and are dropped, as are those read under a lease the member lost (a
rebalance moved the channel away): :class:`StaleReads` keeps both.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
import weakref
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol

import ray

from raytopic.client.receives_out import ReceivesOut, SentReceive
from raytopic.core.commit_guards import Floors, guard_commits
from raytopic.core.destroyed import check_topic, topic_calls
from raytopic.core.element_batch import ElementBatch
from raytopic.core.errors import ReceivePassedOverError, SubscriberClosedError, TopicError
from raytopic.core.protocol import (
    Commit,
    CommitThenReceive,
    InterruptReceives,
    PauseReceives,
    ReaderSpec,
    ReadHandOverMark,
    Receive,
    ResumeReceives,
    pack_request,
)
from raytopic.core.protocol.replies import wait_for_poison_reports

if TYPE_CHECKING:
    from raytopic.client.topic import Topic
    from raytopic.core.protocol import Lease
    from raytopic.core.records import Element

__all__ = ["ChannelChoice", "Ownership", "Receives", "StaleReads"]

ITERATION_BATCH = 4000
"""Elements an iteration asks for per round, over all the channels it reads."""

ITERATION_SHARE = 1000
"""Fewest elements one iteration receive asks of one channel."""

ITERATION_DEPTH = 2
"""Receives an iteration keeps in flight per channel."""

_ITERATION_LOOK = 1.0
"""Seconds an iteration waits for data before it looks at its view again."""

_OWNER_WAIT = 0.05
"""Seconds an iteration that owns nothing sleeps before it looks again."""


class Ownership(Protocol):
    """What receives need of the subscriber's place in its group (or its lack of one:
    see :mod:`raytopic.client.group_member`)."""

    def owned(self, *, catch_up: bool = True) -> tuple[int, ...]:
        """The channels owned now; ``catch_up`` first applies view news that came."""
        ...

    def before_receive(self) -> tuple[int, dict[int, Lease]] | None:
        """Bookkeeping before a receive; the (version, leases) view it carries."""
        ...

    def track(self, ref: ray.ObjectRef[Any]) -> None:
        """A receive was sent (a waiting receive keeps a member alive)."""
        ...


class StaleReads:
    """Per channel, what makes an element read there before *stale*: not handed out,
    and its commit refused at the channel. No Ray.

    - the cursor's *jump count* after the latest seek, group reset or seek to the
      commit: a channel stamps each element with its reader's count at read time,
      so one read before a jump carries a lower count (seeks raise it on the user's
      thread, group views on the heartbeat thread);
    - the *leases* the member lost there: a group moved the channel to another
      member (or to none: the member timed out), so what was read under them goes
      to the new owner after the commit, never to this member's hands.

    Both only rise.
    """

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self._lost: dict[int, int] = {}  # channel -> the highest generation lost there
        self._lock = threading.Lock()  # a seek and a view may raise one channel at once
        self.changes = 0
        """How many times a count rose or a lease was lost (an "empty" answered to a
        receive sent before a change is old news: see ``Receives``); 0: nothing read
        is stale, which the per-element checks test first."""

    def raise_to(self, channel: int, count: int) -> None:
        """Raise ``channel``'s jump count to ``count`` (a lower one changes nothing)."""
        with self._lock:
            if count > self._counts.get(channel, 0):
                self._counts[channel] = count
                self.changes += 1

    def raise_all(self, counts: Mapping[int, int]) -> None:
        """Raise every channel's jump count to the one given for it."""
        for channel, count in counts.items():
            self.raise_to(channel, count)

    def lose(self, channel: int, lease: Lease) -> None:
        """The member no longer holds ``lease`` at ``channel``: what it read there under
        that lease (or an earlier one of its own) is stale. (A lease it gets there
        later has a higher generation.)"""
        with self._lock:
            if lease.generation > self._lost.get(channel, -1):
                self._lost[channel] = lease.generation
                self.changes += 1

    def count(self, channel: int) -> int:
        """``channel``'s jump count (0 before any jump)."""
        return self._counts.get(channel, 0)

    def any_stale(self, elements: Iterable[Element]) -> bool:
        """Whether any of ``elements`` is stale (none before a jump or a loss, at no
        cost; elements of one delivery share their origin: looked at once)."""
        if not self.changes:
            return False
        seen, channel = None, -1
        for element in elements:
            if element._origin is seen and element.channel == channel:
                continue
            if self.is_stale(element):
                return True
            seen, channel = element._origin, element.channel
        return False

    def is_stale(self, element: Element) -> bool:
        """Whether ``element`` was read before its channel's latest jump, or under a
        lease the member lost."""
        origin = element._origin
        if origin.jumps < self._counts.get(element.channel, 0):
            return True
        lost = self._lost
        return bool(lost) and (
            origin.lease is not None and origin.lease.generation <= lost.get(element.channel, -1)
        )


class ChannelChoice:
    """Which channel a receive goes to when none of the user's is still out. No Ray.

    A receive goes to the *host*: an owned channel fixed by the reader's id while
    the view holds. A resequencing reader's host never moves: its resequencer
    lives in the host's session. The batches of a reader that completes on
    empty (they never wait, so they leave nothing at the other channels) go to
    the owned channels in turn: bulk reads go where the data is. (A session that
    replaces one lost with its host reads the other channels again after the
    commit before it answers, so the next channel in turn never reads on past
    what the lost session took there.)
    """

    def __init__(
        self, reader_id: str, channel_count: int, *, fixed_host: bool, batches_in_turn: bool
    ) -> None:
        self._seed = zlib.crc32(reader_id.encode())
        self._turn = self._seed
        self._channel_count = channel_count
        self._fixed_host = fixed_host
        self._batches_in_turn = batches_in_turn

    def pick(self, owned: tuple[int, ...], *, batch: bool) -> int:
        """The channel for a receive among ``owned``: the next in turn for a ``batch`` of
        a reader whose batches go in turn, else the host."""
        return self.next_in_turn(owned) if batch and self._batches_in_turn else self.host(owned)

    def host(self, owned: tuple[int, ...]) -> int:
        """The host among ``owned`` (any channel when none is owned)."""
        if self._fixed_host or not owned:
            return self._seed % self._channel_count
        return owned[self._seed % len(owned)]

    def next_in_turn(self, owned: tuple[int, ...]) -> int:
        """The next of ``owned`` in turn (of all channels when none is owned)."""
        channels = owned or tuple(range(self._channel_count))
        self._turn += 1
        return channels[self._turn % len(channels)]


_Era = tuple[int, int]
"""When an iteration's receive was sent: (the iteration, the stale reads' changes). An
"empty" answered to a receive of an earlier era (before a nack, a seek, a publish, a
reset, a seek to the commit...) does not end an iteration."""

_CARRIED: _Era = (-1, -1)
"""The era of a receive a commit carried: sent before the iteration's next look, its
"empty" ends nothing, and has the channel looked at again (what came since)."""


@dataclass(slots=True)
class _ChannelReads:
    """One stream of receives at one channel: its numbering, and (an iteration's)
    the receives in flight, each with its era."""

    stream: str
    next_number: int = 0
    refs: deque[tuple[ray.ObjectRef[list[Element]], _Era]] = field(default_factory=deque)
    drained: _Era | None = None  # with complete_on_empty: when the channel answered "empty"


class Receives:
    """Where one subscriber's receives go, and what its iteration keeps in flight.

    **Ordering**: the user's receives that are out at once go to one channel,
    whose session serves them in turn: their ObjectRefs complete in order.
    Elements an abandoned iteration prefetched come before any new receive.

    Args:
        topic: The subscriber's topic.
        reader_id: The subscriber's id, as the channels know its reader.
        spec: How it reads (window, resequencer and complete_on_empty matter here).
        ownership: Which channels it owns, and its bookkeeping per receive.
    """

    def __init__(
        self, topic: Topic, reader_id: str, spec: ReaderSpec, ownership: Ownership
    ) -> None:
        self._topic = topic
        self._reader = reader_id
        self._ownership = ownership
        self._through_host = spec.window is not None or spec.resequence is not None
        self._resequencing = spec.resequence is not None
        self._complete_on_empty = spec.complete_on_empty
        self._choice = ChannelChoice(
            reader_id,
            topic.channel_count,
            fixed_host=spec.resequence is not None,
            batches_in_turn=spec.complete_on_empty and not self._through_host,
        )
        self.stale = StaleReads()
        """What makes earlier reads stale; views of the group raise it too."""
        # Held while streams are numbered and sent: receives on several threads
        # (a user's, an iteration's) must reach each channel in their numbers' order.
        self._lock = threading.RLock()
        self._stopped = False
        # The user's receives: a stream per channel, all sent to one channel at
        # a time (``_target``) while any is out.
        self._stream_prefix = uuid.uuid4().hex[:12]
        self._user_streams: dict[int, _ChannelReads] = {}
        self._target: int | None = None
        # Their ObjectRefs not known to have completed.
        self._out = ReceivesOut(resequencing=self._resequencing)
        self._user_reads = False  # user receives sent since the host's last pause
        # An iteration's: a stream per channel (direct), or user-stream receives
        # through the host (``_host_refs``, with a window or a resequencer), which
        # take from every owned channel at once (``spread``).
        self._reads: dict[int, _ChannelReads] = {}
        self._host_refs: deque[tuple[ray.ObjectRef[list[Element]], _Era]] = deque()
        self._iterations = 0  # iterations begun (part of an era)
        self._buffer: deque[Element] = deque()  # elements an iteration left over
        self.weak = weakref.ref(self)
        """This, weakly (what a batch an iteration handed out knows of it)."""
        guard_commits(reader_id, self.tell_lost_receives)
        # Not at exit: Ray may be shut down by then, and reports nothing more.
        weakref.finalize(self, _let_go, self._reads, self._host_refs).atexit = False

    # -- the user's receives -------------------------------------------------------------

    def receive(self, count: int, *, single: bool) -> ray.ObjectRef[Any]:
        """One user receive: ``ObjectRef[Element | None]`` (``single``) or
        ``ObjectRef[list[Element]]``; what an abandoned iteration left comes first.

        Raises:
            SubscriberClosedError: receives were stopped.
        """
        leftover = self._reclaim_iteration(count)
        if leftover:
            return ray.put(leftover[0] if single else leftover)
        return self._send(count, single=single)

    @property
    def resequencing(self) -> bool:
        """Whether a resequencer in the host's session hands the elements over."""
        return self._resequencing

    def hand_over_mark(self, channel: int, sequence: int) -> int | None:
        """The hand-over mark the host's resequencing session stamped on the element
        at ``sequence`` of ``channel`` (None: it does not know that element). One call."""
        host = self._topic._channel_actors[self.host_channel]
        request = ReadHandOverMark(reader_id=self._reader, channel=channel, sequence=sequence)
        return _get(host.request.remote(pack_request(request)), self._topic)

    @property
    def host_channel(self) -> int:
        """The channel a single receive goes to (while none of the user's is out)."""
        return self._choice.host(self._ownership.owned(catch_up=False))

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Receives sent before entering complete before the block runs (unless they
        wait for data: those see what the block did); the channel serving them
        resumes after it. A seek runs in this block."""
        with self._lock:
            at = self._target
            stream = None if at is None else self._user_streams[at]
            self._user_reads = False
        if at is None or stream is None or not stream.next_number:
            yield
            return
        actor = self._topic._channel_actors[at]
        last = stream.next_number - 1
        pause = PauseReceives(
            reader_id=self._reader,
            stream=stream.stream,
            upto=last,
            receives_out=self._user_receives_out(),
        )
        _get(actor.request.remote(pack_request(pause)), self._topic)
        try:
            yield
        finally:
            actor.request.remote(pack_request(ResumeReceives(reader_id=self._reader)))

    def stop(self) -> None:
        """No receive is sent from now on (the subscriber closed)."""
        with self._lock:
            self._stopped = True

    def _send(self, count: int, *, single: bool, spread: bool = False) -> ray.ObjectRef[Any]:
        """One receive on the user's streams, at the channel :meth:`_route` picks."""
        if self._stopped:
            raise SubscriberClosedError("the subscriber is closed")
        view = self._before_sending()
        with self._lock:
            self._user_reads = True
            channel, stream = self._route(batch=not (single or spread))
            actor, receive = self._next_receive(channel, stream, count, single, spread, False, view)
            ref = self._send_receive(actor, receive)
            self._out.sent(SentReceive(ref, channel, receive.stream, receive.number))
        return ref

    def _before_sending(self) -> tuple[int, dict[int, Lease]] | None:
        """Before any receive is sent (not holding the lock): the poison stops this
        process reported for the reader have landed (see ``wait_for_poison_reports``),
        and the membership's bookkeeping; returns the view the receive carries."""
        wait_for_poison_reports(self._topic.topic_id, self._reader)
        return self._ownership.before_receive()

    def _route(self, *, batch: bool) -> tuple[int, _ChannelReads]:
        """With the lock held: the channel for the next user receive, and its stream.

        While an earlier receive is out, the same channel (so receives complete
        in order: one session serves them in turn); otherwise the choice's.
        """
        if self._user_receives_out() and self._target is not None:
            return self._target, self._user_streams[self._target]
        owned = self._ownership.owned(catch_up=False)
        target = self._choice.pick(owned, batch=batch)
        self._target = target
        return target, self._stream_at(self._user_streams, target, "u")

    def _stream_at(
        self, streams: dict[int, _ChannelReads], channel: int, kind: str
    ) -> _ChannelReads:
        reads = streams.get(channel)
        if reads is None:
            reads = streams[channel] = _ChannelReads(f"{self._stream_prefix}.{kind}{channel}")
        return reads

    def _send_receive(self, actor: Any, receive: Receive) -> ray.ObjectRef[Any]:
        """With the lock held: submit ``receive`` (see :meth:`_next_receive`) to ``actor``."""
        ref = actor.request.remote(pack_request(receive))
        self._ownership.track(ref)
        return ref

    def _next_receive(
        self,
        channel: int,
        stream: _ChannelReads,
        count: int,
        single: bool,
        spread: bool,
        here_only: bool,
        view: tuple[int, dict[int, Lease]] | None,
    ) -> tuple[Any, Receive]:
        """With the lock held: ``channel``'s actor and the next receive of ``stream``
        (numbered: it must be sent before the lock is let go)."""
        actor = self._topic._channel_actors[channel]
        check_topic(self._topic.topic_id, self._topic.name, actor)  # before Ray fails a ref
        number = stream.next_number
        stream.next_number += 1
        receive = Receive(
            reader_id=self._reader,
            stream=stream.stream,
            number=number,
            max_count=count,
            single=single,
            spread=spread,
            here_only=here_only,
            view=view,
        )
        return actor, receive

    def _iteration_receive(
        self,
        channel: int,
        reads: _ChannelReads,
        owned: tuple[int, ...],
        view: tuple[int, dict[int, Lease]] | None,
    ) -> tuple[Any, Receive]:
        """With the lock held: the next receive an iteration sends ``channel`` directly
        (here only), for its share of ITERATION_BATCH over the ``owned`` channels."""
        share = max(ITERATION_SHARE, ITERATION_BATCH // max(1, len(owned)))
        return self._next_receive(channel, reads, share, False, False, True, view)

    # -- iteration -----------------------------------------------------------------------

    def iterate(self) -> _Iteration:
        """Blocking iteration, element by element (see ``Subscriber.__iter__``)."""
        self._iterations += 1  # a new era: it looks again at every channel
        if self._through_host:
            return _HostIteration(self)
        self.align_positions()  # each channel is read on its own from here on
        return _DirectIteration(self)

    def align_positions(self) -> None:
        """Have the reader's read position at each channel stand where its host's
        session reads on: that session may have read past them (what fetches offered,
        which it moves them over later), or died with a receive under way (its
        replacement reads again after the commit before it answers). A pause of the
        host, once after user receives that may have waited, or that are still out
        (none for finished ones that complete on empty)."""
        if self._user_reads and (not self._complete_on_empty or self._user_receives_out()):
            with self.paused():
                pass

    def tell_lost_receives(self) -> Floors:
        """Before a commit of this reader sent from this process: tell the channels of
        the user's receives Ray reported cancelled; returns how far the commit may go
        (see ``commit_guards``)."""
        if self._stopped:
            return None
        self._user_receives_out()
        with self._lock:
            return self._out.commit_floors(self._topic, self._reader)

    def _user_receives_out(self) -> bool:
        """Whether a user receive has not answered yet (those Ray reported cancelled
        are told to their channels first)."""
        with self._lock:
            out = self._out.any_out()
            self._out.tell_cancelled(self._topic, self._reader)
            return out

    def iterate_batches(self, max_elements: int) -> Iterator[ElementBatch]:
        """Blocking iteration, a batch at a time (see ``Subscriber.iter_batches``)."""
        return _BatchIteration(self.iterate(), max_elements)

    @property
    def topic(self) -> Topic:
        """The subscriber's topic."""
        return self._topic

    @property
    def stopped(self) -> bool:
        """Whether receives were stopped (the subscriber closed)."""
        return self._stopped

    @property
    def complete_on_empty(self) -> bool:
        """Whether a receive with nothing to deliver completes at once."""
        return self._complete_on_empty

    def next_buffered(self) -> Element | None:
        """The next element an iteration left over that is not stale, or None."""
        buffer = self._buffer
        stale = self.stale
        while buffer:
            element = buffer.popleft()
            # (No jump and no lost lease yet, the common case: no call; this runs once
            # an iterated element.)
            if not stale.changes or not stale.is_stale(element):
                return element
        return None

    def take_buffered(self, count: int) -> ElementBatch:
        """Up to ``count`` elements an iteration left over, in order, none stale."""
        buffer = self._buffer
        if not buffer:
            return ElementBatch()
        # The common case, none stale: the first ``count`` as they are, in one piece (a
        # received batch larger than ``count`` is split without a look at each element).
        head = list(islice(buffer, count))
        if not self.stale.any_stale(head):
            if len(head) == len(buffer):
                buffer.clear()
            else:
                for _ in range(len(head)):
                    buffer.popleft()
            return ElementBatch(head)
        taken = ElementBatch()
        while len(taken) < count and (element := self.next_buffered()) is not None:
            taken.append(element)
        return taken

    def buffer(self, elements: list[Element]) -> None:
        """Keep received elements for :meth:`next_buffered`, in order."""
        self._buffer.extend(elements)

    def prefetch_direct(self) -> list[ray.ObjectRef[list[Element]]]:
        """Keep ITERATION_DEPTH receives in flight at every owned channel (none once
        stopped); return the oldest one of each channel, the ones to wait on."""
        owned = self._ownership.owned()
        view = self._before_sending()
        era = self._era
        with self._lock:  # a receive on another thread may reclaim them meanwhile
            for channel in owned:
                reads = self._stream_at(self._reads, channel, "i")
                if reads.drained == era:
                    continue  # it answered "empty" in this era
                while not self._stopped and len(reads.refs) < ITERATION_DEPTH:
                    ref = self._send_receive(*self._iteration_receive(channel, reads, owned, view))
                    reads.refs.append((ref, era))
            return [reads.refs[0][0] for reads in self._reads.values() if reads.refs]

    def commit_carrying(self, commit: Commit, channel: int) -> ray.ObjectRef[Any] | None:
        """Send ``commit`` (of a batch a direct iteration handed out from ``channel``)
        with the receive the iteration would send there next, as one call (see
        ``CommitThenReceive``): a reader that completes on empty, whose receives never
        wait for data, so the commit's reply never waits for one. Returns the
        commit's ref (its reply is a CommitResult or a typed error); None: the
        iteration would send no receive there now, and the commit goes alone."""
        if not self._complete_on_empty or self._through_host or commit.reader_id != self._reader:
            return None  # (another reader's: elements of another subscriber added to it)
        owned = self._ownership.owned(catch_up=False)
        if channel not in owned:
            return None
        view = self._before_sending()
        with self._lock:
            reads = self._reads.get(channel)
            if (
                self._stopped
                or reads is None
                or reads.drained == self._era
                or len(reads.refs) >= ITERATION_DEPTH
            ):
                return None
            actor, receive = self._iteration_receive(channel, reads, owned, view)
            packed = pack_request(CommitThenReceive(commit=commit, receive=receive))
            committed, ref = actor.request.options(num_returns=2).remote(packed)
            self._ownership.track(ref)
            reads.refs.append((ref, _CARRIED))
            return committed

    def take_direct(self, ref: ray.ObjectRef[list[Element]]) -> list[Element]:
        """The elements of a direct receive (the oldest of its channel); [] if a receive
        on another thread reclaimed it meanwhile (its elements wait in the buffer)."""
        with self._lock:
            for reads in self._reads.values():
                if reads.refs and reads.refs[0][0] == ref:
                    _, sent = reads.refs.popleft()
                    break
            else:
                return []
        try:
            elements = _get(ref, self._topic)
        except ReceivePassedOverError:
            return []  # it took nothing (its channel restarted): not an "empty"
        if not elements and self._complete_on_empty:
            if sent == self._era:
                reads.drained = sent  # (of an earlier era, its "empty" is old news)
            elif sent is _CARRIED:
                reads.drained = None  # sent before the user's next look: look again
        return elements

    @property
    def _era(self) -> _Era:
        """The era a receive sent now belongs to."""
        return self._iterations, self.stale.changes

    @property
    def host_in_flight(self) -> bool:
        """Whether receives through the host (window, resequencer) are in flight."""
        return bool(self._host_refs)

    def prefetch_host(self) -> None:
        """Keep ITERATION_DEPTH receives in flight through the host's session."""
        while not self._stopped and len(self._host_refs) < ITERATION_DEPTH:
            era = self._era
            self._host_refs.append((self._send(ITERATION_BATCH, single=False, spread=True), era))

    def take_host(self) -> tuple[ray.ObjectRef[list[Element]], bool]:
        """The oldest receive through the host's session (taken out of flight), and
        whether it was sent in an earlier era (its "empty" is old news)."""
        ref, sent = self._host_refs.popleft()
        return ref, sent != self._era

    def interrupt(self) -> list[ray.ObjectRef[list[Element]]]:
        """Tell every channel with iteration receives out to stop their waits; return
        those receives, oldest first per channel."""
        actors = self._topic._channel_actors
        pending: list[ray.ObjectRef[list[Element]]] = []
        with self._lock:  # an iteration on another thread may be prefetching
            for channel, reads in self._reads.items():
                if reads.refs:
                    interrupt = InterruptReceives(
                        reader_id=self._reader, stream=reads.stream, upto=reads.next_number - 1
                    )
                    actors[channel].request.remote(pack_request(interrupt))
                    pending.extend(ref for ref, _ in reads.refs)
                    reads.refs.clear()
        if self._host_refs:
            with self._lock:
                target = self._target
                assert target is not None  # a receive through the host went there
                stream = self._user_streams[target]
            interrupt = InterruptReceives(
                reader_id=self._reader, stream=stream.stream, upto=stream.next_number - 1
            )
            actors[target].request.remote(pack_request(interrupt))
            pending.extend(ref for ref, _ in self._host_refs)
            self._host_refs.clear()
        return pending

    def _reclaim_iteration(self, count: int) -> ElementBatch:
        """Up to ``count`` elements an abandoned iteration prefetched, in order.

        Its receives still waiting are told to stop waiting, and what each
        returns is buffered. (Not ``ray.cancel``: a cancel that lands just after
        a receive took its elements drops the reply, and the elements with it.)
        """
        first_error: BaseException | None = None
        for ref in self.interrupt():  # read every one: a later batch holds taken elements
            try:
                self._buffer.extend(_get(ref, self._topic) or ())
            except (SubscriberClosedError, ReceivePassedOverError):
                pass  # nothing to reclaim
            except Exception as error:
                first_error = first_error or error
        if first_error is not None:
            raise first_error
        return self.take_buffered(count)


class _Iteration:
    """Blocking iteration: buffered elements first, then the next received batch."""

    def __init__(self, receives: Receives) -> None:
        self._receives = receives

    def __iter__(self) -> _Iteration:
        return self

    def __next__(self) -> Element:
        receives = self._receives
        while True:
            element = receives.next_buffered()
            if element is not None:
                return element
            elements = self._next_batch()
            if elements is None:
                raise StopIteration
            receives.buffer(elements)

    def _next_batch(self) -> list[Element] | None:
        """The next received batch (maybe empty); None when the iteration ends."""
        raise NotImplementedError


class _BatchIteration:
    """Blocking iteration a batch at a time: buffered elements first, then each
    received batch, split where it holds more than ``max_elements``."""

    def __init__(self, iteration: _Iteration, max_elements: int) -> None:
        self._iteration = iteration
        self._receives = iteration._receives
        self._max = max_elements

    def __iter__(self) -> _BatchIteration:
        return self

    def __next__(self) -> ElementBatch:
        batch = self._next()
        batch._carrier = self._receives.weak  # its commit may carry the next receive
        return batch

    def _next(self) -> ElementBatch:
        receives = self._receives
        while True:
            batch = receives.take_buffered(self._max)
            if batch:
                return batch
            elements = self._iteration._next_batch()
            if elements is None:
                raise StopIteration
            if not elements:
                continue  # nothing came in time: look again
            if len(elements) <= self._max and not receives.stale.any_stale(elements):
                # The common case: a received batch handed out as it came.
                return elements if type(elements) is ElementBatch else ElementBatch(elements)
            receives.buffer(elements)


class _DirectIteration(_Iteration):
    """Receives in flight at every owned channel at once, each read there alone."""

    def _next_batch(self) -> list[Element] | None:
        receives = self._receives
        if receives.stopped:
            return self._drain(receives.interrupt())
        receives.align_positions()  # a user receive sent meanwhile read at the host
        heads = receives.prefetch_direct()
        if not heads:
            if receives.complete_on_empty:
                return None  # every owned channel said "empty" (or none is owned)
            time.sleep(_OWNER_WAIT)  # owns nothing: wait for an assignment
            return []
        ready, _ = ray.wait(heads, num_returns=1, timeout=_ITERATION_LOOK)
        if not ready:
            return []  # look at the view again
        try:
            return receives.take_direct(ready[0])
        except SubscriberClosedError:
            return None

    def _drain(self, pending: list[ray.ObjectRef[list[Element]]]) -> list[Element] | None:
        """After close: what the interrupted receives still bring, then the end."""
        elements: list[Element] = []
        for ref in pending:
            with contextlib.suppress(SubscriberClosedError, ReceivePassedOverError):
                elements.extend(_get(ref, self._receives.topic) or ())
        return elements or None


class _HostIteration(_Iteration):
    """With a window or a resequencer: receives through the host's session, which
    counts the window or holds the resequencer."""

    def _next_batch(self) -> list[Element] | None:
        receives = self._receives
        if receives.stopped and not receives.host_in_flight:
            return None
        receives.prefetch_host()
        ref, older = receives.take_host()
        try:
            elements = _get(ref, receives.topic)
        except SubscriberClosedError:
            return None
        except ReceivePassedOverError:
            return []  # it took nothing (its channel restarted): receive again
        if not elements and (receives.stopped or (receives.complete_on_empty and not older)):
            return None
        return elements


def _let_go(
    reads: dict[int, _ChannelReads], host_refs: deque[tuple[ray.ObjectRef[Any], _Era]]
) -> None:
    """The receives an iteration still had in flight when its subscriber went (left with
    ``break``, closed or not): each reply is read and dropped when it comes. Unread, a
    reply that failed (its topic was destroyed meanwhile) would be printed by Ray as an
    "Unhandled error" traceback once its ref is gone."""
    refs = [ref for channel in reads.values() for ref, _ in channel.refs]
    refs += [ref for ref, _ in host_refs]
    with contextlib.suppress(Exception):  # Ray shut down by the user: nothing to read
        for ref in refs:
            ref.future()  # reads the reply when it comes: a failure counts as read


def _get(ref: ray.ObjectRef[Any], topic: Topic) -> Any:
    with topic_calls(topic.topic_id, topic.name):
        reply = ray.get(ref)
    if isinstance(reply, TopicError):  # a carried receive's error (``CommitThenReceive``)
        raise reply
    return reply
