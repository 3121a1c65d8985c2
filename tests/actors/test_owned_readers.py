"""Unit tests of OwnedReaders (no Ray): takes from anonymous and group cursors, the lease
check, takes by position (nothing lent: a fetch offers, a session's position moves the
read position), a lost host's successor reading again, commits, seeks, what a reader
behind the head or at a damaged range is told, and the coordinator's group calls."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from typing import Any

import pytest

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_state import ChannelState
from raytopic.actors.cursors import Cursor
from raytopic.actors.owned_readers import OwnedReaders
from raytopic.actors.reader_parts import LossNotice, Reader
from raytopic.actors.stores.base import ChannelStore
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import (
    DataLossError,
    GroupNotFoundError,
    NotOwnerError,
    StaleSequenceError,
    SubscriberClosedError,
)
from raytopic.core.payloads import DamagedElements, PickledValues
from raytopic.core.protocol import Delivery, Lease, ReaderSpec, Take
from raytopic.core.records import CommitStatus

from tests.seed_store import SeedStore

CONFIG = TopicConfig("t", "ns", "t0pic1d", 1, 10, True, None, Overflow.BLOCK, ())
MEMBER, OTHER = Lease("m", 1), Lease("o", 2)


class _Owned:
    """OwnedReaders over a log without a store, with a dict of open readers."""

    def __init__(self, capacity: int = 10) -> None:
        config = TopicConfig("t", "ns", "t0pic1d", 1, capacity, True, None, Overflow.BLOCK, ())
        self.context = ChannelContext(config, 0, ChannelMetrics("t", 0))
        self.log = ChannelLog(self.context)
        self.state = ChannelState(self.context, lambda: self.log.next_sequence, lambda: None)
        self.loss = LossNotice()
        self.readers: dict[str, Reader] = {}
        self.owned = OwnedReaders(self.context, self.log, self.loss, self.state, self._lookup)

    def _lookup(self, reader_id: str) -> Reader:
        try:
            return self.readers[reader_id]
        except KeyError:
            raise SubscriberClosedError(reader_id) from None

    def append(self, values: Sequence[Any]) -> None:
        self.log.ring.append(PickledValues.from_values(values), overwrite=True)

    async def take(
        self, reader_id: str, lease: Lease | None, count: int, wait: float = 0.0, **at: Any
    ) -> Delivery:
        """The take of a session (``at``: the position it names, see ``Take``)."""
        return await self.owned.take(
            self._lookup(reader_id), Take(reader_id, lease, count, wait, **at)
        )

    def anonymous(self, reader_id: str = "a", **spec: Any) -> Reader:
        filters = {key: spec.pop(key) for key in ("filter", "converter") if key in spec}
        reader = Reader(
            reader_id,
            ReaderSpec(None, False, **spec),
            self.owned.new_cursor(False),
            filters.get("filter"),
            filters.get("converter"),
        )
        self.readers[reader_id] = reader
        return reader

    def member(self, reader_id: str = "m", group: str = "g", lease: Lease = MEMBER) -> Reader:
        if group not in self.owned.groups:
            self.owned.ensure_group(group, False)
            self.owned.grant(group, lease)
        reader = self.readers[reader_id] = Reader(reader_id, ReaderSpec(group, False), None)
        return reader


def _values(delivery: Delivery) -> list[Any]:
    return [value for chunk in delivery.chunks for value in chunk.payload.decode()]


class _SavingStore(SeedStore):
    """A user's store that keeps its state whole (a copy, as if written to a file)."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: dict[str, Any] | None = None

    def save_state(self, state: dict[str, Any]) -> None:
        self.saved = copy.deepcopy(state)

    def load_state(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.saved)


# -- takes -----------------------------------------------------------------------------------------


def test_an_anonymous_reader_takes_in_order_from_its_own_cursor() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(5))
        parts.anonymous("a")
        latest = parts.owned.new_cursor(True)
        assert (latest.next, parts.owned.new_cursor(False).next) == (5, 0)
        first = await parts.take("a", None, 3)
        assert _values(first) == [0, 1, 2] and (first.first, first.next, first.tail) == (0, 3, 4)
        second = await parts.take("a", None, 10)
        assert _values(second) == [3, 4] and second.next == 5
        empty = await parts.take("a", None, 10)
        assert (empty.count, empty.first, empty.next) == (0, 5, 5)
        assert parts.readers["a"].cursor.unacked == 5  # delivered, nothing committed

    asyncio.run(main())


