"""What the tests of the channel's class run in-process share: a handle's call through
the channel's entry, and a two-channel topic's configuration."""

from __future__ import annotations

from typing import Any

from raytopic.actors.channel import ChannelActor
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.protocol import ChannelRequest, pack_request, unpack_small

TWO_CHANNELS = TopicConfig("t", "ns", "t0pic1d", 2, 1000, True, None, Overflow.BLOCK, ())


async def ask(channel: ChannelActor, request: ChannelRequest, payload: Any = None) -> Any:
    """A handle's data-path call, through the channel's entry (as Ray would make it); a
    sibling's request's packed reply is unpacked, as its port does."""
    return unpack_small(await channel.request(pack_request(request), payload))
