"""The ring of one channel: Hazelcast Ringbuffer semantics over segments, no Ray.

Storage is a run of *segments*, one per append: a segment keeps the batch as
it arrived (a :class:`raytopic.core.payloads.Payload`: pickled values in
one buffer, or an Arrow record batch) and one time stamp for the whole
batch. That keeps a million small elements cheap in memory (a thousand
buffers, no per-element object) and makes reading a range a matter of
slicing a few payloads.

(The user's handle to one channel is :class:`raytopic.ringbuffer.Ringbuffer`;
this is what the channel actor keeps behind it.)

Sequences only grow. Empty: ``tail == head - 1`` (a fresh buffer has
``head == 0, tail == -1``). Every sequence from head to tail is stored.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass

from raytopic.core.payloads import Payload

__all__ = ["Run", "SegmentRing"]


@dataclass(slots=True)
class _Segment:
    first: int
    """Sequence of the payload's first value."""
    stamp: float
    """Append time of the whole batch, seconds since the epoch."""
    payload: Payload


@dataclass(frozen=True, slots=True)
class Run:
    """Consecutive elements read from one segment: they share one time stamp."""

    first: int
    """Sequence of the payload's first value."""
    stamp: float
    """Append time of these elements."""
    payload: Payload

    @property
    def last(self) -> int:
        """Sequence of the last value."""
        return self.first + len(self.payload) - 1


class SegmentRing:
    """A bounded, sequence-addressed log with capacity and TTL eviction.

    **Ordering**: sequences are assigned in append order, time stamps never
    decrease (a clock step backwards is absorbed), so a time lookup is a
    binary search.

    **Overflow**: ``append`` takes a policy: ``"overwrite"`` evicts the oldest,
    ``"fail"`` refuses the whole batch (returns -1) when it does not fit. The
    channel actor builds ``"block"`` on top of ``room()``.

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
        self._expired_below = first_sequence
        self._last_stamp = 0.0

    # -- sizes ---------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Most elements held at once."""
        return self._capacity

    @property
    def head(self) -> int:
        """Sequence of the oldest stored element (``tail + 1`` when empty)."""
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
        return self._tail - self._head + 1

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
        self._segments.append(_Segment(first, stamp, payload))
        self._firsts.append(first)
        self._tail += count
        if self._tail - self._head + 1 > self._capacity:
            self.evict_to(self._tail + 1 - self._capacity)
        return first

    def skip_to(self, sequence: int) -> None:
        """Drop everything and continue at ``sequence`` (>= tail + 1): the positions
        in between are not to be given to any element."""
        self.evict_to(self._tail + 1)
        self._head = max(sequence, self._tail + 1)
        self._tail = self._head - 1

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
        dropped = sequence - self._head
        self._head = sequence
        segments = self._segments
        lo = self._lo
        while lo < len(segments):
            segment = segments[lo]
            if segment.first + len(segment.payload) > sequence:
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
        while lo < len(segments) and segments[lo].stamp <= cutoff:
            lo += 1
        end = segments[lo].first if lo < len(segments) else self._tail + 1
        self._expired_below = max(self._expired_below, end)
        return self.evict_to(end)

    # -- reading -------------------------------------------------------------

    def read(self, start: int, max_count: int) -> list[Run]:
        """Read up to ``max_count`` elements from ``start`` (``head <= start``).

        Returns runs in sequence order; fewer elements (or none) when the tail
        is reached.
        """
        if start < self._head:
            raise IndexError(f"sequence {start} is below the head {self._head}")
        end = min(self._tail + 1, start + max_count)
        runs: list[Run] = []
        if start >= end:
            return runs
        index = self._segment_index(start)
        segments = self._segments
        sequence = start
        while sequence < end:
            segment = segments[index]
            offset = sequence - segment.first
            stop = min(len(segment.payload), end - segment.first)
            runs.append(Run(sequence, segment.stamp, segment.payload.slice(offset, stop)))
            sequence = segment.first + stop
            index += 1
        return runs

    def get(self, sequence: int) -> Run:
        """The element stored at ``sequence`` (head <= sequence <= tail), as a run of one."""
        if not self._head <= sequence <= self._tail:
            raise IndexError(f"sequence {sequence} is not stored")
        segment = self._segments[self._segment_index(sequence)]
        offset = sequence - segment.first
        return Run(sequence, segment.stamp, segment.payload.slice(offset, offset + 1))

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
        if lo >= len(segments):
            return self._tail + 1
        return max(segments[lo].first, self._head)

    def _segment_index(self, sequence: int) -> int:
        return bisect.bisect_right(self._firsts, sequence, self._lo) - 1
