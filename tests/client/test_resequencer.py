"""Unit tests of the pure Resequencer (no Ray): release rules, threads, validation."""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytopic.core.errors import InvalidArgumentError, InvalidTypeError, TopicError
from raytopic.core.resequenced_stream import ResequencedStream
from raytopic.core.resequencer import Resequence, Resequencer, ResequencerStats

LONG_MS = 60_000  # a hold window no test waits out


class Recorder:
    """Callbacks that log every call, in call order, with thread and time."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.threads: dict[int, str] = {}
        self.times: dict[int, float] = {}

    def on_release(self, seq: int, payload: Any, cid: Any) -> None:
        self.threads[seq] = threading.current_thread().name
        self.times[seq] = time.monotonic()
        self.events.append(("release", seq, payload, cid))

    def on_gap(self, seq: int, cid: Any) -> None:
        self.events.append(("gap", seq, cid))

    def on_late(self, seq: int, payload: Any, cid: Any) -> None:
        self.events.append(("late", seq, payload, cid))

    def released(self, cid: Any = None) -> list[int]:
        return [e[1] for e in self.events if e[0] == "release" and e[3] == cid]

    def kinds(self) -> list[tuple[str, int]]:
        """The events as (kind, seq) pairs, for exact order assertions."""
        return [(e[0], e[1]) for e in self.events]


def make(rec: Recorder, **kwargs: Any) -> Resequencer:
    kwargs.setdefault("timeout_ms", LONG_MS)
    return Resequencer(
        kwargs.pop("name", "test"),
        on_release=rec.on_release,
        on_gap=rec.on_gap,
        on_late=rec.on_late,
        **kwargs,
    )


@contextmanager
def sweeping(resequencer: Resequencer, wait_until: Callable[..., object]) -> Iterator[str]:
    """Run the sweeper on a thread for the block; yields the thread's name."""
    thread = threading.Thread(target=resequencer.start, name="sweeper", daemon=True)
    thread.start()
    wait_until(lambda: resequencer.is_running, timeout=5)
    try:
        yield thread.name
    finally:
        resequencer.stop()
        thread.join(timeout=5)
        assert not thread.is_alive()


# -- release rules ------------------------------------------------------------


def test_in_order_messages_are_released_at_once_on_the_accepting_thread() -> None:
    rec = Recorder()
    r = make(rec, start=0)
    for seq in range(5):
        r.accept(seq, f"p{seq}")
        assert rec.released() == list(range(seq + 1))
    assert rec.events == [("release", s, f"p{s}", None) for s in range(5)]
    assert set(rec.threads.values()) == {threading.current_thread().name}
    assert r.stats == ResequencerStats(released=5, gaps=0, late=0, held=0)


def test_gap_filled_before_the_timeout_releases_in_order_without_gap_calls(wait_until) -> None:
    rec = Recorder()
    r = make(rec, start=0, timeout_ms=5_000, reap_interval_ms=10)
    with sweeping(r, wait_until):
        r.accept(0, "a")
        r.accept(2, "c")
        r.accept(3, "d")
        assert rec.released() == [0]
        assert r.stats.held == 2
        r.accept(1, "b")
    assert rec.kinds() == [("release", 0), ("release", 1), ("release", 2), ("release", 3)]
    assert r.stats == ResequencerStats(released=4, gaps=0, late=0, held=0)


def test_timeout_release_reports_each_gap_ascending_before_the_release(wait_until) -> None:
    rec = Recorder()
    r = make(rec, start=0, timeout_ms=50, reap_interval_ms=10)
    with sweeping(r, wait_until) as sweeper:
        r.accept(0, "a")
        r.accept(4, "e")
        wait_until(lambda: 4 in rec.released())
    assert rec.kinds() == [
        ("release", 0),
        ("gap", 1),
        ("gap", 2),
        ("gap", 3),
        ("release", 4),
    ]
    assert rec.threads[0] == threading.current_thread().name
    assert rec.threads[4] == sweeper
    assert r.stats == ResequencerStats(released=2, gaps=3, late=0, held=0)


