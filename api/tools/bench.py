"""``raytopic bench``: throughput, latency and memory, against baselines of the same run.

Machines here are shared and noisy, so every figure is reported next to the
baseline measured minutes apart in the same process: ``ray.util.queue.Queue``
in batch mode and Ray's floor (below) for throughput, and Queue's put -> get
for latency. Each throughput case runs ``repeat`` times and reports the median.
Every consumer reads each element's ``value``, so the figures include
decoding, as a real consumer pays it.

Cases:
    throughput  1,000,000 small dicts: a publisher task calling ``publish()``
                in a loop -> a consumer task iterating a subscriber, on 8
                channels and on 1 (and the 8-channel figure as a ratio to the
                1-channel one: more channels should cost little; the 1-channel
                one also as a ratio to the floor). Queue: a producer task
                ``put_nowait_batch(1000)`` -> a consumer task
                ``get_nowait_batch(1000)``.
    ray floor   the least Ray does to move the batch API's batches: lists of
                1000 through one plain actor holding a deque, a producer task
                putting them pipelined (a few calls in flight) -> a consumer
                task taking them one call at a time.
    batch API   the same messages on 1 channel: a producer task calling
                ``publish_batch()`` with lists of 1000 (a few calls in flight)
                -> a consumer task calling ``receive_batch(1000)`` (against
                Queue), and -> a consumer task iterating ``iter_batches(1000)``
                (against the floor).
    cpu         for each throughput case (and the store's), CPU microseconds
                per message in the producer's process, the actors' (channels,
                Queue's actor, the floor's actor) and the consumer's, and
                their total, each against the floor's figure of the same role
                (``raytopic.tools.bench_cpu``).
    latency     one value in flight: publish -> an already waiting receive.
                Queue: put -> an already waiting get.
    memory      RSS of one channel actor holding 1,000,000 small elements.
    group       two members of one group, a commit per received batch; and
                the time from a member's close to the full reassignment.
    shared      four members of a shared group against two of a channel-owned
                group on 2 channels, with no work and with a 10 ms task per
                element (``raytopic.tools.bench_shared``).
    store       the throughput case on a topic with the embedded store, with
                ``sync="always"`` and ``sync="write"``, as a ratio to the
                in-memory topic of the same run; the time a channel holding
                1,000,000 elements on disk takes from SIGKILL to serving again;
                and a durable commit's p50 on a channel that has seen 3,000
                publishers against one that has seen 1
                (``raytopic.tools.bench_commit``).
    idle        CPU of idle channels and coordinators (3 topics, one member
                each, 20 s) and the time to create a topic, against bare Ray
                actors (``raytopic.tools.bench_idle``).

A figure with a ``Target`` (a bound on its ratio, kept beside its case) is
reported as met or short, and ``format_verdict`` sums a run up in one line.

``QUICK`` holds smaller counts for a quicker check (``raytopic bench --quick``).
"""

from __future__ import annotations

import os
import signal
import statistics
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import ray

from raytopic.tools.bench_cpu import (
    Throughput,
    channel_actors,
    cpu_seconds,
    measure_run,
    median_throughput,
)
from raytopic.topic import Topic, create_topic

__all__ = [
    "DEFAULT",
    "QUICK",
    "BenchSettings",
    "Figure",
    "Target",
    "at_least",
    "at_most",
    "format_verdict",
    "run_benchmarks",
]

BATCH = 1000
# publish_batch calls a producer keeps outstanding: enough to overlap its
# pickling with the channel's append, few enough that the channel sets the pace.
BATCHES_IN_FLIGHT = 3


@dataclass(frozen=True, slots=True)
class BenchSettings:
    """How much each case measures."""

    messages: int = 1_000_000
    """Messages per throughput and group run."""
    channels: int = 8
    """Channels of the multi-channel cases (the 1-channel cases run as well)."""
    latency_samples: int = 300
    """Measured round trips per latency case (after 10 for warming up)."""
    repeat: int = 3
    """Runs per throughput case; the median is reported."""
    memory_elements: int = 1_000_000
    """Elements the memory case fills one channel with (0 skips the case)."""
    restart_elements: int = 1_000_000
    """Elements on disk in the restart case (0 skips the store cases)."""
    idle_topics: int = 3
    """Topics of the idle case, each next to ``channels + 1`` bare actors; also
    the creations timed (the median is reported). 0 skips the case."""
    idle_seconds: float = 20.0
    """Seconds the idle case measures CPU over."""


