"""A compacted topic's settings (``rt.Compaction``), validated on the caller's side.

A compacted topic keeps, for each key, at least its latest element: older
elements of a key are removed in the background, leaving gaps in the
positions (Kafka's ``cleanup.policy=compact``). The three settings say when
(docs/guides/compacted-topics.md):

- ``min_lag_s``: the newest elements, appended less than this long ago, are
  never compacted (Kafka's ``min.compaction.lag.ms``): a reader within that
  much of the tail sees every element.
- ``max_lag_s``: every element is eligible this long after it was appended,
  on a quiet topic too (Kafka's ``max.compaction.lag.ms``, without a segment
  size to forget).
- ``tombstone_retention_s``: a delete (an element whose value is None) stays
  this long after it became eligible (Kafka's ``delete.retention.ms``), so a
  reader that reads from the earliest and reaches the tail in that time sees
  it; then it goes too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raytopic.core.config import MAX_RETENTION_SECONDS, shown
from raytopic.core.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["Compaction"]


@dataclass(frozen=True, slots=True)
class Compaction:
    """How a compacted topic compacts: ``create_topic(..., compaction=rt.Compaction(...))``.

    Args:
        min_lag_s: Seconds an element stays uncompacted after it was appended
            (>= 0).
        max_lag_s: Seconds after which every element is eligible (> 0, at
            least ``min_lag_s``).
        tombstone_retention_s: Seconds a delete stays after it became eligible
            (>= 0).

    Every value is a number of seconds, at most a century.

    Raises:
        InvalidTypeError: a value is not a number (a bool is not one).
        InvalidArgumentError: a value is negative, NaN, infinite or over a
            century, ``max_lag_s`` is 0, or ``min_lag_s > max_lag_s``.

    Example:
        >>> compaction = rt.Compaction(max_lag_s=30)
        >>> prices = rt.create_topic("prices", store="/data", compaction=compaction)
    """

    min_lag_s: float = 0.0
    """Seconds an element stays uncompacted after it was appended."""
    max_lag_s: float = 60.0
    """Seconds after which every element is eligible, on a quiet topic too."""
    tombstone_retention_s: float = 86_400.0
    """Seconds a delete stays after it became eligible."""

    def __post_init__(self) -> None:
        set_field = object.__setattr__
        for name in ("min_lag_s", "max_lag_s", "tombstone_retention_s"):
            set_field(self, name, _seconds(getattr(self, name), name))
        if self.max_lag_s <= 0:
            raise InvalidArgumentError(f"max_lag_s must be > 0, got {self.max_lag_s}")
        if self.min_lag_s > self.max_lag_s:
            raise InvalidArgumentError(
                f"min_lag_s ({self.min_lag_s}) must not exceed max_lag_s ({self.max_lag_s}): "
                "an element is eligible by max_lag_s at the latest"
            )

    def to_state(self) -> dict[str, float]:
        """The settings as JSON (what a store records of the topic)."""
        return {
            "min_lag_s": self.min_lag_s,
            "max_lag_s": self.max_lag_s,
            "tombstone_retention_s": self.tombstone_retention_s,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Compaction:
        """The settings :meth:`to_state` gave."""
        return cls(**state)


def _seconds(value: object, name: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not 0 <= value <= MAX_RETENTION_SECONDS:  # False for NaN; huge ints compare exactly
        raise InvalidArgumentError(
            f"{name} must be >= 0 seconds and at most a century, got {shown(value)}"
        )
    return float(value)
