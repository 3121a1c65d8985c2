"""Unit tests of Appends (no Ray, a real store): a "block" batch waiting for room when
its channel dies is resumed by the retry after the restart (the rest goes in under the
same number, before the publisher's later batches), once, also after a second death;
an ``append_once`` version that ended short gets exactly its rest when run again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raytopic.actors.appends import Appends
from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.stores.base import ChannelStore
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import InvalidArgumentError, TopicFullError
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

    async def drained(self, rounds: int) -> None:
        """Readers free the whole ring ``rounds`` times, letting appends run between."""
        for _ in range(rounds):
            self.free(CAPACITY)
            await _settle()

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
        await channel.drained(4)
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
        await channel.drained(3)
        ack = await first
        assert (ack.error, ack.accepted) == (None, 25)
        assert await again == ack
        assert channel.stored() == values
        assert await channel.write_once(3, values) == AppendAck(-1, 0, 0.0)
        await channel.killed()

    asyncio.run(main())


def test_a_version_run_again_while_its_append_waits_tries_the_rest_after_a_timeout(
    opened,
) -> None:
    """The first run's rest waited its timeout: the re-run waiting behind it is not
    answered as if the version were in; it tries the rest itself, and a timeout of its
    own counts exactly the values not appended."""

    async def main() -> None:
        channel = _Channel(opened, restarted=False)
        first = channel.write_once(3, list(range(25)), timeout=0.5)
        await asyncio.sleep(0.1)
        again = channel.write_once(3, list(range(25)), timeout=0.5)
        ack = await first
        assert isinstance(ack.error, TopicFullError) and ack.accepted == 10
        ack = await again
        assert isinstance(ack.error, TopicFullError) and ack.accepted == 10
        assert str(ack.error) == "channel 0 is full (10 elements): 15 of 25 values not appended"
        assert channel.stored() == list(range(10))
        await channel.killed()

    asyncio.run(main())


# -- a version that ended short: its re-run appends the rest ---------------------------


def test_a_version_that_ended_short_gets_exactly_its_rest_when_run_again(opened) -> None:
    """Its rest timed out (the micro-batch failed): the re-run appends the 15 values not
    stored, once, after the 10, answered for the whole version; a later re-run appends
    nothing. Before: the re-run was answered "had it" (an empty ack), 15 values lost."""
    values = list(range(25))

    async def main() -> None:
        channel = _Channel(opened, restarted=False)
        ack = await channel.write_once(3, values, timeout=0.3)
        assert isinstance(ack.error, TopicFullError) and ack.accepted == 10
        with pytest.raises(InvalidArgumentError, match="5 values, fewer than the 10"):
            await channel.write_once(3, values[:5])  # not the same rows: refused, no change
        again = channel.write_once(3, values)
        await channel.drained(3)
        ack = await again
        assert (ack.error, ack.accepted) == (None, 25)
        assert [ack.locate(index)[0] for index in range(25)] == values
        assert channel.stored() == values
        assert await channel.write_once(3, values) == AppendAck(-1, 0, 0.0)
        assert channel.stored() == values
        await channel.killed()

    asyncio.run(main())


def test_a_version_that_ended_short_is_known_short_after_a_restart(opened) -> None:
    """The channel dies after the version ended short: the restarted channel still
    appends the rest on the re-run (the open mark is in its state), then has it whole
    across a second restart."""
    values = list(range(25))

    async def main() -> None:
        dead = _Channel(opened, restarted=False)
        ack = await dead.write_once(3, values, timeout=0.3)
        assert isinstance(ack.error, TopicFullError) and ack.accepted == 10
        await dead.killed()

        channel = _Channel(opened, restarted=True)
        assert not channel.parts.publishers.has_version("once:q", 3)
        again = channel.write_once(3, values)
        await channel.drained(3)
        ack = await again
        assert (ack.error, ack.accepted) == (None, 25)
        assert channel.stored() == values
        await channel.killed()

        whole = _Channel(opened, restarted=True)
        assert await whole.write_once(3, values) == AppendAck(-1, 0, 0.0)
        assert whole.stored() == values
        await whole.killed()

    asyncio.run(main())


def test_a_version_refused_whole_goes_in_whole_when_run_again_after_a_restart(
    opened,
) -> None:
    """A version within the capacity waits to go in at once; refused whole (nothing
    stored, so no record of it), a re-run without room is refused again (before: an
    empty ack, as if it were in), and it is still known short after a restart."""

    async def main() -> None:
        dead = _Channel(opened, restarted=False)
        await dead.publish(0, list("abcdefghij"))  # full
        for _ in range(2):
            ack = await dead.write_once(2, [1, 2, 3], timeout=0.3)
            assert isinstance(ack.error, TopicFullError) and ack.accepted == 0
        await dead.killed()

        channel = _Channel(opened, restarted=True)
        again = channel.write_once(2, [1, 2, 3])
        await _settle()
        channel.free(3)
        ack = await again
        assert (ack.error, ack.first, ack.accepted) == (None, 10, 3)
        assert channel.stored()[-3:] == [1, 2, 3]
        assert await channel.write_once(2, [1, 2, 3]) == AppendAck(-1, 0, 0.0)
        await channel.killed()

    asyncio.run(main())


def test_a_publisher_s_batch_that_ended_short_is_answered_as_it_ended_when_retried(
    opened,
) -> None:
    """A plain publisher's retry under the same batch number (a lost reply, a restart)
    gets the answer the batch got: its failed values stay failed (the publisher was or
    will be told, and publishes them again under new numbers), nothing appended twice."""
    values = list(range(25))

    async def main() -> None:
        channel = _Channel(opened, restarted=False)
        ack = await channel.publish(0, values, timeout=0.3)
        assert isinstance(ack.error, TopicFullError) and ack.accepted == 10
        channel.free(CAPACITY)
        assert await channel.publish(0, values) == ack
        await channel.killed()

        again = _Channel(opened, restarted=True)
        ack = await again.publish(0, values)
        assert isinstance(ack.error, TopicFullError) and ack.accepted == 10
        assert again.stored() == list(range(10))
        await again.killed()

    asyncio.run(main())
