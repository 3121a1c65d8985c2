"""Unit tests of the pure SegmentRing (no Ray): sequences, overflow, TTL, reads, time lookups."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytopic.actors.segment_ring import RingPlan, Run, SegmentRing, plan_compaction
from raytopic.core.payloads import PickledValues


class Clock:
    """A settable clock for TTL and time-stamp tests."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Values(list):
    """The smallest payload: the ring only counts, slices and hands back its payloads."""

    def slice(self, start: int, stop: int) -> Values:
        return Values(self[start:stop])

    def decode(self) -> list[Any]:
        return list(self)


def got(ring: SegmentRing, sequence: int) -> tuple[float, Any]:
    """(stamp, value) stored at ``sequence``."""
    run = ring.get(sequence)
    assert run.first == sequence and len(run.payload) == 1
    return run.stamp, run.payload.decode()[0]


def flatten(runs: list[Run]) -> list[tuple[int, float, Any]]:
    """(sequence, stamp, payload) of every element in ``runs``."""
    return [
        (run.first + offset, run.stamp, payload)
        for run in runs
        for offset, payload in enumerate(run.payload.decode())
    ]


# -- sizes and sequences -----------------------------------------------------


def test_the_newest_element_outlives_its_removal_until_the_next_append() -> None:
    clock = Clock()
    ring = SegmentRing(5, clock=clock)
    assert ring.newest_element() is None  # nothing appended yet
    ring.append(Values(["a", "b"]), overwrite=False)
    clock.now += 1
    ring.append(Values(["c", "d"]), overwrite=False)
    ring.evict_to(4)  # every element removed (committed, say)
    assert ring.size == 0
    sequence, stamp, payload = ring.newest_element()  # type: ignore[misc]
    assert (sequence, stamp, list(payload)) == (3, 1001.0, ["d"])
    ring.append_at(Values(["e"]), 7, 1002.0)  # a store's record (on recovery)
    assert ring.newest_element()[0] == 7  # type: ignore[index]


def test_fresh_buffer_is_empty_with_head_zero_and_tail_minus_one() -> None:
    ring = SegmentRing(5)
    assert (ring.head, ring.tail, ring.size, ring.room(), ring.capacity) == (0, -1, 0, 5, 5)
    assert ring.read(0, 10) == []


def test_first_sequence_continues_after_a_store() -> None:
    ring = SegmentRing(5, first_sequence=42)
    assert (ring.head, ring.tail, ring.size) == (42, 41, 0)
    assert ring.append(Values(["a", "b"]), overwrite=False) == 42
    assert (ring.head, ring.tail, ring.size) == (42, 43, 2)
    assert got(ring, 43)[1] == "b"


def test_append_returns_the_first_sequence_of_each_batch() -> None:
    ring = SegmentRing(10)
    assert ring.append(Values(["a"]), overwrite=False) == 0
    assert ring.append(Values(["b", "c", "d"]), overwrite=False) == 1
    assert ring.append(Values(["e", "f"]), overwrite=True) == 4
    assert (ring.head, ring.tail, ring.size, ring.room()) == (0, 5, 6, 4)
    assert [got(ring, seq)[1] for seq in range(6)] == ["a", "b", "c", "d", "e", "f"]


def test_empty_batch_changes_nothing_and_returns_the_tail() -> None:
    ring = SegmentRing(3)
    assert ring.append(Values([]), overwrite=False) == -1
    assert ring.append(Values([]), overwrite=True) == -1
    assert (ring.head, ring.tail, ring.size) == (0, -1, 0)
    ring.append(Values(["a", "b", "c"]), overwrite=False)
    # Full: an empty batch still "fits" and returns the tail, with either policy.
    assert ring.append(Values([]), overwrite=False) == 2
    assert ring.append(Values([]), overwrite=True) == 2
    assert (ring.head, ring.tail, ring.size) == (0, 2, 3)


def test_fail_policy_refuses_a_batch_that_does_not_fit_whole() -> None:
    ring = SegmentRing(4)
    assert ring.append(Values(["a", "b", "c"]), overwrite=False) == 0
    assert ring.append(Values(["d", "e"]), overwrite=False) == -1
    assert (ring.head, ring.tail, ring.size, ring.room()) == (0, 2, 3, 1)
    assert [p for _, _, p in flatten(ring.read(0, 10))] == ["a", "b", "c"]
    # Exactly the room left fits.
    assert ring.append(Values(["d"]), overwrite=False) == 3
    assert ring.room() == 0
    assert ring.append(Values(["e"]), overwrite=False) == -1
    assert ring.tail == 3


