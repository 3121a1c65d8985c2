"""A resequencer's source sent back (no Ray): what it held from there is dropped, what it
released from there is released again, in order; the other sources' numbers are
stepped over."""

from __future__ import annotations

import threading
import time
from typing import Any

from raytopic.core.release_record import GAP_REOPENED, RELEASES_KEPT
from raytopic.core.resequenced_stream import ResequencedStream
from raytopic.core.resequencer import Resequence, Resequencer


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def release(self, seq: int, payload: Any, cid: Any) -> None:
        self.events.append(("release", seq))

    def gap(self, seq: int, cid: Any) -> None:
        self.events.append(("gap", seq))

    def late(self, seq: int, payload: Any, cid: Any) -> None:
        self.events.append(("late", seq))

    def take(self) -> list[tuple[str, Any]]:
        events, self.events = self.events, []
        return events


def make(log: Log, **kwargs: Any) -> Resequencer:
    kwargs.setdefault("timeout_ms", 60_000)
    kwargs.setdefault("start", 0)
    return Resequencer("rewind", on_release=log.release, on_gap=log.gap, on_late=log.late, **kwargs)


def feed(resequencer: Resequencer, *items: tuple[int, str, int]) -> None:
    """``(seq, source, position)`` each, payload ``source:position``."""
    for seq, source, position in items:
        resequencer.accept(seq, f"{source}{position}", None, (source, position))


def test_numbers_released_from_a_source_sent_back_are_released_again_in_order() -> None:
    log = Log()
    resequencer = make(log)
    feed(resequencer, (1, "b", 0), (0, "a", 0), (3, "b", 1), (2, "a", 1))
    assert log.take() == [("release", n) for n in range(4)]
    # Before: all four read again were dropped as late.
    assert resequencer.rewind("a", 0) == []
    assert resequencer.rewind("b", 0) == []
    feed(resequencer, (2, "a", 1))  # waits for 0 (its source's first is read again too)
    assert log.take() == []
    feed(resequencer, (0, "a", 0), (1, "b", 0), (3, "b", 1))
    assert log.take() == [("release", n) for n in range(4)]
    assert resequencer.stats.late == 0


def test_the_numbers_of_a_source_not_sent_back_are_stepped_over() -> None:
    log = Log()
    resequencer = make(log)
    feed(resequencer, (0, "a", 0), (1, "b", 0), (2, "a", 1), (3, "b", 1), (4, "a", 2))
    log.take()
    resequencer.rewind("a", 1)  # 2 and 4 come again; 0, 1 and 3 do not
    feed(resequencer, (5, "b", 2))  # new: waits for 2 and 4
    assert log.take() == []
    feed(resequencer, (2, "a", 1))
    assert log.take() == [("release", 2)]  # 3 is stepped over: 4 is next
    feed(resequencer, (4, "a", 2))
    assert log.take() == [("release", 4), ("release", 5)]
    feed(resequencer, (3, "b", 1))  # released once, not sent back: late
    assert log.take() == [("late", 3)]


def test_what_is_held_from_a_source_sent_back_is_dropped_and_the_rest_kept() -> None:
    log = Log()
    resequencer = make(log)
    feed(resequencer, (2, "a", 0), (3, "b", 0), (4, "a", 1))  # all wait for 0
    dropped = resequencer.rewind("a", 1)
    assert dropped == ["a1"]
    assert resequencer.stats.held == 2
    feed(resequencer, (0, "c", 0), (1, "c", 1), (4, "a", 1))
    assert log.take() == [("release", n) for n in range(5)]


