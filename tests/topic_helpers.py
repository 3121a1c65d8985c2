"""Helpers the Ray tests share: publish and wait for the statuses, receive with a
timeout. Imported as ``tests.topic_helpers``: test modules (and the functions
they hand to channel actors) import from the repository root, which Ray workers
also have on their path."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray

import raytopic as rt
from raytopic.client.routing import channel_for_key

TIMEOUT = 30.0
"""Seconds any single wait in a test may take before it counts as hung."""


def module_topic(**create_topic_kwargs: Any) -> Any:
    """A module-scoped fixture: one topic made with ``create_topic_kwargs`` for the
    module's tests that may share it (each topic starts an actor per channel and a
    coordinator), destroyed when the module's tests are done."""
    import pytest  # here: Ray workers import this module too, and need no pytest

    @pytest.fixture(scope="module")
    def topic(ray_session: None) -> Iterator[rt.Topic]:
        made = rt.create_topic(f"topic-{uuid.uuid4().hex[:8]}", **create_topic_kwargs)
        yield made
        made.destroy()

    return topic


def next_sequences(topic: rt.Topic) -> dict[int, int]:
    """Per channel, the sequence its next published element gets: where a test on a
    shared topic starts counting (positions relative to it read as on a fresh topic)."""
    return {stats.channel: stats.tail + 1 for stats in topic.describe().channels}


def get(ref: Any) -> Any:
    """``ray.get`` that fails the test instead of hanging it."""
    return ray.get(ref, timeout=TIMEOUT)


def publish_all(topic: rt.Topic, values: list[Any], key: Any = None) -> list[rt.PublishStatus]:
    """Publish ``values`` through a new publisher; return their statuses once acknowledged."""
    with topic.publisher() as publisher:
        futures = [publisher.publish(value, key=key) for value in values]
    return [future.result(timeout=TIMEOUT) for future in futures]


def receive_each(subscriber: rt.Subscriber, count: int) -> list[rt.Element]:
    """Exactly ``count`` receives, each of which must bring an element."""
    elements = [get(subscriber.receive()) for _ in range(count)]
    assert None not in elements
    return elements


def receive_until_empty(subscriber: rt.Subscriber) -> list[rt.Element]:
    """Everything up to the first empty receive (needs complete_on_empty)."""
    elements = []
    while (element := get(subscriber.receive())) is not None:
        elements.append(element)
    return elements


def drain_group(topic: rt.Topic, group: str, count: int) -> list[rt.Element]:
    """Up to ``count`` elements received by a new member of ``group`` (it leaves after)."""
    got: list[rt.Element] = []
    with topic.subscriber(group=group, complete_on_empty=True) as subscriber:
        while len(got) < count:
            batch = get(subscriber.receive_batch(1000))
            if not batch:
                break
            got.extend(batch)
    return got


def key_for(channel: int, channels: int) -> str:
    """A key that routes to ``channel`` of a topic with ``channels`` channels."""
    return next(f"k{i}" for i in range(1000) if channel_for_key(f"k{i}", channels) == channel)


def stop_every_actor(topic: rt.Topic) -> None:
    """What a whole-cluster restart does to a topic: every actor of it gone for good
    (killed, not restarted), its store left as it is. ``create_topic(name,
    store=...)`` with its settings reopens it."""
    from raytopic.coordinator.launch import actor_names, wait_released

    for actor in (*topic._channel_actors, topic._coordinator):
        ray.kill(actor, no_restart=True)
    for name in actor_names(topic.name, topic.channel_count):
        wait_released(name, topic.namespace)


