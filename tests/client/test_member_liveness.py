"""What keeps a group member alive (issue 52 item 2, docs/guides/subscribe.md): its receives and
heartbeats, and also its ``extend_lease``, acks and nacks, wherever they are made
(the member's handle, or a task holding its elements). A member that only extends
its holds keeps them past its ``timeout``; one that goes quiet loses them, and its
later calls on them say so (``REJECTED``, never ``EXTENDED``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray

import raytopic as rt

from tests.topic_helpers import get, group_at_latest, module_topic, publish_all, receive_exactly

pytestmark = pytest.mark.slow  # each waits past a member's timeout

TIMEOUT = 1.5
WORK = 4 * TIMEOUT  # the slow member's work: well past its timeout (the case)
PAUSE = TIMEOUT / 6  # between a slow member's extensions
ACKS = 12  # an owned member's elements, acked WORK / ACKS (a third of its timeout) apart
EXTENDED, ACKED, REJECTED = rt.AckStatus.EXTENDED, rt.AckStatus.ACKED, rt.AckStatus.REJECTED

# The three tests of a shared group share a two-channel topic (a topic is an actor per
# channel and a coordinator): each its own group, made at the latest position before it
# publishes, so its members hold and take only its own 5 elements; each closes them.
shared_two = module_topic(channels=2)


def _slow_member(topic: rt.Topic, group: str) -> tuple[rt.Subscriber, rt.Subscriber, list]:
    """A shared member (timeout TIMEOUT) holding all 5 elements, and an eager second one
    (which joins first: a join takes longer than the slow member's timeout on a busy
    machine, and its timeout runs from its receive)."""
    eager = topic.subscriber(group=group, mode="shared", complete_on_empty=True)
    slow = topic.subscriber(group=group, mode="shared", timeout=TIMEOUT, complete_on_empty=True)
    publish_all(topic, list(range(5)))
    held = list(receive_exactly(slow, 5))
    return slow, eager, held


def _taken(eager: rt.Subscriber) -> list[tuple[Any, int]]:
    """What the eager member receives now (it never acks): (value, delivery count)."""
    batch = get(eager.receive_batch(5))
    return [] if batch is None else [(e.value, e.delivery_count) for e in batch]


def test_a_member_that_extends_its_holds_keeps_them(shared_two, unique_name):
    topic = shared_two
    group = unique_name("g")
    group_at_latest(topic, rt.SharedGroup(group))
    slow, eager, held = _slow_member(topic, group)
    statuses, taken = set(), []
    end = time.monotonic() + WORK
    while time.monotonic() < end:  # no receive, no heartbeat: only extensions
        statuses.update(slow.extend_lease(held, 20.0))
        taken += _taken(eager)
        time.sleep(PAUSE)
    assert taken == []  # before: all 5 went to the eager member at its timeout, count 2
    assert statuses == {EXTENDED}
    assert slow.ack(held) == [ACKED] * 5  # before: REJECTED
    assert topic.describe().groups[group].lag == 0
    slow.close()
    eager.close()


@ray.remote
class _Worker:
    """Works on elements handed to it. Made ready before the member receives: a worker
    process starting takes seconds on a busy machine, past the member's timeout."""

    def ready(self) -> bool:
        return True

    def extend_then_ack(self, elements: list[rt.Element], seconds: float) -> list[rt.AckStatus]:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for element in elements:
                assert element.extend_lease(20.0) is EXTENDED
            time.sleep(PAUSE)
        return [element.ack() for element in elements]

    def ack_slowly(self, elements: list[rt.Element], pause: float) -> list[rt.AckStatus]:
        statuses = []
        for element in elements:
            time.sleep(pause)
            statuses.append(element.ack())
        return statuses


@pytest.fixture(scope="module")
def worker(ray_session: None) -> Iterator[Any]:
    """One ready _Worker for the module's two tests that hand elements to an actor
    (each call is stateless; an actor is a process to start)."""
    made = _Worker.remote()
    get(made.ready.remote())
    yield made
    ray.kill(made)


def test_an_actor_that_extends_the_elements_it_was_given_keeps_their_member(
    shared_two, worker, unique_name
):
    topic = shared_two
    group = unique_name("g")
    group_at_latest(topic, rt.SharedGroup(group))
    slow, eager, held = _slow_member(topic, group)
    work = worker.extend_then_ack.remote(held, WORK)  # the member itself stays silent
    taken = []
    while not ray.wait([work], timeout=PAUSE)[0]:
        taken += _taken(eager)
    assert taken == []  # before: all 5, and the actor's extensions REJECTED
    assert get(work) == [ACKED] * 5
    slow.close()
    eager.close()


def test_an_owned_members_fanned_out_acks_keep_it_alive(make_topic, worker, unique_name):
    topic = make_topic(channels=1)
    group = unique_name("g")
    topic.create_group(group)
    member = topic.subscriber(group=group, timeout=TIMEOUT)
    publish_all(topic, list(range(ACKS)))
    elements = list(receive_exactly(member, ACKS))
    statuses = get(worker.ack_slowly.remote(elements, WORK / ACKS))
    assert statuses == [ACKED] * ACKS  # before: NOT_OWNER once the member timed out
    assert member.channels == (0,)
    assert topic.describe().groups[group].lag == 0


def test_a_member_that_lost_its_holds_is_told_so(shared_two, unique_name):
    topic = shared_two
    group = unique_name("g")
    group_at_latest(topic, rt.SharedGroup(group))
    slow, eager, held = _slow_member(topic, group)
    deadline = time.monotonic() + TIMEOUT + 10.0
    taken: list = []
    while len(taken) < 5 and time.monotonic() < deadline:  # silent: it times out, its holds go back
        taken += _taken(eager)
    assert sorted(taken) == [(value, 2) for value in range(5)]
    assert slow.extend_lease(held, 20.0) == [REJECTED] * 5
    assert slow.ack(held) == [REJECTED] * 5
    slow.close()
    eager.close()
