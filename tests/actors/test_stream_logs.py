"""A channel's offset logs of the streams that read it (no Ray):
``raytopic.actors.stream_logs``."""

from __future__ import annotations

import json

import pytest

from raytopic.actors.stream_logs import StreamLogs
from raytopic.core.errors import InvalidArgumentError, NotOwnerError
from raytopic.core.protocol import (
    CommitMicroBatch,
    Lease,
    MicroBatchRecord,
    RecordMicroBatch,
    StreamRecord,
)

FIRST, SECOND = Lease("stream:first", 1), Lease("stream:second", 2)
MEMBER = Lease("member", 3)
BATCH_0 = MicroBatchRecord(0, ((0, 0, 10), (1, 0, 4)))
BATCH_1 = MicroBatchRecord(1, ((0, 10, 10), (1, 4, 9)))


@pytest.fixture
def logs() -> StreamLogs:
    logs = StreamLogs(channel=0)
    logs.grant("g", FIRST)
    return logs


def test_a_grant_names_the_groups_stream_while_its_lease_owns_the_channel(
    logs: StreamLogs,
) -> None:
    assert logs.record_of("g") == StreamRecord(FIRST)
    assert logs.record_of("other") == StreamRecord()
    assert logs.stream_of("g", FIRST) == FIRST
    assert logs.stream_of("g", MEMBER) is None  # a member owns the channel now
    assert logs.stream_of("g", None) is None  # the stream ended: nobody owns it
    assert logs.stream_of("other", FIRST) is None
    logs.record(RecordMicroBatch("g", FIRST, BATCH_0), FIRST)
    assert logs.grant("g", SECOND) == StreamRecord(SECOND, BATCH_0)  # the log stays


def test_a_step_under_a_lease_that_does_not_own_the_channel_is_refused(
    logs: StreamLogs,
) -> None:
    logs.record(RecordMicroBatch("g", FIRST, BATCH_0), FIRST)
    logs.grant("g", SECOND)
    for owner in (SECOND, None, MEMBER):  # a newer stream, nobody, a member
        with pytest.raises(NotOwnerError, match="no longer this stream's"):
            logs.commit(CommitMicroBatch("g", FIRST, BATCH_0), owner)
        with pytest.raises(NotOwnerError):
            logs.record(RecordMicroBatch("g", FIRST, BATCH_1), owner)
    assert logs.record_of("g") == StreamRecord(SECOND, BATCH_0, -1)


def test_a_commit_moves_this_channels_range_end_once(logs: StreamLogs) -> None:
    logs.record(RecordMicroBatch("g", FIRST, BATCH_0), FIRST)
    assert logs.commit(CommitMicroBatch("g", FIRST, BATCH_0), FIRST) == 9  # channel 0: 0..9
    assert logs.record_of("g") == StreamRecord(FIRST, BATCH_0, 0)
    assert logs.commit(CommitMicroBatch("g", FIRST, BATCH_0), FIRST) is None  # committed before
    logs.record(RecordMicroBatch("g", FIRST, BATCH_1), FIRST)
    assert logs.commit(CommitMicroBatch("g", FIRST, BATCH_1), FIRST) is None  # nothing of 0
    assert logs.record_of("g") == StreamRecord(FIRST, BATCH_1, 1)


def test_a_commit_with_the_next_batch_records_it_in_the_same_step_once(logs: StreamLogs) -> None:
    logs.record(RecordMicroBatch("g", FIRST, BATCH_0), FIRST)
    moving_on = CommitMicroBatch("g", FIRST, BATCH_0, next=BATCH_1)
    with pytest.raises(NotOwnerError):
        logs.commit(moving_on, SECOND)
    assert logs.record_of("g") == StreamRecord(FIRST, BATCH_0, -1)  # refused: unchanged
    assert logs.commit(moving_on, FIRST) == 9  # channel 0: 0..9
    assert logs.record_of("g") == StreamRecord(FIRST, BATCH_1, 0)
    assert logs.commit(moving_on, FIRST) is None  # again (a call run twice): the same
    assert logs.record_of("g") == StreamRecord(FIRST, BATCH_1, 0)


def test_a_channel_that_lost_its_record_learns_it_under_the_seeded_lease() -> None:
    # A channel restarted without a store: its coordinator seeded the stream's lease
    # (the owner); the record, and its holder, come with the next step.
    restarted = StreamLogs(channel=0)
    assert restarted.commit(CommitMicroBatch("g", FIRST, BATCH_0), FIRST) == 9
    assert restarted.record_of("g") == StreamRecord(FIRST, BATCH_0, 0)
    assert restarted.stream_of("g", FIRST) == FIRST


def test_a_batch_is_recorded_again_only_as_it_was(logs: StreamLogs) -> None:
    logs.record(RecordMicroBatch("g", FIRST, BATCH_0), FIRST)
    logs.record(RecordMicroBatch("g", FIRST, BATCH_0), FIRST)  # a replay: the same
    with pytest.raises(InvalidArgumentError, match="other ranges"):
        other = MicroBatchRecord(0, ((0, 0, 11), (1, 0, 4)))
        logs.record(RecordMicroBatch("g", FIRST, other), FIRST)
    logs.commit(CommitMicroBatch("g", FIRST, BATCH_0), FIRST)
    with pytest.raises(InvalidArgumentError, match="older"):
        logs.record(RecordMicroBatch("g", FIRST, BATCH_0), FIRST)
    assert logs.record_of("g") == StreamRecord(FIRST, BATCH_0, 0)


def test_records_are_kept_as_json_and_restored_in_place(logs: StreamLogs) -> None:
    logs.record(RecordMicroBatch("g", FIRST, BATCH_0), FIRST)
    saved = {"g": json.loads(json.dumps(logs.state_of("g")))}
    assert logs.state_of("none") is None
    restarted = StreamLogs(channel=0)
    keys = restarted.records.keys  # the channel's state lists keys through this view
    restarted.restore_state(saved)
    assert list(keys()) == ["g"]
    assert restarted.record_of("g") == logs.record_of("g")
    assert restarted.forget("g") and not restarted.forget("g")


def test_a_record_kept_by_streams_that_claimed_their_groups_themselves_names_no_holder() -> None:
    # Before the coordinator granted streams their groups, a record kept a claim.
    kept = {"claim": [3, "old"], "batch": BATCH_0.to_state(), "committed": 0}
    assert StreamRecord.from_state(kept) == StreamRecord(None, BATCH_0, 0)
