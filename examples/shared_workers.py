"""A shared group: more workers than channels, each element acknowledged alone;
a failing element is retried by other workers, then goes to a dead-letter topic.

Run: python examples/shared_workers.py
"""

import os
import uuid

import ray

import raytopic as rt

ray.init(address=os.environ.get("RAY_ADDRESS", "local"))
name = f"example-jobs-{uuid.uuid4().hex[:6]}"
workers = rt.SharedGroup("workers", max_deliveries=3, dead_letter=f"{name}-dead")
topic = rt.create_topic(name, channels=2, groups=[workers])  # creates the dead-letter topic too


@ray.remote(num_cpus=0)
def worker(topic: rt.Topic) -> int:
    """Take jobs from any channel; job 13 always fails."""
    done = 0
    with topic.subscriber(
        group="workers", mode="shared", window=10, complete_on_empty=True
    ) as jobs:
        while batch := ray.get(jobs.receive_batch(10)):
            for element in batch:
                if element.value["job"] == 13:
                    element.nack()  # delivered again (to any worker), up to 3 times
                else:
                    element.ack()
                    done += 1
    return done


try:
    with topic.publisher() as publisher:
        for n in range(100):
            publisher.publish({"job": n})
    # Three workers on two channels; each stops when nothing is left to take.
    done = sum(ray.get([worker.remote(topic) for _ in range(3)]))
    print("jobs done by 3 workers:", done)
    with rt.get_topic(f"{name}-dead").subscriber(start="earliest") as dead:
        letter = ray.get(dead.receive()).value
    print("dead letter:", letter["value"], "after", letter["deliveries"], "deliveries")
    stats = topic.describe().groups["workers"]
    print("redelivered", stats.redelivered, "dead-lettered", stats.dead_lettered)
finally:
    rt.get_topic(f"{name}-dead").destroy()
    topic.destroy()
