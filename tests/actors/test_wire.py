"""Unit tests of the wire format (no Ray): values, deliveries, received and status batches."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
import threading
from datetime import UTC, datetime

import pytest

from raytopic.actors.wire import (
    AppendAck,
    Delivery,
    ReaderSpec,
    ReceivedBatch,
    StatusBatch,
    dumps_value,
    loads_value,
    pack_request,
    unpack_request,
)
from raytopic.errors import InvalidArgumentError, InvalidTypeError, TopicFullError
from raytopic.records import Element, Position, PublishStatus, _Origin

ORIGIN = _Origin(
    topic_id="t0pic1d",
    topic="orders",
    namespace="ns",
    reader="group-a",
    fence=("member-1", 3),
    epoch=2,
)


def _payloads(*values: object) -> list[bytes]:
    return [dumps_value(value) for value in values]


# -- values --------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [0, "text", b"bytes", 1.5, {"k": [1, 2, (3, None)]}, list(range(1000)), False, ""],
)
def test_plain_values_round_trip(value: object) -> None:
    data = dumps_value(value)
    assert isinstance(data, bytes)
    assert loads_value(data) == value


def test_none_is_not_a_value() -> None:
    with pytest.raises(InvalidTypeError, match="None is not a value"):
        dumps_value(None)


def test_a_value_holding_none_is_fine() -> None:
    assert loads_value(dumps_value([None])) == [None]


def test_unpicklable_values_raise_invalid_type_error() -> None:
    def generator():
        yield 1

    for value in (threading.Lock(), generator(), {"nested": threading.Lock()}):
        with pytest.raises(InvalidTypeError, match="cannot be pickled") as raised:
            dumps_value(value)
        assert isinstance(raised.value, TypeError)


def test_lambdas_and_local_classes_go_through_cloudpickle() -> None:
    class Local:
        def __init__(self, x: int) -> None:
            self.x = x

        def double(self) -> int:
            return self.x * 2

    add_one = loads_value(dumps_value(lambda x: x + 1))
    assert add_one(41) == 42
    local = loads_value(dumps_value(Local(21)))
    assert local.double() == 42
    assert type(local).__name__ == "Local"
    nested = loads_value(dumps_value({"f": lambda: "hi", "items": [Local(1)]}))
    assert nested["f"]() == "hi"
    assert nested["items"][0].x == 1


def test_a_string_mentioning_object_ref_is_not_refused() -> None:
    value = {"ObjectRef": "an ObjectRef(abc) mentioned in text"}
    assert loads_value(dumps_value(value)) == value


def test_values_of_main_are_pickled_by_value_for_other_processes() -> None:
    # A class defined in __main__ of the publisher cannot be imported by a
    # consumer: it must travel by value (cloudpickle) and load anywhere.
    script = (
        "import sys\n"
        "from raytopic.actors.wire import dumps_value\n"
        "class Point:\n"
        "    def __init__(self, x, y):\n"
        "        self.x, self.y = x, y\n"
        "    def norm2(self):\n"
        "        return self.x * self.x + self.y * self.y\n"
        "sys.stdout.write(dumps_value(Point(3, 4)).hex())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    point = loads_value(bytes.fromhex(done.stdout))
    assert (point.x, point.y, point.norm2()) == (3, 4, 25)


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
    runs = [(5, 100.0, _payloads("a", "b")), (7, 101.5, _payloads("c"))]
    delivery = Delivery.pack(3, runs, epoch=4, next_sequence=8, tail=9, committed=2, origin=ORIGIN)
    assert (delivery.channel, delivery.first, delivery.count) == (3, 5, 3)
    assert (delivery.epoch, delivery.next, delivery.tail, delivery.committed) == (4, 8, 9, 2)
    assert delivery.origin == ORIGIN
    assert pickle.loads(delivery.runs) == tuple(runs)


def test_empty_delivery_starts_at_next_and_carries_no_bytes() -> None:
    delivery = Delivery.pack(1, [], epoch=0, next_sequence=12, tail=11, committed=11, origin=ORIGIN)
    assert (delivery.first, delivery.count, delivery.runs, delivery.next) == (12, 0, b"", 12)


def test_received_batch_rebuilds_into_elements_through_pickle() -> None:
    other = dataclasses.replace(ORIGIN, reader="sub-2", fence=None, epoch=0)
    first = Delivery.pack(
        3,
        [(5, 100.0, _payloads("a", {"b": 2})), (7, 101.5, _payloads(3))],
        epoch=4,
        next_sequence=8,
        tail=9,
        committed=2,
        origin=ORIGIN,
    )
    empty = Delivery.pack(0, [], epoch=0, next_sequence=0, tail=-1, committed=-1, origin=ORIGIN)
    second = Delivery.pack(
        1, [(0, 99.25, _payloads("z"))], epoch=0, next_sequence=1, tail=0, committed=-1,
        origin=other,
    )  # fmt: skip
    elements = pickle.loads(pickle.dumps(ReceivedBatch([first, empty, second], single=False)))

    assert [(e.value, e.channel, e.sequence, e.stamp) for e in elements] == [
        ("a", 3, 5, 100.0),
        ({"b": 2}, 3, 6, 100.0),
        (3, 3, 7, 101.5),
        ("z", 1, 0, 99.25),
    ]
    assert all(isinstance(e, Element) for e in elements)
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
        2, [(9, 5.0, _payloads("x", "y"))], epoch=0, next_sequence=11, tail=12, committed=8,
        origin=ORIGIN,
    )  # fmt: skip
    element = pickle.loads(pickle.dumps(ReceivedBatch([delivery], single=True)))
    assert (element.value, element.channel, element.sequence) == ("x", 2, 9)
    assert pickle.loads(pickle.dumps(ReceivedBatch([], single=True))) is None
    assert pickle.loads(pickle.dumps(ReceivedBatch([], single=False))) == []


def test_elements_pickle_on_to_tasks() -> None:
    delivery = Delivery.pack(
        0, [(4, 7.0, _payloads([1, 2]))], epoch=0, next_sequence=5, tail=4, committed=3,
        origin=ORIGIN,
    )  # fmt: skip
    (element,) = pickle.loads(pickle.dumps(ReceivedBatch([delivery], single=False)))
    again = pickle.loads(pickle.dumps(element))
    assert again == element
    assert (again.value, again.position, again.stamp) == ([1, 2], Position("t0pic1d", 0, 4), 7.0)
    assert again._origin == ORIGIN


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


# -- packed requests -----------------------------------------------------------


def test_a_packed_request_round_trips() -> None:
    packed = pack_request("append", "publisher-1", 3, [b"a", b"b"], "block", 60.0, False)
    assert isinstance(packed, bytes)
    assert unpack_request(packed) == (
        "append",
        ("publisher-1", 3, [b"a", b"b"], "block", 60.0, False),
    )


@pytest.mark.parametrize(
    "packed",
    [
        pack_request("destroy_group", "g"),  # not a data-path method
        pack_request("__init__"),
        pickle.dumps(("receive", ["not", "a", "tuple"])),
        pickle.dumps("receive"),
        b"not a pickle",
        "a str, not bytes",
    ],
)
def test_anything_but_a_packed_data_path_call_is_refused(packed: object) -> None:
    with pytest.raises(InvalidArgumentError):
        unpack_request(packed)  # type: ignore[arg-type]
