"""Unit tests of ReceiveSession's turns over a fake channel (no Ray): a session that
meets its handle's receive numbering mid-stream (its host restarted) and a receive
that comes after a later one of its stream already ran there."""

from __future__ import annotations

import asyncio
import time

import pytest

from raytopic.actors.receive.ports import LocalPort
from raytopic.actors.receive_session import ReceiveSession, SessionSpec, call_when
from raytopic.core.errors import ReceivePassedOverError
from raytopic.core.protocol import Take

from tests.actors.receive.fake_channels import FakeChannel, run

STREAM = "s.i0"


def _session(channel: FakeChannel, *, mid_stream: bool) -> ReceiveSession:
    ports = {0: LocalPort(0, channel, channel.state)}
    spec = SessionSpec("r", complete_on_empty=True, window=None)
    return ReceiveSession(spec, ports, {0: None}, 0, mid_stream=mid_stream)


def test_a_receive_passed_over_after_a_restart_takes_nothing_and_says_so() -> None:
    # A channel killed with receives 22 and 23 of a stream under way: Ray sends both
    # to its next incarnation, 23 first (22's retry comes later). 23 waits briefly for
    # lower numbers, then runs; 22, come after it, must not take (its elements would
    # come out of order) and is told apart from a failure: a typed answer.
    channel = FakeChannel(0, available=4)

    async def main() -> None:
        session = _session(channel, mid_stream=True)
        later = await session.receive(STREAM, 23, 2, False, here_only=True)
        assert [d.first for d in later.deliveries] == [10]
        taken = len(channel.sent(Take))
        with pytest.raises(ReceivePassedOverError, match="receive 22"):
            await session.receive(STREAM, 22, 2, False, here_only=True)
        assert len(channel.sent(Take)) == taken  # it took nothing
        assert channel.next == 12
        after = await session.receive(STREAM, 24, 2, False, here_only=True)
        assert [d.first for d in after.deliveries] == [12]  # the stream goes on

    run(main)


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