def test_a_number_sent_back_that_never_comes_is_a_gap_after_the_hold_window() -> None:
    log = Log()
    resequencer = make(log, timeout_ms=50, reap_interval_ms=5)
    feed(resequencer, (0, "a", 0), (1, "b", 0))
    log.take()
    resequencer.rewind("a", 0)  # its channel went to another member: 0 never comes
    feed(resequencer, (2, "b", 1))
    sweeper = threading.Thread(target=resequencer.start, daemon=True)
    sweeper.start()
    try:
        deadline = time.monotonic() + 5
        while resequencer.stats.held and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        resequencer.stop()
        sweeper.join(timeout=5)
    assert log.take() == [("gap", 0), ("release", 2)]
    assert resequencer.stats.gaps == 1


def test_a_source_sent_back_past_what_is_remembered_numbers_afresh() -> None:
    log = Log()
    resequencer = make(log)
    count = RELEASES_KEPT + 10
    for n in range(count):
        resequencer.accept(n, n, None, ("a", n))
    feed(resequencer, (count + 1, "b", 0))  # held: waits for count
    log.take()
    assert resequencer.rewind("a", 5) == []  # position 5 is forgotten
    for n in range(5, count):
        resequencer.accept(n, n, None, ("a", n))
    # Afresh from start (0): 0..4 are never read again, so 5.. wait the hold window.
    assert log.take() == []
    assert resequencer.stats.held == count - 5 + 1
    resequencer.flush()
    assert log.take() == [
        *(("gap", n) for n in range(5)),
        *(("release", n) for n in range(5, count)),
        ("gap", count),
        ("release", count + 1),
    ]
    assert resequencer.stats.late == 0


def test_a_stream_takes_back_what_was_released_and_not_taken() -> None:
    stream = ResequencedStream(
        Resequence(seq=lambda v: v, timeout_ms=60_000, start=0),
        "s",
        on_ready=lambda: None,
        origin=lambda item: item,
    )
    stream.feed([(0, ("a", 0)), (1, ("b", 0)), (3, ("a", 2)), (2, ("a", 1))])
    assert stream.take(1) == [("a", 0)]
    # (b, 0) and (a, 1) released, not taken; (a, 2) released too.
    assert sorted(stream.rewind("a", 1)) == [("a", 1), ("a", 2)]
    assert stream.take(10) == [("b", 0)]
    stream.feed([(3, ("a", 2)), (2, ("a", 1))])
    assert stream.take(10) == [("a", 1), ("a", 2)]
    assert stream.stats.late == 0


def test_with_a_zero_hold_window_each_number_sent_back_comes_whenever_it_comes() -> None:
    # No order is promised: a number read again after a higher one was released
    # again is released too (before: late, and its commits held back for good).
    log = Log()
    resequencer = make(log, timeout_ms=0)
    feed(resequencer, (0, "a", 0), (1, "b", 0), (2, "a", 1), (3, "b", 1))
    log.take()
    resequencer.rewind("a", 0)
    resequencer.rewind("b", 0)
    feed(resequencer, (2, "a", 1), (0, "a", 0), (3, "b", 1), (1, "b", 0))
    assert log.take() == [("release", 2), ("release", 0), ("release", 3), ("release", 1)]
    feed(resequencer, (1, "b", 0))  # released again already: late
    feed(resequencer, (5, "c", 0))
    assert log.take() == [("late", 1), ("gap", 4), ("release", 5)]
    assert resequencer.stats.late == 1


def test_numbers_sent_back_from_positions_passed_over_are_not_waited_for() -> None:
    # A source sent back to its commit reads on past the positions a committed
    # transaction consumed above it (done there): their numbers never come again.
    log = Log()
    resequencer = make(log)
    feed(resequencer, (1, "a", 0), (0, "a", 1), (2, "a", 2), (3, "a", 3))
    assert log.take() == [("release", n) for n in range(4)]
    resequencer.rewind("a", 0)  # 0..3 to come again; position 1 (number 0) is done
    feed(resequencer, (1, "a", 0))  # waits for 0
    assert log.take() == []
    resequencer.passed("a", 1, 1)
    assert log.take() == [("release", 1)]  # 0 stays released: 1 goes, 2 is waited for
    feed(resequencer, (2, "a", 2))
    assert log.take() == [("release", 2)]
    resequencer.passed("a", 3, 3)  # nothing waits for 3 now
    feed(resequencer, (4, "b", 0))
    assert log.take() == [("release", 4)]  # no gap reported for 3: released before
    feed(resequencer, (3, "a", 3))  # released, and not to come again: late
    assert log.take() == [("late", 3)]
    assert resequencer.stats.gaps == 0