def test_hold_window_is_measured_from_the_arrival_of_the_current_head(wait_until) -> None:
    rec = Recorder()
    r = make(rec, timeout_ms=200, reap_interval_ms=10)  # no start: 5 has no known predecessor
    with sweeping(r, wait_until):
        r.pause()  # so a slow machine cannot release 5 before 3 arrives
        first = time.monotonic()
        r.accept(5, "f")
        time.sleep(0.1)
        second = time.monotonic()
        r.accept(3, "d")  # the new head: its own window starts now
        r.resume()
        wait_until(lambda: len(rec.released()) == 2)
    # Measured from the first arrival, 3 would go out ~100 ms early.
    assert rec.times[3] - second >= 0.2
    assert rec.times[5] - first >= 0.2
    # 5 arrived before 3, so its window is over by then: out in the same sweep.
    assert rec.kinds() == [("release", 3), ("gap", 4), ("release", 5)]


def test_first_message_without_start_waits_its_hold_window(wait_until) -> None:
    rec = Recorder()
    r = make(rec, timeout_ms=100, reap_interval_ms=10)
    with sweeping(r, wait_until) as sweeper:
        arrived = time.monotonic()
        r.accept(7, "h")
        wait_until(lambda: rec.released() == [7])
        assert rec.times[7] - arrived >= 0.1
        assert rec.threads[7] == sweeper
        r.accept(8, "i")  # now the successor of 7: at once, on this thread
        assert rec.released() == [7, 8]
    assert ("gap", 6) not in rec.kinds()


def test_capacity_forces_the_head_out_past_gaps() -> None:
    rec = Recorder()
    r = make(rec, start=0, capacity=2)
    r.accept(0, "a")
    r.accept(3, "d")
    r.accept(5, "f")
    assert rec.released() == [0]
    assert r.stats.held == 2
    r.accept(7, "h")  # three held > 2: 3 goes out past 1 and 2
    assert rec.kinds() == [("release", 0), ("gap", 1), ("gap", 2), ("release", 3)]
    assert r.stats.held == 2
    r.accept(6, "g")  # 5, 6, 7 held: 5 is forced out past 4, then 6 and 7 follow
    assert rec.kinds()[4:] == [("gap", 4), ("release", 5), ("release", 6), ("release", 7)]
    r.accept(4, "e")
    assert rec.kinds()[-1] == ("late", 4)
    assert r.stats == ResequencerStats(released=5, gaps=3, late=1, held=0)


def test_capacity_without_start_releases_the_first_head_without_a_gap() -> None:
    rec = Recorder()
    r = make(rec, capacity=1)
    r.accept(10, "k")
    r.accept(12, "m")
    assert rec.kinds() == [("release", 10)]
    r.accept(14, "o")
    assert rec.kinds() == [("release", 10), ("gap", 11), ("release", 12)]


def test_zero_hold_window_releases_at_once_and_drops_a_later_lower_number() -> None:
    rec = Recorder()
    r = make(rec, timeout_ms=0)
    r.accept(5, "f")
    assert rec.kinds() == [("release", 5)]
    r.accept(8, "i")
    assert rec.kinds() == [("release", 5), ("gap", 6), ("gap", 7), ("release", 8)]
    r.accept(6, "g")
    assert rec.events[-1] == ("late", 6, "g", None)
    r.accept(9, "j")
    assert rec.released() == [5, 8, 9]
    assert r.stats == ResequencerStats(released=3, gaps=2, late=1, held=0)


def test_duplicates_are_late_and_the_first_arrival_is_kept() -> None:
    rec = Recorder()
    r = make(rec, start=0)
    r.accept(1, "first")
    r.accept(1, "second")  # already held
    assert rec.events == [("late", 1, "second", None)]
    r.accept(0, "zero")
    assert rec.events[1:] == [("release", 0, "zero", None), ("release", 1, "first", None)]
    r.accept(0, "again")  # already released
    assert rec.events[-1] == ("late", 0, "again", None)
    assert r.stats == ResequencerStats(released=2, gaps=0, late=2, held=0)


def test_late_messages_are_counted_without_an_on_late_callback() -> None:
    released: list[int] = []
    r = Resequencer("quiet", start=3, on_release=lambda s, p, c: released.append(s))
    r.accept(1, "x")
    r.accept(3, "y")
    r.accept(3, "z")
    assert released == [3]
    assert r.stats.late == 2


