"""Subscriber groups against a real Ray: membership, sticky balanced assignment,
ownership listeners, and who gets which value (docs/guides/subscribe.md)."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from typing import Any

import pytest
import ray

import raytopic as rt
import raytopic.data
from raytopic.core.protocol import ReadTopicLag

from tests.topic_helpers import module_topic, next_sequences, publish_all, receive_each, slow_filter

# Topics the tests share to save actors, each test with groups of its own names: a
# group made at "latest" (or joined only before anything is published) sees only
# what its test publishes, and ownership, generations and listeners are per group.
# Six channels for the membership tests (three members split them evenly), two where
# a test needs members to share the channels, one where a single channel is the point.
six_channels = module_topic(channels=6)
two_channels = module_topic(channels=2)
one_channel = module_topic(channels=1)


def _get_none(ref: Any) -> bool:
    return ray.get(ref, timeout=10) is None


def _ownership(topic: rt.Topic, group: str) -> dict[int, str | None]:
    return topic.describe().groups[group].ownership


def _assert_partition(topic: rt.Topic, group: str, members: list[rt.Subscriber]) -> dict:
    """Every channel has exactly one owner among ``members``; counts differ by <= 1;
    the members' own view agrees with the coordinator's."""
    ownership = _ownership(topic, group)
    assert sorted(ownership) == list(range(topic.channel_count))
    by_member = {
        m.subscriber_id: tuple(sorted(c for c, o in ownership.items() if o == m.subscriber_id))
        for m in members
    }
    assert set(ownership.values()) <= set(by_member), ownership
    assert sum(len(cs) for cs in by_member.values()) == topic.channel_count
    counts = [len(cs) for cs in by_member.values()]
    assert max(counts) - min(counts) <= 1, by_member
    for member in members:
        assert member.channels == by_member[member.subscriber_id]
    described = {m.member_id: m.channels for m in topic.describe().groups[group].members}
    assert described == by_member
    return by_member


def test_join_leave_close_rebalance_is_balanced_and_sticky(six_channels, unique_name):
    topic, g = six_channels, unique_name("g")
    a = topic.subscriber(group=g)
    # Joining is synchronous: the assignment is in force when subscriber() returns.
    assert _ownership(topic, g) == dict.fromkeys(range(6), a.subscriber_id)
    assert a.channels == (0, 1, 2, 3, 4, 5)

    b = topic.subscriber(group=g)
    after_b = _assert_partition(topic, g, [a, b])
    assert len(after_b[a.subscriber_id]) == 3
    # Sticky: a kept three of its own channels, only three moved.
    assert set(after_b[a.subscriber_id]) < set(range(6))

    c = topic.subscriber(group=g)
    after_c = _assert_partition(topic, g, [a, b, c])
    assert [len(after_c[m.subscriber_id]) for m in (a, b, c)] == [2, 2, 2]
    # A join moves only the channels the newcomer needs: two, one from each.
    assert set(after_c[a.subscriber_id]) < set(after_b[a.subscriber_id])
    assert set(after_c[b.subscriber_id]) < set(after_b[b.subscriber_id])

    b.close()
    after_leave = _assert_partition(topic, g, [a, c])
    # A leave moves only the leaver's channels.
    assert set(after_c[a.subscriber_id]) < set(after_leave[a.subscriber_id])
    assert set(after_c[c.subscriber_id]) < set(after_leave[c.subscriber_id])
    moved = set(after_leave[a.subscriber_id]) - set(after_c[a.subscriber_id])
    moved |= set(after_leave[c.subscriber_id]) - set(after_c[c.subscriber_id])
    assert moved == set(after_c[b.subscriber_id])

    with a:
        pass  # the context manager closes
    assert _assert_partition(topic, g, [c])[c.subscriber_id] == (0, 1, 2, 3, 4, 5)
    c.close()
    assert _ownership(topic, g) == dict.fromkeys(range(6))
    assert topic.describe().groups[g].members == ()


def test_generations_grow_with_each_membership_change(two_channels, unique_name):
    topic, g = two_channels, unique_name("g")
    a = topic.subscriber(group=g)
    first = topic.describe().groups[g]
    b = topic.subscriber(group=g)
    second = topic.describe().groups[g]
    assert second.generation > first.generation
    generations = {m.member_id: m.generation for m in second.members}
    assert generations[b.subscriber_id] > generations[a.subscriber_id]
    b.close()
    assert topic.describe().groups[g].generation > second.generation
    a.close()


def test_ownership_listener_hears_assigned_and_revoked_in_order(six_channels, unique_name):
    topic, g = six_channels, unique_name("g")
    every = frozenset(range(6))
    heard: list[tuple[rt.OwnershipChange, int, str]] = []

    def listener(change: rt.OwnershipChange) -> None:
        heard.append((change, os.getpid(), threading.current_thread().name))

    a = topic.subscriber(group=g, on_ownership_change=listener)
    assert [h[0] for h in heard] == [rt.OwnershipChange(every, frozenset(), frozenset(), every)]
    b = topic.subscriber(group=g)
    taken = frozenset(b.channels)
    assert len(taken) == 3
    a.heartbeat()  # the handle learns of the change at the latest here
    kept = every - taken
    assert [h[0] for h in heard[1:]] == [rt.OwnershipChange(frozenset(), taken, frozenset(), kept)]
    b.close()
    assert a.channels == (0, 1, 2, 3, 4, 5)  # a `channels` read learns of it too
    assert [h[0] for h in heard[2:]] == [rt.OwnershipChange(taken, frozenset(), frozenset(), every)]
    # Called in the subscriber's own process.
    assert {h[1] for h in heard} == {os.getpid()}
    a.close()
    assert len(heard) == 3


def test_more_members_than_channels(two_channels, unique_name, wait_until):
    topic, g = two_channels, unique_name("g")
    a = topic.subscriber(group=g, start="latest")
    b = topic.subscriber(group=g)
    idle = topic.subscriber(group=g, complete_on_empty=True)
    waiting = topic.subscriber(group=g)
    by_member = _assert_partition(topic, g, [a, b, idle, waiting])
    assert by_member[idle.subscriber_id] == ()
    assert by_member[waiting.subscriber_id] == ()
    assert sorted(by_member[a.subscriber_id] + by_member[b.subscriber_id]) == [0, 1]
    publish_all(topic, ["x", "y", "z", "w"])
    # An extra member owns nothing: with complete_on_empty it completes at once.
    assert ray.get(idle.receive(), timeout=10) is None
    assert ray.get(idle.receive_batch(5), timeout=10) == []
    # Without it, its receive waits until it owns a channel with data.
    pending = waiting.receive()
    ready, _ = ray.wait([pending], timeout=0.5)
    assert ready == []
    lost = a.channels
    a.close()
    owners = _ownership(topic, g)
    new_owner = owners[lost[0]]
    assert new_owner in (idle.subscriber_id, waiting.subscriber_id)
    if new_owner == waiting.subscriber_id:
        element = ray.get(pending, timeout=10)
        assert element.channel == lost[0]
        assert element.value == ["x", "y"][lost[0]]
    else:
        assert ray.get(idle.receive(), timeout=10).channel == lost[0]
    for member in (b, idle, waiting):
        member.close()


def test_a_member_hears_of_a_channel_only_once_the_channel_knows_it_owns_it(
    one_channel, unique_name, tmp_path, wait_until
):
    # A receive sent on a view whose channel had not been granted yet was refused
    # as not the owner and answered "empty" (with complete_on_empty) though the
    # channel held elements. The channel is kept busy while the group rebalances:
    # the member must not hear of it before the busy channel has taken its grant.
    topic, g = one_channel, unique_name("g")
    leaving = topic.subscriber(group=g, start="latest")
    staying = topic.subscriber(group=g, complete_on_empty=True)
    assert leaving.channels == (0,) and staying.channels == ()
    x_sequence = next_sequences(topic)[0]
    publish_all(topic, ["x"])
    marker = tmp_path / "channel-0-is-busy"
    busy = topic.ringbuffer(0).read_many_async(x_sequence, 1, 1, slow_filter(str(marker), 2.0))
    wait_until(marker.exists, timeout=10)
    closing = threading.Thread(target=leaving.close)  # it returns once the grant landed
    closing.start()

    def hears_of_channel_0() -> bool:
        staying.heartbeat()
        return staying.channels == (0,)

    wait_until(hears_of_channel_0, timeout=30)
    assert ray.wait([busy], timeout=0)[0] == [busy]  # the grant was behind the busy read
    assert ray.get(staying.receive(), timeout=10).value == "x"
    closing.join(timeout=30)
    staying.close()


def test_each_value_to_one_member_per_group_and_to_every_group(two_channels, unique_name):
    topic, g1, g2 = two_channels, unique_name("g1"), unique_name("g2")
    m1 = topic.subscriber(group=g1, start="latest", complete_on_empty=True)
    m2 = topic.subscriber(group=g1, complete_on_empty=True)
    other = topic.subscriber(group=g2, start="latest", complete_on_empty=True)
    anonymous = topic.subscriber(complete_on_empty=True)
    base = next_sequences(topic)
    values = list(range(40))
    publish_all(topic, values)

    got1 = receive_each(m1, 20)
    got2 = receive_each(m2, 20)
    assert ray.get(m1.receive()) is None and ray.get(m2.receive()) is None
    assert {e.channel for e in got1} == set(m1.channels)
    assert {e.channel for e in got2} == set(m2.channels)
    assert sorted(e.value for e in got1 + got2) == values  # each exactly once
    assert sorted(e.value for e in receive_each(other, 40)) == values
    assert sorted(e.value for e in receive_each(anonymous, 40)) == values
    assert ray.get(other.receive()) is None and ray.get(anonymous.receive()) is None
    # Per channel, in position order.
    for got in (got1, got2):
        for channel in {e.channel for e in got}:
            sequences = [e.sequence for e in got if e.channel == channel]
            assert sequences == [base[channel] + i for i in range(20)]
    for s in (m1, m2, other, anonymous):
        s.close()


def test_groups_named_at_creation_get_everything_from_the_start(make_topic):
    # Its own topic: the groups are named at its creation.
    topic = make_topic(channels=1, groups=["audit", "billing"])
    assert topic.groups() == ["audit", "billing"]
    publish_all(topic, [f"v{i}" for i in range(10)])
    # The group exists already: start="latest" does not move it.
    with topic.subscriber(group="audit", start="latest", complete_on_empty=True) as audit:
        got = receive_each(audit, 10)
        assert ray.get(audit.receive()) is None
    assert Counter(e.value for e in got) == Counter(f"v{i}" for i in range(10))
    stats = topic.describe().groups["billing"]
    assert stats.depth == 10 and stats.unacked == 0 and stats.lag == 10


def test_new_group_starts_at_earliest_unless_latest(make_topic):
    # Its own topic: it checks the topic's heads and group list, and a new group's
    # "earliest" is the head of everything the topic holds.
    topic = make_topic(channels=1, groups=["first"])
    publish_all(topic, ["a", "b", "c", "d", "e", "f"])
    with topic.subscriber(group="first", complete_on_empty=True) as first:
        got = {e.sequence: e for e in receive_each(first, 6)}
        assert got[0].commit().status is rt.CommitStatus.COMMITTED
        assert got[1].commit().status is rt.CommitStatus.COMMITTED
    topic.destroy_group("first")
    assert [c.head for c in topic.describe().channels] == [2]
    early = topic.subscriber(group="early", complete_on_empty=True)
    late = topic.subscriber(group="late", start="latest", complete_on_empty=True)
    assert topic.groups() == ["early", "late"]
    # The earliest element still retained: "a" and "b" were removed.
    assert sorted(e.value for e in receive_each(early, 4)) == ["c", "d", "e", "f"]
    assert ray.get(late.receive()) is None
    publish_all(topic, ["g", "h"])
    assert sorted(e.value for e in receive_each(late, 2)) == ["g", "h"]
    assert sorted(e.value for e in receive_each(early, 2)) == ["g", "h"]
    assert ray.get(late.receive()) is None
    early.close()
    late.close()


def test_destroy_group_and_unknown_group(one_channel, unique_name):
    topic, g = one_channel, unique_name("g")
    groups_before = topic.groups()
    member = topic.subscriber(group=g, start="latest")
    waiting = member.receive()
    time.sleep(0.3)  # the receive reaches its channel and waits (one sent later is refused)
    topic.destroy_group(g)
    # The member's waiting receive completes empty; the handle is done.
    assert _get_none(waiting)
    with pytest.raises(rt.SubscriberClosedError):
        ray.get(member.receive(), timeout=10)
    assert topic.groups() == groups_before
    assert g not in topic.describe().groups
    with pytest.raises(rt.GroupNotFoundError):
        topic.destroy_group(g)
    with pytest.raises(rt.GroupNotFoundError):
        topic.destroy_group("never")
    member.close()


def test_create_group_false_joins_only_an_existing_group(one_channel, unique_name):
    # A misspelt name made a durable group starting at the earliest element.
    topic, g = one_channel, unique_name("g")
    topic.create_group(g)
    topic.create_group(rt.SharedGroup(g + "-s"))
    groups_before = topic.groups()
    for mode, name in (("owned", g + "-typo"), ("shared", g + "-s-typo")):
        with pytest.raises(rt.GroupNotFoundError) as refused:
            topic.subscriber(group=name, mode=mode, create_group=False)
        assert str(refused.value) == f"topic {topic.name!r} has no group {name!r}"
    assert topic.groups() == groups_before  # before: the typo groups were made
    with topic.subscriber(group=g, create_group=False) as member:
        assert member.channels == (0,)
    with topic.subscriber(group=g + "-s", mode="shared", create_group=False) as member:
        assert member.mode == "shared"
    with pytest.raises(rt.InvalidArgumentError):
        topic.subscriber(create_group=False)  # anonymous: no group to join


def test_a_missing_group_is_worded_one_way_everywhere(one_channel):
    topic = one_channel
    expected = f"topic {topic.name!r} has no group 'nope'"
    for call in (
        lambda: topic.reset_group("nope", "earliest"),
        lambda: topic.destroy_group("nope"),
        lambda: raytopic.data.read_topic(topic, group="nope"),
        lambda: topic.subscriber(group="nope", create_group=False),
    ):
        with pytest.raises(rt.GroupNotFoundError) as refused:
            call()
        assert str(refused.value) == expected  # before: "group 'nope' does not exist" too


BAD_NAMES = ["", " g", "-g", "a/b", "x" * 129, "g:1"]


def test_bad_group_names_are_refused_and_change_nothing(one_channel):
    topic = one_channel
    groups_before, described_before = topic.groups(), set(topic.describe().groups)
    for name in BAD_NAMES:
        with pytest.raises(rt.InvalidArgumentError):
            topic.subscriber(group=name)
        with pytest.raises(rt.InvalidArgumentError):
            topic.reset_group(name, "earliest")
        with pytest.raises(rt.InvalidArgumentError):
            topic.destroy_group(name)
    for name in (7, None, b"g"):
        with pytest.raises(rt.InvalidTypeError):
            topic.subscriber(group=name) if name is not None else topic.reset_group(name, "latest")
        with pytest.raises(TypeError):
            topic.destroy_group(name)
    assert topic.groups() == groups_before
    assert set(topic.describe().groups) == described_before


def test_a_groups_lag_per_channel_is_one_light_call_and_agrees_with_describe(
    make_topic, unique_name
):
    # What the autoscaler and LagPolicy poll (issue 47 item 5: they read describe()).
    two_channels = make_topic(channels=2)  # its own: the module's topic holds other tests' values
    owned, shared = unique_name("owned"), unique_name("shared")
    for group in (owned, rt.SharedGroup(shared)):
        two_channels.create_group(group)
    publish_all(two_channels, list(range(10)))
    with two_channels.subscriber(group=owned) as member:
        first, _, third = receive_each(member, 3)
        first.commit()
        third.ack()  # done on its own: no longer lag, though not committed past
    with two_channels.subscriber(group=shared, mode="shared") as worker:
        ray.get(worker.receive_batch(4), timeout=30).ack()
    coordinator = two_channels._coordinator
    stats = two_channels.describe().groups
    lags = {
        group: ray.get(coordinator.request.remote(ReadTopicLag(group)), timeout=30)
        for group in stats
    }
    for group in (owned, shared):
        assert lags[group] == {c.channel: c.lag for c in stats[group].channels}
    assert sum(lags[owned].values()) == 8 and sum(lags[shared].values()) == 6
    with pytest.raises(rt.GroupNotFoundError):
        ray.get(coordinator.request.remote(ReadTopicLag(unique_name("none"))), timeout=30)
