"""Unit tests of a session's positions over fake channels (no Ray): each take names where
the session reads and where it left the channel's read position, so what no receive
handed over is read again, a fetch's offer moves nothing until the next take there,
a jump voids the session's place, and a lost host's successor reads again."""

from __future__ import annotations

import asyncio

import pytest
import ray

from raytopic.actors.receive.ports import RemotePort
from raytopic.actors.receive.positions import Positions
from raytopic.core.protocol import Delivery, Lease, Take

from tests.actors.receive.fake_channels import FakeChannel, delivery, run, turns


class Session:
    """Positions over one fake sibling channel (1), recording what reached no receive."""

    def __init__(self, available: int = 2, *, again: bool = False) -> None:
        self.channel = FakeChannel(1, available)
        self.port = RemotePort(1, self.channel)
        self.unhanded: list[Delivery] = []
        self.passed: list[tuple[int, int, int]] = []
        self.positions = Positions(
            "r",
            again=again,
            unhanded=self.unhanded.append,
            passed=lambda *where: self.passed.append(where),
        )

    def take(self, count: int = 10, lease: object = None, wait: float = 0.0) -> asyncio.Future:
        return asyncio.ensure_future(self.positions.take(self.port, lease, count, wait))

    def sent(self) -> list[tuple[int | None, int, int]]:
        """Each take's (from_sequence, stands, max_count)."""
        return [(t.from_sequence, t.stands, t.max_count) for t in self.channel.sent(Take)]


def test_a_first_take_names_no_position_and_what_is_handed_over_is_read_on_from() -> None:
    async def main() -> None:
        session = Session(available=4)
        first = await session.take(2)
        assert (first.first, first.count) == (10, 2)
        session.positions.handed(first)
        assert session.positions.reads_at(1) == 12
        second = await session.take(2)
        assert (second.first, second.count) == (12, 2)
        assert session.sent() == [(None, -1, 2), (12, 12, 2)]  # reads on where it stands

    run(main)


def test_a_take_no_receive_handed_over_is_read_again_by_the_next_take() -> None:
    async def main() -> None:
        session = Session(available=4)
        await session.take(2)  # its receive never hands it over
        assert session.positions.reads_at(1) == 10 and session.channel.next == 12
        again = await session.take(2)
        assert (again.first, again.count) == (10, 2)  # the read position moved back
        assert session.sent()[-1] == (10, 12, 2)

    run(main)


def test_a_take_no_receive_hands_over_moves_the_read_position_back_at_once_an_offer_not() -> None:
    async def main() -> None:
        session = Session(available=4)
        taken = await session.take(2)
        back = session.positions.unhanded(taken)
        assert back is not None
        await back
        assert session.channel.next == 10 and session.sent()[-1] == (10, 12, 0)
        assert [d.first for d in session.unhanded] == [10]
        offer = await session.take(2, wait=1.0)
        assert session.positions.unhanded(offer) is None  # it moved nothing

    run(main)


def test_a_fetchs_offer_moves_nothing_until_the_next_take_moves_it_over_what_was_used() -> None:
    async def main() -> None:
        session = Session(available=4)
        offer = await session.take(2, wait=1.0)
        assert (offer.first, offer.count, offer.stands) == (10, 2, 10)
        assert session.channel.next == 10  # an offer: nothing moved
        session.positions.handed(offer)
        after = await session.take(2)
        assert session.sent()[-1] == (12, 10, 2)  # forward over what was handed over
        assert (after.first, session.channel.next) == (12, 14)

    run(main)


def test_part_of_an_offer_handed_over_reads_on_after_that_part() -> None:
    async def main() -> None:
        session = Session(available=4)
        offer = await session.take(4, wait=1.0)
        used, rest = offer.split(1)
        session.positions.handed(used, rest.first)
        assert (await session.take(10)).first == 11

    run(main)


def test_a_jump_at_the_channel_voids_the_place_and_the_channel_says_where_it_stands() -> None:
    async def main() -> None:
        session = Session(available=10)
        session.positions.handed(await session.take(2))
        session.channel.jump(15)  # a seek moved the read position
        after = await session.take(2)
        assert (after.first, after.jumps) == (15, 1)  # the session's 12 is void
        session.positions.handed(after)
        assert (await session.take(2)).first == 17

    run(main)


def test_a_take_waits_for_the_sessions_take_on_its_way_there_and_reads_it_again() -> None:
    async def main() -> None:
        session = Session(available=4)
        session.channel.release.clear()
        cancelled = session.take(2)
        await turns()
        cancelled.cancel()  # its receive is gone; the take lands later
        second = session.take(2)
        await turns()
        assert len(session.channel.sent(Take)) == 1  # the second waits for the first
        session.channel.release.set()
        again = await second
        assert (again.first, again.count) == (10, 2)  # what nobody saw, once more
        assert [d.first for d in session.unhanded] == [10]

    run(main)


class Replies:
    """A port whose replies the test gives, in any order."""

    channel = 1
    in_process = False

    def __init__(self) -> None:
        self.calls: list[tuple[Take, asyncio.Future[Delivery]]] = []

    def take(self, take: Take) -> asyncio.Future[Delivery]:
        reply: asyncio.Future[Delivery] = asyncio.get_running_loop().create_future()
        self.calls.append((take, reply))
        return reply