def test_fail_policy_refuses_a_batch_larger_than_capacity_on_an_empty_buffer() -> None:
    ring = SegmentRing(2)
    assert ring.append(Values(["a", "b", "c"]), overwrite=False) == -1
    assert (ring.head, ring.tail, ring.size) == (0, -1, 0)


def test_overwrite_policy_evicts_the_oldest() -> None:
    ring = SegmentRing(3)
    ring.append(Values(["a", "b"]), overwrite=True)
    assert ring.append(Values(["c", "d"]), overwrite=True) == 2
    assert (ring.head, ring.tail, ring.size, ring.room()) == (1, 3, 3, 0)
    assert [p for _, _, p in flatten(ring.read(1, 10))] == ["b", "c", "d"]
    assert ring.append(Values(["e"]), overwrite=True) == 4
    assert (ring.head, ring.tail) == (2, 4)


def test_overwrite_batch_larger_than_capacity_keeps_its_last_elements() -> None:
    ring = SegmentRing(3)
    ring.append(Values(["x"]), overwrite=True)
    assert ring.append(Values(["a", "b", "c", "d", "e"]), overwrite=True) == 1
    assert (ring.head, ring.tail, ring.size) == (3, 5, 3)
    assert flatten(ring.read(3, 10)) == [
        (3, got(ring, 3)[0], "c"),
        (4, got(ring, 3)[0], "d"),
        (5, got(ring, 3)[0], "e"),
    ]
    with pytest.raises(IndexError):
        ring.get(2)


def test_evict_to_drops_below_the_sequence_and_counts() -> None:
    ring = SegmentRing(10)
    ring.append(Values(["a", "b", "c"]), overwrite=False)
    ring.append(Values(["d", "e"]), overwrite=False)
    assert ring.evict_to(2) == 2
    assert (ring.head, ring.tail, ring.size, ring.room()) == (2, 4, 3, 7)
    assert ring.evict_to(2) == 0  # at the head: nothing
    assert ring.evict_to(1) == 0  # below the head: nothing
    assert ring.head == 2
    assert ring.evict_to(100) == 3  # clamped to tail + 1
    assert (ring.head, ring.tail, ring.size) == (5, 4, 0)
    assert ring.append(Values(["f"]), overwrite=False) == 5
    assert flatten(ring.read(5, 10))[0][2] == "f"


# -- reading -----------------------------------------------------------------


def test_read_slices_across_segments_into_runs() -> None:
    clock = Clock(100.0)
    ring = SegmentRing(100, clock=clock)
    ring.append(Values(["a", "b", "c"]), overwrite=False)
    clock.now = 200.0
    ring.append(Values(["d", "e"]), overwrite=False)
    clock.now = 300.0
    ring.append(Values(["f", "g", "h"]), overwrite=False)

    runs = ring.read(1, 6)
    assert [(run.first, run.stamp, run.payload.decode(), run.last) for run in runs] == [
        (1, 100.0, ["b", "c"], 2),
        (3, 200.0, ["d", "e"], 4),
        (5, 300.0, ["f", "g"], 6),
    ]
    assert [(r.first, r.payload.decode()) for r in ring.read(0, 3)] == [(0, ["a", "b", "c"])]
    assert [(r.first, r.payload.decode()) for r in ring.read(7, 100)] == [(7, ["h"])]
    assert [(r.first, r.payload.decode()) for r in ring.read(4, 1)] == [(4, ["e"])]


def test_read_at_or_beyond_tail_plus_one_and_zero_count_return_nothing() -> None:
    ring = SegmentRing(10)
    ring.append(Values(["a", "b"]), overwrite=False)
    assert ring.read(2, 5) == []
    assert ring.read(50, 5) == []
    assert ring.read(0, 0) == []


def test_read_below_the_head_raises_index_error() -> None:
    ring = SegmentRing(2)
    ring.append(Values(["a", "b", "c"]), overwrite=True)
    assert ring.head == 1
    with pytest.raises(IndexError, match="below the head"):
        ring.read(0, 1)


