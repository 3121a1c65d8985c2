"""Unit tests of the state changes and their log format (no Ray, no I/O): applying changes,
framing round trips, a torn or damaged tail read up to it, damage in the middle refused."""

from __future__ import annotations

import pytest

from raytopic.actors.stores.base import StoredBatch
from raytopic.actors.stores.frames import PREFIX, encode_frame, encode_record
from raytopic.actors.stores.state_log import (
    STATE_MAGIC,
    StateChange,
    apply_changes,
    decode_log,
    encode_changes,
    with_changes,
)
from raytopic.core.errors import StoreError
from raytopic.core.payloads import PickledValues

CURSOR = {"next": 5, "committed": 4, "owner": ["m", 1], "reset_floor": None}

BATCHES = [
    [StateChange("epoch", None, 3), StateChange("groups", "billing", CURSOR)],
    [StateChange("publishers", "p-1", [4, [[0, [[0, 1, 1.5]]]]])],
    [StateChange("groups", "billing", None, deleted=True), StateChange("marks", "g", [1, 2])],
    [],
]


def flipped(data: bytes, index: int, bit: int = 0) -> bytes:
    changed = bytearray(data)
    changed[index] ^= 1 << bit
    return bytes(changed)


def log_of(batches: list[list[StateChange]]) -> tuple[bytes, list[int]]:
    """The bytes of a log holding ``batches``, and where each record starts."""
    records = [encode_changes(changes) for changes in batches]
    starts = [sum(len(record) for record in records[:index]) for index in range(len(records))]
    return b"".join(records), starts


# -- applying changes --------------------------------------------------------------------------


def test_changes_set_and_delete_keys_and_scalars() -> None:
    state: dict = {"epoch": 1, "groups": {"a": 1, "b": 2}, "marks": {}}
    apply_changes(
        state,
        [
            StateChange("epoch", None, 2),
            StateChange("groups", "a", 10),
            StateChange("groups", "b", None, deleted=True),
            StateChange("groups", "missing", None, deleted=True),  # a replay may delete twice
            StateChange("readers", "r", {"cursor": None}),  # the section is created
            StateChange("marks", None, None, deleted=True),  # a section removed
            StateChange("next_sequence", None, 40),
        ],
    )
    assert state == {
        "epoch": 2,
        "groups": {"a": 10},
        "readers": {"r": {"cursor": None}},
        "next_sequence": 40,
    }


def test_changes_apply_in_order() -> None:
    state: dict = {}
    apply_changes(
        state,
        [
            StateChange("groups", "g", 1),
            StateChange("groups", "g", None, deleted=True),
            StateChange("groups", "g", 3),
            StateChange("epoch", None, 1),
            StateChange("epoch", None, 2),
        ],
    )
    assert state == {"groups": {"g": 3}, "epoch": 2}


def test_a_keyed_change_to_a_scalar_section_is_refused() -> None:
    state: dict = {"epoch": 4}
    with pytest.raises(StoreError, match="epoch"):
        apply_changes(state, [StateChange("epoch", "x", 1)])


def test_keys_are_strings_or_none() -> None:
    with pytest.raises(TypeError):
        StateChange("groups", 3, "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        StateChange(None, "k", "x")  # type: ignore[arg-type]


def test_with_changes_copies_only_what_it_changes() -> None:
    groups = {"a": {"next": 1}}
    publishers = {f"p-{index}": [index, []] for index in range(100)}
    state = {"epoch": 1, "groups": groups, "publishers": publishers}
    changed = with_changes(state, [StateChange("groups", "b", {"next": 2})])
    assert changed == {"epoch": 1, "groups": {**groups, "b": {"next": 2}}, "publishers": publishers}
    assert state == {"epoch": 1, "groups": {"a": {"next": 1}}, "publishers": publishers}
    assert changed["publishers"] is publishers  # untouched: shared, not copied
    assert changed["groups"]["a"] is groups["a"]


# -- the log format ----------------------------------------------------------------------------


def test_batches_round_trip() -> None:
    data, _ = log_of(BATCHES)
    decoded = decode_log(data)
    assert decoded.batches == BATCHES
    assert decoded.end == len(data)
    assert data.startswith(STATE_MAGIC)


def test_values_come_back_as_json_gives_them() -> None:
    (changes,) = decode_log(encode_changes([StateChange("marks", "g", (1, 2))])).batches
    assert changes == [StateChange("marks", "g", [1, 2])]


def test_an_empty_log_holds_nothing() -> None:
    decoded = decode_log(b"")
    assert (decoded.batches, decoded.end) == ([], 0)


def test_a_log_cut_anywhere_in_its_last_record_reads_up_to_it() -> None:
    data, starts = log_of(BATCHES)
    last = starts[-1]
    for cut in range(last + 1, len(data)):
        decoded = decode_log(data[:cut])
        assert decoded.batches == BATCHES[:-1], cut
        assert decoded.end == last


def test_a_damaged_last_record_is_a_torn_tail() -> None:
    data, starts = log_of(BATCHES[:3])
    damaged = flipped(data, starts[-1] + PREFIX.size + 3)
    decoded = decode_log(damaged)
    assert (decoded.batches, decoded.end) == (BATCHES[:2], starts[-1])
    zeroed = data[: starts[-1]] + bytes(len(data) - starts[-1])  # the file grew, no data came
    assert decode_log(zeroed).batches == BATCHES[:2]


@pytest.mark.parametrize(
    "where", [0, 4, PREFIX.size - 1, PREFIX.size + 1], ids=["magic", "length", "crc", "body"]
)
def test_damage_followed_by_a_whole_record_is_refused(where: int) -> None:
    data, starts = log_of(BATCHES)
    damaged = flipped(data, starts[1] + where, bit=3)
    with pytest.raises(StoreError, match=f"byte {starts[1]}"):
        decode_log(damaged)


def test_a_whole_record_that_holds_no_changes_is_refused() -> None:
    for body in (b'{"a":1}', b"[[1]]", b"[[1,2,3]]", b"[not json]"):
        with pytest.raises(StoreError, match="unreadable"):
            decode_log(encode_frame(body, magic=STATE_MAGIC))


def test_a_segment_record_is_no_state_record() -> None:
    stored = StoredBatch(0, 1.0, PickledValues.from_values([b"x", b"y"]))
    segment = b"".join(bytes(part) for part in encode_record(stored))
    assert decode_log(segment).batches == []  # read as a torn tail: nothing was acknowledged