def damage_a_middle_record(topic: rt.Topic, store: str) -> tuple[int, int]:
    """Publish 0..99 to channel 0 of a 1-channel ``topic`` stored under ``store`` in
    ten records, flip one byte in the middle of its segment file, SIGKILL the
    channel and wait until it serves again from the damaged file. Returns the
    damaged range it reports."""
    import os
    import signal
    import time
    from pathlib import Path

    assert topic.channel_count == 1
    with topic.publisher() as publisher:
        for first in range(0, 100, 10):  # ten flushes: ten records of ten values
            for value in range(first, first + 10):
                publisher.publish(value)
            publisher.flush()
    segment = sorted((Path(store) / topic.namespace / topic.name / "0").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0x01  # one byte in the middle of the segment
    segment.write_bytes(bytes(data))
    before = topic.describe().channels[0]
    os.kill(before.pid, signal.SIGKILL)  # it reopens the damaged file
    deadline = time.monotonic() + TIMEOUT
    while True:
        stats = topic.describe().channels[0]
        if stats.state == "serving" and stats.epoch > before.epoch:
            break
        assert time.monotonic() < deadline, stats
        time.sleep(0.1)
    assert len(stats.damaged) == 1, stats
    return stats.damaged[0]


def read_values(topic: rt.Topic, since: dict[int, int] | None = None) -> list[Any]:
    """Every value a new anonymous subscriber reads from the earliest on; with
    ``since`` (``next_sequences`` when a test on a shared topic began), only those
    from there on: what the test's own reads of a fresh topic would be."""
    with topic.subscriber(start="earliest", complete_on_empty=True) as reader:
        return [
            element.value
            for element in receive_until_empty(reader)
            if since is None or element.sequence >= since[element.channel]
        ]


def group_at_latest(topic: rt.Topic, group: str | rt.SharedGroup, **options: Any) -> None:
    """Create ``group`` at ``topic``'s latest position, by a member that joins and
    leaves (``options``: the subscriber's, e.g. ``mode="shared"``): it gets only what
    is published from now on. ``create_group`` starts a new group at the head, where a
    shared topic holds other tests' elements."""
    topic.subscriber(group=group, start="latest", **options).close()


def receive_exactly(member: rt.Subscriber, count: int) -> rt.ElementBatch:
    """``count`` elements received by ``member`` (fails after 30 s without them)."""
    import time

    got = rt.ElementBatch()
    deadline = time.monotonic() + 30
    while len(got) < count:
        assert time.monotonic() < deadline, f"{len(got)} of {count} received"
        got.extend(get(member.receive_batch(count - len(got))))
    return got


def source_and_sink(
    make_topic: Any, group: str, values: list[Any], **options: Any
) -> tuple[rt.Topic, rt.Topic]:
    """A 1-channel source topic holding ``values`` with ``group``, and a 1-channel sink;
    ``options`` (a ``store`` per topic: ``source_store``, ``sink_store``)."""
    source = make_topic(channels=1, **_store(options.get("source_store")))
    sink = make_topic(channels=1, **_store(options.get("sink_store")))
    source.create_group(group)
    publish_all(source, values)
    return source, sink


def _store(path: Any) -> dict[str, str]:
    return {} if path is None else {"store": str(path)}


def slow_filter(marker: str, seconds: float) -> Any:
    """A read filter that touches the file ``marker`` and then holds the channel actor's
    event loop for ``seconds``: a channel busy for a known while (read it with
    ``ringbuffer(c).read_many_async(0, 1, 1, slow_filter(...))``)."""

    def block(value: Any) -> bool:
        Path(marker).touch()
        time.sleep(seconds)
        return True

    return block


# -- faults ---------------------------------------------------------------------------


def kill_channel(topic: rt.Topic, channel: int) -> int:
    """SIGKILL a channel's process; return the epoch it had."""
    stats = topic.describe().channels[channel]
    os.kill(stats.pid, signal.SIGKILL)
    return stats.epoch


def serving_again(topic: rt.Topic, channel: int, old_epoch: int, bound: float) -> float:
    """Seconds until the channel answers under a newer epoch; fails the test after
    ``bound`` seconds."""
    started = time.monotonic()
    while True:
        stats = topic.describe().channels[channel]
        if stats.state == "serving" and stats.epoch > old_epoch:
            return time.monotonic() - started
        assert time.monotonic() - started < bound, f"channel {channel}: {stats}"
        time.sleep(0.1)


def blocked_topic(make_topic: Any, tmp_path: Path) -> rt.Topic:
    """One channel of 50, overflow "block", a store, group "g" trimming what it commits."""
    return make_topic(
        channels=1,
        capacity=50,
        overflow="block",
        groups=["g"],
        retain=False,
        store=str(tmp_path / "store"),
    )


@contextlib.contextmanager
def draining_member(topic: rt.Topic, pause: float) -> Iterator[dict[int, Any]]:
    """A member of "g" takes 10 values every ``pause`` s (into the dict given, position ->
    value: a value delivered again after a restart counts once) and commits them,
    freeing their room; at the end of the block (unless it raised) until the lag is 0."""
    received: dict[int, Any] = {}
    stop = threading.Event()

    def drain() -> None:
        with topic.subscriber(group="g", complete_on_empty=True) as member:
            while not stop.is_set():
                batch = ray.get(member.receive_batch(10), timeout=60)
                received.update((e.sequence, e.value) for e in batch)
                if batch:
                    batch.commit()
                time.sleep(pause)

    consumer = threading.Thread(target=drain)
    consumer.start()
    try:
        yield received
        deadline = time.monotonic() + 60
        while topic.describe().groups["g"].lag and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop.set()
        consumer.join(60)


def kill_coordinator(topic: rt.Topic) -> None:
    """SIGKILL the topic's coordinator's process."""
    os.kill(get(topic._coordinator.__ray_call__.remote(lambda _: os.getpid())), signal.SIGKILL)
