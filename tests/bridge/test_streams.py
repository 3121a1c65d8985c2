"""Streams of micro-batches against a real Ray: ``raytopic.data.stream`` (docs/guides/streams.md).
The faults (SIGKILLed drivers, channels, coordinators; damaged records) are in
``test_stream_faults.py``; the Spark form in ``test_spark.py``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import raytopic as rt
import raytopic.data as rd
from raytopic.bridge import data as bridge_data
from raytopic.bridge.data import pack, ranges_dataset
from raytopic.bridge.streams import split_rows
from raytopic.client.bulk import ChannelRange
from raytopic.core.protocol import CommitMicroBatch, MicroBatchRecord, StreamPart, pack_request

from tests.topic_helpers import (
    get,
    group_at_latest,
    key_for,
    module_topic,
    next_sequences,
    publish_all,
    receive_until_empty,
)

# Under pytest -n (xdist), the module's tests run in one worker: its topic is made once.
pytestmark = pytest.mark.xdist_group("test_streams")

# Two channels, shared: each test reads through a group of its own made at the tail.
topic = module_topic(channels=2, retain=True, groups=[rt.SharedGroup("shared")])


def _published(topic: rt.Topic, group: str, count: int, first: int = 0) -> dict[int, int]:
    """A new group at the tail, then ``count`` values ``{"n": first..}`` published
    round robin; returns where the group starts on each channel."""
    group_at_latest(topic, group)
    starts = next_sequences(topic)
    publish_all(topic, [{"n": n} for n in range(first, first + count)])
    return starts


def _rows(batch: rd.MicroBatch) -> list[dict[str, Any]]:
    return batch.dataset.take_all()


def _committed(topic: rt.Topic, group: str) -> dict[int, int | None]:
    return {
        c.channel: None if c.committed is None or not c.has_commit else c.committed.sequence
        for c in topic.describe().groups[group].channels
    }


# -- pure: how a batch shares its rows among channels --------------------------------------


@pytest.mark.parametrize(
    ("backlog", "max_rows", "expected"),
    [
        ({0: 10, 1: 20}, 100, {0: 10, 1: 20}),  # everything fits
        ({0: 10, 1: 200}, 100, {0: 10, 1: 90}),  # the small one empties, the big one fills
        ({0: 300, 1: 200}, 100, {0: 50, 1: 50}),  # equal shares
        ({0: 300, 1: 200, 2: 0}, 101, {0: 51, 1: 50, 2: 0}),  # the odd one to the lowest
        ({0: 5, 1: 5, 2: 5}, 2, {0: 1, 1: 1, 2: 0}),  # fewer rows than channels
        ({0: 0, 1: 0}, 10, {0: 0, 1: 0}),
    ],
)
def test_a_batch_shares_its_rows_fairly_among_the_channels(
    backlog: dict[int, int], max_rows: int, expected: dict[int, int]
) -> None:
    assert split_rows(backlog, max_rows) == expected


def _range(channel: int, first: int, stop: int) -> ChannelRange:
    return ChannelRange(channel, first, stop)


@pytest.mark.parametrize(
    ("ranges", "task_rows", "expected"),
    [
        ([_range(0, 0, 10), _range(1, 5, 15)], 100, [[_range(0, 0, 10), _range(1, 5, 15)]]),
        (  # a batch of 100 on 4 channels, 50 rows a task: two tasks of two ranges
            [_range(c, 0, 25) for c in range(4)],
            50,
            [[_range(0, 0, 25), _range(1, 0, 25)], [_range(2, 0, 25), _range(3, 0, 25)]],
        ),
        (  # uneven ranges: about equal tasks, in order
            [_range(0, 0, 30), _range(1, 0, 30), _range(2, 0, 30), _range(3, 0, 10)],
            50,
            [[_range(0, 0, 30), _range(1, 0, 30)], [_range(2, 0, 30), _range(3, 0, 10)]],
        ),
        (  # a range longer than a task is cut
            [_range(1, 10, 130)],
            50,
            [[_range(1, 10, 60)], [_range(1, 60, 110)], [_range(1, 110, 130)]],
        ),
        ([], 50, []),
    ],
)
def test_a_batch_packs_its_ranges_into_few_read_tasks_in_order(
    ranges: list[ChannelRange], task_rows: int, expected: list[list[ChannelRange]]
) -> None:
    assert pack(ranges, task_rows) == expected


@pytest.mark.parametrize("task_rows", [1, 7, 26, 50, 1000])
def test_packed_tasks_read_each_position_once_in_at_most_a_task_per_task_rows(
    task_rows: int,
) -> None:
    ranges = [_range(0, 3, 29), _range(1, 0, 26), _range(2, 100, 101), _range(3, 7, 33)]
    total = sum(r.rows for r in ranges)

    tasks = pack(ranges, task_rows)

    read = [(p.channel, n) for task in tasks for p in task for n in range(p.first, p.stop)]
    assert read == [(r.channel, n) for r in ranges for n in range(r.first, r.stop)]
    assert all(task for task in tasks) and len(tasks) <= -(-total // task_rows)
    assert all(p.rows <= task_rows for task in tasks for p in task)


# -- batches ------------------------------------------------------------------------------


def test_batches_cover_exactly_the_published_elements_in_gapless_ranges(
    topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    starts = _published(topic, group, 250)
    ends = next_sequences(topic)
    seen: list[int] = []
    batches = []
    with rd.stream(topic, group=group, max_rows_per_batch=100) as stream:
        for batch in stream:
            rows = _rows(batch)
            assert len(rows) == batch.rows <= 100
            for row in rows:  # read_topic's columns; every row inside the batch's ranges
                assert list(row) == ["n", "key", "channel", "position", "timestamp"]
                first, end = batch.ranges[row["channel"]]
                assert first <= row["position"] < end
            seen += [row["n"] for row in rows]
            batches.append(batch)
    assert sorted(seen) == list(range(250))
    assert [b.batch_id for b in batches] == [0, 1, 2]
    assert [b.rows for b in batches] == [100, 100, 50]
    for channel in range(2):  # each channel's ranges follow each other, start to tail
        spans = [b.ranges[channel] for b in batches]
        assert spans[0][0] == starts[channel] and spans[-1][1] == ends[channel]
        assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
    # Reaching the end of an "available_now" stream committed the last batch.
    assert _committed(topic, group) == {c: ends[c] - 1 for c in range(2)}
    assert list(rd.stream(topic, group=group)) == []  # nothing new: no batch


def test_packed_read_tasks_read_exactly_the_ranges_elements(
    topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    starts = _published(topic, group, 100)
    ends = next_sequences(topic)
    ranges = [_range(c, starts[c], ends[c]) for c in range(2)]  # 50 each

    packed = ranges_dataset(topic, ranges, task_rows=30).materialize()  # 30 | 20 + 30 | 20

    assert packed.num_blocks() == 3
    rows = packed.take_all()
    assert sorted(row["n"] for row in rows) == list(range(100))
    assert sorted((row["channel"], row["position"]) for row in rows) == [
        (c, n) for c in range(2) for n in range(starts[c], ends[c])
    ]
    # A stream's micro-batch of 100 rows on 2 channels is read by one task.
    with rd.stream(topic, group=group, max_rows_per_batch=100) as stream:
        batch = next(stream)
        assert len(batch.ranges) == 2 and batch.dataset.materialize().num_blocks() == 1
        assert sorted(row["n"] for row in _rows(batch)) == list(range(100))


def test_a_batch_read_ahead_in_several_tasks_is_exactly_its_ranges_elements(
    topic: rt.Topic, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray.data.dataset import MaterializedDataset

    starts = _published(topic, unique_name("g"), 100)
    ends = next_sequences(topic)
    ranges = [_range(c, starts[c], ends[c]) for c in range(2)]  # 50 each
    monkeypatch.setattr(bridge_data, "READ_AHEAD_TASK_ROWS", 30)  # 30 | 20 + 30 | 20
    monkeypatch.setattr(bridge_data, "READ_AHEAD_MIN_ROWS", 100)
    read = bridge_data.start_read(topic, ranges)
    assert read is not None

    dataset, dataframe = read()

    assert isinstance(dataset, MaterializedDataset) and dataframe is None
    # The tasks' metadata: counted and typed without running anything.
    assert dataset.num_blocks() == 3 and dataset.count() == 100
    assert dataset.schema().names == ["n", "key", "channel", "position", "timestamp"]
    rows = dataset.take_all()
    assert sorted((row["channel"], row["position"], row["n"]) for row in rows) == sorted(
        (row["channel"], row["position"], row["n"])
        for row in rd.read_topic(topic, start=starts, end=ends).take_all()
    )
    assert sorted(row["n"] for row in rows) == list(range(100))


def test_a_batch_left_uncommitted_is_handed_out_again_first_and_fences_the_old_stream(
    topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    starts = _published(topic, group, 60)
    old = rd.stream(topic, group=group, max_rows_per_batch=25)
    first = next(old)
    second = next(old)  # advancing committed the first batch
    second_rows = _rows(second)
    assert _committed(topic, group) == {c: first.ranges[c][1] - 1 for c in range(2)}
    # The loop is left here (break, an exception, a driver gone): nothing more commits.
    new = rd.stream(topic, group=group, max_rows_per_batch=25)
    replayed = next(new)
    assert (replayed.batch_id, replayed.ranges, replayed.rows) == (1, second.ranges, 25)
    assert _rows(replayed) == second_rows
    # The newer stream fenced the older: its commit is refused, its iteration ends.
    with pytest.raises(rt.NotOwnerError):
        second.commit()
    with pytest.raises(rt.NotOwnerError):
        next(old)
    assert list(old) == []
    rest = [replayed, *new]
    assert [b.batch_id for b in rest] == [1, 2]
    values = sorted(row["n"] for b in [first, *rest] for row in _rows(b))
    assert values == list(range(60))
    assert all(first.ranges[c][0] == starts[c] for c in range(2))


def test_a_step_from_one_batch_to_the_next_taken_at_one_channel_only_is_finished_by_the_next_stream(
    topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    group_at_latest(topic, group)
    starts = next_sequences(topic)
    publish_all(topic, [{"n": n} for n in range(30)], key=key_for(0, 2))
    publish_all(topic, [{"n": n} for n in range(30, 40)], key=key_for(1, 2))
    with rd.stream(topic, group=group, max_rows_per_batch=20) as old:
        first = next(old)  # 10 of channel 0's 30, all 10 of channel 1's
        assert first.ranges == {0: (starts[0], starts[0] + 10), 1: (starts[1], starts[1] + 10)}
        # The driver dies as the stream moves on in one step (the first batch's commit
        # with the second's record, as the lead sends each channel its part): channel
        # 0 took it, channel 1 did not. The loop is left: the stream ends there.
        second = MicroBatchRecord(
            1, ((0, starts[0] + 10, starts[0] + 30), (1, starts[1] + 10, starts[1] + 10))
        )
        moving_on = CommitMicroBatch(group, old._claim.lease, first._record, next=second)
        get(topic._channel_actors[0].request.remote(pack_request(StreamPart(moving_on))))
    new = rd.stream(topic, group=group, max_rows_per_batch=20)
    replayed = next(new)  # the second, never handed out: handed out now
    assert (replayed.batch_id, replayed.ranges) == (
        1,
        dict((c, (s, e)) for c, s, e in second.ranges),
    )
    assert list(new) == []
    values = sorted(row["n"] for batch in (first, replayed) for row in _rows(batch))
    assert values == list(range(40))
    # Channel 1 never took the first batch's commit: the new stream committed it there.
    assert _committed(topic, group) == {0: starts[0] + 29, 1: starts[1] + 9}
    assert list(rd.stream(topic, group=group)) == []  # nothing is read twice


def test_commit_commits_now_and_an_exception_in_the_loop_commits_nothing(
    topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    _published(topic, group, 20)
    before = _committed(topic, group)
    stream = rd.stream(topic, group=group, max_rows_per_batch=10)
    with pytest.raises(RuntimeError, match="the sink failed"):
        for _ in stream:
            raise RuntimeError("the sink failed")
    assert _committed(topic, group) == before
    with rd.stream(topic, group=group, max_rows_per_batch=10) as again:
        batch = next(again)
        assert batch.batch_id == 0
        batch.commit()
        batch.commit()  # twice: nothing more
        committed = _committed(topic, group)
        assert committed == {c: batch.ranges[c][1] - 1 for c in range(2)}
    # Left by the block (stop), not by advancing: the second batch is not committed.
    assert [b.batch_id for b in rd.stream(topic, group=group, max_rows_per_batch=10)] == [1]


def test_a_timed_stream_waits_for_data_and_stop_ends_its_wait(
    topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    group_at_latest(topic, group)
    stream = rd.stream(topic, group=group, trigger=0.2)
    later = threading.Timer(0.5, publish_all, (topic, [{"n": n} for n in range(7)]))
    later.start()
    batch = next(stream)  # empty intervals make no batch: this one waited for the data
    later.join()
    assert sorted(row["n"] for row in _rows(batch)) == list(range(batch.rows))
    assert batch.batch_id == 0 and 1 <= batch.rows <= 7
    got = batch.rows
    while got < 7:
        got += next(stream).rows
    assert got == 7
    threading.Timer(0.5, stream.stop).start()
    started = time.monotonic()
    with pytest.raises(StopIteration):
        next(stream)  # commits the last batch, then waits for data until stop()
    assert time.monotonic() - started < 10
    assert sum(c.lag for c in topic.describe().groups[group].channels) == 0


def test_a_new_group_starts_where_start_says(
    topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    publish_all(topic, [{"n": -1}])
    assert list(rd.stream(topic, group=group, start="latest")) == []
    publish_all(topic, [{"n": n} for n in range(3)])
    batches = list(rd.stream(topic, group=group, start="earliest"))  # an existing group
    assert sorted(row["n"] for b in batches for row in _rows(b)) == [0, 1, 2]


def test_a_shared_group_or_a_group_with_members_is_refused_and_nothing_changes(
    topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    with pytest.raises(rt.GroupModeError, match="shared"):
        rd.stream(topic, group="shared")
    group = unique_name("g")
    group_at_latest(topic, group)
    publish_all(topic, [{"n": 0}])
    before = _committed(topic, group)
    with topic.subscriber(group=group) as member:
        with pytest.raises(rt.GroupBusyError, match=f"has members \\({member.subscriber_id}\\)"):
            rd.stream(topic, group=group)
        assert topic.describe().groups[group].stream is None
    assert _committed(topic, group) == before
    assert [b.rows for b in rd.stream(topic, group=group)] == [1]  # once the member left


def test_a_member_is_refused_while_a_stream_consumes_its_group_and_joins_once_it_ends(
    make_topic: Callable[..., rt.Topic],
) -> None:
    # Issue 47's run: a stream with its first batch of 500 in hand; a member joining
    # was accepted, received all 2,000 (the stream's 500 among them) and committed,
    # and the stream's next batch failed with DataLossError (retain=False).
    topic = make_topic(channels=2, retain=False)
    publish_all(topic, [{"n": n} for n in range(2000)])
    stream = rd.stream(topic, group="etl", max_rows_per_batch=500)
    first = next(stream)
    holder = topic.describe().groups["etl"]
    assert holder.stream is not None and holder.members == ()
    assert set(holder.ownership.values()) == {holder.stream}
    with pytest.raises(rt.GroupBusyError, match=f"consumed by stream {holder.stream}"):
        topic.subscriber(group="etl")
    values = [row["n"] for row in _rows(first)]
    ids = []
    for batch in stream:  # the stream goes on: nothing of its group was taken
        ids.append(batch.batch_id)
        values += [row["n"] for row in _rows(batch)]  # read before it is committed
    assert ids == [1, 2, 3]
    assert sorted(values) == list(range(2000))
    # The iteration ended: the group is free, and a member reads on after the stream.
    assert topic.describe().groups["etl"].stream is None
    publish_all(topic, [{"n": 2000}])
    with topic.subscriber(group="etl", complete_on_empty=True) as member:
        assert [e.value["n"] for e in receive_until_empty(member)] == [2000]


def test_a_reset_of_a_group_a_stream_consumes_is_refused_and_changes_nothing(
    topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    # A reset under a running stream returned its positions and did nothing: the
    # stream read on from its own ranges and its next commit undid the reset (to
    # "earliest" after batch 1 of 5: no row came again, lag 0; to "latest": every
    # row still came). It is refused as a member's join is, until the stream ends.
    group = unique_name("g")
    starts = _published(topic, group, 4)
    stream = rd.stream(topic, group=group, max_rows_per_batch=2)
    first = next(stream)
    before = _committed(topic, group)
    holder = topic.describe().groups[group].stream
    for to in ("earliest", "latest"):
        with pytest.raises(rt.GroupBusyError, match=f"consumed by stream {holder}"):
            topic.reset_group(group, to)
    assert _committed(topic, group) == before
    assert [batch.batch_id for batch in stream] == [1]  # it reads on where it was
    assert first.ranges == {c: (starts[c], starts[c] + 1) for c in (0, 1)}
    positions = topic.reset_group(group, "earliest")  # the stream ended: the group is free
    assert {c: p.sequence for c, p in positions.items()} == {c: -1 for c in (0, 1)}


def test_a_reset_after_a_stream_left_a_batch_uncommitted_is_refused_until_it_is_committed(
    topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    # trial67: a stream that left a batch recorded and uncommitted (its driver
    # SIGKILLed, or the loop left by an exception), then a reset of the group
    # (accepted once the stream's claim ended) to "earliest": the next stream
    # replayed the old batch and went on from its end, so what the reset sent the
    # group back to never came again (a Spark stream, 2,000 rows in batches of 300,
    # the driver killed in batch 2: after the reset the new driver read batches 2-6,
    # 1,400 rows, lag 0; the 600 rows of batches 0-1 never again). Refused now, as a
    # reset of a group a stream consumes is; once the batch is committed it works.
    group = unique_name("g")
    starts = _published(topic, group, 8)
    with rd.stream(topic, group=group, max_rows_per_batch=4) as stream:
        next(stream)
        next(stream)  # batch 0 committed; batch 1 in hand, never committed
    before = _committed(topic, group)
    back = {c: rt.Position(topic.topic_id, c, starts[c] - 1) for c in (0, 1)}
    with pytest.raises(rt.GroupBusyError, match="batch 1 of its stream recorded and not"):
        topic.reset_group(group, back)
    assert _committed(topic, group) == before  # nothing changed
    with rd.stream(topic, group=group, max_rows_per_batch=4) as again:
        replayed = next(again)
        assert replayed.batch_id == 1
        replayed.commit()
    positions = topic.reset_group(group, back)
    assert {c: p.sequence for c, p in positions.items()} == {c: starts[c] - 1 for c in (0, 1)}
    with rd.stream(topic, group=group, max_rows_per_batch=8) as after:
        rows = sorted(row["n"] for batch in after for row in _rows(batch))
    assert rows == list(range(8))  # from where the reset set the group


def test_stop_and_leaving_the_block_free_the_group_and_a_batch_in_hand_is_not_committed(
    topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    _published(topic, group, 4)
    stream = rd.stream(topic, group=group, max_rows_per_batch=2)
    stream.stop()  # nothing in hand: the group is given back at once
    assert topic.describe().groups[group].stream is None
    with topic.subscriber(group=group):
        pass
    before = _committed(topic, group)
    with rd.stream(topic, group=group, max_rows_per_batch=2) as held:
        in_hand = next(held)
        assert topic.describe().groups[group].stream is not None
    assert topic.describe().groups[group].stream is None  # left the block
    assert _committed(topic, group) == before
    with pytest.raises(rt.NotOwnerError, match="no longer this stream's"):
        in_hand.commit()
    again = rd.stream(topic, group=group, max_rows_per_batch=2)
    assert next(again).ranges == in_hand.ranges  # handed out again, same ranges


def test_a_batch_too_small_to_read_ahead_is_read_by_its_own_dataset_exactly(
    topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    from ray.data.dataset import MaterializedDataset

    group = unique_name("g")
    _published(topic, group, 60)
    ranges = [_range(c, 0, 30) for c in range(2)]
    assert bridge_data.start_read(topic, ranges) is None  # 60 rows: under READ_AHEAD_MIN_ROWS

    with rd.stream(topic, group=group, max_rows_per_batch=25) as stream:
        batches = [(batch, _rows(batch)) for batch in stream]

    assert [batch.rows for batch, _ in batches] == [25, 25, 10]
    for batch, rows in batches:  # planned ahead, read when used: each exactly its ranges
        assert not isinstance(batch.dataset, MaterializedDataset)
        assert sorted((row["channel"], row["position"]) for row in rows) == [
            (c, p) for c, (start, end) in sorted(batch.ranges.items()) for p in range(start, end)
        ]
    assert sorted(row["n"] for _, rows in batches for row in rows) == list(range(60))


def test_the_next_batch_is_read_while_one_is_in_hand_and_recorded_only_when_handed_out(
    topic: rt.Topic, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray.data.dataset import MaterializedDataset

    monkeypatch.setattr(bridge_data, "READ_AHEAD_MIN_ROWS", 10)  # every batch here
    group = unique_name("g")
    _published(topic, group, 60)
    old = rd.stream(topic, group=group, max_rows_per_batch=25)
    first = next(old)  # "available_now": planned and read from the start
    second = next(old)  # planned and read while the first was in hand
    assert isinstance(first.dataset, MaterializedDataset)
    assert isinstance(second.dataset, MaterializedDataset)
    assert sorted((row["channel"], row["position"]) for row in _rows(second)) == [
        (c, p) for c, (start, end) in sorted(second.ranges.items()) for p in range(start, end)
    ]
    # The third is planned (and read) now, yet not recorded: the loop left here, the
    # next stream hands out the second again, then a third of the same ranges.
    time.sleep(0.5)
    new = rd.stream(topic, group=group, max_rows_per_batch=25)
    replayed = next(new)
    assert (replayed.batch_id, replayed.ranges) == (1, second.ranges)
    third = next(new)
    assert third.batch_id == 2 and third.rows == 10
    assert all(third.ranges[c][0] == second.ranges[c][1] for c in range(2))
    assert sorted(row["n"] for b in (first, replayed, third) for row in _rows(b)) == list(range(60))
    assert list(new) == []
    with pytest.raises(rt.NotOwnerError):
        next(old)  # fenced: its planned third is never recorded
