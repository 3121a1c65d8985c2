"""Unit tests of TransactionParticipant (no Ray): staged values hold room and stay out of
the ring, a commit appends them as one record at consecutive positions, an abort drops
them, fencing, expiry, the lead's resolve, consumed commits, describe and recovery.

Asking a prepared transaction's lead (``tend`` of an in-doubt transaction) calls another
channel through Ray and is left to the Ray tests.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from raytopic.actors import transactions
from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_state import SECTIONS, ChannelState
from raytopic.actors.readers import Readers
from raytopic.actors.stores.base import ChannelStore, StoredBatch
from raytopic.actors.transaction_table import TransactionTable
from raytopic.actors.transactions import PUBLISHER_PREFIX, TransactionParticipant
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import (
    DataLossError,
    InvalidArgumentError,
    StoreError,
    TopicFullError,
    TransactionAbortedError,
    TransactionFencedError,
)
from raytopic.core.payloads import PickledValues
from raytopic.core.protocol import (
    FENCED,
    Address,
    ConsumedCommit,
    DecideTransaction,
    FenceTransactions,
    FinishTransaction,
    ForgetTransaction,
    Lease,
    Outcome,
    PrepareTransaction,
    ReaderSpec,
    ResolveTransaction,
    StageTransaction,
    Take,
)

from tests.seed_store import SeedStore

LEAD = Address("ns", "other", "0therid", 0)
MEMBER, OTHER = Lease("m", 1), Lease("o", 2)
FAR = time.time() + 3600.0
"""A deadline no test reaches."""


class _Channel:
    """One channel's log, state and readers, with its TransactionParticipant."""

    def __init__(self, capacity: int = 10, overflow: Overflow = Overflow.BLOCK) -> None:
        config = TopicConfig("t", "ns", "t0pic1d", 1, capacity, True, None, overflow, ())
        self.context = ChannelContext(config, 0, ChannelMetrics("t", 0))
        self.log = ChannelLog(self.context)
        self.state = ChannelState(self.context, lambda: self.log.next_sequence, lambda: None)
        self.readers = Readers(self.context, self.log, self.state, {}, lambda reader: None)
        self.tx = TransactionParticipant(self.context, self.log, self.readers, self.state)

    async def stage(
        self,
        key: str,
        values: Sequence[Any],
        *,
        deadline: float = FAR,
        timeout: float | None = None,
    ) -> int:
        transactional_id = key.split("@")[0]
        request = StageTransaction(key, transactional_id, deadline, timeout)
        return await self.tx.stage(request, PickledValues.from_values(values))

    async def publish(self, values: Sequence[Any]) -> int:
        ack, _ = await self.log.append(
            PickledValues.from_values(values), Overflow.FAIL, None, whole=True
        )
        assert ack.error is None
        return ack.first

    async def decide(
        self,
        key: str,
        staged: int,
        outcome: str = Outcome.COMMIT,
        commits: tuple[ConsumedCommit, ...] = (),
        forget: tuple[str, ...] = (),
    ) -> tuple[str, str, Any]:
        request = DecideTransaction(
            key, "t", FAR, outcome, "aborted by its holder", staged, commits, forget
        )
        async with self.state.unit_of_work():  # as the channel serves a request
            return await self.tx.decide(request)

    async def prepare(
        self, key: str, staged: int, commits: tuple[ConsumedCommit, ...] = ()
    ) -> None:
        async with self.state.unit_of_work():
            await self.tx.prepare(PrepareTransaction(key, "t", FAR, LEAD, staged, commits))

    async def finish(self, key: str, outcome: str = Outcome.COMMIT) -> Any:
        async with self.state.unit_of_work():
            return await self.tx.finish(
                FinishTransaction(key, "t", FAR, outcome, "its lead aborted")
            )

    def visible(self) -> list[Any]:
        ring = self.log.ring
        return [value for run in ring.read(ring.head, 1000) for value in run.payload.decode()]

    def member(self, group: str = "g", reader_id: str = "m", lease: Lease = MEMBER) -> None:
        self.readers.ensure_group(group, False, None)
        self.readers.owned.grant(group, lease)
        self.readers.open(reader_id, ReaderSpec(group, False))

    def counts(self) -> tuple[int, int]:
        counts = self.context.metrics._counts
        return counts["transaction_commits"], counts["transaction_aborts"]


