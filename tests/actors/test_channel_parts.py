"""Unit tests of ChannelParts (no Ray): the parts built and wired to the state, recovery
from a store (a new one, one kept by the channel, a state file with no state log yet, a
state of another version, a user's store that keeps no state), seeding from what a
coordinator remembers, and transactions across a restart."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from raytopic.actors.channel_context import ChannelContext, fresh_start
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.stores.base import ChannelStore, StoredBatch
from raytopic.core.config import Overflow, TopicConfig, fixed_settings
from raytopic.core.errors import DataLossError, StoreError
from raytopic.core.payloads import PickledValues
from raytopic.core.protocol import (
    Address,
    AppendAck,
    CommitMicroBatch,
    ConsumedCommit,
    DecideTransaction,
    FinishTransaction,
    Lease,
    MicroBatchRecord,
    Outcome,
    PrepareTransaction,
    ReaderSpec,
    RecordMicroBatch,
    ResolveTransaction,
    StageTransaction,
    StreamRecord,
    Take,
)
from raytopic.core.shared_group import SharedGroup

from tests.seed_store import SeedStore

STATE_FILE = Path(__file__).parent / "stores" / "data" / "state_file.json"
"""A state file with no state log yet (see tests/actors/stores/test_segment_log_state.py):
next_sequence 6; group "billing" (committed 0, owned by BILLING); shared group "work"
(element 1 delivered once, to deliver again); PUBLISHER's batches 0..4 at 0..4 and
LATE's batch 0 at 5; readers BILLING_READER, WORK_READER and ANONYMOUS (next 6)."""

PUBLISHER, LATE = "44b80feff18e41179286ed4c914b4b22", "db13c81a117c47b797edb04ea184777b"
BILLING_READER = "7da311e03f194a599977903af8711b7d"
WORK_READER = "a2592d145ab94df28b43ab66ba908d6b"
ANONYMOUS = "550d96a56b11430780df92d8ee004962"
BILLING = Lease(BILLING_READER, 1)
MEMBER, OTHER = Lease("m", 1), Lease("o", 2)
LEAD = Address("ns", "other", "0therid", 0)
FAR = time.time() + 3600.0
"""A deadline no test reaches."""


def _config(capacity: int = 10) -> TopicConfig:
    return TopicConfig("t", "ns", "t0pic1d", 1, capacity, True, None, Overflow.BLOCK, ())


def _build(config: TopicConfig | None = None, *, restarted: bool = False) -> ChannelParts:
    config = config or _config()
    context = ChannelContext(config, 0, ChannelMetrics(config.name, 0))
    return ChannelParts.build(context, restarted=restarted)


def _visible(parts: ChannelParts) -> list[Any]:
    ring = parts.log.ring
    return [value for run in ring.read(ring.head, 1000) for value in run.payload.decode()]


def _values(*values: Any) -> PickledValues:
    return PickledValues.from_values(values)


# -- building --------------------------------------------------------------------------------------


def test_build_gives_every_state_section_its_source() -> None:
    async def main() -> None:
        parts = _build()
        parts.readers.ensure_group("g", False, None)
        parts.readers.owned.grant("g", MEMBER)
        parts.readers.ensure_group("s", False, SharedGroup("s"))
        parts.readers.open("m", ReaderSpec("g", False))
        parts.readers.open("a", ReaderSpec(None, False))
        parts.host.marks["g"] = (3, 1)
        parts.publishers.remember("p", 0, AppendAck(0, 1, 1.0))
        await parts.transactions.stage(StageTransaction("t@1.0", "t", FAR, None), _values("x"))
        await parts.transactions.prepare(PrepareTransaction("t@1.0", "t", FAR, LEAD, 1, ()))
        snapshot = parts.state.snapshot()
        assert (snapshot["epoch"], snapshot["next_sequence"]) == (1, 0)
        assert snapshot["groups"]["g"]["owner"] == ["m", 1]
        assert list(snapshot["shared"]) == ["s"]
        assert snapshot["marks"] == {"g": [3, 1]}
        assert snapshot["publishers"] == {"p": [0, [[0, [[0, 1, 1.0]]]]]}
        assert sorted(snapshot["readers"]) == ["a", "m"]
        assert snapshot["transactions"]["t@1.0"]["phase"] == "prepared"

    asyncio.run(main())


