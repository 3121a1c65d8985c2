"""How a typed request finds its handler: one per request type, among the channel and
the request families it is made of."""

from __future__ import annotations

import asyncio

import pytest

from raytopic.actors.channel import ChannelActor
from raytopic.actors.channel_dispatch import SERVED, Admit, bind, call_handler
from raytopic.actors.channel_readers import ReaderRequests
from raytopic.core.protocol import OpenReader, ReadCursor, ReaderSpec, ReadRingFigures

from tests.actors.channel_calls import TWO_CHANNELS


def test_every_request_type_is_bound_to_the_family_that_defines_its_handler() -> None:
    channel = ChannelActor(TWO_CHANNELS, 0)
    served = channel._served
    assert set(served) == set(SERVED)
    handler, admit = served[ReadCursor]
    assert handler.args == (channel._reader_requests,)  # type: ignore[attr-defined]
    assert admit is Admit.NOW is SERVED[ReadCursor][1]

    async def main() -> None:
        opened = await call_handler(
            served[OpenReader][0], OpenReader("a", ReaderSpec(None, False)), None
        )
        assert opened == await call_handler(handler, ReadCursor("a"), None)
        figures = await call_handler(served[ReadRingFigures][0], ReadRingFigures(), None)
        assert (figures.head, figures.tail) == (0, -1)

    asyncio.run(main())


def test_a_request_type_with_no_handler_or_two_is_refused() -> None:
    channel = ChannelActor(TWO_CHANNELS, 0)
    with pytest.raises(TypeError, match=r"no handler of .*ReadCursor"):
        bind(channel)  # without the readers' family
    readers = ReaderRequests(channel._parts)
    with pytest.raises(TypeError, match="two handlers of"):
        bind(channel, *channel._families, readers)
