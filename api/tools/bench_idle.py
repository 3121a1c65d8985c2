"""``raytopic bench``'s idle case: what topics that carry nothing cost, against bare
Ray actors created the same way in the same run.

An idle topic should cost what Ray costs for its actors, not more: a user
keeps topics (and members waiting on them) open for hours between bursts.

Cases (``topics`` topics of ``channels`` channels, one group member each):
    CPU        the mean per channel process and per coordinator process over
               ``seconds`` of idleness (user + system time of each actor's
               process, from its CPU clock), as a ratio to the mean of bare
               actors (named, detached, async, ``num_cpus=0``, the channels'
               ``max_concurrency``) measured over the same window.
               Each member is a ``Subscriber`` kept open and idle, as a user's
               waiting member is: it receives nothing, its heartbeats run.
    creation   ``create_topic(channels=...)`` returning, against creating
               ``channels + 1`` bare actors (a topic's actor count) and getting an
               answer from each; the median of ``topics`` creations of each,
               taken in turns so neither side always finds Ray's idle workers.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil
import ray

from raytopic.client.topic import Topic, create_topic
from raytopic.core.config import DEFAULT_NAMESPACE
from raytopic.core.naming import coordinator_actor_name
from raytopic.tools.bench_common import Figure, _name, at_most

__all__ = [
    "CHANNEL_TARGET",
    "COORDINATOR_TARGET",
    "CREATION_TARGET",
    "run_idle_benchmarks",
]

CHANNEL_TARGET = at_most(1.2)
"""An idle channel's CPU against a bare actor's."""
COORDINATOR_TARGET = at_most(1.5)
"""An idle coordinator's CPU against a bare actor's."""
CREATION_TARGET = at_most(1.5)
"""``create_topic`` against creating as many bare actors as the topic has."""

GROUP = "idle"
QUIET = 2.0
"""Seconds between the last member joining and the window opening: a join's
rebalance and view pushes are not idleness."""
BARE_MAX_CONCURRENCY = 100_000
"""The channels' ``max_concurrency`` (a concurrency limit sizes an async actor's
event loop set-up, so the bare actors match it)."""


def _bare_actor_class() -> type[Any]:
    """A bare async actor class, made in a function so that Ray ships it by value:
    a bare actor's worker imports no raytopic (a channel's worker has to)."""

    class BareActor:
        async def pid(self) -> int:
            return os.getpid()

    return BareActor


def create_bare_actors(count: int, namespace: str) -> tuple[list[Any], list[int]]:
    """Create ``count`` named, detached bare actors as a topic creates its channels,
    and wait for an answer from each.

    Returns:
        The handles and the process ids.
    """
    actor_class = ray.remote(_bare_actor_class())
    prefix = _name("bare")
    actors = [
        actor_class.options(
            name=f"{prefix}-{index}",
            namespace=namespace,
            lifetime="detached",
            num_cpus=0,
            max_concurrency=BARE_MAX_CONCURRENCY,
            max_restarts=-1,
            max_task_retries=-1,
        ).remote()
        for index in range(count)
    ]
    return actors, ray.get([actor.pid.remote() for actor in actors])


def coordinator_pid(topic: Topic) -> int:
    """The process id of a topic's coordinator (asked of the actor itself)."""
    coordinator = ray.get_actor(coordinator_actor_name(topic.name), namespace=topic.namespace)
    pid: Any = ray.get(coordinator.__ray_call__.remote(lambda _actor: os.getpid()))
    return int(pid)


def cpu_percents(pids: Sequence[int], seconds: float) -> list[float]:
    """Each process's CPU over the next ``seconds``, in percent of one core."""
    before = [_cpu_seconds(pid) for pid in pids]
    start = time.perf_counter()
    time.sleep(seconds)
    after = [_cpu_seconds(pid) for pid in pids]
    elapsed = time.perf_counter() - start
    return [100 * (end - begin) / elapsed for begin, end in zip(before, after, strict=True)]


def _cpu_seconds(pid: int) -> float:
    """A process's user + system time so far, every thread's (ended ones too).

    Read from its CPU clock, to the nanosecond, on Linux: psutil counts 10 ms
    clock ticks, and an idle actor uses a few milliseconds a second, so over a
    short window a bare actor often counted 0 (and the ratio to it could not
    be taken). Elsewhere, psutil's ticks.
    """
    try:
        return time.clock_gettime_ns(_process_cpu_clock(pid)) / 1e9
    # Not Linux (no CPU clocks of other processes), or the process is gone (psutil
    # then raises NoSuchProcess, as it always did here).
    except (OSError, AttributeError):
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system


