"""The settings of a compacted topic (no Ray): defaults, numbers kept as floats, what is
refused, and the JSON a store records."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import raytopic as rt
from raytopic.core.compaction import Compaction
from raytopic.core.config import MAX_RETENTION_SECONDS, TopicConfig


def test_the_defaults_and_ints_taken_as_seconds() -> None:
    assert Compaction() == Compaction(0.0, 60.0, 86_400.0)
    settings = Compaction(min_lag_s=1, max_lag_s=2, tombstone_retention_s=0)
    assert (settings.min_lag_s, settings.max_lag_s, settings.tombstone_retention_s) == (1, 2, 0)
    assert all(type(value) is float for value in settings.to_state().values())
    assert rt.Compaction is Compaction


@given(
    st.floats(0, MAX_RETENTION_SECONDS),
    st.floats(0, MAX_RETENTION_SECONDS),
    st.floats(0, MAX_RETENTION_SECONDS),
)
def test_valid_settings_round_trip_through_their_state(a: float, b: float, c: float) -> None:
    low, high = sorted((a, b))
    if high == 0:
        high = 1.0
    settings = Compaction(low, high, c)
    assert Compaction.from_state(settings.to_state()) == settings


@pytest.mark.parametrize(
    "arguments",
    [
        {"min_lag_s": -1},
        {"max_lag_s": 0},
        {"max_lag_s": math.nan},
        {"tombstone_retention_s": math.inf},
        {"min_lag_s": 10, "max_lag_s": 5},
        {"max_lag_s": MAX_RETENTION_SECONDS * 2},
    ],
)
def test_bad_values_are_refused(arguments: dict[str, float]) -> None:
    with pytest.raises(rt.InvalidArgumentError):
        Compaction(**arguments)


@pytest.mark.parametrize("value", [True, "1", None, [1]])
def test_what_is_not_a_number_is_refused(value: object) -> None:
    with pytest.raises(rt.InvalidTypeError):
        Compaction(min_lag_s=value)  # type: ignore[arg-type]


def test_a_compacted_topic_keeps_its_elements_and_refuses_retain_false() -> None:
    assert TopicConfig.create("t").retain is False
    compacted = TopicConfig.create("t", compaction=Compaction())
    assert compacted.retain is True and compacted.compaction == Compaction()
    assert TopicConfig.create("t", compaction=Compaction(), retain=True).retain is True
    with pytest.raises(rt.InvalidArgumentError, match="retain=False"):
        TopicConfig.create("t", compaction=Compaction(), retain=False)
    with pytest.raises(rt.InvalidTypeError, match="compaction"):
        TopicConfig.create("t", compaction={"max_lag_s": 1})
