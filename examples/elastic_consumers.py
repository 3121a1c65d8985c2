"""Elastic consumers: a group whose members are Ray actors, as many as its lag asks
for; each element handled once, the pool back to zero when the backlog is gone.

Run: python examples/elastic_consumers.py
"""

import os
import time
import uuid

import ray

import raytopic as rt

ray.init(address=os.environ.get("RAY_ADDRESS", "local"))


@ray.remote(num_cpus=0)
class Results:
    """Where the handlers put what they did (a database, in real life)."""

    def __init__(self) -> None:
        self.done: list[int] = []

    def add(self, orders: list[int]) -> None:
        self.done.extend(orders)

    def count(self) -> tuple[int, int]:
        return len(self.done), len(set(self.done))


results = Results.remote()


def handle(values: list[dict]) -> None:
    """Runs in the member actors, up to batch_size values at a time."""
    time.sleep(0.002 * len(values))  # the work: a model call, say
    ray.get(results.add.remote([value["order"] for value in values]))


topic = rt.create_topic(f"example-orders-{uuid.uuid4().hex[:6]}", channels=4)
try:
    scaler = topic.autoscale(
        "fulfil",
        handle,
        max_members=3,
        target_lag_per_member=200,  # one member per 200 elements behind
        poll_s=0.5,
        scale_down_after_s=1.0,
        batch_size=50,
    )
    print("members while idle:", scaler.members)
    with topic.publisher() as publisher:
        for n in range(1000):
            publisher.publish({"order": n})
    while ray.get(results.count.remote())[0] < 1000:
        time.sleep(0.2)
    stats = scaler.describe()
    print("members at the peak:", max(event.after for event in stats.events))
    handled, distinct = ray.get(results.count.remote())
    print(f"handled {handled}, distinct {distinct}: each order once")
    while scaler.members:  # the backlog is gone: back to zero after scale_down_after_s
        time.sleep(0.2)
    print("members after the burst:", scaler.members)
finally:
    topic.destroy()  # stops the autoscaler and its members too
