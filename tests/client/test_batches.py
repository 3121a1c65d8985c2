"""Batches as the unit: ``iter_batches`` under every reader kind and with faults,
``ElementBatch`` settling a whole batch in one call, values as published."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
import ray

import raytopic as rt

from tests.topic_helpers import get, group_at_latest, module_topic, next_sequences, publish_all

COMMITTED = rt.CommitStatus.COMMITTED


# Topics for tests that read only what they themselves publish (a subscriber, or a
# group of the test's own, started at the latest position before they publish;
# sequences counted from next_sequences), or that only make refused calls: shared to
# save actors. The test that kills a channel keeps a topic (and a store) of its own.
shared_one = module_topic(channels=1)
shared_three = module_topic(channels=3)


def _publish_batch(topic: rt.Topic, values: list[Any]) -> None:
    with topic.publisher() as publisher:
        get(publisher.publish_batch(values))


def _drain(subscriber: rt.Subscriber, max_elements: int) -> list[rt.ElementBatch]:
    """Every batch until the iteration ends (the subscriber completes on empty)."""
    return list(subscriber.iter_batches(max_elements))


def _by_channel(batches: list[rt.ElementBatch]) -> dict[int, list[Any]]:
    values: dict[int, list[Any]] = {}
    for batch in batches:
        for element in batch:
            values.setdefault(element.channel, []).append(element.sequence)
    return values


def _even(value: dict[str, int]) -> bool:
    return value["id"] % 2 == 0


def _ids_only(value: dict[str, int]) -> int:
    return value["id"]


def test_an_anonymous_reader_drains_every_channel_in_batches_in_order(shared_three):
    topic = shared_three  # shared: it reads only what it publishes, counts from base
    base = next_sequences(topic)
    with topic.subscriber(start="latest", complete_on_empty=True) as subscriber:
        _publish_batch(topic, [{"id": i} for i in range(3000)])  # round robin: 1000 each
        batches = _drain(subscriber, 400)
    assert batches and all(isinstance(batch, rt.ElementBatch) for batch in batches)
    assert all(0 < len(batch) <= 400 for batch in batches)
    assert sorted(v["id"] for batch in batches for v in batch.values) == list(range(3000))
    # Every channel's elements in position order, none twice.
    assert _by_channel(batches) == {c: list(range(base[c], base[c] + 1000)) for c in range(3)}


def test_a_group_member_commits_a_batch_in_one_call_and_the_next_resumes_after(
    shared_three, unique_name
):
    topic, g = shared_three, unique_name("g")  # shared: a group of its own, made at latest
    group_at_latest(topic, g)
    _publish_batch(topic, [{"id": i} for i in range(600)])
    with topic.subscriber(group=g, complete_on_empty=True) as member:
        batch = next(member.iter_batches(250))
        assert 0 < len(batch) <= 250
        results = batch.commit()
        assert set(results) == {batch[0].channel}
        assert [result.status for result in results.values()] == [COMMITTED]
        assert results[batch[0].channel].position == batch[-1].position
    with topic.subscriber(group=g, complete_on_empty=True) as member:
        rest = _drain(member, 1000)
    received = [element.value["id"] for element in batch] + [
        value["id"] for later in rest for value in later.values
    ]
    assert sorted(received) == list(range(600))  # the committed batch is not read again


def test_a_shared_member_acks_a_batch_in_one_call(shared_three, unique_name):
    topic, s = shared_three, unique_name("s")  # shared: a group of its own, made at latest
    group_at_latest(topic, rt.SharedGroup(s))
    publish_all(topic, list(range(40)))
    with topic.subscriber(group=rt.SharedGroup(s), complete_on_empty=True) as member:
        batches = _drain(member, 15)
        assert sum(map(len, batches)) == 40
        assert all(len(batch) <= 15 for batch in batches)
        for batch in batches:
            assert batch.ack() == [rt.AckStatus.ACKED] * len(batch)
        with pytest.raises(rt.GroupModeError):
            batches[0].commit()
    with topic.subscriber(group=rt.SharedGroup(s), complete_on_empty=True) as member:
        assert _drain(member, 15) == []  # every element done for the group


def _called_actor(ref: ray.ObjectRef) -> str:
    """The id of the actor whose call made ``ref`` ('' for a task's: Ray's nil id)."""
    actor = ref.task_id().actor_id()
    return "" if actor.is_nil() else actor.hex()


def test_a_batch_over_many_channels_is_one_call_per_channel_and_no_task(shared_three, unique_name):
    topic, s = shared_three, unique_name("s")
    channels = {actor._actor_id.hex() for actor in topic._channel_actors}
    group_at_latest(topic, rt.SharedGroup(s))
    with topic.publisher() as publisher:
        ref = publisher.publish_batch(list(range(30)))  # round robin: every channel
        assert _called_actor(ref) in channels  # a channel's call joins the others'
        statuses = get(ref)
    assert [status.channel for status in statuses] == [n % 3 for n in range(30)]
    with topic.subscriber(group=rt.SharedGroup(s), complete_on_empty=True) as member:
        elements = rt.ElementBatch(e for batch in _drain(member, 100) for e in batch)
        assert len({e.channel for e in elements}) == 3
        acked = elements._send("Ack")  # what batch.ack() waits for
        assert _called_actor(acked) in channels
        assert get(acked) == [rt.AckStatus.ACKED] * 30


def test_the_channels_take_turns_joining_a_publishers_batches(shared_three):
    topic = shared_three
    with topic.publisher() as publisher:
        refs = [publisher.publish_batch(list(range(30))) for _ in range(6)]
        leads = [_called_actor(ref) for ref in refs]
        statuses = [get(ref) for ref in refs]
    # The lead awaits every other part's reply: one channel always leading did
    # that work for all of a publisher's batches.
    assert leads[:3] == leads[3:]
    assert len(set(leads)) == 3
    for batch in statuses:
        assert [status.channel for status in batch] == [n % 3 for n in range(30)]


def test_a_shared_member_nacks_a_batch_and_gets_it_again(shared_one, unique_name):
    topic, s = shared_one, unique_name("s")  # shared: a group of its own, made at latest
    group_at_latest(topic, rt.SharedGroup(s))
    publish_all(topic, list(range(5)))
    with topic.subscriber(group=rt.SharedGroup(s), complete_on_empty=True) as member:
        first = next(member.iter_batches(10))
        assert first.nack() == [rt.AckStatus.NACKED] * 5
        again = next(member.iter_batches(10))
        assert again.values == first.values
        assert [element.delivery_count for element in again] == [2] * 5
        again.ack()


def test_a_window_bounds_what_batches_hold_uncommitted(shared_one, unique_name):
    topic, g = shared_one, unique_name("g")  # shared: a group of its own, made at latest
    group_at_latest(topic, g)
    publish_all(topic, list(range(20)))
    with topic.subscriber(group=g, window=6) as member:
        batches = member.iter_batches(100)
        held: list[rt.Element] = []
        while len(held) < 6:
            held += next(batches)
        assert [element.value for element in held] == list(range(6))  # the window is full
        assert topic.describe().groups[g].unacked == 6
        assert held[-1].commit().status is COMMITTED
        more: list[rt.Element] = []
        while len(more) < 6:
            more += next(batches)
        assert [element.value for element in more] == list(range(6, 12))


def test_a_filter_and_a_converter_run_over_batches(shared_three):
    topic = shared_three  # shared: it reads only what it publishes, from the latest position
    with topic.subscriber(
        start="latest", complete_on_empty=True, filter=_even, converter=_ids_only
    ) as subscriber:
        _publish_batch(topic, [{"id": i} for i in range(200)])
        values = [value for batch in _drain(subscriber, 30) for value in batch.values]
    assert sorted(values) == list(range(0, 200, 2))


def test_values_are_received_as_published_each_its_own_object(shared_one):
    topic = shared_one  # shared: it reads only what it publishes, from the latest position
    subscriber = topic.subscriber(start="latest", complete_on_empty=True)
    shared = {"n": 1}
    values = [{"id": 0, "tags": ["a"]}, {"id": 1, "tags": ["b"]}, shared, shared]
    with topic.publisher() as publisher:
        ref = publisher.publish_batch(values)
        values[0]["tags"].append("changed")
        values[1]["id"] = 99
        shared["n"] = 2
        get(ref)
    with subscriber:
        received = [value for batch in _drain(subscriber, 10) for value in batch.values]
    assert received == [{"id": 0, "tags": ["a"]}, {"id": 1, "tags": ["b"]}, {"n": 1}, {"n": 1}]
    assert received[2] is not received[3]


def test_an_unpicklable_value_fails_publish_batch_and_sends_nothing(shared_three):
    import threading

    topic = shared_three  # shared: it checks only that no channel's tail moves
    base = next_sequences(topic)
    with (
        topic.publisher() as publisher,
        pytest.raises(rt.InvalidTypeError, match="cannot be pickled"),
    ):
        publisher.publish_batch([{"id": 1}, {"lock": threading.Lock()}, {"id": 2}])
    assert next_sequences(topic) == base  # nothing appended to any channel


@pytest.mark.parametrize(
    ("max_elements", "error"),
    [(0, rt.InvalidArgumentError), (-3, rt.InvalidArgumentError), ("5", rt.InvalidTypeError)],
)
def test_bad_max_elements_is_refused_at_the_call(shared_three, max_elements, error):
    topic = shared_three  # shared: the calls are refused before anything is read
    with topic.subscriber() as subscriber:
        with pytest.raises(error, match="max_elements"):
            subscriber.iter_batches(max_elements)
        with pytest.raises(rt.InvalidTypeError):
            subscriber.iter_batches(2.5)


def test_elements_an_abandoned_batch_iteration_prefetched_come_first(shared_one):
    topic = shared_one  # shared: it reads only what it publishes, from the latest position
    with topic.subscriber(start="latest", complete_on_empty=True) as subscriber:
        publish_all(topic, list(range(50)))
        first = next(subscriber.iter_batches(10))
        assert first.values == list(range(10))
        rest = get(subscriber.receive_batch(100))
        assert isinstance(rest, rt.ElementBatch)
        assert rest.values == list(range(10, 50))


def test_closing_the_subscriber_ends_its_batch_iteration(shared_three):
    topic = shared_three  # shared: a latest-start subscriber of it has nothing to read
    subscriber = topic.subscriber()
    batches = subscriber.iter_batches(10)
    subscriber.close()
    assert list(batches) == []


@ray.remote(num_cpus=0)
def _commit_in_a_task(batch: rt.ElementBatch) -> list[str]:
    return [result.status.value for result in batch.commit().values()]


def test_a_batch_pickles_and_commits_from_a_task(shared_one, unique_name):
    topic, g = shared_one, unique_name("g")  # shared: a group of its own, counts from base
    (base,) = next_sequences(topic).values()
    group_at_latest(topic, g)
    publish_all(topic, list(range(5)))
    with topic.subscriber(group=g, complete_on_empty=True) as member:
        batch = next(member.iter_batches(10))
        assert get(_commit_in_a_task.remote(batch)) == ["committed"]
        assert member.last_committed() == {0: topic.position(0, base + 4)}


@pytest.mark.slow
def test_a_channel_restarted_mid_iteration_loses_nothing_stored(make_topic, tmp_path):
    topic = make_topic(channels=1, store=str(tmp_path))
    _publish_batch(topic, [{"id": i} for i in range(300)])
    with topic.subscriber(group="g", complete_on_empty=True) as member:
        batches = member.iter_batches(100)
        first = next(batches)
        first.commit()
        os.kill(topic.describe().channels[0].pid, signal.SIGKILL)
        _publish_batch(topic, [{"id": i} for i in range(300, 400)])  # waits for the restart
        rest = [value["id"] for batch in batches for value in batch.values]
    ids = [value["id"] for value in first.values] + rest
    assert sorted(set(ids)) == list(range(400))  # nothing lost; a re-read is at least once


def test_an_iterations_commit_carries_its_next_receive_and_loses_nothing(shared_one, unique_name):
    topic, g = shared_one, unique_name("g")  # shared: a group of its own, counts from base
    (base,) = next_sequences(topic).values()
    group_at_latest(topic, g)
    _publish_batch(topic, [{"id": i} for i in range(1000)])
    ids: list[int] = []
    with topic.subscriber(group=g, complete_on_empty=True) as member:
        batches = member.iter_batches(100)
        first = next(batches)
        reads = member._receives._reads[0]
        sent = reads.next_number  # the receives the iteration keeps in flight
        assert first.commit() == {0: rt.CommitResult(0, first[-1].position, COMMITTED)}
        assert reads.next_number == sent + 1  # the commit carried the next one
        for batch in [first, *batches]:
            if batch is not first:
                assert set(batch.commit().values()) == {
                    rt.CommitResult(0, batch[-1].position, COMMITTED)
                }
            ids += [value["id"] for value in batch.values]
        assert member.last_committed() == {0: topic.position(0, base + 999)}
    assert ids == list(range(1000))  # in order, once
    with topic.subscriber(group=g, complete_on_empty=True) as member:
        assert _drain(member, 100) == []  # every commit counted


@pytest.mark.slow
def test_a_channel_killed_before_carried_commits_loses_nothing_and_undoes_no_commit(
    make_topic, tmp_path
):
    # Each kill lands before a batch's commit, which carries the iteration's next
    # receive (a received batch is handed out whole): the call waits for the restart,
    # the commit is applied there, and the receive reads on after it. What was read
    # past a commit before a kill may come again (at least once); no commit moves back.
    topic = make_topic(channels=1, store=str(tmp_path))
    _publish_batch(topic, [{"id": i} for i in range(24_000)])
    handed: list[int] = []
    with topic.subscriber(group="g", complete_on_empty=True) as member:
        committed = -1
        for number, batch in enumerate(member.iter_batches(4000)):  # a receive's share
            handed += [value["id"] for value in batch.values]
            reads = member._receives._reads[0]
            sent = reads.next_number
            killed = number in (1, 3)
            if killed:
                os.kill(topic.describe().channels[0].pid, signal.SIGKILL)
            (result,) = batch.commit().values()
            if result.status is COMMITTED:  # else ALREADY_COMMITTED: a batch read again
                assert result.position.sequence > committed  # no commit moves back
                committed = result.position.sequence
            else:
                assert result.status is rt.CommitStatus.ALREADY_COMMITTED
                assert result.position.sequence <= committed
            assert reads.next_number == sent + 1 or not killed  # it carried the next receive
        assert member.last_committed() == {0: topic.position(0, 23_999)}
    assert sorted(set(handed)) == list(range(24_000))  # nothing lost
    with topic.subscriber(group="g", complete_on_empty=True) as member:
        assert _drain(member, 100) == []  # every commit kept


@ray.remote(num_cpus=0, max_restarts=0)
class _BatchMember:
    """A group member in its own process, holding a batch it never commits."""

    def __init__(self, topic: rt.Topic, group: str) -> None:
        self._member = topic.subscriber(group=group, timeout=2.0)

    def take_one_batch(self) -> tuple[int, list[int]]:
        batch = next(self._member.iter_batches(50))
        return os.getpid(), [element.value for element in batch]


@pytest.mark.slow
def test_a_member_killed_holding_a_batch_has_it_redelivered(shared_one, unique_name, wait_until):
    # Shared: a group of its own, made at latest; the process killed is its member's,
    # not the topic's.
    topic, g = shared_one, unique_name("g")
    group_at_latest(topic, g)
    publish_all(topic, list(range(120)))
    victim = _BatchMember.remote(topic, g)
    pid, held = get(victim.take_one_batch.remote())
    assert held == list(range(50))
    os.kill(pid, signal.SIGKILL)
    with topic.subscriber(group=g, complete_on_empty=True, timeout=5.0) as survivor:
        wait_until(lambda: survivor.heartbeat() or survivor.channels == (0,), timeout=10)
        received = [value for batch in _drain(survivor, 50) for value in batch.values]
    assert received == list(range(120))  # the uncommitted batch again, then the rest
