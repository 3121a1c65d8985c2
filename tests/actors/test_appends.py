"""Unit tests of Appends (no Ray, a real store): a "block" batch waiting for room when
its channel dies is resumed by the retry after the restart (the rest goes in under the
same number, before the publisher's later batches), once, also after a second death."""

from __future__ import annotations

import asyncio
from typing import Any

from raytopic.actors.appends import Appends
from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.stores.base import ChannelStore
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import TopicFullError
from raytopic.core.payloads import PickledValues
from raytopic.core.protocol import Append, AppendAck, AppendOnce

CAPACITY = 10


class _Channel:
    """One incarnation of a channel: its parts over the store in ``opened``'s directory."""

    def __init__(self, opened: Any, *, restarted: bool) -> None:
        config = TopicConfig("t", "ns", "t0pic1d", 1, CAPACITY, True, None, Overflow.BLOCK, ())
        context = ChannelContext(config, 0, ChannelMetrics(config.name, 0))
        self.parts = ChannelParts.build(context, restarted=restarted)
        self.store = opened(must_exist=True) if restarted else opened()
        self.parts.recover(ChannelStore(self.store), restarted=restarted)
        parts = self.parts
        self.appends = Appends(context, parts.log, parts.publishers, parts.state.checkpoint)

    def publish(
        self, batch: int, values: list[Any], *, each: bool = True, timeout: float | None = None
    ) -> asyncio.Task:
        request = Append("p", batch, "block", timeout, each=each)
        payload = PickledValues.from_values(values)
        return asyncio.ensure_future(self.appends.append(request, payload))

    def write_once(
        self, version: int, values: list[Any], *, timeout: float | None = None
    ) -> asyncio.Task:
        """A sink's ``append_once`` of ``values`` as ``version`` of writer "once:q"."""
        request = AppendOnce("once:q", version, "block", timeout)
        payload = PickledValues.from_values(values)
        return asyncio.ensure_future(self.appends.append_once(request, payload))

    def free(self, count: int) -> None:
        """Readers released the oldest ``count`` elements: room for as many."""
        self.parts.log.evict_to(self.parts.log.ring.head + count)
        self.parts.context.notify()

    async def killed(self, *tasks: asyncio.Task) -> None:
        """SIGKILLed: what it was doing stops, nothing more is written."""
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.store.close()

    def stored(self) -> list[Any]:
        """Every value the store holds, in position order."""
        return [
            value
            for record in ChannelStore(self.store).load_batches(0)
            for value in record.payload.decode()
        ]


async def _settle() -> None:
    await asyncio.sleep(0.3)  # the appends run until they wait (room is polled)


def test_a_block_batch_waiting_when_its_channel_died_gets_its_rest_in_on_the_retry(
    opened,
) -> None:
    first, second = list(range(25)), ["x", "y", "z"]

    async def main() -> None:
        dead = _Channel(opened, restarted=False)
        waiting = dead.publish(0, first)  # 10 go in, 15 wait for room
        queued = dead.publish(1, second)  # waits for its turn
        await _settle()
        await dead.killed(waiting, queued)

        channel = _Channel(opened, restarted=True)
        # Ray retries them in any order: the later batch waits for the open one.
        queued = channel.publish(1, second)
        await _settle()
        waiting = channel.publish(0, first)
        for _ in range(4):
            channel.free(CAPACITY)
            await _settle()
        ack, after = await waiting, await queued
        assert isinstance(ack, AppendAck) and isinstance(after, AppendAck)
        assert (ack.error, ack.accepted, after.error, after.accepted) == (None, 25, None, 3)
        assert [ack.locate(index)[0] for index in range(25)] == list(range(25))
        assert after.first == 25
        assert channel.stored() == first + second  # each once, in the publisher's order
        # A retry of the finished batch is answered, not appended again.
        assert await channel.publish(0, first) == ack
        await channel.killed()

        again = _Channel(opened, restarted=True)  # it was closed before its answer
        assert again.parts.publishers.earlier_ack("p", 0, 25) == ack
        assert again.parts.publishers.turns.expected("p") == 2
        again.store.close()

    asyncio.run(main())


def test_a_batch_larger_than_the_capacity_survives_two_deaths_in_its_pieces(opened) -> None:
    values = list(range(35))

    async def main() -> None:
        channel = _Channel(opened, restarted=False)
        for _ in range(2):  # dies twice while the batch waits for room for its next piece
            waiting = channel.publish(0, values, each=False)
            await _settle()
            channel.free(CAPACITY)
            await _settle()
            await channel.killed(waiting)
            channel = _Channel(opened, restarted=True)
        waiting = channel.publish(0, values, each=False)
        for _ in range(3):
            await _settle()
            channel.free(CAPACITY)
        ack = await waiting
        assert (ack.error, ack.accepted) == (None, 35)
        assert channel.stored() == values
        await channel.killed()

    asyncio.run(main())


def test_a_retry_after_a_restart_counts_the_whole_batch_in_its_error(opened) -> None:
    """The rest timed out after the restart: the error counts the batch's values."""

    async def main() -> None:
        dead = _Channel(opened, restarted=False)
        waiting = dead.publish(0, list(range(25)), each=False, timeout=0.5)
        await asyncio.sleep(0.1)
        await dead.killed(waiting)
        channel = _Channel(opened, restarted=True)
        ack = await channel.publish(0, list(range(25)), each=False, timeout=0.5)
        assert isinstance(ack, AppendAck) and ack.accepted == 10
        assert isinstance(ack.error, TopicFullError)  # the rest waited its timeout again
        assert str(ack.error) == "channel 0 is full (10 elements): 15 of 25 values not appended"
        await channel.killed()

    asyncio.run(main())


def test_a_version_run_again_while_its_append_waits_gets_that_append_s_answer(opened) -> None:
    """Spark runs a sink's task again while the first run's ``append_once`` of the
    version waits for room here: the re-run waits for it and gets its ack (before:
    ``InvalidArgumentError`` "call 3 of 'once:q' already ran" once it ended), nothing
    appended twice; a re-run after it ended has the version."""
    values = list(range(25))

    async def main() -> None:
        channel = _Channel(opened, restarted=False)
        first = channel.write_once(3, values)  # 10 go in, 15 wait for room
        await _settle()
        again = channel.write_once(3, values)
        for _ in range(3):
            channel.free(CAPACITY)
            await _settle()
        ack = await first
        assert (ack.error, ack.accepted) == (None, 25)
        assert await again == ack
        assert channel.stored() == values
        assert await channel.write_once(3, values) == AppendAck(-1, 0, 0.0)
        await channel.killed()

    asyncio.run(main())


def test_a_version_run_again_while_its_append_waits_gets_its_timeout_too(opened) -> None:
    """The first run's rest waited its timeout: the re-run is told so (the values not
    appended, exactly those), not answered as if the version were in."""

    async def main() -> None:
        channel = _Channel(opened, restarted=False)
        first = channel.write_once(3, list(range(25)), timeout=0.5)
        await asyncio.sleep(0.1)
        again = channel.write_once(3, list(range(25)), timeout=0.5)
        ack = await first
        assert isinstance(ack.error, TopicFullError) and ack.accepted == 10
        assert await again == ack
        assert channel.stored() == list(range(10))
        await channel.killed()

    asyncio.run(main())