DEFAULT = BenchSettings()
"""The counts behind the README's benchmark table."""
QUICK = BenchSettings(
    messages=100_000,
    latency_samples=50,
    repeat=1,
    memory_elements=100_000,
    restart_elements=100_000,
    idle_topics=1,
    idle_seconds=5.0,
)
"""The same cases with smaller counts, for a quicker check."""


@dataclass(frozen=True, slots=True)
class Target:
    """A bound the project set on a figure's ratio to its baseline of the same run."""

    ratio: float
    """The bound."""
    at_most: bool = False
    """True where less is better (a latency, a cost), False where more is (a rate)."""

    def met(self, ratio: float) -> bool:
        """Whether ``ratio`` is on the right side of the bound (the bound itself meets it)."""
        return ratio <= self.ratio if self.at_most else ratio >= self.ratio

    def __str__(self) -> str:
        digits = 1 if round(self.ratio, 1) == self.ratio else 2
        return f"{'<=' if self.at_most else '>='} {self.ratio:.{digits}f}x"


def at_least(ratio: float) -> Target:
    """A target for a rate: the figure should be at least ``ratio`` times its baseline."""
    return Target(ratio)


def at_most(ratio: float) -> Target:
    """A target for a cost: the figure should be at most ``ratio`` times its baseline."""
    return Target(ratio, at_most=True)


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured figure, with the baseline it is compared to."""

    case: str
    value: float
    unit: str
    baseline: str | None = None
    baseline_value: float | None = None
    target: Target | None = None
    """The bound the project set on ``ratio``, if it set one."""

    @property
    def ratio(self) -> float | None:
        """``value / baseline_value``."""
        if not self.baseline_value:
            return None
        return self.value / self.baseline_value

    @property
    def met(self) -> bool | None:
        """Whether the target is met; None without a target. A target whose ratio
        could not be taken (a baseline of 0) is not met: nothing shows it is."""
        if self.target is None:
            return None
        return self.ratio is not None and self.target.met(self.ratio)


def _message(index: int) -> dict[str, Any]:
    return {"id": index, "user": f"u{index % 100}", "amount": index * 0.5}


def _name(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:6]}"


def _median(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def _percentile(samples: list[float], percent: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(percent / 100 * len(ordered)))]


def _check_ids(what: str, count: int, id_sum: int) -> None:
    """A rate is only worth printing if every message arrived once."""
    if id_sum != count * (count - 1) // 2:
        raise RuntimeError(f"{what}: the ids received do not add up to those of {count} messages")


# -- throughput ------------------------------------------------------------------

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
"""``publish_batch`` -> ``iter_batches`` on 1 channel, against Ray's floor: with
the user batching on both sides, a channel should cost little more than a
plain actor holding the batches."""

FLOOR_ROLES = ("producer", "actor", "consumer")
"""The CPU figures' names of the roles (``CpuSplit``) in the floor and Queue cases."""
TOPIC_ROLES = ("publisher", "channels", "consumer")
"""The same in a topic's cases."""


def _batches(count: int) -> Iterator[list[dict[str, Any]]]:
    """``count`` messages in lists of BATCH, each built when asked for."""
    for start in range(0, count, BATCH):
        yield [_message(i) for i in range(start, min(count, start + BATCH))]


def _pipelined(calls: Iterator[ray.ObjectRef[Any]]) -> None:
    """Make the calls one by one, waiting for the call from BATCHES_IN_FLIGHT ago
    before the next, then wait for the rest.

    Waiting for an older call, not the last one, the producer pipelines like a
    real one, but cannot run unboundedly ahead (``calls`` is a generator: a call
    is made only when asked for).
    """
    pending: deque[ray.ObjectRef[Any]] = deque()
    for call in calls:
        pending.append(call)
        if len(pending) > BATCHES_IN_FLIGHT:
            ray.get(pending.popleft())
    ray.get(list(pending))


