"""The channel actor's class run in-process (no Ray): bookkeeping that a test
against a real actor could not see."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Callable
from typing import Any

import cloudpickle

from raytopic.actors.channel import (
    _PUBLISHER_IDLE_S,
    _PUBLISHER_SWEEP_S,
    _PUBLISHERS_KEPT,
    ChannelActor,
)
from raytopic.actors.cursors import Lease
from raytopic.actors.receiver import ChannelLink, ReceiveSession, SessionSpec
from raytopic.actors.wire import ReaderSpec
from raytopic.config import Overflow, TopicConfig

CONFIG = TopicConfig("t", "ns", "t0pic1d", 1, 100_000, True, None, Overflow.BLOCK, ())
TWO_CHANNELS = TopicConfig("t", "ns", "t0pic1d", 2, 1000, True, None, Overflow.BLOCK, ())
MEMBER = Lease("m", 1)


def _in_process(actor: ChannelActor) -> Callable[..., Any]:
    async def call(method: str, *args: Any) -> Any:
        return await getattr(actor, method)(*args)

    return call


async def _member_with_a_full_window(home_owned: bool) -> tuple[ChannelActor, ReceiveSession]:
    """Home channel 0 and sibling 1, both in-process; a group member whose window
    of 3 is filled by channel 1 alone."""
    home, sibling = ChannelActor(TWO_CHANNELS, 0), ChannelActor(TWO_CHANNELS, 1)
    home._links = {
        0: ChannelLink(0, home._local_call, local=True, state=home.cursor_state),
        1: ChannelLink(1, _in_process(sibling), local=False),
    }
    for channel in (home, sibling):
        channel.ensure_group("g", False)
        channel.open_reader("m", ReaderSpec("g", False))
        if channel is sibling or home_owned:
            channel.grant("g", MEMBER)
    owned = {0: MEMBER, 1: MEMBER} if home_owned else {1: MEMBER}
    home.open_session(SessionSpec("m", False, 3), owned)
    await sibling.append("publisher", 0, [pickle.dumps(i) for i in range(3)], "block", 1.0)
    received = await home.receive("m", "s", 0, 3, False)
    assert sum(d.count for d in received.deliveries) == 3
    return home, home._sessions["m"]


def _fail_on_spinning(session: ReceiveSession) -> None:
    """Make a receive loop that never yields fail instead of hanging the test."""
    room = session._room
    calls = 0

    def counted() -> int:
        nonlocal calls
        calls += 1
        if calls > 10_000:
            raise RuntimeError("the receive loop spins without waiting")
        return room()

    session._room = counted  # type: ignore[method-assign]


def test_a_channel_forgets_long_idle_publishers_and_their_turns() -> None:
    async def main() -> None:
        channel = ChannelActor(CONFIG, 0)
        payload = [pickle.dumps("v")]
        for publisher in range(_PUBLISHERS_KEPT):
            await channel.append(f"p{publisher}", 0, payload, "block", 1.0)
        # Half of them went quiet long ago (their tracks aged, as a clock would).
        for publisher in range(_PUBLISHERS_KEPT // 2):
            channel._publishers[f"p{publisher}"].seen -= _PUBLISHER_IDLE_S + 1
        channel._publishers_swept -= _PUBLISHER_SWEEP_S + 1
        await channel.append("newest", 0, payload, "block", 1.0)
        assert len(channel._publishers) == _PUBLISHERS_KEPT // 2 + 1
        assert len(channel._publish_turns._streams) == len(channel._publishers)
        assert "p0" not in channel._publishers and "newest" in channel._publishers
        # A forgotten publisher that comes back is a new sender: its batch 0 goes in.
        ack = await channel.append("p0", 0, payload, "block", 1.0)
        assert ack.first == _PUBLISHERS_KEPT + 1
        # The next look comes a sweep interval later, not on every append.
        last = f"p{_PUBLISHERS_KEPT - 1}"
        channel._publishers[last].seen -= _PUBLISHER_IDLE_S + 1
        await channel.append("another", 0, payload, "block", 1.0)
        assert last in channel._publishers

    asyncio.run(main())


def test_a_full_window_waits_when_the_home_channel_goes_to_another_member() -> None:
    async def main() -> None:
        home, session = await _member_with_a_full_window(home_owned=True)
        _fail_on_spinning(session)
        waiting = asyncio.ensure_future(home.receive("m", "s", 1, 1, True))
        await asyncio.sleep(0.05)
        home.grant("g", Lease("other", 2))  # the coordinator grants the new owner first
        await asyncio.sleep(0.05)
        assert not waiting.done()  # still waiting for a commit, not spinning
        assert 0 not in session._owned
        session.close()
        await asyncio.wait_for(waiting, 2.0)

    asyncio.run(main())


def test_a_full_window_waits_when_the_home_channel_is_newly_assigned() -> None:
    async def main() -> None:
        home, session = await _member_with_a_full_window(home_owned=False)
        _fail_on_spinning(session)
        waiting = asyncio.ensure_future(home.receive("m", "s", 1, 1, True))
        await asyncio.sleep(0.05)
        lease = Lease("m", 2)
        home.grant("g", lease)
        home.update_session("m", 5, {0: lease, 1: MEMBER})
        await asyncio.sleep(0.05)
        assert not waiting.done()
        session.close()
        await asyncio.wait_for(waiting, 2.0)

    asyncio.run(main())


def test_a_filtered_reader_with_a_window_is_not_held_by_the_misses() -> None:
    async def main() -> None:
        channel = ChannelActor(CONFIG, 0)
        channel._links = {
            0: ChannelLink(0, channel._local_call, local=True, state=channel.cursor_state)
        }
        keep = cloudpickle.dumps(lambda value: value >= 100)
        channel.open_reader("r", ReaderSpec(None, False, filter=keep))
        channel.open_session(SessionSpec("r", True, 5), {0: None})
        misses = [pickle.dumps(value) for value in range(20)]
        await channel.append("publisher", 0, misses, "block", 1.0)
        nothing = await channel.receive("r", "s", 0, 1, True)
        assert [d.count for d in nothing.deliveries] == []
        assert channel.cursor_state("r").unacked == 0
        await channel.append("publisher", 1, [pickle.dumps(500)], "block", 1.0)
        match = await asyncio.wait_for(channel.receive("r", "s", 1, 1, True), 2.0)
        assert [d.count for d in match.deliveries] == [1]
        assert channel.cursor_state("r").unacked == 1

    asyncio.run(main())
