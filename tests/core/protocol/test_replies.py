"""Unit tests of the wire format (no Ray): deliveries, received and status batches, requests."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from ray import cloudpickle

from raytopic.core.errors import TopicFullError
from raytopic.core.payloads import OUT_OF_BAND_MIN, ArrowRows, PickledValues
from raytopic.core.protocol import (
    AppendAck,
    Chunk,
    Delivery,
    RawReadResult,
    ReaderSpec,
    ReceivedBatch,
    StatusBatch,
)
from raytopic.core.records import Element, Position, PublishStatus, _Origin

ORIGIN = _Origin(
    topic_id="t0pic1d",
    topic="orders",
    namespace="ns",
    reader="group-a",
    lease=("member-1", 3),
    jumps=2,
)


def _chunk(first: int, stamp: float, *values: object) -> Chunk:
    return Chunk(first, stamp, PickledValues.from_values(values))


# -- records on the wire -------------------------------------------------------


def test_messages_are_frozen() -> None:
    ack = AppendAck(first=3, accepted=2, stamp=10.0)
    assert ack.error is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        ack.first = 4  # type: ignore[misc]
    spec = ReaderSpec(group=None, start_latest=True)
    assert (spec.filter, spec.converter) == (None, None)
    assert pickle.loads(pickle.dumps(spec)) == spec


def test_delivery_pack_counts_and_locates_the_elements() -> None:
    chunks = [_chunk(5, 100.0, "a", "b"), _chunk(7, 101.5, "c")]
    delivery = Delivery.pack(
        3, chunks, jumps=4, next_sequence=8, tail=9, committed=2, origin=ORIGIN
    )
    assert (delivery.channel, delivery.first, delivery.count) == (3, 5, 3)
    assert (delivery.jumps, delivery.next, delivery.tail, delivery.committed) == (4, 8, 9, 2)
    assert delivery.origin == ORIGIN
    again = pickle.loads(pickle.dumps(delivery))
    assert [(c.first, c.stamp, c.payload.decode()) for c in again.chunks] == [
        (5, 100.0, ["a", "b"]),
        (7, 101.5, ["c"]),
    ]


def test_empty_delivery_starts_at_next_and_carries_nothing() -> None:
    delivery = Delivery.pack(1, [], jumps=0, next_sequence=12, tail=11, committed=11, origin=ORIGIN)
    assert (delivery.first, delivery.count, delivery.chunks, delivery.next) == (12, 0, (), 12)


def test_received_batch_rebuilds_into_elements_through_pickle() -> None:
    other = dataclasses.replace(ORIGIN, reader="sub-2", lease=None, jumps=0)
    first = Delivery.pack(
        3,
        [_chunk(5, 100.0, "a", {"b": 2}), _chunk(7, 101.5, 3)],
        jumps=4,
        next_sequence=8,
        tail=9,
        committed=2,
        origin=ORIGIN,
    )
    empty = Delivery.pack(0, [], jumps=0, next_sequence=0, tail=-1, committed=-1, origin=ORIGIN)
    second = Delivery.pack(
        1, [_chunk(0, 99.25, "z")], jumps=0, next_sequence=1, tail=0, committed=-1,
        origin=other,
    )  # fmt: skip
    elements = pickle.loads(pickle.dumps(ReceivedBatch([first, empty, second], single=False)))

    assert [(e.value, e.channel, e.sequence, e.stamp) for e in elements] == [
        ("a", 3, 5, 100.0),
        ({"b": 2}, 3, 6, 100.0),
        (3, 3, 7, 101.5),
        ("z", 1, 0, 99.25),
    ]
    assert all(type(e) is Element for e in elements)
    with pytest.raises(dataclasses.FrozenInstanceError):
        elements[0].value = "changed"  # type: ignore[misc]
    assert [e.position for e in elements] == [
        Position("t0pic1d", 3, 5),
        Position("t0pic1d", 3, 6),
        Position("t0pic1d", 3, 7),
        Position("t0pic1d", 1, 0),
    ]
    assert elements[0].timestamp == datetime.fromtimestamp(100.0, tz=UTC)
    assert elements[0].timestamp.tzinfo is UTC
    assert [e._origin for e in elements] == [ORIGIN, ORIGIN, ORIGIN, other]
    # The rebuilt elements are the ones a constructor would make.
    assert elements[1] == Element({"b": 2}, 3, 6, 100.0, ORIGIN)
    assert hash(elements[1]) == hash(Element({"b": 2}, 3, 6, 100.0, ORIGIN))


def test_received_batch_single_gives_the_first_element_or_none() -> None:
    delivery = Delivery.pack(
        2, [_chunk(9, 5.0, "x", "y")], jumps=0, next_sequence=11, tail=12, committed=8,
        origin=ORIGIN,
    )  # fmt: skip
    element = pickle.loads(pickle.dumps(ReceivedBatch([delivery], single=True)))
    assert (element.value, element.channel, element.sequence) == ("x", 2, 9)
    assert pickle.loads(pickle.dumps(ReceivedBatch([], single=True))) is None
    assert pickle.loads(pickle.dumps(ReceivedBatch([], single=False))) == []


def test_received_batch_travels_as_bytes_unless_a_buffer_goes_out_of_band() -> None:
    # A small batch is pickled by the channel itself (Ray's pickler meets bytes and
    # a builtin); a large payload stays a buffer Ray moves zero-copy; a key only
    # cloudpickle can pickle takes Ray's way too. Each rebuilds the same elements.
    small = Delivery.pack(
        0, [_chunk(4, 7.0, "a")], jumps=0, next_sequence=5, tail=4, committed=3, origin=ORIGIN
    )
    rebuild, (packed,) = ReceivedBatch([small], single=True).__reduce__()
    assert (rebuild, type(packed)) == (pickle.loads, bytes)
    assert pickle.loads(pickle.dumps(ReceivedBatch([small], single=True))).value == "a"

    big_value = b"x" * OUT_OF_BAND_MIN
    large = Delivery.pack(
        0, [_chunk(4, 7.0, big_value)], jumps=0, next_sequence=5, tail=4, committed=3,
        origin=ORIGIN,
    )  # fmt: skip
    buffers: list[pickle.PickleBuffer] = []
    batch = ReceivedBatch([large], single=True)
    dumped = pickle.dumps(batch, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1 and len(dumped) < OUT_OF_BAND_MIN
    assert pickle.loads(dumped, buffers=buffers).value == big_value

    def local_key() -> None:  # plain pickle refuses a local function
        pass

    keyed = Chunk(4, 7.0, PickledValues.from_pickles([pickle.dumps("k")], keys=[local_key]))
    odd = Delivery.pack(0, [keyed], jumps=0, next_sequence=5, tail=4, committed=3, origin=ORIGIN)
    element = cloudpickle.loads(cloudpickle.dumps(ReceivedBatch([odd], single=True)))
    assert (element.value, element.key.__name__) == ("k", "local_key")


def test_elements_pickle_on_to_tasks() -> None:
    delivery = Delivery.pack(
        0, [_chunk(4, 7.0, [1, 2])], jumps=0, next_sequence=5, tail=4, committed=3,
        origin=ORIGIN,
    )  # fmt: skip
    (element,) = pickle.loads(pickle.dumps(ReceivedBatch([delivery], single=False)))
    again = pickle.loads(pickle.dumps(element))
    assert again == element
    assert (again.value, again.position, again.stamp) == ([1, 2], Position("t0pic1d", 0, 4), 7.0)
    assert again._origin == ORIGIN


def test_filtered_chunks_carry_their_sequences() -> None:
    matches = Chunk(3, 8.0, PickledValues.from_values(["d", "f", "k"]), np.array([3, 5, 10]))
    delivery = Delivery.pack(0, [matches], jumps=0, next_sequence=11, tail=12, committed=-1,
                             origin=ORIGIN)  # fmt: skip
    elements = pickle.loads(pickle.dumps(ReceivedBatch([delivery], single=False)))
    assert [(e.value, e.sequence) for e in elements] == [("d", 3), ("f", 5), ("k", 10)]


def test_arrow_rows_rebuild_into_elements_one_position_per_row() -> None:
    rows = pa.RecordBatch.from_pydict({"id": [1, 2, 3, 4], "user": ["a", "b", "c", "d"]})
    chunk = Chunk(20, 50.5, ArrowRows(rows).slice(1, 3))  # rows 1 and 2 only
    delivery = Delivery.pack(6, [chunk], jumps=1, next_sequence=22, tail=23, committed=19,
                             origin=ORIGIN)  # fmt: skip
    elements = pickle.loads(pickle.dumps(ReceivedBatch([delivery], single=False)))
    assert [(e.value, e.channel, e.position, e.stamp) for e in elements] == [
        ({"id": 2, "user": "b"}, 6, Position("t0pic1d", 6, 20), 50.5),
        ({"id": 3, "user": "c"}, 6, Position("t0pic1d", 6, 21), 50.5),
    ]
    assert elements[0].timestamp == datetime.fromtimestamp(50.5, tz=UTC)


def test_a_raw_read_result_rebuilds_into_a_read_result_set() -> None:
    chunks = [_chunk(4, 1.0, "a", "b"), Chunk(9, 2.0, PickledValues.from_values(["z"]), None)]
    result = pickle.loads(pickle.dumps(RawReadResult(4, 7, chunks)))
    assert list(result) == ["a", "b", "z"]
    assert [result.get_sequence(i) for i in range(3)] == [4, 5, 9]
    assert (result.read_count, result.next_sequence_to_read_from) == (7, 11)


def test_status_batch_rebuilds_into_publish_statuses() -> None:
    ack = AppendAck(first=10, accepted=3, stamp=1_700_000_000.5)
    batch = StatusBatch("t0pic1d", 4, ack)
    when = datetime.fromtimestamp(1_700_000_000.5, tz=UTC)
    expected = [PublishStatus(4, Position("t0pic1d", 4, seq), when) for seq in (10, 11, 12)]
    assert pickle.loads(pickle.dumps(batch)) == expected
    assert batch.statuses() == expected
    assert expected[0].timestamp.tzinfo is UTC


def test_status_batch_of_nothing_is_an_empty_list() -> None:
    batch = StatusBatch("t0pic1d", 0, AppendAck(first=7, accepted=0, stamp=0.0))
    assert pickle.loads(pickle.dumps(batch)) == []


def test_status_batch_raises_its_acks_error() -> None:
    error = TopicFullError("channel 4 is full")
    batch = StatusBatch("t0pic1d", 4, AppendAck(first=-1, accepted=0, stamp=0.0, error=error))
    with pytest.raises(TopicFullError, match="channel 4 is full"):
        batch.statuses()
    data = pickle.dumps(batch)
    with pytest.raises(TopicFullError, match="channel 4 is full"):
        pickle.loads(data)
