"""``raytopic bench``'s commit-cost case: what a durable commit costs on a channel that
has seen many publishers, against one that has seen a single publisher, in the same run.

A commit moves one group's cursor, so what it writes should not grow with the
channel's history (issue 24: "state that does not grow with history"): a
channel keeps a track per publisher it has seen (up to 10,000), and a commit
that rewrote every track would slow down as publishers come and go.

Case (each on its own 1-channel topic with the embedded store in a temporary
directory, ``sync="always"``):
    commit p50   one group member receives and commits one element at a time
                 (``Subscriber.commit``, which returns once the commit is on
                 disk); the p50 of ``commits`` commits, after a few to warm up.
                 The channel has seen 1 publisher (every element from one
                 ``Publisher``), or ``publishers`` (as many ``Publisher``
                 handles, each publishing one element, from a few tasks at
                 once); the second as a ratio to the first.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import ray

import raytopic
from raytopic.client.topic import Topic, create_topic
from raytopic.tools.bench_common import Figure, _name, _percentile, at_most
from raytopic.tools.bench_throughput import _publish_loop

if TYPE_CHECKING:
    from raytopic.client.subscriber import Subscriber

__all__ = ["COMMIT_TARGET", "PUBLISHERS", "run_commit_benchmarks"]

COMMIT_TARGET = at_most(1.3)
"""A durable commit on a channel that has seen ``PUBLISHERS`` publishers, against one
that has seen 1: the state a commit writes should not grow with history."""
PUBLISHERS = 3000
"""Publishers the second channel has seen."""
WARMUP = 10
"""Commits made before the measured ones (the first pay for the member's set-up)."""
PUBLISHING_TASKS = 4
"""Tasks creating the many publishers."""
AT_ONCE = 50
"""Publishers a task has publishing at a time (each publish waits for an fsync)."""
GROUP = "commits"
RECEIVE_BATCH = 100


@ray.remote(num_cpus=0)
def _publish_one_each(topic: Topic, publishers: int, extra: int) -> None:
    """``publishers`` new Publisher handles, each publishing one element (the last
    ``1 + extra``): ``AT_ONCE`` of them at a time, so their appends share fsyncs."""
    for first in range(0, publishers, AT_ONCE):
        handles = [topic.publisher() for _ in range(first, min(publishers, first + AT_ONCE))]
        futures = [
            handle.publish({"publisher": first + index}) for index, handle in enumerate(handles)
        ]
        if first + len(handles) == publishers:
            futures += [handles[-1].publish({"extra": value}) for value in range(extra)]
        for future in futures:
            future.result()
        for handle in handles:
            handle.close()


def _fill(topic: Topic, elements: int, publishers: int) -> None:
    """``elements`` elements from ``publishers`` Publisher handles (1: a single one)."""
    if publishers <= 1:
        ray.get(_publish_loop.remote(topic, elements))
        return
    tasks = min(PUBLISHING_TASKS, publishers)
    shares = [
        publishers // tasks + (1 if task < publishers % tasks else 0) for task in range(tasks)
    ]
    extra = elements - publishers
    ray.get(
        [
            _publish_one_each.remote(topic, share, extra if task == 0 else 0)
            for task, share in enumerate(shares)
        ]
    )


def commit_p50(commits: int, publishers: int) -> float:
    """Seconds of a durable commit's p50 on a 1-channel topic whose channel has seen
    ``publishers`` publishers (one group member, one element per commit)."""
    elements = max(publishers, commits + WARMUP)
    with tempfile.TemporaryDirectory(prefix="raytopic-bench-") as directory:
        topic = create_topic(
            _name("cmt"), channels=1, capacity=elements, store=directory, sync="always"
        )
        member = None
        try:
            # The member first: the group keeps every element for itself.
            member = topic.subscriber(group=GROUP, complete_on_empty=True)
            _fill(topic, elements, publishers)
            return _measure_commits(member, commits)
        finally:
            if member is not None:
                with contextlib.suppress(Exception):
                    member.close()
            topic.destroy()


def _measure_commits(member: Subscriber, commits: int) -> float:
    """The p50 of ``commits`` commits of one element each, after ``WARMUP``."""
    waits: list[float] = []
    committed = 0
    while committed < commits + WARMUP:
        batch = ray.get(member.receive_batch(min(RECEIVE_BATCH, commits + WARMUP - committed)))
        if not batch:
            time.sleep(0.005)  # the member is still being given its channel
            continue
        for element in batch:
            start = time.perf_counter()
            result = member.commit(element.channel, element.position)
            elapsed = time.perf_counter() - start
            if result.status is not raytopic.CommitStatus.COMMITTED:
                raise RuntimeError(f"a commit of the commit case ended {result.status.name}")
            if committed >= WARMUP:
                waits.append(elapsed)
            committed += 1
    return _percentile(waits, 50)


def run_commit_benchmarks(
    *, commits: int, publishers: int = PUBLISHERS, report: Callable[[Figure], None]
) -> list[Figure]:
    """Measure the commit p50 after 1 publisher, then after ``publishers``.

    Args:
        commits: commits measured per channel (after ``WARMUP``). 0 measures nothing.
        publishers: publishers the second channel has seen.
        report: called with each figure as soon as it is measured.

    Returns:
        The figures, in the order reported.

    Raises:
        RuntimeError: a commit did not commit.
    """
    figures: list[Figure] = []
    if commits <= 0:
        return figures
    one = commit_p50(commits, 1)
    figures.append(Figure("store: durable commit p50, 1 publisher seen", one * 1e3, "ms"))
    report(figures[-1])
    many = commit_p50(commits, publishers)
    figures.append(
        Figure(
            f"store: durable commit p50, {publishers:,} publishers seen",
            many * 1e3,
            "ms",
            "1 publisher",
            one * 1e3,
            target=COMMIT_TARGET,
        )
    )
    report(figures[-1])
    return figures
