"""``raytopic bench``'s throughput cases: a topic moving small dicts from a producer
task to a consumer task, against ``ray.util.queue.Queue`` in batch mode and Ray's
floor, measured in the same run (``bench`` runs them and reports the figures).

Cases (each returns a ``Throughput``: the rate and the CPU per message by role):
    topic        a publisher task calling ``publish()`` in a loop -> a consumer
                 task iterating a subscriber (``topic_throughput``; with
                 ``sync``, on a topic with the embedded store).
    batch API    a producer task calling ``publish_batch()`` with lists of
                 BATCH (a few calls in flight) -> a consumer task calling
                 ``receive_batch(BATCH)`` (``batch_throughput``) or iterating
                 ``iter_batches(BATCH)`` (``iter_batches_throughput``, on 1
                 channel or N).
    queue        a producer task ``put_nowait_batch(BATCH)`` -> a consumer task
                 ``get_nowait_batch(BATCH)`` (``queue_throughput``).
    ray floor    lists of BATCH through one plain actor holding a deque, put
                 pipelined -> taken one call at a time (``floor_throughput``).

``cpu_figures`` turns a run's CPU into figures, each against the floor's of the
same role (the accounting is ``raytopic.tools.bench_cpu``'s).
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import ray

from raytopic.client.topic import Topic, create_topic
from raytopic.core.config import RoundRobinName
from raytopic.tools.bench_common import (
    BATCH,
    Figure,
    Target,
    _check_ids,
    _message,
    _name,
    at_least,
    at_most,
)
from raytopic.tools.bench_cpu import (
    Throughput,
    channel_actors,
    cpu_seconds,
    measure_run,
)

__all__ = [
    "FLOOR_ONE_CHANNEL_TARGET",
    "FLOOR_ROLES",
    "ITER_BATCHES_TARGET",
    "ONE_CHANNEL_CPU_TARGET",
    "ONE_CHANNEL_TARGET",
    "SCALING_TARGET",
    "TOPIC_ROLES",
    "batch_throughput",
    "cpu_figures",
    "floor_throughput",
    "iter_batches_throughput",
    "queue_throughput",
    "topic_throughput",
]

# publish_batch calls a producer keeps outstanding: enough to overlap its
# pickling with the channel's append, few enough that the channel sets the pace.
BATCHES_IN_FLIGHT = 3

ONE_CHANNEL_TARGET = at_least(2.0)
"""``publish()`` -> iteration on 1 channel, against Queue's batch mode: per-message
futures, positions and channels should cost less than Queue's batching gains."""
FLOOR_ONE_CHANNEL_TARGET = at_least(0.5)
"""``publish()`` -> iteration on 1 channel, against Ray's floor (the same batches
through one plain actor): a message at a time, batched by the library, should
keep at least half of what Ray moves when the user batches."""
SCALING_TARGET = at_least(0.9)
"""N channels against 1: channels exist to scale out; on one machine they should
at least cost little."""
ITER_BATCHES_TARGET = at_least(0.8)
"""``publish_batch`` -> ``iter_batches`` on 1 channel and on N, against Ray's floor:
with the user batching on both sides, channels should cost little more than a
plain actor holding the batches."""
ONE_CHANNEL_CPU_TARGET = at_most(2.0)
"""The CPU per message of every process of ``publish()`` -> iteration on 1 channel,
against the floor's: a message at a time, batched by the library, should cost at
most twice what Ray spends moving the user's batches."""

FLOOR_ROLES = ("producer", "actor", "consumer")
"""The CPU figures' names of the roles (``CpuSplit``) in the floor and Queue cases."""
TOPIC_ROLES = ("publisher", "channels", "consumer")
"""The same in a topic's cases."""


def _batches(count: int, first: int = 0) -> Iterator[list[dict[str, Any]]]:
    """``count`` messages (ids from ``first`` on) in lists of BATCH, each built when
    asked for."""
    stop = first + count
    for start in range(first, stop, BATCH):
        yield [_message(i) for i in range(start, min(stop, start + BATCH))]