def test_get_returns_stamp_and_payload_and_rejects_unstored_sequences() -> None:
    clock = Clock(5.0)
    ring = SegmentRing(3, clock=clock)
    ring.append(Values(["a"]), overwrite=False)
    clock.now = 6.5
    ring.append(Values(["b", "c"]), overwrite=False)
    assert got(ring, 0) == (5.0, "a")
    assert got(ring, 2) == (6.5, "c")
    for bad in (-1, 3, 100):
        with pytest.raises(IndexError):
            ring.get(bad)
    ring.append(Values(["d"]), overwrite=True)
    with pytest.raises(IndexError):
        ring.get(0)
    assert got(ring, 3) == (6.5, "d")


def test_run_last_is_the_sequence_of_its_last_payload() -> None:
    assert Run(10, 0.0, ["a", "b", "c"]).last == 12
    assert Run(10, 0.0, ["a"]).last == 10


# -- time stamps and TTL -----------------------------------------------------


def test_stamps_never_decrease_when_the_clock_steps_back() -> None:
    clock = Clock(100.0)
    ring = SegmentRing(10, clock=clock)
    ring.append(Values(["a"]), overwrite=False)
    assert ring.stamp_of_last_append() == 100.0
    clock.now = 50.0
    ring.append(Values(["b"]), overwrite=False)
    assert ring.stamp_of_last_append() == 100.0
    assert got(ring, 1) == (100.0, "b")
    clock.now = 150.0
    ring.append(Values(["c"]), overwrite=False)
    assert got(ring, 2) == (150.0, "c")
    assert ring.first_after(99.9) == 0
    assert ring.first_after(100.0) == 2
    assert ring.first_after(150.0) == 3


def test_first_after_finds_the_first_element_stamped_strictly_later() -> None:
    clock = Clock(100.0)
    ring = SegmentRing(100, clock=clock)
    ring.append(Values(["a", "b"]), overwrite=False)  # 0, 1 @ 100
    clock.now = 200.0
    ring.append(Values(["c"]), overwrite=False)  # 2 @ 200
    clock.now = 300.0
    ring.append(Values(["d", "e", "f"]), overwrite=False)  # 3..5 @ 300
    assert ring.first_after(0.0) == 0
    assert ring.first_after(99.999) == 0
    assert ring.first_after(100.0) == 2
    assert ring.first_after(150.0) == 2
    assert ring.first_after(200.0) == 3
    assert ring.first_after(299.0) == 3
    assert ring.first_after(300.0) == 6  # none: tail + 1
    assert ring.first_after(1e12) == 6


def test_first_after_on_an_empty_buffer_is_tail_plus_one() -> None:
    assert SegmentRing(3).first_after(0.0) == 0
    assert SegmentRing(3, first_sequence=7).first_after(0.0) == 7


def test_first_after_never_returns_a_sequence_below_the_head() -> None:
    clock = Clock(100.0)
    ring = SegmentRing(3, clock=clock)
    ring.append(Values(["a", "b", "c"]), overwrite=True)  # 0..2 @ 100
    clock.now = 200.0
    ring.append(Values(["d"]), overwrite=True)  # evicts 0; 3 @ 200
    assert ring.head == 1
    assert ring.first_after(0.0) == 1
    assert ring.first_after(100.0) == 3
    ring.evict_to(4)
    assert ring.first_after(0.0) == 4  # empty: tail + 1


def test_ttl_expires_old_elements_on_access() -> None:
    clock = Clock(1000.0)
    ring = SegmentRing(10, ttl=10.0, clock=clock)
    ring.append(Values(["a", "b"]), overwrite=False)  # @ 1000
    clock.now = 1005.0
    ring.append(Values(["c"]), overwrite=False)  # @ 1005
    clock.now = 1009.9
    assert (ring.head, ring.tail, ring.size, ring.room()) == (0, 2, 3, 7)
    clock.now = 1010.1
    assert (ring.head, ring.tail, ring.size, ring.room()) == (2, 2, 1, 9)
    assert got(ring, 2) == (1005.0, "c")
    clock.now = 1015.1
    assert (ring.head, ring.tail, ring.size, ring.room()) == (3, 2, 0, 10)
    # Sequences keep growing after everything expired.
    assert ring.append(Values(["d"]), overwrite=False) == 3
    assert (ring.head, ring.tail, ring.size) == (3, 3, 1)