def test_a_gap_skipped_by_a_release_sent_back_is_waited_for_again() -> None:
    # The hold window released 2 past 1 (1 had not come); 2's source is sent back and
    # reads 2 then 1 (it holds them in that order): 1 comes before 2. Before: 2 was
    # released again at once and 1 dropped as late (a resequencing loop lost it).
    log = Log()
    resequencer = make(log)
    feed(resequencer, (0, "a", 0), (2, "b", 0))
    resequencer.flush()
    assert log.take() == [("release", 0), ("gap", 1), ("release", 2)]
    resequencer.rewind("b", 0)
    feed(resequencer, (2, "b", 0))  # waits for 1 now
    assert log.take() == []
    feed(resequencer, (1, "b", 1), (3, "b", 2))
    assert log.take() == [("release", 1), ("release", 2), ("release", 3)]
    assert resequencer.stats.late == 0


def test_a_gap_of_a_release_passed_over_stays_skipped() -> None:
    # 2's position is done (a committed transaction consumed it): 2 stays released,
    # and 1, which its release skipped, stays skipped (late if it comes).
    log = Log()
    resequencer = make(log)
    feed(resequencer, (0, "a", 0), (2, "b", 0))
    resequencer.flush()
    log.take()
    resequencer.rewind("b", 0)
    resequencer.passed("b", 0, 0)
    feed(resequencer, (3, "b", 1), (1, "c", 0))
    assert log.take() == [("release", 3), ("late", 1)]


def test_what_a_first_release_skipped_and_the_top_of_a_long_gap_are_waited_for_again() -> None:
    # Below a stream's first release: numbers from before this numbering (a host
    # restarted mid-stream), never waited for again; of a longer gap only its top
    # GAP_REOPENED numbers are.
    log = Log()
    resequencer = make(log)
    feed(resequencer, (5, "a", 0))
    resequencer.flush()
    feed(resequencer, (5 + GAP_REOPENED + 10, "a", 1))
    resequencer.flush()
    gaps = resequencer.stats.gaps
    log.take()
    resequencer.rewind("a", 0)
    feed(resequencer, (5, "a", 0))
    assert log.take() == [("release", 5)]  # 0..4 not waited for
    feed(resequencer, (5 + GAP_REOPENED + 10, "a", 1))
    assert log.take() == []  # its gap's top numbers are
    resequencer.flush()
    assert resequencer.stats.gaps - gaps == GAP_REOPENED


def test_items_put_back_go_out_first_and_a_rewind_takes_them_back_too() -> None:
    # Items whose receive's reply Ray dropped go out again before anything released
    # later; they are released and not taken again, so a rewind of their source
    # takes them back (they come again from the read, in order).
    ready: list[int] = []
    stream = ResequencedStream(
        Resequence(seq=lambda v: v, timeout_ms=60_000, start=0),
        "s",
        on_ready=lambda: ready.append(1),
        origin=lambda item: item,
    )
    stream.feed([(0, ("a", 0)), (1, ("b", 0)), (2, ("a", 1)), (3, ("b", 1))])
    lost = stream.take(2)
    assert lost == [("a", 0), ("b", 0)]
    ready.clear()
    stream.put_back(lost)
    assert ready and stream.take(3) == [("a", 0), ("b", 0), ("a", 1)]
    stream.put_back([("a", 1)])
    assert sorted(stream.rewind("a", 1)) == [("a", 1)]
    assert stream.take(10) == [("b", 1)]