def test_a_prepared_consumed_commit_holds_its_group_until_the_outcome() -> None:
    async def main() -> None:
        parts = _build()
        parts.log.ring.append(_values(0, 1, 2), overwrite=True)
        readers = parts.readers
        readers.ensure_group("g", False, None)
        readers.owned.grant("g", MEMBER)
        readers.open("m", ReaderSpec("g", False))
        readers.open("o", ReaderSpec("g", False))
        await readers.take(Take("m", MEMBER, 2, 0))  # 0 and 1, consumed by a transaction
        commit = ConsumedCommit("m", 1, MEMBER, readers.owned.groups["g"].jumps)
        await parts.transactions.prepare(PrepareTransaction("t@1.0", "t", FAR, LEAD, 0, (commit,)))
        readers.owned.grant("g", OTHER)  # a rebalance: the channel goes to another member
        taking = asyncio.ensure_future(readers.take(Take("o", OTHER, 10, 0)))
        await asyncio.sleep(0.2)
        assert not taking.done()  # it would read 0 and 1 again
        await parts.transactions.finish(FinishTransaction("t@1.0", "t", FAR, Outcome.COMMIT, ""))
        delivery = await asyncio.wait_for(taking, 2.0)
        assert [v for chunk in delivery.chunks for v in chunk.payload.decode()] == [2]

    asyncio.run(main())


# -- recovering from a store -----------------------------------------------------------------------


def test_a_store_whose_state_has_another_version_is_refused_with_a_store_error(opened) -> None:
    store = opened()
    assert _build().recover(ChannelStore(store), restarted=False)
    store.save_state({**store.load_state(), "version": 99})
    store.close()
    with pytest.raises(StoreError, match="version 99"):
        _build(restarted=True).recover(ChannelStore(opened(must_exist=True)), restarted=True)


def test_a_new_channel_s_store_gets_its_first_epoch_before_anything_is_served(
    opened,
) -> None:
    parts = _build()
    store = opened()
    assert parts.recover(ChannelStore(store), restarted=False)
    assert parts.context.epoch == 1 and parts.log.ring.tail == -1
    sections = ("groups", "shared", "marks", "publishers", "readers", "transactions", "streams")
    assert store.load_state() == {
        "version": 1,
        "sections": dict.fromkeys(sections, 1),
        "topic": {
            "id": parts.context.config.topic_id,
            "settings": fixed_settings(parts.context.config),
            "destroyed": False,
        },
        "epoch": 1,
        "next_sequence": 0,
        **{section: {} for section in sections},
    }


def test_a_channel_comes_back_from_its_own_store_under_the_next_epoch(opened) -> None:
    async def main() -> None:
        parts = _build(_config())
        store = opened()
        parts.recover(ChannelStore(store), restarted=False)
        ack, change = await parts.log.append(
            _values("a", "b"), Overflow.FAIL, None, whole=True, publisher_id="p", batch=0
        )
        parts.publishers.remember("p", 0, ack)
        await parts.log.durable(change)
        parts.readers.ensure_group("g", False, None)
        parts.readers.owned.grant("g", MEMBER)
        parts.readers.open("m", ReaderSpec("g", False))
        reader = parts.readers.get("m")
        await parts.readers.take(Take("m", MEMBER, 2, 0))
        parts.readers.owned.commit(reader, 0, MEMBER)
        await parts.state.save()
        store.close()

        again = _build(_config(), restarted=True)
        assert again.recover(ChannelStore(opened(must_exist=True)), restarted=True)
        assert again.context.epoch == 2
        assert _visible(again) == ["a", "b"]
        cursor = again.readers.owned.groups["g"]
        assert (cursor.committed, cursor.next, cursor.owner) == (0, 1, MEMBER)
        assert again.readers.specs() == {"m": ReaderSpec("g", False)}
        assert again.publishers.earlier_ack("p", 0, 2).first == 0  # a retry is not appended

    asyncio.run(main())


