"""Unit tests of ReceiveSession's turns over a fake channel (no Ray): a session that
meets its handle's receive numbering mid-stream (its host restarted) and a receive
that comes after a later one of its stream already ran there."""

from __future__ import annotations

import pytest

from raytopic.actors.receive.ports import LocalPort
from raytopic.actors.receive_session import ReceiveSession, SessionSpec
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
