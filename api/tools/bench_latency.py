"""``raytopic bench``'s latency case: one value in flight, against Queue measured the same way.

Each side has a receiver already waiting when the value is sent, and the
latency is the time from the send to the receiver's return:

    queue      ``ray.util.queue.Queue``: a thread blocked in ``Queue.get()``
               (a call waiting in Queue's actor), the driver's ``Queue.put()``.
    topic      a member of a group that owns every channel of the topic: a
               thread blocked in ``ray.get(subscriber.receive())`` (a receive
               waiting at its host channel), the driver's ``publish()``; on 1
               channel and on ``channels`` (published round robin, so most
               values land on a channel other than the receive's host and
               reach it through that channel's wait).

Both receivers are threads of the driver that loop (wait, note the time, wait
again); the driver pauses ``PAUSE`` seconds before each send so the next
wait has reached its actor. Machines here are noisy, so the sides are measured
in rounds of ``ROUND`` values each, interleaved (queue, topic on 1 channel,
topic on ``channels``, queue, ...), not one side after the other; a run gives
each side's p50 and p99 over ``samples`` values, and the figures are the
median over ``repeat`` runs (one after the other, on the same Queue and topics).
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray

from raytopic.client.topic import create_topic
from raytopic.tools.bench_common import Figure, _message, _name, _percentile, at_most

if TYPE_CHECKING:
    from raytopic.client.topic import Topic

__all__ = [
    "LATENCY_TARGET",
    "MANY_CHANNELS_LATENCY_TARGET",
    "interleaved_rounds",
    "run_latency_benchmarks",
]

LATENCY_TARGET = at_most(1.0)
"""p50 publish -> waiting receive on 1 channel, against Queue's put -> waiting get."""
MANY_CHANNELS_LATENCY_TARGET = at_most(1.5)
"""The same p50 on N channels (the waiting receive's member owns them all)."""

ROUND = 10
"""Values each side sends in a round before the next side's round."""
WARMUP = 10
"""Values each side sends before the measured ones (connections, first calls)."""
PAUSE = 0.005
"""Seconds between a receiver's return and the next send: its next wait reaches
its actor meanwhile, so every send finds a receiver waiting (2 ms was short on
the 2-core machine under a load average of 40: the 8-channel p50 read 3.1x
Queue's against 2.7x with 8 ms, interleaved)."""
RECEIVE_TIMEOUT = 60.0
"""Seconds a send waits for its receiver before the case fails."""
GROUP = "latency"


def interleaved_rounds(sides: int, samples: int, size: int = ROUND) -> list[tuple[int, int]]:
    """(side, values) rounds, side by side in turn, each side ``samples`` values in all.

    >>> interleaved_rounds(2, 25, 10)
    [(0, 10), (1, 10), (0, 10), (1, 10), (0, 5), (1, 5)]
    """
    rounds = []
    for first in range(0, samples, size):
        rounds += [(side, min(size, samples - first)) for side in range(sides)]
    return rounds


class _Waiter:
    """A thread of the driver blocked in ``receive()`` (one value at a time), noting
    when each returns: the receiver that is already waiting when a value is sent."""

    def __init__(self, name: str, receive: Callable[[], Any]) -> None:
        self._receive = receive
        self._returns: queue.SimpleQueue[float | BaseException] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                value = self._receive()
            except BaseException as error:  # the case fails with it, in the driver
                self._returns.put(error)
                return
            if value is None:  # the side closed its receiver
                return
            self._returns.put(time.perf_counter())

    def time_to_return(self, send: Callable[[], Any]) -> float:
        """Seconds from calling ``send`` to the waiting receive's return."""
        time.sleep(PAUSE)
        start = time.perf_counter()
        send()
        returned = self._returns.get(timeout=RECEIVE_TIMEOUT)
        if isinstance(returned, BaseException):
            raise RuntimeError("the waiting receive failed") from returned
        return returned - start

    def join(self) -> None:
        self._thread.join(timeout=RECEIVE_TIMEOUT)


