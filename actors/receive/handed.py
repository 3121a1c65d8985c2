"""Where a session's recent receives began reading, kept until their handle could
not have lost them. No Ray.

``ray.cancel`` of a receive can reach its owner after the session answered it: Ray
then drops the reply on its way and the caller sees ``TaskCancelledError`` (measured
on a bare async actor: most of the cancels that came while the reply was on its way).
What that reply carried was handed over, and the session read on past it. The handle
sees the cancel and tells the session (``ReceivesLost``), which reads again from where
the lost receive began at each channel: neither closing nor ``ray.cancel`` of a
receive loses an element (docs/architecture.md, "Receive path").

A resequencing session hands over what its resequencer released, in sequence order,
not a channel's positions in order: reading a channel again would bring numbers the
resequencer already released, dropped as late. So the released elements of its
recent answers are kept, and those of a lost one go out again first.

A shared group's elements are left out: they are held until acknowledged, and a
hold that times out is delivered again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from raytopic.core.protocol import Delivery, ReaderLease

if TYPE_CHECKING:
    from raytopic.actors.receive.positions import Positions

__all__ = ["Began", "HandedReceives"]

KEPT = 64
"""Receives remembered per stream: a handle reports a lost receive with its next
call, so only the last few can be reported."""

RELEASED_KEPT = 8_192
"""Released elements a resequencing session remembers per stream (at least its last
answer's): bounds what the remembered answers keep alive."""


class Began(NamedTuple):
    """Where one receive began reading one channel."""

    channel: int
    first: int
    jumps: int
    lease: ReaderLease


class _Answer(NamedTuple):
    """One recent answer: where it began at each channel, or what it released."""

    number: int
    began: tuple[Began, ...]
    released: tuple[Delivery, ...]


class HandedReceives:
    """Per stream of receives, where each recent answer began at each channel (or,
    for a resequencing session, what it released).

    Args:
        positions: The session's read positions (moved back for a lost reply).
        forget: Called with each channel read again (the session looks at it again).
        poke: Wakes the session's waiting receive (there is data again).
        put_back: Called with the released elements of lost answers, oldest first:
            the session hands them over again before anything else.
    """

    def __init__(
        self,
        positions: Positions,
        forget: Callable[[int], None],
        poke: Callable[[], None],
        put_back: Callable[[Sequence[Delivery]], None],
    ) -> None:
        self._positions = positions
        self._forget = forget
        self._poke = poke
        self._put_back = put_back
        self._answered: dict[str, deque[_Answer]] = {}
        self._released_kept: dict[str, int] = {}  # stream -> elements its answers keep
        # Receives reported lost before they were answered (the report overtook the
        # answer): read again as soon as they answer. Dropped when a later one does.
        self._lost_early: dict[str, set[int]] = {}

    def answered(self, stream: str, number: int, deliveries: Sequence[Delivery]) -> None:
        """Receive ``number`` of ``stream`` answered with ``deliveries`` (read again at
        once if it was reported lost already)."""
        began = tuple(
            Began(d.channel, d.first, d.jumps, d.origin.lease)
            for d in deliveries
            if d.count and not d.origin.shared
        )
        self._remember(stream, _Answer(number, began, ()))

    def released(self, stream: str, number: int, items: Sequence[Delivery]) -> None:
        """Receive ``number`` of ``stream`` of a resequencing session answered with the
        released ``items`` (put back at once if it was reported lost already)."""
        self._remember(stream, _Answer(number, (), tuple(items)))

    def _remember(self, stream: str, answer: _Answer) -> None:
        early = self._lost_early.get(stream)
        if early:
            lost = answer.number in early
            early.difference_update([n for n in early if n <= answer.number])
            if lost:
                self._again([answer])
                return
        if not answer.began and not answer.released:
            return
        answers = self._answered.setdefault(stream, deque())
        answers.append(answer)
        kept = self._released_kept.get(stream, 0) + len(answer.released)
        while len(answers) > KEPT or (kept > RELEASED_KEPT and len(answers) > 1):
            kept -= len(answers.popleft().released)
        self._released_kept[stream] = kept

    def lost(self, stream: str, numbers: Sequence[int]) -> list[asyncio.Future[Any]]:
        """The handle never got the replies of these receives of ``stream``: the
        session reads again from where they began (those not answered yet, when they
        answer).

        Returns:
            The takes that move the channels' read positions back and stop their
            commits below what the lost replies carried (the handle's commit waits).
        """
        answered = self._answered.get(stream, deque())
        lost = set(numbers)
        again = [answer for answer in answered if answer.number in lost]
        newest = answered[-1].number if answered else None
        for number in lost.difference(answer.number for answer in again):
            if newest is None or number > newest:
                self._lost_early.setdefault(stream, set()).add(number)
        if again:
            self._answered[stream] = deque(a for a in answered if a.number not in lost)
            self._released_kept[stream] = sum(len(a.released) for a in self._answered[stream])
        return self._again(again)

    def _again(self, answers: Iterable[_Answer]) -> list[asyncio.Future[Any]]:
        """Read again where ``answers`` began, and put back what they released."""
        looked = False
        released: list[Delivery] = []
        moves: list[asyncio.Future[Any]] = []
        for answer in answers:
            released.extend(answer.released)
            for channel, first, jumps, lease in answer.began:
                move = self._positions.read_again(channel, first, jumps, lease)
                if move is not None:
                    moves.append(move)
                self._forget(channel)
                looked = True
        if released:
            self._put_back(released)
        if looked:
            self._poke()
        return moves