def test_expire_returns_the_number_dropped() -> None:
    clock = Clock(0.0)
    ring = SegmentRing(10, ttl=1.0, clock=clock)
    assert ring.expire() == 0
    ring.append(Values(["a", "b"]), overwrite=False)
    clock.now = 0.5
    ring.append(Values(["c"]), overwrite=False)
    assert ring.expire() == 0
    clock.now = 1.2
    assert ring.expire() == 2
    assert ring.expire() == 0
    clock.now = 2.0
    assert ring.expire() == 1
    assert ring.size == 0


def test_expired_below_marks_what_the_ttl_dropped_and_nothing_else() -> None:
    clock = Clock(0.0)
    ring = SegmentRing(10, ttl=1.0, clock=clock, first_sequence=5)
    assert ring.expired_below == 5
    ring.append(Values(["a", "b", "c"]), overwrite=False)  # 5..7 @ 0
    ring.evict_to(6)  # a commit released 5: not an expiry
    assert ring.expired_below == 5
    clock.now = 0.5
    ring.append(Values(["d"]), overwrite=False)  # 8 @ 0.5
    clock.now = 1.2
    assert ring.expired_below == 8  # 6 and 7 expired (read through the property)
    assert ring.head == 8
    clock.now = 2.0
    assert ring.expired_below == 9
    ring.append(Values(["e"]), overwrite=False)
    assert ring.expired_below == 9  # an append never moves it


def test_without_ttl_nothing_expires() -> None:
    clock = Clock(0.0)
    ring = SegmentRing(3, clock=clock)
    ring.append(Values(["a"]), overwrite=False)
    clock.now = 1e9
    assert ring.expire() == 0
    assert (ring.head, ring.size) == (0, 1)


def test_ttl_expires_the_rest_of_a_partly_overwritten_segment() -> None:
    clock = Clock(0.0)
    ring = SegmentRing(3, ttl=10.0, clock=clock)
    ring.append(Values(["a", "b"]), overwrite=True)  # 0, 1 @ 0
    clock.now = 5.0
    ring.append(Values(["c", "d"]), overwrite=True)  # 2, 3 @ 5; evicts 0
    assert ring.head == 1
    clock.now = 12.0
    assert (ring.head, ring.size) == (2, 2)
    assert flatten(ring.read(2, 10)) == [(2, 5.0, "c"), (3, 5.0, "d")]


def test_fail_policy_sees_room_freed_by_ttl() -> None:
    clock = Clock(0.0)
    ring = SegmentRing(2, ttl=1.0, clock=clock)
    ring.append(Values(["a", "b"]), overwrite=False)
    assert ring.append(Values(["c"]), overwrite=False) == -1
    clock.now = 2.0
    assert ring.append(Values(["c", "d"]), overwrite=False) == 2
    assert (ring.head, ring.tail) == (2, 3)


def test_first_after_expires_before_searching() -> None:
    clock = Clock(0.0)
    ring = SegmentRing(10, ttl=5.0, clock=clock)
    ring.append(Values(["a"]), overwrite=False)  # @ 0
    clock.now = 3.0
    ring.append(Values(["b"]), overwrite=False)  # @ 3
    clock.now = 6.0  # "a" expired
    assert ring.first_after(-1.0) == 1


def test_many_small_evictions_keep_every_lookup_right() -> None:
    # Hundreds of one-element segments: the segment list is compacted on the way.
    clock = Clock(0.0)
    ring = SegmentRing(10, clock=clock)
    for value in range(500):
        clock.now = float(value)
        assert ring.append(Values([value]), overwrite=True) == value
    assert (ring.head, ring.tail, ring.size) == (490, 499, 10)
    assert flatten(ring.read(490, 100)) == [(s, float(s), s) for s in range(490, 500)]
    assert [got(ring, s) for s in (490, 495, 499)] == [(490.0, 490), (495.0, 495), (499.0, 499)]
    assert ring.first_after(0.0) == 490
    assert ring.first_after(494.5) == 495
    assert ring.first_after(499.0) == 500
    ring.evict_to(497)
    assert flatten(ring.read(497, 100)) == [(s, float(s), s) for s in range(497, 500)]