def test_only_the_lease_holder_takes_and_commits_a_group_s_channel() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(3))
        reader = parts.member("m")
        with pytest.raises(NotOwnerError, match="not owned"):
            await parts.take("m", OTHER, 1)
        assert parts.owned.commit(reader, 0, OTHER).status is CommitStatus.NOT_OWNER
        assert _values(await parts.take("m", MEMBER, 2)) == [0, 1]
        assert parts.owned.commit(reader, 1, MEMBER).status is CommitStatus.COMMITTED
        assert parts.owned.commit(reader, 0, MEMBER).status is CommitStatus.ALREADY_COMMITTED
        assert parts.owned.commit(reader, 7, MEMBER).status is CommitStatus.REJECTED  # > tail
        assert parts.owned.grant("g", OTHER)  # a new owner resumes after the commit
        assert not parts.owned.grant("g", OTHER)  # no change
        delivery = await parts.take("m", OTHER, 5)
        assert _values(delivery) == [2] and delivery.committed == 1
        assert parts.owned.commit(None, 2, OTHER).status is CommitStatus.NOT_OWNER  # closed

    asyncio.run(main())


def test_a_filtered_take_marks_its_misses_done_and_does_not_count_them_unacknowledged() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(8))
        reader = parts.anonymous(
            "a", filter=lambda value: value in (1, 3), converter=lambda value: value * 10
        )
        delivery = await parts.take("a", None, 5)
        assert _values(delivery) == [10, 30]
        assert [chunk.sequence_list() for chunk in delivery.chunks] == [[1, 3]]
        assert delivery.next == 8  # 4..7 were read: misses
        assert reader.cursor.done == [(0, 0), (2, 2), (4, 7)]  # every miss, between matches too
        assert reader.cursor.unacked == 2  # 1 and 3

    asyncio.run(main())


def test_a_cursor_behind_the_head_is_told_once_how_many_it_missed() -> None:
    async def main() -> None:
        parts = _Owned(capacity=3)
        parts.anonymous("a")
        parts.append(range(5))  # 0 and 1 overwritten
        with pytest.raises(StaleSequenceError) as stale:
            await parts.take("a", None, 10)
        assert (stale.value.head_sequence, stale.value.skipped) == (2, 2)
        assert _values(await parts.take("a", None, 10)) == [2, 3, 4]

    asyncio.run(main())


def test_what_a_commit_passed_is_never_delivered_again_nor_told_removed() -> None:
    # A channel restarted from its store reads on after the commit it recovered, and a
    # commit of what its member received before the restart passes the read position
    # (trial67: told "118 elements were removed before they were received").
    async def main() -> None:
        parts = _Owned(capacity=4)
        parts.append(range(4))
        reader = parts.member("m")
        assert parts.owned.commit(reader, 2, MEMBER).status is CommitStatus.COMMITTED
        assert _values(await parts.take("m", MEMBER, 10)) == [3]
        parts.append(range(4, 10))  # the ring keeps 6..9
        assert parts.owned.commit(reader, 6, MEMBER).status is CommitStatus.COMMITTED
        assert _values(await parts.take("m", MEMBER, 10)) == [7, 8, 9]

    asyncio.run(main())


def test_a_restart_s_loss_is_told_once_and_the_cursor_moves_to_the_head() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.anonymous("a")
        parts.log.restart_at(100)
        parts.append(["x"])
        parts.readers["a"].cursor = Cursor.starting_at(7)
        parts.loss.error = DataLossError(
            "lost", head_sequence=100, channel=0, old_epoch=1, new_epoch=2
        )
        parts.loss.unaware = {"a"}
        with pytest.raises(DataLossError):
            await parts.take("a", None, 10)
        assert parts.readers["a"].cursor.next == 100
        assert _values(await parts.take("a", None, 10)) == ["x"]

    asyncio.run(main())


