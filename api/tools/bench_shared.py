"""``raytopic bench``'s shared-group cases: 4 members of a shared group on a
2-channel topic against 2 members of a channel-owned group on the same kind of
topic, measured in the same run.

Cases:
    no work      every element acknowledged (acks batched on the wire: one call
                 per channel per received batch) against a commit per batch.
    10 ms task   each element "processed" for 10 ms (a sleep, as I/O-bound work
                 is) before it is acknowledged: a channel-owned group cannot use
                 more members than channels, a shared group can.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import ray

from raytopic.client.topic import Topic, create_topic
from raytopic.core.shared_group import SharedGroup
from raytopic.tools.bench_common import Figure, _check_ids, _Drained, _median, _name, at_least
from raytopic.tools.bench_throughput import _publish_loop

__all__ = ["TASK_SECONDS", "TASK_TARGET", "run_shared_benchmarks"]

CHANNELS = 2
SHARED_MEMBERS = 4
OWNED_MEMBERS = 2
TASK_SECONDS = 0.010
"""The simulated work per element of the task case."""
TASK_TARGET = at_least(1.7)
"""The task case against the channel-owned group: 4 members on 2 channels should
come close to twice the 2 members a channel-owned group can use."""
TASK_BATCH = 10
"""Elements a member takes at once in the task case (a small prefetch: a member
that hoards work leaves the others idle at the end)."""
BULK_BATCH = 1000
QUIET = 1.0
"""Seconds without data after which a member stops (once it had some)."""
FIRST_WAIT = 30.0
"""Seconds a member of the task case waits for its first data (published once
every member joined); in a filled topic it waits QUIET."""


@ray.remote(num_cpus=0)
def _member(
    topic: Topic,
    group: str,
    shared: bool,
    batch_size: int,
    task: float,
    first_wait: float,
    count: int,
) -> tuple[int, int, float, float]:
    """Consume until QUIET seconds pass without data, or the topic holds all ``count``
    elements and the group has committed them all; acknowledge each element
    (shared) or commit each batch (owned). Returns (elements, sum of ids, time
    of the first and of the last batch)."""
    seen, id_sum, first, last = 0, 0, 0.0, 0.0
    drained = _Drained(topic, group, count)
    options: dict[str, Any] = {"mode": "shared", "window": batch_size * 2} if shared else {}
    with topic.subscriber(
        group=group, timeout=10.0, complete_on_empty=True, **options
    ) as subscriber:
        started = time.time()
        pending: list[Any] = []
        while time.time() - (last or started) < (QUIET if last else first_wait):
            batch = ray.get(subscriber.receive_batch(batch_size))
            if not batch:
                if drained(time.time() - (last or started)):
                    break
                time.sleep(0.005)
                continue
            first = first or time.time()
            for element in batch:
                id_sum += element.value["id"]
                if task:
                    time.sleep(task)
            if shared:
                pending.append(subscriber.ack_async(batch))
                if len(pending) > 2:  # a few acks in flight, never unbounded
                    ray.get(pending.pop(0))
            else:
                batch[-1].commit()
            seen += len(batch)
            last = time.time()
        ray.get(pending)
    return seen, id_sum, first, last


def group_rate(count: int, shared: bool, task: float) -> float:
    """Elements per second through a 2-channel topic: 4 shared members, or 2
    members of a channel-owned group.

    Without a task the topic is filled first (the members' pace is measured);
    with one, the elements are published once every member has joined, so
    members that start late (a worker process to start) do not count against
    the group.
    """
    topic = create_topic(_name("shr" if shared else "own"), channels=CHANNELS, capacity=count)
    group = "bench"
    try:
        topic.create_group(SharedGroup(group) if shared else group)
        if not task:
            ray.get(_publish_loop.remote(topic, count))
        members = SHARED_MEMBERS if shared else OWNED_MEMBERS
        batch = TASK_BATCH if task else BULK_BATCH
        first_wait = FIRST_WAIT if task else QUIET
        runs = [
            _member.remote(topic, group, shared, batch, task, first_wait, count)
            for _ in range(members)
        ]
        if task:
            deadline = time.monotonic() + FIRST_WAIT
            while len(topic.describe().groups[group].members) < members:
                if time.monotonic() > deadline:
                    raise RuntimeError("the members did not join")
                time.sleep(0.05)
            ray.get(_publish_loop.remote(topic, count))
        results = ray.get(runs)
        seen = sum(result[0] for result in results)
        if seen < count:
            raise RuntimeError(f"the group received {seen} of {count} elements")
        if seen == count:
            _check_ids("shared group" if shared else "group", count, sum(r[1] for r in results))
        first = min(result[2] for result in results if result[0])
        last = max(result[3] for result in results)
        return count / (last - first)
    finally:
        topic.destroy()


def run_shared_benchmarks(
    *,
    messages: int,
    repeat: int,
    report: Callable[[Figure], None],
    task_elements: int | None = None,
) -> list[Figure]:
    """Both cases; the task case on ``task_elements`` elements (None: ``messages // 250``,
    200 to 4,000: 4,000 take the channel-owned group 20 s)."""
    figures: list[Figure] = []
    if task_elements is None:
        task_elements = max(200, min(4000, messages // 250))
    for label, count, task in (
        ("ack per element", messages, 0.0),
        (f"{TASK_SECONDS * 1e3:.0f} ms task per element", task_elements, TASK_SECONDS),
    ):
        owned = _median(repeat, partial(group_rate, count, False, task))
        shared = _median(repeat, partial(group_rate, count, True, task))
        figure = Figure(
            f"shared group: {SHARED_MEMBERS} members, {CHANNELS} ch, {label}",
            shared,
            "msgs/s",
            f"owned group of {OWNED_MEMBERS}",
            owned,
            target=TASK_TARGET if task else None,
        )
        figures.append(figure)
        report(figure)
    return figures