def test_a_fetch_holds_no_take_back_and_its_reply_older_than_one_heard_is_dropped() -> None:
    async def main() -> None:
        port, unhanded = Replies(), []
        positions = Positions("r", again=False, unhanded=unhanded.append)
        fetch = asyncio.ensure_future(positions.take(port, None, 2, 1.0))
        take = asyncio.ensure_future(positions.take(port, None, 2))
        await turns()
        assert len(port.calls) == 2  # a fetch on its way holds no take back
        port.calls[1][1].set_result(delivery(1, 10, 2, stands=12))
        port.calls[0][1].set_result(delivery(1, 10, 2, stands=10))  # older: dropped
        await asyncio.gather(fetch, take)
        assert positions.request(1, None, 5) == Take("r", None, 5, 0.0, 10, 12, 0)

    run(main)


def test_a_session_that_replaces_a_lost_one_reads_again_with_its_first_take_at_each() -> None:
    async def main() -> None:
        session = Session(again=True)
        await session.take(1)
        await session.take(1)
        assert [t.again for t in session.channel.sent(Take)] == [True, False]

    run(main)


def test_a_place_under_another_lease_is_not_named() -> None:
    async def main() -> None:
        session = Session(available=4)
        old, new = Lease("r", 1), Lease("r", 2)
        session.positions.handed(await session.take(2, lease=old))
        assert session.positions.request(1, new, 5) == Take("r", new, 5)

    run(main)


def test_what_to_hand_back_is_each_held_channel_whose_read_position_stands_elsewhere() -> None:
    async def main() -> None:
        session = Session(available=4)
        member, lost = Lease("r", 1), Lease("r", 0)
        assert session.positions.to_hand_back(lambda channel: member) == []
        offer = await session.take(2, lease=member, wait=1.0)
        session.positions.handed(offer)  # read on at 12, standing at 10
        assert session.positions.to_hand_back(lambda channel: member) == [(1, member)]
        assert session.positions.to_hand_back(lambda channel: lost) == []
        await session.take(0, lease=member)  # the take of nothing a pause sends
        assert session.channel.next == 12
        assert session.positions.to_hand_back(lambda channel: member) == []

    run(main)


def test_a_take_that_reads_past_done_positions_tells_the_session_which() -> None:
    # (A resequencing session then keeps released what it released from there.)
    async def main() -> None:
        session = Session(available=6)
        first = await session.take(2)
        session.positions.handed(first)
        session.channel.done = (12, 13)
        second = await session.take(2)
        assert (second.first, second.count) == (14, 2)
        assert session.passed == [(1, 12, 13)]
        await session.take(2)  # nothing passed over: nothing said
        assert session.passed == [(1, 12, 13)]

    run(main)


def test_a_void_replys_passed_is_said_unless_the_read_position_jumped_since() -> None:
    # A fetch read past done positions 12..13; a take beside it was heard first. Under
    # the same jump count the fetch's passed is still a fact (they stay done). Under a
    # lower one (a reset or a seek back jumped the read position since the fetch was
    # served) it is not: a reset gives them again, and a resequencing session told
    # they never come again would drop them as late (if they are still done, the
    # next take past them says so again, under the count now).
    async def main() -> None:
        port = Replies()
        session = Session()
        for jumps, said in ((0, [(1, 12, 13)]), (1, [])):
            session.passed.clear()
            fetch = asyncio.ensure_future(session.positions.take(port, None, 2, 1.0))
            take = asyncio.ensure_future(session.positions.take(port, None, 2))
            await turns()
            port.calls[-1][1].set_result(delivery(1, 10, 2, jumps=jumps, stands=12))
            await take
            port.calls[-2][1].set_result(delivery(1, 14, 2, jumps=0, stands=14, passed=(12, 13)))
            await fetch
            assert session.passed == said

    run(main)


def test_an_offer_for_a_position_the_session_read_past_is_stale() -> None:
    # A fetch's offer kept for a receive that was cancelled as it came: the session's
    # next take read the same elements again and handed them over; the offer is stale.
    async def main() -> None:
        session = Session(available=4)
        offer = await session.take(2, wait=1.0)
        assert session.positions.reads_from(offer)
        again = await session.take(2)
        assert (again.first, again.count) == (offer.first, offer.count)
        session.positions.handed(again)
        assert not session.positions.reads_from(offer)

    run(main)


def test_a_take_whose_reply_a_cancel_dropped_is_read_again_from_the_sessions_place() -> None:
    # A user's recursive ray.cancel of the receive reaches the host's take at a
    # sibling after the sibling moved the read position: Ray drops the reply.
    async def main() -> None:
        session = Session(available=6)
        first = await session.take(2)
        session.positions.handed(first)  # the session reads on from 12
        session.channel.drop_reply = ray.exceptions.TaskCancelledError()
        with pytest.raises(ray.exceptions.TaskCancelledError):
            await session.take(2)  # the sibling moved to 14; the reply is lost
        session.channel.drop_reply = None
        again = await session.take(2)
        assert (again.first, again.count) == (12, 2)  # not 14: nothing is skipped

    run(main)


def test_a_first_take_whose_reply_a_cancel_dropped_reads_again_after_the_commit() -> None:
    async def main() -> None:
        session = Session(available=6)
        session.channel.drop_reply = ray.exceptions.TaskCancelledError()
        with pytest.raises(ray.exceptions.TaskCancelledError):
            await session.take(2)  # no place here yet: the session knows no position
        session.channel.drop_reply = None
        await session.take(2)
        assert [t.again for t in session.channel.sent(Take)] == [False, True]

    run(main)
