"""Unit tests of ChannelUpkeep (no Ray): each background job starts where the channel's
state needs it (metrics from the first publish on, shared groups' holds while one exists),
and close() stops them for good."""

from __future__ import annotations

import asyncio

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.channel_upkeep import ChannelUpkeep
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.shared_group import SharedGroup

CONFIG = TopicConfig("t", "ns", "t0pic1d", 1, 10, True, None, Overflow.BLOCK, ())


def _upkeep() -> tuple[ChannelParts, ChannelUpkeep]:
    context = ChannelContext(CONFIG, 0, ChannelMetrics(CONFIG.name, 0))
    context.seeded.set()
    parts = ChannelParts.build(context, restarted=False)
    return parts, ChannelUpkeep(parts)


def test_metrics_are_reported_from_the_first_publish_on() -> None:
    async def main() -> None:
        _, upkeep = _upkeep()
        upkeep.tend()
        assert not upkeep.running("metrics")
        upkeep.report_from_now()
        upkeep.tend()
        assert upkeep.running("metrics")
        await upkeep.close()

    asyncio.run(main())


def test_a_shared_group_s_holds_are_tended_while_one_exists_and_close_stops_for_good() -> None:
    async def main() -> None:
        parts, upkeep = _upkeep()
        upkeep.tend()
        assert not upkeep.running("shared") and not upkeep.running("transactions")
        parts.readers.ensure_group("s", False, SharedGroup("s"))
        upkeep.tend()
        assert upkeep.running("shared")
        await upkeep.close()
        assert not upkeep.running("shared")
        upkeep.report_from_now()
        upkeep.tend()
        assert not upkeep.running("shared") and not upkeep.running("metrics")
        await upkeep.close()  # idempotent

    asyncio.run(main())
