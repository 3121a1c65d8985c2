"""call_when on the event loop Ray runs actors on (uvloop where installed)."""

from __future__ import annotations

import asyncio
import time

from raytopic.actors.timers import call_when


def test_a_timer_on_rays_event_loop_never_calls_before_its_time() -> None:
    # Ray runs actors on uvloop where it is installed (ray[serve] brings it); its timers
    # count whole milliseconds and fire up to one early, and a resequencing receive
    # poked before its hold window ended waited on with no timer left (it hung). Each
    # time here falls between two milliseconds, as a hold window's end does.
    from ray._private.async_compat import get_new_event_loop

    early: list[float] = []

    async def timed(when: float) -> None:
        called = asyncio.Event()
        timers: list[asyncio.TimerHandle] = []
        call_when(when, called.set, timers)
        await called.wait()
        early.append(when - time.monotonic())

    async def many() -> None:
        for i in range(40):
            await timed(time.monotonic() + 0.0031 + i * 0.00017)

    loop = get_new_event_loop()
    try:
        loop.run_until_complete(many())
    finally:
        loop.close()
    assert len(early) == 40
    assert max(early) <= 0  # called at or after its time, every one