def test_a_streams_offset_log_comes_back_with_the_groups_commit(opened) -> None:
    claim = Lease("stream:s", 1)
    done, in_flight = MicroBatchRecord(0, ((0, 0, 2),)), MicroBatchRecord(1, ((0, 2, 3),))

    async def main() -> None:
        parts = _build(_config())
        store = opened()
        parts.recover(ChannelStore(store), restarted=False)
        await parts.log.append(
            _values("a", "b", "c"), Overflow.FAIL, None, whole=True, publisher_id="p", batch=0
        )
        parts.readers.ensure_group("g", False, None)
        # As the channel serves a stream: grant, record, commit (moving the group's
        # cursor in the same write), record the next batch.
        parts.readers.grant("g", claim)
        parts.streams.grant("g", claim)
        parts.streams.record(RecordMicroBatch("g", claim, done), claim)
        through = parts.streams.commit(CommitMicroBatch("g", claim, done), claim)
        parts.readers.owned.advance("g", through)
        parts.streams.record(RecordMicroBatch("g", claim, in_flight), claim)
        parts.state.touch("streams", "g")
        await parts.state.save()
        store.close()

        again = _build(_config(), restarted=True)
        assert again.recover(ChannelStore(opened(must_exist=True)), restarted=True)
        assert again.streams.record_of("g") == StreamRecord(claim, in_flight, 0)
        assert again.readers.owned.groups["g"].committed == 1

    asyncio.run(main())


def _stored_channel(directory: Path, opened, *, with_records: bool) -> Any:
    """``directory`` as a channel left it with its state file only: its records (the six
    the state file knew of and LATE's batch 1 after its last state write) and the
    state file; opened as a restarted channel opens it."""
    if with_records:
        store = opened()
        for batch in range(5):
            store.store_batch(
                StoredBatch(batch, 1.0 + batch, _values(f"v{batch}"), 1, PUBLISHER, batch)
            )
        store.store_batch(StoredBatch(5, 6.0, _values("late-0"), 1, LATE, 0))
        store.store_batch(StoredBatch(6, 7.0, _values("late-1"), 1, LATE, 1))
        store.sync()
        store.close()
    shutil.copy(STATE_FILE, directory / "state.json")
    return opened(must_exist=True)


def test_a_state_file_recovers_every_part(opened, tmp_path: Path) -> None:
    async def main() -> None:
        store = _stored_channel(tmp_path, opened, with_records=True)
        parts = _build(restarted=True)
        assert parts.recover(ChannelStore(store), restarted=True)
        assert parts.context.epoch == 2
        assert _visible(parts) == ["v0", "v1", "v2", "v3", "v4", "late-0", "late-1"]
        assert not parts.log.damage

        # Groups: the owned one after its commit, the shared one with element 1 to redo.
        billing = parts.readers.owned.groups["billing"]
        assert (billing.committed, billing.next, billing.owner) == (0, 1, BILLING)
        assert billing.jumps == 2  # one more than saved: old fetches are dropped
        assert "work" in parts.readers.shared and "work" not in parts.readers.owned.groups
        work = parts.readers.shared.cursor("work")
        assert (work.floor, work.next, sorted(work.waiting)) == (0, 2, [1])
        assert work.life == "7ee270250693"
        assert parts.host.marks == {"billing": (1, 1), "work": (1, 1)}

        # Readers: their specs, and the anonymous one where it was.
        assert parts.readers.specs() == {
            BILLING_READER: ReaderSpec("billing", False),
            WORK_READER: ReaderSpec("work", False, window=1000),
            ANONYMOUS: ReaderSpec(None, True),
        }
        anonymous = parts.readers.get(ANONYMOUS).cursor
        assert (anonymous.next, anonymous.committed) == (6, 5)
        delivery = await parts.readers.take(Take(ANONYMOUS, None, 10, 0))
        assert [v for chunk in delivery.chunks for v in chunk.payload.decode()] == ["late-1"]

        # Publishers: the file's tracks, and the batch the store has after them.
        tracks = parts.publishers.tracks
        assert (tracks[PUBLISHER].last_batch, tracks[LATE].last_batch) == (4, 1)
        assert [parts.publishers.earlier_ack(PUBLISHER, b, 1).first for b in range(5)] == [
            0,
            1,
            2,
            3,
            4,
        ]
        assert parts.publishers.earlier_ack(LATE, 1, 1).first == 6
        assert parts.publishers.earlier_ack(LATE, 2, 1) is None  # not seen: to append

        # The new epoch's state is written at once, whole.
        saved = store.load_state()
        assert saved["epoch"] == 2 and saved["transactions"] == {}
        assert saved["groups"]["billing"]["committed"] == 0
        assert sorted(saved["readers"]) == sorted([BILLING_READER, WORK_READER, ANONYMOUS])
        assert not parts.transactions.needs_tending

    asyncio.run(main())


