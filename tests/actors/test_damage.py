"""The damaged-records rule, without Ray: the map of damaged ranges, the split every
reader applies, the error it raises, and how each kind of cursor moves past."""

from __future__ import annotations

import pickle

import pytest

from raytopic.actors.cursors import Cursor
from raytopic.actors.damage import DamageMap
from raytopic.actors.segment_ring import Run, SegmentRing
from raytopic.actors.shared_cursor import SharedCursor
from raytopic.core.errors import DataLossError
from raytopic.core.payloads import DamagedElements, PickledValues


def _run(first: int, values: list[int]) -> Run:
    return Run(first, 1.0, PickledValues.from_values(values))


def test_ranges_are_kept_sorted_and_joined_when_they_touch() -> None:
    damage = DamageMap([(30, 39), (10, 19), (20, 24)])
    assert damage.ranges == [(10, 24), (30, 39)]
    assert damage.at(9) is None and damage.at(10) == (10, 24) and damage.at(24) == (10, 24)
    assert damage.at(25) is None and damage.at(35) == (30, 39) and damage.at(40) is None
    assert damage.first_from(0) == (10, 24) and damage.first_from(25) == (30, 39)
    assert damage.first_from(40) is None
    assert damage.overlapping(20, 31) == [(10, 24), (30, 39)]
    assert not DamageMap() and damage


def test_a_read_stops_before_a_damaged_range_and_names_all_of_it() -> None:
    damage = DamageMap([(10, 19)])
    runs = [_run(5, [5, 6, 7, 8, 9]), Run(10, 1.0, DamagedElements(3)), _run(20, [20])]
    usable, lost = damage.split(runs)
    assert usable == runs[:1] and lost == (10, 19)  # the whole range, not the slice read
    assert damage.split(runs[2:]) == (runs[2:], None)
    assert damage.split(runs[1:]) == ([], (10, 19))


def test_the_error_names_the_range_and_where_reading_goes_on() -> None:
    error = DamageMap.error(3, 2, (10, 19))
    assert isinstance(error, DataLossError)
    assert (error.channel, error.lost, error.head_sequence) == (3, (10, 19), 20)
    assert "10..19" in str(error)
    again = pickle.loads(pickle.dumps(error))  # it crosses processes inside Ray
    assert (again.lost, again.head_sequence, again.new_epoch) == ((10, 19), 20, 2)


def test_damaged_elements_keep_their_places_in_a_ring_and_are_never_decoded() -> None:
    ring = SegmentRing(100)
    ring.append(PickledValues.from_values(range(10)), overwrite=True)
    ring.append(DamagedElements(5), overwrite=True)
    ring.append(PickledValues.from_values(range(15, 20)), overwrite=True)
    assert (ring.head, ring.tail) == (0, 19)
    runs = ring.read(8, 10)
    assert [type(run.payload).__name__ for run in runs] == [
        "PickledValues",
        "DamagedElements",
        "PickledValues",
    ]
    assert (runs[1].first, len(runs[1].payload), runs[1].payload.nbytes) == (10, 5, 0)
    with pytest.raises(ValueError):
        runs[1].payload.decode()


def test_a_cursor_passes_over_a_damaged_range_without_moving_its_commit() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(9, 10)
    cursor.pass_lost(10, 19)
    assert (cursor.next, cursor.committed) == (20, -1)
    assert cursor.unacked == 10  # the lost ones are not waited for
    mid = Cursor.starting_at(15)  # restored inside the range
    mid.pass_lost(10, 19)
    assert mid.next == 20


def test_a_shared_group_settles_a_damaged_range_and_what_it_held_there() -> None:
    cursor = SharedCursor.starting_at(0)
    assert cursor.hold_new("m", 12, 20, 0.0, 30.0) == 12  # 0..11 held
    assert cursor.ack(0, "m", 1)
    forgotten = cursor.forget(10, 14)
    assert forgotten == 2  # 10 and 11 were held
    assert cursor.next == 15 and 10 not in cursor.held and cursor.held_by("m") == 9
    for sequence in range(1, 10):
        cursor.ack(sequence, "m", 1)
    assert cursor.floor == 14  # acked 0..9 and the lost 10..14 are all settled
