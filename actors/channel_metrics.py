"""A channel's Ray metrics (``ray.util.metrics``), which Ray's Prometheus endpoint
exports with a ``ray_`` prefix. Every series is tagged with the topic and the
channel; the group gauges also with the group, so a dashboard sums over
channels for a group's lag (``sum by (group) (ray_raytopic_group_lag)``).

- ``raytopic_published_elements`` / ``_bytes``: appended and visible to readers.
- ``raytopic_delivered_elements`` / ``_bytes``: taken by readers (group members
  and anonymous subscribers).
- ``raytopic_commits``: commits that moved a position.
- ``raytopic_append_latency_seconds``: a publisher batch's call, from its arrival
  to its acknowledgement (the store's sync included).
- ``raytopic_receive_latency_seconds``: from an element's append to its delivery.
- ``raytopic_group_lag`` / ``raytopic_group_depth``: per group, elements not yet
  committed / not yet delivered here (refreshed by the channel's metrics task).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ray

__all__ = ["ChannelMetrics", "REFRESH_INTERVAL"]

REFRESH_INTERVAL = 2.0
"""Seconds between refreshes of the group gauges."""

_LATENCY_BOUNDARIES = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]


class ChannelMetrics:
    """The metrics of one channel (no-ops where Ray is not running: the actor class
    used in-process by tests)."""

    def __init__(self, topic: str, channel: int) -> None:
        self._tags = {"topic": topic, "channel": str(channel)}
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

        self._published = counter("raytopic_published_elements", "Elements appended")
        self._published_bytes = counter("raytopic_published_bytes", "Bytes appended")
        self._delivered = counter("raytopic_delivered_elements", "Elements taken by readers")
        self._delivered_bytes = counter("raytopic_delivered_bytes", "Bytes taken by readers")
        self._commits = counter("raytopic_commits", "Commits that moved a position")
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
        if self._live:
            self._published.inc(count)
            self._published_bytes.inc(nbytes)

    def appended(self, seconds: float) -> None:
        """A publisher batch was acknowledged ``seconds`` after it arrived."""
        if self._live:
            self._append_latency.observe(seconds)

    def delivered(self, count: int, nbytes: int, waited: float) -> None:
        """``count`` elements were taken; the oldest had waited ``waited`` seconds."""
        if self._live and count:
            self._delivered.inc(count)
            self._delivered_bytes.inc(nbytes)
            self._receive_latency.observe(max(0.0, waited))

    def committed(self) -> None:
        """A commit moved a position."""
        if self._live:
            self._commits.inc()

    def groups(self, figures: Iterable[tuple[str, int, int]]) -> None:
        """Each group's (name, lag, depth) at this channel."""
        if not self._live:
            return
        for group, lag, depth in figures:
            tags = {**self._tags, "group": group}
            self._lag.set(lag, tags=tags)
            self._depth.set(depth, tags=tags)
