"""Unit tests of cursor rules (no Ray): commit, seek, reset, grant, skip to head, clamp."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from raytopic.actors.cursors import Cursor, clamp
from raytopic.core.protocol import Lease, Poison
from raytopic.core.records import CommitStatus

COMMITTED = CommitStatus.COMMITTED
ALREADY = CommitStatus.ALREADY_COMMITTED
REJECTED = CommitStatus.REJECTED


def state(cursor: Cursor) -> tuple[int, int, bool, int]:
    """(next, committed, has_commit, jumps)."""
    return cursor.next, cursor.committed, cursor.has_commit, cursor.jumps


# -- clamp and Lease -----------------------------------------------------------


@pytest.mark.parametrize(
    ("sequence", "head", "tail", "expected"),
    [
        (5, 3, 10, 5),
        (2, 3, 10, 2),  # head - 1 is in range: "before the oldest"
        (1, 3, 10, 2),
        (-1, 3, 10, 2),
        (10, 3, 10, 10),
        (11, 3, 10, 10),
        (99, 0, -1, -1),  # empty fresh channel: only -1
        (-5, 0, -1, -1),
        (7, 8, 7, 7),  # empty after eviction: head - 1 == tail
    ],
)
def test_clamp_keeps_a_position_within_head_minus_one_and_tail(
    sequence: int, head: int, tail: int, expected: int
) -> None:
    assert clamp(sequence, head, tail) == expected


def test_lease_is_frozen_hashable_comparable_and_picklable() -> None:
    lease = Lease("m1", 3)
    assert lease == Lease("m1", 3)
    assert lease != Lease("m1", 4)
    assert lease != Lease("m2", 3)
    assert {lease, Lease("m1", 3)} == {lease}
    assert pickle.loads(pickle.dumps(lease)) == lease
    with pytest.raises(dataclasses.FrozenInstanceError):
        lease.generation = 4  # type: ignore[misc]


# -- a fresh cursor ----------------------------------------------------------


def test_starting_at_reads_from_there_with_no_commit() -> None:
    cursor = Cursor.starting_at(5)
    assert state(cursor) == (5, 4, False, 0)
    assert (cursor.owner, cursor.reset_floor, cursor.delivered_high) == (None, None, -1)
    assert cursor.unacked == 0


def test_delivered_moves_next_and_counts_unacked() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=4, next_sequence=5)
    assert (cursor.next, cursor.delivered_high, cursor.unacked) == (5, 4, 5)
    cursor.delivered(last=9, next_sequence=10)
    assert (cursor.next, cursor.delivered_high, cursor.unacked) == (10, 9, 10)
    # A delivery that ends lower (after a seek back) keeps the highest seen.
    cursor.delivered(last=2, next_sequence=3)
    assert (cursor.next, cursor.delivered_high) == (3, 9)


def test_unacked_is_zero_when_the_commit_is_ahead_of_the_read_position() -> None:
    cursor = Cursor(next=3, committed=10, has_commit=True)
    assert cursor.unacked == 0


# -- commit ------------------------------------------------------------------


def test_commit_forward_moves_the_commit_and_nothing_else() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=9, next_sequence=10)
    assert cursor.commit(4, tail=9) is COMMITTED
    assert state(cursor) == (10, 4, True, 0)
    assert cursor.unacked == 5
    assert cursor.commit(9, tail=9) is COMMITTED
    assert state(cursor) == (10, 9, True, 0)
    assert cursor.unacked == 0


def test_commit_at_or_below_the_commit_is_already_committed_and_moves_nothing() -> None:
    cursor = Cursor.starting_at(0)
    assert cursor.commit(6, tail=9) is COMMITTED
    assert cursor.commit(6, tail=9) is ALREADY
    assert cursor.commit(2, tail=9) is ALREADY
    assert cursor.commit(-1, tail=9) is ALREADY
    assert state(cursor) == (0, 6, True, 0)


def test_commit_beyond_the_tail_is_rejected_and_moves_nothing() -> None:
    cursor = Cursor.starting_at(0)
    assert cursor.commit(10, tail=9) is REJECTED
    assert state(cursor) == (0, -1, False, 0)
    assert Cursor.starting_at(0).commit(0, tail=-1) is REJECTED


def test_commit_at_the_start_point_of_a_fresh_cursor_records_a_commit() -> None:
    cursor = Cursor.starting_at(5)  # committed == 4, not from a commit
    assert cursor.commit(4, tail=9) is ALREADY
    assert state(cursor) == (5, 4, True, 0)
    other = Cursor.starting_at(5)
    assert other.commit(1, tail=9) is ALREADY
    assert state(other) == (5, 4, True, 0)  # nothing moved back


def test_a_commit_goes_no_further_than_its_bound() -> None:
    # A resequencing reader's element carries its hand-over mark as the bound.
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=9, next_sequence=10)
    assert cursor.commit(8, tail=9, bound=4) is COMMITTED
    assert state(cursor) == (10, 4, True, 0)
    assert cursor.commit(6, tail=9, bound=3) is ALREADY
    assert cursor.commit(6, tail=9, bound=9) is COMMITTED
    assert cursor.committed == 6
    assert cursor.commit(12, tail=9, bound=4) is REJECTED  # the position asked is checked


def test_commit_does_not_need_a_prior_delivery_without_a_reset() -> None:
    # The owner check happens in the channel; the cursor only guards the tail.
    cursor = Cursor.starting_at(0)
    assert cursor.commit(7, tail=9) is COMMITTED
    assert cursor.committed == 7


# -- reset -------------------------------------------------------------------


def test_reset_moves_read_and_commit_and_bumps_the_jump_count() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=19, next_sequence=20)
    cursor.commit(15, tail=30)
    assert cursor.reset(5, head=0, tail=30) == 5
    assert state(cursor) == (6, 5, True, 1)
    assert (cursor.reset_floor, cursor.delivered_high) == (5, 5)


@pytest.mark.parametrize(("target", "expected"), [(-1, 9), (3, 9), (10, 10), (100, 30)])
def test_reset_clamps_to_head_minus_one_and_tail(target: int, expected: int) -> None:
    cursor = Cursor.starting_at(10)
    assert cursor.reset(target, head=10, tail=30) == expected
    assert (cursor.next, cursor.committed, cursor.reset_floor) == (
        expected + 1,
        expected,
        expected,
    )


def test_commit_received_before_a_reset_is_rejected() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=19, next_sequence=20)  # 0..19 received before the reset
    cursor.reset(10, head=0, tail=30)
    # Below the reset point: received before it, would undo it.
    assert cursor.commit(9, tail=30) is REJECTED
    assert cursor.commit(0, tail=30) is REJECTED
    # Above the reset point but not delivered since: a late commit of an old delivery.
    assert cursor.commit(15, tail=30) is REJECTED
    assert cursor.commit(11, tail=30) is REJECTED
    assert state(cursor) == (11, 10, True, 1)
    # The reset point itself is where the commit already is.
    assert cursor.commit(10, tail=30) is ALREADY


def test_commit_delivered_after_a_reset_is_accepted() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=19, next_sequence=20)
    cursor.reset(10, head=0, tail=30)
    cursor.delivered(last=13, next_sequence=14)  # 11..13 received after the reset
    assert cursor.commit(12, tail=30) is COMMITTED
    assert cursor.commit(13, tail=30) is COMMITTED
    assert cursor.commit(14, tail=30) is REJECTED  # not delivered yet
    assert cursor.commit(12, tail=30) is ALREADY
    assert cursor.commit(9, tail=30) is REJECTED
    assert state(cursor) == (14, 13, True, 1)


def test_second_reset_fences_deliveries_made_between_the_resets() -> None:
    cursor = Cursor.starting_at(0)
    cursor.reset(10, head=0, tail=30)
    cursor.delivered(last=15, next_sequence=16)
    cursor.reset(12, head=0, tail=30)
    assert (cursor.reset_floor, cursor.delivered_high, cursor.jumps) == (12, 12, 2)
    assert cursor.commit(14, tail=30) is REJECTED
    assert cursor.commit(11, tail=30) is REJECTED


def test_an_element_read_before_a_reset_commits_rejected_whatever_was_delivered_since() -> None:
    # An iterating member's receives in flight take again from the reset point at
    # once: the position alone no longer tells an old delivery from a new one.
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=19, next_sequence=20)  # read at jump count 0
    cursor.reset(-1, head=0, tail=30)
    cursor.delivered(last=19, next_sequence=20)  # read again at jump count 1
    assert cursor.commit(15, tail=30, jumps=0) is REJECTED
    assert cursor.commit(15, tail=30, jumps=1) is COMMITTED
    assert cursor.commit(16, tail=30) is COMMITTED  # a bare position: the position rule
    cursor.seek(18, head=0, tail=30, commit=False)  # a seek is no reset: jump count 2
    assert cursor.commit(17, tail=30, jumps=1) is COMMITTED
    assert cursor.commit(17, tail=30, jumps=0) is REJECTED
    assert state(cursor) == (19, 17, True, 2)


def test_the_jump_count_of_the_last_reset_is_kept_by_the_state() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=9, next_sequence=10)
    cursor.reset(-1, head=0, tail=30)
    cursor.delivered(last=9, next_sequence=10)
    restored = Cursor.from_state(cursor.to_state(), group=True)
    assert restored.reset_jumps == cursor.reset_jumps == 1
    assert restored.commit(5, tail=30, jumps=0) is REJECTED
    # A state kept before the field existed reads as "no reset".
    old = {key: value for key, value in cursor.to_state().items() if key != "reset_jumps"}
    assert Cursor.from_state(old, group=True).reset_jumps == 0


def test_a_reset_to_the_commit_delivers_again_what_came_since_and_keeps_the_commit() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=19, next_sequence=20)
    cursor.commit(9, tail=30)
    assert cursor.reset_to_commit() == 9
    assert state(cursor) == (10, 9, True, 1)  # one jump: positions sessions hold are void
    assert (cursor.reset_floor, cursor.delivered_high) == (9, 9)
    # What was delivered before it commits REJECTED, element or bare position, until
    # delivered again: a later cumulative commit never passes over what it gave back.
    assert cursor.commit(15, tail=30, jumps=0) is REJECTED
    assert cursor.commit(15, tail=30) is REJECTED
    cursor.delivered(last=12, next_sequence=13)
    assert cursor.commit(15, tail=30, jumps=1) is REJECTED  # 13..15 not delivered again yet
    assert cursor.commit(12, tail=30, jumps=1) is COMMITTED


def test_a_transactions_consumed_commit_marks_what_it_consumed_above_it_done() -> None:
    # A resequencing member's commit stops below an element not handed over yet (5);
    # what the transaction consumed above it (6, 8..9) is done: never delivered again,
    # through a reset to the commit (an abort) and a restart.
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=9, next_sequence=10)
    assert cursor.consumed(4, tail=20, done=((6, 6), (8, 9))) is COMMITTED
    assert state(cursor) == (10, 4, True, 0)
    assert cursor.done == [(6, 6), (8, 9)]
    assert cursor.unacked == 2  # 5 and 7
    assert cursor.reset_to_commit() == 4
    assert cursor.done == [(6, 6), (8, 9)]
    back = Cursor.from_state(cursor.to_state(), group=True)
    assert (back.next, back.committed, back.done) == (5, 4, [(6, 6), (8, 9)])
    assert back.skip_done() == 1  # 5 may be read; 6 is done
    back.delivered(last=5, next_sequence=6)
    assert back.skip_done() == 1  # read on past 6: 7, then 8..9 are done
    assert back.next == 7
    back.delivered(last=7, next_sequence=8)
    assert back.skip_done() is None and back.next == 10
    # The next transaction commits 5 and 7: the commit moves over 6 and 8..9.
    assert back.consumed(5, tail=20, done=((7, 7),)) is COMMITTED
    assert (back.committed, back.done) == (9, [])


def test_the_commit_moves_over_done_positions_only_once_they_are_read_past() -> None:
    # Else it would pass the read position, and the elements up to it are dropped
    # (retain=False): the next take would find its elements removed.
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=9, next_sequence=10)
    cursor.consumed(4, tail=20, done=((6, 7),))
    cursor.reset_to_commit()  # an abort: read again from 5
    cursor.delivered(last=5, next_sequence=6)
    assert cursor.commit(5, tail=20) is COMMITTED
    assert (cursor.committed, cursor.next) == (5, 6)  # 6..7 not read past yet
    assert cursor.skip_done() is None  # read past them: the commit moves over them
    assert (cursor.committed, cursor.next, cursor.done) == (7, 8, [])


def test_a_rejected_consumed_commit_marks_nothing_done() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=9, next_sequence=10)
    cursor.reset_to_commit()  # a commit of what it had is REJECTED until read again
    assert cursor.consumed(4, tail=20, done=((6, 6),)) is REJECTED
    assert not cursor.done


def test_a_reset_to_the_commit_of_a_fresh_cursor_makes_no_commit() -> None:
    cursor = Cursor.starting_at(5)
    cursor.delivered(last=7, next_sequence=8)
    assert cursor.reset_to_commit() == 4
    assert state(cursor) == (5, 4, False, 1)


# -- seek --------------------------------------------------------------------


def test_seek_forward_moves_the_read_position_but_not_the_commit() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=4, next_sequence=5)
    cursor.commit(3, tail=20)
    assert cursor.seek(12, head=0, tail=20, commit=False) == 12
    assert state(cursor) == (13, 3, True, 1)


def test_seek_back_before_the_commit_rolls_the_commit_back() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=9, next_sequence=10)
    cursor.commit(8, tail=20)
    assert cursor.seek(5, head=0, tail=20, commit=False) == 5
    assert state(cursor) == (6, 5, True, 1)


def test_seek_back_but_not_before_the_commit_keeps_the_commit() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=9, next_sequence=10)
    cursor.commit(4, tail=20)
    assert cursor.seek(4, head=0, tail=20, commit=False) == 4
    assert state(cursor) == (5, 4, True, 1)
    assert cursor.seek(7, head=0, tail=20, commit=False) == 7
    assert state(cursor) == (8, 4, True, 2)


def test_seek_with_commit_sets_the_commit_either_way() -> None:
    cursor = Cursor.starting_at(0)
    cursor.commit(4, tail=20)
    assert cursor.seek(15, head=0, tail=20, commit=True) == 15
    assert state(cursor) == (16, 15, True, 1)
    assert cursor.seek(2, head=0, tail=20, commit=True) == 2
    assert state(cursor) == (3, 2, True, 2)


@pytest.mark.parametrize(
    ("target", "expected"),
    [(-1, 4), (0, 4), (4, 4), (5, 5), (20, 20), (21, 20), (10_000, 20)],
)
def test_seek_clamps_to_head_minus_one_and_tail(target: int, expected: int) -> None:
    cursor = Cursor.starting_at(5)
    assert cursor.seek(target, head=5, tail=20, commit=False) == expected
    assert cursor.next == expected + 1


def test_seek_on_an_empty_channel_lands_before_the_first() -> None:
    cursor = Cursor.starting_at(0)
    assert cursor.seek(10, head=0, tail=-1, commit=True) == -1
    assert state(cursor) == (0, -1, True, 1)


def test_every_seek_reset_and_grant_bumps_the_jump_count() -> None:
    cursor = Cursor.starting_at(0)
    cursor.seek(3, head=0, tail=9, commit=False)
    cursor.seek(3, head=0, tail=9, commit=False)  # even when nothing moves
    cursor.reset(2, head=0, tail=9)
    cursor.grant(Lease("m", 1))
    cursor.grant(None)
    assert cursor.jumps == 5
    cursor.commit(1, tail=9)
    cursor.delivered(last=5, next_sequence=6)
    cursor.skip_to_head(8)
    assert cursor.jumps == 5  # commits, deliveries and skips do not


def test_seek_after_a_reset_makes_later_deliveries_committable() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=19, next_sequence=20)
    cursor.reset(10, head=0, tail=30)
    assert cursor.seek(20, head=0, tail=30, commit=False) == 20
    cursor.delivered(last=22, next_sequence=23)
    assert cursor.commit(22, tail=30) is COMMITTED
    assert cursor.commit(25, tail=30) is REJECTED  # not delivered yet
    assert cursor.commit(9, tail=30) is REJECTED  # below the reset point


# -- grant and skip_to_head --------------------------------------------------


def test_grant_resumes_after_the_last_commit() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=9, next_sequence=10)
    cursor.commit(6, tail=9)
    lease = Lease("m2", 4)
    cursor.grant(lease)
    assert cursor.owner == lease
    assert state(cursor) == (7, 6, True, 1)
    assert cursor.unacked == 0
    cursor.grant(None)
    assert cursor.owner is None
    assert state(cursor) == (7, 6, True, 2)


def test_grant_without_a_commit_resumes_at_the_start_point() -> None:
    cursor = Cursor.starting_at(3)
    cursor.delivered(last=8, next_sequence=9)
    cursor.grant(Lease("m", 1))
    assert state(cursor) == (3, 2, False, 1)


def test_skip_to_head_moves_a_cursor_that_fell_below_the_head() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=2, next_sequence=3)
    cursor.commit(1, tail=10)
    assert cursor.skip_to_head(8) == 5
    assert state(cursor) == (8, 7, True, 0)


def test_skip_to_head_keeps_a_commit_already_at_or_above_the_head() -> None:
    cursor = Cursor(next=3, committed=9, has_commit=True)
    assert cursor.skip_to_head(8) == 5
    assert (cursor.next, cursor.committed) == (8, 9)


@pytest.mark.parametrize("head", [0, 4, 5])
def test_skip_to_head_is_a_no_op_when_not_below_the_head(head: int) -> None:
    cursor = Cursor.starting_at(5)
    assert cursor.skip_to_head(head) == 0
    assert state(cursor) == (5, 4, False, 0)


def test_seeking_back_rolls_the_resume_point_back_without_making_a_commit() -> None:
    cursor = Cursor.starting_at(5)  # resume point 4, never committed
    assert cursor.seek(2, head=0, tail=9, commit=False) == 2
    assert (cursor.next, cursor.committed, cursor.has_commit) == (3, 2, False)
    cursor.commit(6, tail=9)
    assert cursor.seek(1, head=0, tail=9, commit=False) == 1
    assert (cursor.committed, cursor.has_commit) == (1, True)  # a real commit, rolled back


# -- unacknowledged count ---------------------------------------------------------


def test_a_seek_forward_does_not_count_what_it_jumped_over_as_unacked() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=2, next_sequence=3)  # 0..2 received
    cursor.seek(9, head=0, tail=20, commit=False)  # 3..9 never received
    assert cursor.unacked == 3
    cursor.delivered(last=11, next_sequence=12)  # 10, 11 received
    assert cursor.unacked == 5


def test_commits_into_and_past_a_jumped_range_count_exactly() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=2, next_sequence=3)
    cursor.seek(9, head=0, tail=20, commit=False)
    cursor.delivered(last=11, next_sequence=12)
    assert cursor.commit(5, tail=20) is COMMITTED  # commits 0..2 and jumped 3..5
    assert cursor.unacked == 2  # 10, 11
    assert cursor.commit(11, tail=20) is COMMITTED
    assert cursor.unacked == 0
    assert cursor.unread == []


def test_seeking_back_reads_the_jumped_range_again_and_counts_it() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=2, next_sequence=3)
    cursor.seek(9, head=0, tail=20, commit=False)
    cursor.seek(4, head=0, tail=20, commit=False)  # next is 5: 3, 4 stay jumped
    assert cursor.unacked == 3
    cursor.delivered(last=9, next_sequence=10)  # 5..9 received now
    assert cursor.unacked == 8


def test_reset_grant_and_seek_and_commit_leave_nothing_jumped() -> None:
    for move in (
        lambda c: c.reset(15, head=0, tail=20),
        lambda c: c.grant(Lease("m", 2)),
        lambda c: c.seek(15, head=0, tail=20, commit=True),
    ):
        cursor = Cursor.starting_at(0)
        cursor.delivered(last=2, next_sequence=3)
        cursor.seek(9, head=0, tail=20, commit=False)
        move(cursor)
        assert cursor.unread == []
        assert cursor.unacked == 0


def test_a_take_given_back_forgets_what_it_would_have_jumped() -> None:
    cursor = Cursor.starting_at(0)
    cursor.seek(4, head=0, tail=20, commit=False)  # 0..4 jumped
    cursor.delivered(last=7, next_sequence=8)
    cursor.rewind(5)  # the take of 5..7 is given back
    assert cursor.unacked == 0
    assert cursor.next == 5


def test_elements_passed_over_are_not_unacked_and_adjacent_ranges_join() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=3, next_sequence=10)  # a filtered take: 3 matched, 4..9 missed
    cursor.passed_over(4, 9)
    assert cursor.unacked == 4  # 0..3: misses before a match are covered by its commit
    cursor.passed_over(10, 19)  # a take that matched nothing
    cursor.next = 20
    assert cursor.unread == [(4, 19)]
    assert cursor.unacked == 4
    cursor.passed_over(7, 5)  # empty: nothing recorded
    assert cursor.unread == [(4, 19)]


def test_a_reader_that_never_commits_keeps_a_bounded_list() -> None:
    cursor = Cursor.starting_at(0)
    for _ in range(1000):  # deliver one, seek past the next one, again and again
        cursor.delivered(last=cursor.next, next_sequence=cursor.next + 1)
        cursor.seek(cursor.next, head=0, tail=10_000, commit=False)
    assert len(cursor.unread) <= 33
    # The oldest ranges were joined: fewer counted unacked than delivered, never more.
    assert 0 < cursor.unacked <= 1000


def test_a_session_reads_on_from_its_position_forward_or_back() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(4, 5)
    cursor.read_from(3)  # what it took from 3 on reached no receive: read again
    assert (cursor.next, cursor.jumps) == (3, 0)
    cursor.seek(7, head=0, tail=9, commit=False)  # passed over 3..7 unread
    cursor.read_from(5)  # back: the unread ranges from there on are forgotten
    assert cursor.unread == [(3, 4)]
    cursor.delivered(8, 9)
    cursor.read_from(9)
    cursor.read_from(12)  # forward: over a fetch's offer its session handed over
    assert (cursor.next, cursor.delivered_high) == (12, 8)


def test_a_seek_reset_or_grant_is_a_jump_that_voids_the_positions_sessions_hold() -> None:
    for move in (
        lambda c: c.seek(1, 0, 9, commit=False),
        lambda c: c.reset(1, 0, 9),
        lambda c: c.grant(Lease("m", 2)),
        lambda c: c.redeliver(),
    ):
        cursor = Cursor.starting_at(0)
        cursor.delivered(4, 5)
        jumps = cursor.jumps
        move(cursor)
        assert cursor.jumps == jumps + 1


def test_a_streams_commit_moves_read_and_commit_forward_only() -> None:
    cursor = Cursor.starting_at(5)  # a fresh group: before 5, no commit of its own
    assert cursor.advance(3) and state(cursor) == (5, 4, True, 0)  # below: only marked
    assert not cursor.advance(4)
    assert cursor.advance(9) and state(cursor) == (10, 9, True, 0)
    cursor.next = 20  # a read position ahead stays where it is
    assert cursor.advance(12) and state(cursor) == (20, 12, True, 0)
    assert not cursor.advance(11) and cursor.committed == 12  # never back


# -- acks: positions done one by one --------------------------------------------------


def test_acks_out_of_order_commit_only_the_contiguous_prefix() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=5, next_sequence=6)
    assert cursor.ack(2, tail=9) is COMMITTED  # done; the commit waits for 0 and 1
    assert cursor.ack(1, tail=9) is COMMITTED
    assert cursor.committed == -1 and cursor.unacked == 4
    assert cursor.ack(0, tail=9) is COMMITTED
    assert (cursor.committed, cursor.has_commit) == (2, True)
    assert cursor.ack(4, tail=9) is COMMITTED and cursor.ack(5, tail=9) is COMMITTED
    assert cursor.committed == 2 and cursor.unacked == 1  # 3 failed: nothing passes it
    assert cursor.ack(1, tail=9) is ALREADY
    assert cursor.ack(12, tail=9) is REJECTED
    assert cursor.commit(3, tail=9) is COMMITTED  # a commit goes on over the done ones
    assert cursor.committed == 5 and not cursor.done


def test_the_commit_steps_over_a_compacted_channels_gaps_and_the_done_after_them() -> None:
    elements = [1, 3, 4, 8, 9]  # compaction left 0, 2 and 5..7 empty
    first_at = lambda p: min((e for e in elements if e >= p), default=10)  # noqa: E731
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=8, next_sequence=9)  # read up to 8; its gaps were forgotten
    assert cursor.over_gaps(first_at)
    assert cursor.committed == 0 and cursor.has_commit  # 0 holds nothing; 1 is not done
    for sequence in (1, 4, 8):
        cursor.ack(sequence, tail=9)
    assert cursor.committed == 1  # 2 is a gap the done ranges do not know
    assert cursor.over_gaps(first_at) and cursor.committed == 2  # 3 is not done
    cursor.ack(3, tail=9)
    assert cursor.committed == 4
    assert cursor.over_gaps(first_at) and cursor.committed == 8  # 5..7, then 8 done
    assert not cursor.over_gaps(first_at) and cursor.committed == 8  # 9: not read yet
    stuck = Cursor.starting_at(0)
    stuck.delivered(last=1, next_sequence=2)
    assert not stuck.over_gaps(lambda p: p) and stuck.committed == -1  # no gap: no move


def test_done_positions_are_not_delivered_again_after_a_new_owner() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=5, next_sequence=6)
    for sequence in (0, 2, 4, 5):
        cursor.ack(sequence, tail=9)
    cursor.grant(Lease("m", 2))  # resumes after the commit: 1
    assert cursor.next == 1 and cursor.skip_done() == 1  # 1 is read, then 2 is done
    cursor.delivered(last=1, next_sequence=2)
    assert cursor.skip_done() == 1 and cursor.next == 3  # 3, then 4..5 are done
    cursor.delivered(last=3, next_sequence=4)
    assert cursor.skip_done() is None and cursor.next == 6


def test_acks_read_before_a_reset_are_rejected_and_a_reset_forgets_done() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=5, next_sequence=6)
    read_at = cursor.jumps
    cursor.ack(3, tail=9)
    cursor.reset(1, head=0, tail=9)
    assert not cursor.done
    assert cursor.ack(4, tail=9, jumps=read_at) is REJECTED


def test_done_positions_are_kept_by_the_state() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=5, next_sequence=6)
    cursor.ack(3, tail=9)
    cursor.ack(5, tail=9)
    restored = Cursor.from_state(cursor.to_state(), group=True)
    assert restored.done == [(3, 3), (5, 5)]


# -- review66: done marks a consumed commit brings after a group reset ---------------


def test_a_consumed_commit_landing_after_a_group_reset_to_it_marks_nothing_above_done() -> None:
    # A member read 0..19; its transaction prepared a commit of 9 (its hand-over mark)
    # with 12..15 done above it. The operator resets the group to 9 (a reset does not
    # wait for prepared transactions): everything after 9 is to be read again. The
    # transaction's COMMIT lands after it: 9 is ALREADY_COMMITTED (not REJECTED), and
    # 12..15, read before the reset, must not become done (they would never be read
    # again: the reset's re-read loses them).
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=19, next_sequence=20)
    assert cursor.reset(9, head=0, tail=30) == 9
    cursor.consumed(9, tail=30, done=((12, 15),))
    assert cursor.done == []
    cursor.delivered(last=11, next_sequence=12)
    assert cursor.skip_done() is None and cursor.next == 12  # 12 comes again


def test_a_consumed_commit_after_a_reset_marks_done_only_what_was_read_since() -> None:
    # The same with a reset further back: the member (its lease kept) reads 6..10
    # again; the transaction's commit of 9 is within what was read since (COMMITTED, as
    # before done ranges), but 12..15 were read before the reset only.
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=19, next_sequence=20)
    cursor.reset(5, head=0, tail=30)
    cursor.delivered(last=10, next_sequence=11)
    cursor.consumed(9, tail=30, done=((12, 15),))
    assert cursor.done == []


def test_what_a_committed_transaction_consumed_past_the_done_bound_is_not_given_again() -> None:
    # A resequencing member whose commit waits below a held key (every odd position
    # here is one of its held elements, not handed over) consumed each even position
    # above it in committed transactions: 1,100 runs, past DONE_RANGES_KEPT (1,024).
    # An abort of the next transaction sends it back to its commit: each consumed
    # position must stay done (a committed transaction wrote its outputs), else the
    # loop writes it again.
    from raytopic.actors.done_ranges import DONE_RANGES_KEPT

    runs = tuple((p, p) for p in range(2, 2 * (DONE_RANGES_KEPT + 77), 2))
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=len(runs) * 2 + 10, next_sequence=len(runs) * 2 + 11)
    assert cursor.consumed(0, tail=10_000, done=runs) is COMMITTED
    cursor.reset_to_commit()
    given_again = []
    while cursor.next <= runs[-1][0]:
        cursor.skip_done()
        if cursor.next <= runs[-1][0] and cursor.next % 2 == 0:
            given_again.append(cursor.next)
        cursor.delivered(last=cursor.next, next_sequence=cursor.next + 1)
    assert given_again == []


def test_acks_past_the_done_bound_forget_none_of_a_committed_transactions_done() -> None:
    # The transaction's done runs fill the bound; a reader sent back to its commit
    # then acks positions between them (each a range of its own). Past the bound the
    # acks' ranges above every firm one are forgotten (delivered again: at least
    # once), never the transaction's, also after a restart (the store keeps the mark).
    from raytopic.actors.done_ranges import DONE_RANGES_KEPT

    runs = tuple((p, p) for p in range(4, 4 * DONE_RANGES_KEPT, 4))
    cursor = Cursor.starting_at(0)
    cursor.delivered(last=runs[-1][0] + 100, next_sequence=runs[-1][0] + 101)
    assert cursor.consumed(0, tail=100_000, done=runs) is COMMITTED
    cursor = Cursor.from_state(cursor.to_state(), group=True)
    cursor.reset_to_commit()
    cursor.delivered(last=runs[-1][0] + 100, next_sequence=runs[-1][0] + 101)
    for position in (*range(2, 400, 4), runs[-1][0] + 50):
        assert cursor.ack(position, tail=100_000) is COMMITTED
    assert len(cursor.done.ranges) > DONE_RANGES_KEPT
    assert all(cursor.done.count(first, last) == 1 for first, last in runs)
    assert cursor.done.count(runs[-1][0] + 50, runs[-1][0] + 50) == 0


def test_reads_before_a_poison_stand_after_the_stop_that_moved_the_cursor_back() -> None:
    # A take read past a poison at 10: the stop moves the cursor back to it with a jump,
    # and what was read before it under the older count still stands (a transaction
    # consuming 0..9 may commit them); what was read at or after it does not.
    cursor = Cursor(next=15, committed=-1)
    before = cursor.jumps
    assert cursor.read_stands(before, 14)
    cursor.stop_at(Poison(10, "ValueError", "bad"), reported=False)
    assert cursor.jumps == before + 1
    assert cursor.read_stands(before, 9)
    assert not cursor.read_stands(before, 10)
    assert cursor.read_stands(cursor.jumps, 14)


def test_reads_before_a_seek_do_not_stand_though_a_stop_follows() -> None:
    cursor = Cursor(next=10, committed=-1)
    before = cursor.jumps
    cursor.seek(4, 0, 20, commit=False)  # a jump of its own: what was read before it is void
    cursor.stop_at(Poison(5, "ValueError", "bad"), reported=False)  # no move, no jump
    assert not cursor.read_stands(before, 4)
    cursor.redeliver()  # any later jump voids the stop's mark too
    assert not cursor.read_stands(before, 4)


def test_a_commit_stops_below_what_a_lost_reply_carried_until_it_is_served_again() -> None:
    # Take.unseen: the reply that carried position 5 never reached the user (Ray
    # dropped it under a ray.cancel); a commit of a later element must not pass it.
    cursor = Cursor.starting_at(0)
    cursor.delivered(6, 7)
    cursor.read_from(5)
    cursor.hold_commits_below(5)
    assert cursor.commit_bound(None) == 4 and cursor.commit_bound(2) == 2
    assert cursor.commit(6, tail=9) is CommitStatus.COMMITTED
    assert cursor.committed == 4
    cursor.delivered(5, 6)  # served again
    assert cursor.unseen is None
    assert cursor.commit(6, tail=9) is CommitStatus.COMMITTED and cursor.committed == 6


def test_a_consumed_commit_applied_after_its_member_left_stops_below_a_lost_reply() -> None:
    # A transaction decides, then its channels apply it: its member, which read 3..4
    # and lost the reply that carried 3 (Ray dropped it under a ray.cancel), closed
    # meanwhile, and the cursor jumped back to the commit. The consumed commit of 4,
    # read before the jump, still stops below 3 (delivered again), and 4, which the
    # transaction consumed, is done. Before, the jump voided the hold: the commit
    # passed 3, and the next member read on after it (1 of 40 values lost under load).
    cursor = Cursor.starting_at(0)
    assert cursor.commit(2, tail=9) is CommitStatus.COMMITTED
    cursor.delivered(4, 5)
    read = cursor.jumps
    cursor.read_from(3)
    cursor.hold_commits_below(3)
    cursor.grant(None)  # the member closed
    cursor.consumed(4, tail=9, done=((4, 4),), jumps=read)
    assert (cursor.committed, cursor.next, cursor.done) == (2, 3, [(4, 4)])
    assert cursor.commit_bound(None) is None  # a commit of a later read: no hold
    cursor.grant(Lease("next", 1))  # the next member gets 3, never 4
    cursor.delivered(3, 4)
    assert cursor.skip_done() is None and cursor.next == 5
    assert cursor.commit(3, tail=9) is CommitStatus.COMMITTED and cursor.committed == 4


def test_a_hold_under_the_count_now_bounds_a_commit_of_an_older_read_too() -> None:
    # An element read before a jump, committed while a hold made after it stands: the
    # commit would pass what the lost reply carried as a bare position's would.
    cursor = Cursor.starting_at(0)
    older = cursor.jumps
    cursor.redeliver()
    cursor.delivered(6, 7)
    cursor.read_from(5)
    cursor.hold_commits_below(5)
    assert cursor.commit(6, tail=9, jumps=older) is CommitStatus.COMMITTED
    assert cursor.committed == 4


def test_what_a_lost_reply_carried_holds_no_commit_after_a_jump_or_a_read_past_it() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(3, 4)
    cursor.hold_commits_below(2)
    cursor.redeliver()  # a new owner, a seek: positions read before are void
    assert cursor.commit_bound(None) is None
    cursor.hold_commits_below(cursor.committed + 1)
    cursor.read_from(3)  # the session moves over what a fetch's offer handed over
    assert cursor.unseen is None