def test_a_take_that_reaches_a_damaged_range_stops_before_it_then_passes_it_once() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append([0, 1])
        parts.log.ring.append(DamagedElements(3), overwrite=True)  # 2..4, as recovered
        parts.log.damage.add(2, 4)
        parts.append([5])
        reader = parts.anonymous("a")
        assert _values(await parts.take("a", None, 10)) == [0, 1]
        with pytest.raises(DataLossError) as lost:
            await parts.take("a", None, 10)
        assert lost.value.lost == (2, 4)
        assert reader.cursor.next == 5 and reader.cursor.unacked == 2  # passed over
        assert _values(await parts.take("a", None, 10)) == [5]

    asyncio.run(main())


# -- takes by position ----------------------------------------------------------------------------


def test_a_fetch_waits_for_data_at_its_position_and_offers_it_moving_nothing() -> None:
    async def main() -> None:
        parts = _Owned()
        reader = parts.anonymous("a")
        waiting = asyncio.ensure_future(parts.take("a", None, 4, 5.0))
        await asyncio.sleep(0.05)
        parts.append(range(6))
        parts.context.notify()
        offer = await asyncio.wait_for(waiting, 1.0)
        assert _values(offer) == [0, 1, 2, 3] and (offer.next, offer.stands) == (4, 0)
        assert reader.cursor.next == 0 and reader.cursor.delivered_high == 3
        # Nothing is lent: another take reads at once, the same elements.
        assert _values(await asyncio.wait_for(parts.take("a", None, 2), 1.0)) == [0, 1]
        # A fetch with nothing there answers empty after its wait.
        reader.cursor.next = 6
        assert (await parts.take("a", None, 4, 0.05)).count == 0

    asyncio.run(main())


def test_a_take_reads_at_its_sessions_position_only_where_the_read_position_still_stands() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        reader = parts.anonymous("a")
        offer = await parts.take("a", None, 2, 1.0)
        # Two handed over from the offer: forward over them.
        assert _values(await parts.take("a", None, 2, from_sequence=2, stands=0)) == [2, 3]
        # Those reached no receive: back to 2.
        assert _values(await parts.take("a", None, 1, from_sequence=2, stands=4)) == [2]
        # A session whose place is stale (not where the read position stands now, or
        # under another jump count) reads on where it stands.
        assert _values(await parts.take("a", None, 1, from_sequence=0, stands=0)) == [3]
        parts.owned.seek(reader, None, 0, False, False)  # a jump: next is 1
        stale = await parts.take("a", None, 1, from_sequence=4, stands=1, jumps=offer.jumps)
        assert _values(stale) == [1] and stale.jumps == offer.jumps + 1

    asyncio.run(main())


def test_a_take_of_nothing_moves_the_read_position_and_tells_nothing() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        reader = parts.anonymous("a")
        await parts.take("a", None, 4)
        moved = await parts.take("a", None, 0, from_sequence=1, stands=4)
        assert (moved.count, moved.next, reader.cursor.next) == (0, 1, 1)
        reader.cursor.next = 100  # (far past the tail: a take would tell of nothing)
        assert (await parts.take("a", None, 0)).next == 100

    asyncio.run(main())


def test_a_group_gets_again_what_a_lost_hosts_session_took_and_an_anonymous_reader_not() -> None:
    # A session of a host that died took 1..4 (in a reply that never went out, or
    # held by its resequencer): its successor's first take reads again after the
    # commit; a group that has not read past its commit changes nothing.
    async def main() -> None:
        parts = _Owned()
        parts.append(range(8))
        reader = parts.member("m")
        group = parts.owned.groups["g"]
        assert _values(await parts.take("m", MEMBER, 1)) == [0]
        parts.owned.commit(reader, 0, MEMBER)
        await parts.take("m", MEMBER, 4)
        jumps = group.jumps
        assert _values(await parts.take("m", MEMBER, 10, again=True)) == list(range(1, 8))
        assert group.jumps == jumps + 1  # what other sessions hold is void
        parts.owned.commit(reader, 7, MEMBER)
        assert (await parts.take("m", MEMBER, 10, again=True)).count == 0
        assert group.jumps == jumps + 1
        # An anonymous reader with no commit has nothing to go back to; with one, it
        # goes back there.
        anonymous = parts.anonymous("a")
        await parts.take("a", None, 3)
        assert _values(await parts.take("a", None, 1, again=True)) == [3]
        parts.owned.commit(anonymous, 1, None)
        assert _values(await parts.take("a", None, 1, again=True)) == [2]

    asyncio.run(main())


