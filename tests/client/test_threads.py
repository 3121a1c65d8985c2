"""No background thread dies quietly: the publisher's settle thread, a member's
heartbeat thread and a resequencer's sweeper, each made to fail for real (a
user's callback raising on it), and the waits they make, which no setting can
overflow."""

from __future__ import annotations

import logging
import threading

import pytest

import raytopic as rt
from raytopic.core.resequencer import Resequencer
from raytopic.core.waits import LONGEST_WAIT, bounded_wait

from tests.topic_helpers import TIMEOUT, get, key_for, module_topic, next_sequences

shared_two = module_topic(channels=2)


def _exit_on(thread_prefix: str) -> None:
    """Raise SystemExit if running on a thread named ``thread_prefix...``: a user's
    callback asking the thread it runs on to end (Python's threading ends it
    without a word)."""
    if threading.current_thread().name.startswith(thread_prefix):
        raise SystemExit(3)


# -- waits -----------------------------------------------------------------------------


@pytest.mark.parametrize("seconds", [float("inf"), 1e300, 2**63 / 1000, threading.TIMEOUT_MAX * 2])
def test_a_wait_past_pythons_limit_is_cut_to_the_longest_wait(seconds: float) -> None:
    with pytest.raises(OverflowError):
        threading.Lock().acquire(timeout=seconds)  # what killed the threads
    assert bounded_wait(seconds) == LONGEST_WAIT
    assert threading.Lock().acquire(timeout=bounded_wait(seconds))  # free: at once


def test_bounded_wait_keeps_short_waits_and_no_limit() -> None:
    assert bounded_wait(None) is None
    assert bounded_wait(0.25) == 0.25
    assert bounded_wait(LONGEST_WAIT) == LONGEST_WAIT
    assert bounded_wait(-1.0) == 0.0  # a deadline already past
    assert bounded_wait(float("nan")) == LONGEST_WAIT


# -- the publisher's settle thread ------------------------------------------------------


def test_a_publisher_whose_thread_ends_fails_what_it_had_not_sent(shared_two, caplog) -> None:
    before = next_sequences(shared_two)
    publisher = shared_two.publisher(linger=60.0)  # partial batches wait: nothing sent yet
    first = publisher.publish("first", key=key_for(0, 2))
    first.add_done_callback(lambda _: _exit_on("raytopic-publisher-"))
    second = publisher.publish("second", key=key_for(0, 2))  # in first's batch
    called_back = threading.Event()
    second.add_done_callback(lambda _: called_back.set())
    held = publisher.publish("held", key=key_for(1, 2))
    # Sends channel 0's batch (first, second; then this part) and leaves "held" waiting.
    part = publisher.publish_batch(["part"], keys=[key_for(0, 2)])
    with caplog.at_level(logging.ERROR, logger="raytopic.client.publisher"):
        assert first.result(timeout=TIMEOUT).channel == 0  # its callback ended the thread
        assert called_back.wait(10)  # the batch's other callbacks still ran
        error = held.exception(timeout=10)  # no fix: never resolves
        assert isinstance(error, rt.PublisherClosedError) and "SystemExit" in str(error)
        assert [status.channel for status in get(part)] == [0]
        with pytest.raises(rt.PublisherClosedError, match="background thread ended"):
            publisher.publish("after")
        publisher.flush(timeout=TIMEOUT)
        publisher.close(timeout=TIMEOUT)
    assert any("background thread ended" in record.message for record in caplog.records)
    after = next_sequences(shared_two)
    assert after == {0: before[0] + 3, 1: before[1]}  # "held" was not appended


# -- a member's heartbeat thread ----------------------------------------------------------


def _heartbeat_threads(subscriber: rt.Subscriber) -> list[threading.Thread]:
    name = f"raytopic-heartbeat-{subscriber.subscriber_id[:8]}"
    return [thread for thread in threading.enumerate() if thread.name == name]


def test_a_member_whose_heartbeat_thread_ended_reads_its_view_before_using_it(
    shared_two, unique_name, wait_until, caplog
) -> None:
    group = unique_name("heartbeat")
    heard: list[rt.OwnershipChange] = []

    def listener(change: rt.OwnershipChange) -> None:
        heard.append(change)
        _exit_on("raytopic-heartbeat-")

    a = shared_two.subscriber(group=group, on_ownership_change=listener, complete_on_empty=True)
    with caplog.at_level(logging.ERROR, logger="raytopic.client.membership"):
        assert a.channels == (0, 1)
        b = shared_two.subscriber(group=group)
        # a's heartbeat thread hears of the rebalance, tells the listener, and ends.
        wait_until(lambda: len(heard) == 2 and not _heartbeat_threads(a))
        taken = frozenset(b.channels)
        assert heard[1].revoked == taken
        b.close()  # a owns both channels again: no thread of a's hears it
        # No fix: a still believes it owns one channel, and never reads the other.
        assert a.channels == (0, 1)
    assert heard[2].assigned == taken
    assert any("heartbeat thread" in record.message for record in caplog.records)
    assert [thread.is_alive() for thread in _heartbeat_threads(a)] == [True]  # polls again
    a.close()


# -- a resequencer's sweeper ----------------------------------------------------------------


def test_a_sweeper_goes_on_after_a_callback_ends_its_sweep(wait_until, caplog) -> None:
    released: list[int] = []

    def on_release(seq: int, payload: object, correlation: object) -> None:
        released.append(seq)
        if seq == 1:
            _exit_on("sweeper")

    resequencer = Resequencer(
        "sweeper-exit", timeout_ms=20, reap_interval_ms=5, start=0, on_release=on_release
    )
    sweeper = threading.Thread(target=resequencer.start, name="sweeper", daemon=True)
    with caplog.at_level(logging.ERROR, logger="raytopic.resequencer"):
        sweeper.start()
        resequencer.accept(1, "b")  # released by the sweeper, past the gap at 0
        wait_until(lambda: released == [1])
        resequencer.accept(3, "d")  # no fix: the sweeper is gone, and 3 waits forever
        wait_until(lambda: released == [1, 3], timeout=5)
    assert sweeper.is_alive() and resequencer.is_running
    assert any("the sweeper goes on" in record.message for record in caplog.records)
    resequencer.stop()
    sweeper.join(timeout=5)
    assert not sweeper.is_alive()


def test_an_interrupted_sweep_on_the_main_thread_ends_the_loop() -> None:
    def on_release(seq: int, payload: object, correlation: object) -> None:
        raise KeyboardInterrupt  # Ctrl-C while the user runs the loop here

    resequencer = Resequencer("main", timeout_ms=1, reap_interval_ms=1, on_release=on_release)
    resequencer.accept(5, "a")  # the first of its stream: it waits out its hold window
    backstop = threading.Timer(5.0, resequencer.stop)  # were it swallowed, the loop would go on
    backstop.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            resequencer.start()
    finally:
        backstop.cancel()
    assert not resequencer.is_running
