"""The ring of one channel: Hazelcast Ringbuffer semantics over segments, no Ray.

Storage is a run of *segments*, one per append: a segment keeps the batch as
it arrived (a :class:`raytopic.core.payloads.Payload`: pickled values in
one buffer, or an Arrow record batch) and one time stamp for the whole
batch. That keeps a million small elements cheap in memory (a thousand
buffers, no per-element object) and makes reading a range a matter of
slicing a few payloads.

(The user's handle to one channel is :class:`raytopic.client.ringbuffer.Ringbuffer`;
this is what the channel actor keeps behind it.)

Sequences only grow. Empty: ``tail == head - 1`` (a fresh buffer has
``head == 0, tail == -1``). Every sequence from head to tail is stored, but on
a compacted topic: there compaction (:meth:`SegmentRing.compact`) replaces
segments with *gapped* ones, which hold fewer elements and list each one's
position and time stamp. A position between head and tail that no segment
holds was compacted away: a read from it gets the next element, ``size`` and
the capacity count the elements held, and positions never move.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from raytopic.core.payloads import DamagedElements, Payload, join_payloads, mergeable
from raytopic.core.protocol import Chunk

__all__ = ["RingPlan", "RingSnapshot", "Run", "SegmentRing", "plan_compaction"]


@dataclass(slots=True)
class _Segment:
    first: int
    """Sequence of the payload's first value."""
    stamp: float
    """Append time of the whole batch (a gapped segment's: of its first element)."""
    payload: Payload
    sequences: np.ndarray | None = None
    """Each element's sequence (a gapped segment), or None: ``first`` on, one by one."""
    stamps: np.ndarray | None = None
    """Each element's append time (a gapped segment), or None: all ``stamp``."""

    @property
    def last(self) -> int:
        if self.sequences is None:
            return self.first + len(self.payload) - 1
        return int(self.sequences[-1])

    def index_of(self, sequence: int) -> int:
        """The index of the first element at or after ``sequence``."""
        if self.sequences is None:
            return max(0, sequence - self.first)
        return int(np.searchsorted(self.sequences, sequence))

    def run(self, start: int, stop: int) -> Run:
        """Elements ``start`` to ``stop - 1`` as a run."""
        payload = self.payload.slice(start, stop)
        if self.sequences is None:
            return Run(self.first + start, self.stamp, payload)
        sequences = self.sequences[start:stop]
        stamps = None if self.stamps is None else self.stamps[start:stop]
        stamp = self.stamp if stamps is None else float(stamps[0])
        return Run(int(sequences[0]), stamp, payload, sequences, stamps)


@dataclass(frozen=True, slots=True)
class Run:
    """Elements read from one segment, in sequence order: consecutive ones with one
    time stamp, or (from a gapped segment) at the sequences and stamps listed."""

    first: int
    """Sequence of the payload's first value."""
    stamp: float
    """Append time of these elements (the first one's, with ``stamps``)."""
    payload: Payload
    sequences: np.ndarray | None = None
    """Each element's sequence, or None: ``first`` on, one by one."""
    stamps: np.ndarray | None = None
    """Each element's append time, or None: all ``stamp``."""

    @property
    def last(self) -> int:
        """Sequence of the last value."""
        if self.sequences is None:
            return self.first + len(self.payload) - 1
        return int(self.sequences[-1])

    def sequence_at(self, index: int) -> int:
        """Sequence of the ``index``-th value."""
        return self.first + index if self.sequences is None else int(self.sequences[index])

    def sequence_list(self) -> list[int]:
        """Each value's sequence."""
        if self.sequences is None:
            return list(range(self.first, self.first + len(self.payload)))
        return self.sequences.tolist()

    def chunk(self, counts: np.ndarray | None = None) -> Chunk:
        """These elements as they travel to a reader (``counts``: their delivery counts)."""
        return Chunk(self.first, self.stamp, self.payload, self.sequences, counts, self.stamps)

    def part(self, start: int, stop: int) -> Run:
        """Values ``start`` to ``stop - 1`` of this run."""
        payload = self.payload.slice(start, stop)
        if self.sequences is None:
            return Run(self.first + start, self.stamp, payload)
        stamps = None if self.stamps is None else self.stamps[start:stop]
        stamp = self.stamp if stamps is None else float(stamps[0])
        return Run(int(self.sequences[start]), stamp, payload, self.sequences[start:stop], stamps)


