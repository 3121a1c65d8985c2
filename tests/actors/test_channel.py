"""The channel actor's class run in-process (no Ray): bookkeeping that a test
against a real actor could not see."""

from __future__ import annotations

import asyncio
import pickle

from raytopic.actors.channel import _PUBLISHERS_KEPT, ChannelActor
from raytopic.config import Overflow, TopicConfig

CONFIG = TopicConfig("t", "ns", "t0pic1d", 1, 100_000, True, None, Overflow.BLOCK, ())


def test_a_channel_forgets_idle_publishers_and_their_turns() -> None:
    async def main() -> None:
        channel = ChannelActor(CONFIG, 0)
        payload = [pickle.dumps("v")]
        for publisher in range(_PUBLISHERS_KEPT + 1):
            await channel.append(f"p{publisher}", 0, payload, "block", 1.0)
        kept = len(channel._publishers)
        assert kept <= _PUBLISHERS_KEPT // 2 + 1
        assert len(channel._publish_turns._streams) == kept
        assert f"p{_PUBLISHERS_KEPT}" in channel._publishers  # the newest stays
        # A forgotten publisher that comes back is a new sender: its batch 0 goes in.
        ack = await channel.append("p0", 0, payload, "block", 1.0)
        assert ack.first == _PUBLISHERS_KEPT + 1

    asyncio.run(main())