def _pipelined(calls: Iterator[Any], in_flight: int = BATCHES_IN_FLIGHT) -> None:
    """Make the calls one by one, waiting for the call from ``in_flight`` ago
    before the next, then wait for the rest (each an ObjectRef or a Future).

    Waiting for an older call, not the last one, the producer pipelines like a
    real one, but cannot run unboundedly ahead (``calls`` is a generator: a call
    is made only when asked for).
    """
    pending: deque[Any] = deque()
    for call in calls:
        pending.append(call)
        if len(pending) > in_flight:
            _wait(pending.popleft())
    for call in pending:
        _wait(call)


def _wait(call: Any) -> None:
    """Wait for one call's result (an ObjectRef's, or a Future's)."""
    if isinstance(call, ray.ObjectRef):
        ray.get(call)
    else:
        call.result()


# Each producer and consumer below is a plain function run as a task (the
# remote twin named beside it); the scale case runs the same functions in
# processes it keeps (raytopic.tools.bench_scale).


def _publish_each(topic: Topic, count: int, first: int = 0) -> tuple[None, float]:
    """``publish()`` ``count`` messages (ids from ``first`` on); return the CPU
    seconds the process used meanwhile."""
    cpu = cpu_seconds()
    with topic.publisher(max_in_flight=4) as publisher:
        for index in range(first, first + count):
            publisher.publish(_message(index))
    return None, cpu_seconds() - cpu


_publish_loop = ray.remote(num_cpus=0)(_publish_each)


@ray.remote(num_cpus=0)
def _consume_loop(topic: Topic, count: int) -> tuple[int, float]:
    """Iterate until ``count`` elements arrived; return the sum of their ids and the
    CPU seconds the task used."""
    cpu = cpu_seconds()
    subscriber = topic.subscriber(start="earliest")
    seen = id_sum = 0
    if count:
        for element in subscriber:
            # Reading the value is what a consumer does; the figure pays for it.
            id_sum += element.value["id"]
            seen += 1
            if seen == count:
                break
    subscriber.close()
    return id_sum, cpu_seconds() - cpu


def _topic_run(topic: Topic, count: int, producer: Any, consumer: Any, what: str) -> Throughput:
    """Warm the tasks' worker processes, measure one run, and destroy the topic."""
    try:
        # Warm the worker processes so the figure is the steady state.
        ray.get([producer.remote(topic, 0), consumer.remote(topic, 0)])
        result, id_sums = measure_run(
            count,
            channel_actors(topic),
            lambda: [consumer.remote(topic, count)],
            lambda: [producer.remote(topic, count)],
        )
        _check_ids(what, count, sum(id_sums))
        return result
    finally:
        topic.destroy()


def topic_throughput(count: int, channels: int, sync: str | None = None) -> Throughput:
    """A publisher task calling ``publish()`` -> a consumer task iterating (anonymous
    subscriber); with ``sync``, on a topic with the embedded store (in a temporary
    directory)."""
    with tempfile.TemporaryDirectory(prefix="raytopic-bench-") as directory:
        store: dict[str, Any] = {} if sync is None else {"store": directory, "sync": sync}
        topic = create_topic(_name("thr"), channels=channels, capacity=max(count, 1), **store)
        what = f"publish() -> iterate, {channels} channel(s)"
        return _topic_run(topic, count, _publish_loop, _consume_loop, what)


def _publish_in_batches(
    topic: Topic,
    count: int,
    first: int = 0,
    in_flight: int = BATCHES_IN_FLIGHT,
    round_robin: RoundRobinName = "value",
) -> tuple[None, float]:
    """``publish_batch()`` ``count`` messages (ids from ``first`` on) in lists of
    BATCH, ``in_flight`` calls outstanding, from a publisher of ``round_robin``;
    return the CPU seconds used."""
    cpu = cpu_seconds()
    with topic.publisher(round_robin=round_robin) as publisher:
        _pipelined(
            (publisher.publish_batch(values) for values in _batches(count, first)), in_flight
        )
    return None, cpu_seconds() - cpu


_publish_batches = ray.remote(num_cpus=0)(_publish_in_batches)

FUTURES_MAX_IN_FLIGHT = 4
"""``max_in_flight`` of the publisher of ``publish_batch(ref=False)`` (as of ``publish()``'s)."""


