"""Unit tests of DoneRanges (no Ray): merging, the commit's advance, the bound."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raytopic.actors.done_ranges import DONE_RANGES_KEPT, DoneRanges


def test_ranges_merge_when_they_touch_or_overlap() -> None:
    done = DoneRanges()
    for first, last in ((10, 12), (20, 20), (14, 15), (13, 13), (16, 19), (30, 31), (5, 6)):
        done.add(first, last)
    assert done == [(5, 6), (10, 20), (30, 31)]
    done.add(7, 8)
    assert done == [(5, 8), (10, 20), (30, 31)]
    done.add(9, 9)
    assert done == [(5, 20), (30, 31)]
    done.add(4, 3)  # empty: nothing
    assert done == [(5, 20), (30, 31)]


def test_the_commit_advances_over_the_range_right_after_it_only() -> None:
    done = DoneRanges([(5, 9), (12, 12)])
    assert done.advance(3) == 3  # 4 is not done
    assert done == [(5, 9), (12, 12)]
    assert done.advance(4) == 9
    assert done == [(12, 12)]
    assert done.advance(20) == 20  # ranges at or below the commit go
    assert not done


def test_count_range_at_and_forget_above() -> None:
    done = DoneRanges([(2, 4), (8, 9)])
    assert done.count(0, 10) == 5 and done.count(3, 8) == 3 and done.count(5, 7) == 0
    assert done.range_at(3) == (2, 4) and done.range_at(5) == (8, 9)
    assert done.range_at(10) is None
    done.forget_above(3)
    assert done == [(2, 3)]


def test_past_the_bound_the_highest_ranges_are_forgotten() -> None:
    done = DoneRanges()
    for sequence in range(0, 2 * (DONE_RANGES_KEPT + 10), 2):
        done.add(sequence, sequence)
    assert len(done.ranges) == DONE_RANGES_KEPT
    assert done.ranges[0] == (0, 0)  # the lowest kept: the commit can still advance


def test_past_the_bound_no_range_at_or_below_a_firm_one_is_forgotten() -> None:
    # Firm: a committed transaction consumed them (forgotten, they would be delivered
    # again: written twice). A seek back below them reads them again: no longer firm.
    done = DoneRanges()
    for sequence in range(0, 2 * (DONE_RANGES_KEPT + 10), 2):
        done.add(sequence, sequence, firm=True)
    done.add(1_000_000, 1_000_000)  # above every firm one: forgotten past the bound
    assert len(done.ranges) == DONE_RANGES_KEPT + 10
    assert done.firm_to == 2 * (DONE_RANGES_KEPT + 9)
    done.forget_above(2 * 99)
    assert done.firm_to == 2 * 99
    for sequence in range(1_001, 1_001 + 2 * DONE_RANGES_KEPT, 2):
        done.add(sequence, sequence)
    assert len(done.ranges) == DONE_RANGES_KEPT
    assert done.ranges[99] == (2 * 99, 2 * 99)


def test_state_round_trips() -> None:
    done = DoneRanges([(1, 3), (7, 7)])
    assert DoneRanges.from_state(done.to_state()) == done
    assert DoneRanges.from_state(None) == []


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 5)), max_size=40))
def test_ranges_hold_exactly_the_positions_added(adds: list[tuple[int, int]]) -> None:
    done, expected = DoneRanges(), set()
    for first, length in adds:
        done.add(first, first + length)
        expected.update(range(first, first + length + 1))
    held = {s for first, last in done.ranges for s in range(first, last + 1)}
    assert held == expected
    assert all(a[1] + 1 < b[0] for a, b in zip(done.ranges, done.ranges[1:], strict=False))


def test_the_commit_advances_only_over_ranges_read_past() -> None:
    done = DoneRanges([(3, 4), (6, 9), (11, 12)])
    assert done.advance(2, read_to=5) == 4  # 6..9 is ahead of the read position
    assert done == [(6, 9), (11, 12)]
    assert done.advance(5, read_to=8) == 5  # 6..9 not wholly read past
    assert done.advance(5, read_to=9) == 9
    assert done.advance(12, read_to=9) == 12  # at or below the commit: dropped
    assert not done