@ray.remote(num_cpus=0)
def _publish_loop(topic: Topic, count: int) -> tuple[None, float]:
    """``publish()`` ``count`` messages; return the CPU seconds the task used."""
    cpu = cpu_seconds()
    with topic.publisher(max_in_flight=4) as publisher:
        for index in range(count):
            publisher.publish(_message(index))
    return None, cpu_seconds() - cpu


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
        result, id_sum = measure_run(
            count,
            channel_actors(topic),
            lambda: consumer.remote(topic, count),
            lambda: producer.remote(topic, count),
        )
        _check_ids(what, count, id_sum)
        return result
    finally:
        topic.destroy()


def topic_throughput(count: int, channels: int, sync: str | None = None) -> Throughput:
    """A publisher task calling ``publish()`` -> a consumer task iterating (anonymous
    subscriber); with ``sync``, on a topic with the embedded store (in a temporary
    directory)."""
    with tempfile.TemporaryDirectory(prefix="raytopic-bench-") as directory:
        store = {} if sync is None else {"store": directory, "sync": sync}
        topic = create_topic(_name("thr"), channels=channels, capacity=max(count, 1), **store)
        what = f"publish() -> iterate, {channels} channel(s)"
        return _topic_run(topic, count, _publish_loop, _consume_loop, what)


@ray.remote(num_cpus=0)
def _publish_batches(topic: Topic, count: int) -> tuple[None, float]:
    """``publish_batch()`` lists of BATCH, a few calls in flight; return the CPU seconds used."""
    cpu = cpu_seconds()
    with topic.publisher() as publisher:
        _pipelined(publisher.publish_batch(values) for values in _batches(count))
    return None, cpu_seconds() - cpu


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
    seen = id_sum = 0
    with topic.subscriber(start="earliest") as subscriber:
        if count:
            for batch in subscriber.iter_batches(BATCH):
                for element in batch:
                    id_sum += element.value["id"]
                seen += len(batch)
                if seen >= count:
                    break
    return id_sum, cpu_seconds() - cpu


def batch_throughput(count: int) -> Throughput:
    """``publish_batch(1000)`` -> sequential ``receive_batch(1000)``, 1 channel."""
    topic = create_topic(_name("bat"), channels=1, capacity=max(count, 1))
    return _topic_run(
        topic, count, _publish_batches, _receive_batches, "publish_batch -> receive_batch"
    )


def iter_batches_throughput(count: int) -> Throughput:
    """``publish_batch(1000)`` -> ``iter_batches(1000)``, 1 channel."""
    topic = create_topic(_name("itb"), channels=1, capacity=max(count, 1))
    return _topic_run(
        topic, count, _publish_batches, _iterate_batches, "publish_batch -> iter_batches"
    )


@ray.remote(num_cpus=0)
def _queue_produce(queue: Any, count: int) -> tuple[None, float]:
    cpu = cpu_seconds()
    for values in _batches(count):
        queue.put_nowait_batch(values)
    return None, cpu_seconds() - cpu


@ray.remote(num_cpus=0)
def _queue_consume(queue: Any, count: int) -> tuple[int, float]:
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


def queue_throughput(count: int) -> Throughput:
    """``ray.util.queue.Queue`` in batch mode: a producer task ``put_nowait_batch(1000)``
    -> a consumer task ``get_nowait_batch(1000)``."""
    from ray.util.queue import Queue

    queue = Queue(actor_options={"num_cpus": 0})
    try:
        ray.get([_queue_produce.remote(queue, BATCH), _queue_consume.remote(queue, BATCH)])
        result, id_sum = measure_run(
            count,
            [queue.actor],
            lambda: _queue_consume.remote(queue, count),
            lambda: _queue_produce.remote(queue, count),
        )
        _check_ids("queue batch", count, id_sum)
        return result
    finally:
        queue.shutdown()


FLOOR_TAKE_WAIT = 10.0
"""Seconds a floor ``take`` waits for a batch before it returns an empty one (and is
called again): long enough to be rare, short enough that a lost producer shows."""


@ray.remote(num_cpus=0, concurrency_groups={"take": 1})
class _FloorActor:
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


@ray.remote(num_cpus=0)
def _floor_produce(actor: Any, count: int) -> tuple[None, float]:
    cpu = cpu_seconds()
    _pipelined(actor.put.remote(values) for values in _batches(count))
    return None, cpu_seconds() - cpu


