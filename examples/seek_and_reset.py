"""Move a subscriber (seek) or a whole group (reset) to a position or a time.

Run: python examples/seek_and_reset.py
"""

import os
import time
import uuid
from datetime import UTC, datetime

import ray

import raytopic as rt

ray.init(address=os.environ.get("RAY_ADDRESS", "local"))
topic = rt.create_topic(
    f"example-events-{uuid.uuid4().hex[:6]}", channels=1, groups=["audit"], retain=True
)
try:
    with topic.publisher() as publisher:
        for n in range(5):
            publisher.publish({"event": n}).result()
    time.sleep(0.05)
    middle = datetime.now(UTC)  # everything after this is "new"
    with topic.publisher() as publisher:
        for n in range(5, 10):
            publisher.publish({"event": n}).result()

    with topic.subscriber(start="earliest", complete_on_empty=True) as reader:
        reader.seek(0, middle)  # the first element published after `middle`
        print("after the time:", ray.get(reader.receive()).value)
        reader.seek(0, topic.position(0, 1))  # next is the one after position 1
        print("after position 1:", ray.get(reader.receive()).value)

    topic.reset_group("audit", "latest")  # the group skips what is there
    with topic.subscriber(group="audit", complete_on_empty=True) as member:
        print("after reset to latest:", ray.get(member.receive_batch(10)))
    topic.reset_group("audit", "earliest")  # and reads it all again
    with topic.subscriber(group="audit", complete_on_empty=True) as member:
        print("after reset to earliest:", len(ray.get(member.receive_batch(10))), "elements")
finally:
    topic.destroy()
