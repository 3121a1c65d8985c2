"""A shared take from a real ring, without Ray: the fast path, the filter, key
order with keyed and unkeyed values, and the converter."""

from __future__ import annotations

import pickle

from raytopic.actors.segment_ring import SegmentRing
from raytopic.actors.shared_cursor import SharedCursor
from raytopic.actors.shared_take import take_shared
from raytopic.core.payloads import PickledValues


def ring_of(values: list[object], keys: list[object] | None = None) -> SegmentRing:
    ring = SegmentRing(100)
    ring.append(PickledValues.from_pickles([pickle.dumps(v) for v in values], keys), False)
    return ring


def values(chunks) -> list[object]:
    return [v for chunk in chunks for v in chunk.payload.decode()]


def test_new_elements_in_a_row_come_whole_with_first_deliveries():
    ring = ring_of(list(range(5)))
    cursor = SharedCursor.starting_at(0)
    chunks = take_shared(cursor, ring, "a", 3, 0.0, 30.0)
    assert values(chunks) == [0, 1, 2] and chunks[0].counts is None
    assert cursor.holdings() == {"a": 3} and cursor.next == 3


def test_redeliveries_come_first_with_their_counts():
    ring = ring_of(list(range(5)))
    cursor = SharedCursor.starting_at(0)
    take_shared(cursor, ring, "a", 2, 0.0, 30.0)
    cursor.nack(1, "a", 1, 0.0, None)
    chunks = take_shared(cursor, ring, "b", 3, 0.0, 30.0)
    assert values(chunks) == [1, 2, 3]
    assert [c.counts.tolist() for c in chunks] == [[2], [1, 1]]


def test_the_filter_settles_what_it_does_not_take_and_the_converter_runs():
    ring = ring_of(list(range(6)))
    cursor = SharedCursor.starting_at(0)
    chunks = take_shared(
        cursor, ring, "a", 10, 0.0, 30.0, keep=lambda v: v % 2 == 0, convert=lambda v: v * 10
    )
    assert values(chunks) == [0, 20, 40]
    for chunk in chunks:
        cursor.ack(chunk.first, "a", 1)
    assert cursor.floor == 5  # the odd ones never belonged to the group


def test_unkeyed_values_are_not_held_back_by_key_order():
    ring = ring_of(["k", "u1", "u2", "u3"], keys=["k", None, None, None])
    cursor = SharedCursor.starting_at(0)
    assert values(take_shared(cursor, ring, "a", 2, 0.0, 30.0, key_order=True)) == ["k", "u1"]
    assert values(take_shared(cursor, ring, "b", 5, 0.0, 30.0, key_order=True)) == ["u2", "u3"]


def test_converted_values_keep_their_keys():
    ring = ring_of([1, 2, 3], keys=["a", None, "c"])
    cursor = SharedCursor.starting_at(0)
    chunks = take_shared(cursor, ring, "a", 3, 0.0, 30.0, convert=lambda v: v * 10)
    assert values(chunks) == [10, 20, 30]
    assert [key for chunk in chunks for key in chunk.payload.keys] == ["a", None, "c"]


def test_a_filter_or_converter_that_raises_nacks_its_element_and_takes_the_rest():
    ring = ring_of(list(range(6)))
    cursor = SharedCursor.starting_at(0)
    chunks = take_shared(
        cursor,
        ring,
        "a",
        10,
        0.0,
        30.0,
        keep=lambda v: 1 / (v - 2) != 0,
        convert=lambda v: 10 // (v - 4),
        max_deliveries=1,
    )
    assert values(chunks) == [-3, -4, -10, 10]  # 0, 1, 3, 5: 2 and 4 are poison
    assert sorted(cursor.dead) == [2, 4]  # nacked at once: past max_deliveries, dead letters
    assert cursor.holdings() == {"a": 4}