def test_many_ttl_expiries_keep_every_lookup_right() -> None:
    clock = Clock(0.0)
    ring = SegmentRing(1000, ttl=5.0, clock=clock)
    for value in range(300):
        clock.now = float(value)
        ring.append(Values([value, -value]), overwrite=False)
    clock.now = 299.5
    # Stamps > 294.5 live: values 295..299, sequences 590..599.
    assert (ring.head, ring.tail, ring.size) == (590, 599, 10)
    assert flatten(ring.read(590, 4)) == [
        (590, 295.0, 295),
        (591, 295.0, -295),
        (592, 296.0, 296),
        (593, 296.0, -296),
    ]
    assert ring.first_after(296.0) == 594


# -- a model check -----------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 6), st.booleans()),
        st.tuples(st.just("evict"), st.integers(-3, 40)),
        st.tuples(st.just("tick"), st.sampled_from([-3.0, 0.0, 0.5, 1.0, 2.5, 7.0])),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.integers(1, 8),
    ttl=st.sampled_from([None, 1.05, 3.05, 6.05]),  # never exactly an age: no boundary
    first_sequence=st.integers(0, 5),
    ops=_ops,
)
def test_ring_buffer_matches_a_simple_model(
    capacity: int, ttl: float | None, first_sequence: int, ops: list[tuple]
) -> None:
    clock = Clock(100.0)
    ring = SegmentRing(capacity, ttl, clock=clock, first_sequence=first_sequence)
    items: list[tuple[int, float, int]] = []  # the model: (sequence, stamp, payload)
    head, tail, last_stamp, counter = first_sequence, first_sequence - 1, 0.0, 0

    def model_expire() -> None:
        nonlocal head
        if ttl is not None:
            while items and items[0][1] <= clock.now - ttl:
                items.pop(0)
                head += 1

    for op in ops:
        if op[0] == "append":
            _, count, overwrite = op
            batch = list(range(counter, counter + count))
            counter += count
            model_expire()
            if count == 0:
                expected = tail
            elif not overwrite and count > capacity - len(items):
                expected = -1
            else:
                last_stamp = max(clock.now, last_stamp)
                expected = tail + 1
                for payload in batch:
                    tail += 1
                    items.append((tail, last_stamp, payload))
                while len(items) > capacity:
                    items.pop(0)
                    head += 1
            assert ring.append(Values(batch), overwrite) == expected
        elif op[0] == "evict":
            model_expire()
            asked = head + op[1] - 3  # below, at or beyond the head, even beyond the tail
            dropped = max(0, min(asked, tail + 1) - head)
            del items[:dropped]
            head += dropped
            assert ring.evict_to(asked) == dropped
        else:
            clock.now += op[1]

        model_expire()
        assert ring.head == head
        assert ring.tail == tail
        assert ring.size == len(items) == tail - head + 1
        assert ring.room() == capacity - len(items)
        assert flatten(ring.read(head, capacity + 5)) == items
        for sequence, stamp, payload in items:
            assert got(ring, sequence) == (stamp, payload)
        for probe in (0.0, clock.now - 1.5, clock.now, last_stamp, last_stamp - 0.5):
            later = [seq for seq, stamp, _ in items if stamp > probe]
            assert ring.first_after(probe) == (later[0] if later else tail + 1)


# -- compaction: gapped segments -----------------------------------------------


def pickled(values: list[Any], keys: list[Any] | None = None) -> PickledValues:
    return PickledValues.from_pickles([pickle.dumps(v) for v in values], keys)


def compacted(ring: SegmentRing, stop: int, removed: set[int]) -> RingPlan:
    """Compact ``ring`` below ``stop``: the sequences in ``removed`` go."""
    plan = plan_compaction(
        ring.snapshot(stop),
        lambda sequences: np.array([int(s) not in removed for s in sequences], dtype=bool),
    )
    assert ring.install(plan)
    return plan


def elements(ring: SegmentRing, start: int | None = None) -> list[tuple[int, float, Any, Any]]:
    """(sequence, stamp, value, key) of every element from ``start`` (default: the head)."""
    out = []
    for run in ring.read(ring.head if start is None else start, 10**9):
        keys = run.payload.keys or [None] * len(run.payload)
        stamps = [run.stamp] * len(run.payload) if run.stamps is None else run.stamps.tolist()
        for sequence, stamp, value, key in zip(
            run.sequence_list(), stamps, run.payload.decode(), keys, strict=True
        ):
            out.append((sequence, stamp, value, key))
    return out