class SegmentRing:
    """A bounded, sequence-addressed log with capacity and TTL eviction.

    **Ordering**: sequences are assigned in append order, time stamps never
    decrease (a clock step backwards is absorbed), so a time lookup is a
    binary search.

    **Overflow**: ``append`` takes a policy: ``"overwrite"`` evicts the oldest,
    ``"fail"`` refuses the whole batch (returns -1) when it does not fit. The
    channel actor builds ``"block"`` on top of ``room()``. Capacity counts the
    elements held (on a compacted topic, fewer than ``tail - head + 1``).

    Args:
        capacity: Most elements held at once (>= 1).
        ttl: Seconds an element lives, or None.
        clock: Seconds since the epoch; injectable for tests.
        first_sequence: Sequence of the first element (a store continues after
            its largest sequence).
    """

    def __init__(
        self,
        capacity: int,
        ttl: float | None = None,
        *,
        clock: Callable[[], float] = time.time,
        first_sequence: int = 0,
    ) -> None:
        self._capacity = capacity
        self._ttl = ttl
        self._clock = clock
        self._segments: list[_Segment] = []
        self._firsts: list[int] = []  # parallel to _segments, for bisect
        self._lo = 0  # index of the oldest live segment
        self._head = first_sequence
        self._tail = first_sequence - 1
        self._held = 0  # elements at sequences head..tail (compaction leaves gaps)
        self._expired_below = first_sequence
        self._last_stamp = 0.0
        self._newest: _Segment | None = None  # the last append's, kept after its removal

    # -- sizes ---------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Most elements held at once."""
        return self._capacity

    @property
    def head(self) -> int:
        """Sequence of the oldest stored element (``tail + 1`` when empty; on a
        compacted topic the position may have been compacted away)."""
        self.expire()
        return self._head

    @property
    def tail(self) -> int:
        """Sequence of the newest element (``head - 1`` when empty)."""
        return self._tail

    @property
    def size(self) -> int:
        """Elements stored now."""
        self.expire()
        return self._held

    def room(self) -> int:
        """Elements that can be appended without evicting any."""
        return self._capacity - self.size

    @property
    def expired_below(self) -> int:
        """Every element below this sequence that the TTL could drop is dropped: a
        store may still hold such an element, but for readers it is gone."""
        self.expire()
        return self._expired_below

    # -- writing -------------------------------------------------------------

    def append(self, payload: Payload, overwrite: bool, stamp: float | None = None) -> int:
        """Append a batch; return the sequence of its first element, or -1.

        Args:
            payload: The elements, in order. Empty: nothing changes and the
                current tail is returned.
            overwrite: Evict the oldest elements to make room. Otherwise a
                batch that does not fit whole is refused (-1), never cut.
            stamp: The batch's time stamp (a store's, on recovery); default: now.
        """
        count = len(payload)
        if count == 0:
            return self._tail
        if not overwrite and count > self.room():
            return -1
        stamp = max(self._clock() if stamp is None else stamp, self._last_stamp)
        self._last_stamp = stamp
        first = self._tail + 1
        self._newest = _Segment(first, stamp, payload)
        self._segments.append(self._newest)
        self._firsts.append(first)
        self._tail += count
        self._held += count
        if self._held > self._capacity:
            self.evict_to(self._after(self._held - self._capacity))
        return first

    def append_at(
        self,
        payload: Payload,
        first: int,
        stamp: float,
        sequences: np.ndarray | None = None,
        stamps: np.ndarray | None = None,
    ) -> None:
        """Append elements as a store keeps them (on recovery): from ``first`` (after
        the tail; the positions in between were compacted away), one by one, or at
        ``sequences`` with ``stamps`` (a compacted record). Evicts the oldest past
        the capacity."""
        if not len(payload):
            return
        if first <= self._tail:
            raise ValueError(f"sequence {first} is not after the tail {self._tail}")
        last = first + len(payload) - 1 if sequences is None else int(sequences[-1])
        self._last_stamp = max(self._last_stamp, stamp if stamps is None else float(stamps[-1]))
        self._newest = _Segment(first, stamp, payload, sequences, stamps)
        self._segments.append(self._newest)
        self._firsts.append(first)
        self._tail = last
        self._held += len(payload)
        if self._held > self._capacity:
            self.evict_to(self._after(self._held - self._capacity))

    def newest_element(self) -> tuple[int, float, Payload] | None:
        """The last element appended in this process (its sequence, stamp and value),
        even once it was removed (committed by every group of a topic that does not
        retain, expired, purged): what a read with nothing in range learns its
        columns from. The last batch stays referenced until the next append; None
        before the first append (a restarted channel's recovered ones count)."""
        newest = self._newest
        if newest is None:
            return None
        count = len(newest.payload)
        last = newest.first + count - 1 if newest.sequences is None else int(newest.sequences[-1])
        stamp = newest.stamp if newest.stamps is None else float(newest.stamps[-1])
        return last, stamp, newest.payload.slice(count - 1, count)

    def stamp_of_last_append(self) -> float:
        """Time stamp given to the most recent append."""
        return self._last_stamp

    def next_stamp(self) -> float:
        """The stamp an append made now would get (never below the last one)."""
        return max(self._clock(), self._last_stamp)

    def evict_to(self, sequence: int) -> int:
        """Drop every element below ``sequence``; return how many were dropped."""
        sequence = min(sequence, self._tail + 1)
        if sequence <= self._head:
            return 0
        dropped = self.count(self._head, sequence - 1)
        self._head = sequence
        self._held -= dropped
        segments = self._segments
        lo = self._lo
        while lo < len(segments):
            segment = segments[lo]
            if segment.last >= sequence:
                break
            segments[lo] = None  # type: ignore[call-overload]  # free the payloads now
            lo += 1
        self._lo = lo
        if lo > 64 and lo * 2 > len(segments):
            del segments[:lo]
            del self._firsts[:lo]
            self._lo = 0
        return dropped

    def expire(self) -> int:
        """Drop elements older than the TTL; return how many were dropped."""
        if self._ttl is None or self._head > self._tail:
            return 0
        cutoff = self._clock() - self._ttl
        segments = self._segments
        lo = self._lo
        if segments[lo].stamp > cutoff:
            return 0
        while lo < len(segments) and _last_stamp(segments[lo]) <= cutoff:
            lo += 1
        if lo == len(segments):
            end = self._tail + 1
        else:
            segment = segments[lo]
            if segment.stamps is not None and segment.stamp <= cutoff:
                index = int(np.searchsorted(segment.stamps, cutoff, side="right"))
                end = int(segment.sequences[index])  # type: ignore[index]
            else:
                end = segment.first
        self._expired_below = max(self._expired_below, end)
        return self.evict_to(end)

    # -- reading -------------------------------------------------------------

    def read(self, start: int, max_count: int) -> list[Run]:
        """Read up to ``max_count`` elements from ``start`` (``head <= start``): the
        first ones at or after it (a position compacted away reads as the next).

        Returns runs in sequence order; fewer elements (or none) when the tail
        is reached.
        """
        if start < self._head:
            raise IndexError(f"sequence {start} is below the head {self._head}")
        runs: list[Run] = []
        if start > self._tail or max_count <= 0:
            return runs
        segments = self._segments
        index = max(self._segment_index(start), self._lo)
        left = max_count
        while left > 0 and index < len(segments):
            segment = segments[index]
            index += 1
            count = len(segment.payload)
            offset = segment.index_of(start)
            if offset >= count:
                continue
            stop = min(count, offset + left)
            runs.append(segment.run(offset, stop))
            left -= stop - offset
        return runs

    def get(self, sequence: int) -> Run:
        """The element stored at ``sequence`` (head <= sequence <= tail), as a run of one.

        Raises:
            IndexError: nothing is stored there (out of range, or compacted away).
        """
        if not self._head <= sequence <= self._tail:
            raise IndexError(f"sequence {sequence} is not stored")
        segment = self._segments[max(self._segment_index(sequence), self._lo)]
        offset = segment.index_of(sequence)
        if offset >= len(segment.payload) or (
            segment.sequences is not None and segment.sequences[offset] != sequence
        ):
            raise IndexError(f"sequence {sequence} was compacted away")
        return segment.run(offset, offset + 1)

    def count(self, first: int, last: int) -> int:
        """How many elements are held at sequences ``first..last`` (the positions
        compaction left empty not counted)."""
        first, last = max(first, self._head), min(last, self._tail)
        if first > last:
            return 0
        segments = self._segments
        index = max(self._segment_index(first), self._lo)
        held = 0
        while index < len(segments):
            segment = segments[index]
            if segment.first > last:
                break
            if segment.sequences is None:
                end = segment.first + len(segment.payload)
                held += max(0, min(end, last + 1) - max(segment.first, first))
            else:
                low = np.searchsorted(segment.sequences, first)
                high = np.searchsorted(segment.sequences, last, side="right")
                held += int(high - low)
            index += 1
        return held

    def first_after(self, stamp: float) -> int:
        """Sequence of the first stored element stamped strictly after ``stamp``.

        ``tail + 1`` when none is.
        """
        self.expire()
        segments = self._segments
        lo, hi = self._lo, len(segments)
        while lo < hi:
            mid = (lo + hi) // 2
            if segments[mid].stamp <= stamp:
                lo = mid + 1
            else:
                hi = mid
        if lo > self._lo:  # the segment before may hold later stamps of its own
            before = segments[lo - 1]
            if before.stamps is not None and before.stamps[-1] > stamp:
                index = int(np.searchsorted(before.stamps, stamp, side="right"))
                return max(int(before.sequences[index]), self._head)  # type: ignore[index]
        if lo >= len(segments):
            return self._tail + 1
        return max(segments[lo].first, self._head)

    def _segment_index(self, sequence: int) -> int:
        return bisect.bisect_right(self._firsts, sequence, self._lo) - 1

    def _after(self, count: int) -> int:
        """The sequence just after the oldest ``count`` elements held."""
        segments = self._segments
        index = self._lo
        while index < len(segments):
            segment = segments[index]
            index += 1
            start = segment.index_of(self._head)
            held = len(segment.payload) - start
            if count < held:
                at = start + count
                return (
                    segment.first + at if segment.sequences is None else int(segment.sequences[at])
                )
            count -= held
        return self._tail + 1

    # -- compaction ------------------------------------------------------------

    def snapshot(self, stop: int) -> RingSnapshot:
        """The segments holding elements below ``stop``, as they are now: what a
        compaction plans from (in another thread: segments never change, the
        ring only replaces them, see :meth:`install`)."""
        segments = self._segments
        chosen = []
        for index in range(self._lo, len(segments)):
            segment = segments[index]
            if segment.first >= stop:
                break
            chosen.append(segment)
        return RingSnapshot(self._head, tuple(chosen))

    def install(self, plan: RingPlan) -> bool:
        """Put ``plan``'s segments in place of those it replaces; False (nothing
        changes) when those are no longer the ring's oldest (evicted meanwhile)."""
        old = plan.snapshot.segments
        if not old or plan.snapshot.head != self._head:
            return False
        segments, lo = self._segments, self._lo
        if len(segments) - lo < len(old) or not all(
            segments[lo + index] is segment for index, segment in enumerate(old)
        ):
            return False
        new = list(plan.segments)
        segments[lo : lo + len(old)] = new
        self._firsts[lo : lo + len(old)] = [segment.first for segment in new]
        self._held -= plan.removed
        return True