def _publish_in_futures(
    topic: Topic, count: int, first: int = 0, in_flight: int = BATCHES_IN_FLIGHT
) -> tuple[None, float]:
    """``publish_batch(ref=False)`` ``count`` messages (ids from ``first`` on) in lists
    of BATCH, as ``publish()`` is used: without waiting (the publisher's
    ``max_buffered`` holds it back), every Future checked once the publisher closed;
    the parts ride its per-channel queues. ``in_flight`` is not used (the ObjectRef
    form's); return the CPU seconds used."""
    cpu = cpu_seconds()
    with topic.publisher(max_in_flight=FUTURES_MAX_IN_FLIGHT) as publisher:
        futures = [publisher.publish_batch(values, ref=False) for values in _batches(count, first)]
    for future in futures:
        future.result()
    return None, cpu_seconds() - cpu


_publish_futures = ray.remote(num_cpus=0)(_publish_in_futures)


@ray.remote(num_cpus=0)
def _receive_batches(topic: Topic, count: int) -> tuple[int, float]:
    """``receive_batch(1000)`` until ``count`` elements arrived; return the sum of their
    ids and the CPU seconds the task used."""
    cpu = cpu_seconds()
    seen = id_sum = 0
    with topic.subscriber(start="earliest") as subscriber:
        while seen < count:
            elements = ray.get(subscriber.receive_batch(min(BATCH, count - seen)))
            id_sum += sum(element.value["id"] for element in elements)
            seen += len(elements)
    return id_sum, cpu_seconds() - cpu


@ray.remote(num_cpus=0)
def _iterate_batches(topic: Topic, count: int) -> tuple[int, float]:
    """``iter_batches(1000)`` until ``count`` elements arrived; return the sum of their
    ids and the CPU seconds the task used."""
    cpu = cpu_seconds()
    with topic.subscriber(start="earliest") as subscriber:
        id_sum = sum_batches(subscriber, count)
    return id_sum, cpu_seconds() - cpu


def sum_batches(subscriber: Any, count: int) -> int:
    """Iterate ``iter_batches(BATCH)`` until ``count`` elements arrived, reading each
    element's value as a consumer would; return the sum of their ids."""
    seen = id_sum = 0
    if count:
        for batch in subscriber.iter_batches(BATCH):
            for element in batch:
                id_sum += element.value["id"]
            seen += len(batch)
            if seen >= count:
                break
    return id_sum


def batch_throughput(count: int) -> Throughput:
    """``publish_batch(1000)`` -> sequential ``receive_batch(1000)``, 1 channel."""
    topic = create_topic(_name("bat"), channels=1, capacity=max(count, 1))
    return _topic_run(
        topic, count, _publish_batches, _receive_batches, "publish_batch -> receive_batch"
    )


def iter_batches_throughput(count: int, channels: int = 1, *, ref: bool = True) -> Throughput:
    """``publish_batch(1000)`` -> ``iter_batches(1000)`` (one publisher, one anonymous
    subscriber) on ``channels`` channels (``ref=False``: the Future form)."""
    topic = create_topic(_name("itb"), channels=channels, capacity=max(count, 1))
    producer = _publish_batches if ref else _publish_futures
    return _topic_run(topic, count, producer, _iterate_batches, "publish_batch -> iter_batches")


def _queue_put(queue: Any, count: int, first: int = 0) -> tuple[None, float]:
    cpu = cpu_seconds()
    for values in _batches(count, first):
        queue.put_nowait_batch(values)
    return None, cpu_seconds() - cpu


def _queue_get(queue: Any, count: int) -> tuple[int, float]:
    from ray.util.queue import Empty

    cpu = cpu_seconds()
    seen = id_sum = 0
    while seen < count:
        try:
            values = queue.get_nowait_batch(min(BATCH, count - seen))
        except Empty:
            time.sleep(0.0005)
            continue
        id_sum += sum(value["id"] for value in values)
        seen += len(values)
    return id_sum, cpu_seconds() - cpu


_queue_produce = ray.remote(num_cpus=0)(_queue_put)
_queue_consume = ray.remote(num_cpus=0)(_queue_get)


def queue_throughput(count: int) -> Throughput:
    """``ray.util.queue.Queue`` in batch mode: a producer task ``put_nowait_batch(1000)``
    -> a consumer task ``get_nowait_batch(1000)``."""
    from ray.util.queue import Queue

    queue = Queue(actor_options={"num_cpus": 0})
    try:
        ray.get([_queue_produce.remote(queue, BATCH), _queue_consume.remote(queue, BATCH)])
        result, id_sums = measure_run(
            count,
            [queue.actor],
            lambda: [_queue_consume.remote(queue, count)],
            lambda: [_queue_produce.remote(queue, count)],
        )
        _check_ids("queue batch", count, sum(id_sums))
        return result
    finally:
        queue.shutdown()


