"""Unit tests of Takes and SiblingWaits over fake channels (no Ray): what a failed take
beside others leaves to read again, what is told once, lost channels, and what a
fetch's offer becomes (handed over, split, or read again)."""

from __future__ import annotations

import pytest

from raytopic.actors.receive.pause import SeekPause
from raytopic.actors.receive.planner import PARALLEL_SHARE
from raytopic.actors.receive.ports import LocalPort, ReaderPort, RemotePort
from raytopic.actors.receive.positions import Positions
from raytopic.actors.receive.takes import Takes
from raytopic.actors.receive.view import OwnedView
from raytopic.actors.receive.waits import SiblingWaits
from raytopic.core.errors import ChannelFailedError, NotOwnerError, StaleSequenceError
from raytopic.core.protocol import CursorState, Delivery, Take, Watch

from tests.actors.receive.fake_channels import FakeChannel, run, turns


class Session:
    """The parts a session composes, over ``count`` fake channels (0 is the host)."""

    def __init__(self, count: int = 3, available: int = 2) -> None:
        self.channels = [FakeChannel(c, available) for c in range(count)]
        self.ports: dict[int, ReaderPort] = {
            0: LocalPort(0, self.channels[0], self.channels[0].state, self.channels[0].take_now)
        }
        for channel in self.channels[1:]:
            self.ports[channel.channel] = RemotePort(channel.channel, channel)
        self.view = OwnedView(dict.fromkeys(range(count)), host=0, window=None)
        self.unhanded: list[Delivery] = []
        self.positions = Positions("r", again=False, unhanded=self.unhanded.append)
        self.told: list[BaseException] = []
        self.dropped: list[int] = []
        self.pokes = 0
        self.receiving = True
        self.takes = Takes(
            self.ports, self.view, self.positions, drop=self.drop, tell_once=self.told.append
        )
        self.waits = SiblingWaits(
            "r",
            self.ports,
            self.view,
            self.positions,
            SeekPause(),
            drop=self.drop,
            tell_once=self.told.append,
            receiving=lambda: self.receiving,
            poke=self.poke,
        )

    def drop(self, channel: int) -> None:
        self.dropped.append(channel)
        self.view.drop(channel)

    def poke(self) -> None:
        self.pokes += 1


# -- takes -------------------------------------------------------------------------------


def test_a_take_reads_the_first_candidate_with_data_and_learns_its_cursor() -> None:
    async def main() -> None:
        session = Session()
        session.channels[1].available = 0
        taken = await session.takes.take_from([1, 2, 0], 10, spread=False)
        assert [(d.channel, d.count) for d in taken] == [(2, 2)]
        assert session.view.known[1].next == 10 and session.view.known[2].next == 12

    run(main)


def test_a_spread_take_splits_over_channels_and_a_failure_leaves_the_others_to_read_again() -> None:
    async def main() -> None:
        session = Session(available=1000)
        session.channels[2].refuse = ChannelFailedError("its store failed")
        with pytest.raises(ChannelFailedError):
            await session.takes.take_from([0, 1, 2], 3 * PARALLEL_SHARE, spread=True)
        shares = [t.max_count for c in session.channels for t in c.sent(Take)]
        assert shares == [PARALLEL_SHARE, 0, PARALLEL_SHARE, 0, PARALLEL_SHARE]
        assert sorted(d.channel for d in session.unhanded) == [0, 1]
        # Their read positions went back before the receive failed (takes of nothing).
        assert [c.next for c in session.channels[:2]] == [10, 10]
        session.channels[2].refuse = None
        again = await session.takes.take_from([0, 1], 2 * PARALLEL_SHARE, spread=True)
        assert [(d.channel, d.first) for d in again] == [(0, 10), (1, 10)]  # nobody saw them

    run(main)


def test_a_take_now_learns_the_cursor_and_the_session_reads_on_after_what_is_handed() -> None:
    session = Session(available=3)
    taken = session.takes.take_now(0, 2)
    assert taken is not None and (taken.first, taken.count) == (10, 2)
    assert session.view.known[0].next == 12
    session.positions.handed(taken)
    assert session.positions.reads_at(0) == 12
    session.channels[0].release.clear()  # it would wait: nothing taken, nothing learned
    session.view.forget(0)
    assert session.takes.take_now(0, 2) is None and 0 not in session.view.known
    assert session.takes.take_now(1, 2) is None  # a sibling is never served at once


def test_a_take_now_at_a_lost_channel_raises_and_drops_nothing() -> None:
    # Its caller (a publish's fast path) leaves the loss to the receive, taking for itself.
    session = Session()
    session.channels[0].refuse = NotOwnerError("lost")
    with pytest.raises(NotOwnerError):
        session.takes.take_now(0, 2)
    assert session.dropped == [] and session.view.owns(0)
    session.view.drop(0)
    assert session.takes.take_now(0, 2) is None  # not ours: not taken