@ray.remote(num_cpus=0)
def _floor_consume(actor: Any, count: int) -> tuple[int, float]:
    cpu = cpu_seconds()
    seen = id_sum = 0
    while seen < count:
        values = ray.get(actor.take.remote())
        id_sum += sum(value["id"] for value in values)
        seen += len(values)
    return id_sum, cpu_seconds() - cpu


def floor_throughput(count: int) -> Throughput:
    """Ray's floor: the batches of the batch API (BATCH small dicts each) through one
    plain actor, put pipelined (BATCHES_IN_FLIGHT) by a producer task and taken one
    at a time by a consumer task."""
    actor = _FloorActor.remote()
    try:
        ray.get([_floor_produce.remote(actor, BATCH), _floor_consume.remote(actor, BATCH)])
        result, id_sum = measure_run(
            count,
            [actor],
            lambda: _floor_consume.remote(actor, count),
            lambda: _floor_produce.remote(actor, count),
        )
        _check_ids("ray floor", count, id_sum)
        return result
    finally:
        ray.kill(actor)


def cpu_figures(
    label: str,
    run: Throughput,
    floor: Throughput | None,
    roles: tuple[str, str, str] = TOPIC_ROLES,
) -> list[Figure]:
    """A throughput case's CPU per message: the total, then each role's.

    Args:
        label: Names the case in each figure's name.
        run: The case's measured run.
        floor: The floor's run, each figure's baseline (its figure of the same
            role); None for the floor itself.
        roles: The names of the producer, actors and consumer.

    Returns:
        Four figures in microseconds per message.
    """
    names = ("total", *roles)
    bases = (None,) * 4 if floor is None else floor.cpu.parts()
    return [
        Figure(
            f"cpu: {label}: {name}",
            value,
            "us/msg",
            None if floor is None else f"floor {floor_role}",
            base,
        )
        for name, floor_role, value, base in zip(
            names, ("total", *FLOOR_ROLES), run.cpu.parts(), bases, strict=True
        )
    ]


# -- latency -----------------------------------------------------------------------

LATENCY_TARGET = at_most(1.0)
"""p50 publish -> waiting receive on 1 channel, against Queue's put -> waiting get."""
MANY_CHANNELS_LATENCY_TARGET = at_most(1.5)
"""The same p50 on N channels (a waiting receive spans them all)."""


def topic_latency(samples: int, channels: int) -> tuple[float, float]:
    """(p50, p99) seconds from ``publish()`` to an already waiting receive."""
    topic = create_topic(_name("lat"), channels=channels)
    try:
        subscriber, publisher = topic.subscriber(), topic.publisher()
        waits = []
        for index in range(samples + 10):
            waiting = subscriber.receive()
            time.sleep(0.001)  # the receive reaches its home and waits
            start = time.perf_counter()
            publisher.publish(_message(index))
            ray.get(waiting)
            if index >= 10:
                waits.append(time.perf_counter() - start)
        subscriber.close()
        publisher.close()
        return _percentile(waits, 50), _percentile(waits, 99)
    finally:
        topic.destroy()


def queue_latency(samples: int) -> tuple[float, float]:
    """(p50, p99) seconds from ``Queue.put`` to an already waiting get."""
    from ray.util.queue import Queue

    queue = Queue(actor_options={"num_cpus": 0})
    try:
        waits = []
        for index in range(samples + 10):
            waiting = queue.actor.get.remote(None)
            time.sleep(0.001)
            start = time.perf_counter()
            queue.put(_message(index))
            ray.get(waiting)
            if index >= 10:
                waits.append(time.perf_counter() - start)
        return _percentile(waits, 50), _percentile(waits, 99)
    finally:
        queue.shutdown()


# -- memory ------------------------------------------------------------------------


def channel_memory(count: int) -> tuple[float, float]:
    """(RSS before, RSS after) in bytes of one channel actor filled with ``count`` elements."""
    import psutil

    topic = create_topic(_name("mem"), channels=1, capacity=count)
    try:
        process = psutil.Process(topic.describe().channels[0].pid)
        before = process.memory_info().rss
        with topic.publisher(batch_size=5000) as publisher:
            for index in range(count):
                publisher.publish(_message(index))
        after = process.memory_info().rss
        return float(before), float(after)
    finally:
        topic.destroy()