def test_start_releases_the_first_number_at_once_and_numbers_below_are_late() -> None:
    rec = Recorder()
    r = make(rec, start=10)
    r.accept(10, "k")
    assert rec.kinds() == [("release", 10)]
    r.accept(9, "j")
    r.accept(-3, "neg")
    assert rec.kinds()[1:] == [("late", 9), ("late", -3)]
    r.accept(12, "m")
    assert r.stats.held == 1


def test_start_applies_to_every_stream_and_flush_reports_gaps_from_it() -> None:
    rec = Recorder()
    r = make(rec, start=0)
    r.accept(2, "c", "x")
    r.flush()
    assert rec.kinds() == [("gap", 0), ("gap", 1), ("release", 2)]
    assert rec.events[-1] == ("release", 2, "c", "x")


def test_correlation_ids_are_independent_streams() -> None:
    rec = Recorder()
    r = make(rec, start=0)
    r.accept(1, "b1", "B")
    r.accept(0, "a0", "A")
    r.accept(1, "a1", "A")
    r.accept(2, "d2")  # default stream
    assert rec.released("A") == [0, 1]
    assert rec.released("B") == []
    assert rec.released(None) == []
    r.accept(0, "b0", "B")
    assert rec.released("B") == [0, 1]
    r.accept(0, "d0")
    r.accept(1, "d1")
    assert rec.released(None) == [0, 1, 2]
    r.accept(0, "again", "A")  # late in A only
    assert rec.events[-1] == ("late", 0, "again", "A")
    assert r.stats == ResequencerStats(released=7, gaps=0, late=1, held=0)


def test_timeouts_are_tracked_per_stream(wait_until) -> None:
    rec = Recorder()
    r = make(rec, start=0, timeout_ms=50, reap_interval_ms=10)
    with sweeping(r, wait_until):
        r.accept(2, "x2", "x")
        r.accept(1, "y1", "y")
        wait_until(lambda: rec.released("x") == [2] and rec.released("y") == [1])
    gaps = sorted((e[2], e[1]) for e in rec.events if e[0] == "gap")
    assert gaps == [("x", 0), ("x", 1), ("y", 0)]


# -- flush, pause, stop -------------------------------------------------------


def test_flush_releases_everything_in_order_with_gaps() -> None:
    rec = Recorder()
    r = make(rec)
    r.accept(6, "g")
    r.accept(3, "d")
    r.accept(5, "f")
    r.accept(1, "b", "other")
    r.accept(4, "e", "other")
    assert rec.events == []
    r.flush()
    assert rec.events == [
        ("release", 3, "d", None),
        ("gap", 4, None),
        ("release", 5, "f", None),
        ("release", 6, "g", None),
        ("release", 1, "b", "other"),
        ("gap", 2, "other"),
        ("gap", 3, "other"),
        ("release", 4, "e", "other"),
    ]
    assert r.stats == ResequencerStats(released=5, gaps=3, late=0, held=0)
    r.accept(7, "h")  # the stream continues after the flush
    assert rec.released() == [3, 5, 6, 7]


def test_pause_keeps_state_and_resume_releases(wait_until) -> None:
    rec = Recorder()
    r = make(rec, start=0, timeout_ms=50, reap_interval_ms=10)
    with sweeping(r, wait_until):
        r.pause()
        assert r.is_paused
        assert r.is_running
        r.accept(0, "a")
        r.accept(2, "c")
        r.accept(5, "f")
        time.sleep(0.3)  # six hold windows: a sweep would have released 2
        assert rec.released() == [0]
        r.accept(1, "b")  # successors still go out while paused
        assert rec.released() == [0, 1, 2]
        assert r.stats.held == 1
        r.resume()
        assert not r.is_paused
        wait_until(lambda: rec.released() == [0, 1, 2, 5])
    assert rec.kinds()[-3:] == [("gap", 3), ("gap", 4), ("release", 5)]


def test_capacity_still_applies_while_paused() -> None:
    rec = Recorder()
    r = make(rec, start=0, capacity=1)
    r.pause()
    r.accept(2, "c")
    r.accept(4, "e")
    assert rec.kinds() == [("gap", 0), ("gap", 1), ("release", 2)]


def test_stop_ends_the_loop_promptly(wait_until) -> None:
    r = Resequencer("slow", reap_interval_ms=60_000, on_release=lambda s, p, c: None)
    thread = threading.Thread(target=r.start, daemon=True)
    assert not r.is_running
    thread.start()
    wait_until(lambda: r.is_running, timeout=5)
    began = time.monotonic()
    r.stop()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert time.monotonic() - began < 5  # not one full 60 s interval
    assert not r.is_running
    r.stop()  # idempotent