# -- staging ---------------------------------------------------------------------------------------


def test_staged_values_hold_room_but_no_reader_sees_them() -> None:
    async def main() -> None:
        channel = _Channel(capacity=10)
        channel.readers.open("a", ReaderSpec(None, False))
        assert await channel.stage("t@1.0", ["a", "b", "c"]) == 3
        assert await channel.stage("t@1.0", ["d"]) == 4  # the count staged here so far
        assert await channel.stage("t@1.0", []) == 4
        assert channel.visible() == [] and channel.log.ring.tail == -1
        assert (channel.log.reserved, channel.log.room()) == (4, 6)
        delivery = await channel.readers.take(Take("a", None, 10))
        assert delivery.count == 0
        assert channel.tx.needs_tending  # a staged transaction may expire

    asyncio.run(main())


def test_a_stage_beyond_the_capacity_or_the_room_is_refused_and_stages_nothing() -> None:
    async def main() -> None:
        channel = _Channel(capacity=4, overflow=Overflow.FAIL)
        with pytest.raises(TopicFullError, match="at most the capacity"):
            await channel.stage("t@1.0", range(5))
        await channel.stage("t@1.0", range(3))
        with pytest.raises(TopicFullError, match="at most the capacity"):
            await channel.stage("t@1.0", range(2))  # 3 + 2 above the capacity
        await channel.publish(["x"])
        with pytest.raises(TopicFullError, match="none staged"):
            await channel.stage("u@1.0", ["y"])
        assert channel.tx.table.get("t@1.0").staged == 3
        assert channel.tx.table.get("u@1.0").staged == 0
        assert channel.log.reserved == 3

    asyncio.run(main())


def test_a_blocked_stage_waits_for_the_room_an_abort_frees() -> None:
    async def main() -> None:
        channel = _Channel(capacity=4, overflow=Overflow.BLOCK)
        await channel.stage("t@1.0", range(3))
        staging = asyncio.ensure_future(channel.stage("u@1.0", ["a", "b"], timeout=5.0))
        await asyncio.sleep(0.05)
        assert not staging.done()
        await channel.decide("t@1.0", 3, Outcome.ABORT)
        assert await asyncio.wait_for(staging, 2.0) == 2
        assert channel.log.reserved == 2

    asyncio.run(main())


def test_a_blocked_stage_gives_up_at_its_timeout_with_nothing_staged() -> None:
    async def main() -> None:
        channel = _Channel(capacity=2, overflow=Overflow.BLOCK)
        await channel.publish(["x", "y"])
        with pytest.raises(TopicFullError, match="none staged"):
            await channel.stage("t@1.0", ["a"], timeout=0.05)
        assert channel.tx.table.get("t@1.0").staged == 0 and channel.log.reserved == 0

    asyncio.run(main())


def test_a_stage_blocked_while_its_id_is_fenced_is_refused_when_room_comes() -> None:
    async def main() -> None:
        channel = _Channel(capacity=2, overflow=Overflow.BLOCK)
        await channel.stage("u@1.0", ["a", "b"])
        staging = asyncio.ensure_future(channel.stage("t@1.0", ["c"], timeout=5.0))
        await asyncio.sleep(0.05)
        await channel.tx.fence(FenceTransactions("t", 2))
        await channel.decide("u@1.0", 2, Outcome.ABORT)  # room again
        with pytest.raises(TransactionFencedError):
            await asyncio.wait_for(staging, 2.0)
        assert channel.log.reserved == 0

    asyncio.run(main())


def test_a_prepared_transaction_takes_no_more_values() -> None:
    async def main() -> None:
        channel = _Channel()
        await channel.stage("t@1.0", ["a"])
        await channel.prepare("t@1.0", 1)
        with pytest.raises(InvalidArgumentError, match="already prepared"):
            await channel.stage("t@1.0", ["b"])

    asyncio.run(main())


