"""Handles of a destroyed topic: every call raises TopicNotFoundError, never Ray's
ActorDiedError, whether the handle raises it itself or a ref it gave resolves to it
(issue 37, item 4).

ONE topic is made and destroyed for the module, with a handle of every kind made
before: a publisher, an anonymous subscriber, an owned group's member, a shared
group's member, a ring buffer, elements to commit and acknowledge, and refs still
waiting at the channels when the destroy came. A worker actor holds copies of the
handles in another process, which learns of the destroy from Ray alone.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pytest
import ray

import raytopic as rt
import raytopic.data

from tests.topic_helpers import TIMEOUT, get, publish_all, receive_exactly

pytestmark = pytest.mark.xdist_group("test_destroyed")  # one worker: one topic


@dataclass
class Gone:
    """The destroyed topic's handles, and what was in flight when it went."""

    topic: rt.Topic
    publisher: rt.Publisher
    anonymous: rt.Subscriber
    member: rt.Subscriber
    shared: rt.Subscriber
    ring: rt.Ringbuffer
    owned_element: rt.Element
    shared_element: rt.Element
    in_flight: dict[str, Any]
    """Refs and futures obtained before the destroy, resolved after it."""
    to_close: list[Any]
    """Handles made before the destroy for the test that closes them."""
    worker: Any
    """An actor holding copies of the handles (another process)."""


@ray.remote(num_cpus=0)
class _Holder:
    """Copies of a topic's handles in a process of their own, each used before the
    destroy (so Ray there knows the actors), then called after it."""

    def __init__(self, publisher: Any, anonymous: Any, member: Any, ring: Any) -> None:
        self.publisher, self.anonymous, self.member, self.ring = publisher, anonymous, member, ring

    def use(self) -> None:
        ray.get(self.publisher.publish_batch(["worker"]))
        self.anonymous.heads()
        self.member.heads()
        self.ring.size()

    def outcomes(self) -> dict[str, tuple[str, bool, bool]]:
        """Per call: (the error's class name, whether it is a TopicNotFoundError, whether
        the handle raised it itself rather than a ref it returned)."""
        calls: dict[str, Callable[[], Any]] = {
            # First: it learns that the topic is gone from Ray's view of the channel
            # here; the calls after it also from what that taught this process.
            "receive": self.anonymous.receive,
            "receive_batch": lambda: self.member.receive_batch(10),
            "commit_async": lambda: self.member.commit_async(0, self.member.topic.position(0, 0)),
            "heads": self.member.heads,
            "publish_batch": lambda: self.publisher.publish_batch(["late"]),
            "publish": lambda: self.publisher.publish("late"),
            "ring.add_async": lambda: self.ring.add_async("late"),
            "ring.read_many_async": lambda: self.ring.read_many_async(0, 0, 1),
            "ring.size": self.ring.size,
        }
        return {name: _outcome(call) for name, call in calls.items()}


def _outcome(call: Callable[[], Any]) -> tuple[str, bool, bool]:
    try:
        result = call()
    except Exception as error:
        return type(error).__name__, isinstance(error, rt.TopicNotFoundError), True
    try:
        _resolve(result)
    except Exception as error:
        return type(error).__name__, isinstance(error, rt.TopicNotFoundError), False
    return "no error", False, False


def _resolve(result: Any) -> Any:
    """What a user does with what a call returned: ``ray.get`` a ref, wait on a future."""
    if isinstance(result, ray.ObjectRef):
        return ray.get(result, timeout=TIMEOUT)
    if isinstance(result, Future):
        return result.result(timeout=TIMEOUT)
    return result


def _topic_not_found(call: Callable[[], Any]) -> None:
    """``call`` (and what it returns, resolved) raises TopicNotFoundError: the plain
    class where the handle raises it, never a Ray actor error."""
    try:
        result = call()
    except Exception as error:
        assert type(error) is rt.TopicNotFoundError, repr(error)
        return
    with pytest.raises(rt.TopicNotFoundError) as raised:
        _resolve(result)
    assert not isinstance(raised.value, ray.exceptions.RayActorError), repr(raised.value)
    # Raised from a ref, it says one thing: its own message, not the actor's traceback.
    message = str(raised.value)
    assert "\n" not in message and "destroyed" in message, message