def test_stop_before_the_thread_starts_is_not_lost() -> None:
    r = Resequencer("early", reap_interval_ms=60_000, on_release=lambda s, p, c: None)
    r.stop()
    thread = threading.Thread(target=r.start, daemon=True)
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert not r.is_running


def test_a_second_concurrent_start_is_refused(wait_until) -> None:
    r = Resequencer("twice", reap_interval_ms=10, on_release=lambda s, p, c: None)
    with sweeping(r, wait_until):
        with pytest.raises(RuntimeError, match="already running"):
            r.start()
        assert r.is_running


def test_name_and_repr() -> None:
    r = Resequencer("orders", on_release=lambda s, p, c: None)
    assert r.name == "orders"
    assert "orders" in repr(r)


# -- callbacks: errors, re-entrancy, threads ------------------------------------


def test_a_raising_callback_is_logged_and_changes_nothing_else(wait_until, caplog) -> None:
    released: list[int] = []

    def on_release(seq: int, payload: Any, cid: Any) -> None:
        released.append(seq)
        if payload == "boom":
            raise RuntimeError("sink down")

    gaps: list[int] = []

    def on_gap(seq: int, cid: Any) -> None:
        gaps.append(seq)
        if seq == 3:
            raise ValueError("gap handler broke")

    r = Resequencer(
        "fragile",
        start=0,
        timeout_ms=30,
        reap_interval_ms=10,
        on_release=on_release,
        on_gap=on_gap,
    )
    with caplog.at_level(logging.ERROR, logger="raytopic.resequencer"), sweeping(r, wait_until):
        r.accept(0, "boom")  # raises on the accepting thread
        r.accept(1, "ok")
        r.accept(3, "boom")  # timeout release on the sweeper raises
        wait_until(lambda: 3 in released)
        r.accept(6, "late-ish")  # the sweeper still runs: gaps 4, 5 and 6 follow
        wait_until(lambda: 6 in released)
    assert released == [0, 1, 3, 6]
    assert gaps == [2, 4, 5]
    assert r.stats == ResequencerStats(released=4, gaps=3, late=0, held=0)
    failures = [rec for rec in caplog.records if rec.name == "raytopic.resequencer"]
    assert len(failures) == 2
    assert all(rec.exc_info is not None for rec in failures)
    assert "on_release" in failures[0].getMessage()
    assert "fragile" in failures[0].getMessage()


def test_a_raising_gap_callback_does_not_stop_the_remaining_gaps(caplog) -> None:
    gaps: list[int] = []

    def on_gap(seq: int, cid: Any) -> None:
        gaps.append(seq)
        raise RuntimeError("nope")

    released: list[int] = []
    r = Resequencer("g", start=0, on_release=lambda s, p, c: released.append(s), on_gap=on_gap)
    with caplog.at_level(logging.ERROR, logger="raytopic.resequencer"):
        r.accept(3, "d")
        r.flush()
    assert gaps == [0, 1, 2]
    assert released == [3]
    assert len(caplog.records) == 3


def test_reentrant_accept_from_on_release_keeps_order() -> None:
    log: list[tuple[str, int]] = []
    r: Resequencer

    def on_release(seq: int, payload: Any, cid: Any) -> None:
        log.append(("enter", seq))
        if seq == 0:
            r.accept(1, "b")  # its release waits until this callback returns
            r.accept(3, "d")
        if seq == 1:
            r.accept(2, "c")
        log.append(("exit", seq))

    r = Resequencer("re", start=0, on_release=on_release)
    r.accept(0, "a")
    assert log == [
        ("enter", 0),
        ("exit", 0),
        ("enter", 1),
        ("exit", 1),
        ("enter", 2),
        ("exit", 2),
        ("enter", 3),
        ("exit", 3),
    ]
    assert r.stats == ResequencerStats(released=4, gaps=0, late=0, held=0)


