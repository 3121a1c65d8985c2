"""What every ``raytopic bench`` case builds on: the figure it reports (``Figure``,
with the ``Target`` its ratio is judged by), and the pieces of its workload (the
small dict a message is, a topic's unique name, medians and percentiles, and the
check that every message arrived once).

A leaf: it imports no other bench module, so each case module (``bench_throughput``,
``bench_groups``, ``bench_shared``, ``bench_transactions``, ``bench_commit``,
``bench_idle``, ``bench_spark``) and ``bench`` itself, which runs them all, import from here.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["BATCH", "Figure", "Target", "at_least", "at_most"]

BATCH = 1000
"""Messages per batch of the batch API's cases, Queue's and the floor's."""


@dataclass(frozen=True, slots=True)
class Target:
    """A bound the project set on a figure's ratio to its baseline of the same run."""

    ratio: float
    """The bound."""
    at_most: bool = False
    """True where less is better (a latency, a cost), False where more is (a rate)."""

    def met(self, ratio: float) -> bool:
        """Whether ``ratio`` is on the right side of the bound (the bound itself meets it)."""
        return ratio <= self.ratio if self.at_most else ratio >= self.ratio

    def __str__(self) -> str:
        digits = 1 if round(self.ratio, 1) == self.ratio else 2
        return f"{'<=' if self.at_most else '>='} {self.ratio:.{digits}f}x"


def at_least(ratio: float) -> Target:
    """A target for a rate: the figure should be at least ``ratio`` times its baseline."""
    return Target(ratio)


def at_most(ratio: float) -> Target:
    """A target for a cost: the figure should be at most ``ratio`` times its baseline."""
    return Target(ratio, at_most=True)


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured figure, with the baseline it is compared to."""

    case: str
    value: float
    unit: str
    baseline: str | None = None
    baseline_value: float | None = None
    target: Target | None = None
    """The bound the project set on ``ratio``, if it set one."""

    @property
    def ratio(self) -> float | None:
        """``value / baseline_value``."""
        if not self.baseline_value:
            return None
        return self.value / self.baseline_value

    @property
    def met(self) -> bool | None:
        """Whether the target is met; None without a target. A target whose ratio
        could not be taken (a baseline of 0) is not met: nothing shows it is."""
        if self.target is None:
            return None
        return self.ratio is not None and self.target.met(self.ratio)


def _message(index: int) -> dict[str, Any]:
    return {"id": index, "user": f"u{index % 100}", "amount": index * 0.5}


def _name(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:6]}"


def _median(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def _percentile(samples: list[float], percent: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(percent / 100 * len(ordered)))]


DRAINED_CHECK = 0.1
"""Seconds without data after which a group case's member asks whether its group
has committed everything, and stops if so (else it waits out its quiet time)."""


class _Drained:
    """Whether a group has committed everything its topic holds (a lag of 0) and the
    topic holds every element the case publishes (``count``), asked at most every
    ``DRAINED_CHECK`` seconds: the figures are taken from the batches, so a member
    that stops then rather than after its quiet time changes none of them, and a run
    ends sooner."""

    def __init__(self, topic: Any, group: str, count: int) -> None:
        self._topic, self._group, self._count, self._asked = topic, group, count, 0.0

    def __call__(self, idle: float) -> bool:
        """After ``idle`` seconds without data: has the group committed everything?"""
        now = time.monotonic()
        if idle < DRAINED_CHECK or now - self._asked < DRAINED_CHECK:
            return False
        self._asked = now
        stats = self._topic.describe()
        if stats.groups[self._group].lag:
            return False
        # Sequences start at 0 on a fresh topic: the newest's is the count less one.
        published = sum(channel.tail + 1 for channel in stats.channels if channel.tail is not None)
        return published >= self._count


def _check_ids(what: str, count: int, id_sum: int) -> None:
    """A rate is only worth printing if every message arrived once."""
    if id_sum != count * (count - 1) // 2:
        raise RuntimeError(f"{what}: the ids received do not add up to those of {count} messages")