def test_compaction_leaves_gaps_that_reads_step_over() -> None:
    clock = Clock(100.0)
    ring = SegmentRing(10, clock=clock)
    ring.append(pickled(["a0", "b0", "a1"], ["a", "b", "a"]), False)
    clock.now = 101.0
    ring.append(pickled(["b1", "c0"], ["b", "c"]), False)
    plan = compacted(ring, 5, {0, 1})
    assert plan.removed == 2
    assert (ring.head, ring.tail, ring.size, ring.room()) == (0, 4, 3, 7)
    assert elements(ring) == [
        (2, 100.0, "a1", "a"),
        (3, 101.0, "b1", "b"),
        (4, 101.0, "c0", "c"),
    ]
    assert elements(ring, 1) == elements(ring)  # a gap reads as the next element
    assert [run.first for run in ring.read(0, 1)] == [2]
    with pytest.raises(IndexError, match="compacted away"):
        ring.get(1)
    assert got(ring, 3) == (101.0, "b1")
    assert ring.count(0, 4) == 3 and ring.count(0, 2) == 1
    assert ring.first_after(100.0) == 3 and ring.first_after(99.0) == 2


def test_survivors_of_small_segments_merge_keeping_their_stamps() -> None:
    clock = Clock(100.0)
    ring = SegmentRing(100, clock=clock)
    for n in range(6):  # one value per append: six segments of one
        clock.now = 100.0 + n
        ring.append(pickled([n], [n % 2]), False)
    plan = compacted(ring, 6, {0, 2})
    assert len(plan.segments) == 1  # one segment of the four left
    assert elements(ring) == [(s, 100.0 + s, s, s % 2) for s in (1, 3, 4, 5)]
    assert ring.first_after(103.5) == 4
    assert ring.first_after(100.5) == 1
    # A second pass over the gapped segment keeps positions and times.
    compacted(ring, 6, {3})
    assert elements(ring) == [(s, 100.0 + s, s, s % 2) for s in (1, 4, 5)]
    assert ring.size == 3


def test_capacity_and_eviction_count_the_elements_held() -> None:
    ring = SegmentRing(4)
    ring.append(pickled([0, 1, 2, 3]), False)
    assert ring.append(pickled([4]), False) == -1  # full
    compacted(ring, 4, {1, 2})
    assert ring.room() == 2
    assert ring.append(pickled([4, 5]), False) == 4  # fits now
    assert ring.append(pickled([6]), True) == 6  # overwrite evicts the oldest ELEMENT
    assert [e[0] for e in elements(ring)] == [3, 4, 5, 6]
    assert ring.head == 3  # past the oldest element, and the gap after it
    assert ring.evict_to(5) == 2  # 3 and 4
    assert ring.size == 2


def test_a_plan_is_refused_once_its_segments_were_evicted() -> None:
    ring = SegmentRing(10)
    ring.append(pickled([0, 1, 2]), False)
    ring.append(pickled([3, 4]), False)
    plan = plan_compaction(ring.snapshot(5), lambda s: s % 2 == 0)
    ring.evict_to(1)
    assert not ring.install(plan)
    assert [e[0] for e in elements(ring)] == [1, 2, 3, 4]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 5), min_size=1, max_size=12),
    st.lists(st.sets(st.integers(0, 40)), min_size=1, max_size=3),
)
def test_any_compaction_keeps_exactly_the_survivors_at_their_positions(
    batches: list[int], passes: list[set[int]]
) -> None:
    clock = Clock(0.0)
    ring = SegmentRing(1000, clock=clock)
    expected: dict[int, tuple[float, Any]] = {}
    for number, count in enumerate(batches):
        clock.now = float(number)
        first = ring.tail + 1
        ring.append(pickled([f"v{first + i}" for i in range(count)]), False)
        expected.update({first + i: (float(number), f"v{first + i}") for i in range(count)})
    for removed in passes:
        removed = {s for s in removed if s < ring.tail}  # the tail stays, as the rules say
        compacted(ring, ring.tail + 1, removed)
        for sequence in removed:
            expected.pop(sequence, None)
        assert [(s, t, v) for s, t, v, _ in elements(ring)] == [
            (s, *expected[s]) for s in sorted(expected)
        ]
        assert ring.size == len(expected)
        for start in range(ring.head, ring.tail + 1):  # a read from any position
            later = [s for s in sorted(expected) if s >= start]
            assert [e[0] for e in elements(ring, start)] == later
