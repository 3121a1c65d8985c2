"""Unit tests of values pickled as one list (no Ray): when ``encode_values`` picks
it, slices, re-encoding, keys, the wire and the store's record format."""

from __future__ import annotations

import pickle

import pytest

from raytopic.actors.stores.base import StoredBatch
from raytopic.actors.stores.frames import decode_record, encode_record, read_frame
from raytopic.core.errors import InvalidTypeError
from raytopic.core.payloads import PickledList, PickledValues, encode_values


def _records(count: int) -> list[dict[str, object]]:
    return [{"id": i, "user": f"u{i % 7}", "amount": i * 0.5} for i in range(count)]


def test_distinct_values_are_pickled_once_as_a_list() -> None:
    values = _records(100)
    payload = encode_values(values)
    assert isinstance(payload, PickledList)
    assert len(payload) == 100
    assert payload.decode() == values
    # Smaller than the values pickled one by one: dicts share their keys' strings.
    assert payload.nbytes < PickledValues.from_values(values).nbytes * 0.7


@pytest.mark.parametrize(
    "values",
    [
        pytest.param([{"a": 1}] * 3, id="one object three times"),
        pytest.param([{"a": 1}, None], id="a None"),
        pytest.param([{"a": 1}], id="a single value"),
    ],
)
def test_values_a_list_would_change_are_pickled_one_by_one(values: list[object]) -> None:
    if None in values:
        with pytest.raises(InvalidTypeError, match="None is not a value"):
            encode_values(values)
        return
    payload = encode_values(values)
    assert isinstance(payload, PickledValues)
    decoded = payload.decode()
    assert decoded == values
    assert len({id(value) for value in decoded}) == len(values)  # each its own object


def test_repeated_atoms_still_go_as_a_list() -> None:
    payload = encode_values(["same"] * 50 + [1] * 50)
    assert isinstance(payload, PickledList)
    assert payload.decode() == ["same"] * 50 + [1] * 50


def test_values_needing_cloudpickle_or_holding_refs_are_pickled_one_by_one() -> None:
    values = [lambda: 1, lambda: 2]  # plain pickle cannot: dumps_value's cloudpickle path
    payload = encode_values(values)
    assert isinstance(payload, PickledValues)
    assert [f() for f in payload.decode()] == [1, 2]


def test_an_unpicklable_value_is_refused_with_nothing_encoded() -> None:
    import threading

    with pytest.raises(InvalidTypeError, match="cannot be pickled"):
        encode_values([{"a": 1}, {"lock": threading.Lock()}])


def test_decoded_values_are_snapshots_of_their_own() -> None:
    values = _records(10)
    payload = encode_values(values)
    values[0]["id"] = -1
    first, second = payload.decode(), payload.decode()
    assert first[0]["id"] == 0
    first[1]["id"] = -2
    assert second[1]["id"] == 1  # one decode's change never reaches another's


def test_slices_share_the_buffer_and_travel_as_their_own_list() -> None:
    values = _records(100)
    payload = encode_values(values, keys=list(range(100)))
    part = payload.slice(10, 20)
    assert part.buffer is payload.buffer
    assert len(part) == 10
    assert part.decode() == values[10:20]
    assert part.keys == list(range(10, 20))
    assert payload.slice(0, 100) is payload
    travelled = pickle.loads(pickle.dumps(part, protocol=5))
    assert travelled.whole and travelled.total == 10
    assert travelled.decode() == values[10:20]
    assert travelled.keys == list(range(10, 20))
    assert len(pickle.dumps(part, protocol=5)) < len(payload.buffer) / 3  # not the whole run
    assert part.slice(2, 4).decode() == values[12:14]


def test_take_re_encodes_the_chosen_values() -> None:
    values = _records(20)
    keys = [f"k{index}" for index in range(20)]
    chosen = encode_values(values, keys=keys).slice(5, 15).take([0, 3, 9])
    assert chosen.decode() == [values[5], values[8], values[14]]
    assert chosen.keys == ["k5", "k8", "k14"]


def test_a_slice_is_stored_as_a_list_of_its_own_and_read_back() -> None:
    values = _records(30)
    for keys in (None, list(range(30))):
        part = encode_values(values, keys=keys).slice(3, 13)
        record = b"".join(bytes(b) for b in encode_record(StoredBatch(3, 1.5, part, 2, "p", 4)))
        frame = read_frame(memoryview(record), 0)
        batch = decode_record(frame)
        assert (batch.first, batch.stamp, batch.epoch, batch.publisher_id) == (3, 1.5, 2, "p")
        assert isinstance(batch.payload, PickledList)
        assert batch.payload.decode() == values[3:13]
        expected = None if keys is None else list(range(3, 13))
        assert batch.payload.keys == expected


def test_owned_copies_a_borrowed_buffer() -> None:
    payload = encode_values(_records(5))
    borrowed = PickledList(memoryview(payload.buffer), 5, 1, 3, list(range(5)))
    owned = borrowed.owned()
    assert type(owned.buffer) is bytes
    assert owned.decode() == payload.decode()[1:3]
    assert owned.keys == [1, 2]
