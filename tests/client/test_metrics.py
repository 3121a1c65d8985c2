"""A topic's Ray metrics, scraped from the session cluster's Prometheus endpoint
(``ray start --head --metrics-export-port=...``)."""

from __future__ import annotations

import os
import re
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable

import pytest

import raytopic as rt
from raytopic.actors.channel_metrics import REFRESH_INTERVAL

from tests.topic_helpers import drain_group, publish_all

_SAMPLE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _scrape(
    url: str, value: str, *, label: str = "topic"
) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The samples of raytopic's series whose ``label`` is ``value`` (by default, a
    topic's series), by metric name."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if not found or "raytopic" not in found.group(1):
            continue
        labels = dict(_LABEL.findall(found.group(2)))
        if labels.get(label) == value:
            samples[found.group(1)].append((labels, float(found.group(3))))
    return samples


def _total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return sum(value for _, value in samples.get(name, ()))


def _fencings(url: str, namespace: str) -> float:
    """The registry's fencings counted so far in ``namespace`` (0 before any)."""
    samples = _scrape(url, namespace, label="namespace")
    return _total(samples, "ray_raytopic_transaction_fencings_total")


def _eventually(check: Callable[[], object], timeout: float = 30.0) -> None:
    """Metrics reach the exporter on Ray's report interval: poll until they show."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_published_delivered_committed_and_group_lag_reach_prometheus(
    make_topic: Callable[..., rt.Topic], metrics_url: str
) -> None:
    topic = make_topic(channels=2, groups=["g"])
    statuses = publish_all(topic, [{"i": i} for i in range(100)], key=None)
    per_channel = {c: sum(s.channel == c for s in statuses) for c in (0, 1)}
    received = drain_group(topic, "g", 100)
    assert len(received) == 100
    with topic.subscriber(group="g") as member:
        for channel in (0, 1):
            last = max(e.position for e in received if e.channel == channel)
            assert member.commit(channel, last).status is rt.CommitStatus.COMMITTED

    def settled() -> None:
        samples = _scrape(metrics_url, topic.name)
        published = {
            labels["channel"]: value
            for labels, value in samples["ray_raytopic_published_elements_total"]
        }
        assert published == {str(c): float(n) for c, n in per_channel.items()}
        assert _total(samples, "ray_raytopic_delivered_elements_total") == 100
        assert _total(samples, "ray_raytopic_published_bytes_total") > 0
        assert _total(samples, "ray_raytopic_commits_total") == 2
        assert _total(samples, "ray_raytopic_append_latency_seconds_count") >= 2
        assert _total(samples, "ray_raytopic_receive_latency_seconds_count") >= 2
        assert _total(samples, "ray_raytopic_rebalances_total") >= 1
        lag = samples["ray_raytopic_group_lag"]
        assert {labels["group"] for labels, _ in lag} == {"g"}
        assert sum(value for _, value in lag) == 0  # everything committed

    _eventually(settled)

    publish_all(topic, [{"i": i} for i in range(10)])  # published, not yet received

    def behind() -> None:
        samples = _scrape(metrics_url, topic.name)
        assert _total(samples, "ray_raytopic_group_lag") == 10
        assert _total(samples, "ray_raytopic_group_depth") == 10

    _eventually(behind)


def test_transaction_commits_aborts_and_fencings_reach_prometheus(
    make_topic: Callable[..., rt.Topic], metrics_url: str, unique_name: Callable[[str], str]
) -> None:
    sink = make_topic(channels=1)
    name = unique_name("tx")
    # Other tests fence in this namespace too (the registry's counter is per
    # namespace): this one's fencing adds at least one to what was counted.
    fenced_before = _fencings(metrics_url, sink.namespace)
    txs = rt.transactions(name)
    with txs.begin() as tx:
        tx.publish(sink, "kept")
    with txs.begin() as tx:  # a decision of "abort" at the lead: its commit failed
        tx.publish(sink, "dropped")
        rt.transactions(name)  # fences the first incarnation, aborting this one
        with pytest.raises(rt.TransactionFencedError):
            tx.commit()

    def counted() -> None:
        samples = _scrape(metrics_url, sink.name)
        assert _total(samples, "ray_raytopic_transaction_commits_total") == 1
        assert _total(samples, "ray_raytopic_transaction_aborts_total") >= 1
        assert _fencings(metrics_url, sink.namespace) >= fenced_before + 1

    _eventually(counted)


def test_compactions_and_the_bytes_they_reclaimed_reach_prometheus(
    make_topic: Callable[..., rt.Topic], metrics_url: str, wait_until: Callable[..., object]
) -> None:
    topic = make_topic(channels=2, compaction=rt.Compaction(max_lag_s=0.3))
    with topic.publisher() as publisher:
        for version in range(20):
            for k in range(10):
                publisher.publish({"v": version, "pad": "x" * 100}, key=f"k{k}")
        publisher.flush()

    def compacted() -> bool:  # every channel's pass covered everything published
        return all(
            c.compaction is not None and c.compaction["point"] > c.tail
            for c in topic.describe().channels
        )

    wait_until(compacted, timeout=30.0)
    passes = sum(c.compaction["runs"] for c in topic.describe().channels)

    def counted() -> None:
        samples = _scrape(metrics_url, topic.name)
        compactions = samples["ray_raytopic_compactions_total"]
        assert {labels["channel"] for labels, _ in compactions} == {"0", "1"}
        assert sum(value for _, value in compactions) == passes
        # 190 of 200 values of over 100 bytes each went.
        assert _total(samples, "ray_raytopic_compacted_bytes_total") > 190 * 100

    _eventually(counted)


@pytest.mark.slow  # waits 9 s: past two refreshes and Ray's hold on a gauge (4 s)
def test_a_stuck_groups_lag_stays_exported(
    make_topic: Callable[..., rt.Topic], metrics_url: str
) -> None:
    # Ray (2.60, OpenTelemetry) exports a gauge's value for two report intervals
    # after it was last set (4 s in this session), so a channel that set its gauges
    # only on change lost the series of a group whose lag stopped changing: a stuck
    # group had no series to alert on (before, at a 0.5 s interval: gone for good 3 s
    # after the last publish). A channel sets them at every refresh: the series comes back.
    topic = make_topic(channels=1, groups=["stuck"])
    publish_all(topic, [{"i": i} for i in range(5)])  # never consumed
    _eventually(lambda: _assert_lag(metrics_url, topic.name, 5))
    # Past two refreshes and two report intervals: a series set once is gone by then.
    time.sleep(2 * REFRESH_INTERVAL + 2 * _report_interval() + 1.0)
    _eventually(lambda: _assert_lag(metrics_url, topic.name, 5), timeout=10.0)


def _report_interval() -> float:
    """Ray's metrics report interval in this session, in seconds (tests/conftest.py)."""
    interval = os.environ.get("RAY_metrics_report_interval_ms", "10000")  # noqa: SIM112 (Ray's name)
    return int(interval) / 1000


def _assert_lag(url: str, topic: str, lag: int) -> None:
    assert _total(_scrape(url, topic), "ray_raytopic_group_lag") == lag


def test_expired_elements_leave_a_groups_lag_and_depth(
    make_topic: Callable[..., rt.Topic], metrics_url: str, wait_until: Callable[..., object]
) -> None:
    # Before: 10 elements expired by the ttl (head 10, tail 9, size 0) still
    # counted: lag 10 and depth 10, in describe() and the gauges.
    topic = make_topic(channels=1, ttl=1.0, groups=["g"])
    publish_all(topic, list(range(10)))
    wait_until(lambda: topic.describe().channels[0].size == 0, timeout=30.0)
    stats = topic.describe().groups["g"].channels[0]
    assert (stats.lag, stats.depth) == (0, 0)

    def gauges() -> None:
        samples = _scrape(metrics_url, topic.name)
        assert samples["ray_raytopic_group_lag"] and samples["ray_raytopic_group_depth"]
        assert _total(samples, "ray_raytopic_group_lag") == 0
        assert _total(samples, "ray_raytopic_group_depth") == 0

    _eventually(gauges)
