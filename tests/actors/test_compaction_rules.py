"""The compaction rules alone (no Ray, no I/O): what a pass keeps, its point, and when the
next pass is due; the guarantees checked on histories hypothesis draws."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from raytopic.actors.compaction_rules import (
    MIN_DIRTY,
    Dirt,
    Entries,
    expiry_of,
    kept,
    next_due,
    point_of,
)
from raytopic.core.compaction import Compaction

SETTINGS = Compaction(min_lag_s=10.0, max_lag_s=60.0, tombstone_retention_s=100.0)


def entries(rows: list[tuple[object, bool, float]], first: int = 0, gaps: int = 0) -> Entries:
    """(key, tombstone, stamp) per element, at positions from ``first``, ``gaps`` apart."""
    return Entries(
        [key for key, _, _ in rows],
        np.arange(len(rows), dtype=np.int64) * (gaps + 1) + first,
        np.array([stamp for _, _, stamp in rows], dtype=np.float64),
        np.array([tombstone for _, tombstone, _ in rows], dtype=bool),
    )


def test_the_latest_element_of_each_key_below_the_point_stays() -> None:
    rows = [("a", False, 0.0), ("b", False, 1.0), ("a", False, 2.0), ("c", False, 3.0)]
    rows += [("a", False, 4.0)]
    assert kept(entries(rows), point=4, now=50.0, settings=SETTINGS).tolist() == [
        False,  # a, superseded below the point
        True,
        True,  # a's latest below the point: it stays even though a newer one is above
        True,
        True,  # at the point: never compacted
    ]


def test_the_last_element_stays_even_as_an_expired_tombstone() -> None:
    rows = [("a", False, 0.0), ("a", True, 1.0)]
    assert kept(entries(rows), point=10, now=1e9, settings=SETTINGS).tolist() == [False, True]
    rows.append(("b", False, 2.0))
    assert kept(entries(rows), point=10, now=1e9, settings=SETTINGS).tolist() == [
        False,
        False,  # a's tombstone went, and a's value with it
        True,
    ]


def test_a_tombstone_stays_until_its_retention_after_it_became_eligible() -> None:
    rows = [("a", False, 0.0), ("a", True, 5.0), ("z", False, 6.0)]
    expiry = expiry_of(5.0, SETTINGS)
    assert expiry == 5.0 + 10.0 + 100.0
    assert kept(entries(rows), 10, expiry - 0.001, SETTINGS).tolist() == [False, True, True]
    assert kept(entries(rows), 10, expiry, SETTINGS).tolist() == [False, False, True]


def test_elements_without_a_key_stay() -> None:
    rows = [(None, False, 0.0), ("a", False, 1.0), (None, False, 2.0), ("a", False, 3.0)]
    rows.append(("z", False, 4.0))
    assert kept(entries(rows), 10, 100.0, SETTINGS).tolist() == [True, False, True, True, True]


def test_the_point_is_the_first_position_younger_than_min_lag() -> None:
    sequences = np.array([3, 7, 9], dtype=np.int64)
    stamps = np.array([100.0, 105.0, 111.0])
    assert point_of(sequences, stamps, now=116.0, settings=SETTINGS) == 9  # 111 > 116 - 10
    assert point_of(sequences, stamps, now=114.0, settings=SETTINGS) == 7  # 105 > 114 - 10
    assert point_of(sequences, stamps, now=200.0, settings=SETTINGS) == 10  # all eligible
    assert point_of(sequences, stamps, now=100.0, settings=SETTINGS) == 3
    assert point_of(np.array([], np.int64), np.array([]), 0.0, SETTINGS) == 0


KEYS = st.sampled_from(["a", "b", "c", b"c", 1, 2])


@st.composite
def histories(draw: st.DrawFn) -> tuple[Entries, int, float]:
    count = draw(st.integers(1, 40))
    rows = []
    stamp = 0.0
    for _ in range(count):
        stamp += draw(st.floats(0.0, 30.0))
        rows.append((draw(KEYS), draw(st.booleans()), stamp))
    history = entries(rows, first=draw(st.integers(0, 5)), gaps=draw(st.integers(0, 2)))
    now = stamp + draw(st.floats(0.0, 300.0))
    return history, point_of(history.sequences, history.stamps, now, SETTINGS), now


@given(histories())
def test_kafkas_guarantees_hold_for_any_history(history: tuple[Entries, int, float]) -> None:
    log, point, now = history
    keep = kept(log, point, now, SETTINGS)
    sequences = log.sequences.tolist()
    # A reader within min_lag_s of the tail sees everything; the last element stays.
    assert all(keep[i] for i, sequence in enumerate(sequences) if sequence >= point)
    assert keep[-1]
    for key in set(log.keys):
        mine = [i for i, k in enumerate(log.keys) if k == key and sequences[i] < point]
        if not mine:
            continue
        latest = mine[-1]
        expired = bool(log.tombstones[latest]) and expiry_of(log.stamps[latest], SETTINGS) <= now
        # The latest element of every key survives (but an expired tombstone, or the last).
        assert keep[latest] == (not expired or latest == len(sequences) - 1)
        # Nothing older of the key survives below the point: a deleted key never comes back.
        assert not any(keep[i] for i in mine[:-1])


def test_a_pass_is_due_max_lag_after_the_oldest_new_element() -> None:
    quiet = Dirt(oldest=1000.0, count=1, held=1, full=False, tombstone_expiry=None)
    assert next_due(quiet, SETTINGS) == 1060.0  # a quiet channel is compacted too
    assert next_due(Dirt(None, 0, 5, False, None), SETTINGS) is None  # nothing new


def test_a_pass_is_due_as_soon_as_eligible_when_full_or_half_new() -> None:
    full = Dirt(oldest=1000.0, count=3, held=10, full=True, tombstone_expiry=None)
    assert next_due(full, SETTINGS) == 1010.0  # min_lag_s after the oldest new one
    dirty = Dirt(
        oldest=1000.0, count=MIN_DIRTY, held=2 * MIN_DIRTY, full=False, tombstone_expiry=None
    )
    assert next_due(dirty, SETTINGS) == 1010.0
    few = Dirt(
        oldest=1000.0, count=MIN_DIRTY - 1, held=MIN_DIRTY, full=False, tombstone_expiry=None
    )
    assert next_due(few, SETTINGS) == 1060.0


def test_full_or_dirty_passes_wait_for_the_quiet_time_after_the_last() -> None:
    full = Dirt(oldest=1000.0, count=3, held=10, full=True, tombstone_expiry=None)
    later = Dirt(1000.0, 3, 10, True, None, quiet_until=1030.0)
    assert next_due(full, SETTINGS) == 1010.0
    assert next_due(later, SETTINGS) == 1030.0
    assert next_due(Dirt(1000.0, 3, 10, True, None, quiet_until=2000.0), SETTINGS) == 1060.0


def test_a_pass_is_due_when_a_kept_tombstone_expires() -> None:
    assert next_due(Dirt(None, 0, 5, False, 2000.0), SETTINGS) == 2000.0
    assert next_due(Dirt(1000.0, 1, 5, False, 2000.0), SETTINGS) == 1060.0
