"""Unit tests of loading values pickled one by one in a single stream (no Ray): the
same values as one ``pickle.loads`` each, whatever their pickles hold, and a value
that cannot be decoded still costing only itself."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from raytopic.core.payloads import (
    TOMBSTONE,
    UNDECODABLE,
    PickledValues,
    decode_checked,
    dumps_value,
)
from raytopic.core.pickle_runs import JOIN_MIN, loads_joined


class _Missing:
    """Unpickles as a class that cannot be found (a consumer's version skew)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_not_there, ())


def _not_there() -> None:  # replaced by a name no module has, below
    raise AssertionError


_MISSING = dumps_value(_Missing()).replace(b"_not_there", b"_not_known")


def _record(index: int) -> dict[str, Any]:
    return {"id": index, "user": f"u{index % 100}", "amount": index * 0.5}


def _shared_inside(index: int) -> dict[str, Any]:
    part = [index, "hj"]
    return {"a": part, "b": part}  # one list twice: the pickle reads its memo


def _recursive(index: int) -> list[Any]:
    value: list[Any] = [index]
    value.append(value)
    return value


def _one_by_one(payload: PickledValues) -> list[Any]:
    view = memoryview(payload.buffer)
    values, start = [], payload.begin
    for end in payload.ends.tolist():
        values.append(pickle.loads(view[start:end]))
        start = end
    return values


def _run(values: list[Any]) -> PickledValues:
    return PickledValues.from_pickles(
        [TOMBSTONE if value is None else dumps_value(value) for value in values]
    )


def _mixed(count: int) -> list[Any]:
    makers = (
        _record,
        _record,
        _record,
        _shared_inside,
        _recursive,
        lambda i: "x" * (70_000 + i),  # several frames, and bytes outside them
        lambda i: b"h" * (i % 5) + b"j",
        lambda i: None,  # a compacted topic's tombstone
        lambda i: (i, "hjhj", 1.5, {i}),
    )
    return [makers[index % len(makers)](index) for index in range(count)]


@pytest.mark.parametrize("count", [JOIN_MIN, 700])
def test_a_joined_load_gives_what_loading_each_value_gives(count: int) -> None:
    payload = _run(_mixed(count))
    for part in (payload, payload.slice(5, count - 3)):  # a slice starts inside the buffer
        assert loads_joined(part.buffer, part.begin, part.ends) is not None  # joined
        decoded = part.decode()
        # Compared by their pickles: a recursive value is not comparable with ==.
        assert [pickle.dumps(v) for v in decoded] == [pickle.dumps(v) for v in _one_by_one(part)]
        shared = [v for v in decoded if isinstance(v, dict) and "b" in v]
        assert shared and all(v["a"] is v["b"] for v in shared)  # shared inside a value
        assert all(v[1] is v for v in decoded if isinstance(v, list))  # still recursive
        containers = [id(v) for v in decoded if isinstance(v, (list, dict))]
        assert len(set(containers)) == len(containers)  # each value its own objects


def test_the_joined_load_is_taken_where_most_values_allow() -> None:
    records = [_record(index) for index in range(50_000, 51_000)]
    payload = _run(records)
    joined = loads_joined(payload.buffer, payload.begin, payload.ends)
    assert joined == records  # about 2% of these read a byte of the memo's: loaded alone
    shared = _run([_shared_inside(index) for index in range(JOIN_MIN)])
    assert loads_joined(shared.buffer, shared.begin, shared.ends) is None  # none allow it
    assert shared.decode() == [_shared_inside(index) for index in range(JOIN_MIN)]


@pytest.mark.parametrize("where", [0, 70, 199])
def test_a_value_that_does_not_decode_still_costs_only_itself(where: int) -> None:
    pickles = [dumps_value(_record(index)) for index in range(200)]
    assert b"h" not in _MISSING and b"j" not in _MISSING  # it goes in the joined stream
    pickles[where] = _MISSING
    values, failures = decode_checked(PickledValues.from_pickles(pickles))
    assert list(failures) == [where] and isinstance(failures[where], AttributeError)
    assert values[where] is UNDECODABLE
    assert [v for i, v in enumerate(values) if i != where] == [
        _record(i) for i in range(200) if i != where
    ]
