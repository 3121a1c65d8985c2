"""A durable group: two members share the channels, commit what they processed,
and a new member resumes after the last commit.

Run: python examples/groups_and_commits.py
"""

import os
import uuid

import ray

import raytopic as rt

ray.init(address=os.environ.get("RAY_ADDRESS", "local"))
topic = rt.create_topic(f"example-billing-{uuid.uuid4().hex[:6]}", channels=2, groups=["billing"])
try:
    with topic.publisher() as publisher:
        for n in range(100):
            publisher.publish({"invoice": n}, key=str(n))

    first = topic.subscriber(group="billing", complete_on_empty=True)
    second = topic.subscriber(group="billing", complete_on_empty=True)
    print("channels:", first.channels, second.channels)  # disjoint, balanced
    taken = 0
    for member in (first, second):
        batch = ray.get(member.receive_batch(10))
        for channel in {element.channel for element in batch}:
            last = max(e.position for e in batch if e.channel == channel)
            member.commit(channel, last)  # cumulative, per channel
        taken += len(batch)
    first.close()
    second.close()

    stats = topic.describe().groups["billing"]
    print("committed", taken, "lag", stats.lag)  # lag: published and not committed
    with topic.subscriber(group="billing", complete_on_empty=True) as resumed:
        rest = 0
        while batch := ray.get(resumed.receive_batch(100)):
            rest += len(batch)
    print("a new member received the other", rest)
    assert taken + rest == 100
finally:
    topic.destroy()