def test_reentrant_accept_and_flush_from_the_sweeper(wait_until) -> None:
    released: list[int] = []
    r: Resequencer

    def on_release(seq: int, payload: Any, cid: Any) -> None:
        released.append(seq)
        if seq == 5:  # a timeout release on the sweeper thread
            r.accept(7, "h")
            r.flush()

    r = Resequencer("re2", start=0, timeout_ms=30, reap_interval_ms=10, on_release=on_release)
    with sweeping(r, wait_until):
        r.accept(5, "f")
        wait_until(lambda: released == [5, 7])
    assert r.stats == ResequencerStats(released=2, gaps=6, late=0, held=0)


def test_concurrent_accepts_release_each_stream_in_order_exactly_once() -> None:
    streams = ["a", "b", None, 7]
    per_stream = 500
    messages = [(seq, cid) for cid in streams for seq in range(per_stream)]
    random.Random(42).shuffle(messages)
    released: dict[Any, list[int]] = {cid: [] for cid in streams}
    in_callback = threading.Lock()
    overlaps: list[int] = []
    threads_seen: set[str] = set()

    def on_release(seq: int, payload: Any, cid: Any) -> None:
        if not in_callback.acquire(blocking=False):
            overlaps.append(seq)
            return
        try:
            assert payload == (cid, seq)
            threads_seen.add(threading.current_thread().name)
            released[cid].append(seq)
            if seq % 10 == 0:
                time.sleep(0.0005)  # widen the window in which another thread could barge in
        finally:
            in_callback.release()

    r = Resequencer("mt", start=0, timeout_ms=LONG_MS, on_release=on_release)
    barrier = threading.Barrier(8)

    def producer(part: list[tuple[int, Any]]) -> None:
        barrier.wait()
        for seq, cid in part:
            r.accept(seq, (cid, seq), cid)

    workers = [
        threading.Thread(target=producer, args=(messages[i::8],), name=f"producer-{i}")
        for i in range(8)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
        assert not worker.is_alive()
    assert overlaps == []
    for cid in streams:
        assert released[cid] == list(range(per_stream)), cid
    assert r.stats == ResequencerStats(released=len(messages), gaps=0, late=0, held=0)
    assert len(threads_seen) > 1  # releases ran on the accepting threads


# -- property-based -----------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=200).flatmap(lambda n: st.permutations(range(n + 1))))
def test_any_permutation_is_released_in_order(order: list[int]) -> None:
    released: list[int] = []
    r = Resequencer(
        "prop", start=0, timeout_ms=LONG_MS, on_release=lambda s, p, c: released.append(s)
    )
    for seq in order:
        r.accept(seq, seq)
    assert released == sorted(order)
    assert r.stats == ResequencerStats(released=len(order), gaps=0, late=0, held=0)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=0, max_value=200).flatmap(lambda n: st.permutations(range(n + 1))),
    st.integers(min_value=1, max_value=10),
)
def test_capacity_bounds_the_buffer_and_releases_strictly_increasing(
    order: list[int], capacity: int
) -> None:
    released: list[int] = []
    gaps: list[int] = []
    late: list[int] = []
    r = Resequencer(
        "prop-cap",
        start=0,
        timeout_ms=LONG_MS,
        capacity=capacity,
        on_release=lambda s, p, c: released.append(s),
        on_gap=lambda s, c: gaps.append(s),
        on_late=lambda s, p, c: late.append(s),
    )
    for seq in order:
        r.accept(seq, seq)
        assert r.stats.held <= capacity
    r.flush()
    assert all(a < b for a, b in itertools.pairwise(released))
    assert sorted(released + late) == list(range(len(order)))
    # Every skipped number arrived later, so it is exactly the late ones.
    assert sorted(gaps) == sorted(late)
    assert r.stats == ResequencerStats(
        released=len(released), gaps=len(gaps), late=len(late), held=0
    )


# -- validation ---------------------------------------------------------------


