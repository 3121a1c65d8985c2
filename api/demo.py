"""``raytopic demo``: a topic end to end on an embedded local Ray, with a verdict.

Orders are published by customer key into a topic with a durable group;
two consumer actors share the group, total the amounts per customer and
commit after every batch; an anonymous subscriber watches the tail. The demo
checks the consumers' totals against the published ones and exits non-zero
if they differ.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import ray

from raytopic.topic import Topic, create_topic

__all__ = ["run_demo"]


@ray.remote(num_cpus=0)
class _Consumer:
    """One member of the group: totals per customer, a commit per batch."""

    def __init__(self, topic: Topic, group: str) -> None:
        self._subscriber = topic.subscriber(group=group, complete_on_empty=True)
        self._totals: dict[str, float] = defaultdict(float)
        self._count = 0

    def drain(self) -> int:
        """Consume until the owned channels are empty; return how many were taken."""
        taken = 0
        while True:
            batch = ray.get(self._subscriber.receive_batch(500))
            if not batch:
                return taken
            for element in batch:
                order = element.value
                self._totals[order["customer"]] += order["amount"]
            batch[-1].commit()
            taken += len(batch)
            self._count += len(batch)

    def totals(self) -> dict[str, float]:
        return dict(self._totals)

    def channels(self) -> tuple[int, ...]:
        return self._subscriber.channels

    def close(self) -> None:
        self._subscriber.close()


def run_demo(orders: int = 20_000, say: Callable[[str], None] = print) -> bool:
    """Run the demo; return True when the consumers' totals match what was published."""
    name = f"demo-orders-{uuid.uuid4().hex[:6]}"
    topic = create_topic(name, channels=4, groups=["billing"])
    say(f"created topic {name!r}: 4 channels, durable group 'billing'")
    try:
        watcher = topic.subscriber()  # anonymous: sees what is published from now on
        rng = random.Random(7)
        expected: dict[str, float] = defaultdict(float)
        started = time.perf_counter()
        with topic.publisher() as publisher:
            futures = []
            for order_id in range(orders):
                customer = f"customer-{rng.randrange(50)}"
                amount = round(rng.uniform(1, 100), 2)
                expected[customer] += amount
                futures.append(
                    publisher.publish(
                        {"order": order_id, "customer": customer, "amount": amount},
                        key=customer,
                    )
                )
        elapsed = time.perf_counter() - started
        per_channel = Counter(future.result().channel for future in futures)
        say(f"published {orders:,} orders in {elapsed:.2f} s ({orders / elapsed:,.0f}/s)")
        say(
            "orders per channel: "
            + ", ".join(f"{c}: {n:,}" for c, n in sorted(per_channel.items()))
        )
        first = ray.get(watcher.receive())
        say(f"anonymous subscriber saw order {first.value['order']} at {first.position}")
        watcher.close()

        consumers = [_Consumer.remote(topic, "billing") for _ in range(2)]
        ray.get([consumer.totals.remote() for consumer in consumers])  # both joined
        channels = ray.get([consumer.channels.remote() for consumer in consumers])
        say(f"group 'billing' members own channels {channels[0]} and {channels[1]}")
        started = time.perf_counter()
        taken = ray.get([consumer.drain.remote() for consumer in consumers])
        elapsed = time.perf_counter() - started
        say(f"consumers took {taken[0]:,} + {taken[1]:,} orders in {elapsed:.2f} s")

        totals: dict[str, float] = defaultdict(float)
        for part in ray.get([consumer.totals.remote() for consumer in consumers]):
            for customer, amount in part.items():
                totals[customer] += amount
        stats = topic.describe().groups["billing"]
        say(f"group lag after the run: {stats.lag} (depth {stats.depth}, unacked {stats.unacked})")
        ray.get([consumer.close.remote() for consumer in consumers])
        matches = _same_totals(expected, totals)
        say("verdict: totals per customer " + ("MATCH" if matches else "DIFFER"))
        return matches and stats.lag == 0
    finally:
        topic.destroy()


def _same_totals(expected: dict[str, Any], actual: dict[str, Any]) -> bool:
    if set(expected) != set(actual):
        return False
    return all(
        abs(expected[key] - actual[key]) < 1e-6 * max(1.0, expected[key]) for key in expected
    )
