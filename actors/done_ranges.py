"""The positions above an owned cursor's commit that need no commit any more. No Ray.

A position is *done* when its reader acknowledged it alone (``Element.ack``: a task
fanned out of a member finished it, in any order), when a committed transaction
consumed it above the commit it made (``ConsumedCommit.done``: a resequencing
member's commit stops below an element not handed over yet), or when it was passed
over without being delivered (a filter's misses, a damaged record; a seek forward's
range is not done, see ``Cursor.unread``). The
commit advances over the done positions just above it, so it covers a contiguous
prefix of finished work, as Pulsar's individual acknowledgement and Confluent's
parallel consumer keep it: an element whose task failed is never passed over, and
is delivered again after a restart. Done positions are not delivered again.

The ranges are bounded (:data:`DONE_RANGES_KEPT`): past the bound the highest ones
are forgotten. What they held counts as not done: delivered again after a restart
(at least once), never skipped. A committed transaction's done positions are the
exception (*firm*): forgetting them would deliver again what the transaction wrote
its outputs for (a duplicate), so no range at or below the highest of them is
forgotten. They have no bound of their own: two runs of them are apart by a
position the transaction did not consume (an element a resequencing member held
back, until its hold window ends), and they lie between the group's commit and the
channel's tail (a commit left below the ring's head moves up to it), so they are at
most half the ring's capacity.
"""

from __future__ import annotations

import bisect

__all__ = ["DONE_RANGES_KEPT", "DoneRanges"]

DONE_RANGES_KEPT = 1024
"""Disjoint ranges a cursor keeps (a reader that acks out of order, or filters,
without its commit advancing would otherwise grow them without end)."""


class DoneRanges:
    """Sorted, disjoint, non-adjacent ``(first, last)`` ranges of done positions."""

    __slots__ = ("firm_to", "ranges")

    def __init__(self, ranges: list[tuple[int, int]] | None = None, firm_to: int = -1) -> None:
        self.ranges: list[tuple[int, int]] = ranges or []
        self.firm_to = firm_to
        """The highest firm position (-1: none): no range at or below it is forgotten."""

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DoneRanges):
            return self.ranges == other.ranges
        return self.ranges == other

    def __repr__(self) -> str:
        return f"DoneRanges({self.ranges})"

    def add(self, first: int, last: int, *, firm: bool = False) -> None:
        """Mark ``first..last`` done (nothing when ``first > last``); ``firm``: a committed
        transaction consumed it (never forgotten: see the module's docstring)."""
        if first > last:
            return
        if firm:
            self.firm_to = max(self.firm_to, last)
        ranges = self.ranges
        if ranges and ranges[-1][1] + 1 < first:  # the common case: above every range
            ranges.append((first, last))
        else:
            # The ranges that touch or overlap first..last merge with it.
            start = bisect.bisect_left(ranges, first - 1, key=lambda r: r[1])
            stop = bisect.bisect_right(ranges, last + 1, key=lambda r: r[0])
            if start < stop:
                first = min(first, ranges[start][0])
                last = max(last, ranges[stop - 1][1])
            ranges[start:stop] = [(first, last)]
        # Past the bound, forget the highest ranges above every firm one (at least
        # once). Those at or below it stay, the others there too: they fill gaps
        # between the firm ones.
        while len(ranges) > DONE_RANGES_KEPT and ranges[-1][0] > self.firm_to:
            del ranges[-1]

    def advance(self, committed: int, read_to: int | None = None) -> int:
        """The commit moved over the done range right after ``committed`` (if any, and
        if it ends at or below ``read_to``: the read position passed it); ranges at or
        below it are dropped. Returns the new commit.

        Why ``read_to``: done positions ahead of the read position (a reader sent back
        to its commit, or a restarted channel's group, reads again before positions a
        committed transaction consumed) are passed over by its next take, which says
        so (``Delivery.passed``); a commit moved past the read position would leave it
        below what is kept (the elements up to the commit are dropped)."""
        ranges = self.ranges
        while ranges and ranges[0][0] <= committed + 1:
            last = ranges[0][1]
            if last > committed and read_to is not None and last > read_to:
                break
            committed = max(committed, last)
            del ranges[0]
        return committed

    def forget_above(self, sequence: int) -> None:
        """Forget what is done above ``sequence`` (a seek back reads it again)."""
        self.firm_to = min(self.firm_to, sequence)
        ranges = self.ranges
        while ranges and ranges[-1][1] > sequence:
            first, _ = ranges.pop()
            if first <= sequence:
                ranges.append((first, sequence))
                break

    def count(self, first: int, last: int) -> int:
        """How many positions in ``first..last`` are done."""
        return sum(
            min(end, last) - max(start, first) + 1
            for start, end in self.ranges
            if end >= first and start <= last
        )

    def range_at(self, sequence: int) -> tuple[int, int] | None:
        """The done range holding ``sequence``, or else the first above it (None: none)."""
        ranges = self.ranges
        index = bisect.bisect_left(ranges, sequence, key=lambda r: r[1])
        return ranges[index] if index < len(ranges) else None

    def to_state(self) -> list[list[int]]:
        """JSON-ready ranges."""
        return [[first, last] for first, last in self.ranges]

    @classmethod
    def from_state(cls, state: list[list[int]] | None, firm_to: int = -1) -> DoneRanges:
        """The ranges a store kept (None: a cursor saved before done positions) and
        :attr:`firm_to` (kept beside them)."""
        return cls([(int(first), int(last)) for first, last in state or ()], firm_to)
