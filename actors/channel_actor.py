"""The class a channel's Ray actor is made of: a shell over ``raytopic.actors.channel``
that imports the channel's code only in the channel's own process.

Ray imports an actor's class in every process that rebuilds a handle to it (to
learn its methods): a coordinator, which is handed its channels' handles, and any
driver or actor given a topic, imported the whole channel (about 0.15-0.3 CPU-s
each here, a sixth of a coordinator's start). This module imports nothing of the
channel's at import time, so they pay only for these two methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raytopic.core.config import TopicConfig
    from raytopic.core.gather import Joined
    from raytopic.core.payloads import Payload
    from raytopic.core.protocol import ControlRequest

__all__ = ["ChannelActor"]


class ChannelActor:
    """One channel of a topic, as a Ray actor (see :class:`raytopic.actors.channel.ChannelActor`,
    which it runs).

    Args:
        config: The topic's configuration.
        channel: This channel's number.
    """

    def __init__(self, config: TopicConfig, channel: int) -> None:
        from raytopic.actors.channel import ChannelActor as Channel

        self._channel = Channel(config, channel)
        self._name = f"ChannelActor(topic={config.name!r}, channel={channel})"

    def __repr__(self) -> str:
        # Ray names the actor's output after its repr: the ":actor_name:" line of its
        # log files and the prefix of the lines it forwards to drivers.
        return self._name

    async def request(
        self, packed: bytes, payload: Payload | None = None, joined: Joined | None = None
    ) -> Any:
        """See :meth:`raytopic.actors.channel.ChannelActor.request`."""
        return await self._channel.request(packed, payload, joined)

    async def control(self, request: ControlRequest) -> Any:
        """See :meth:`raytopic.actors.channel.ChannelActor.control`."""
        return await self._channel.control(request)
