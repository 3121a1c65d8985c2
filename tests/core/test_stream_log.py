"""The offset log's records and the rule that reads them back (no Ray):
``raytopic.core.stream_log``."""

from __future__ import annotations

import json

from raytopic.core.protocol import Lease, MicroBatchRecord, StreamRecord
from raytopic.core.stream_log import Recovery, recover

BATCH_3 = MicroBatchRecord(3, ((0, 10, 20), (1, 5, 5), (2, 7, 9)))
BATCH_4 = MicroBatchRecord(4, ((0, 20, 25), (1, 5, 8), (2, 9, 9)))
OLD = Lease("stream:a", 1)


def test_a_batch_names_every_channels_range_and_its_width() -> None:
    assert BATCH_3.range_of(0) == (10, 20)
    assert BATCH_3.range_of(1) == (5, 5)
    assert BATCH_3.range_of(9) == (0, 0)
    assert BATCH_3.width == 12


def test_records_survive_a_store_round_trip_as_json() -> None:
    for record in (
        StreamRecord(),
        StreamRecord(OLD, BATCH_3, 2),
        StreamRecord(Lease("stream:z", 7), None, -1),
    ):
        kept = json.loads(json.dumps(record.to_state()))
        assert StreamRecord.from_state(kept) == record
    assert MicroBatchRecord.from_state(json.loads(json.dumps(BATCH_4.to_state()))) == BATCH_4


def test_a_group_no_stream_read_starts_at_batch_0() -> None:
    assert recover([StreamRecord(), StreamRecord()]) == Recovery(None, None, 0)


def test_a_batch_committed_everywhere_leaves_nothing_to_do() -> None:
    records = [StreamRecord(OLD, BATCH_3, 3)] * 3
    assert recover(records) == Recovery(None, None, 4)


def test_a_batch_committed_nowhere_is_replayed_as_it_was() -> None:
    # Recorded at every channel (handed out, perhaps), committed at none.
    records = [StreamRecord(OLD, BATCH_4, 3)] * 3
    assert recover(records) == Recovery(BATCH_4, None, 5)


def test_a_batch_recorded_at_some_channels_only_is_replayed() -> None:
    # The stream died while recording: never handed out, but replaying it is safe.
    records = [StreamRecord(OLD, BATCH_4, 3), StreamRecord(OLD, BATCH_3, 3)]
    assert recover(records) == Recovery(BATCH_4, None, 5)


def test_a_batch_committed_at_some_channels_only_is_committed_at_the_rest() -> None:
    # The stream died while committing: it had moved past the batch.
    records = [StreamRecord(OLD, BATCH_4, 4), StreamRecord(OLD, BATCH_4, 3)]
    assert recover(records) == Recovery(None, BATCH_4, 5)


def test_a_channel_that_lost_its_record_is_told_the_batch_again() -> None:
    # A channel restarted without a store keeps nothing: the others know the batch.
    records = [StreamRecord(OLD, BATCH_4, 4), StreamRecord()]
    assert recover(records) == Recovery(None, BATCH_4, 5)
    assert recover([StreamRecord(OLD, BATCH_4, 3), StreamRecord()]) == Recovery(BATCH_4, None, 5)


def test_a_batch_followed_by_the_next_ones_record_at_some_channels_only_is_committed_there() -> (
    None
):
    # The stream died as it moved on in one step (batch 3's commit with batch 4's
    # record): the first channel took the step, the second did not. Batch 3 was done
    # (a newer one is recorded), so it is committed at the second; 4 is replayed.
    records = [StreamRecord(OLD, BATCH_4, 3), StreamRecord(OLD, BATCH_3, 2)]
    assert recover(records) == Recovery(BATCH_4, BATCH_3, 5)
    # Not so for a batch only recorded when the stream died (its last one committed).
    assert recover([StreamRecord(OLD, BATCH_4, 3), StreamRecord(OLD, BATCH_3, 3)]) == Recovery(
        BATCH_4, None, 5
    )
