"""Unit tests of the user records (no Ray): Position, statuses, results, ownership changes."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raytopic.core.config import MAX_CHANNELS, MAX_COUNT
from raytopic.core.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    PositionMismatchError,
    TopicError,
)
from raytopic.core.records import (
    CommitResult,
    CommitStatus,
    Element,
    OwnershipChange,
    Position,
    PublishStatus,
    _Origin,
    stamp_to_datetime,
)

topic_ids = st.text(
    alphabet=st.characters(blacklist_characters=":", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)
positions = st.builds(
    Position, topic_ids, st.integers(0, MAX_CHANNELS - 1), st.integers(-1, MAX_COUNT)
)


# -- Position ------------------------------------------------------------------


def test_position_fields_and_string_form() -> None:
    position = Position("1f2e3d4c", 3, 41)
    assert (position.topic_id, position.channel, position.sequence) == ("1f2e3d4c", 3, 41)
    assert str(position) == "1f2e3d4c:3:41"
    assert str(Position("t", 0, -1)) == "t:0:-1"


@given(positions)
def test_position_parse_round_trips_str(position: Position) -> None:
    assert Position.parse(str(position)) == position


@given(positions)
def test_position_pickles_and_copies(position: Position) -> None:
    assert pickle.loads(pickle.dumps(position)) == position
    assert copy.deepcopy(position) == position


def test_position_is_frozen() -> None:
    position = Position("t", 0, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        position.sequence = 2  # type: ignore[misc]


def test_positions_are_hashable_by_value() -> None:
    assert hash(Position("t", 1, 5)) == hash(Position("t", 1, 5))
    table = {Position("t", 1, 5): "a", Position("t", 1, 6): "b", Position("t", 2, 5): "c"}
    assert table[Position("t", 1, 5)] == "a"
    assert len({Position("t", 1, 5), Position("t", 1, 5), Position("u", 1, 5)}) == 2


def test_positions_order_by_sequence_within_a_channel() -> None:
    low, mid, high = Position("t", 2, -1), Position("t", 2, 7), Position("t", 2, 100)
    assert low < mid < high
    assert high > mid >= Position("t", 2, 7)
    assert sorted([high, low, mid]) == [low, mid, high]
    assert max([low, high, mid]) == high
    # Across channels, the channel decides first.
    assert Position("t", 1, 999) < Position("t", 2, 0)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (("", 0, 0), InvalidArgumentError),
        (("a:b", 0, 0), InvalidArgumentError),
        (("t", -1, 0), InvalidArgumentError),
        (("t", 0, -2), InvalidArgumentError),
        (("t", 1.0, 0), InvalidTypeError),
        (("t", "1", 0), InvalidTypeError),
        (("t", True, 0), InvalidTypeError),
        (("t", 0, 1.5), InvalidTypeError),
        (("t", 0, None), InvalidTypeError),
        (("t", 0, False), InvalidTypeError),
    ],
)
def test_position_rejects_bad_fields(fields: tuple, error: type[TopicError]) -> None:
    with pytest.raises(error):
        Position(*fields)


@pytest.mark.parametrize("topic_id", [None, 123, b"t"])
def test_position_rejects_a_topic_id_that_is_not_a_str(topic_id: object) -> None:
    with pytest.raises(TopicError, match="topic_id"):
        Position(topic_id, 0, 0)  # type: ignore[arg-type]


def test_position_errors_name_the_field() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^channel must be >= 0 and < 10000, got -1$"):
        Position("t", -1, 0)
    with pytest.raises(
        InvalidArgumentError, match=r"^channel must be >= 0 and < 10000, got 10000$"
    ):
        Position("t", MAX_CHANNELS, 0)
    with pytest.raises(InvalidArgumentError, match=r"^sequence must be >= -1 and <= \d+, got -5$"):
        Position("t", 0, -5)
    with pytest.raises(InvalidArgumentError, match=r"^sequence must be >= -1 and <= \d+, got "):
        Position("t", 0, MAX_COUNT + 1)
    with pytest.raises(InvalidTypeError, match=r"^channel must be an int, got str$"):
        Position("t", "0", 0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    ["", "t", "t:1", "t:1:2:3", "t:x:1", "t:1:y", "t:1.0:2", ":1:2", "t:-1:0", "t:0:-2", "t::1"],
)
def test_position_parse_rejects_what_is_not_a_position(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="not a Position"):
        Position.parse(text)


@pytest.mark.parametrize("value", [None, 5, b"t:1:2", Position("t", 1, 2)])
def test_position_parse_rejects_non_strings(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="not a Position"):
        Position.parse(value)  # type: ignore[arg-type]


def test_check_belongs_accepts_its_own_topic_and_channel() -> None:
    position = Position("topic-a", 2, 10)
    assert position.check_belongs("topic-a") is None
    assert position.check_belongs("topic-a", 2) is None


def test_check_belongs_rejects_another_topic_or_channel() -> None:
    position = Position("topic-a", 2, 10)
    with pytest.raises(PositionMismatchError, match="belongs to another topic") as raised:
        position.check_belongs("topic-b")
    assert isinstance(raised.value, ValueError)
    assert isinstance(raised.value, InvalidArgumentError)
    with pytest.raises(PositionMismatchError, match="another topic"):
        position.check_belongs("topic-b", 2)
    with pytest.raises(PositionMismatchError, match="is of channel 2, not channel 3"):
        position.check_belongs("topic-a", 3)


# -- timestamps ----------------------------------------------------------------


def test_stamp_to_datetime_is_aware_utc() -> None:
    when = stamp_to_datetime(1_700_000_000.5)
    assert when == datetime(2023, 11, 14, 22, 13, 20, 500_000, tzinfo=UTC)
    assert when.tzinfo is UTC
    assert stamp_to_datetime(0.0) == datetime(1970, 1, 1, tzinfo=UTC)


# -- results -------------------------------------------------------------------


def test_publish_status_is_a_frozen_value() -> None:
    when = stamp_to_datetime(10.0)
    status = PublishStatus(1, Position("t", 1, 4), when)
    assert status == PublishStatus(1, Position("t", 1, 4), stamp_to_datetime(10.0))
    assert status != PublishStatus(1, Position("t", 1, 5), when)
    assert pickle.loads(pickle.dumps(status)) == status
    assert hash(status) == hash(PublishStatus(1, Position("t", 1, 4), when))
    with pytest.raises(dataclasses.FrozenInstanceError):
        status.channel = 2  # type: ignore[misc]


def test_commit_statuses() -> None:
    assert [status.name for status in CommitStatus] == [
        "COMMITTED",
        "ALREADY_COMMITTED",
        "NOT_OWNER",
        "REJECTED",
    ]
    assert CommitStatus("not_owner") is CommitStatus.NOT_OWNER
    assert pickle.loads(pickle.dumps(CommitStatus.REJECTED)) is CommitStatus.REJECTED


def test_commit_result_committed_only_when_it_moved() -> None:
    position = Position("t", 0, 3)
    assert CommitResult(0, position, CommitStatus.COMMITTED).committed is True
    for status in (
        CommitStatus.ALREADY_COMMITTED,
        CommitStatus.NOT_OWNER,
        CommitStatus.REJECTED,
    ):
        assert CommitResult(0, position, status).committed is False
    result = CommitResult(0, position, CommitStatus.COMMITTED)
    assert pickle.loads(pickle.dumps(result)) == result
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.status = CommitStatus.REJECTED  # type: ignore[misc]


def test_ownership_change_holds_frozensets() -> None:
    change = OwnershipChange(
        assigned=frozenset({1, 2}),
        revoked=frozenset({0}),
        lost=frozenset(),
        channels=frozenset({1, 2, 3}),
    )
    assert change == OwnershipChange(
        frozenset({2, 1}), frozenset({0}), frozenset(), frozenset({3, 2, 1})
    )
    assert pickle.loads(pickle.dumps(change)) == change
    assert hash(change) == hash(pickle.loads(pickle.dumps(change)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        change.lost = frozenset({9})  # type: ignore[misc]


# -- Element -------------------------------------------------------------------

ORIGIN = _Origin("tid", "orders", "ns", "group-a", ("m1", 2), 0)


def test_element_derives_position_and_timestamp() -> None:
    element = Element({"v": 1}, 3, 17, 1_700_000_000.5, ORIGIN)
    assert element.position == Position("tid", 3, 17)
    assert element.timestamp == datetime(2023, 11, 14, 22, 13, 20, 500_000, tzinfo=UTC)
    assert element.timestamp.tzinfo is UTC
    assert "1_700" not in repr(element) and "{'v': 1}" in repr(element)


def test_elements_compare_by_topic_channel_sequence_and_value() -> None:
    element = Element("x", 3, 17, 1.0, ORIGIN)
    other_reader = dataclasses.replace(ORIGIN, reader="sub-9", lease=None, jumps=4)
    assert element == Element("x", 3, 17, 2.0, other_reader)
    assert hash(element) == hash(Element("x", 3, 17, 2.0, other_reader))
    assert element != Element("y", 3, 17, 1.0, ORIGIN)
    assert element != Element("x", 3, 18, 1.0, ORIGIN)
    assert element != Element("x", 2, 17, 1.0, ORIGIN)
    assert element != Element("x", 3, 17, 1.0, dataclasses.replace(ORIGIN, topic_id="tid2"))
    assert element != "x"


def test_element_pickles_with_its_origin() -> None:
    element = Element([1, 2], 0, 5, 3.5, ORIGIN)
    again = pickle.loads(pickle.dumps(element))
    assert again == element
    assert (again.value, again.channel, again.sequence, again.stamp) == ([1, 2], 0, 5, 3.5)
    assert again._origin == ORIGIN
