"""``raytopic bench``'s CPU accounting: where a throughput case's CPU goes, per message.

A throughput case moves messages from a producer task through one or more
actors to a consumer task. Its CPU is counted in those processes, by role:

    producer   the worker process of the task that publishes (or puts)
    actors     the processes of the actors the messages pass through: a
               topic's channels, Queue's actor, the floor's plain actor
    consumer   the worker process of the task that iterates (or takes)

A case of K producers and K consumers (``raytopic.tools.bench_scale``) sums
each role over its K processes.

Each is the process's user + system time over the run, every thread included
(a publisher's flush thread, a subscriber's receive loop, Ray's own threads in
that process), read inside the process with ``time.process_time()``: a task
reads its own at its start and at its end (a Ray worker is reused, so the
difference, never the total), an actor answers a ``__ray_call__`` before and
after the run. psutil counts the same time from outside, but in clock ticks
of 10 ms, as coarse as a whole quick run of Queue's actor.

Not counted: Ray's daemons (raylet, GCS), the topic's coordinator and the
driver, which a case's messages do not pass through.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray

from raytopic.core.naming import channel_actor_name

if TYPE_CHECKING:
    from raytopic.client.topic import Topic

__all__ = [
    "CpuSplit",
    "Throughput",
    "actors_cpu_seconds",
    "channel_actors",
    "cpu_seconds",
    "measure_run",
    "median_throughput",
]


def cpu_seconds() -> float:
    """User + system seconds of the calling process so far, every thread's, ended ones too."""
    return time.process_time()


@dataclass(frozen=True, slots=True)
class CpuSplit:
    """CPU a run took, by the role of the process that spent it (any one unit)."""

    producer: float
    """The producer task's process."""
    actors: float
    """The actors' processes, summed."""
    consumer: float
    """The consumer task's process."""

    @property
    def total(self) -> float:
        """The three summed."""
        return self.producer + self.actors + self.consumer

    def parts(self) -> tuple[float, float, float, float]:
        """(total, producer, actors, consumer)."""
        return self.total, self.producer, self.actors, self.consumer


@dataclass(frozen=True, slots=True)
class Throughput:
    """What a throughput run measured."""

    rate: float
    """Messages per second, from starting the tasks to both returning."""
    cpu: CpuSplit
    """CPU microseconds per message, by role."""


def actors_cpu_seconds(actors: Sequence[Any]) -> float:
    """The CPU seconds the actors' processes have used so far, summed (asked of each actor)."""
    # A lambda, so that it travels by value: Queue's actor never imports raytopic.
    answers = [actor.__ray_call__.remote(lambda _actor: time.process_time()) for actor in actors]
    return sum(ray.get(answers))


def channel_actors(topic: Topic) -> list[Any]:
    """The handles of a topic's channel actors (found by name)."""
    return [
        ray.get_actor(channel_actor_name(topic.name, channel), namespace=topic.namespace)
        for channel in range(topic.channel_count)
    ]


def measure_run(
    count: int,
    actors: Sequence[Any],
    consumers: Callable[[], Sequence[ray.ObjectRef[tuple[Any, float]]]],
    producers: Callable[[], Sequence[ray.ObjectRef[tuple[Any, float]]]],
    produced: Callable[[], None] = lambda: None,
) -> tuple[Throughput, list[Any]]:
    """Start the consumers, then the producers, and wait for all of them.

    Args:
        count: The messages the run moves (all producers' together).
        actors: The actors the messages pass through.
        consumers: Starts the consumers (tasks or actor calls; none in a case
            without any) and returns their refs once they can take messages;
            each returns (its result, the ``cpu_seconds()`` it used). The
            clock starts after.
        producers: Starts the producers, returning as the consumers do.
        produced: Called once every producer returned, before the consumers
            are waited for: a check that raises if they could not finish.

    Returns:
        The rate and the CPU per message (each role's processes summed), and
        the consumers' results in the order started.
    """
    # The consumers first, so that they are waiting when the first message comes.
    consuming = list(consumers())
    before = actors_cpu_seconds(actors)
    start = time.perf_counter()
    producer_cpu = sum(cpu for _produced, cpu in ray.get(list(producers())))
    produced()
    results = ray.get(consuming)
    elapsed = time.perf_counter() - start
    actors_cpu = actors_cpu_seconds(actors) - before
    consumer_cpu = sum(cpu for _result, cpu in results)
    per_message = 1e6 / max(count, 1)
    cpu = CpuSplit(producer_cpu * per_message, actors_cpu * per_message, consumer_cpu * per_message)
    return Throughput(count / elapsed, cpu), [result for result, _cpu in results]


def median_throughput(runs: int, measure: Callable[[], Throughput]) -> Throughput:
    """The median of ``runs`` runs, each figure on its own (rate, and each role's CPU)."""
    results = [measure() for _ in range(runs)]

    def median(figure: Callable[[Throughput], float]) -> float:
        return statistics.median(figure(result) for result in results)

    return Throughput(
        median(lambda result: result.rate),
        CpuSplit(
            median(lambda result: result.cpu.producer),
            median(lambda result: result.cpu.actors),
            median(lambda result: result.cpu.consumer),
        ),
    )
