"""The channel's table of transactions, without Ray: staging and room, prepare,
finish, what a store keeps and gets back (and a format it does not read), held
groups, expiry, describe."""

from __future__ import annotations

import base64
import json

import pytest

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.stores.base import ChannelStore
from raytopic.actors.transaction_table import (
    KEEP_DONE,
    TRANSACTIONS_FORMAT,
    TransactionTable,
    aborted_error,
)
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import (
    InvalidArgumentError,
    StoreError,
    TransactionAbortedError,
    TransactionFencedError,
)
from raytopic.core.payloads import encode_values
from raytopic.core.protocol import FENCED, Address, ConsumedCommit, Lease, Outcome

LEAD = Address("ns", "source", "id1", 0)


def _staged(table: TransactionTable, key: str = "t@1.0", *values: object) -> object:
    entry = table.for_staging(key, "t", deadline=100.0, now=1.0, channel=0)
    table.stage(entry, encode_values(list(values or (1, 2, 3))))
    return entry


def test_staged_elements_hold_room_until_finished() -> None:
    table = TransactionTable()
    entry = _staged(table, "t@1.0", 1, 2, 3)
    table.stage(entry, encode_values([4]))
    assert (entry.staged, table.reserved) == (4, 4)
    assert [e.key for e in table.open_entries()] == ["t@1.0"]
    table.finish(entry, Outcome.ABORT, "aborted by its holder")
    assert table.reserved == 0 and not table.has_open
    assert entry.payloads == [] and entry.outcome == Outcome.ABORT


def test_several_stagings_become_one_payload_in_order_with_their_keys() -> None:
    table = TransactionTable()
    entry = table.for_staging("t@1.0", "t", 100.0, 1.0, 0)
    table.stage(entry, encode_values([{"a": 1}, {"b": 2}]))
    table.stage(entry, encode_values(["x"], ["k"]))
    payload = entry.payload()
    assert payload.decode() == [{"a": 1}, {"b": 2}, "x"]
    assert payload.keys == [None, None, "k"]


def test_an_aborted_transaction_refuses_more_staging_and_says_why() -> None:
    table = TransactionTable()
    entry = _staged(table)
    table.finish(entry, Outcome.ABORT, FENCED)
    with pytest.raises(TransactionFencedError):
        table.for_staging("t@1.0", "t", 100.0, 2.0, 0)
    other = _staged(table, "t@1.1")
    table.finish(other, Outcome.ABORT, "it timed out")
    with pytest.raises(TransactionAbortedError) as caught:
        table.for_staging("t@1.1", "t", 100.0, 2.0, 0)
    assert not isinstance(caught.value, TransactionFencedError)
    assert caught.value.reason == "it timed out"
    assert isinstance(aborted_error(entry, 0), TransactionFencedError)


def test_a_prepared_transaction_takes_no_more_elements() -> None:
    table = TransactionTable()
    entry = _staged(table)
    table.prepare(entry, LEAD, ())
    with pytest.raises(InvalidArgumentError):
        table.for_staging("t@1.0", "t", 100.0, 2.0, 0)


def test_prepared_and_finished_entries_round_trip_through_json() -> None:
    table = TransactionTable()
    entry = _staged(table, "t@1.0", {"v": 1}, {"v": 2})
    # (what a resequencing member consumed above its commit is kept with it: ``done``)
    commit = ConsumedCommit(
        "reader-1", 41, Lease("member-1", 3), 5, group="g", done=((43, 44), (47, 47))
    )
    table.prepare(entry, LEAD, (commit,))
    done = _staged(table, "t@1.1")
    table.finish(done, Outcome.COMMIT, runs=((10, 3),))
    staged_only = _staged(table, "t@1.2")
    saved = {key: json.loads(json.dumps(table.state_of(key))) for key in table.durable_keys()}
    assert set(saved) == {"t@1.0", "t@1.1"}  # staged-only elements are not durable
    assert table.state_of(staged_only.key) is None
    back = TransactionTable()
    back.restore(saved)
    prepared = back.get("t@1.0")
    assert prepared.phase == "prepared" and prepared.lead == LEAD
    assert prepared.commits == (commit,)
    assert prepared.payload().decode() == [{"v": 1}, {"v": 2}]
    assert back.reserved == 2
    finished = back.get("t@1.1")
    assert (finished.outcome, finished.runs) == (Outcome.COMMIT, ((10, 3),))