# -- commit ----------------------------------------------------------------------------------------


def test_the_lead_s_commit_appends_the_staged_values_as_one_record_in_publish_order() -> None:
    async def main() -> None:
        channel = _Channel(capacity=10)
        await channel.publish(["p0", "p1"])
        await channel.stage("t@1.0", ["a", "b"])
        await channel.publish(["x"])  # a publisher outside the transaction, meanwhile
        await channel.stage("t@1.0", ["c"])
        assert channel.visible() == ["p0", "p1", "x"]
        outcome, reason, runs = await channel.decide("t@1.0", 3)
        assert (outcome, reason, runs) == (Outcome.COMMIT, "", ((3, 3),))
        assert channel.visible() == ["p0", "p1", "x", "a", "b", "c"]
        (record,) = channel.log.ring.read(3, 10)  # one record: consecutive, one stamp
        assert (record.first, record.payload.decode()) == (3, ["a", "b", "c"])
        assert (channel.log.reserved, channel.log.room()) == (0, 4)
        assert channel.tx.table.get("t@1.0").outcome == Outcome.COMMIT
        assert channel.counts() == (1, 0)
        # A retried decide answers the same and appends nothing more.
        assert await channel.decide("t@1.0", 3) == (Outcome.COMMIT, "", ((3, 3),))
        assert channel.log.ring.tail == 5 and channel.counts() == (1, 0)

    asyncio.run(main())


def test_a_participant_prepares_then_finishes_the_lead_s_commit() -> None:
    async def main() -> None:
        channel = _Channel()
        await channel.stage("t@1.0", [{"k": 1}, {"k": 2}])
        await channel.prepare("t@1.0", 2)
        entry = channel.tx.table.get("t@1.0")
        assert entry.phase == "prepared" and entry.lead == LEAD
        assert channel.visible() == [] and channel.log.reserved == 2
        assert await channel.finish("t@1.0") == ((0, 2),)
        assert channel.visible() == [{"k": 1}, {"k": 2}] and channel.log.reserved == 0
        assert await channel.finish("t@1.0") == ((0, 2),)  # a retry: the same runs
        assert channel.log.ring.tail == 1
        await channel.tx.forget(ForgetTransaction("t@1.0"))
        assert channel.tx.table.get("t@1.0") is None

    asyncio.run(main())


def test_a_commit_of_a_transaction_the_channel_never_held_is_a_data_loss() -> None:
    async def main() -> None:
        channel = _Channel()
        with pytest.raises(DataLossError, match=r"lost transaction t@1\.0") as lost:
            await channel.finish("t@1.0", Outcome.COMMIT)
        assert lost.value.channel == 0 and lost.value.head_sequence == 0

    asyncio.run(main())


def test_an_abort_of_a_transaction_the_channel_never_held_is_recorded() -> None:
    async def main() -> None:
        channel = _Channel()
        assert await channel.finish("t@1.1", Outcome.ABORT) == ()
        entry = channel.tx.table.get("t@1.1")
        assert (entry.outcome, entry.reason) == (Outcome.ABORT, "its lead aborted")
        with pytest.raises(TransactionAbortedError, match="its lead aborted"):
            await channel.stage("t@1.1", ["late"])

    asyncio.run(main())


def test_with_overwrite_a_commit_drops_the_oldest_values() -> None:
    async def main() -> None:
        channel = _Channel(capacity=4, overflow=Overflow.OVERWRITE)
        await channel.publish(["p0", "p1", "p2"])
        assert await channel.stage("t@1.0", ["a", "b", "c", "d", "e", "f"]) == 6
        outcome, _, runs = await channel.decide("t@1.0", 6)
        assert (outcome, runs) == (Outcome.COMMIT, ((3, 6),))
        assert channel.visible() == ["c", "d", "e", "f"]

    asyncio.run(main())