# -- store -------------------------------------------------------------------------

STORE_TARGET = at_least(0.5)
"""The throughput case on a topic with the embedded store, against the in-memory
topic: durability should not halve the rate."""


def restart_time(count: int) -> float:
    """Seconds from SIGKILL of a channel holding ``count`` elements on disk to its
    answering again (the elements reloaded, under a new epoch)."""
    with tempfile.TemporaryDirectory(prefix="raytopic-bench-") as directory:
        topic = create_topic(_name("rst"), channels=1, capacity=count, store=directory)
        try:
            ray.get(_publish_batches.remote(topic, count))
            before = topic.describe().channels[0]
            ring = topic.ringbuffer(0)
            start = time.perf_counter()
            os.kill(before.pid, signal.SIGKILL)
            while True:
                size = ring.size()  # waits while the channel restarts (retried by Ray)
                stats = topic.describe().channels[0]
                if stats.epoch > before.epoch and stats.state == "serving":
                    break
                time.sleep(0.01)
            elapsed = time.perf_counter() - start
            if size != count:
                raise RuntimeError(f"restarted with {size} of {count} elements")
            return elapsed
        finally:
            topic.destroy()


# -- groups ------------------------------------------------------------------------

GROUP_TARGET = at_least(1.5)
"""Two members committing per batch, against Queue's batch mode (which commits nothing)."""


@ray.remote(num_cpus=0)
def _group_member(topic: Topic, group: str, quiet: float) -> tuple[int, int, float, float]:
    """Consume with a commit per batch until ``quiet`` seconds pass without data.

    Returns (elements, the sum of their ids, wall time of the first and of the
    last non-empty batch).
    """
    seen, id_sum, first, last = 0, 0, 0.0, 0.0
    with topic.subscriber(group=group, timeout=10.0, complete_on_empty=True) as subscriber:
        started = time.time()
        while time.time() - (last or started) < quiet:
            batch = ray.get(subscriber.receive_batch(BATCH))
            if batch:
                batch[-1].commit()
                seen += len(batch)
                id_sum += sum(element.value["id"] for element in batch)
                last = time.time()
                first = first or last
            else:
                time.sleep(0.005)
    return seen, id_sum, first, last


def group_throughput(count: int, channels: int) -> float:
    """Messages per second consumed by two members of one group, a commit per batch.

    The topic is filled first; the time runs from the first batch either
    member received to the last one.
    """
    topic = create_topic(_name("grp"), channels=channels, capacity=max(count, 1))
    try:
        group = "bench"
        topic.subscriber(group=group).close()  # the group exists from here on
        ray.get(_publish_loop.remote(topic, count))
        results = ray.get([_group_member.remote(topic, group, 2.0) for _ in range(2)])
        seen = sum(result[0] for result in results)
        if seen < count:
            raise RuntimeError(f"the group received {seen} of {count} elements")
        if seen == count:
            # More is a redelivery after the members' first rebalance (at least
            # once); exactly ``count`` must be every message once.
            _check_ids("group", count, sum(result[1] for result in results))
        first = min(result[2] for result in results if result[0])
        last = max(result[3] for result in results)
        return count / (last - first)
    finally:
        topic.destroy()


def reassignment_time(channels: int) -> float:
    """Seconds from one member's ``close()`` to the other owning every channel."""
    topic = create_topic(_name("rbl"), channels=channels)
    try:
        first = topic.subscriber(group="g")
        second = topic.subscriber(group="g")
        start = time.perf_counter()
        first.close()
        while len(second.channels) < channels:
            time.sleep(0.001)
        elapsed = time.perf_counter() - start
        second.close()
        return elapsed
    finally:
        topic.destroy()


# -- the run -----------------------------------------------------------------------


