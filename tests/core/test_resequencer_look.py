"""A resequencing session's hold window counts only what it looked at (no Ray): a head
held past a gap goes out once, after its window ended, every source was read up to
where it ended; what a source held by then comes first, whenever the session reads."""

from __future__ import annotations

import time
from typing import Any

from raytopic.core.resequenced_stream import ResequencedStream
from raytopic.core.resequencer import Resequence, Resequencer

WINDOW_MS = 50


def make_stream() -> ResequencedStream:
    """Items are (source, position, number); the number is their sequence."""
    return ResequencedStream(
        Resequence(seq=lambda item: item[2], timeout_ms=WINDOW_MS, start=0),
        "look",
        on_ready=lambda: None,
        origin=lambda item: (item[0], item[1]),
    )


def feed(stream: ResequencedStream, *items: tuple[str, int, int]) -> None:
    stream.feed((item, item) for item in items)


def numbers(stream: ResequencedStream) -> list[int]:
    return [item[2] for item in stream.take(100)]


def past_the_window() -> None:
    time.sleep(2 * WINDOW_MS / 1000)


def test_a_window_that_ends_while_nobody_looks_releases_nothing() -> None:
    # Before: a sweeper thread released 3 past 2 here, and 2, read at the next
    # receive, was dropped as late.
    stream = make_stream()
    feed(stream, ("a", 0, 0), ("b", 0, 1), ("b", 1, 3))
    assert numbers(stream) == [0, 1]
    past_the_window()
    assert not stream.ready
    assert stream.look_due(time.monotonic())
    assert stream.look(time.monotonic())
    assert stream.looked({"a": None, "b": None}, blocked=False) == ["a", "b"]  # not read yet
    feed(stream, ("a", 1, 2))  # the look reads it: it was in its source all along
    assert numbers(stream) == [2, 3]
    assert stream.looked({"a": (2, 1), "b": (2, 1)}, blocked=False) == []  # ended
    stats = stream.stats
    assert (stats.late, stats.gaps, stats.held) == (0, 0, 0)


def test_a_number_that_never_came_is_passed_once_every_source_is_read() -> None:
    stream = make_stream()
    feed(stream, ("a", 0, 0), ("b", 0, 2))
    assert numbers(stream) == [0]
    past_the_window()
    stream.look(time.monotonic())
    assert stream.looked({"a": (1, 0), "b": (1, 2)}, blocked=False) == ["b"]  # b: up to 2
    assert not stream.ready
    assert stream.due() is None  # a look under way: its end decides
    assert stream.looked({"a": (1, 0), "b": (3, 4)}, blocked=False) == []
    assert numbers(stream) == [2]
    assert stream.stats.gaps == 1
    feed(stream, ("a", 1, 1))  # too late now: counted as such
    assert stream.stats.late == 1


def test_a_busy_source_is_read_only_up_to_where_it_ended_at_its_first_read() -> None:
    stream = make_stream()
    feed(stream, ("a", 0, 5))
    past_the_window()
    stream.look(time.monotonic())
    assert stream.looked({"a": (1, 9)}, blocked=False) == ["a"]
    assert stream.looked({"a": (10, 40)}, blocked=False) == []  # 10..40 stored since
    assert numbers(stream) == [5]


def test_a_look_releases_only_the_heads_whose_window_ended_by_its_beginning() -> None:
    stream = ResequencedStream(
        Resequence(seq=lambda item: item[2], correlation=lambda item: item[3], start=0),
        "look",
        on_ready=lambda: None,
        origin=lambda item: (item[0], item[1]),
    )
    feed(stream, ("a", 0, 1, "x"))
    began = time.monotonic()
    feed(stream, ("a", 1, 1, "y"))  # came after the look began: waits its own window
    stream.look(began - 2.0)  # (as if x's 1 s window had ended when the look began)
    assert stream.looked({"a": (2, 1)}, blocked=False) == []
    assert stream.take(10) == []  # x's window had not ended by then either
    stream.look(time.monotonic() + 1.5)
    stream.looked({"a": (2, 1)}, blocked=False)
    assert [item[3] for item in stream.take(10)] == ["x", "y"]


def test_a_look_that_can_read_no_more_ends_at_once() -> None:
    # The window is full of what the resequencer holds, and no commit frees it:
    # what it holds goes out (or nothing would ever move).
    stream = make_stream()
    feed(stream, ("a", 0, 1))
    past_the_window()
    stream.look(time.monotonic())
    assert stream.looked({"a": None}, blocked=True) == []
    assert numbers(stream) == [1]


def test_a_look_under_way_goes_on_and_no_due_time_is_given_meanwhile() -> None:
    stream = make_stream()
    assert stream.due() is None and not stream.look_due(time.monotonic())
    feed(stream, ("a", 0, 1))
    assert stream.due() is not None
    assert stream.look(time.monotonic())
    assert not stream.look(time.monotonic() + 10)  # the first goes on
    assert stream.due() is None and stream.look_due(0.0)
    assert stream.looked({}, blocked=False) == []  # no source: ended (1's window had not)
    assert stream.take(10) == [] and not stream.look_due(time.monotonic())


def test_expire_releases_only_the_heads_whose_window_ended_by_the_time_given() -> None:
    released: list[Any] = []
    resequencer = Resequencer(
        "expire",
        timeout_ms=WINDOW_MS,
        start=0,
        on_release=lambda seq, payload, cid: released.append(seq),
    )
    before = time.monotonic()
    resequencer.accept(2, "b")
    due = resequencer.due()
    assert due is not None and due >= before + WINDOW_MS / 1000
    past_the_window()
    resequencer.expire(before)  # ended since, not by then
    assert released == []
    resequencer.expire(due)
    assert released == [2] and resequencer.stats.gaps == 2
    assert resequencer.due() is None
