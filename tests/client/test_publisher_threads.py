"""One publisher shared by many threads: its calls reach the channel in the order it
numbered them, even when a thread is held up between numbering a call and sending it."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from concurrent.futures import Future

import pytest

import raytopic as rt
from raytopic.client.publisher import Publisher

THREADS = 6
VALUES = 150
HELD_CALL = 40
HOLD_S = 6.0
"""A thread held this long (preempted, say) after its call was numbered: past the
channel's 5 s wait for a missing number."""


@pytest.mark.slow
def test_a_thread_held_between_numbering_and_sending_loses_nothing(make_topic, monkeypatch) -> None:
    make_one = Publisher._make_one
    held = threading.Event()

    def held_up(self: Publisher, call, *args, **kwargs):
        if call.number == HELD_CALL and not held.is_set():
            held.set()
            time.sleep(HOLD_S)  # the other threads go on publishing meanwhile
        return make_one(self, call, *args, **kwargs)

    monkeypatch.setattr(Publisher, "_make_one", held_up)
    topic = make_topic(channels=1)
    publisher = topic.publisher(batch_size=1, max_in_flight=16)  # a call per value
    futures: dict[tuple[int, int], Future[rt.PublishStatus]] = {}

    def publish(thread: int) -> None:
        for number in range(VALUES):
            value = {"t": thread, "i": number}
            futures[(thread, number)] = publisher.publish(value, key=f"t{thread}")
            time.sleep(0.005)

    threads = [threading.Thread(target=publish, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    publisher.close()
    assert held.is_set()

    failed = {sent for sent, future in futures.items() if future.exception()}
    with topic.subscriber(start="earliest", complete_on_empty=True) as subscriber:
        arrived = [(e.value["t"], e.value["i"]) for e in subscriber]
    assert not failed & set(arrived), "values reported failed are in the topic"
    assert set(arrived) == set(futures) - failed, "values reported sent are missing"
    # Overflow "block" on a topic with room: no reason for any value to fail.
    assert not failed, f"{len(failed)} values failed: {futures[min(failed)].exception()!r}"
    per_thread: dict[int, list[int]] = defaultdict(list)
    for thread, number in arrived:
        per_thread[thread].append(number)
    assert per_thread == {n: list(range(VALUES)) for n in range(THREADS)}
