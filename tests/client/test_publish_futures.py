"""Unit tests of PublishBatch / PublishFuture (no Ray): every public Future behaviour, threaded."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION, Future
from datetime import UTC, datetime

import pytest

from raytopic.client.publish_futures import PublishBatch, PublishFuture
from raytopic.core.errors import TopicFullError
from raytopic.core.protocol import AppendAck
from raytopic.core.records import Position, PublishStatus

TOPIC = "abcdef0123456789"
STAMP = 1_700_000_000.25
WHEN = datetime.fromtimestamp(STAMP, tz=UTC)


def batch_of(channel: int, count: int) -> tuple[PublishBatch, list[PublishFuture]]:
    batch = PublishBatch(TOPIC, channel)
    return batch, [batch.add(f"v{channel}-{i}".encode()) for i in range(count)]


def later(delay: float, action: Callable[[], object]) -> threading.Thread:
    """Run ``action`` on another thread after ``delay`` seconds."""

    def body() -> None:
        time.sleep(delay)
        action()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def status(channel: int, sequence: int) -> PublishStatus:
    return PublishStatus(channel, Position(TOPIC, channel, sequence), WHEN)


# -- pending -------------------------------------------------------------------


def test_add_numbers_the_values_and_keeps_their_payloads() -> None:
    batch, futures = batch_of(2, 3)
    assert batch.payloads == [b"v2-0", b"v2-1", b"v2-2"]
    assert [f._index for f in futures] == [0, 1, 2]
    assert all(isinstance(f, Future) for f in futures)


def test_a_pending_future_is_running_not_done_and_cannot_be_cancelled() -> None:
    _, (future,) = batch_of(0, 1)
    assert future.running() is True
    assert future.done() is False
    assert future.cancelled() is False
    assert future.cancel() is False
    assert future.cancelled() is False
    assert future.running() is True
    assert "channel=0" in repr(future)
    assert "RUNNING" in repr(future)


def test_result_and_exception_time_out_while_pending() -> None:
    _, (future,) = batch_of(0, 1)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        future.result(timeout=0.05)
    with pytest.raises(concurrent.futures.TimeoutError):
        future.exception(timeout=0.05)
    assert time.monotonic() - started >= 0.09
    with pytest.raises(TimeoutError):
        future.result(timeout=0)


# -- completion ----------------------------------------------------------------


def test_a_full_ack_resolves_every_future_to_its_status() -> None:
    batch, futures = batch_of(3, 4)
    batch.complete(AppendAck(first=20, accepted=4, stamp=STAMP))
    assert [f.result() for f in futures] == [status(3, s) for s in (20, 21, 22, 23)]
    assert [f.result(timeout=0) for f in futures] == [status(3, s) for s in (20, 21, 22, 23)]
    assert [f.exception() for f in futures] == [None] * 4
    assert [(f.done(), f.running(), f.cancel(), f.cancelled()) for f in futures] == [
        (True, False, False, False)
    ] * 4
    assert batch.payloads == []
    assert "FINISHED" in repr(futures[0])


def test_the_status_is_built_once_and_reports_aware_utc() -> None:
    batch, (future,) = batch_of(1, 1)
    batch.complete(AppendAck(first=0, accepted=1, stamp=STAMP))
    result = future.result()
    assert future.result() is result
    assert result.channel == 1
    assert result.position == Position(TOPIC, 1, 0)
    assert result.timestamp == WHEN
    assert result.timestamp.tzinfo is UTC
    assert result.timestamp.utcoffset().total_seconds() == 0


def test_result_blocks_until_another_thread_completes_the_batch() -> None:
    batch, futures = batch_of(0, 2)
    ack = AppendAck(first=5, accepted=2, stamp=STAMP)
    started = time.monotonic()  # before the thread: a starved main thread cannot shorten it
    thread = later(0.05, lambda: batch.complete(ack))
    assert futures[1].result(timeout=5) == status(0, 6)
    assert time.monotonic() - started >= 0.04
    assert futures[0].result() == status(0, 5)  # no timeout: already done
    thread.join()


def test_result_without_a_timeout_waits_for_completion() -> None:
    batch, (future,) = batch_of(0, 1)
    later(0.05, lambda: batch.complete(AppendAck(first=0, accepted=1, stamp=STAMP)))
    assert future.result() == status(0, 0)


def test_many_threads_waiting_on_one_batch_all_wake() -> None:
    batch, futures = batch_of(6, 8)
    results: dict[int, PublishStatus] = {}

    def wait(index: int) -> None:
        results[index] = futures[index].result(timeout=5)

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(0.02)
    batch.complete(AppendAck(first=100, accepted=8, stamp=STAMP))
    for thread in threads:
        thread.join(5)
    assert results == {i: status(6, 100 + i) for i in range(8)}


def test_a_partial_ack_fails_the_values_beyond_accepted() -> None:
    batch, futures = batch_of(2, 4)
    error = TopicFullError("channel 2 is full")
    waiting = later(0.02, lambda: batch.complete(AppendAck(7, 2, STAMP, error)))
    assert futures[3].exception(timeout=5) is error
    waiting.join()
    assert [f.result() for f in futures[:2]] == [status(2, 7), status(2, 8)]
    assert [f.exception() for f in futures] == [None, None, error, error]
    for future in futures[2:]:
        with pytest.raises(TopicFullError, match="channel 2 is full"):
            future.result()
        assert future.done() is True


def test_complete_with_an_error_fails_every_future() -> None:
    batch, futures = batch_of(0, 3)
    error = ConnectionError("channel actor died")
    later(0.02, lambda: batch.complete(None, error))
    with pytest.raises(ConnectionError, match="channel actor died"):
        futures[0].result(timeout=5)
    assert [f.exception() for f in futures] == [error] * 3
    assert all(f.done() for f in futures)


def test_an_error_wins_over_an_ack() -> None:
    batch, futures = batch_of(0, 2)
    error = RuntimeError("lost reply")
    batch.complete(AppendAck(first=0, accepted=2, stamp=STAMP), error)
    assert [f.exception() for f in futures] == [error, error]


# -- callbacks -----------------------------------------------------------------


def test_callback_added_before_completion_runs_once_on_the_completing_thread() -> None:
    batch, futures = batch_of(0, 3)
    calls: list[tuple[PublishFuture, PublishStatus, str]] = []

    def record(future: PublishFuture) -> None:
        calls.append((future, future.result(timeout=0), threading.current_thread().name))

    futures[0].add_done_callback(record)
    futures[2].add_done_callback(record)
    futures[2].add_done_callback(record)
    assert calls == []
    thread = later(0.01, lambda: batch.complete(AppendAck(first=0, accepted=3, stamp=STAMP)))
    thread.join()
    assert calls == [
        (futures[0], status(0, 0), thread.name),
        (futures[2], status(0, 2), thread.name),
        (futures[2], status(0, 2), thread.name),
    ]


def test_callback_added_after_completion_runs_at_once_on_the_calling_thread() -> None:
    batch, (future,) = batch_of(0, 1)
    batch.complete(AppendAck(first=3, accepted=1, stamp=STAMP))
    calls: list[tuple[PublishStatus, str]] = []
    future.add_done_callback(lambda f: calls.append((f.result(), threading.current_thread().name)))
    assert calls == [(status(0, 3), threading.current_thread().name)]


def test_a_failing_future_calls_back_with_its_exception() -> None:
    batch, futures = batch_of(0, 2)
    error = TopicFullError("full")
    seen: list[BaseException | None] = []
    for future in futures:
        future.add_done_callback(lambda f: seen.append(f.exception()))
    batch.complete(AppendAck(first=0, accepted=1, stamp=STAMP, error=error))
    assert seen == [None, error]


def test_a_raising_callback_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    batch, futures = batch_of(0, 2)
    calls: list[str] = []

    def boom(future: PublishFuture) -> None:
        raise ValueError("callback failed")

    futures[0].add_done_callback(boom)
    futures[0].add_done_callback(lambda f: calls.append("after boom"))
    futures[1].add_done_callback(lambda f: calls.append("other future"))
    with caplog.at_level(logging.ERROR, logger="concurrent.futures"):
        batch.complete(AppendAck(first=0, accepted=2, stamp=STAMP))  # does not raise
        futures[1].add_done_callback(boom)  # after completion: logged too
    assert calls == ["after boom", "other future"]
    failures = [r for r in caplog.records if r.exc_info and "callback failed" in str(r.exc_info[1])]
    assert len(failures) == 2
    assert futures[0].result() == status(0, 0)


def test_a_callback_raising_system_exit_lets_the_other_futures_call_back_first() -> None:
    batch, futures = batch_of(0, 3)
    calls: list[int] = []

    def leave(future: PublishFuture) -> None:
        raise SystemExit(3)  # not an Exception: Future does not log it, it propagates

    futures[0].add_done_callback(leave)
    for index in (1, 2):
        futures[index].add_done_callback(lambda f, index=index: calls.append(index))
    with pytest.raises(SystemExit):
        batch.complete(AppendAck(first=0, accepted=3, stamp=STAMP))
    assert calls == [1, 2]  # no fix: [] (they never call back)
    assert [future.result(timeout=0) for future in futures] == [status(0, i) for i in range(3)]


def test_callbacks_racing_completion_run_exactly_once() -> None:
    for _ in range(200):
        batch, futures = batch_of(0, 4)
        counts = [0, 0, 0, 0]
        barrier = threading.Barrier(2)

        def add_callbacks(
            futures: list[PublishFuture] = futures,
            counts: list = counts,
            barrier: threading.Barrier = barrier,
        ) -> None:
            barrier.wait()
            for index, future in enumerate(futures):
                future.add_done_callback(lambda f, i=index: counts.__setitem__(i, counts[i] + 1))

        adder = threading.Thread(target=add_callbacks)
        adder.start()
        barrier.wait()
        batch.complete(AppendAck(first=0, accepted=4, stamp=STAMP))
        adder.join()
        assert counts == [1, 1, 1, 1]


# -- wait and as_completed -----------------------------------------------------


def test_wait_first_completed_returns_the_first_batch_to_finish() -> None:
    batch_a, futures_a = batch_of(0, 2)
    batch_b, futures_b = batch_of(1, 2)
    later(0.05, lambda: batch_b.complete(AppendAck(first=0, accepted=2, stamp=STAMP)))
    done, not_done = concurrent.futures.wait(
        futures_a + futures_b, timeout=5, return_when=FIRST_COMPLETED
    )
    assert done == set(futures_b)
    assert not_done == set(futures_a)
    batch_a.complete(AppendAck(first=9, accepted=2, stamp=STAMP))
    done, not_done = concurrent.futures.wait(futures_a + futures_b, return_when=FIRST_COMPLETED)
    assert (done, not_done) == (set(futures_a + futures_b), set())


def test_wait_all_completed_waits_for_every_batch() -> None:
    batches = [batch_of(channel, 3) for channel in range(3)]
    futures = [f for _, fs in batches for f in fs]
    done, not_done = concurrent.futures.wait(futures, timeout=0.05, return_when=ALL_COMPLETED)
    assert (done, not_done) == (set(), set(futures))
    for delay, (batch, _) in zip((0.01, 0.03, 0.05), batches, strict=True):
        later(delay, lambda b=batch: b.complete(AppendAck(first=0, accepted=3, stamp=STAMP)))
    done, not_done = concurrent.futures.wait(futures, timeout=5, return_when=ALL_COMPLETED)
    assert (done, not_done) == (set(futures), set())
    assert [f.result(timeout=0).position.sequence for f in futures] == [0, 1, 2] * 3


def test_wait_all_completed_times_out_on_a_batch_that_never_completes() -> None:
    batch_a, futures_a = batch_of(0, 2)
    _, futures_b = batch_of(1, 2)
    later(0.01, lambda: batch_a.complete(AppendAck(first=0, accepted=2, stamp=STAMP)))
    done, not_done = concurrent.futures.wait(futures_a + futures_b, timeout=0.2)
    assert (done, not_done) == (set(futures_a), set(futures_b))


def test_wait_first_exception_returns_on_a_failed_value() -> None:
    batch_ok, futures_ok = batch_of(0, 2)
    batch_bad, futures_bad = batch_of(1, 2)
    _, futures_never = batch_of(2, 1)
    error = TopicFullError("full")
    later(0.01, lambda: batch_ok.complete(AppendAck(first=0, accepted=2, stamp=STAMP)))
    later(
        0.05, lambda: batch_bad.complete(AppendAck(first=0, accepted=1, stamp=STAMP, error=error))
    )
    done, not_done = concurrent.futures.wait(
        futures_ok + futures_bad + futures_never, timeout=5, return_when=FIRST_EXCEPTION
    )
    assert done == set(futures_ok + futures_bad)
    assert not_done == set(futures_never)
    assert futures_bad[1].exception() is error


def test_wait_mixes_publish_futures_with_stock_futures() -> None:
    batch, futures = batch_of(0, 2)
    stock: Future[str] = Future()
    later(0.02, lambda: stock.set_result("stock"))
    done, _ = concurrent.futures.wait([*futures, stock], timeout=5, return_when=FIRST_COMPLETED)
    assert done == {stock}
    later(0.02, lambda: batch.complete(AppendAck(first=0, accepted=2, stamp=STAMP)))
    done, not_done = concurrent.futures.wait([*futures, stock], timeout=5)
    assert (done, not_done) == ({*futures, stock}, set())


def test_as_completed_yields_every_future_in_completion_order_of_batches() -> None:
    batch_a, futures_a = batch_of(0, 2)
    batch_b, futures_b = batch_of(1, 3)
    batch_c, futures_c = batch_of(2, 2)
    batch_c.complete(AppendAck(first=0, accepted=2, stamp=STAMP))  # done before the call
    label = {f: "c" for f in futures_c} | {f: "a" for f in futures_a} | {f: "b" for f in futures_b}
    # Each batch completes on another thread only once the one before it was yielded: the
    # order asserted is the completion order, whatever the machine's load (a fixed 30 ms
    # could pass before as_completed started, and its already-done futures come as a set).
    acks = {batch_a: AppendAck(first=0, accepted=2, stamp=STAMP)}
    acks[batch_b] = AppendAck(first=0, accepted=3, stamp=STAMP)
    next_batch = {2: batch_a, 4: batch_b}
    order: list[str] = []
    for future in concurrent.futures.as_completed(futures_a + futures_b + futures_c, 5):
        order.append(label[future])
        if len(order) in next_batch:
            batch = next_batch[len(order)]
            later(0.02, lambda b=batch: b.complete(acks[b]))
    assert order == ["c", "c", "a", "a", "b", "b", "b"]


def test_as_completed_times_out_on_a_batch_that_never_completes() -> None:
    batch_a, futures_a = batch_of(0, 2)
    _, futures_b = batch_of(1, 1)
    batch_a.complete(AppendAck(first=0, accepted=2, stamp=STAMP))
    seen = []
    with pytest.raises(TimeoutError):
        for future in concurrent.futures.as_completed(futures_a + futures_b, timeout=0.1):
            seen.append(future)
    assert set(seen) == set(futures_a)


def test_waiting_on_a_future_that_also_has_a_callback_counts_it_once() -> None:
    batch_a, futures_a = batch_of(0, 1)
    batch_b, futures_b = batch_of(1, 1)
    calls: list[PublishFuture] = []
    futures_a[0].add_done_callback(calls.append)
    later(0.02, lambda: batch_a.complete(AppendAck(first=0, accepted=1, stamp=STAMP)))
    later(0.3, lambda: batch_b.complete(AppendAck(first=0, accepted=1, stamp=STAMP)))
    done, not_done = concurrent.futures.wait(futures_a + futures_b, timeout=5)
    assert (done, not_done) == (set(futures_a + futures_b), set())
    assert calls == futures_a


def test_as_completed_on_a_future_that_also_has_a_callback_yields_it_once() -> None:
    batch, futures = batch_of(0, 2)
    calls: list[PublishFuture] = []
    futures[0].add_done_callback(calls.append)
    later(0.02, lambda: batch.complete(AppendAck(first=0, accepted=2, stamp=STAMP)))
    assert sorted(f._index for f in concurrent.futures.as_completed(futures, timeout=5)) == [0, 1]
    assert calls == [futures[0]]
