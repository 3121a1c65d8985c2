"""Damaged stored records: the one rule every reader of a channel follows. No Ray.

A stored record whose checksum fails costs its own elements only
(docs/guides/durability.md, Restarts).
A recovered channel keeps their positions in its ring as a run of
:class:`~raytopic.core.payloads.DamagedElements` (or, below the ring's head,
as a gap in the store that this map names), so every intact record before and
after stays readable at its positions. A read that reaches a damaged range:

- stops before it, delivering what comes first;
- or, when the read starts there, delivers nothing: the reader is moved past
  the whole range and gets one ``DataLossError`` naming it, then reads on.

Every reader applies :meth:`DamageMap.split` to what it read; what moving past
means is the reader's own (a cursor passes over the range, a shared group
marks it done, a ring buffer or range read is told where to go on).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from raytopic.actors.segment_ring import Run
from raytopic.core.errors import DataLossError
from raytopic.core.payloads import DamagedElements

__all__ = ["DamageMap"]


class DamageMap:
    """The damaged ranges ``(first, last)`` of one channel's store, sorted.

    Args:
        ranges: Ranges found when the store was opened (in any order; touching
            or overlapping ranges are joined).
    """

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._ranges: list[tuple[int, int]] = []
        for first, last in sorted(ranges):
            self.add(first, last)

    @property
    def ranges(self) -> list[tuple[int, int]]:
        """Every damaged range, ascending."""
        return list(self._ranges)

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def add(self, first: int, last: int) -> None:
        """Record ``first..last`` as damaged."""
        if first > last:
            return
        ranges = self._ranges
        index = bisect.bisect_left(ranges, (first, last))
        ranges.insert(index, (first, last))
        joined: list[tuple[int, int]] = []
        for start, end in ranges:
            if joined and start <= joined[-1][1] + 1:
                joined[-1] = (joined[-1][0], max(joined[-1][1], end))
            else:
                joined.append((start, end))
        self._ranges = joined

    def at(self, sequence: int) -> tuple[int, int] | None:
        """The damaged range holding ``sequence``, or None."""
        index = bisect.bisect_right(self._ranges, (sequence, float("inf"))) - 1
        if index >= 0 and self._ranges[index][1] >= sequence:
            return self._ranges[index]
        return None

    def first_from(self, sequence: int) -> tuple[int, int] | None:
        """The first damaged range that holds ``sequence`` or lies after it."""
        for first, last in self._ranges:
            if last >= sequence:
                return first, last
        return None

    def overlapping(self, first: int, last: int) -> list[tuple[int, int]]:
        """Damaged ranges with a sequence in ``first..last``."""
        return [(a, b) for a, b in self._ranges if a <= last and b >= first]

    def split(self, runs: list[Run]) -> tuple[list[Run], tuple[int, int] | None]:
        """The rule: the runs a reader may use (those before the first damaged one),
        and the whole damaged range that stops it (None: no damage was read)."""
        for index, run in enumerate(runs):
            if isinstance(run.payload, DamagedElements):
                return runs[:index], self.at(run.first) or (run.first, run.last)
        return runs, None

    @staticmethod
    def error(channel: int, epoch: int, lost: tuple[int, int]) -> DataLossError:
        """The one ``DataLossError`` a reader gets for the damaged range ``lost``: it
        names the range and where reading goes on."""
        first, last = lost
        return DataLossError(
            f"channel {channel}: stored elements {first}..{last} were damaged on disk "
            f"(checksum mismatch) and are lost; continuing from {last + 1}",
            head_sequence=last + 1,
            channel=channel,
            old_epoch=epoch,
            new_epoch=epoch,
            lost=lost,
        )
