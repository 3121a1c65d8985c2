"""A commit that carries the next receive (``CommitThenReceive``), at the channel's class
in-process (no Ray): the commit is applied before the receive takes, and each part
answers for itself."""

from __future__ import annotations

import asyncio

from raytopic.actors.channel import ChannelActor
from raytopic.actors.receive.ports import LocalPort
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import GroupModeError, ReceivePassedOverError, SubscriberClosedError
from raytopic.core.payloads import PickledValues
from raytopic.core.protocol import (
    Append,
    CloseReader,
    Commit,
    CommitThenReceive,
    EnsureGroup,
    Grant,
    Lease,
    OpenReader,
    ReadCursor,
    ReaderSpec,
    Receive,
)
from raytopic.core.records import CommitStatus
from raytopic.core.shared_group import SharedGroup

from tests.actors.channel_calls import ask

ONE_CHANNEL = TopicConfig("t", "ns", "t0pic1d", 1, 1000, True, None, Overflow.BLOCK, ())
MEMBER = Lease("m", 1)
VIEW = (1, {0: MEMBER})


async def _member_with(values: list[int]) -> ChannelActor:
    """A one-channel ChannelActor hosting sessions, member "m" of group "g" holding its
    lease (it completes on empty), and ``values`` published."""
    channel = ChannelActor(ONE_CHANNEL, 0)
    readers = channel._readers
    channel._host.ports = {
        0: LocalPort(0, readers.take, channel._parts.cursor_in_process, readers.take_now)
    }
    await channel.control(EnsureGroup("g", False))
    await channel.control(OpenReader("m", ReaderSpec("g", False, complete_on_empty=True)))
    await channel.control(Grant("g", MEMBER))
    await ask(channel, Append("p", 0, "block", 1.0, False), PickledValues.from_values(values))
    return channel


def _receive(number: int, count: int = 3) -> Receive:
    return Receive("m", "i0", number, count, False, here_only=True, view=VIEW)


def _taken(received: object) -> list[tuple[int, int]]:
    return [(d.first, d.count) for d in received.deliveries if d.count]  # type: ignore[attr-defined]


def test_the_commit_is_applied_then_the_next_receive_takes_after_what_came_before() -> None:
    async def main() -> None:
        channel = await _member_with(list(range(8)))
        assert _taken(await ask(channel, _receive(0))) == [(0, 3)]
        assert _taken(await ask(channel, _receive(1))) == [(3, 3)]
        request = CommitThenReceive(commit=Commit("m", 2, MEMBER), receive=_receive(2))
        committed, received = await ask(channel, request)
        assert (committed.status, committed.position.sequence) == (CommitStatus.COMMITTED, 2)
        assert _taken(received) == [(6, 2)]  # the stream's next turn, in order
        assert (await ask(channel, ReadCursor("m", MEMBER))).committed == 2
        # Its receive was the stream's turn 2: the next one is 3.
        assert _taken(await ask(channel, _receive(3))) == []

    asyncio.run(main())


def test_a_failed_receive_is_its_own_reply_and_the_commit_still_answers() -> None:
    async def main() -> None:
        channel = await _member_with(list(range(4)))
        await ask(channel, _receive(0))
        late = CommitThenReceive(commit=Commit("m", 2, MEMBER), receive=_receive(0))  # 0 ran
        committed, received = await ask(channel, late)
        assert committed.status is CommitStatus.COMMITTED
        assert isinstance(received, ReceivePassedOverError)
        assert (await ask(channel, ReadCursor("m", MEMBER))).committed == 2

    asyncio.run(main())


def test_a_failed_commit_is_its_own_reply_and_the_receive_still_takes_its_turn() -> None:
    async def main() -> None:
        channel = await _member_with(list(range(4)))
        await ask(channel, _receive(0))
        await channel.control(EnsureGroup("s", False, SharedGroup("s")))
        await channel.control(OpenReader("x", ReaderSpec("s", False)))
        refused = CommitThenReceive(commit=Commit("x", 2, None), receive=_receive(1))
        committed, received = await ask(channel, refused)  # a shared member acks instead
        assert isinstance(committed, GroupModeError)
        assert _taken(received) == [(3, 1)]  # turn 1 ran: turn 2 is not held up behind it
        assert _taken(await ask(channel, _receive(2))) == []
        assert (await ask(channel, ReadCursor("m", MEMBER))).committed == -1

    asyncio.run(main())


def test_a_closed_members_commit_is_not_owner_and_its_receive_answers_closed() -> None:
    async def main() -> None:
        channel = await _member_with(list(range(4)))
        await ask(channel, _receive(0))
        await channel.control(CloseReader("m"))
        request = CommitThenReceive(commit=Commit("m", 2, MEMBER), receive=_receive(1))
        committed, received = await ask(channel, request)
        assert committed.status is CommitStatus.NOT_OWNER
        assert isinstance(received, SubscriberClosedError)

    asyncio.run(main())