def test_a_lead_s_commit_moves_the_consumed_group_position() -> None:
    async def main() -> None:
        channel = _Channel()
        await channel.publish(range(5))
        channel.member()
        cursor = channel.readers.owned.groups["g"]
        await channel.stage("t@1.0", ["out"])
        commit = ConsumedCommit("m", 2, MEMBER, cursor.jumps)
        outcome, _, runs = await channel.decide("t@1.0", 1, commits=(commit,))
        assert (outcome, runs) == (Outcome.COMMIT, ((5, 1),))
        assert (cursor.committed, cursor.next) == (2, 3)
        assert channel.context.metrics._counts["commits"] == 1

    asyncio.run(main())


def test_a_participant_s_consumed_commit_holds_until_the_outcome() -> None:
    async def main() -> None:
        channel = _Channel()
        await channel.publish(range(5))
        channel.member()
        cursor = channel.readers.owned.groups["g"]
        commit = ConsumedCommit("m", 3, MEMBER, cursor.jumps)
        await channel.prepare("t@1.0", 0, (commit,))
        entry = channel.tx.table.get("t@1.0")
        assert entry.commits == (ConsumedCommit("m", 3, MEMBER, cursor.jumps, group="g"),)
        assert cursor.committed == -1  # not before the outcome
        assert channel.tx.table.waits_for_commit("g", OTHER)
        assert await channel.finish("t@1.0") == ()
        assert (cursor.committed, cursor.next) == (3, 4)
        assert not channel.tx.table.waits_for_commit("g", OTHER)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("reader_id", "sequence", "lease", "jumped", "reason"),
    [
        ("gone", 1, MEMBER, 0, "left its group"),
        ("m", 1, OTHER, 0, "no longer owns"),
        ("m", 1, MEMBER, 1, "no longer owns"),  # a seek or reset since it read
        ("m", 7, MEMBER, 0, "never published"),
    ],
    ids=["reader closed", "other owner", "jumped", "beyond the tail"],
)
def test_a_consumed_commit_that_no_longer_holds_aborts_the_part(
    reader_id: str, sequence: int, lease: Lease, jumped: int, reason: str
) -> None:
    async def main() -> None:
        channel = _Channel()
        await channel.publish(range(3))
        channel.member()
        cursor = channel.readers.owned.groups["g"]
        commit = ConsumedCommit(reader_id, sequence, lease, cursor.jumps)
        cursor.jumps += jumped
        await channel.stage("t@1.0", ["out"])
        with pytest.raises(TransactionAbortedError, match=reason):
            await channel.prepare("t@1.0", 1, (commit,))
        entry = channel.tx.table.get("t@1.0")
        assert entry.outcome == Outcome.ABORT and reason in entry.reason
        assert channel.log.reserved == 0 and channel.visible() == [0, 1, 2]
        assert cursor.committed == -1

    asyncio.run(main())


def test_a_part_missing_staged_values_aborts_at_prepare_and_at_the_lead() -> None:
    async def main() -> None:
        channel = _Channel()
        await channel.stage("t@1.0", ["a"])
        with pytest.raises(TransactionAbortedError, match="holds 1 of the 2"):
            await channel.prepare("t@1.0", 2)
        with pytest.raises(TransactionAbortedError):  # a retried prepare: the same answer
            await channel.prepare("t@1.0", 2)
        await channel.stage("t@1.1", ["b"])
        outcome, reason, runs = await channel.decide("t@1.1", 3)
        assert (outcome, runs) == (Outcome.ABORT, ()) and "holds 1 of the 3" in reason
        assert channel.visible() == [] and channel.log.reserved == 0
        assert channel.counts() == (0, 1)  # only the lead's decision counts

    asyncio.run(main())


class _RefusingStore(SeedStore):
    """A user's store whose writes fail while ``refusing`` (a full disk)."""

    refusing = False

    def store_all(self, first_sequence: int, items: Sequence[Any]) -> None:
        if self.refusing:
            raise OSError("disk full")
        super().store_all(first_sequence, items)


