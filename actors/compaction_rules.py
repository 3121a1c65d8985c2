"""What a compaction keeps, and when the next one is due: the rules alone. No Ray, no I/O.

A compacted channel's elements each have a key; a delete is an element whose
value is None (a *tombstone*). A compaction pass looks at every element below
its *point* (the first position appended less than ``min_lag_s`` ago) and
keeps (docs/guides/compacted-topics.md, Kafka's guarantees):

- every element at or above the point (a reader within ``min_lag_s`` of the
  tail sees everything), and the channel's last element (so a read from any
  position up to the tail finds an element: a gap never needs a marker);
- below it, the latest element of each key (positions and order never
  change: what goes leaves a gap);
- but not a tombstone ``tombstone_retention_s`` after it became eligible
  (appended ``min_lag_s`` ago): then the key is gone from the log. Every
  older element of its key goes in the same pass (it is not the latest of
  its key), so a deleted key never comes back (nats-server#8505: a
  tombstone removed while an older value survives elsewhere);
- and every element without a key (a damaged record's, say): there is no
  later element of nothing.

A pass is due (:func:`next_due`) once the oldest element appended since the
last pass is ``max_lag_s`` old (on a quiet channel too: no segment size to
forget, kafka PR #4366), sooner when the channel is full or half of what it
holds is new (and ``min_lag_s`` old), and when a kept tombstone's time is up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from raytopic.core.compaction import Compaction

__all__ = [
    "DIRTY_RATIO",
    "MIN_DIRTY",
    "Dirt",
    "Entries",
    "expiry_of",
    "kept",
    "next_due",
    "point_of",
]

DIRTY_RATIO = 0.5
"""A pass is due as soon as this share of what a channel holds was appended since
the last one (Kafka's ``min.cleanable.dirty.ratio``), its oldest ``min_lag_s`` old."""

MIN_DIRTY = 1000
"""...and at least this many elements are new: a pass reads the whole log, which a
handful of new elements is not worth."""


@dataclass(frozen=True, slots=True)
class Entries:
    """The elements a pass looks at, in position order (parallel sequences)."""

    keys: Sequence[Any]
    """Each element's key (None: it has none, and is kept)."""
    sequences: np.ndarray
    """Each element's position (ascending)."""
    stamps: np.ndarray
    """Each element's append time (seconds since the epoch)."""
    tombstones: np.ndarray
    """Whether each element is a delete (its value is None)."""

    def __len__(self) -> int:
        return len(self.sequences)


def point_of(sequences: np.ndarray, stamps: np.ndarray, now: float, settings: Compaction) -> int:
    """The compaction point: the first position appended less than ``min_lag_s`` before
    ``now`` (``sequences[-1] + 1`` when there is none; 0 for no elements)."""
    if not len(sequences):
        return 0
    young = np.flatnonzero(stamps > now - settings.min_lag_s)
    return int(sequences[young[0]]) if len(young) else int(sequences[-1]) + 1


def expiry_of(stamp: float, settings: Compaction) -> float:
    """When a tombstone appended at ``stamp`` goes: ``tombstone_retention_s`` after it
    became eligible."""
    return stamp + settings.min_lag_s + settings.tombstone_retention_s


def kept(entries: Entries, point: int, now: float, settings: Compaction) -> np.ndarray:
    """Which of ``entries`` a pass at ``now`` with compaction point ``point`` keeps
    (a bool per element; see the module docstring for the rules)."""
    count = len(entries)
    keep = np.ones(count, dtype=bool)
    if not count:
        return keep
    below = int(np.searchsorted(entries.sequences, point))
    if below <= 0:
        return keep
    keys = entries.keys[:below]
    latest = dict(zip(keys, range(below), strict=True))  # a key's last element wins
    keep[:below] = False
    if latest.pop(None, None) is not None:  # elements without a key all stay
        keep[:below] = np.fromiter((key is None for key in keys), dtype=bool, count=below)
    survivors = np.fromiter(latest.values(), dtype=np.int64, count=len(latest))
    keep[survivors] = True
    gone = survivors[entries.tombstones[survivors]]
    if len(gone):
        expired = entries.stamps[gone] + settings.min_lag_s + settings.tombstone_retention_s <= now
        keep[gone[expired]] = False
    keep[-1] = True  # the last element always stays
    return keep


@dataclass(frozen=True, slots=True)
class Dirt:
    """What a channel appended since its last pass, as the schedule reads it."""

    oldest: float | None
    """The append time of the oldest element since the last pass (None: none)."""
    count: int
    """How many elements were appended since then."""
    held: int
    """How many elements the channel holds now."""
    full: bool
    """Whether the channel has no room left (a blocked publisher waits for a pass)."""
    tombstone_expiry: float | None
    """When the first tombstone the last pass kept is due to go (None: none kept)."""
    quiet_until: float = 0.0
    """Before this time a pass runs only when ``max_lag_s`` or a tombstone says so: a
    full or half-new channel does not start one pass after another (the channel
    sets it from its last pass's end and length)."""


def next_due(dirt: Dirt, settings: Compaction) -> float | None:
    """When the next pass is due (seconds since the epoch; in the past: now), or None
    when nothing would change until more is appended."""
    due: list[float] = []
    if dirt.tombstone_expiry is not None:
        due.append(dirt.tombstone_expiry)
    if dirt.oldest is not None:
        due.append(dirt.oldest + settings.max_lag_s)
        if dirt.full or dirt.count >= max(MIN_DIRTY, DIRTY_RATIO * dirt.held):
            due.append(max(dirt.oldest + settings.min_lag_s, dirt.quiet_until))
    return min(due) if due else None