def test_a_prepared_commit_holds_its_group_for_every_other_member() -> None:
    table = TransactionTable()
    entry = _staged(table)
    owner = Lease("member-1", 3)
    table.prepare(entry, LEAD, (ConsumedCommit("r", 4, owner, 1, group="g"),))
    assert not table.waits_for_commit("g", owner)
    assert table.waits_for_commit("g", Lease("member-2", 4))
    assert not table.waits_for_commit("other", Lease("member-2", 4))
    table.finish(entry, Outcome.COMMIT)
    assert not table.waits_for_commit("g", Lease("member-2", 4))


def test_expired_and_in_doubt() -> None:
    table = TransactionTable()
    staged = table.for_staging("t@1.0", "t", deadline=10.0, now=1.0, channel=0)
    prepared = table.for_staging("t@1.1", "t", deadline=10.0, now=1.0, channel=0)
    table.prepare(prepared, LEAD, ())
    assert table.expired(now=9.0) == []
    assert table.expired(now=10.0) == [staged]
    assert table.in_doubt(now=2.0, grace=2.0) == []
    assert table.in_doubt(now=3.0, grace=2.0) == [prepared]


def test_finished_transactions_are_kept_up_to_a_bound_and_forgotten() -> None:
    table = TransactionTable()
    for number in range(KEEP_DONE + 5):
        entry = table.record(f"t@1.{number}", "t", 100.0, 1.0)
        table.finish(entry, Outcome.ABORT, "x")
    assert len(table.entries) == KEEP_DONE
    assert table.get("t@1.0") is None and table.get(f"t@1.{KEEP_DONE + 4}") is not None
    assert table.forget(f"t@1.{KEEP_DONE + 4}")
    assert not table.forget("t@1.unknown")
    open_one = _staged(table, "t@2.0")
    assert not table.forget(open_one.key)  # only finished ones are forgotten


def test_describe_lists_the_open_ones() -> None:
    table = TransactionTable()
    _staged(table, "t@1.0", 1, 2)
    done = _staged(table, "t@1.1")
    table.finish(done, Outcome.COMMIT)
    assert table.describe(now=3.5) == [
        {"id": "t", "key": "t@1.0", "phase": "staged", "age": 2.5, "staged": 2}
    ]


def test_the_stored_state_is_builtins_with_no_class_of_ours_pickled() -> None:
    table = TransactionTable()
    entry = _staged(table, "t@1.0", {"v": 1}, "two")
    table.prepare(entry, LEAD, ())
    state = table.state_of("t@1.0")
    assert b"raytopic" not in base64.b64decode(state["payload"])  # the values' pickles only
    damaged = bytearray(base64.b64decode(state["payload"]))
    damaged[-1] ^= 0xFF
    with pytest.raises(StoreError, match="damaged"):
        TransactionTable().restore(
            {"t@1.0": {**state, "payload": base64.b64encode(bytes(damaged)).decode()}}
        )


def test_a_store_with_another_format_of_transactions_is_refused(opened) -> None:
    store = opened()
    assert _channel_parts().recover(ChannelStore(store), restarted=False)
    kept = store.load_state()
    assert kept["sections"]["transactions"] == TRANSACTIONS_FORMAT
    store.save_state({**kept, "sections": {**kept["sections"], "transactions": 99}})
    store.close()
    with pytest.raises(StoreError, match="'transactions' in format version 99"):
        _channel_parts().recover(ChannelStore(opened(must_exist=True)), restarted=True)


def _channel_parts() -> ChannelParts:
    config = TopicConfig("t", "ns", "t0pic1d", 1, 10, True, None, Overflow.BLOCK, ())
    context = ChannelContext(config, 0, ChannelMetrics("t", 0))
    return ChannelParts.build(context, restarted=False)


def test_a_consumed_commit_kept_before_done_positions_loads_with_none() -> None:
    saved = ["reader-1", 41, ["member-1", 3], 5, "g"]  # a store's entry from before
    commit = ConsumedCommit.from_state(saved)
    assert commit == ConsumedCommit("reader-1", 41, Lease("member-1", 3), 5, group="g")
    assert ConsumedCommit.from_state(json.loads(json.dumps(commit.to_state()))) == commit
