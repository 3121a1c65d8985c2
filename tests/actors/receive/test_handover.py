"""Unit tests of HandOver (no Ray): the hand-over mark a resequencing session stamps
on each element it hands over, whatever order it hands them over in."""

from __future__ import annotations

from raytopic.actors.receive.handover import HandOver


def test_in_position_order_each_mark_is_the_element_itself_or_later() -> None:
    handover = HandOver()
    for sequence in range(5):
        handover.taken(0, sequence)
    assert [handover.handed(0, sequence) for sequence in range(4)] == [0, 1, 2, 3]
    assert handover.handed(0, 4) == 4  # nothing waits: everything taken was handed over


def test_an_element_handed_over_before_an_earlier_one_is_marked_below_it() -> None:
    handover = HandOver()
    for sequence in range(10, 16):
        handover.taken(0, sequence)
    assert handover.handed(0, 13) == 9  # 10, 11, 12 still wait
    assert handover.handed(0, 10) == 10
    assert handover.handed(0, 12) == 10  # 11 waits
    assert handover.handed(0, 11) == 13  # 14 waits; 13 went before
    assert handover.handed(0, 15) == 13
    assert handover.handed(0, 14) == 15


def test_channels_are_marked_apart() -> None:
    handover = HandOver()
    handover.taken(0, 0)
    handover.taken(1, 0)
    handover.taken(1, 1)
    assert handover.handed(1, 1) == -1  # channel 1's 0 waits, channel 0's does not count
    assert handover.handed(0, 0) == 0


def test_an_element_dropped_as_late_holds_nothing_back() -> None:
    handover = HandOver()
    for sequence in range(3):
        handover.taken(0, sequence)
    handover.dropped(0, 0)
    assert handover.handed(0, 2) == 0  # 1 waits
    handover.dropped(0, 1)
    handover.dropped(0, 1)  # (twice: nothing more)
    handover.taken(0, 3)
    assert handover.handed(0, 3) == 3


def test_an_element_handed_over_then_taken_again_and_dropped_as_late_holds_commits_back() -> None:
    # The reader was sent back: what it reads again comes to a resequencer that
    # released those numbers and drops them as late. Unseen by the user, they must
    # not be committed past: commits stay below the first of them.
    handover = HandOver()
    for sequence in range(3):
        handover.taken(0, sequence)
    assert [handover.handed(0, sequence) for sequence in range(3)] == [0, 1, 2]
    for sequence in range(3):  # read again after the seek
        handover.taken(0, sequence)
        handover.late(0, sequence)
    handover.taken(0, 3)
    assert handover.handed(0, 3) == -1
    handover.taken(0, 4)
    handover.late(0, 4)  # a number that came twice, never handed over: holds nothing
    handover.taken(0, 5)
    assert handover.handed(0, 5) == -1


def test_a_position_taken_again_waits_until_each_copy_is_handed_over() -> None:
    handover = HandOver()
    handover.taken(0, 0)
    handover.taken(0, 1)
    handover.taken(0, 0)  # read again after a jump, the first copy still held
    assert handover.handed(0, 1) == -1
    assert handover.handed(0, 0) == -1  # the other copy of 0 still waits
    assert handover.handed(0, 0) == 1


def test_an_element_never_taken_is_marked_at_itself() -> None:
    assert HandOver().handed(3, 7) == 7


def test_the_marks_of_the_latest_elements_handed_over_are_remembered() -> None:
    handover = HandOver()
    for sequence in range(3):
        handover.taken(0, sequence)
    handover.handed(0, 2)
    handover.handed(0, 0)
    assert handover.mark_of(0, 2) == -1 and handover.mark_of(0, 0) == 0
    assert handover.mark_of(0, 1) is None  # not handed over


def test_a_channel_sent_back_claims_nothing_from_there_until_it_is_taken_again() -> None:
    # 0..9 taken, 0..2 and 8 handed over; the channel is sent back to 3 (what the
    # resequencer held from there is dropped, to come again). Before: 3, read again
    # and handed over, was marked 9, and a batch of 8 and 3 committed past 4..7,
    # never handed over since.
    handover = HandOver()
    for sequence in range(10):
        handover.taken(0, sequence)
    assert [handover.handed(0, sequence) for sequence in (0, 1, 2, 8)] == [0, 1, 2, 2]
    for sequence in (3, 4, 5, 6, 7, 9):
        handover.dropped(0, sequence)
    handover.rewound(0, 3)
    handover.taken(0, 3)
    assert handover.handed(0, 3) == 3
    handover.taken(0, 4)
    handover.taken(0, 5)
    assert handover.handed(0, 5) == 3  # 4 waits
    handover.rewound(0, 7)  # sent on past what it took: nothing changes
    assert handover.handed(0, 4) == 5


def test_commits_past_says_whether_a_commit_of_an_element_handed_over_moves_the_commit() -> None:
    # What a resequencing session's look asks with the window full: a commit goes no
    # further than its element's mark, so elements handed over above one still held
    # free no room; once that one is handed over, they do.
    handover = HandOver()
    assert not handover.commits_past(0, -1)  # nothing handed over here
    for sequence in range(3):
        handover.taken(0, sequence)
    handover.handed(0, 1)
    handover.handed(0, 2)
    assert not handover.commits_past(0, -1)  # 0 is held: both are marked -1
    handover.handed(0, 0)
    assert handover.commits_past(0, -1) and handover.commits_past(0, 1)
    assert not handover.commits_past(0, 2)  # committed up to the top already
    handover.rewound(0, 1)  # sent back: what was handed from 1 on comes again
    assert handover.commits_past(0, -1) and not handover.commits_past(0, 0)


def test_an_element_put_back_floors_commits_below_it_until_it_is_handed_over_again() -> None:
    # Ray dropped the reply that handed 10 over: the marks stamped on 11 and 12 since
    # (12) claim it, so commits go no further than 9 until it goes out again.
    handover = HandOver()
    for sequence in range(10, 13):
        handover.taken(0, sequence)
    assert [handover.handed(0, sequence) for sequence in (10, 11, 12)] == [10, 11, 12]
    assert handover.floors() == {}
    handover.put_back(0, 10)
    assert handover.floors() == {0: 9}
    assert handover.handed(0, 10) == 12  # out again: its new mark, and no floor
    assert handover.floors() == {}


def test_floors_are_per_channel_and_an_element_put_back_then_sent_back_holds_none() -> None:
    handover = HandOver()
    for channel in (0, 1):
        for sequence in range(3):
            handover.taken(channel, sequence)
            handover.handed(channel, sequence)
    handover.put_back(0, 1)
    handover.put_back(1, 0)
    handover.put_back(1, 2)
    assert handover.floors() == {0: 0, 1: -1}
    handover.handed(1, 0)
    assert handover.floors() == {0: 0, 1: 1}
    handover.dropped(0, 1)  # a seek took it back (it comes again from the read)
    assert handover.floors() == {1: 1}
