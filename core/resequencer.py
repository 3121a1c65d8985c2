"""Release out-of-order messages in sequence order, per correlation id.

:class:`Resequencer` is pure Python (no Ray): it is used standalone, inside
:class:`raytopic.resequencer_actor.ResequencerActor` when many producers feed
one stream, and (through ``raytopic.core.resequenced_stream``) by the receive session
of a subscriber given ``resequence=``:class:`Resequence`, inside its host
channel actor.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, NamedTuple

from raytopic.core.config import MAX_COUNT, MAX_SECONDS, check_int
from raytopic.core.errors import InvalidArgumentError, InvalidTypeError
from raytopic.core.release_record import ReleaseRecord, at_or_after
from raytopic.core.waits import bounded_wait

__all__ = ["MAX_MILLISECONDS", "Resequence", "Resequencer", "ResequencerStats"]

logger = logging.getLogger(
    "raytopic.resequencer"
)  # its name before the move: logging setups name it

MAX_MILLISECONDS = int(MAX_SECONDS * 1000)
"""The longest hold window or sweep interval: a year, in milliseconds."""

ReleaseCallback = Callable[[int, Any, Hashable | None], None]
GapCallback = Callable[[int, Hashable | None], None]
LateCallback = Callable[[int, Any, Hashable | None], None]


@dataclass(frozen=True, slots=True)
class ResequencerStats:
    """Counters of one :class:`Resequencer` (totals over all streams).

    Counts change when a release is decided, under the resequencer's lock;
    the callbacks of that release may still be running when ``stats`` is read.
    """

    released: int
    """Messages released (handed to ``on_release``, even if it raised)."""
    gaps: int
    """Sequence numbers skipped by a timeout, capacity or flush release."""
    late: int
    """Messages dropped as late (below ``start``, already released, or already held)."""
    held: int
    """Messages currently held back, waiting for a predecessor."""
    unsequenced: int = 0
    """Messages released at once, unordered, because their sequence number (or
    correlation) could not be read: the user's function raised (a subscriber's
    resequencing counts them; a bare Resequencer is never given one)."""


@dataclass(frozen=True, slots=True)
class Resequence:
    """Subscriber option: reorder received values by a sequence number they carry.

    Passed as ``topic.subscriber(resequence=...)``; the subscriber feeds every
    received value into a :class:`Resequencer` (one stream per correlation
    key) and hands values out in sequence order. The fields mean what the
    :class:`Resequencer` arguments of the same name mean.

    Example:
        Values are dicts ``{"order": "A-17", "step": 3, ...}`` published
        without a key, so they spread over channels and arrive out of order::

            opts = rt.Resequence(
                seq=lambda v: v["step"],
                correlation=lambda v: v["order"],
                timeout_ms=500,
                start=0,
            )
            with topic.subscriber(group="billing", resequence=opts) as sub:
                for element in sub:
                    ...  # steps of each order arrive as 0, 1, 2, ...
    """

    seq: Callable[[Any], int]
    """Extracts the sequence number (an int) from a received value."""
    correlation: Callable[[Any], Hashable] | None = None
    """Extracts the stream key from a value; None: one stream for all values."""
    timeout_ms: int = 1000
    """Hold window: how long the head of a stream waits for a missing predecessor
    (0 to a year). It goes past the gap only once the subscriber's session has then
    read every channel it owns: a number in its channel in time comes in order,
    however long the loop takes between receives."""
    capacity: int = 0
    """Per-stream buffer cap that forces the head out past a gap; 0 is unbounded."""
    start: int | None = None
    """First expected sequence number of every stream; None: not known."""

    def __post_init__(self) -> None:
        if not callable(self.seq):
            raise InvalidTypeError(f"seq must be callable, got {type(self.seq).__name__}")
        if self.correlation is not None and not callable(self.correlation):
            raise InvalidTypeError(
                f"correlation must be callable or None, got {type(self.correlation).__name__}"
            )
        check_int(self.timeout_ms, "timeout_ms", minimum=0, maximum=MAX_MILLISECONDS)
        check_int(self.capacity, "capacity", minimum=0)
        if self.start is not None:
            check_int(self.start, "start")


class Resequencer:
    """Holds back early messages and releases each stream in sequence order.

    Every ``correlation_id`` (``None`` is the default stream) is an
    independent stream with its own numbering. The *head* of a stream (its
    lowest held message) is released when

    - it is the immediate successor of the last released number (at once),
    - the stream holds more than ``capacity`` messages (``capacity > 0``),
      even past a gap, or
    - it has waited ``timeout_ms`` since *it* arrived (a timeout release,
      made by the sweeper, or by :meth:`expire`).

    Numbers skipped by a release go to ``on_gap``, one call per number,
    ascending, before the release that skipped them. A message numbered below
    ``start``, at or below the last released number, or already held (the
    first arrival is kept) is *late*: dropped, counted, and passed to
    ``on_late``.

    Without ``start`` the first message of a stream has no known predecessor:
    it waits its hold window (or for ``capacity``, or for a lower number to
    take its place at the head), and its release reports no gap. With
    ``timeout_ms=0`` every message is released inside :meth:`accept`, past
    any gap, so a lower number arriving later is late.

    **Threads.** :meth:`accept` and :meth:`flush` are thread-safe and deliver
    the releases they cause on the calling thread; timeout releases are made
    by :meth:`start`, the sweeper loop, on the thread running it.
    :meth:`pause` stops only the sweeps.

    **Ordering.** Callbacks (``on_release``, ``on_gap``, ``on_late``) are
    called one at a time, never concurrently, in the order the releases were
    decided, so each stream is delivered in order even when many threads
    accept. No lock that :meth:`accept` needs is held during a callback, so a
    callback may call :meth:`accept` (or :meth:`flush`): what that call
    releases is delivered right after the running callback returns. A
    callback must not wait for another thread's :meth:`accept` to finish:
    that call waits for the running callback (its turn comes after it).

    **Errors in callbacks.** A callback that raises is logged (with its
    traceback) and changes nothing else: the message counts as released and
    the sweeper keeps running.

    **Sources sent back.** A message accepted with an ``origin`` (a source
    and a position in it, such as a channel) can be taken back: after
    :meth:`rewind` of that source to a position, what is held from it there
    on is dropped, and the numbers released from it there on (among the
    latest releases) are released again when they come, not dropped as late, and
    so are the numbers those releases skipped as gaps (a gap's top
    ``GAP_REOPENED`` numbers; not what a stream's first release skipped): each is
    waited for again, as its source read again may hold it. The numbers released
    from other sources in between are stepped over. (With
    ``timeout_ms=0`` each is released whenever it comes.)

    **Memory.** A stream's state (its last released number) is kept for the
    lifetime of the resequencer, so late numbers are recognised; held
    messages are bounded per stream by ``capacity`` when it is set.

    Args:
        name: Name used in logs (and as the metrics tag of the actor form).
        timeout_ms: Hold window in milliseconds (0 to a year: ``MAX_MILLISECONDS``).
        capacity: Per-stream buffer cap that forces the head out; 0 is unbounded.
        reap_interval_ms: How often the sweeper looks for expired heads (1 ms to
            a year).
        on_release: Called as ``on_release(seq, payload, correlation_id)``
            for every released message, in order.
        on_gap: Called as ``on_gap(skipped_seq, correlation_id)``.
        on_late: Called as ``on_late(seq, payload, correlation_id)`` for a
            dropped late message.
        start: First expected sequence number of every stream, or None.

    Raises:
        InvalidTypeError: An argument has the wrong type (the message names it).
        InvalidArgumentError: An argument has a bad value (the message names it).

    Example:
        ::

            out = []
            r = Resequencer("orders", timeout_ms=500, start=0,
                            on_release=lambda seq, payload, cid: out.append(payload))
            sweeper = threading.Thread(target=r.start, daemon=True)
            sweeper.start()
            r.accept(1, "b")
            r.accept(0, "a")  # releases "a" then "b" on this thread
            r.stop()
    """

    def __init__(
        self,
        name: str,
        *,
        timeout_ms: int = 1000,
        capacity: int = 0,
        reap_interval_ms: int = 1000,
        on_release: ReleaseCallback,
        on_gap: GapCallback | None = None,
        on_late: LateCallback | None = None,
        start: int | None = None,
    ) -> None:
        _check_settings(name, timeout_ms, capacity, reap_interval_ms, start)
        if not callable(on_release):
            raise InvalidTypeError(f"on_release must be callable, got {type(on_release).__name__}")
        for arg_name, callback in (("on_gap", on_gap), ("on_late", on_late)):
            if callback is not None and not callable(callback):
                raise InvalidTypeError(
                    f"{arg_name} must be callable or None, got {type(callback).__name__}"
                )
        self._name = name
        self._timeout_s = timeout_ms / 1000
        self._zero_hold = timeout_ms == 0
        self._capacity = capacity
        self._reap_interval_s = reap_interval_ms / 1000
        self._on_release = on_release
        self._on_gap = on_gap
        self._on_late = on_late
        self._start = start

        # State lock: guards the streams, the counters and the ticket counter.
        # Never held while a callback runs.
        self._lock = threading.Lock()
        self._streams: dict[Hashable | None, _Stream] = {}
        # The streams holding something (a gap before them): what due() and expire()
        # look at, not every stream ever seen.
        self._holding: dict[Hashable | None, _Stream] = {}
        self._record = ReleaseRecord()  # releases with an origin, for rewind()
        self._released = 0
        self._gaps = 0
        self._late = 0
        self._held = 0

        # Delivery (see _deliver): each batch of events decided under _lock
        # takes the next ticket there; batches are delivered strictly in
        # ticket order, each by the thread that decided it.
        self._next_ticket = 0
        self._serving = 0
        self._turn = threading.Condition(threading.Lock())
        self._local = threading.local()

        self._stop_event = threading.Event()
        self._running = False
        self._paused = False

    def __repr__(self) -> str:
        return (
            f"Resequencer({self._name!r}, running={self._running}, "
            f"paused={self._paused}, held={self._held})"
        )

    @property
    def name(self) -> str:
        """The resequencer's name."""
        return self._name

    @property
    def is_running(self) -> bool:
        """True while :meth:`start` runs the sweeper loop."""
        return self._running

    @property
    def is_paused(self) -> bool:
        """True between :meth:`pause` and :meth:`resume`."""
        return self._paused

    @property
    def stats(self) -> ResequencerStats:
        """A snapshot of the counters."""
        with self._lock:
            return ResequencerStats(
                released=self._released, gaps=self._gaps, late=self._late, held=self._held
            )

    def accept(
        self,
        seq: int,
        payload: Any,
        correlation_id: Hashable | None = None,
        origin: tuple[Hashable, int] | None = None,
    ) -> None:
        """Feed one message into its stream; deliver what it makes releasable.

        Args:
            seq: The message's sequence number in its stream (an int).
            payload: The message, any value; handed to the callbacks as is.
            correlation_id: The stream (any hashable); None is the default stream.
            origin: Where the message was read: (source, position), for
                :meth:`rewind`; None: it is never taken back.

        Raises:
            InvalidTypeError: ``seq`` is not an int (``bool`` included) or
                ``correlation_id`` is not hashable; nothing is stored.
            InvalidArgumentError: ``seq`` past a signed 64-bit int; nothing is stored.
        """
        _check_seq(seq)
        _check_correlation_id(correlation_id)
        events: list[_Event] = []
        with self._lock:
            stream = self._streams.get(correlation_id)
            if stream is None:
                stream = self._streams[correlation_id] = _Stream(self._start)
            if stream.is_late(seq):
                self._late += 1
                if self._on_late is not None:
                    events.append(_Late(seq, payload, correlation_id))
            else:
                stream.held[seq] = (payload, time.monotonic(), origin)
                heapq.heappush(stream.heap, seq)
                self._held += 1
                self._release_ready(stream, correlation_id, events)
                if stream.heap:
                    self._holding[correlation_id] = stream
            ticket = self._take_ticket(events)
        self._deliver(ticket, events)

    def flush(self) -> None:
        """Release everything held, in order per stream, reporting the gaps."""
        events: list[_Event] = []
        with self._lock:
            for correlation_id, stream in self._streams.items():
                while stream.heap:
                    self._release_head(stream, correlation_id, events)
            ticket = self._take_ticket(events)
        self._deliver(ticket, events)

    def rewind(self, source: Hashable, position: int) -> list[Any]:
        """``source`` was sent back to ``position``: what it delivers from there on
        comes again. Drops what is held from it there on (returned, in no order);
        the numbers released from it there on are released again when they come
        (each stream waits for the lowest of them, its hold window starting now,
        and steps over the numbers released from other sources in between). A
        source sent back past the latest releases remembered starts every stream's
        numbering afresh (as a new resequencer would), keeping what is held.

        Returns once the releases decided before it have been delivered (a
        callback must not call it).
        """
        dropped: list[Any] = []
        with self._lock:
            now = time.monotonic()
            for correlation_id, stream in list(self._holding.items()):
                held = stream.held
                taken_back = [seq for seq in held if at_or_after(held[seq][2], source, position)]
                for seq in taken_back:
                    dropped.append(stream.held.pop(seq)[0])
                    self._held -= 1
                if len(stream.held) != len(stream.heap):
                    stream.heap = list(stream.held)
                    heapq.heapify(stream.heap)
                if not stream.heap:
                    del self._holding[correlation_id]
            again = self._record.rewound(source, position)
            if again is None:
                for stream in self._streams.values():
                    stream.start_afresh(self._start)
            for correlation_id, numbers in (again or {}).items():
                sent_back = self._streams.get(correlation_id)
                if sent_back is not None and sent_back.release_again(numbers):
                    for seq, (payload, _, origin) in sent_back.held.items():
                        sent_back.held[seq] = (payload, now, origin)
            # Nothing to deliver, but the batches decided before (a sweep's) come
            # first: once this returns, every release it voided has been delivered.
            ticket = self._next_ticket
            self._next_ticket += 1
        self._deliver(ticket, [])
        return dropped

    def passed(self, source: Hashable, first: int, last: int) -> None:
        """``source``, sent back (:meth:`rewind`), read on past positions ``first..last``
        without delivering them (done there: a committed transaction consumed them; or
        filtered, or lost): the numbers released from there stay released, not waited
        for, and what waited for them is released now (on this thread)."""
        events: list[_Event] = []
        with self._lock:
            for correlation_id, numbers in self._record.passed(source, first, last).items():
                stream = self._streams.get(correlation_id)
                if stream is not None and stream.keep_released(numbers):
                    self._release_ready(stream, correlation_id, events)
            ticket = self._take_ticket(events)
        self._deliver(ticket, events)

    def expire(self, before: float) -> None:
        """Release each stream's head whose hold window ended by ``before`` (a
        ``time.monotonic()`` time), past its gap, and what follows it in order (on
        this thread).

        The sweeper calls it with the time of each sweep. A caller that reads its
        sources itself calls it instead, with the time it began reading every
        source, once it has read them: a number that was in a source by then has
        come, so only a number that truly had not is passed over (a resequencing
        subscriber's session: see ``raytopic.core.resequenced_stream``).
        """
        events: list[_Event] = []
        with self._lock:
            for correlation_id, stream in list(self._holding.items()):
                while stream.heap:
                    head = stream.heap[0]
                    if (
                        head == stream.expected()
                        or stream.held[head][1] + self._timeout_s <= before
                    ):
                        self._release_head(stream, correlation_id, events)
                    else:
                        break
            ticket = self._take_ticket(events)
        self._deliver(ticket, events)

    def due(self) -> float | None:
        """When the first hold window of a head held now ends (a ``time.monotonic()``
        time; it may have passed already); None: nothing is held."""
        with self._lock:
            arrivals = [stream.held[stream.heap[0]][1] for stream in self._holding.values()]
        return min(arrivals) + self._timeout_s if arrivals else None

    def start(self) -> None:
        """Run the sweeper loop on the calling thread until :meth:`stop`.

        Every ``reap_interval_ms`` (unless paused) the sweeper releases each
        stream's head that has waited its hold window. Meant to be the target
        of a thread. :meth:`stop` is final: after it, ``start()`` returns at
        once (so a ``stop()`` that races ahead of the thread is not lost);
        :meth:`accept` and :meth:`flush` keep working.

        A sweep that fails (a callback raising past the guard, such as
        ``SystemExit``) is logged and the sweeper goes on: nothing else would
        release the heads whose hold window ends. Only on the main thread does a
        ``KeyboardInterrupt`` or ``SystemExit`` end it, as the user asked.

        Raises:
            RuntimeError: The sweeper loop is already running.
        """
        with self._lock:
            if self._running:
                raise RuntimeError(f"resequencer {self._name!r}: the sweeper is already running")
            if self._stop_event.is_set():
                return
            self._running = True
        try:
            # Event.wait wakes at once on stop(), not after a full interval. (An
            # interval past an hour is waited in hour-long slices: Python refuses
            # a wait past its limit, and an early sweep releases only heads due.)
            while not self._stop_event.wait(bounded_wait(self._reap_interval_s)):
                if not self._paused:
                    self._sweep_and_go_on()
        finally:
            self._running = False

    def _sweep_and_go_on(self) -> None:
        """One sweep; a failure is logged (the loop goes on), except an interruption
        on the main thread, which ends the loop."""
        try:
            self.expire(time.monotonic())
        except BaseException as error:
            if not isinstance(error, Exception) and (
                threading.current_thread() is threading.main_thread()
            ):
                raise
            logger.exception("resequencer %r: a sweep failed; the sweeper goes on", self._name)

    def stop(self) -> None:
        """Make :meth:`start` return promptly; idempotent and final."""
        self._stop_event.set()

    def pause(self) -> None:
        """Stop the timeout sweeps, keeping every held message.

        :meth:`accept` still releases successors and capacity overflow, and
        with ``timeout_ms=0`` everything (a zero hold window is not a sweep).
        """
        self._paused = True

    def resume(self) -> None:
        """Restart the timeout sweeps after :meth:`pause`."""
        self._paused = False

    # -- decisions, all under self._lock ------------------------------------

    def _release_ready(
        self, stream: _Stream, correlation_id: Hashable | None, events: list[_Event]
    ) -> None:
        """Release successors, capacity overflow, and (zero hold) everything."""
        while stream.heap:
            head = stream.heap[0]
            if (
                head == stream.expected()
                or self._zero_hold
                or (self._capacity and len(stream.heap) > self._capacity)
            ):
                self._release_head(stream, correlation_id, events)
            else:
                return

    def _release_head(
        self, stream: _Stream, correlation_id: Hashable | None, events: list[_Event]
    ) -> None:
        seq = heapq.heappop(stream.heap)
        payload, _, origin = stream.held.pop(seq)
        if not stream.heap:
            self._holding.pop(correlation_id, None)
        # What a stream's first release skips came before this numbering (a host
        # restarted mid-stream: numbers handled by its predecessor): not a gap to undo.
        first_release = not stream.numbered
        skipped = stream.skipped_by(seq, keep_again=self._zero_hold)
        for first, stop in skipped:
            self._gaps += stop - first
            if self._on_gap is not None:
                events.append(_Gap(first, stop, correlation_id))
        self._held -= 1
        self._released += 1
        if origin is not None:
            gaps = tuple(skipped) if skipped and not first_release else ()
            self._record.released(origin[0], origin[1], correlation_id, seq, gaps)
        events.append(_Release(seq, payload, correlation_id))

    def _take_ticket(self, events: list[_Event]) -> int | None:
        if not events:
            return None
        ticket = self._next_ticket
        self._next_ticket += 1
        return ticket

    # -- delivery, never under self._lock -----------------------------------

    def _deliver(self, ticket: int | None, events: list[_Event]) -> None:
        """Run the callbacks of one batch, in ticket order, on this thread.

        Why tickets: callbacks must run outside the state lock (so they may
        call accept()), yet two threads that decided batches in the order
        A, B must deliver them in that order. A ticket taken under the state
        lock fixes that order; each thread waits for its turn, delivers its
        own batch (so releases happen on the thread that caused them) and
        passes the turn on. A callback that calls accept() cannot wait for
        its own later ticket (the turn is still its own): the nested batch is
        parked in a thread-local list and delivered by the outer call after
        the running batch, when its turn comes. Nothing waits on a ticket
        while holding the turn, so re-entrancy cannot deadlock.
        """
        if ticket is None:
            return
        local = self._local
        if getattr(local, "delivering", False):
            local.deferred.append((ticket, events))
            return
        local.delivering = True
        local.deferred = []
        pending: deque[tuple[int, list[_Event]]] = deque([(ticket, events)])
        try:
            while pending:
                turn, batch = pending[0]
                self._await_turn(turn)
                try:
                    for event in batch:
                        self._call(event)
                finally:
                    pending.popleft()
                    self._pass_turn()
                pending.extend(local.deferred)
                local.deferred.clear()
        finally:
            local.delivering = False
            pending.extend(local.deferred)
            local.deferred.clear()
            if pending:
                # Only after a BaseException (KeyboardInterrupt, SystemExit)
                # escaped a callback: give up these batches but pass their
                # turns on, or every other thread would wait forever.
                logger.error(
                    "resequencer %r: %d release batch(es) not delivered after an interruption",
                    self._name,
                    len(pending),
                )
                for turn, _ in pending:
                    self._await_turn(turn)
                    self._pass_turn()

    def _await_turn(self, ticket: int) -> None:
        with self._turn:
            self._turn.wait_for(lambda: self._serving == ticket)

    def _pass_turn(self) -> None:
        with self._turn:
            self._serving += 1
            self._turn.notify_all()

    def _call(self, event: _Event) -> None:
        if isinstance(event, _Release):
            self._guarded(self._on_release, "on_release", event.seq, event.payload, event.cid)
        elif isinstance(event, _Gap):
            for skipped in range(event.first, event.stop):
                self._guarded(self._on_gap, "on_gap", skipped, event.cid)
        else:
            self._guarded(self._on_late, "on_late", event.seq, event.payload, event.cid)

    def _guarded(self, callback: Callable[..., Any] | None, label: str, *args: Any) -> None:
        try:
            callback(*args)  # type: ignore[misc]
        except Exception:  # past it (SystemExit, Ctrl-C): _sweep_and_go_on decides
            logger.exception(
                "resequencer %r: %s raised for seq %r (correlation id %r)",
                self._name,
                label,
                args[0],
                args[-1],
            )


class _Stream:
    """One correlation id's state: the last released number, the numbers at or below
    it to release again (their source was sent back) and the held messages."""

    __slots__ = ("again", "again_heap", "heap", "held", "last", "numbered")

    def __init__(self, start: int | None) -> None:
        self.last: int | None = None if start is None else start - 1
        self.heap: list[int] = []
        # seq -> (payload, arrival time, origin)
        self.held: dict[int, tuple[Any, float, tuple[Hashable, int] | None]] = {}
        self.again: set[int] = set()
        self.again_heap: list[int] = []  # the same numbers, lowest first
        self.numbered = False  # whether it released a number since it (re)started

    def expected(self) -> int | None:
        """The number released next without waiting (None: not known yet)."""
        if self.again:
            heap = self.again_heap
            while heap[0] not in self.again:  # released with a zero hold window
                heapq.heappop(heap)
            return heap[0]
        return None if self.last is None else self.last + 1

    def released(self, seq: int) -> bool:
        """Whether ``seq`` was released (and is not to be released again)."""
        return self.last is not None and seq <= self.last and seq not in self.again

    def is_late(self, seq: int) -> bool:
        """Already released (and not to be released again), or already held."""
        return seq in self.held or self.released(seq)

    def release_again(self, numbers: list[int]) -> bool:
        """Release ``numbers`` (released before) again; whether any is waited for now."""
        added = False
        for seq in numbers:
            if self.released(seq):
                self.again.add(seq)
                heapq.heappush(self.again_heap, seq)
                added = True
        return added

    def keep_released(self, numbers: list[int]) -> bool:
        """``numbers`` (to release again) do not come again: they stay released.
        Returns whether any was waited for."""
        again = self.again
        waited = [seq for seq in numbers if seq in again]
        again.difference_update(waited)  # (the heap drops them lazily: see expected)
        return bool(waited)

    def skipped_by(self, seq: int, *, keep_again: bool = False) -> list[tuple[int, int]]:
        """Release ``seq`` (the head): the ranges ``[first, stop)`` its release skips
        (numbers to release again below it, then those between the last and it).
        ``keep_again`` (a zero hold window: no order is promised) skips none of the
        numbers to release again: each is released whenever it comes."""
        skipped: list[tuple[int, int]] = []
        again, heap = self.again, self.again_heap
        if keep_again:
            again.discard(seq)  # (the heap drops it lazily: see expected)
        else:
            while heap and heap[0] <= seq:
                number = heapq.heappop(heap)
                if number in again:  # (else it stayed released: see keep_released)
                    again.discard(number)
                    if number < seq:
                        skipped.append((number, number + 1))
        if self.last is not None and seq > self.last + 1:
            skipped.append((self.last + 1, seq))
        self.last = seq if self.last is None else max(self.last, seq)
        self.numbered = True
        return skipped

    def start_afresh(self, start: int | None) -> None:
        """Number afresh (what was released is forgotten); what is held stays."""
        self.last = None if start is None else start - 1
        self.again.clear()
        self.again_heap.clear()
        self.numbered = False


class _Release(NamedTuple):
    seq: int
    payload: Any
    cid: Hashable | None


class _Gap(NamedTuple):
    """Skipped numbers ``first .. stop - 1``, expanded to one call each on delivery."""

    first: int
    stop: int
    cid: Hashable | None


class _Late(NamedTuple):
    seq: int
    payload: Any
    cid: Hashable | None


_Event = _Release | _Gap | _Late


def _check_settings(
    name: object, timeout_ms: object, capacity: object, reap_interval_ms: object, start: object
) -> None:
    """Validate the non-callback settings shared by the class and its actor."""
    if not isinstance(name, str):
        raise InvalidTypeError(f"name must be a str, got {type(name).__name__}")
    if not name:
        raise InvalidArgumentError("name must not be empty")
    check_int(timeout_ms, "timeout_ms", minimum=0, maximum=MAX_MILLISECONDS)
    check_int(capacity, "capacity", minimum=0)
    check_int(reap_interval_ms, "reap_interval_ms", minimum=1, maximum=MAX_MILLISECONDS)
    if start is not None:
        check_int(start, "start")


def _check_seq(seq: object) -> None:
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise InvalidTypeError(f"seq must be an int, got {type(seq).__name__}")
    if not -MAX_COUNT - 1 <= seq <= MAX_COUNT:  # as ``start`` (check_int's bound)
        check_int(seq, "seq")


def _check_correlation_id(correlation_id: object) -> None:
    try:
        hash(correlation_id)
    except TypeError:
        raise InvalidTypeError(
            f"correlation_id must be hashable, got {type(correlation_id).__name__}"
        ) from None
