"""``raytopic bench``'s group cases: members of one channel-owned group, measured in
the same run as the throughput cases (``bench`` runs them and reports the figures).

Cases:
    throughput     two members of one group on a filled topic iterating
                   ``iter_batches``, a commit per batch (``group_throughput``;
                   ``bench`` sets it against Queue's batch mode).
    reassignment   the time from a member's ``close()`` to the other owning
                   every channel (``reassignment_time``).

The shared group's cases are ``raytopic.tools.bench_shared``'s.
"""

from __future__ import annotations

import time

import ray

from raytopic.client.topic import Topic, create_topic
from raytopic.tools.bench_common import BATCH, _check_ids, _name, at_least
from raytopic.tools.bench_throughput import _publish_loop

__all__ = ["GROUP_TARGET", "group_throughput", "reassignment_time"]

GROUP_TARGET = at_least(1.0)
"""Two members committing per batch, against Queue's batch mode (which commits nothing):
issue 49 item 4 asks >= 1.0x on 2 cores."""


@ray.remote(num_cpus=0)
def _group_member(topic: Topic, group: str) -> tuple[int, int, float, float]:
    """Iterate ``iter_batches`` (receives in flight at every owned channel, as users
    drain a group) with a commit per batch, until the owned channels are empty (the
    topic was filled before).

    Returns (elements, the sum of their ids, wall time of the first and of the
    last batch).
    """
    seen, id_sum, first, last = 0, 0, 0.0, 0.0
    with topic.subscriber(group=group, timeout=10.0, complete_on_empty=True) as subscriber:
        for batch in subscriber.iter_batches(BATCH):
            batch.commit()
            seen += len(batch)
            id_sum += sum(element.value["id"] for element in batch)
            last = time.time()
            first = first or last
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
        results = ray.get([_group_member.remote(topic, group) for _ in range(2)])
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