@pytest.fixture(scope="module")
def gone(ray_session: None) -> Iterator[Gone]:
    topic = rt.create_topic(
        f"gone-{uuid.uuid4().hex[:8]}",
        channels=2,
        capacity=100,
        groups=["g", rt.SharedGroup("sg")],
    )
    publish_all(topic, list(range(4)))
    publisher = topic.publisher()
    anonymous = topic.subscriber()  # from the latest: the worker's one value
    member = topic.subscriber(group="g")
    shared = topic.subscriber(group="sg", mode="shared")
    ring = topic.ringbuffer(0)
    worker = _Holder.remote(publisher, anonymous, member, ring)
    ray.get(worker.use.remote(), timeout=TIMEOUT)
    # Everything there is, received: the receives below wait at the channels.
    owned_element = receive_exactly(member, 5)[0]  # the 4 values and the worker's
    shared_element = receive_exactly(shared, 5)[0]
    # Settled once before: this process holds their channels' handles (elements name
    # their channel; a process looks its handle up once).
    owned_element.commit()
    shared_element.ack()
    assert get(anonymous.receive_batch(10)).values == ["worker"]
    to_close = [
        topic.subscriber(),
        topic.subscriber(group="g"),
        topic.subscriber(group="sg", mode="shared"),
        topic.publisher(),
    ]
    lingering = topic.publisher(linger=60.0)  # holds its value back until flushed
    in_flight = {
        "receive": anonymous.receive(),
        "member.receive_batch": member.receive_batch(10),
        "shared.receive": shared.receive(),
        "ring.read_many_async": ring.read_many_async(ring.tail_sequence() + 1, 1, 1),
        "publish future": lingering.publish("late"),
    }
    topic.destroy()
    lingering.flush(timeout=TIMEOUT)  # sends it to the dead channel
    yield Gone(
        topic,
        publisher,
        anonymous,
        member,
        shared,
        ring,
        owned_element,
        shared_element,
        in_flight,
        to_close,
        worker,
    )
    ray.kill(worker)
    for handle in (publisher, anonymous, member, shared, lingering):
        handle.close()


