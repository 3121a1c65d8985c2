"""A channel's Ray metrics (``ray.util.metrics``), which Ray's Prometheus endpoint
exports with a ``ray_`` prefix. Every series is tagged with the topic and the
channel; the group gauges also with the group, so a dashboard sums over
channels for a group's lag (``sum by (group) (ray_raytopic_group_lag)``).

- ``raytopic_published_elements`` / ``_bytes``: appended and visible to readers.
- ``raytopic_delivered_elements`` / ``_bytes``: taken by readers (group members
  and anonymous subscribers).
- ``raytopic_commits``: commits that moved a position.
- ``raytopic_compactions`` / ``raytopic_compacted_bytes``: a compacted topic's
  compaction passes, and the bytes they reclaimed.
- ``raytopic_transaction_commits`` / ``_aborts``: transactions decided here (at
  their lead channel), and aborts of staged transactions no lead decided
  (fenced or timed out: counted at each channel that dropped elements);
  fencings are counted by the transaction registry.
- ``raytopic_append_latency_seconds``: a publisher batch's call, from its arrival
  to its acknowledgement (the store's sync included); sampled.
- ``raytopic_receive_latency_seconds``: from an element's append to its delivery;
  sampled.
- ``raytopic_group_lag`` / ``raytopic_group_depth``: per group, elements not yet
  committed / not yet delivered here.

The channel's metrics task hands Ray the counts, the latency samples and the
gauges every ``REFRESH_INTERVAL`` seconds; the hot path only adds to plain ints
and lists.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import ray

__all__ = ["ChannelMetrics", "REFRESH_INTERVAL"]

REFRESH_INTERVAL = 2.0
"""Seconds between reports to Ray (counters and group gauges)."""

SAMPLE_INTERVAL = 0.01
"""Latency histograms take at most one observation per this many seconds per channel
(an unbiased sample of the busy periods, at a bounded cost)."""

_COUNTERS = {
    "published": ("published_elements", "Elements appended"),
    "published_bytes": ("published_bytes", "Bytes appended"),
    "delivered": ("delivered_elements", "Elements taken by readers"),
    "delivered_bytes": ("delivered_bytes", "Bytes taken by readers"),
    "commits": ("commits", "Commits that moved a position"),
    "transaction_commits": ("transaction_commits", "Transactions committed (by their lead)"),
    "transaction_aborts": ("transaction_aborts", "Transactions aborted (by their lead)"),
    "poison_skipped": (
        "poison_skipped",
        "Poison elements (undecodable, or a filter or converter raised) a reader skipped",
    ),
    "compactions": ("compactions", "Compaction passes of a compacted topic"),
    "compacted_bytes": ("compacted_bytes", "Bytes a compaction reclaimed"),
}

MAX_PENDING_SAMPLES = 2 * int(REFRESH_INTERVAL / SAMPLE_INTERVAL)
"""Latency samples of each histogram kept for the next report (beyond: dropped, as
while no report runs: the metrics task starts with the first publish)."""

_LATENCY_BOUNDARIES = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]


class ChannelMetrics:
    """The metrics of one channel (no-ops where Ray is not running: the actor class
    used in-process by tests)."""

    def __init__(self, topic: str, channel: int) -> None:
        self._tags = {"topic": topic, "channel": str(channel)}
        # Counted here, handed to Ray by report(): a Ray metric call costs tens
        # of microseconds, too much for every append and take.
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._append_sampled = self._receive_sampled = float("-inf")
        # Observed by report(): a Ray histogram's observe() costs as much as a counter's.
        self._append_samples: list[float] = []
        self._receive_samples: list[float] = []
        self._live = ray.is_initialized()
        if not self._live:
            return
        from ray.util.metrics import Counter, Gauge, Histogram

        keys = ("topic", "channel")

        def counter(name: str, description: str) -> Any:
            metric = Counter(name, description=description, tag_keys=keys)
            metric.set_default_tags(self._tags)
            return metric

        def histogram(name: str, description: str) -> Any:
            metric = Histogram(
                name, description=description, boundaries=_LATENCY_BOUNDARIES, tag_keys=keys
            )
            metric.set_default_tags(self._tags)
            return metric

        self._counters = {
            name: counter(f"raytopic_{metric}", description)
            for name, (metric, description) in _COUNTERS.items()
        }
        self._append_latency = histogram(
            "raytopic_append_latency_seconds", "A publisher batch, arrival to acknowledgement"
        )
        self._receive_latency = histogram(
            "raytopic_receive_latency_seconds", "An element, append to delivery"
        )
        group_keys = ("topic", "channel", "group")
        self._lag = Gauge(
            "raytopic_group_lag", description="Elements not yet committed", tag_keys=group_keys
        )
        self._depth = Gauge(
            "raytopic_group_depth", description="Elements not yet delivered", tag_keys=group_keys
        )

    def published(self, count: int, nbytes: int) -> None:
        """``count`` elements of ``nbytes`` became visible."""
        self._counts["published"] += count
        self._counts["published_bytes"] += nbytes

    def appended(self, seconds: float) -> None:
        """A publisher batch was acknowledged ``seconds`` after it arrived (sampled)."""
        now = time.monotonic()
        if now - self._append_sampled >= SAMPLE_INTERVAL:
            self._append_sampled = now
            _keep(self._append_samples, seconds)

    def delivered(self, count: int, nbytes: int, waited: float) -> None:
        """``count`` elements were taken; the oldest had waited ``waited`` seconds
        (sampled)."""
        self._counts["delivered"] += count
        self._counts["delivered_bytes"] += nbytes
        now = time.monotonic()
        if count and now - self._receive_sampled >= SAMPLE_INTERVAL:
            self._receive_sampled = now
            _keep(self._receive_samples, max(0.0, waited))

    def committed(self) -> None:
        """A commit moved a position."""
        self._counts["commits"] += 1

    def poison_skipped(self, count: int = 1) -> None:
        """A reader made with ``on_poison="skip"`` passed over ``count`` poison elements."""
        self._counts["poison_skipped"] += count

    def compacted(self, reclaimed: int) -> None:
        """A compaction pass ended, reclaiming ``reclaimed`` bytes."""
        self._counts["compactions"] += 1
        self._counts["compacted_bytes"] += max(0, reclaimed)

    def transaction_decided(self, committed: bool) -> None:
        """This channel, a transaction's lead, decided its outcome."""
        self._counts["transaction_commits" if committed else "transaction_aborts"] += 1

    def report(self, groups: Iterable[tuple[str, int, int]]) -> None:
        """Hand Ray what was counted and sampled since the last report, and each group's
        (name, lag, depth) at this channel. The gauges are set every time, changed
        or not: Ray exports a gauge's value only for two of its report intervals
        after it was last set (20 s by default), and a stuck group's lag, which
        does not change, is the series an alert needs."""
        if not self._live:
            return
        for name, count in self._counts.items():
            if count:
                self._counters[name].inc(count)
                self._counts[name] = 0
        for histogram, samples in (
            (self._append_latency, self._append_samples),
            (self._receive_latency, self._receive_samples),
        ):
            for seconds in samples:
                histogram.observe(seconds)
            samples.clear()
        for group, lag, depth in groups:
            tags = {**self._tags, "group": group}
            self._lag.set(lag, tags=tags)
            self._depth.set(depth, tags=tags)


def _keep(samples: list[float], seconds: float) -> None:
    """Keep a latency sample for the next report (up to ``MAX_PENDING_SAMPLES``)."""
    if len(samples) < MAX_PENDING_SAMPLES:
        samples.append(seconds)