def test_a_commit_the_store_refuses_keeps_the_part_and_its_room_for_a_retry() -> None:
    async def main() -> None:
        channel = _Channel(capacity=4)
        store = _RefusingStore()
        channel.log.open(ChannelStore(store), 0)
        await channel.stage("t@1.0", ["a", "b"])
        await channel.prepare("t@1.0", 2)
        store.refusing = True
        with pytest.raises(StoreError, match="disk full"):
            await channel.finish("t@1.0")
        entry = channel.tx.table.get("t@1.0")
        assert entry.phase == "prepared" and channel.visible() == []
        assert (entry.staged, channel.log.reserved) == (2, 2)
        store.refusing = False
        assert await channel.finish("t@1.0") == ((0, 2),)
        assert channel.visible() == ["a", "b"]

    asyncio.run(main())


# -- abort -----------------------------------------------------------------------------------------


def test_an_abort_drops_the_staged_values_and_frees_their_room() -> None:
    async def main() -> None:
        channel = _Channel(capacity=5, overflow=Overflow.FAIL)
        await channel.stage("t@1.0", range(4))
        with pytest.raises(TopicFullError):
            await channel.stage("u@1.0", ["a", "b"])
        outcome, reason, runs = await channel.decide("t@1.0", 4, Outcome.ABORT)
        assert (outcome, reason, runs) == (Outcome.ABORT, "aborted by its holder", ())
        assert channel.visible() == [] and channel.log.room() == 5
        assert await channel.stage("u@1.0", ["a", "b"]) == 2
        assert await channel.finish("u@1.0", Outcome.ABORT) == ()  # at a participant
        assert channel.log.reserved == 0 and channel.visible() == []
        with pytest.raises(TransactionAbortedError, match="aborted by its holder"):
            await channel.stage("t@1.0", ["late"])
        assert channel.counts() == (0, 1)

    asyncio.run(main())


def test_decide_forgets_the_earlier_transactions_it_names() -> None:
    async def main() -> None:
        channel = _Channel()
        await channel.stage("t@1.0", ["a"])
        await channel.decide("t@1.0", 1)
        await channel.stage("t@1.1", ["b"])
        await channel.decide("t@1.1", 1, forget=("t@1.0",))
        assert channel.tx.table.get("t@1.0") is None
        assert channel.tx.table.get("t@1.1").outcome == Outcome.COMMIT

    asyncio.run(main())


# -- fencing, expiry, the lead's resolve -----------------------------------------------------------


def test_a_newer_epoch_fences_the_older_staged_transactions_of_its_id() -> None:
    async def main() -> None:
        channel = _Channel()
        await channel.stage("t@1.0", ["a", "b"])
        await channel.stage("t@1.1", ["c"])
        await channel.prepare("t@1.1", 1)  # prepared: it waits for its lead's word
        await channel.stage("u@1.0", ["d"])  # another id
        await channel.stage("t@2.0", ["e"])  # the new incarnation
        await channel.tx.fence(FenceTransactions("t", 2))
        fenced = channel.tx.table.get("t@1.0")
        assert (fenced.outcome, fenced.reason) == (Outcome.ABORT, FENCED)
        assert channel.tx.table.get("t@1.1").phase == "prepared"
        assert channel.tx.table.get("u@1.0").phase == "staged"
        assert channel.tx.table.get("t@2.0").phase == "staged"
        assert channel.log.reserved == 3 and channel.counts() == (0, 1)
        with pytest.raises(TransactionFencedError):
            await channel.stage("t@1.0", ["f"])
        with pytest.raises(TransactionFencedError):
            await channel.stage("t@1.5", ["f"])  # a new transaction of the fenced epoch
        assert await channel.stage("t@2.0", ["f"]) == 2
        await channel.tx.fence(FenceTransactions("t", 1))  # older: nothing changes
        assert channel.tx.table.get("t@2.0").phase == "staged"
        assert channel.visible() == []

    asyncio.run(main())


