"""Unit tests of the thread that completes a publisher's calls (no Ray): a call's
pieces complete from the channel's acks, every call is counted completed whatever
its done-callbacks do, and once the thread has ended nothing is left waiting."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import raytopic as rt
from raytopic.client.publish_accumulator import ChannelQueue, Piece, piece_count
from raytopic.client.publish_completion import Call, Completer
from raytopic.client.publish_futures import PublishBatch
from raytopic.core.protocol import AppendAck

WAIT = 10.0


class _Publisher:
    """What the completer asks of a publisher, as a publisher answers: the calls it
    counted completed, the sends it was asked for, and the pieces it had not sent."""

    def __init__(self, unsent: list[Piece] | None = None) -> None:
        self.counted: list[Call] = []
        self.sends = 0
        self.closed_on: BaseException | None = None
        self.unsent = unsent or []
        self.changed = threading.Condition()

    def count(self, call: Call) -> None:
        with self.changed:
            self.counted.append(call)
            self.changed.notify_all()

    def send(self) -> None:
        with self.changed:
            self.sends += 1
            self.changed.notify_all()

    def close(self, cause: BaseException) -> list[Piece]:
        self.closed_on = cause
        return self.unsent

    def wait_for(self, counted: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.counted) >= counted, WAIT)


def _completer(publisher: _Publisher, linger: float = 0.0) -> Completer:
    return Completer(
        "0123abcd",
        linger,
        topic_id="topic-id",
        topic_name="topic",
        count=publisher.count,
        send=publisher.send,
        close=publisher.close,
    )


def _batch(values: int) -> tuple[PublishBatch, list[Future[Any]]]:
    batch = PublishBatch("topic-id", 0)
    return batch, [batch.add(b"%d" % value) for value in range(values)]


def _call(*pieces: Piece) -> Call:
    pipe = ChannelQueue(0, None, PublishBatch("topic-id", 0))
    return Call(pipe, 0, list(pieces), piece_count(list(pieces)))


def _reply(*acks: AppendAck) -> Future[Any]:
    done: Future[Any] = Future()
    done.set_result(acks)
    return done


def test_a_calls_pieces_complete_from_its_acks_then_it_is_counted_and_what_waits_goes() -> None:
    publisher = _Publisher()
    completer = _completer(publisher)
    first, first_futures = _batch(2)
    second, second_futures = _batch(1)
    call = _call(first, second)
    completer.start()
    completer.post(call, _reply(AppendAck(10, 2, 1.0), AppendAck(12, 1, 1.0)), None)
    publisher.wait_for(1)
    completer.stop()
    statuses = [future.result(timeout=0) for future in first_futures + second_futures]
    assert [status.position.sequence for status in statuses] == [10, 11, 12]
    assert publisher.counted == [call] and publisher.sends == 1
    assert [t for t in threading.enumerate() if t.name == "raytopic-publisher-0123abcd"] == []


def test_a_call_that_was_not_submitted_fails_its_values_with_the_reason() -> None:
    publisher = _Publisher()
    completer = _completer(publisher)
    batch, futures = _batch(2)
    completer.start()
    completer.post(_call(batch), None, rt.ChannelUnavailableError("channel 0 could not be called"))
    publisher.wait_for(1)
    completer.stop()
    assert all(isinstance(f.exception(timeout=0), rt.ChannelUnavailableError) for f in futures)


def _exit(_: Any) -> None:
    raise SystemExit(3)  # a user's callback asking the thread it runs on to end


def test_a_callback_ending_the_thread_closes_the_publisher_and_leaves_nothing_waiting() -> None:
    unsent, unsent_futures = _batch(2)
    publisher = _Publisher(unsent=[unsent])
    completer = _completer(publisher)
    batch, futures = _batch(2)
    futures[0].add_done_callback(_exit)
    called_back = threading.Event()
    futures[1].add_done_callback(lambda _: called_back.set())
    completer.start()
    completer.post(_call(batch), _reply(AppendAck(0, 2, 1.0)), None)
    publisher.wait_for(1)  # counted although its callback ended the thread
    assert called_back.wait(WAIT)  # the call's other callbacks still ran
    error = unsent_futures[0].exception(timeout=WAIT)  # failed once the publisher closed
    assert isinstance(error, rt.PublisherClosedError) and "SystemExit" in str(error)
    assert isinstance(publisher.closed_on, SystemExit)
    assert error.__cause__ is completer.failure is publisher.closed_on
    # With the thread gone, a call's outcome posted later still completes and is counted.
    late, late_futures = _batch(1)
    completer.post(_call(late), _reply(AppendAck(2, 1, 1.0)), None)
    assert late_futures[0].result(timeout=WAIT).position.sequence == 2
    publisher.wait_for(2)
    completer.stop()  # returns: the thread has ended


def test_with_linger_the_thread_has_what_waits_sent_with_no_call_returning() -> None:
    publisher = _Publisher()
    completer = _completer(publisher, linger=0.05)
    completer.start()
    with publisher.changed:
        assert publisher.changed.wait_for(lambda: publisher.sends >= 2, WAIT)
    completer.stop()
    assert publisher.counted == []
