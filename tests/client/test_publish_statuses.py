"""PublishStatuses (raytopic.core.statuses): the compact sequence ``publish_batch``
resolves to behaves as the eagerly built ``list[PublishStatus]`` it replaces."""

from __future__ import annotations

import asyncio
import pickle
from datetime import UTC, datetime

import numpy as np
import pytest
import ray
from hypothesis import given, settings
from hypothesis import strategies as st

import raytopic as rt
from raytopic.core.gather import Joined, JoinKind, join_replies
from raytopic.core.protocol import AppendAck, StatusBatch
from raytopic.core.records import Position, PublishStatus
from raytopic.core.statuses import PublishStatuses, StatusRuns, combine_statuses

from tests.topic_helpers import get

TOPIC_ID = "t0pic1d"

# A part: one channel's runs, as (first sequence, count, stamp).
_runs = st.lists(
    st.tuples(
        st.integers(0, 10**12),
        st.integers(0, 6),
        st.floats(0, 2e9, allow_nan=False).map(lambda stamp: round(stamp, 3)),
    ),
    min_size=1,
    max_size=4,
)


def _eager(channel: int, runs: list[tuple[int, int, float]]) -> list[PublishStatus]:
    """The statuses as the list publish_batch returned before."""
    return [
        PublishStatus(
            channel, Position(TOPIC_ID, channel, sequence), datetime.fromtimestamp(stamp, tz=UTC)
        )
        for first, count, stamp in runs
        for sequence in range(first, first + count)
    ]


@st.composite
def _batches(draw: st.DrawFn) -> tuple[PublishStatuses, list[PublishStatus]]:
    """A PublishStatuses of one or several channels, and the list it stands for."""
    parts = draw(st.lists(_runs, min_size=1, max_size=4))
    eager = [_eager(channel, runs) for channel, runs in enumerate(parts)]
    layout = [index for index, statuses in enumerate(eager) for _ in statuses]
    layout = draw(st.permutations(layout))
    compact = [PublishStatuses.of_channel(TOPIC_ID, c, runs) for c, runs in enumerate(parts)]
    if len(parts) == 1:
        return compact[0], eager[0]
    cursors = [iter(statuses) for statuses in eager]
    expected = [next(cursors[index]) for index in layout]
    as_bytes = draw(st.booleans())
    packed = bytes(layout) if as_bytes else np.asarray(layout, dtype=np.int64)
    return combine_statuses(packed, *compact), expected


@settings(max_examples=200, deadline=None)
@given(_batches())
def test_a_compact_batch_is_the_list_it_stands_for(batch) -> None:
    statuses, expected = batch
    assert statuses == expected
    assert expected == statuses  # list.__eq__ gives way to PublishStatuses'
    assert statuses == tuple(expected)
    assert not statuses != expected  # noqa: SIM202 -- != is what is tested
    assert len(statuses) == len(expected)
    assert list(statuses) == expected
    for index in range(-len(expected), len(expected)):
        assert statuses[index] == expected[index]
    for index in (len(expected), -len(expected) - 1):
        with pytest.raises(IndexError):
            statuses[index]
    assert statuses[1:-1] == expected[1:-1]
    assert statuses[::-2] == expected[::-2]
    assert list(reversed(statuses)) == expected[::-1]
    again = pickle.loads(pickle.dumps(statuses))
    assert again == statuses
    assert again == expected
    if expected:
        assert statuses.index(expected[-1]) == expected.index(expected[-1])
        assert statuses.count(expected[0]) == expected.count(expected[0])
        assert expected[0] in statuses
        assert statuses != expected[:-1]
        assert statuses != PublishStatuses.of_channel(TOPIC_ID, 0, [(0, len(expected) - 1, 0.0)])
    assert statuses != [*expected, expected[0] if expected else None]
    assert statuses != (*expected, None)


@settings(max_examples=50, deadline=None)
@given(_batches(), _batches())
def test_combining_combined_parts_keeps_the_order(first, second) -> None:
    (left, left_expected), (right, right_expected) = first, second
    layout = [0] * len(left_expected) + [1] * len(right_expected)
    layout.reverse()  # values of one part stay in order: here the right part's first
    combined = combine_statuses(np.asarray(layout, dtype=np.uint8), left, right)
    assert combined == right_expected + left_expected
    assert pickle.loads(pickle.dumps(combined)) == right_expected + left_expected


