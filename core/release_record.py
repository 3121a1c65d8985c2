"""Which numbers a resequencer released lately, and where each came from. No Ray.

A resequencing subscriber's elements come from channels (*sources*), each read in
position order. When a source is sent back (a seek, a group reset, an aborted
transaction's rewind), everything it delivered from the position it was sent back to
comes again, and the resequencer must release those numbers again instead of dropping
them as late. :class:`ReleaseRecord` says which numbers, per correlation id: those it
released from that source at or after that position. It remembers the latest
:data:`RELEASES_KEPT` releases; a source sent back further than that is told so
(``None``), and its resequencer starts its numbering afresh, as a restarted host's does.
A release that skipped a gap (the hold window passed numbers that had not come) is taken
back with that gap: the numbers it skipped are waited for again too, since what the source
delivers from there may hold them (its top :data:`GAP_REOPENED` numbers).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["GAP_REOPENED", "RELEASES_KEPT", "Gaps", "ReleaseRecord", "at_or_after"]

RELEASES_KEPT = 16_384
"""Releases a record remembers (as many as a session remembers hand-over marks)."""

GAP_REOPENED = 1_024
"""The most numbers of one gap a release taken back waits for again (the highest): a
longer gap is a numbering's jump, not numbers that may come with the source read again."""

Gaps = tuple[tuple[int, int], ...]
"""Ranges of numbers ``(first, stop)`` (``first .. stop - 1``) a release skipped."""


_Release = tuple[Hashable | None, int, Gaps]
"""A release remembered: its key, its number and the gaps it skipped."""


def _add(numbers: list[int], number: int, skipped: Gaps) -> None:
    """Append ``number`` and the numbers of ``skipped`` to ``numbers``."""
    numbers.append(number)
    for first, stop in skipped:
        numbers.extend(range(first, stop))


def at_or_after(origin: tuple[Hashable, int] | None, source: Hashable, position: int) -> bool:
    """Whether ``origin`` (source, position; None: none) is taken back by ``source``
    sent back to ``position``: the same source, at or after that position."""
    return origin is not None and origin[0] == source and origin[1] >= position


class ReleaseRecord:
    """The latest releases of one resequencer, each with its (source, position).

    Args:
        kept: How many releases it remembers (the oldest go first).
    """

    def __init__(self, kept: int = RELEASES_KEPT) -> None:
        self._kept = kept
        # (source, position) -> (key, number, gaps it skipped), oldest release first. A
        # rewind looks at them all (rare: a seek, a reset, an abort); a release costs one
        # entry.
        self._releases: OrderedDict[tuple[Hashable, int], _Release] = OrderedDict()
        self._forgotten: dict[Hashable, int] = {}  # source -> highest position forgotten
        # What rewound() took back and has not come again: (source, position) -> (key,
        # number, gaps), for passed() (a position passed over never comes again).
        self._sent_back: OrderedDict[tuple[Hashable, int], _Release] = OrderedDict()

    def __len__(self) -> int:
        return len(self._releases)

    def released(
        self,
        source: Hashable,
        position: int,
        key: Hashable | None,
        number: int,
        skipped: Gaps = (),
    ) -> None:
        """``number`` of ``key``, read at ``position`` of ``source``, was released,
        skipping the numbers of ``skipped`` (gaps the hold window passed)."""
        releases = self._releases
        if skipped:
            skipped = tuple((max(first, stop - GAP_REOPENED), stop) for first, stop in skipped)
        releases[source, position] = (key, number, skipped)
        if self._sent_back:
            self._sent_back.pop((source, position), None)  # it came again
        if len(releases) > self._kept:
            (gone, at), _ = releases.popitem(last=False)
            forgotten = self._forgotten
            if forgotten.get(gone, -1) < at:
                forgotten[gone] = at

    def rewound(self, source: Hashable, position: int) -> dict[Hashable | None, list[int]] | None:
        """``source`` was sent back to ``position``: the numbers released from it at or
        after ``position``, per key, ascending, to release again (they are forgotten
        here until released again), with the gaps those releases skipped (the source
        read again may hold them: a release taken back undoes its skip too). None: a
        release from there on was forgotten (the record is then emptied: the caller
        starts its numbering afresh).
        """
        if self._forgotten.get(source, position - 1) >= position:
            self.clear()
            return None
        releases, sent_back = self._releases, self._sent_back
        again: dict[Hashable | None, list[int]] = {}
        for where in [w for w in releases if at_or_after(w, source, position)]:
            key, number, skipped = sent_back[where] = releases.pop(where)
            _add(again.setdefault(key, []), number, skipped)
        while len(sent_back) > self._kept:  # (numbers a hold window skipped, never passed)
            sent_back.popitem(last=False)
        for numbers in again.values():
            numbers.sort()
        return again

    def passed(self, source: Hashable, first: int, last: int) -> dict[Hashable | None, list[int]]:
        """``source``, sent back, read on past ``first..last`` without delivering them
        (done there: a committed transaction consumed them, or filtered, or lost): the
        numbers released from there that :meth:`rewound` took back do not come again.
        Returns them per key, with the gaps their releases skipped (they stay released,
        remembered as releases again; those gaps stay skipped)."""
        sent_back = self._sent_back
        kept: dict[Hashable | None, list[int]] = {}
        for where in [w for w in sent_back if w[0] == source and first <= w[1] <= last]:
            key, number, skipped = sent_back.pop(where)
            self.released(source, where[1], key, number, skipped)
            _add(kept.setdefault(key, []), number, skipped)
        return kept

    def clear(self) -> None:
        """Forget everything (the numbering starts afresh)."""
        self._releases.clear()
        self._forgotten.clear()
        self._sent_back.clear()
