"""The order a channel answers in (the channel's class in-process, no Ray): a request
that makes data visible answers after the waiting calls it woke, so the reply a
consumer waits for leaves before the publisher's ack."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from raytopic.actors.channel import ChannelActor
from raytopic.actors.receive.ports import LocalPort, RemotePort
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.payloads import PickledValues
from raytopic.core.protocol import (
    Append,
    ChannelRequest,
    Commit,
    OpenReader,
    ReadCursor,
    ReaderSpec,
    ReadRingFigures,
    Receive,
    Take,
    Watch,
    pack_request,
    pack_small,
    unpack_small,
)

from tests.actors.channel_calls import TWO_CHANNELS, ask

ONE_CHANNEL = TopicConfig("t", "ns", "t0pic1d", 1, 1000, True, None, Overflow.BLOCK, ())
TIMEOUT = 5.0


def _append(batch: int, values: list[Any]) -> tuple[Append, PickledValues]:
    return Append("p", batch, "block", 1.0, False), PickledValues.from_values(values)


async def _hosting_reader_a() -> ChannelActor:
    """A one-channel ChannelActor that hosts receive sessions (its port to itself is
    in-process), with reader "a" open."""
    channel = ChannelActor(ONE_CHANNEL, 0)
    readers = channel._readers
    channel._host.ports = {
        0: LocalPort(0, readers.take, channel._parts.cursor_in_process, readers.take_now)
    }
    await channel.control(OpenReader("a", ReaderSpec(None, False)))
    return channel


async def _until(done: Any) -> None:
    """Let the loop run until ``done()`` (a call reached its wait)."""
    async with asyncio.timeout(TIMEOUT):
        while not done():
            await asyncio.sleep(0.001)


def test_an_append_answers_after_the_receive_it_woke_at_its_host() -> None:
    async def main() -> None:
        channel = await _hosting_reader_a()
        waiting = asyncio.ensure_future(ask(channel, Receive("a", "s", 0, 10, True)))
        await _until(lambda: channel._host.sessions.get("a") and channel._in_service)
        await asyncio.sleep(0.01)  # the receive waits for data
        assert not waiting.done()
        await ask(channel, *_append(0, ["x"]))
        # The append's reply comes once the receive it woke has its element.
        assert waiting.done()
        assert [(d.first, d.count) for d in waiting.result().deliveries] == [(0, 1)]
        channel._host.sessions["a"].close()

    asyncio.run(main())


def test_an_append_answers_after_the_fetch_it_woke_at_a_sibling() -> None:
    async def main() -> None:
        home, sibling = (ChannelActor(TWO_CHANNELS, c) for c in range(2))
        answered: list[str] = []

        async def call(request: ChannelRequest) -> Any:
            reply = await ask(sibling, request)
            answered.append(type(request).__name__)
            return reply

        home._host.ports = {
            0: LocalPort(
                0, home._readers.take, home._parts.cursor_in_process, home._readers.take_now
            ),
            1: RemotePort(1, call),
        }
        for channel in (home, sibling):
            await channel.control(OpenReader("a", ReaderSpec(None, False)))
        waiting = asyncio.ensure_future(ask(home, Receive("a", "s", 0, 10, True)))
        await _until(lambda: answered == ["Take"])  # a look, empty; then a fetch waits
        await asyncio.sleep(0.01)
        assert answered == ["Take"]
        await ask(sibling, *_append(0, ["x"]))
        # The fetch the append woke has answered the home channel by then.
        assert answered == ["Take", "Take"]
        batch = await asyncio.wait_for(waiting, TIMEOUT)
        assert [(d.channel, d.first) for d in batch.deliveries] == [(1, 0)]
        home._host.sessions["a"].close()

    asyncio.run(main())


def test_a_commit_answers_in_its_own_turn_though_it_woke_a_watch() -> None:
    # Only what makes data visible (a publish, a transaction's step) lets the calls it
    # woke go first: acks and commits come by the element, and gain nothing from it.
    async def main() -> None:
        channel = ChannelActor(ONE_CHANNEL, 0)
        await channel.control(OpenReader("a", ReaderSpec(None, False)))
        await ask(channel, *_append(0, ["x", "y"]))
        await ask(channel, Take("a", None, 1))
        known = await ask(channel, ReadCursor("a"))
        watching = asyncio.ensure_future(ask(channel, Watch("a", None, known, TIMEOUT)))
        await asyncio.sleep(0.01)  # the watch waits for a change
        await ask(channel, Commit("a", 0, None))
        assert not watching.done()
        assert (await asyncio.wait_for(watching, TIMEOUT)).committed == 0

    asyncio.run(main())


def test_a_request_that_woke_nothing_answers_in_its_own_turn() -> None:
    # Nothing waits: no turn of the loop is given away (a read, an append).
    async def main() -> None:
        channel = ChannelActor(ONE_CHANNEL, 0)
        await channel.control(OpenReader("a", ReaderSpec(None, False)))
        ran: list[str] = []

        async def other() -> None:
            ran.append("other")

        task = asyncio.ensure_future(other())
        await ask(channel, *_append(0, ["x"]))
        await ask(channel, ReadRingFigures())
        await ask(channel, ReadCursor("a"))
        assert ran == []  # the task beside them never got a turn
        await task

    asyncio.run(main())


def test_a_take_and_a_watch_answer_packed_bytes_a_receive_its_batch() -> None:
    # Only a sibling's session sends a take or a watch: their replies cross Ray as bytes.
    async def main() -> None:
        channel = await _hosting_reader_a()
        await channel.request(*_packed_append(0, ["x", "y"]))
        taken = await channel.request(pack_request(Take("a", None, 1)))
        assert type(taken) is bytes
        assert (unpack_small(taken).first, unpack_small(taken).count) == (0, 1)
        watched = await channel.request(pack_request(Watch("a", None, None, TIMEOUT)))
        assert type(watched) is bytes and unpack_small(watched).available
        received = await channel.request(pack_request(Receive("a", "s", 0, 10, False)))
        assert [d.first for d in received.deliveries] == [1]
        channel._host.sessions["a"].close()

    asyncio.run(main())


def _packed_append(batch: int, values: list[Any]) -> tuple[bytes, PickledValues]:
    request, payload = _append(batch, values)
    return pack_request(request), payload


def test_an_appends_payload_may_come_packed() -> None:
    # A publisher sends a small payload as bytes (Ray's pickle path costs it ~0.1 ms).
    async def main() -> None:
        channel = ChannelActor(ONE_CHANNEL, 0)
        await channel.control(OpenReader("a", ReaderSpec(None, False)))
        request, payload = _append(0, ["x", "y"])
        await channel.request(pack_request(request), pack_small(payload))
        delivery = await ask(channel, Take("a", None, 10))
        assert [value for chunk in delivery.chunks for value in chunk.payload.decode()] == [
            "x",
            "y",
        ]

    asyncio.run(main())


# -- the fast path: a publish takes for the receive waiting at its host ---------------


def test_a_publish_takes_for_the_receive_waiting_at_its_host() -> None:
    # The append's request takes for the waiting receive once it is done (no state
    # read, no plan); the receive hands it over when it resumes, and reads on after it.
    async def main() -> None:
        channel = await _hosting_reader_a()
        waiting = asyncio.ensure_future(ask(channel, Receive("a", "s", 0, 10, True)))
        await _until(lambda: channel._host.sessions.get("a") and channel._in_service)
        await asyncio.sleep(0.01)  # the receive waits for data
        session = channel._host.sessions["a"]
        offers: list[Any] = []
        take_for_waiting = session.take_for_waiting

        def noted() -> None:
            take_for_waiting()
            offers.append(session._offered)

        session.take_for_waiting = noted  # type: ignore[method-assign]
        await ask(channel, *_append(0, ["x", "y"]))
        assert waiting.done()
        (offered,) = offers
        assert offered is not None and (offered.first, offered.count) == (0, 2)
        assert (await waiting).deliveries == (offered,)  # handed over as taken
        assert (await ask(channel, ReadCursor("a"))).next == 2
        await ask(channel, *_append(1, ["z"]))
        again = await ask(channel, Receive("a", "s", 1, 10, True))
        assert [(d.first, d.count) for d in again.deliveries] == [(2, 1)]

    asyncio.run(main())


def test_what_a_publish_took_for_a_receive_cancelled_meanwhile_is_read_again() -> None:
    # Taken for a receive that is cancelled before it resumes: nothing is lost, the
    # next receive reads the same elements.
    async def main() -> None:
        channel = await _hosting_reader_a()
        waiting = asyncio.ensure_future(ask(channel, Receive("a", "s", 0, 10, True)))
        await _until(lambda: channel._host.sessions.get("a") and channel._in_service)
        await asyncio.sleep(0.01)
        session = channel._host.sessions["a"]
        take_for_waiting = session.take_for_waiting

        def taken_then_cancelled() -> None:
            take_for_waiting()
            assert session._offered is not None
            waiting.cancel()

        session.take_for_waiting = taken_then_cancelled  # type: ignore[method-assign]
        await ask(channel, *_append(0, ["x", "y"]))
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        assert session._offered is None
        again = await asyncio.wait_for(ask(channel, Receive("a", "s", 1, 10, False)), TIMEOUT)
        assert [(d.first, d.count) for d in again.deliveries] == [(0, 2)]

    asyncio.run(main())