FLOOR_TAKE_WAIT = 10.0
"""Seconds a floor ``take`` waits for a batch before it returns an empty one (and is
called again): long enough to be rare, short enough that a lost producer shows."""


class _Floor:
    """Ray's floor: the least a channel could do, a deque of batches in a plain actor.

    A ``take`` waits for a batch in its own thread (its concurrency group) while
    ``put``s go on in the default one, in order: the consumer waits as it does
    on a channel, instead of polling (each poll would cost a call on both sides).
    """

    def __init__(self) -> None:
        self._batches: deque[list[Any]] = deque()
        self._ready = threading.Condition()

    def put(self, batch: list[Any]) -> None:
        with self._ready:
            self._batches.append(batch)
            self._ready.notify()

    @ray.method(concurrency_group="take")
    def take(self) -> list[Any]:
        with self._ready:
            self._ready.wait_for(lambda: self._batches, timeout=FLOOR_TAKE_WAIT)
            return self._batches.popleft() if self._batches else []


# Options given to ray.remote itself: .options() refuses concurrency_groups (and
# Ray's annotations of ray.remote do not name it: hence the dict).
_FLOOR_OPTIONS: dict[str, Any] = {"num_cpus": 0, "concurrency_groups": {"take": 1}}
_FloorActor = ray.remote(**_FLOOR_OPTIONS)(_Floor)
"""The floor's actor class (its ``take`` calls one at a time, apart from its puts)."""


def _floor_put(actor: Any, count: int, first: int = 0) -> tuple[None, float]:
    cpu = cpu_seconds()
    _pipelined(actor.put.remote(values) for values in _batches(count, first))
    return None, cpu_seconds() - cpu


def _floor_take(actor: Any, count: int) -> tuple[int, float]:
    cpu = cpu_seconds()
    seen = id_sum = 0
    while seen < count:
        values = ray.get(actor.take.remote())
        id_sum += sum(value["id"] for value in values)
        seen += len(values)
    return id_sum, cpu_seconds() - cpu


_floor_produce = ray.remote(num_cpus=0)(_floor_put)
_floor_consume = ray.remote(num_cpus=0)(_floor_take)


def floor_throughput(count: int) -> Throughput:
    """Ray's floor: the batches of the batch API (BATCH small dicts each) through one
    plain actor, put pipelined (BATCHES_IN_FLIGHT) by a producer task and taken one
    at a time by a consumer task."""
    actor: Any = _FloorActor.remote()  # Ray types its methods as plain functions
    try:
        ray.get([_floor_produce.remote(actor, BATCH), _floor_consume.remote(actor, BATCH)])
        result, id_sums = measure_run(
            count,
            [actor],
            lambda: [_floor_consume.remote(actor, count)],
            lambda: [_floor_produce.remote(actor, count)],
        )
        _check_ids("ray floor", count, sum(id_sums))
        return result
    finally:
        ray.kill(actor)


def cpu_figures(
    label: str,
    run: Throughput,
    floor: Throughput | None,
    roles: tuple[str, str, str] = TOPIC_ROLES,
    total_target: Target | None = None,
) -> list[Figure]:
    """A throughput case's CPU per message: the total, then each role's.

    Args:
        label: Names the case in each figure's name.
        run: The case's measured run.
        floor: The floor's run, each figure's baseline (its figure of the same
            role); None for the floor itself.
        roles: The names of the producer, actors and consumer.
        total_target: The bound on the total's ratio to the floor's, if any.

    Returns:
        Four figures in microseconds per message.
    """
    names = ("total", *roles)
    bases = (None,) * 4 if floor is None else floor.cpu.parts()
    targets = (total_target, None, None, None)
    return [
        Figure(
            f"cpu: {label}: {name}",
            value,
            "us/msg",
            None if floor is None else f"floor {floor_role}",
            base,
            target=target,
        )
        for name, floor_role, value, base, target in zip(
            names, ("total", *FLOOR_ROLES), run.cpu.parts(), bases, targets, strict=True
        )
    ]
