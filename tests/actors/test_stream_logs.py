"""A channel's offset logs of the streams that read it (no Ray):
``raytopic.actors.stream_logs``."""

from __future__ import annotations

import json

import pytest

from raytopic.actors.stream_logs import StreamLogs
from raytopic.core.errors import InvalidArgumentError, NotOwnerError
from raytopic.core.stream_log import (
    ClaimStream,
    CommitMicroBatch,
    MicroBatchRecord,
    RecordMicroBatch,
    StreamClaim,
    StreamRecord,
)

FIRST, SECOND = StreamClaim(1, "first"), StreamClaim(2, "second")
BATCH_0 = MicroBatchRecord(0, ((0, 0, 10), (1, 0, 4)))
BATCH_1 = MicroBatchRecord(1, ((0, 10, 10), (1, 4, 9)))


@pytest.fixture
def logs() -> StreamLogs:
    logs = StreamLogs(channel=0)
    logs.claim(ClaimStream("g", FIRST))
    return logs


def test_a_claim_holds_the_group_and_a_newer_claim_takes_it(logs: StreamLogs) -> None:
    assert logs.record_of("g") == StreamRecord(FIRST)
    assert logs.record_of("other") == StreamRecord()
    assert logs.claim(ClaimStream("g", FIRST)) == StreamRecord(FIRST)  # again: the same
    logs.record(RecordMicroBatch("g", FIRST, BATCH_0))
    assert logs.claim(ClaimStream("g", SECOND)) == StreamRecord(SECOND, BATCH_0)
    with pytest.raises(NotOwnerError, match="newer stream"):
        logs.claim(ClaimStream("g", FIRST))
    assert logs.record_of("g").claim == SECOND


def test_an_older_stream_can_neither_record_nor_commit(logs: StreamLogs) -> None:
    logs.record(RecordMicroBatch("g", FIRST, BATCH_0))
    logs.claim(ClaimStream("g", SECOND))
    with pytest.raises(NotOwnerError, match="fenced"):
        logs.commit(CommitMicroBatch("g", FIRST, BATCH_0))
    with pytest.raises(NotOwnerError):
        logs.record(RecordMicroBatch("g", FIRST, BATCH_1))
    assert logs.record_of("g") == StreamRecord(SECOND, BATCH_0, -1)


def test_a_commit_moves_this_channels_range_end_once(logs: StreamLogs) -> None:
    logs.record(RecordMicroBatch("g", FIRST, BATCH_0))
    assert logs.commit(CommitMicroBatch("g", FIRST, BATCH_0)) == 9  # channel 0: 0..9
    assert logs.record_of("g") == StreamRecord(FIRST, BATCH_0, 0)
    assert logs.commit(CommitMicroBatch("g", FIRST, BATCH_0)) is None  # committed before
    logs.record(RecordMicroBatch("g", FIRST, BATCH_1))
    assert logs.commit(CommitMicroBatch("g", FIRST, BATCH_1)) is None  # nothing of channel 0
    assert logs.record_of("g") == StreamRecord(FIRST, BATCH_1, 1)


def test_a_channel_that_lost_every_record_holds_no_stream(logs: StreamLogs) -> None:
    # A channel restarted without a store: no claim is adopted, not even the one in
    # hand (an older stream's would take the group back from a newer one).
    restarted = StreamLogs(channel=0)
    with pytest.raises(NotOwnerError, match="restarted without a store"):
        restarted.commit(CommitMicroBatch("g", FIRST, BATCH_0))
    with pytest.raises(NotOwnerError, match="restarted without a store"):
        restarted.record(RecordMicroBatch("g", FIRST, BATCH_0))
    assert restarted.record_of("g") == StreamRecord()


def test_a_commit_teaches_a_channel_that_lost_the_record(logs: StreamLogs) -> None:
    assert logs.commit(CommitMicroBatch("g", FIRST, BATCH_0)) == 9
    assert logs.record_of("g") == StreamRecord(FIRST, BATCH_0, 0)


def test_a_batch_is_recorded_again_only_as_it_was(logs: StreamLogs) -> None:
    logs.record(RecordMicroBatch("g", FIRST, BATCH_0))
    logs.record(RecordMicroBatch("g", FIRST, BATCH_0))  # a replay: the same
    with pytest.raises(InvalidArgumentError, match="other ranges"):
        logs.record(RecordMicroBatch("g", FIRST, MicroBatchRecord(0, ((0, 0, 11), (1, 0, 4)))))
    logs.commit(CommitMicroBatch("g", FIRST, BATCH_0))
    with pytest.raises(InvalidArgumentError, match="older"):
        logs.record(RecordMicroBatch("g", FIRST, BATCH_0))
    assert logs.record_of("g") == StreamRecord(FIRST, BATCH_0, 0)


def test_records_are_kept_as_json_and_restored_in_place(logs: StreamLogs) -> None:
    logs.record(RecordMicroBatch("g", FIRST, BATCH_0))
    saved = {"g": json.loads(json.dumps(logs.state_of("g")))}
    assert logs.state_of("none") is None
    restarted = StreamLogs(channel=0)
    keys = restarted.records.keys  # the channel's state lists keys through this view
    restarted.restore_state(saved)
    assert list(keys()) == ["g"]
    assert restarted.record_of("g") == logs.record_of("g")
    assert restarted.forget("g") and not restarted.forget("g")