def run_benchmarks(
    *,
    messages: int = DEFAULT.messages,
    channels: int = DEFAULT.channels,
    latency_samples: int = DEFAULT.latency_samples,
    repeat: int = DEFAULT.repeat,
    memory_elements: int = DEFAULT.memory_elements,
    restart_elements: int = DEFAULT.restart_elements,
    idle_topics: int = DEFAULT.idle_topics,
    idle_seconds: float = DEFAULT.idle_seconds,
    commit_publishers: int | None = None,
    report: Callable[[Figure], None] = lambda figure: None,
) -> list[Figure]:
    """Run every case; ``report`` hears of each figure as it is measured.

    Args:
        messages: messages per throughput and group run.
        channels: channels of the multi-channel cases.
        latency_samples: measured round trips per latency case.
        repeat: runs per throughput case (the median is reported).
        memory_elements: elements for the memory case; 0 skips it.
        restart_elements: elements on disk in the restart case; 0 skips the
            store cases. The commit case measures ``latency_samples`` commits.
        idle_topics: topics of the idle case (and creations timed); 0 skips it.
        idle_seconds: seconds the idle case measures CPU over.
        commit_publishers: publishers seen by the commit case's second channel
            (None: the case's own count, 3,000).
        report: called with each figure as soon as it is measured.

    Returns:
        Every figure, in the order measured.

    Raises:
        RuntimeError: a case received other messages than were published.
    """
    figures: list[Figure] = []

    def add(figure: Figure) -> None:
        figures.append(figure)
        report(figure)

    def add_all(more: Iterable[Figure]) -> None:
        for figure in more:
            add(figure)

    queue = median_throughput(repeat, lambda: queue_throughput(messages))
    queue_rate = queue.rate
    add(Figure(f"queue: batch put/get ({BATCH}), task -> task", queue_rate, "msgs/s"))
    floor = median_throughput(repeat, lambda: floor_throughput(messages))
    add(
        Figure(
            f"ray floor: one plain actor, put pipelined / take sequential ({BATCH})",
            floor.rate,
            "msgs/s",
            "queue batch",
            queue_rate,
        )
    )
    add_all(cpu_figures("ray floor", floor, None, FLOOR_ROLES))
    add_all(cpu_figures("queue batch", queue, floor, FLOOR_ROLES))
    runs: dict[int, Throughput] = {}
    for count in sorted({channels, 1}, reverse=True):
        runs[count] = median_throughput(
            repeat, lambda count=count: topic_throughput(messages, count)
        )
        add(
            Figure(
                f"topic: publish() -> iterate, {count} channel(s)",
                runs[count].rate,
                "msgs/s",
                "queue batch",
                queue_rate,
                target=ONE_CHANNEL_TARGET if count == 1 else None,
            )
        )
        add_all(cpu_figures(f"publish() -> iterate, {count} ch", runs[count], floor))
    rates = {count: run.rate for count, run in runs.items()}
    add(
        Figure(
            "topic: publish() -> iterate, 1 channel / ray floor",
            rates[1],
            "msgs/s",
            "ray floor",
            floor.rate,
            target=FLOOR_ONE_CHANNEL_TARGET,
        )
    )
    if channels != 1:
        # Channels exist to scale out; on one machine they should at least
        # cost little against a single channel measured minutes apart.
        add(
            Figure(
                f"topic: {channels} channels / 1 channel, publish() -> iterate",
                rates[channels],
                "msgs/s",
                "1 channel",
                rates[1],
                target=SCALING_TARGET,
            )
        )
    batch = median_throughput(repeat, lambda: batch_throughput(messages))
    add(
        Figure(
            f"topic: publish_batch -> receive_batch({BATCH}), 1 channel",
            batch.rate,
            "msgs/s",
            "queue batch",
            queue_rate,
        )
    )
    add_all(cpu_figures(f"publish_batch -> receive_batch({BATCH}), 1 ch", batch, floor))
    iterated = median_throughput(repeat, lambda: iter_batches_throughput(messages))
    add(
        Figure(
            f"topic: publish_batch -> iter_batches({BATCH}), 1 channel",
            iterated.rate,
            "msgs/s",
            "ray floor",
            floor.rate,
            target=ITER_BATCHES_TARGET,
        )
    )
    add_all(cpu_figures(f"publish_batch -> iter_batches({BATCH}), 1 ch", iterated, floor))

    queue_p50, queue_p99 = queue_latency(latency_samples)
    add(Figure("queue: put -> waiting get, p50", queue_p50 * 1e3, "ms"))
    add(Figure("queue: put -> waiting get, p99", queue_p99 * 1e3, "ms"))
    for count in sorted({1, channels}):
        p50, p99 = topic_latency(latency_samples, count)
        add(
            Figure(
                f"topic: publish -> waiting receive, {count} channel(s), p50",
                p50 * 1e3,
                "ms",
                "queue p50",
                queue_p50 * 1e3,
                target=LATENCY_TARGET if count == 1 else MANY_CHANNELS_LATENCY_TARGET,
            )
        )
        add(
            Figure(
                f"topic: publish -> waiting receive, {count} channel(s), p99",
                p99 * 1e3,
                "ms",
                "queue p99",
                queue_p99 * 1e3,
            )
        )

    if memory_elements:
        before, after = channel_memory(memory_elements)
        add(Figure(f"channel RSS holding {memory_elements:,} elements", after / 2**20, "MiB"))
        add(Figure("channel RSS before publishing", before / 2**20, "MiB"))

    group_rate = _median(repeat, lambda: group_throughput(messages, channels))
    add(
        Figure(
            f"group: 2 members, commit per batch, {channels} channels",
            group_rate,
            "msgs/s",
            "queue batch",
            queue_rate,
            target=GROUP_TARGET,
        )
    )
    add(Figure("group: close -> full reassignment", reassignment_time(channels) * 1e3, "ms"))
    from raytopic.tools.bench_shared import run_shared_benchmarks  # (it builds on this module)

    figures += run_shared_benchmarks(messages=messages, repeat=repeat, report=report)

    if restart_elements:
        for sync in ("always", "write"):
            stored = median_throughput(
                repeat, lambda sync=sync: topic_throughput(messages, channels, sync)
            )
            add(
                Figure(
                    f'store sync="{sync}": publish() -> iterate, {channels} channel(s)',
                    stored.rate,
                    "msgs/s",
                    "in memory",
                    rates[channels],
                    target=STORE_TARGET,
                )
            )
            add_all(cpu_figures(f'store sync="{sync}", {channels} ch', stored, floor))
        seconds = restart_time(restart_elements)
        add(Figure(f"store: restart serving {restart_elements:,} elements", seconds, "s"))
        from raytopic.tools.bench_commit import run_commit_benchmarks  # (it builds on this module)

        publishers = {} if commit_publishers is None else {"publishers": commit_publishers}
        figures += run_commit_benchmarks(commits=latency_samples, report=report, **publishers)

    if idle_topics:
        from raytopic.tools.bench_idle import run_idle_benchmarks  # (it builds on this module)

        figures += run_idle_benchmarks(
            topics=idle_topics, channels=channels, seconds=idle_seconds, report=report
        )
    return figures


