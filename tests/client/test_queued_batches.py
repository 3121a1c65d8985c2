"""``publish_batch(ref=False)`` against real channel actors: its parts wait in the
publisher's per-channel queues with ``publish()``'s values and coalesce while calls
are in flight, and every statement of ``publish_batch`` still holds: statuses in
input order, keys kept, per-key order with ``publish``, all or nothing per channel
with overflow "fail", nothing acknowledged lost when a channel is SIGKILLed, and
bad input refused with nothing sent."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from concurrent.futures import Future
from pathlib import Path

import pytest
import ray

import raytopic as rt
from raytopic.core.statuses import PublishStatuses

from tests.loss_checker import LossChecker, publish_outcome
from tests.topic_helpers import TIMEOUT, key_for, kill_channel, module_topic, serving_again

KEYS = [f"key-{i}" for i in range(12)]

NOT_YET = 0.3

# The bad-input cases share one topic (each topic starts an actor per channel and a
# coordinator): each checks that no channel holds an element after its call, so the
# first case that sent something fails, and every case after it.
untouched_topic = module_topic(channels=2)
"""Seconds a test gives a held batch to (wrongly) go in before it frees room."""


def _read(topic: rt.Topic, count: int) -> list[rt.Element]:
    got: list[rt.Element] = []
    with topic.subscriber(start="earliest") as subscriber:
        while len(got) < count:
            got.extend(ray.get(subscriber.receive_batch(1000), timeout=TIMEOUT))
    return got


def test_statuses_come_in_input_order_with_the_keys_kept(make_topic) -> None:
    topic = make_topic(channels=3)
    keys = [None if i % 5 == 0 else KEYS[i % len(KEYS)] for i in range(300)]
    with topic.publisher() as publisher:
        future = publisher.publish_batch(list(range(300)), keys=keys, ref=False)
        assert isinstance(future, Future)
        statuses = future.result(timeout=TIMEOUT)
    assert isinstance(statuses, PublishStatuses) and len(statuses) == 300
    where = {(e.channel, e.position.sequence): e for e in _read(topic, 300)}
    for index, status in enumerate(statuses):
        element = where[(status.channel, status.position.sequence)]
        assert (element.value, element.key) == (index, keys[index])
        assert element.timestamp == status.timestamp


def test_per_key_order_holds_across_publish_and_both_batch_forms_under_coalescing(
    make_topic,
) -> None:
    topic = make_topic(channels=4)
    published: dict[str, list[int]] = defaultdict(list)
    results: list[tuple[list[str], Future | ray.ObjectRef]] = []
    number = 0
    # max_in_flight=1: while one call is out, everything else queues and coalesces.
    with topic.publisher(max_in_flight=1, batch_size=500) as publisher:
        for round_ in range(40):
            keys = [KEYS[(round_ + i) % len(KEYS)] for i in range(50)]
            values = list(range(number, number + 50))
            number += 50
            if round_ % 4 == 3:  # a ref batch between queued ones: it goes after them
                results.append((keys, publisher.publish_batch(values, keys=keys)))
            else:
                results.append((keys, publisher.publish_batch(values, keys=keys, ref=False)))
            for key, value in zip(keys, values, strict=True):
                published[key].append(value)
            for key in KEYS[:3]:  # publish()ed values between the batches
                results.append(([key], publisher.publish(number, key=key)))
                published[key].append(number)
                number += 1
        places: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for keys, result in results:
            if isinstance(result, ray.ObjectRef):
                statuses = ray.get(result, timeout=TIMEOUT)
            elif len(keys) == 1:
                statuses = [result.result(timeout=TIMEOUT)]
            else:
                statuses = result.result(timeout=TIMEOUT)
            for key, status in zip(keys, statuses, strict=True):
                places[key].append((status.channel, status.position.sequence))
    for key, where in places.items():
        assert len({channel for channel, _ in where}) == 1, key  # one channel per key
        sequences = [sequence for _, sequence in where]
        assert sequences == sorted(sequences), key  # positions in publish order
    received: dict[str, list[int]] = defaultdict(list)
    for element in _read(topic, number):
        received[element.key].append(element.value)
    assert dict(received) == dict(published)


def test_fail_refuses_the_full_channels_part_whole_and_the_others_go_in(make_topic) -> None:
    topic = make_topic(channels=2, capacity=3, overflow="fail")
    key_0, key_1 = key_for(0, 2), key_for(1, 2)
    with topic.publisher(max_in_flight=1) as publisher:
        publisher.publish("first", key=key_0).result(timeout=TIMEOUT)
        fits = publisher.publish_batch(["a0", "b1"], keys=[key_0, key_1], ref=False)
        # Queued behind the same calls: channel 0 has room for 1 of these 2.
        refused = publisher.publish_batch(["x0", "y0", "z1"], keys=[key_0, key_0, key_1], ref=False)
        after = publisher.publish_batch(["w0"], keys=[key_0], ref=False)
        assert [s.channel for s in fits.result(timeout=TIMEOUT)] == [0, 1]
        with pytest.raises(rt.TopicFullError, match=r"channel 0 .*none of them appended"):
            refused.result(timeout=TIMEOUT)
        assert after.result(timeout=TIMEOUT)[0].position.sequence == 2  # what fits still goes
    by_channel = defaultdict(list)
    for element in _read(topic, 5):
        by_channel[element.channel].append(element.value)
    assert dict(by_channel) == {0: ["first", "a0", "w0"], 1: ["b1", "z1"]}


def test_block_holds_a_part_whole_until_there_is_room(make_topic) -> None:
    topic = make_topic(channels=1, capacity=4, groups=["g"])
    member = topic.subscriber(group="g")
    with topic.publisher(block_timeout=TIMEOUT) as publisher:
        assert len(publisher.publish_batch([1, 2, 3], ref=False).result(timeout=TIMEOUT)) == 3
        held = publisher.publish_batch([4, 5, 6], ref=False)  # room for 1: all of it waits
        time.sleep(NOT_YET)
        assert not held.done() and topic.ringbuffer(0).tail_sequence() == 2
        batch = ray.get(member.receive_batch(3), timeout=TIMEOUT)
        batch[-1].commit()  # frees the room
        statuses = held.result(timeout=TIMEOUT)
    assert [s.position.sequence for s in statuses] == [3, 4, 5]
    assert len({s.timestamp for s in statuses}) == 1  # in whole: one stamp
    member.close()


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda p: p.publish_batch([1, None], ref=False), rt.InvalidTypeError),
        (lambda p: p.publish_batch([1, threading.Lock()], ref=False), rt.InvalidTypeError),
        (lambda p: p.publish_batch([1, 2], keys=["a"], ref=False), rt.InvalidArgumentError),
        (lambda p: p.publish_batch([1], keys=[1.5], ref=False), rt.InvalidTypeError),
        (lambda p: p.publish_batch("abc", ref=False), rt.InvalidTypeError),
        (lambda p: p.publish_batch([1], ref="no"), rt.InvalidTypeError),
    ],
)
def test_bad_input_is_refused_at_the_call_and_sends_nothing(untouched_topic, call, error) -> None:
    topic = untouched_topic
    with topic.publisher() as publisher:
        with pytest.raises(error):
            call(publisher)
        publisher.flush(timeout=TIMEOUT)
    assert [topic.ringbuffer(c).tail_sequence() for c in range(2)] == [-1, -1]


@pytest.mark.slow
def test_a_channel_killed_with_queued_batches_in_flight_loses_nothing_acknowledged(
    make_topic, tmp_path: Path, wait_until
) -> None:
    topic = make_topic(channels=2, store=str(tmp_path))
    checker = LossChecker()
    stop = threading.Event()
    published = [0]

    def publish() -> None:
        with topic.publisher(max_in_flight=2) as publisher:
            pending: list[tuple[list[str], Future]] = []
            while not stop.is_set():
                values = [f"v{published[0] + i}" for i in range(40)]
                published[0] += 40
                pending.append((values, publisher.publish_batch(values, ref=False)))
                if len(pending) > 8:
                    _settle(*pending.pop(0), checker)
            for values, future in pending:
                _settle(values, future, checker)

    thread = threading.Thread(target=publish)
    thread.start()
    try:
        for kill in range(2):
            floor = published[0] + 2_000
            wait_until(lambda floor=floor: published[0] >= floor, timeout=60, interval=0.02)
            old_epoch = kill_channel(topic, kill % 2)
            serving_again(topic, kill % 2, old_epoch, TIMEOUT)
        floor = published[0] + 1_000
        wait_until(lambda: published[0] >= floor, timeout=60, interval=0.02)
    finally:
        stop.set()
        thread.join(timeout=180)
    total = sum(t + 1 for t in (topic.ringbuffer(c).tail_sequence() for c in range(2)))
    for element in _read(topic, total):
        checker.delivered("reader", element.channel, element.position.sequence, element.value)
    report = checker.report(expect_all=True)
    print(report)
    assert report.acknowledged > 2_000, report
    report.assert_safe()
    assert report.unexpected == 0, report


def _settle(values: list[str], future: Future, checker: LossChecker) -> None:
    try:
        future.result(timeout=120)
        error = None
    except Exception as failure:
        error = failure
        print("publish_batch failed:", type(failure).__name__, failure)
    for value in values:
        checker.published(value, publish_outcome(error))