def test_positions_a_state_file_knew_of_are_damage_when_the_records_are_gone(
    opened, tmp_path: Path
) -> None:
    async def main() -> None:
        store = _stored_channel(tmp_path, opened, with_records=False)
        parts = _build(restarted=True)
        assert parts.recover(ChannelStore(store), restarted=True)
        assert parts.log.damage.ranges == [(0, 5)]
        assert parts.readers.owned.groups["billing"].committed == 0
        ack, _ = await parts.log.append(_values("new"), Overflow.FAIL, None, whole=True)
        assert ack.first == 6  # never reused

    asyncio.run(main())


def test_a_restarted_channel_whose_store_keeps_no_state_waits_for_its_seed() -> None:
    user_store = SeedStore()
    user_store.store_all(0, ["a", "b", "c"])
    parts = _build(restarted=True)
    assert not parts.recover(ChannelStore(user_store), restarted=True)
    assert _visible(parts) == ["a", "b", "c"]  # its elements are back
    assert parts.readers.by_id == {} and parts.readers.owned.groups == {}
    parts.seed(
        3,
        {"g": (MEMBER, 4, 2)},
        {"g": {"m": (4, {0: MEMBER})}},
        {"m": ReaderSpec("g", False), "a": ReaderSpec(None, False)},
        None,
    )
    assert parts.context.epoch == 4
    cursor = parts.readers.owned.groups["g"]
    assert (cursor.next, cursor.owner) == (0, MEMBER)  # at the start of what is kept
    assert parts.host.marks == {"g": (4, 2)} and parts.host.views == {"g": {"m": (4, {0: MEMBER})}}
    assert parts.readers.loss.error is None  # nothing was lost
    assert parts.readers.loss.unaware == {"m", "a"}
    assert parts.readers.get("a").cursor.next == 0


def test_a_seed_without_a_store_starts_after_every_earlier_position_and_tells_the_loss() -> None:
    before = fresh_start()
    parts = _build(restarted=True)
    parts.seed(
        1,
        {"g": (MEMBER, 1, 1), "s": (None, 2, 1)},
        {},
        {"m": ReaderSpec("g", False), "w": ReaderSpec("s", False)},
        {"s": SharedGroup("s")},
    )
    assert parts.context.epoch == 2
    first = parts.log.ring.head
    assert first >= before and parts.log.next_sequence == first
    assert parts.readers.owned.groups["g"].next == first
    assert "s" in parts.readers.shared and parts.readers.shared.cursor("s").next == first
    assert set(parts.readers.by_id) == {"m", "w"}
    assert all(cursor.jumps >= before for cursor in parts.readers.all_cursors())
    error = parts.readers.loss.error
    assert isinstance(error, DataLossError)
    assert (error.head_sequence, error.old_epoch, error.new_epoch) == (first, 1, 2)


# -- transactions across a restart -----------------------------------------------------------------


class _Crash(BaseException):
    """The process died here."""


async def _crash() -> None:
    raise _Crash


def test_a_participant_that_appended_its_part_before_a_crash_knows_it_committed(
    opened, monkeypatch
) -> None:
    async def main() -> None:
        parts = _build()
        parts.recover(ChannelStore(opened()), restarted=False)
        staging = StageTransaction("t@1.0", "t", FAR, None)
        await parts.transactions.stage(staging, _values("a", "b"))
        await parts.transactions.stage(StageTransaction("t@1.1", "t", FAR, None), _values("c"))
        for key, staged in (("t@1.0", 2), ("t@1.1", 1)):
            request = PrepareTransaction(key, "t", FAR, LEAD, staged, ())
            async with parts.state.unit_of_work():  # as the channel serves it
                await parts.transactions.prepare(request)
        # The lead's word for t@1.0 comes; the channel dies before its state says so
        # (the unit of work's write).
        monkeypatch.setattr(parts.state, "_write", lambda change: _crash())
        finish = FinishTransaction("t@1.0", "t", FAR, Outcome.COMMIT, "")
        with pytest.raises(_Crash):
            async with parts.state.unit_of_work():
                await parts.transactions.finish(finish)
        parts.log.store.close()

        again = _build(restarted=True)
        assert again.recover(ChannelStore(opened(must_exist=True)), restarted=True)
        table = again.transactions.table
        assert (table.get("t@1.0").outcome, table.get("t@1.0").runs) == (Outcome.COMMIT, ((0, 2),))
        assert _visible(again) == ["a", "b"]  # once
        assert await again.transactions.finish(finish) == ((0, 2),)  # the retry appends nothing
        assert _visible(again) == ["a", "b"]
        waiting = table.get("t@1.1")
        assert waiting.phase == "prepared" and waiting.payload().decode() == ["c"]
        assert again.log.reserved == 1 and again.transactions.needs_tending

    asyncio.run(main())