CASE_WIDTH = 66


def format_header() -> str:
    """The header line of the report table."""
    return f"{'case':<{CASE_WIDTH}} {'value':>12} {'unit':<7} ratio to baseline (same run)"


def format_figure(figure: Figure) -> str:
    """One line of the report table; a target is shown with its verdict, met or short."""
    ratio = ""
    if figure.ratio is not None:
        ratio = f"{figure.ratio:6.2f}x {figure.baseline}"
    if figure.target is not None:
        ratio += f"  (target {figure.target}: {'met' if figure.met else 'short'})"
    return f"{figure.case:<{CASE_WIDTH}} {figure.value:>12,.2f} {figure.unit:<7} {ratio}".rstrip()


def format_verdict(figures: Iterable[Figure]) -> str:
    """The run in one line: how many targets were met, and the cases that fell short."""
    judged = [figure for figure in figures if figure.target is not None]
    short = [figure.case for figure in judged if not figure.met]
    verdict = f"verdict: {len(judged) - len(short)} of {len(judged)} targets met"
    return verdict + (f"; short: {'; '.join(short)}" if short else "")


def local_ray(num_cpus: int | None = None) -> None:
    """Start an embedded Ray on loopback if none is running (for bench and demo)."""
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray.init(
        # "local": always a new embedded Ray; without it ray.init() would join
        # any cluster a `ray start` left running on this machine.
        address="local",
        num_cpus=num_cpus or os.cpu_count() or 2,
        include_dashboard=False,
        log_to_driver=False,
        namespace="raytopic-bench",
    )