CALLS: dict[str, Callable[[Gone], Any]] = {
    # the topic
    "describe": lambda g: g.topic.describe(),
    "groups": lambda g: g.topic.groups(),
    "create_group": lambda g: g.topic.create_group("new"),
    "create_group(shared)": lambda g: g.topic.create_group(rt.SharedGroup("new-shared")),
    "reset_group": lambda g: g.topic.reset_group("g", "earliest"),
    "destroy_group": lambda g: g.topic.destroy_group("g"),
    "purge": lambda g: g.topic.purge(),
    "subscriber()": lambda g: g.topic.subscriber(),
    "subscriber(group)": lambda g: g.topic.subscriber(group="g"),
    "subscriber(shared)": lambda g: g.topic.subscriber(group="sg", mode="shared"),
    "publisher()": lambda g: g.topic.publisher(),
    "ringbuffer()": lambda g: g.topic.ringbuffer(0),
    "read_topic": lambda g: raytopic.data.read_topic(g.topic),
    # the publisher
    "publish": lambda g: g.publisher.publish("late"),
    "publish_batch": lambda g: g.publisher.publish_batch(["late", "later"]),
    "publish_batch(one channel)": lambda g: g.publisher.publish_batch(["late"]),
    # subscribers
    "receive": lambda g: g.anonymous.receive(),
    "receive_batch": lambda g: g.member.receive_batch(10),
    "shared.receive_batch": lambda g: g.shared.receive_batch(10),
    "iterate": lambda g: next(iter(g.anonymous)),
    "iter_batches": lambda g: next(g.member.iter_batches()),
    "heads": lambda g: g.member.heads(),
    "tails": lambda g: g.anonymous.tails(),
    "last_committed": lambda g: g.member.last_committed(),
    "remaining_messages": lambda g: g.anonymous.remaining_messages(),
    "seek": lambda g: g.anonymous.seek(0, g.topic.position(0, 0)),
    "seek_and_commit": lambda g: g.member.seek_and_commit(0, g.topic.position(0, 0)),
    "seek_to_head": lambda g: g.anonymous.seek_to_head(),
    "seek_to_tail": lambda g: g.member.seek_to_tail(0),
    "seek_to_tail_and_commit": lambda g: g.member.seek_to_tail_and_commit(),
    "commit": lambda g: g.member.commit(0, g.topic.position(0, 0)),
    "commit_async": lambda g: g.member.commit_async(0, g.topic.position(0, 0)),
    "heartbeat": lambda g: g.member.heartbeat(),
    "shared.heartbeat": lambda g: g.shared.heartbeat(),
    "ack": lambda g: g.shared.ack([g.shared_element]),
    "nack_async": lambda g: g.shared.nack_async([g.shared_element]),
    # elements
    "Element.commit": lambda g: g.owned_element.commit(),
    "Element.commit_async": lambda g: g.owned_element.commit_async(),
    "Element.ack_async": lambda g: g.shared_element.ack_async(),
    "ElementBatch.commit_async": lambda g: rt.ElementBatch([g.owned_element]).commit_async()[0],
    # the ring buffer
    "ring.size": lambda g: g.ring.size(),
    "ring.head_sequence": lambda g: g.ring.head_sequence(),
    "ring.add": lambda g: g.ring.add("late"),
    "ring.add_async": lambda g: g.ring.add_async("late"),
    "ring.add_all_async": lambda g: g.ring.add_all_async(["late"]),
    "ring.read_one": lambda g: g.ring.read_one(0),
    "ring.read_many_async": lambda g: g.ring.read_many_async(0, 0, 1),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_a_call_on_a_handle_of_a_destroyed_topic_raises_topic_not_found(
    gone: Gone, call: str
) -> None:
    _topic_not_found(lambda: CALLS[call](gone))


@pytest.mark.parametrize(
    "what",
    ["receive", "member.receive_batch", "shared.receive", "ring.read_many_async", "publish future"],
)
def test_what_was_in_flight_at_the_destroy_resolves_to_topic_not_found(
    gone: Gone, what: str
) -> None:
    _topic_not_found(lambda: gone.in_flight[what])


def test_a_transaction_cannot_stage_at_a_destroyed_topic(gone: Gone) -> None:
    with rt.transactions(f"tx-{uuid.uuid4().hex[:8]}") as holder:
        transaction = holder.begin()
        _topic_not_found(lambda: transaction.publish(gone.topic, "late"))
        transaction.abort()


def test_another_process_learns_of_the_destroy_from_ray(gone: Gone) -> None:
    # No Topic.destroy() ran there: its handles know from Ray's own view of the actors.
    outcomes = ray.get(gone.worker.outcomes.remote(), timeout=TIMEOUT)
    wrong = {name: kind for name, (kind, typed, _) in outcomes.items() if not typed}
    assert wrong == {}
    raised_there = {name: kind for name, (kind, _, itself) in outcomes.items() if itself}
    assert set(raised_there) == set(outcomes), outcomes  # not through a ref: the handle knew
    assert set(raised_there.values()) == {"TopicNotFoundError"}


def test_closing_handles_of_a_destroyed_topic_raises_and_logs_nothing(
    gone: Gone, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="raytopic"):
        for handle in gone.to_close:
            handle.close()
            handle.close()  # idempotent
    assert [record.getMessage() for record in caplog.records] == []


@pytest.mark.slow
def test_a_receive_at_a_channel_slow_to_hear_of_the_destroy_still_resolves_typed(
    ray_session: None,
) -> None:
    # A channel busy (here: stopped for 3 s) when the destroy's notice comes hears of it
    # late; the destroy waits for it rather than killing it with the receive unanswered
    # (then Ray's ActorDiedError). A run of the client tests at load ~25 met it.
    topic = rt.create_topic(f"slow-{uuid.uuid4().hex[:8]}", channels=1)
    subscriber = topic.subscriber()
    waiting = subscriber.receive()
    assert ray.wait([waiting], timeout=0.5)[0] == []  # at the channel, waiting for data
    pid = topic.describe().channels[0].pid
    os.kill(pid, signal.SIGSTOP)
    resumer = threading.Timer(3.0, os.kill, (pid, signal.SIGCONT))
    resumer.start()
    try:
        topic.destroy()
    finally:
        resumer.join()
        subscriber.close()
    _topic_not_found(lambda: waiting)