def _noop(*args: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("kwargs", "error", "argument"),
    [
        ({"name": ""}, InvalidArgumentError, "name"),
        ({"name": 3}, InvalidTypeError, "name"),
        ({"timeout_ms": -1}, InvalidArgumentError, "timeout_ms"),
        ({"timeout_ms": 1.5}, InvalidTypeError, "timeout_ms"),
        ({"timeout_ms": True}, InvalidTypeError, "timeout_ms"),
        ({"capacity": -2}, InvalidArgumentError, "capacity"),
        ({"capacity": "10"}, InvalidTypeError, "capacity"),
        ({"reap_interval_ms": 0}, InvalidArgumentError, "reap_interval_ms"),
        ({"reap_interval_ms": None}, InvalidTypeError, "reap_interval_ms"),
        ({"on_release": None}, InvalidTypeError, "on_release"),
        ({"on_release": "print"}, InvalidTypeError, "on_release"),
        ({"on_gap": 42}, InvalidTypeError, "on_gap"),
        ({"on_late": object()}, InvalidTypeError, "on_late"),
        ({"start": 1.0}, InvalidTypeError, "start"),
        ({"start": False}, InvalidTypeError, "start"),
    ],
)
def test_constructor_validation_names_the_argument(
    kwargs: dict[str, Any], error: type[Exception], argument: str
) -> None:
    full: dict[str, Any] = {"name": "ok", "on_release": _noop}
    full.update(kwargs)
    name = full.pop("name")
    with pytest.raises(error, match=rf"\b{argument}\b") as info:
        Resequencer(name, **full)
    assert isinstance(info.value, TopicError)


def test_valid_edge_values_are_accepted() -> None:
    r = Resequencer(
        "edge", timeout_ms=0, capacity=0, reap_interval_ms=1, start=-5, on_release=_noop
    )
    assert r.stats == ResequencerStats(released=0, gaps=0, late=0, held=0)


@pytest.mark.parametrize("seq", ["1", 1.0, True, False, None, [1]])
def test_a_non_int_seq_is_a_type_error_and_stores_nothing(seq: object) -> None:
    rec = Recorder()
    r = make(rec, start=0, timeout_ms=0)
    with pytest.raises(InvalidTypeError, match=r"\bseq\b"):
        r.accept(seq, "x")  # type: ignore[arg-type]
    assert rec.events == []
    assert r.stats == ResequencerStats(released=0, gaps=0, late=0, held=0)
    r.accept(0, "a")  # 0 is still the next expected number: False was not taken for it
    assert rec.kinds() == [("release", 0)]


def test_an_unhashable_correlation_id_is_a_type_error_and_stores_nothing() -> None:
    rec = Recorder()
    r = make(rec, start=0)
    with pytest.raises(InvalidTypeError, match="correlation_id"):
        r.accept(1, "x", ["not", "hashable"])  # type: ignore[arg-type]
    assert r.stats.held == 0


# -- the subscriber option ----------------------------------------------------


def test_resequence_defaults_and_immutability() -> None:
    option = Resequence(seq=lambda v: v["n"])
    assert option.correlation is None
    assert (option.timeout_ms, option.capacity, option.start) == (1000, 0, None)
    assert option.seq({"n": 4}) == 4
    with pytest.raises(AttributeError):
        option.timeout_ms = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "error", "argument"),
    [
        ({"seq": None}, InvalidTypeError, "seq"),
        ({"seq": "n"}, InvalidTypeError, "seq"),
        ({"correlation": 3}, InvalidTypeError, "correlation"),
        ({"timeout_ms": -1}, InvalidArgumentError, "timeout_ms"),
        ({"timeout_ms": 0.5}, InvalidTypeError, "timeout_ms"),
        ({"capacity": -1}, InvalidArgumentError, "capacity"),
        ({"capacity": True}, InvalidTypeError, "capacity"),
        ({"start": "0"}, InvalidTypeError, "start"),
    ],
)
def test_resequence_validation_names_the_argument(
    kwargs: dict[str, Any], error: type[Exception], argument: str
) -> None:
    full: dict[str, Any] = {"seq": len}
    full.update(kwargs)
    with pytest.raises(error, match=rf"\b{argument}\b"):
        Resequence(**full)


def test_a_sequence_key_that_raises_is_logged_once_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before: one WARNING per value (20 here), and no count.
    stream = ResequencedStream(
        Resequence(seq=lambda v: v["step"], timeout_ms=60_000), "s", on_ready=lambda: None
    )
    with caplog.at_level(logging.WARNING, logger="raytopic.resequencer"):
        stream.feed(({"n": n}, n) for n in range(20))
    assert stream.take(100) == list(range(20))  # released as they came
    assert stream.stats.unsequenced == 20
    warnings = [r for r in caplog.records if r.name == "raytopic.resequencer"]
    assert len(warnings) == 1
    assert "KeyError" in warnings[0].getMessage()