def test_seek_by_position_and_by_time_moves_the_cursor_and_counts_a_jump() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.log.ring.append(PickledValues.from_values("ab"), overwrite=True, stamp=100.0)
        parts.log.ring.append(PickledValues.from_values("cd"), overwrite=True, stamp=200.0)
        reader = parts.anonymous("a")
        position, jumps = parts.owned.seek(reader, None, 2, False, True)
        assert (position, jumps) == (2, 1) and reader.cursor.committed == 2
        assert _values(await parts.take("a", None, 10)) == ["d"]
        position, jumps = parts.owned.seek(reader, None, 150.0, True, False)
        assert (position, jumps) == (1, 2)  # the next is the first stamped after 150
        assert reader.cursor.committed == 1  # a seek back rolls the commit back
        assert _values(await parts.take("a", None, 10)) == ["c", "d"]

    asyncio.run(main())


def test_a_seek_to_the_commit_waits_for_a_prepared_commit_of_the_group_here() -> None:
    # The member's last transaction committed (its holder had the answer), but this
    # channel only had its consumed commit to make: that finish may come later. A seek
    # to the commit made before it would go back to the older commit and deliver the
    # committed elements again (their outputs twice).
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        reader = parts.member("m")
        await parts.take("m", MEMBER, 6)
        prepared = {"g": True}
        parts.owned.waits_for_commit = lambda group, lease: prepared.get(group, False)
        seek = asyncio.ensure_future(parts.owned.seek_to_committed(reader, MEMBER))
        await asyncio.sleep(0.05)
        assert not seek.done()
        parts.owned.groups["g"].commit(2, tail=5)  # the finish lands
        prepared["g"] = False
        parts.context.notify()
        assert await asyncio.wait_for(seek, 1.0) == (2, 2)  # (a grant was jump 1)
        assert _values(await parts.take("m", MEMBER, 10)) == [3, 4, 5]
        with pytest.raises(NotOwnerError):
            await parts.owned.seek_to_committed(reader, OTHER)

    asyncio.run(main())


def test_a_group_reset_can_be_restored_and_unknown_groups_are_refused() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        parts.member("m")
        await parts.take("m", MEMBER, 4)
        cursor = parts.owned.groups["g"]
        position, previous = parts.owned.reset("g", 1)
        assert position == 1 and (cursor.next, cursor.committed) == (2, 1)
        jumps = cursor.jumps
        assert parts.owned.restore("g", previous)
        assert (cursor.next, cursor.committed, cursor.jumps) == (4, -1, jumps + 1)
        assert not parts.owned.restore("gone", previous)
        with pytest.raises(GroupNotFoundError):
            parts.owned.reset("gone", 0)
        with pytest.raises(GroupNotFoundError):
            parts.owned.grant("gone", MEMBER)

    asyncio.run(main())


def test_ensure_group_creates_once_and_the_figures_follow_the_cursors() -> None:
    parts = _Owned()
    parts.append(range(4))
    state, created = parts.owned.ensure_group("late", True)
    assert created and (state.next, state.committed) == (4, 3)
    state, created = parts.owned.ensure_group("late", False)
    assert not created and state.next == 4  # an existing group keeps its place
    parts.owned.ensure_group("early", False)
    assert parts.owned.lowest_committed() == -1
    assert sorted(parts.owned.lag(0, 3)) == [("early", 4, 4), ("late", 0, 0)]
    # Below the head (expired, dropped) counts as neither lag nor depth.
    assert sorted(parts.owned.lag(2, 3)) == [("early", 2, 2), ("late", 0, 0)]
    assert parts.owned.describe()["early"]["owner"] is None


def test_a_commit_and_a_new_group_reach_the_stored_state() -> None:
    async def main() -> None:
        parts = _Owned()
        store = ChannelStore(_SavingStore())
        parts.state.open(store)
        owned = parts.owned
        parts.state.provide(
            "groups", lambda group: owned.groups[group].to_state(), lambda: owned.groups
        )
        parts.append(range(3))
        reader = parts.member("m")
        await parts.take("m", MEMBER, 3)
        owned.commit(reader, 1, MEMBER)
        await parts.state.save()
        saved = store.load_state()
        assert saved is not None and saved["groups"]["g"]["committed"] == 1

    asyncio.run(main())
