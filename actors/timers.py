"""Timers on an actor's event loop that never call before their time.

Ray runs actors on uvloop where it is installed (``ray[serve]`` brings it), and its
timers count whole milliseconds: one fires up to a millisecond early. A wait that,
poked by its timer, compares ``time.monotonic()`` with the time it waits for finds it
not reached yet and waits on with no timer left (a resequencing receive hung so until a
publish woke it). :func:`call_when` re-arms an early timer for the rest.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["call_when"]


def call_when(
    when: float, callback: Callable[[], object], timers: list[asyncio.TimerHandle]
) -> None:
    """Call ``callback`` on the running loop once ``time.monotonic()`` reaches ``when``,
    never before (an early timer waits out the rest).

    Args:
        when: A ``time.monotonic()`` time.
        callback: Called once, on the loop.
        timers: Where the timer handles go, for a caller that may cancel them.
    """
    loop = asyncio.get_running_loop()

    def fire() -> None:
        left = when - time.monotonic()
        if left > 0:
            timers.append(loop.call_later(left, fire))
        else:
            callback()

    timers.append(loop.call_later(max(when - time.monotonic(), 0.0), fire))
