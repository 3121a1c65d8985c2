"""One channel as a Hazelcast-style ring buffer: sequences, overwrite, batch reads.

Run: python examples/ring_buffer.py
"""

import os
import uuid

import ray

import raytopic as rt

ray.init(address=os.environ.get("RAY_ADDRESS", "local"))
topic = rt.create_topic(
    f"example-ring-{uuid.uuid4().hex[:6]}", channels=1, capacity=5, overflow="overwrite"
)
try:
    ring = topic.ringbuffer(0)
    for n in range(8):
        ring.add(f"item-{n}")  # the oldest are overwritten past the capacity
    print("head", ring.head_sequence(), "tail", ring.tail_sequence(), "size", ring.size())
    print("read_one(tail):", ring.read_one(ring.tail_sequence()))
    result = ray.get(ring.read_many_async(ring.head_sequence(), 1, 5, None))
    print("read_many:", list(result), "next", result.next_sequence_to_read_from)
finally:
    topic.destroy()