def test_a_lead_that_appended_its_part_before_a_crash_answers_as_readers_see(
    opened, monkeypatch
) -> None:
    async def main() -> None:
        parts = _build()
        parts.recover(ChannelStore(opened()), restarted=False)
        deadline = time.time() + 0.2
        await parts.transactions.stage(
            StageTransaction("t@1.0", "t", deadline, None), _values("a", "b")
        )
        monkeypatch.setattr(parts.state, "save", _crash)
        decide = DecideTransaction("t@1.0", "t", deadline, Outcome.COMMIT, "", 2, ())
        with pytest.raises(_Crash):
            await parts.transactions.decide(decide)
        parts.log.store.close()

        again = _build(restarted=True)
        again.recover(ChannelStore(opened(must_exist=True)), restarted=True)
        await asyncio.sleep(max(0.0, deadline - time.time()) + 0.05)
        outcome = await again.transactions.resolve(ResolveTransaction("t@1.0", "t", deadline))
        # Its record is the decision: what it answers the other participants is
        # what its readers see.
        assert outcome == Outcome.COMMIT and _visible(again) == ["a", "b"]
        # Ray retries the interrupted decide on the restarted channel: the same
        # answer, nothing appended twice.
        assert await again.transactions.decide(decide) == (Outcome.COMMIT, "", ((0, 2),))
        assert _visible(again) == ["a", "b"]

    asyncio.run(main())


def test_a_lead_whose_part_also_commits_consumed_positions_finishes_them_after_a_crash(
    opened, monkeypatch
) -> None:
    async def main() -> None:
        parts = _build()
        parts.recover(ChannelStore(opened()), restarted=False)
        _, change = await parts.log.append(
            _values(0, 1, 2), Overflow.FAIL, None, whole=True, publisher_id="p", batch=0
        )
        await parts.log.durable(change)
        readers = parts.readers
        readers.ensure_group("g", False, None)
        readers.owned.grant("g", MEMBER)
        readers.open("m", ReaderSpec("g", False))
        await readers.take(Take("m", MEMBER, 2, 0))  # 0 and 1, consumed by the transaction
        await parts.state.save()
        commit = ConsumedCommit("m", 1, MEMBER, readers.owned.groups["g"].jumps)
        await parts.transactions.stage(StageTransaction("t@1.0", "t", FAR, None), _values("out"))
        saves = 0
        save = parts.state.save

        async def crash_after_the_first_save() -> None:
            nonlocal saves
            saves += 1
            if saves > 1:
                raise _Crash
            await save()

        monkeypatch.setattr(parts.state, "save", crash_after_the_first_save)
        decide = DecideTransaction("t@1.0", "t", FAR, Outcome.COMMIT, "", 1, (commit,))
        with pytest.raises(_Crash):  # after the part's record, before the state says so
            await parts.transactions.decide(decide)
        assert _visible(parts) == [0, 1, 2, "out"]
        parts.log.store.close()

        again = _build(restarted=True)
        again.recover(ChannelStore(opened(must_exist=True)), restarted=True)
        assert _visible(again) == [0, 1, 2, "out"]
        entry = again.transactions.table.get("t@1.0")
        assert (entry.outcome, entry.runs) == (Outcome.COMMIT, ((3, 1),))
        assert again.readers.owned.groups["g"].committed == 1  # its inputs stay consumed

    asyncio.run(main())
