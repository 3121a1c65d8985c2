"""A seek pauses its subscriber's receives at their host: no fetch takes until the seek
has landed, and the seek waits for the receives sent before it. No Ray.

So receives sent before a seek complete before it takes effect, and only
receives that found nothing see the new position.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

__all__ = ["PAUSE_GAP", "PAUSE_POLL", "SeekPause"]

PAUSE_POLL = 0.002
"""Seconds between looks while a seek waits for earlier receives to finish."""

PAUSE_GAP = 5.0
"""Seconds a seek waits for an earlier receive that has not reached the session, and
most a pause holds fetches back if the seek never lands."""


class SeekPause:
    """The pause of one session's fetches while a seek is on its way."""

    def __init__(self) -> None:
        self._until = 0.0  # loop time until which no fetch takes
        self._landed = asyncio.Event()  # set when the seek the pause waits for lands

    def begin(self) -> None:
        """A seek is on its way: fetches take nothing until it lands (or PAUSE_GAP)."""
        self._until = asyncio.get_running_loop().time() + PAUSE_GAP
        self._landed.clear()

    def end(self) -> None:
        """The seek landed: fetches paused for it take now."""
        self._until = 0.0
        self._landed.set()

    def holding(self) -> bool:
        """Whether a seek is on its way (takes wait for it)."""
        return self._until > asyncio.get_running_loop().time()

    async def before_take(self) -> None:
        """Return once no seek is on its way (at once on the common path)."""
        pause = self._until - asyncio.get_running_loop().time()
        if pause > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._landed.wait(), pause)

    @staticmethod
    async def after_earlier(
        upto: int,
        expected: Callable[[], int],
        waiting: Callable[[], int | None],
        started: Callable[[], int | None],
        closed: Callable[[], bool],
    ) -> None:
        """Return once every receive numbered up to ``upto`` has finished, or waits for
        data (it has taken nothing, and those after it have not run).

        Args:
            upto: The last receive sent before the seek.
            expected: The number whose turn it is.
            waiting: The number of the receive waiting for a change now (None: none).
            started: The number of the last receive that got its turn.
            closed: Whether the session is closed.
        """
        loop = asyncio.get_running_loop()
        absent_since = None
        while not closed():
            turn = expected()
            if turn > upto or waiting() == turn:
                return
            if started() == turn:
                absent_since = None  # running: it finishes or comes to wait
            elif absent_since is None:
                absent_since = loop.time()
            elif loop.time() - absent_since > PAUSE_GAP:
                return  # never arrived (cancelled on its way): do not wait for it
            await asyncio.sleep(PAUSE_POLL)