def test_a_take_now_told_once_forgets_the_channel_as_a_take_does() -> None:
    session = Session()
    assert session.takes.take_now(0, 1) is not None
    stale = StaleSequenceError("skipped 3", 13, 3)
    session.channels[0].refuse = stale
    with pytest.raises(StaleSequenceError):
        session.takes.take_now(0, 1)
    assert 0 not in session.view.known and session.positions.reads_at(0) is None
    assert session.told == []  # the caller tells it once


def test_a_stale_channel_is_told_once_after_the_elements_of_others_are_delivered() -> None:
    async def main() -> None:
        session = Session(available=1000)
        stale = StaleSequenceError("skipped 3", 13, 3)
        session.channels[1].refuse = stale
        taken = await session.takes.take_from([0, 1], 2 * PARALLEL_SHARE, spread=True)
        assert [d.channel for d in taken] == [0]
        assert session.told == [stale] and 1 not in session.view.known

    run(main)


def test_a_channel_no_longer_ours_is_dropped_and_the_take_goes_on() -> None:
    async def main() -> None:
        session = Session()
        session.channels[1].refuse = NotOwnerError("moved")
        taken = await session.takes.take_from([1, 2], 10, spread=False)
        assert [d.channel for d in taken] == [2] and session.dropped == [1]

    run(main)


# -- fetches -----------------------------------------------------------------------------


def test_a_fetch_brings_its_offer_to_the_waiting_receive_and_the_next_fetch_moves_past() -> None:
    async def main() -> None:
        session = Session()
        session.waits.fetch(1, 10)
        assert 1 in session.waits.busy  # no take beside it
        await turns()
        assert session.waits.fetched and session.pokes == 1
        used = session.waits.use(10)
        assert [(d.channel, d.count) for d in used] == [(1, 2)]
        assert session.channels[1].next == 10  # an offer: nothing moved there
        session.waits.fetch(1, 10)  # the next fetch there moves it over what was used
        await turns()
        (_, second) = session.channels[1].sent(Take)
        assert (second.from_sequence, second.stands) == (12, 10)
        assert session.channels[1].next == 12 and len(session.channels[1].requests) == 2

    run(main)


def test_what_a_fetch_brings_past_the_room_is_read_again_from_there() -> None:
    async def main() -> None:
        session = Session(available=5)
        session.waits.fetch(1, 10)
        await turns()
        used = session.waits.use(3)
        assert sum(d.count for d in used) == 3
        assert [(d.first, d.count) for d in session.unhanded] == [(13, 2)]
        assert session.positions.reads_at(1) == 13

    run(main)


def test_a_fetch_that_lands_with_no_receive_waiting_is_read_again_later() -> None:
    async def main() -> None:
        session = Session()
        session.receiving = False
        session.waits.fetch(1, 10)
        await turns()
        assert not session.waits.fetched and session.positions.reads_at(1) == 10
        assert [d.first for d in session.unhanded] == [10]
        assert len(session.channels[1].requests) == 1  # nothing sent to undo it

    run(main)


def test_ended_fetches_are_left_to_end_and_what_they_bring_is_read_again() -> None:
    async def main() -> None:
        session = Session()
        session.channels[2].release.clear()
        session.waits.fetch(2, 10)
        await turns()
        session.waits.end_fetches()
        assert not session.waits.busy
        session.channels[2].release.set()  # it takes later, for nobody
        await turns()
        assert [d.first for d in session.unhanded] == [10]
        assert len(session.channels[2].requests) == 1  # no stop, no give-back

    run(main)


def test_a_watch_brings_the_cursor_state_and_pokes() -> None:
    async def main() -> None:
        session = Session()
        session.waits.watch(1, None)
        session.waits.watch(1, None)  # one at a time
        await turns()
        assert session.view.known[1].available and session.pokes == 1
        assert len(session.channels[1].requests) == 1

    run(main)


def test_a_watch_out_for_an_older_state_is_replaced() -> None:
    # A shared member's host watched a sibling while it held nothing there, then took
    # elements there (its window full) and the member acknowledged them: the sibling is
    # back at the state the first watch waits to change from. Before, no new watch went
    # out (one at a time): the receive waited the first watch's whole 10 s timeout.
    async def main() -> None:
        session = Session()
        channel = session.channels[1]
        channel.settle.clear()
        now = channel.state("r")
        session.waits.watch(1, now)
        session.waits.watch(1, now)  # one at a time while it knows the same state
        await turns()
        assert [w.known for w in channel.sent(Watch)] == [now] and 1 not in session.view.known
        holding = CursorState(now.next + 4, now.committed + 4, now.tail, 0, unacked=4)
        session.waits.watch(1, holding)  # what it learned since (a take there)
        await turns()
        assert [w.known for w in channel.sent(Watch)] == [now, holding]
        assert session.view.known[1] == now and session.pokes == 1

    run(main)


def test_a_watch_of_a_channel_no_longer_ours_drops_it() -> None:
    async def main() -> None:
        session = Session()
        session.channels[1].refuse = NotOwnerError("moved")
        session.waits.watch(1, None)
        await turns()
        assert session.dropped == [1]

    run(main)
