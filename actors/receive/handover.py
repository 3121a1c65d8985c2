"""What a resequencing session took and has not handed over yet, per channel. No Ray.

A resequencing session hands elements over in their sequence numbers' order, not in
position order: an element may be handed over while an earlier one of its channel
still waits in the resequencer. A commit must not pass that one (it would be lost
if the member stopped there). So each element handed over is stamped with its
channel's *hand-over mark*: the highest position below which every element the
session took there was handed over (or dropped as late) before it. Its commits
go no further (``Cursor.commit`` clamps them).

Why a stamp rather than state at the channel: an element's mark is a fact about
what came before it, true whatever happens to the session afterwards. A host
channel that restarts loses its resequencer (what it held was never committed and
is delivered again), and the elements handed over before still commit safely. An
iteration that buffers elements hands them to its user in the session's order, so
what was handed over before an element was seen before it.
"""

from __future__ import annotations

import heapq
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

__all__ = ["MARKS_KEPT", "HandOver"]

MARKS_KEPT = 16_384
"""Marks of the latest elements handed over that a session remembers, for a commit
of a bare position (``Subscriber.commit``): twice what an iteration keeps in flight."""


@dataclass(slots=True)
class _Waiting:
    """One channel's taken positions not handed over yet."""

    counts: Counter[int] = field(default_factory=Counter)
    """Position -> copies waiting (a position read again after a jump may wait twice)."""
    heap: list[int] = field(default_factory=list)
    """The same positions, lowest first (stale entries are skipped lazily)."""
    highest: int = -1
    """The highest position taken here."""

    def lowest(self) -> int | None:
        heap = self.heap
        while heap and heap[0] not in self.counts:
            heapq.heappop(heap)
        return heap[0] if heap else None


class HandOver:
    """The positions one resequencing session took and has not handed over."""

    def __init__(self) -> None:
        self._channels: dict[int, _Waiting] = {}
        self._marks: OrderedDict[tuple[int, int], int] = OrderedDict()
        self._top: dict[int, int] = {}  # channel -> the highest mark handed out there
        # channel -> positions put back (Ray dropped the reply that handed them over)
        # and not handed over again: see floors().
        self._put_back: dict[int, Counter[int]] = {}

    def taken(self, channel: int, sequence: int) -> None:
        """The session took ``sequence`` of ``channel`` (it goes into the resequencer)."""
        waiting = self._channels.get(channel)
        if waiting is None:
            waiting = self._channels[channel] = _Waiting()
        if not waiting.counts[sequence]:
            heapq.heappush(waiting.heap, sequence)
        waiting.counts[sequence] += 1
        waiting.highest = max(waiting.highest, sequence)

    def put_back(self, channel: int, sequence: int) -> None:
        """``sequence`` of ``channel`` was handed over in a reply Ray dropped: it waits
        again, and the marks stamped since it was first handed over claim it (see
        :meth:`floors`)."""
        self.taken(channel, sequence)
        self._put_back.setdefault(channel, Counter())[sequence] += 1

    def floors(self) -> dict[int, int]:
        """Per channel where an element put back waits, the highest position a commit
        may reach now. The marks on elements handed over after it first went out say
        it was handed over (an element's mark is a fact about what came before it,
        but the user never saw what a dropped reply carried), so a commit of such an
        element goes no further than this until it is handed over again."""
        floors = {}
        for channel, positions in self._put_back.items():
            lowest = self._channels[channel].lowest()
            if positions and lowest is not None:
                floors[channel] = lowest - 1
        return floors

    def dropped(self, channel: int, sequence: int) -> None:
        """``sequence`` will never be handed over (the resequencer dropped it as late):
        it holds no commit back."""
        put_back = self._put_back.get(channel)
        if put_back and put_back[sequence]:
            put_back[sequence] -= 1
            if not put_back[sequence]:
                del put_back[sequence]
        waiting = self._channels.get(channel)
        if waiting is None or not waiting.counts[sequence]:
            return
        waiting.counts[sequence] -= 1
        if not waiting.counts[sequence]:
            del waiting.counts[sequence]

    def rewound(self, channel: int, position: int) -> None:
        """``channel`` was sent back to ``position``: what the session took there from
        then on was dropped (:meth:`dropped`) and is taken again, so its marks claim
        nothing from there until it is (the highest position taken comes down)."""
        waiting = self._channels.get(channel)
        if waiting is not None and waiting.highest >= position:
            waiting.highest = position - 1
        if self._top.get(channel, -1) >= position:
            self._top[channel] = position - 1

    def late(self, channel: int, sequence: int) -> None:
        """The resequencer dropped ``sequence`` of ``channel`` as late. A number that
        came twice holds no commit back (:meth:`dropped`). An element this session
        handed over before and took again does: it is not handed over again, so
        commits stay below it and it is delivered again when the reader's next
        session reads from its commit (a restart, a new member), never committed
        unseen. (A reader sent back gets its elements again: the session takes back
        their numbers, see ``ReceiveSession._take_back``. One is still late when the
        hold window skipped its number before it was read again.) Known among the
        latest :data:`MARKS_KEPT` handed over."""
        if (channel, sequence) not in self._marks:
            self.dropped(channel, sequence)

    def handed(self, channel: int, sequence: int) -> int:
        """``sequence`` of ``channel`` is handed over now; returns its hand-over mark."""
        self.dropped(channel, sequence)
        waiting = self._channels.get(channel)
        if waiting is None:  # never taken here: no more is known than its own position
            mark = sequence
        else:
            lowest = waiting.lowest()
            mark = waiting.highest if lowest is None else lowest - 1
        self._top[channel] = max(self._top.get(channel, -1), mark)
        marks = self._marks
        marks[channel, sequence] = mark
        marks.move_to_end((channel, sequence))
        if len(marks) > MARKS_KEPT:
            marks.popitem(last=False)
        return mark

    def commits_past(self, channel: int, committed: int) -> bool:
        """Whether a commit of an element handed over at ``channel`` moves its commit
        past ``committed`` (an element's commit goes up to its mark, no further)."""
        return self._top.get(channel, -1) > committed

    def mark_of(self, channel: int, sequence: int) -> int | None:
        """The mark ``sequence`` of ``channel`` got when it was handed over, if it is
        among the latest :data:`MARKS_KEPT` (None: not known)."""
        return self._marks.get((channel, sequence))
