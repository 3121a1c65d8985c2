"""How a topic's channels open their stores from what each holds (no Ray): a new
topic, a reopened one under its own id, one refused for other fixed settings (each
named), and a destroyed one wiped, whatever point its destroy reached."""

from __future__ import annotations

import dataclasses

import pytest

from raytopic.core.compaction import Compaction
from raytopic.core.config import FIXED_SETTINGS, TopicConfig, fixed_settings
from raytopic.core.errors import InvalidArgumentError, TopicSettingsError
from raytopic.core.topic_record import Opening, TopicRecord, opening

ASKED = TopicConfig.create("orders", channels=2, capacity=100, store="/tmp/unused")
STORED = dataclasses.replace(ASKED, topic_id="0ld1d")


def test_a_new_store_opens_a_new_topic() -> None:
    assert opening(ASKED, [None, None]) == Opening(ASKED.topic_id, wipe=False)


def test_a_store_holding_the_topic_reopens_it_under_its_own_id() -> None:
    record = TopicRecord.of(STORED)
    assert opening(ASKED, [record, record]) == Opening("0ld1d", wipe=False)
    # A channel whose store holds nothing yet (its topic was being made) joins it.
    assert opening(ASKED, [record, None]) == Opening("0ld1d", wipe=False)


@pytest.mark.parametrize(
    ("asked", "named"),
    [
        ({"channels": 1}, {"channels": (2, 1)}),
        ({"channels": 3}, {"channels": (2, 3)}),
        ({"capacity": 50}, {"capacity": (100, 50)}),
        ({"retain": True}, {"retain": (False, True)}),
        ({"ttl": 5}, {"ttl": (None, 5.0)}),
        ({"overflow": "fail"}, {"overflow": ("block", "fail")}),
        ({"channels": 3, "ttl": 5}, {"channels": (2, 3), "ttl": (None, 5.0)}),
    ],
)
def test_other_fixed_settings_are_refused_naming_each(asked: dict, named: dict) -> None:
    config = TopicConfig.create(
        "orders", **{"channels": 2, "capacity": 100, "store": "/tmp/unused", **asked}
    )
    record = TopicRecord.of(STORED)
    with pytest.raises(TopicSettingsError) as refused:
        opening(config, [record, record, None][: config.channels])
    assert refused.value.differences == named
    assert isinstance(refused.value, InvalidArgumentError) and isinstance(refused.value, ValueError)
    for name, (kept, wanted) in named.items():
        assert f"{name}={kept!r}" in str(refused.value)
        assert f"{name}={wanted!r}" in str(refused.value)


def test_settings_that_are_not_fixed_may_change_at_a_reopen() -> None:
    config = TopicConfig.create(
        "orders",
        channels=2,
        capacity=100,
        store="/tmp/unused",
        sync="write",
        store_retention={"seconds": 60},
        placement="pack",
        default_window=7,
        groups=["new"],
    )
    record = TopicRecord.of(STORED)
    assert opening(config, [record, record]) == Opening("0ld1d", wipe=False)
    assert set(FIXED_SETTINGS) == set(fixed_settings(config))


def test_stores_of_different_topics_are_refused() -> None:
    other = dataclasses.replace(TopicRecord.of(STORED), topic_id="0th3r")
    with pytest.raises(TopicSettingsError, match="hold different topics"):
        opening(ASKED, [TopicRecord.of(STORED), other])


@pytest.mark.parametrize(
    "records",
    [
        # The destroy marked one store, then every actor went: none was removed yet.
        ["destroyed", "kept"],
        # It marked every store and removed one: what is left is marked.
        [None, "destroyed"],
        ["destroyed", "destroyed"],
    ],
)
def test_a_destroyed_topic_is_wiped_whatever_point_its_destroy_reached(records: list) -> None:
    kept = TopicRecord.of(STORED)
    destroyed = dataclasses.replace(kept, destroyed=True)
    held = [{"destroyed": destroyed, "kept": kept, None: None}[r] for r in records]
    assert opening(ASKED, held) == Opening(ASKED.topic_id, wipe=True)


def test_a_record_round_trips_through_a_state() -> None:
    record = dataclasses.replace(TopicRecord.of(STORED), destroyed=True)
    assert TopicRecord.from_state({"topic": record.state()}) == record
    assert TopicRecord.from_state({}) is None  # a state written before records were kept


def test_a_compacted_topic_reopens_only_with_the_same_compaction() -> None:
    compaction = Compaction(max_lag_s=30)
    made = TopicConfig.create("prices", channels=2, store="/tmp/unused", compaction=compaction)
    record = TopicRecord.of(dataclasses.replace(made, topic_id="0ld1d"))
    assert opening(made, [record, record]) == Opening("0ld1d", wipe=False)
    for other in (None, Compaction(max_lag_s=60)):
        asked = TopicConfig.create("prices", channels=2, store="/tmp/unused", compaction=other)
        with pytest.raises(TopicSettingsError) as refused:
            opening(asked, [record, record])
        assert refused.value.differences["compaction"][0] == compaction.to_state()
    # A record made before compaction existed holds its default: none.
    plain = TopicConfig.create("prices", channels=2, store="/tmp/unused")
    settings = {k: v for k, v in TopicRecord.of(plain).settings.items() if k != "compaction"}
    older = TopicRecord("0ld1d", settings)
    assert opening(plain, [older, older]) == Opening("0ld1d", wipe=False)
    with pytest.raises(TopicSettingsError, match="compaction=None"):
        opening(made, [older, older])
