"""What a table view holds and how elements change it (``raytopic.client.table_state``),
without Ray."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raytopic.client.table_state import AppliedMarks, Change, Survivors, TableState


def test_a_value_is_a_change_and_the_latest_one_stays() -> None:
    state = TableState()
    assert state.apply("a", 1) == Change("a", 1)
    assert state.apply("a", 1) == Change("a", 1)  # the same value again is a change too
    assert state.apply("a", 2) == Change("a", 2)
    assert state.get("a") == 2 and "a" in state and len(state) == 1


def test_a_delete_is_never_an_entry_and_is_a_change_only_for_a_key_held() -> None:
    state = TableState()
    assert state.apply("gone", None) is None  # nothing held: no change
    state.apply("a", 1)
    assert state.apply("a", None) == Change("a", None)
    assert "a" not in state and state.get("a", "default") == "default"
    assert state.items() == [] and state.keys() == [] and state.values() == [] and len(state) == 0
    assert state.apply("a", 3) == Change("a", 3)  # a key deleted can come again


def test_an_element_without_a_key_is_not_a_tables() -> None:
    state = TableState()
    assert state.apply(None, "value") is None
    state.apply_all([None, "k"], ["x", "y"])
    assert state.items() == [("k", "y")]


def test_bulk_application_leaves_what_element_by_element_application_leaves() -> None:
    keys = ["a", "b", "a", None, "c", "b", "a"]
    values = [1, 2, None, 9, 3, None, 4]
    one_by_one, bulk = TableState(), TableState()
    for key, value in zip(keys, values, strict=True):
        one_by_one.apply(key, value)
    bulk.apply_all(keys, values)
    assert sorted(bulk.items()) == sorted(one_by_one.items()) == [("a", 4), ("c", 3)]


def test_marks_tell_new_elements_from_those_applied_and_cover_tails() -> None:
    marks = AppliedMarks({0: 4, 1: -1})
    assert not marks.is_new(0, 4) and marks.is_new(0, 5) and marks.is_new(1, 0)
    marks.advance(0, 9)
    marks.advance(0, 7)  # marks only rise
    assert not marks.is_new(0, 8)
    assert marks.covers({0: 9, 1: -1}) and not marks.covers({0: 9, 1: 0})
    assert marks.behind({0: 12, 1: -1}) == {0: (9, 12)}
    assert marks.covers({2: -1}) and not marks.covers({2: 0})  # a channel not seen: -1
    assert dict(marks) == {0: 9, 1: -1}
    assert marks.mark(0) == 9 and marks.mark(3) == -1


def _survivors(keys: list, values: list) -> list[tuple]:
    survivors = Survivors()
    for position, (key, value) in enumerate(zip(keys, values, strict=True)):
        survivors.add(key, value, position)
    return survivors.rows()


def test_survivors_are_each_keys_last_live_element_in_position_order() -> None:
    assert _survivors(["a", "b", "a", "b", None], [1, 2, 3, None, 5]) == [("a", 3, 2)]
    assert _survivors(["x", "y", "x"], ["1", "2", "3"]) == [("y", "2", 1), ("x", "3", 2)]
    assert _survivors(["x", "x", "x"], ["1", None, "3"]) == [("x", "3", 2)]
    assert _survivors([], []) == []


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", None]), st.one_of(st.none(), st.integers())),
        max_size=40,
    )
)
def test_the_table_and_the_survivors_agree_with_a_plain_replay(
    elements: list[tuple[str | None, int | None]],
) -> None:
    keys = [key for key, _ in elements]
    values = [value for _, value in elements]
    replay: dict[str, int] = {}
    for key, value in elements:
        if key is None:
            continue
        if value is None:
            replay.pop(key, None)
        else:
            replay[key] = value
    state = TableState()
    state.apply_all(keys, values)
    assert dict(state.items()) == replay
    assert {key: value for key, value, _ in _survivors(keys, values)} == replay


@pytest.mark.parametrize("tails", [{}, {0: -1}])
def test_nothing_to_wait_for_is_covered(tails: dict[int, int]) -> None:
    assert AppliedMarks({}).covers(tails)
