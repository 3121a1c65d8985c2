"""Compacted topics against a real Ray (docs/guides/compacted-topics.md): keys required, deletes as
tombstones, and Kafka's four guarantees of compaction."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import pyarrow as pa
import ray

import raytopic as rt
from raytopic.client.routing import channel_for_key

from tests.topic_helpers import TIMEOUT, get

POLL_S = 0.25
"""How often a wait for a compaction pass (seconds away: ``max_lag_s``, ``min_lag_s``,
``tombstone_retention_s``) asks again: a description of the topic (or a reader) 50 times a
second, for up to 10 s, cost more CPU than the rest of the test."""


def _all(subscriber: rt.Subscriber) -> list[rt.Element]:
    got: list[rt.Element] = []
    while batch := get(subscriber.receive_batch(1000)):
        got.extend(batch)
    return got


def test_a_delete_is_an_element_of_its_key_whose_value_is_none(
    make_topic: Callable[..., rt.Topic],
) -> None:
    topic = make_topic(channels=2, compaction=rt.Compaction())
    assert topic.config.retain and topic.config.compaction == rt.Compaction()
    with topic.publisher() as publisher:
        publisher.publish({"eur": 3.5}, key="a1")
        status = publisher.delete("a1").result(timeout=TIMEOUT)
        publisher.delete(b"b7")
    assert status.channel == channel_for_key("a1", 2)  # where the key's values go
    with topic.subscriber(start="earliest", complete_on_empty=True) as subscriber:
        got = {(e.key, repr(e.value)) for e in _all(subscriber)}
    assert got == {("a1", "{'eur': 3.5}"), ("a1", "None"), (b"b7", "None")}


def _compacted(topic: rt.Topic, wait_until: Callable[..., object], runs: int = 1) -> None:
    """Wait until every channel ran ``runs`` passes after everything published so far."""

    def done() -> bool:
        for stats in topic.describe().channels:
            compaction = stats.compaction
            if compaction is None or compaction["runs"] < runs or compaction["point"] <= stats.tail:
                return False
        return True

    wait_until(done, timeout=30.0, interval=POLL_S)


def _publish_versions(
    topic: rt.Topic, keys: int, versions: int
) -> dict[str, list[rt.PublishStatus]]:
    """``versions`` values of each of ``keys`` keys, version by version: {key: statuses}."""
    statuses: dict[str, list[rt.PublishStatus]] = {f"k{k}": [] for k in range(keys)}
    with topic.publisher() as publisher:
        futures = [
            (f"k{k}", publisher.publish({"k": k, "v": v}, key=f"k{k}"))
            for v in range(versions)
            for k in range(keys)
        ]
    for key, future in futures:
        statuses[key].append(future.result(timeout=TIMEOUT))
    return statuses


def test_a_quiet_topic_keeps_the_latest_of_every_key_at_its_position_in_order(
    make_topic: Callable[..., rt.Topic], wait_until: Callable[..., object]
) -> None:
    topic = make_topic(channels=2, compaction=rt.Compaction(max_lag_s=0.5))
    statuses = _publish_versions(topic, keys=30, versions=4)  # then nothing: a quiet topic
    _compacted(topic, wait_until)
    with topic.subscriber(start="earliest", complete_on_empty=True) as subscriber:
        got = _all(subscriber)
    latest = {key: (history[-1], 3) for key, history in statuses.items()}
    assert sorted((e.key, e.position, e.value["v"]) for e in got) == sorted(
        (key, status.position, version) for key, (status, version) in latest.items()
    )
    for channel in (0, 1):  # order never changes
        positions = [e.sequence for e in got if e.channel == channel]
        assert positions == sorted(positions)
    assert all(e.timestamp == latest[e.key][0].timestamp for e in got)  # nor do times
    stats = topic.describe().channels
    assert sum(c.size for c in stats) == 30
    assert sum(c.compaction["live_keys"] for c in stats) == 30
    assert sum(c.compaction["last_run"]["removed"] for c in stats) + 30 <= 120


def test_a_reader_within_min_lag_of_the_tail_sees_everything(
    make_topic: Callable[..., rt.Topic], wait_until: Callable[..., object]
) -> None:
    topic = make_topic(channels=1, compaction=rt.Compaction(min_lag_s=10.0, max_lag_s=10.0))
    _publish_versions(topic, keys=5, versions=3)
    with topic.subscriber(start="earliest", complete_on_empty=True) as subscriber:
        assert len(_all(subscriber)) == 15  # nothing is eligible for 10 s
    assert topic.describe().channels[0].compaction == {
        "point": -1,  # no pass yet
        "live_keys": None,
        "dirty_ratio": 1.0,  # all of it new
        "runs": 0,
        "last_run": None,
    }
    _compacted(topic, wait_until)
    with topic.subscriber(start="earliest", complete_on_empty=True) as subscriber:
        assert sorted(e.value["v"] for e in _all(subscriber)) == [2] * 5
    stats = topic.describe().channels[0]
    figures, last = stats.compaction, stats.compaction["last_run"]
    assert (stats.size, figures["point"], figures["live_keys"]) == (5, 15, 5)
    assert figures["dirty_ratio"] == 0.0 and figures["runs"] >= 1
    assert last["at"] <= time.time() and last["seconds"] >= 0
    assert 0 < last["bytes_after"] <= last["bytes_before"]
    assert last["removed"] == 0 or last["bytes_after"] < last["bytes_before"]


def test_deletes_are_seen_within_their_retention_then_go_with_their_key(
    make_topic: Callable[..., rt.Topic], wait_until: Callable[..., object]
) -> None:
    topic = make_topic(
        channels=1, compaction=rt.Compaction(max_lag_s=0.3, tombstone_retention_s=10.0)
    )
    with topic.publisher() as publisher:
        publisher.publish("old", key="gone")
        publisher.delete("gone")
        publisher.publish("kept", key="stays").result(timeout=TIMEOUT)
    _compacted(topic, wait_until)
    with topic.subscriber(start="earliest", complete_on_empty=True) as subscriber:
        seen = [(e.key, e.value) for e in _all(subscriber)]
    assert seen == [("gone", None), ("stays", "kept")]  # the delete, not the old value

    def tombstone_gone() -> bool:
        with topic.subscriber(start="earliest", complete_on_empty=True) as subscriber:
            return [(e.key, e.value) for e in _all(subscriber)] == [("stays", "kept")]

    wait_until(tombstone_gone, timeout=30.0, interval=POLL_S)  # a reader per look
    assert topic.describe().channels[0].compaction["live_keys"] == 1


def test_a_group_that_committed_inside_the_compacted_range_resumes_across_the_gaps(
    make_topic: Callable[..., rt.Topic], wait_until: Callable[..., object]
) -> None:
    topic = make_topic(channels=1, groups=["g"], compaction=rt.Compaction(max_lag_s=0.5))
    statuses = _publish_versions(topic, keys=10, versions=3)
    inside = statuses["k4"][1].position  # 14: the second version of k4, compacted away
    with topic.subscriber(group="g", complete_on_empty=True) as member:
        assert member.commit(0, inside).status is rt.CommitStatus.COMMITTED
    _compacted(topic, wait_until)  # below 20 only the last version stays: gaps all over
    with topic.subscriber(group="g", complete_on_empty=True) as member:
        rest = _all(member)  # no DataLossError, no StaleSequenceError
        assert member.commit(0, rest[-1].position).status is rt.CommitStatus.COMMITTED
    expected = sorted(
        status.position.sequence
        for history in statuses.values()
        for status in history[-1:]
        if status.position.sequence > 14
    )
    assert [e.sequence for e in rest] == expected
    assert topic.describe().groups["g"].committed[0] == rest[-1].position


def test_acks_move_the_commit_across_the_gaps(
    make_topic: Callable[..., rt.Topic], wait_until: Callable[..., object]
) -> None:
    # Each key's two versions side by side: compaction leaves a gap before every
    # survivor, more gaps than a cursor keeps done ranges (DONE_RANGES_KEPT).
    keys = 1500
    topic = make_topic(channels=1, groups=["g"], compaction=rt.Compaction(max_lag_s=0.3))
    with topic.publisher() as publisher:
        for k in range(keys):
            publisher.publish({"v": 0}, key=f"k{k}")
            publisher.publish({"v": 1}, key=f"k{k}")
    _compacted(topic, wait_until)
    with topic.subscriber(group="g", complete_on_empty=True) as member:
        got = _all(member)
        assert [e.sequence for e in got] == list(range(1, 2 * keys, 2))
        # Each done alone (as tasks fanned out of a member finish them), in one call.
        assert member.ack(got) == [rt.AckStatus.ACKED] * keys

    def caught_up() -> bool:
        group = topic.describe().groups["g"]
        return group.committed[0].sequence == 2 * keys - 1 and group.lag == 0

    wait_until(caught_up, timeout=30.0, interval=POLL_S)


def test_a_seek_onto_a_compacted_away_position_reads_the_next_element(
    make_topic: Callable[..., rt.Topic], wait_until: Callable[..., object]
) -> None:
    topic = make_topic(channels=1, compaction=rt.Compaction(max_lag_s=0.5))
    statuses = _publish_versions(topic, keys=4, versions=3)
    _compacted(topic, wait_until)
    survivors = sorted(history[-1].position for history in statuses.values())
    removed = statuses["k1"][0].position  # compacted away
    with topic.subscriber(start="earliest", complete_on_empty=True) as subscriber:
        assert subscriber.seek(0, removed) == removed  # positions never change
        got = _all(subscriber)
        assert [e.position for e in got] == [p for p in survivors if p > removed]
        # The first element after a time: those compacted away read as the next survivor.
        before_all = statuses["k0"][0].timestamp - timedelta(seconds=1)
        assert subscriber.seek(0, before_all) < survivors[0]
        assert [e.position for e in _all(subscriber)] == survivors


def test_bulk_reads_streams_and_capacity_count_what_survives(
    make_topic: Callable[..., rt.Topic], wait_until: Callable[..., object]
) -> None:
    import raytopic.data as rd

    topic = make_topic(channels=1, capacity=40, compaction=rt.Compaction(max_lag_s=0.3))
    statuses = _publish_versions(topic, keys=10, versions=3)  # 30 of 40
    _compacted(topic, wait_until)
    assert topic.describe().channels[0].size == 10
    more = _publish_versions(topic, keys=10, versions=2)  # 20 more fit: only 10 are held
    assert all(len(history) == 2 for history in more.values())
    latest = {key: history[-1].position.sequence for key, history in more.items()}
    _compacted(topic, wait_until, runs=2)
    table = pa.concat_tables(
        [ray.get(ref) for ref in rd.read_topic(topic).to_arrow_refs()],
        promote_options="permissive",
    )
    keys = table.column("key").to_pylist()
    assert sorted(zip(keys, table.column("position").to_pylist(), strict=True)) == sorted(
        latest.items()
    )
    rows = []
    with rd.stream(topic, group="s") as stream:
        for batch in stream:
            rows.extend(ray.get(ref) for ref in batch.dataset.to_arrow_refs())
    streamed = pa.concat_tables(rows, promote_options="permissive")
    assert sorted(streamed.column("position").to_pylist()) == sorted(latest.values())
    assert statuses  # the first versions went: capacity counted the survivors
