"""Where a session's recent receives began reading, kept until their handle could
not have lost them. No Ray.

``ray.cancel`` of a receive can reach its owner after the session answered it: Ray
then drops the reply on its way and the caller sees ``TaskCancelledError`` (measured
on a bare async actor: most of the cancels that came while the reply was on its way).
What that reply carried was handed over, and the session read on past it. The handle
sees the cancel and tells the session (``ReceivesLost``), which reads again from where
the lost receive began at each channel (DESIGN 5.6: neither closing nor
``ray.cancel`` of a receive loses an element).

A shared group's elements are left out: they are held until acknowledged, and a
hold that times out is delivered again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from raytopic.core.protocol import Delivery, ReaderLease

if TYPE_CHECKING:
    from raytopic.actors.receive.positions import Positions

__all__ = ["Began", "HandedReceives"]

KEPT = 64
"""Receives remembered per stream: a handle reports a lost receive with its next
call, so only the last few can be reported."""


class Began(NamedTuple):
    """Where one receive began reading one channel."""

    channel: int
    first: int
    jumps: int
    lease: ReaderLease


class HandedReceives:
    """Per stream of receives, where each recent answer began at each channel.

    Args:
        positions: The session's read positions (moved back for a lost reply).
        forget: Called with each channel read again (the session looks at it again).
        poke: Wakes the session's waiting receive (there is data again).
    """

    def __init__(
        self, positions: Positions, forget: Callable[[int], None], poke: Callable[[], None]
    ) -> None:
        self._positions = positions
        self._forget = forget
        self._poke = poke
        self._answered: dict[str, deque[tuple[int, tuple[Began, ...]]]] = {}
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
        early = self._lost_early.get(stream)
        if early:
            lost = number in early
            early.difference_update([n for n in early if n <= number])
            if lost:
                self._read_again(began)
                return
        if began:
            self._answered.setdefault(stream, deque(maxlen=KEPT)).append((number, began))

    def lost(self, stream: str, numbers: Sequence[int]) -> None:
        """The handle never got the replies of these receives of ``stream``: the
        session reads again from where they began (those not answered yet, when they
        answer)."""
        answered = self._answered.get(stream, deque())
        by_number = {number: began for number, began in answered}
        again: list[Began] = []
        for number in numbers:
            began = by_number.pop(number, None)
            if began is not None:
                again.extend(began)
            elif not answered or number > answered[-1][0]:
                self._lost_early.setdefault(stream, set()).add(number)
        if len(by_number) < len(answered):
            self._answered[stream] = deque(by_number.items(), maxlen=KEPT)
        self._read_again(again)

    def _read_again(self, began: Iterable[Began]) -> None:
        looked = False
        for channel, first, jumps, lease in began:
            self._positions.read_again(channel, first, jumps, lease)
            self._forget(channel)
            looked = True
        if looked:
            self._poke()
