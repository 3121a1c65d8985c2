"""Unit tests of a publisher's per-channel queues and of a queued publish_batch's
future (no Ray): what a call carries, in which order, and how a batch's statuses
are assembled from its parts' acks."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import raytopic as rt
from raytopic.client.publish_accumulator import (
    MAX_PIECES,
    PARTS_PIPELINE,
    PIPELINE,
    ChannelQueue,
    Part,
)
from raytopic.client.publish_futures import BatchFuture, PublishBatch
from raytopic.core.payloads import encode_values
from raytopic.core.protocol import AppendAck


def _queue() -> ChannelQueue:
    return ChannelQueue(0, None, PublishBatch("topic", 0))


def _part(values: list, index: int = 0, future: BatchFuture | None = None) -> Part:
    future = future or BatchFuture("topic", [0], [len(values)], None)
    return Part(encode_values(values), future, index)


def _values(queue: ChannelQueue, count: int, batch_size: int = 1000) -> None:
    for value in range(count):
        queue.add_value(pickle.dumps(value, 5), None, 0.0, batch_size)


def _sizes(pieces: list) -> list[int]:
    return [len(p.payloads) if isinstance(p, PublishBatch) else len(p) for p in pieces]


def test_parts_of_successive_batches_coalesce_into_one_call_of_a_full_batch() -> None:
    queue = _queue()
    for _ in range(4):  # four batches of 1000 over 4 channels: a part of 250 each here
        queue.add_part(_part(list(range(250))), now=0.0)
    queue.in_flight = PIPELINE  # calls in flight: a partial batch waits
    assert queue.due(1000, force=False, linger=0.0, now=0.0) == 1000  # full: it goes
    number, pieces = queue.take(1000)
    assert (number, _sizes(pieces)) == (0, [250] * 4)
    assert queue.next_batch == 4 and queue.size == 0  # each piece a batch number of its own


def test_a_call_never_splits_a_part_and_keeps_publish_order() -> None:
    queue = _queue()
    _values(queue, 300)
    queue.add_part(_part(list(range(600))), now=0.0)
    _values(queue, 200)
    queue.add_part(_part(list(range(1500))), now=0.0)  # larger than a batch: alone
    _values(queue, 10)
    calls = []
    while queue.size:
        calls.append(queue.take(1000))
    assert [(number, _sizes(pieces)) for number, pieces in calls] == [
        (0, [300, 600]),  # 200 more would pass 1000: they wait
        (2, [200]),
        (3, [1500]),
        (4, [10]),
    ]
    kinds = [type(piece).__name__ for _, pieces in calls for piece in pieces]
    assert kinds == ["PublishBatch", "Part", "PublishBatch", "Part", "PublishBatch"]


def test_values_close_at_batch_size_and_a_partial_batch_waits_behind_pipeline_calls() -> None:
    queue = _queue()
    _values(queue, 5, batch_size=4)
    assert _sizes(list(queue.waiting)) == [4] and len(queue.open.payloads) == 1
    queue.take(4)
    assert queue.due(4, force=False, linger=0.0, now=0.0) == 1  # 1 in flight < PIPELINE
    queue.in_flight = PIPELINE
    assert queue.due(4, force=False, linger=0.0, now=0.0) == 0
    assert queue.due(4, force=True, linger=0.0, now=0.0) == 1  # flush
    queue.in_flight = 0
    assert queue.due(4, force=False, linger=1.0, now=0.5) == 0  # not linger old yet
    assert queue.due(4, force=False, linger=1.0, now=1.0) == 1


def test_parts_wait_for_their_channels_call_to_return_and_values_behind_two() -> None:
    parts = _queue()
    parts.add_part(_part(list(range(250))), now=0.0)
    parts.in_flight = PARTS_PIPELINE  # one call out: the part waits for more to come
    assert parts.due(1000, force=False, linger=0.0, now=0.0) == 0
    for _ in range(3):
        parts.add_part(_part(list(range(250))), now=0.0)
    assert parts.due(1000, force=False, linger=0.0, now=0.0) == 1000  # a full call goes
    parts.take(1000)
    parts.add_part(_part([1]), now=0.0)
    parts.in_flight = 0
    assert parts.due(1000, force=False, linger=0.0, now=0.0) == 1  # an idle channel: at once
    parts.take(1000)
    assert parts.waiting_parts == 0
    values = _queue()
    _values(values, 250)
    values.in_flight = PARTS_PIPELINE  # publish()'s values go behind one call out
    assert PARTS_PIPELINE < PIPELINE
    assert values.due(1000, force=False, linger=0.0, now=0.0) == 250


def test_a_call_carries_at_most_max_pieces() -> None:
    queue = _queue()
    for _ in range(MAX_PIECES + 3):
        queue.add_part(_part(["x"]), now=0.0)
    _, pieces = queue.take(1000)
    assert len(pieces) == MAX_PIECES and queue.size == 3


def test_take_all_returns_every_unsent_piece() -> None:
    queue = _queue()
    queue.add_part(_part([1, 2]), now=0.0)
    _values(queue, 3)
    assert _sizes(queue.take_all()) == [2, 3] and queue.size == 0


def test_with_nothing_waiting_take_refuses() -> None:
    with pytest.raises(ValueError, match="nothing waits"):
        _queue().take(10)


# -- a queued publish_batch's future ----------------------------------------------------


def test_statuses_come_in_input_order_whichever_part_is_acknowledged_first() -> None:
    layout = np.array([1, 0, 1, 1, 0])  # value i is in part layout[i]
    future = BatchFuture("topic", [3, 5], [2, 3], layout)
    future.part_done(1, AppendAck(10, 3, 1.0), None)  # channel 5 answers first
    assert not future.done()
    future.part_done(0, AppendAck(40, 2, 2.0), None)
    statuses = future.result(timeout=0)
    assert [(s.channel, s.position.sequence) for s in statuses] == [
        (5, 10),
        (3, 40),
        (5, 11),
        (5, 12),
        (3, 41),
    ]


def test_a_refused_part_fails_the_batch_with_its_own_error() -> None:
    future = BatchFuture("topic", [0, 1], [1, 1], np.array([0, 1]))
    refused = rt.TopicFullError("channel 1 has room for 0 of 1 values: none of them appended")
    future.part_done(1, AppendAck(-1, 0, 0.0, refused), None)
    future.part_done(0, AppendAck(7, 1, 1.0), None)
    with pytest.raises(rt.TopicFullError, match="channel 1"):
        future.result(timeout=0)


def test_a_part_acknowledged_short_is_never_a_success() -> None:
    future = BatchFuture("topic", [2], [3], None)
    future.part_done(0, AppendAck(0, 2, 1.0), None)
    with pytest.raises(rt.TopicFullError, match="channel 2"):
        future.result(timeout=0)


def test_a_batch_of_no_values_is_done_at_once() -> None:
    assert list(BatchFuture("topic", [], [], None).result(timeout=0)) == []
