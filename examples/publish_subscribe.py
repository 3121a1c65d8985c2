"""Publish by key, receive as ObjectRefs, hand a received element to a task.

Run: python examples/publish_subscribe.py   (RAY_ADDRESS=... to use a running cluster)
"""

import os
import uuid

import ray

import raytopic as rt

ray.init(address=os.environ.get("RAY_ADDRESS", "local"))  # a running cluster, else a new one
topic = rt.create_topic(f"example-orders-{uuid.uuid4().hex[:6]}", channels=2)
try:
    watcher = topic.subscriber()  # anonymous: everything published from now on
    with topic.publisher() as publisher:
        statuses = [
            publisher.publish({"order": n, "amount": 10.0 * n}, key=f"customer-{n % 3}").result()
            for n in range(6)
        ]
    print("published to channels", sorted({status.channel for status in statuses}))

    @ray.remote
    def amount(element: rt.Element) -> float:
        return element.value["amount"]  # the element went straight to the task

    refs = [watcher.receive() for _ in range(6)]  # ObjectRefs of Elements
    print("total", sum(ray.get([amount.remote(ref) for ref in refs])))
    watcher.close()
finally:
    topic.destroy()
