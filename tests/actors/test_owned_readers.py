"""Unit tests of OwnedReaders (no Ray): takes from anonymous and group cursors, the lease
check, lending until a fetch's session settles, give-backs, commits, seeks, what a reader
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
from raytopic.core.protocol import Delivery, Lease, ReaderSpec
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
        first = await parts.owned.take("a", None, 3, None)
        assert _values(first) == [0, 1, 2] and (first.first, first.next, first.tail) == (0, 3, 4)
        second = await parts.owned.take("a", None, 10, None)
        assert _values(second) == [3, 4] and second.next == 5
        empty = await parts.owned.take("a", None, 10, None)
        assert (empty.count, empty.first, empty.next) == (0, 5, 5)
        assert parts.readers["a"].cursor.unacked == 5  # delivered, nothing committed

    asyncio.run(main())


def test_only_the_lease_holder_takes_and_commits_a_group_s_channel() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(3))
        reader = parts.member("m")
        with pytest.raises(NotOwnerError, match="not owned"):
            await parts.owned.take("m", OTHER, 1, None)
        assert parts.owned.commit(reader, 0, OTHER).status is CommitStatus.NOT_OWNER
        assert _values(await parts.owned.take("m", MEMBER, 2, None)) == [0, 1]
        assert parts.owned.commit(reader, 1, MEMBER).status is CommitStatus.COMMITTED
        assert parts.owned.commit(reader, 0, MEMBER).status is CommitStatus.ALREADY_COMMITTED
        assert parts.owned.commit(reader, 7, MEMBER).status is CommitStatus.REJECTED  # > tail
        assert parts.owned.grant("g", OTHER)  # a new owner resumes after the commit
        assert not parts.owned.grant("g", OTHER)  # no change
        delivery = await parts.owned.take("m", OTHER, 5, None)
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
        delivery = await parts.owned.take("a", None, 5, None)
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
            await parts.owned.take("a", None, 10, None)
        assert (stale.value.head_sequence, stale.value.skipped) == (2, 2)
        assert _values(await parts.owned.take("a", None, 10, None)) == [2, 3, 4]

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
            await parts.owned.take("a", None, 10, None)
        assert parts.readers["a"].cursor.next == 100
        assert _values(await parts.owned.take("a", None, 10, None)) == ["x"]

    asyncio.run(main())


def test_a_take_that_reaches_a_damaged_range_stops_before_it_then_passes_it_once() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append([0, 1])
        parts.log.ring.append(DamagedElements(3), overwrite=True)  # 2..4, as recovered
        parts.log.damage.add(2, 4)
        parts.append([5])
        reader = parts.anonymous("a")
        assert _values(await parts.owned.take("a", None, 10, None)) == [0, 1]
        with pytest.raises(DataLossError) as lost:
            await parts.owned.take("a", None, 10, None)
        assert lost.value.lost == (2, 4)
        assert reader.cursor.next == 5 and reader.cursor.unacked == 2  # passed over
        assert _values(await parts.owned.take("a", None, 10, None)) == [5]

    asyncio.run(main())


# -- lending, settling, giving back ----------------------------------------------------------------


def test_a_lent_take_holds_the_cursor_until_its_session_settles_it() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        reader = parts.anonymous("a")
        fetched = await parts.owned.take("a", None, 4, "1:fetch")
        assert _values(fetched) == [0, 1, 2, 3] and reader.cursor.lent is not None
        direct = asyncio.ensure_future(parts.owned.take("a", None, 10, None))
        await asyncio.sleep(0.05)
        assert not direct.done()  # the cursor is lent
        assert not parts.owned.settle(reader, None, "someone else", None)
        # The session used two of the four: the rest is read again.
        assert parts.owned.settle(reader, None, "1:fetch", 2)
        assert _values(await asyncio.wait_for(direct, 1.0)) == [2, 3, 4, 5]
        assert not parts.owned.settle(reader, None, "1:fetch", None)  # settled already

    asyncio.run(main())


def test_a_seek_voids_a_loan_so_its_settle_changes_nothing() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        reader = parts.anonymous("a")
        await parts.owned.take("a", None, 4, "1:fetch")
        parts.owned.seek(reader, None, 4, False, False)
        assert not parts.owned.settle(reader, None, "1:fetch", 0)
        assert reader.cursor.next == 5

    asyncio.run(main())


def test_a_give_back_rewinds_only_a_cursor_that_stands_where_the_take_left_it() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        reader = parts.anonymous("a")
        taken = await parts.owned.take("a", None, 3, None)
        assert not parts.owned.give_back(reader, None, 0, taken.next + 1, taken.jumps)
        assert not parts.owned.give_back(reader, None, 0, taken.next, taken.jumps + 1)
        assert parts.owned.give_back(reader, None, 1, taken.next, taken.jumps)
        assert reader.cursor.next == 1
        parts.owned.seek(reader, None, 2, False, False)
        again = await parts.owned.take("a", None, 3, None)
        assert _values(again) == [3, 4, 5]
        assert not parts.owned.give_back(reader, None, 3, again.next, taken.jumps)  # stale
        assert not parts.owned.give_back(None, None, 3, again.next, again.jumps)  # closed

    asyncio.run(main())


def test_a_restarted_hosts_lent_takes_are_taken_back_and_others_kept() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        anonymous = parts.anonymous("a")
        parts.member("m")
        await parts.owned.take("a", None, 2, "2:x-0")
        await parts.owned.take("m", MEMBER, 3, "1:y-0")
        taken_back = parts.owned.host_restarted("2:", iter(parts.readers.values()))
        assert taken_back == 1
        assert anonymous.cursor.lent is None and anonymous.cursor.next == 0
        group = parts.owned.groups["g"]
        assert group.lent is not None and group.next == 3

    asyncio.run(main())


def test_a_group_gets_again_what_a_restarted_host_s_sessions_took_and_settled() -> None:
    # A session at channel 2 took 1..4 and settled them (used: in a reply on its way);
    # channel 2 died before the reply went out. Nothing is lent any more, yet the
    # group must get them again: its cursor goes back after its commit.
    async def main() -> None:
        parts = _Owned()
        parts.append(range(8))
        reader = parts.member("m")
        group = parts.owned.groups["g"]
        assert _values(await parts.owned.take("m", MEMBER, 1, "2:s1-0")) == [0]
        parts.owned.settle(reader, MEMBER, "2:s1-0", None)
        parts.owned.commit(reader, 0, MEMBER)
        await parts.owned.take("m", MEMBER, 4, "2:s1-1")
        assert parts.owned.settle(reader, MEMBER, "2:s1-1", None) and group.next == 5
        jumps = group.jumps
        assert parts.owned.host_restarted("1:", iter(parts.readers.values())) == 0
        assert parts.owned.host_restarted("2:", iter(parts.readers.values())) == 1
        assert (group.next, group.lent, group.jumps) == (1, None, jumps + 1)
        assert _values(await parts.owned.take("m", MEMBER, 10, None)) == [1, 2, 3, 4, 5, 6, 7]
        # Told again (the coordinator and the host both tell): nothing more moves.
        assert parts.owned.host_restarted("2:", iter(parts.readers.values())) == 0

    asyncio.run(main())


def test_a_new_session_of_the_same_host_first_gets_what_the_gone_one_took() -> None:
    # The restarted host's first take (a new session) comes before any word of the
    # restart: it is served from after the commit, not after what the old one took.
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        reader = parts.member("m")
        await parts.owned.take("m", MEMBER, 2, "2:old-0")
        parts.owned.settle(reader, MEMBER, "2:old-0", None)
        assert _values(await parts.owned.take("m", MEMBER, 2, "2:old-1")) == [2, 3]
        parts.owned.settle(reader, MEMBER, "2:old-1", None)
        parts.owned.commit(reader, 1, MEMBER)
        assert _values(await parts.owned.take("m", MEMBER, 10, "2:new-0")) == [2, 3, 4, 5]
        parts.owned.settle(reader, MEMBER, "2:new-0", None)
        # The same session again, another host's, or a direct take: read on.
        assert _values(await parts.owned.take("m", MEMBER, 10, "2:new-1")) == []
        parts.owned.commit(reader, 5, MEMBER)
        parts.append(range(6, 9))
        assert _values(await parts.owned.take("m", MEMBER, 1, "3:other-0")) == [6]
        parts.owned.settle(reader, MEMBER, "3:other-0", None)
        assert _values(await parts.owned.take("m", MEMBER, 1, None)) == [7]
        # A host whose takes are all committed changes nothing when it restarts.
        parts.owned.commit(reader, 7, MEMBER)
        assert _values(await parts.owned.take("m", MEMBER, 1, "3:again-0")) == [8]

    asyncio.run(main())


# -- seeks and the coordinator's calls -------------------------------------------------------------


def test_seek_by_position_and_by_time_moves_the_cursor_and_counts_a_jump() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.log.ring.append(PickledValues.from_values("ab"), overwrite=True, stamp=100.0)
        parts.log.ring.append(PickledValues.from_values("cd"), overwrite=True, stamp=200.0)
        reader = parts.anonymous("a")
        position, jumps = parts.owned.seek(reader, None, 2, False, True)
        assert (position, jumps) == (2, 1) and reader.cursor.committed == 2
        assert _values(await parts.owned.take("a", None, 10, None)) == ["d"]
        position, jumps = parts.owned.seek(reader, None, 150.0, True, False)
        assert (position, jumps) == (1, 2)  # the next is the first stamped after 150
        assert reader.cursor.committed == 1  # a seek back rolls the commit back
        assert _values(await parts.owned.take("a", None, 10, None)) == ["c", "d"]

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
        await parts.owned.take("m", MEMBER, 6, None)
        prepared = {"g": True}
        parts.owned.waits_for_commit = lambda group, lease: prepared.get(group, False)
        seek = asyncio.ensure_future(parts.owned.seek_to_committed(reader, MEMBER))
        await asyncio.sleep(0.05)
        assert not seek.done()
        parts.owned.groups["g"].commit(2, tail=5)  # the finish lands
        prepared["g"] = False
        parts.context.notify()
        assert await asyncio.wait_for(seek, 1.0) == (2, 2)  # (a grant was jump 1)
        assert _values(await parts.owned.take("m", MEMBER, 10, None)) == [3, 4, 5]
        with pytest.raises(NotOwnerError):
            await parts.owned.seek_to_committed(reader, OTHER)

    asyncio.run(main())


def test_a_group_reset_can_be_restored_and_unknown_groups_are_refused() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        parts.member("m")
        await parts.owned.take("m", MEMBER, 4, None)
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
    assert sorted(parts.owned.lag(3)) == [("early", 4, 4), ("late", 0, 0)]
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
        await owned.take("m", MEMBER, 3, None)
        owned.commit(reader, 1, MEMBER)
        await parts.state.save()
        saved = store.load_state()
        assert saved is not None and saved["groups"]["g"]["committed"] == 1

    asyncio.run(main())