class _QueueSide:
    """Queue's put -> a thread blocked in Queue.get."""

    label = "queue"

    def __init__(self) -> None:
        from ray.util.queue import Queue

        self._queue = Queue(actor_options={"num_cpus": 0})
        self._waiter = _Waiter("bench-queue-get", self._queue.get)
        self._sent = 0

    def time_one(self) -> float:
        self._sent += 1
        return self._waiter.time_to_return(lambda: self._queue.put(_message(self._sent)))

    def close(self) -> None:
        self._queue.put(None)  # None ends the waiter's loop
        self._waiter.join()
        self._queue.shutdown()


class _TopicSide:
    """publish() -> a thread blocked in ray.get(receive()) of the group's one member."""

    def __init__(self, channels: int) -> None:
        self.label = f"topic {channels} ch"
        self.topic: Topic = create_topic(_name("lat"), channels=channels)
        try:
            self._member = self.topic.subscriber(group=GROUP)
            self._publisher = self.topic.publisher()
        except BaseException:
            self.topic.destroy()
            raise
        self._waiter = _Waiter(f"bench-receive-{channels}", self._receive)
        self._sent = 0

    def _receive(self) -> Any:
        element = ray.get(self._member.receive())
        return None if element is None else element.value

    def time_one(self) -> float:
        self._sent += 1
        return self._waiter.time_to_return(lambda: self._publisher.publish(_message(self._sent)))

    def close(self) -> None:
        try:
            self._member.close()  # completes the waiting receive with None
            self._waiter.join()
            self._publisher.close()
        finally:
            self.topic.destroy()


def latency_runs(samples: int, channels: int, repeat: int) -> list[dict[str, tuple[float, float]]]:
    """``repeat`` runs on the same sides (a Queue, a topic of 1 channel and one of
    ``channels``), each giving every side's (p50, p99) seconds over ``samples``
    values timed in interleaved rounds; by side: ``queue``, ``topic 1 ch``, ``topic N ch``."""
    sides: list[Any] = []
    try:
        sides.append(_QueueSide())
        for count in sorted({1, channels}):
            sides.append(_TopicSide(count))
        for side in sides:
            for _ in range(WARMUP):
                side.time_one()
        runs = []
        for _ in range(repeat):
            waits: list[list[float]] = [[] for _ in sides]
            for index, values in interleaved_rounds(len(sides), samples):
                waits[index] += [sides[index].time_one() for _ in range(values)]
            runs.append(
                {
                    side.label: (_percentile(taken, 50), _percentile(taken, 99))
                    for side, taken in zip(sides, waits, strict=True)
                }
            )
        return runs
    finally:
        for side in sides:
            side.close()


def run_latency_benchmarks(
    *,
    samples: int,
    channels: int,
    repeat: int,
    report: Callable[[Figure], None] = lambda figure: None,
) -> list[Figure]:
    """The latency figures: each side's p50 and p99 (ms), the median of ``repeat`` runs;
    the topic's against Queue's, the p50s with their targets.

    Args:
        samples: values each side times per run (after ``WARMUP``).
        channels: the channels of the many-channel topic (1 also runs).
        repeat: runs; each figure is the median of its runs.
        report: called with each figure as soon as it is measured.
    """
    runs = latency_runs(samples, channels, repeat)

    def median_ms(label: str, percentile: int) -> float:
        return statistics.median(run[label][percentile] for run in runs) * 1e3

    figures = [
        Figure("queue: put -> waiting get, p50", median_ms("queue", 0), "ms"),
        Figure("queue: put -> waiting get, p99", median_ms("queue", 1), "ms"),
    ]
    for count in sorted({1, channels}):
        label = f"topic {count} ch"
        target = LATENCY_TARGET if count == 1 else MANY_CHANNELS_LATENCY_TARGET
        case = f"topic: publish -> waiting receive, {count} channel(s)"
        figures += [
            Figure(
                f"{case}, p50",
                median_ms(label, 0),
                "ms",
                "queue p50",
                figures[0].value,
                target=target,
            ),
            Figure(f"{case}, p99", median_ms(label, 1), "ms", "queue p99", figures[1].value),
        ]
    for figure in figures:
        report(figure)
    return figures