def _process_cpu_clock(pid: int) -> int:
    """The clock id of a process's CPU clock, as Linux makes it (``clock_getcpuclockid``,
    which Python lacks): ``~pid << 3``, the low bits 2 for the scheduler's sum of
    every thread's runtime."""
    return (~pid << 3) | 2


def run_idle_benchmarks(
    *,
    topics: int,
    channels: int,
    seconds: float,
    report: Callable[[Figure], None],
    quiet: float = QUIET,
) -> list[Figure]:
    """Create ``topics`` topics and as many sets of bare actors (timing each), join
    one member per topic, then measure every process over ``seconds``.

    Args:
        topics: topics (and sets of ``channels + 1`` bare actors); also the
            creations timed. 0 measures nothing.
        channels: channels per topic.
        seconds: the idle window.
        report: called with each figure as soon as it is measured.
        quiet: seconds between the last member joining and the window (at most
            ``seconds``); less lets the joins' work into the figures.

    Returns:
        The figures, in the order reported.
    """
    figures: list[Figure] = []
    if topics <= 0:
        return figures

    def add(figure: Figure) -> None:
        figures.append(figure)
        report(figure)

    made: list[Topic] = []
    bare: list[Any] = []
    bare_pids: list[int] = []
    members: list[Any] = []
    topic_seconds: list[float] = []
    bare_seconds: list[float] = []

    def make_topic() -> None:
        start = time.perf_counter()
        made.append(create_topic(_name("idle"), channels=channels))
        topic_seconds.append(time.perf_counter() - start)

    def make_bare() -> None:
        start = time.perf_counter()
        actors, pids = create_bare_actors(channels + 1, DEFAULT_NAMESPACE)
        bare_seconds.append(time.perf_counter() - start)
        bare.extend(actors)
        bare_pids.extend(pids)

    try:
        for turn in range(topics):
            # Ray keeps a few idle workers ready and whoever creates first takes
            # them: take turns, the bare actors first, so that with an odd
            # count the doubt favours the baseline, not the topic.
            for make in (make_bare, make_topic) if turn % 2 == 0 else (make_topic, make_bare):
                make()
        members = [topic.subscriber(group=GROUP) for topic in made]
        channel_pids = [stats.pid for topic in made for stats in topic.describe().channels]
        coordinator_pids = [coordinator_pid(topic) for topic in made]
        time.sleep(min(quiet, seconds))
        cpu = cpu_percents([*bare_pids, *channel_pids, *coordinator_pids], seconds)
    finally:
        for member in members:
            with contextlib.suppress(Exception):
                member.close()
        for topic in made:
            topic.destroy()
        for actor in bare:
            ray.kill(actor)

    bare_cpu = statistics.mean(cpu[: len(bare_pids)])
    channel_cpu = statistics.mean(cpu[len(bare_pids) : len(bare_pids) + len(channel_pids)])
    coordinator_cpu = statistics.mean(cpu[len(bare_pids) + len(channel_pids) :])
    add(Figure(f"idle: bare actor CPU, {len(bare_pids)} over {seconds:g} s", bare_cpu, "% core"))
    add(
        Figure(
            f"idle: channel CPU, {topics} topic(s) x {channels} ch, 1 member each",
            channel_cpu,
            "% core",
            "bare actor",
            bare_cpu,
            target=CHANNEL_TARGET,
        )
    )
    add(
        Figure(
            f"idle: coordinator CPU, {topics} topic(s)",
            coordinator_cpu,
            "% core",
            "bare actor",
            bare_cpu,
            target=COORDINATOR_TARGET,
        )
    )
    bare_median = statistics.median(bare_seconds)
    add(Figure(f"create {channels + 1} bare actors, each answering", bare_median, "s"))
    add(
        Figure(
            f"create_topic(channels={channels})",
            statistics.median(topic_seconds),
            "s",
            f"{channels + 1} bare actors",
            bare_median,
            target=CREATION_TARGET,
        )
    )
    return figures