def test_tend_aborts_a_staged_transaction_past_its_deadline(monkeypatch) -> None:
    monkeypatch.setattr(transactions, "TEND_INTERVAL", 0.01)

    async def main() -> None:
        channel = _Channel()
        await channel.stage("t@1.0", ["a", "b"], deadline=time.time() + 0.1)
        await channel.stage("u@1.0", ["c"])
        tending = asyncio.ensure_future(channel.tx.tend())
        expired = channel.tx.table.get("t@1.0")
        for _ in range(200):
            if expired.done:
                break
            await asyncio.sleep(0.01)
        assert expired.outcome == Outcome.ABORT and "timed out" in expired.reason
        assert channel.log.reserved == 1 and channel.counts() == (0, 1)
        with pytest.raises(TransactionAbortedError, match="timed out"):
            await channel.stage("t@1.0", ["late"])
        assert channel.tx.table.get("u@1.0").phase == "staged" and not tending.done()
        await channel.decide("u@1.0", 1, Outcome.ABORT)  # nothing open: tend ends by itself
        await asyncio.wait_for(tending, 1.0)
        assert not channel.tx.needs_tending

    asyncio.run(main())


def test_the_lead_resolves_undecided_transactions_only_past_their_deadline() -> None:
    async def main() -> None:
        channel = _Channel()
        await channel.stage("t@1.0", ["a"])
        assert await channel.tx.resolve(ResolveTransaction("t@1.0", "t", FAR)) is None
        assert await channel.tx.resolve(ResolveTransaction("t@1.1", "t", FAR)) is None
        past = time.time() - 1.0
        assert await channel.tx.resolve(ResolveTransaction("t@1.0", "t", past)) == Outcome.ABORT
        assert channel.log.reserved == 0 and channel.counts() == (0, 1)
        # First come, first served: the holder's late decide finds it aborted.
        outcome, reason, _ = await channel.decide("t@1.0", 1)
        assert outcome == Outcome.ABORT and "timed out" in reason and channel.visible() == []
        await channel.stage("t@1.2", ["b"])
        await channel.decide("t@1.2", 1)
        assert await channel.tx.resolve(ResolveTransaction("t@1.2", "t", past)) == Outcome.COMMIT

    asyncio.run(main())


# -- describe --------------------------------------------------------------------------------------


def test_describe_lists_the_open_transactions_with_their_age_and_staged_count() -> None:
    async def main() -> None:
        channel = _Channel()
        before = time.time()
        await channel.stage("t@1.0", ["a", "b"])
        await channel.stage("u@1.0", ["c"])
        await channel.prepare("u@1.0", 1)
        await channel.stage("v@1.0", ["d"])
        await channel.decide("v@1.0", 1)  # finished: not listed
        now = before + 10.0
        listed = {entry["key"]: entry for entry in channel.tx.table.describe(now)}
        assert sorted(listed) == ["t@1.0", "u@1.0"]
        staged, prepared = listed["t@1.0"], listed["u@1.0"]
        assert (staged["id"], staged["phase"], staged["staged"]) == ("t", "staged", 2)
        assert (prepared["id"], prepared["phase"], prepared["staged"]) == ("u", "prepared", 1)
        assert 9.0 <= staged["age"] <= 10.0
        assert 9.0 <= prepared["age"] <= 10.0

    asyncio.run(main())


# -- durability and recovery -----------------------------------------------------------------------


def test_a_prepared_part_is_in_the_stored_state_before_prepare_returns() -> None:
    async def main() -> None:
        channel = _Channel()
        store = ChannelStore(SeedStore())
        channel.state.open(store)
        table = channel.tx.table
        channel.state.provide("transactions", table.state_of, table.durable_keys)
        await channel.stage("t@1.0", ["a", "b"])
        await channel.prepare("t@1.0", 2)
        saved = store.load_state()["transactions"]["t@1.0"]
        assert (saved["phase"], saved["staged"], saved["lead"]) == ("prepared", 2, list(LEAD))
        assert saved["payload"] is not None
        await channel.finish("t@1.0")
        saved = store.load_state()["transactions"]["t@1.0"]
        assert (saved["phase"], saved["outcome"], saved["runs"]) == (
            "done",
            Outcome.COMMIT,
            [[0, 2]],
        )

    asyncio.run(main())