@dataclass(frozen=True, slots=True)
class RingSnapshot:
    """A ring's oldest segments at one moment (see :meth:`SegmentRing.snapshot`)."""

    head: int
    segments: tuple[_Segment, ...]

    def runs(self) -> list[Run]:
        """Every element held (at or after the head), as runs."""
        runs = []
        for segment in self.segments:
            start = segment.index_of(self.head)
            if start < len(segment.payload):
                runs.append(segment.run(start, len(segment.payload)))
        return runs


@dataclass(frozen=True, slots=True)
class RingPlan:
    """What a compaction puts in place of a snapshot's segments."""

    snapshot: RingSnapshot
    segments: tuple[_Segment, ...]
    removed: int
    """Elements the plan drops."""


MERGED_ELEMENTS = 4096
"""Most elements of one segment a compaction makes (of the survivors of several)."""

SMALL_SEGMENT = 64
"""A segment that keeps every element is still merged with its neighbours below this
many (appends of one value each would otherwise stay one segment each)."""


def plan_compaction(snapshot: RingSnapshot, keep: Callable[[np.ndarray], np.ndarray]) -> RingPlan:
    """The segments that replace ``snapshot``'s: each one's elements for which ``keep``
    (given their sequences) is True, survivors of neighbouring segments merged (up
    to ``MERGED_ELEMENTS``, payloads of one kind); a segment that keeps every element
    stays as it is, unless small. Pure: it only reads the snapshot."""
    out: list[_Segment] = []
    parts: list[tuple[Payload, np.ndarray, np.ndarray]] = []
    removed = 0

    def flush() -> None:
        if parts:
            out.append(_merged(parts))
            parts.clear()

    for segment in snapshot.segments:
        count = len(segment.payload)
        start = segment.index_of(snapshot.head)
        if start >= count:
            continue
        sequences = (
            np.arange(segment.first + start, segment.first + count, dtype=np.int64)
            if segment.sequences is None
            else segment.sequences[start:]
        )
        mask = np.asarray(keep(sequences), dtype=bool)
        kept = int(mask.sum())
        removed += len(sequences) - kept
        if kept == len(sequences) and (
            count >= SMALL_SEGMENT or isinstance(segment.payload, DamagedElements)
        ):
            flush()
            out.append(segment)
            continue
        if not kept:
            continue
        chosen = np.flatnonzero(mask) + start
        payload = (
            segment.payload.slice(start, count)
            if kept == len(sequences)
            else (segment.payload.take(chosen.tolist()))
        )
        stamps = np.full(kept, segment.stamp) if segment.stamps is None else segment.stamps[chosen]
        if parts and (
            not mergeable(parts[-1][0], payload)
            or sum(len(part[0]) for part in parts) + kept > MERGED_ELEMENTS
        ):
            flush()
        parts.append((payload, sequences[mask], stamps))
    flush()
    return RingPlan(snapshot, tuple(out), removed)


def _merged(parts: list[tuple[Payload, np.ndarray, np.ndarray]]) -> _Segment:
    """One segment of ``parts``' elements (gapped, unless they turn out consecutive
    with one stamp)."""
    payload = join_payloads([part[0] for part in parts])
    sequences = np.concatenate([part[1] for part in parts])
    stamps = np.concatenate([part[2] for part in parts])
    first = int(sequences[0])
    consecutive = int(sequences[-1]) - first + 1 == len(sequences)
    same_stamp = bool((stamps == stamps[0]).all())
    if consecutive and same_stamp:
        return _Segment(first, float(stamps[0]), payload)
    return _Segment(first, float(stamps[0]), payload, sequences, None if same_stamp else stamps)


def _last_stamp(segment: _Segment) -> float:
    return segment.stamp if segment.stamps is None else float(segment.stamps[-1])