def test_statuses_are_built_only_when_read_and_pickle_as_their_runs() -> None:
    runs = [(5, 1_000_000, 1_700_000_000.5), (1_000_005, 3, 1_700_000_001.0)]
    statuses = PublishStatuses.of_channel(TOPIC_ID, 2, runs)
    assert len(statuses) == 1_000_003
    assert len(pickle.dumps(statuses)) < 300
    assert statuses[-1] == PublishStatus(
        2, Position(TOPIC_ID, 2, 1_000_007), datetime.fromtimestamp(1_700_000_001.0, tz=UTC)
    )
    assert statuses[-1].timestamp.tzinfo is UTC
    assert repr(statuses) == "PublishStatuses(1000003 statuses, channels [2])"
    layout = np.arange(200_000, dtype=np.uint8) % 2
    halves = [PublishStatuses.of_channel(TOPIC_ID, c, [(0, 100_000, 1.0)]) for c in (0, 1)]
    combined = combine_statuses(layout, *halves)
    assert len(pickle.dumps(combined)) < 200_000 + 500  # a byte a value, no statuses
    assert combined[-1].position == Position(TOPIC_ID, 1, 99_999)


def test_it_compares_like_a_list() -> None:
    statuses = PublishStatuses.of_channel(TOPIC_ID, 0, [(0, 2, 1.0)])
    with pytest.raises(TypeError):
        hash(statuses)
    assert statuses.__eq__(object()) is NotImplemented
    assert statuses.__eq__({0: statuses[0]}) is NotImplemented
    assert statuses != "ab"
    assert PublishStatuses() == [] == PublishStatuses.of_channel(TOPIC_ID, 3, [(9, 0, 0.0)])
    with pytest.raises(TypeError):
        statuses["0"]  # type: ignore[call-overload]


def test_a_layout_that_does_not_fit_the_parts_is_refused() -> None:
    parts = [PublishStatuses.of_channel(TOPIC_ID, c, [(0, 2, 1.0)]) for c in (0, 1)]
    for layout in ([0, 0, 0, 1], [0, 1, 1], [0, 1, 2, 1], [0, 1, -1, 1]):
        with pytest.raises(rt.InvalidArgumentError):
            combine_statuses(np.asarray(layout), *parts)
    with pytest.raises(rt.InvalidArgumentError):
        PublishStatuses([StatusRuns(TOPIC_ID, 0, ((0, 1, 1.0),))] * 2)


def test_a_status_batch_of_runs_keeps_each_runs_stamp() -> None:
    ack = AppendAck(first=0, accepted=3, stamp=2.0, runs=((0, 2, 1.0), (7, 1, 2.0)))
    statuses = pickle.loads(pickle.dumps(StatusBatch(TOPIC_ID, 1, ack)))
    assert isinstance(statuses, PublishStatuses)
    assert statuses == _eager(1, [(0, 2, 1.0), (7, 1, 2.0)])


# -- through Ray ---------------------------------------------------------------------------


def test_publish_batch_resolves_to_publish_statuses(make_topic) -> None:
    topic = make_topic(channels=1, capacity=5, overflow="fail")
    with topic.publisher() as publisher:
        statuses = get(publisher.publish_batch(["a", "b", "c"]))
        assert isinstance(statuses, PublishStatuses)
        topic_id = statuses[0].position.topic_id
        when = statuses[0].timestamp
        assert statuses == [PublishStatus(0, Position(topic_id, 0, s), when) for s in (0, 1, 2)]
        refused = publisher.publish_batch(["d", "e", "f"])  # 3 more do not fit in 5
        with pytest.raises(rt.TopicFullError):
            ray.get(refused, timeout=30)


@ray.remote(num_cpus=0)
def _refused_part() -> None:
    raise rt.TopicFullError("channel 1 is full")


def test_a_lead_channel_joins_the_other_channels_statuses_in_the_batch_order(
    ray_session,
) -> None:
    own = StatusBatch(TOPIC_ID, 0, AppendAck(first=4, accepted=2, stamp=1.0)).statuses()
    other = ray.put(StatusBatch(TOPIC_ID, 1, AppendAck(first=0, accepted=1, stamp=2.0)))
    layout = np.asarray([1, 0, 0])
    combined = asyncio.run(join_replies(own, Joined(JoinKind.STATUSES, layout, 0, (other,))))
    assert isinstance(combined, PublishStatuses)
    assert combined == [*_eager(1, [(0, 1, 2.0)]), *_eager(0, [(4, 2, 1.0)])]
    refused = _refused_part.remote()  # as a channel refuses: its call raises
    with pytest.raises(rt.TopicFullError, match="channel 1 is full") as raised:
        asyncio.run(join_replies(own, Joined(JoinKind.STATUSES, layout, 0, (refused,))))
    assert not isinstance(raised.value, ray.exceptions.RayTaskError)  # the error itself