def test_recovery_finishes_a_prepared_part_whose_record_the_store_has() -> None:
    async def main() -> None:
        # What the store kept: three prepared parts and one finished transaction.
        kept = TransactionTable()
        for key, values in (("t@1.0", ["a", "b"]), ("t@1.1", ["c"]), ("t@1.2", ["d", "e", "f"])):
            entry = kept.for_staging(key, "t", FAR, 1.0, 0)
            kept.stage(entry, PickledValues.from_values(values))
            commits = (ConsumedCommit("m", 1, MEMBER, 0, group="g"),) if key == "t@1.0" else ()
            kept.prepare(entry, LEAD, commits)
        kept.finish(kept.record("t@1.3", "t", FAR, 1.0), Outcome.ABORT, "x")
        saved = {key: kept.state_of(key) for key in kept.durable_keys()}

        # The records the store loaded into the ring: a publisher's, then two of them.
        channel = _Channel()
        await channel.publish(range(3))
        await channel.publish(["a", "b"])
        await channel.publish(["c"])
        channel.member()
        records = [
            StoredBatch(0, 1.0, PickledValues.from_values(range(3)), 1, "publisher", 0),
            StoredBatch(
                3, 1.0, PickledValues.from_values(["a", "b"]), 1, PUBLISHER_PREFIX + "t@1.0"
            ),
            StoredBatch(5, 1.0, PickledValues.from_values(["c"]), 1, PUBLISHER_PREFIX + "t@1.1"),
        ]
        assert [channel.tx.learn(record) for record in records] == [False, True, True]
        channel.tx.recover(saved)

        table = channel.tx.table
        assert (table.get("t@1.0").outcome, table.get("t@1.0").runs) == (Outcome.COMMIT, ((3, 2),))
        assert (table.get("t@1.1").outcome, table.get("t@1.1").runs) == (Outcome.COMMIT, ((5, 1),))
        assert channel.readers.owned.groups["g"].committed == 1  # its commit applied
        waiting = table.get("t@1.2")
        assert waiting.phase == "prepared" and waiting.payload().decode() == ["d", "e", "f"]
        assert table.get("t@1.3").outcome == Outcome.ABORT
        assert channel.log.reserved == 3 and channel.tx.needs_tending
        # Its lead's word comes: the kept payload is appended.
        assert await channel.finish("t@1.2") == ((6, 3),)
        assert channel.visible() == [0, 1, 2, "a", "b", "c", "d", "e", "f"]

    asyncio.run(main())


def test_a_decision_in_progress_is_seen_made_by_a_concurrent_abort() -> None:
    # The registry's abort of a fenced holder may reach the lead while the lead's
    # own "commit" awaits its state write: it must get "commit", never half of both.
    async def main() -> None:
        channel = _Channel()
        store = ChannelStore(SeedStore())
        gate = threading.Event()
        write = store.append_state

        def gated_write(*args: Any, **kwargs: Any) -> Any:
            gate.wait(5.0)
            return write(*args, **kwargs)

        store.append_state = gated_write  # type: ignore[method-assign]
        channel.state.open(store)
        table = channel.tx.table
        for section in SECTIONS:  # only the transactions are what this checks
            channel.state.provide(section, lambda key: None, list)
        channel.state.provide("transactions", table.state_of, table.durable_keys)
        await channel.publish(range(3))
        channel.member()
        commit = ConsumedCommit("m", 1, MEMBER, channel.readers.owned.groups["g"].jumps)
        await channel.stage("t@1.0", ["out"])
        committing = asyncio.ensure_future(channel.decide("t@1.0", 1, commits=(commit,)))
        await asyncio.sleep(0.05)  # the commit waits for its state write
        fencing = asyncio.ensure_future(
            channel.tx.decide(DecideTransaction("t@1.0", "t", FAR, Outcome.ABORT, FENCED, 0, ()))
        )
        await asyncio.sleep(0.05)
        gate.set()
        assert (await committing)[0] == Outcome.COMMIT
        assert (await fencing)[0] == Outcome.COMMIT
        assert channel.visible() == [0, 1, 2, "out"]
        assert table.get("t@1.0").outcome == Outcome.COMMIT and channel.log.reserved == 0

    asyncio.run(main())
