"""Group resets (Pulsar-style seek of a whole group) against a real Ray
(docs/guides/seek-and-reset.md)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
import ray

import raytopic as rt
from raytopic.core.protocol import ResetGroupPositions

from tests.topic_helpers import (
    get,
    module_topic,
    next_sequences,
    publish_all,
    receive_each,
    slow_filter,
)

COMMITTED = rt.CommitStatus.COMMITTED
ALREADY = rt.CommitStatus.ALREADY_COMMITTED
REJECTED = rt.CommitStatus.REJECTED

# Retaining topics the tests share to save actors. Each test resets a group of its own
# name, made at "latest" (or reset to targets of its own before it reads), and counts
# sequences from where its topic's channels were when it began (next_sequences).
two_channels = module_topic(channels=2, retain=True)
one_channel = module_topic(channels=1, retain=True)


def _cursors(topic: rt.Topic, group: str) -> dict[int, tuple[int, int, bool]]:
    stats = topic.describe().groups[group]
    return {c.channel: (c.next, c.committed.sequence, c.has_commit) for c in stats.channels}


def test_reset_to_positions_moves_only_those_channels(two_channels, unique_name):
    topic, g = two_channels, unique_name("g")
    member = topic.subscriber(group=g, start="latest", complete_on_empty=True)
    base = next_sequences(topic)
    b0, b1 = base[0], base[1]
    publish_all(topic, list(range(10)))  # channel 0: 0 2 4 6 8, channel 1: 1 3 5 7 9
    got = receive_each(member, 10)
    old = {(e.channel, e.sequence): e for e in got}
    assert old[0, b0 + 3].commit().status is COMMITTED
    assert old[1, b1 + 4].commit().status is COMMITTED
    before = topic.describe().groups[g]

    target = topic.position(0, b0 + 1)
    assert topic.reset_group(g, {0: target}) == {0: target}
    assert _cursors(topic, g) == {0: (b0 + 2, b0 + 1, True), 1: (b1 + 5, b1 + 4, True)}
    # Ownership and generations are unchanged.
    after = topic.describe().groups[g]
    assert (after.generation, after.ownership) == (before.generation, before.ownership)
    assert member.last_committed() == {0: target, 1: topic.position(1, b1 + 4)}

    # The next received is the first after the position set.
    again = receive_each(member, 3)
    assert [(e.channel, e.sequence, e.value) for e in again] == [
        (0, b0 + 2, 4),
        (0, b0 + 3, 6),
        (0, b0 + 4, 8),
    ]
    assert get(member.receive()) is None
    # Received before the reset: REJECTED, so a late commit cannot undo the reset.
    assert old[0, b0].commit().status is REJECTED
    assert member.commit(0, old[0, b0 + 4].position).status is COMMITTED  # received again since
    assert member.commit(0, topic.position(0, b0)).status is REJECTED
    # The other channel was not reset: its commits behave as before.
    assert old[1, b1 + 3].commit().status is ALREADY
    member.close()


def test_reset_received_before_reset_is_rejected_until_received_again(one_channel, unique_name):
    topic, g = one_channel, unique_name("g")
    member = topic.subscriber(group=g, start="latest", complete_on_empty=True)
    base = next_sequences(topic)[0]
    publish_all(topic, list(range(6)))
    old = receive_each(member, 6)
    topic.reset_group(g, {0: topic.position(0, base + 2)})
    # Every element received before the reset commits REJECTED (its commit carries
    # the jump count it was read at), the one at the reset point too; a bare
    # position there is where the commit already is (tests/actors/test_cursors.py).
    statuses = [element.commit().status for element in old]
    assert statuses == [REJECTED] * 6
    assert member.commit(0, old[2].position).status is ALREADY
    assert member.last_committed() == {0: topic.position(0, base + 2)}
    assert get(member.receive()).sequence == base + 3
    assert member.commit(0, topic.position(0, base + 3)).status is COMMITTED
    assert old[5].commit().status is REJECTED  # not received since the reset
    member.close()


def test_reset_to_earliest_latest_and_time(make_topic):
    # Its own topic: "earliest", and times from long ago, mean everything it ever held.
    topic = make_topic(channels=2, retain=True)
    first = publish_all(topic, ["a0", "a1", "a2", "a3"])
    second = publish_all(topic, ["b0", "b1"])
    member = topic.subscriber(group="g", complete_on_empty=True)
    assert sorted(e.value for e in receive_each(member, 6)) == ["a0", "a1", "a2", "a3", "b0", "b1"]

    assert topic.reset_group("g", "earliest") == {
        0: topic.position(0, -1),
        1: topic.position(1, -1),
    }
    assert sorted(e.value for e in receive_each(member, 6)) == ["a0", "a1", "a2", "a3", "b0", "b1"]
    assert get(member.receive()) is None

    assert topic.reset_group("g", "latest") == {0: topic.position(0, 2), 1: topic.position(1, 2)}
    assert get(member.receive()) is None
    assert _cursors(topic, "g") == {0: (3, 2, True), 1: (3, 2, True)}
    publish_all(topic, ["c0", "c1"])
    assert sorted(e.value for e in receive_each(member, 2)) == ["c0", "c1"]

    # A publish time: the next is the first published strictly after it.
    stamp = max(s.timestamp for s in first)
    assert stamp < min(s.timestamp for s in second)
    assert topic.reset_group("g", stamp) == {0: topic.position(0, 1), 1: topic.position(1, 1)}
    assert sorted(e.value for e in receive_each(member, 4)) == ["b0", "b1", "c0", "c1"]
    # A naive datetime is local time; long ago clamps to before the head.
    naive = (first[0].timestamp - timedelta(hours=1)).astimezone().replace(tzinfo=None)
    assert topic.reset_group("g", naive) == {0: topic.position(0, -1), 1: topic.position(1, -1)}
    future = datetime.now(UTC) + timedelta(days=1)
    assert topic.reset_group("g", future) == {0: topic.position(0, 3), 1: topic.position(1, 3)}
    assert get(member.receive()) is None
    member.close()


def test_reset_of_a_group_without_members(one_channel, unique_name):
    topic, g = one_channel, unique_name("g")
    # Made before the test publishes, without members; at the head, so only the reset
    # keeps it from reading what the topic held before.
    topic.create_group(g)
    base = next_sequences(topic)[0]
    publish_all(topic, ["a", "b", "c"])
    assert topic.reset_group(g, "latest") == {0: topic.position(0, base + 2)}
    assert _cursors(topic, g) == {0: (base + 3, base + 2, True)}
    publish_all(topic, ["d"])
    with topic.subscriber(group=g, complete_on_empty=True) as member:
        assert [e.value for e in receive_each(member, 1)] == ["d"]
        assert get(member.receive()) is None


def test_reset_wakes_a_waiting_receive_at_the_new_position(one_channel, unique_name):
    topic, g = one_channel, unique_name("g")
    member = topic.subscriber(group=g, start="latest")
    base = next_sequences(topic)[0]
    publish_all(topic, list(range(5)))
    assert [e.sequence for e in receive_each(member, 5)] == [base + i for i in range(5)]
    waiting = member.receive()
    ready, _ = ray.wait([waiting], timeout=0.5)
    assert ready == []
    topic.reset_group(g, {0: topic.position(0, base + 1)})
    element = get(waiting)
    assert (element.sequence, element.value) == (base + 2, 2)
    assert element.commit().status is COMMITTED
    member.close()


def test_reset_while_iterating_continues_from_the_new_positions(one_channel, unique_name):
    topic, g = one_channel, unique_name("g")
    member = topic.subscriber(group=g, start="latest")
    base = next_sequences(topic)[0]
    publish_all(topic, list(range(20)))
    iteration = iter(member)
    assert [next(iteration).sequence for _ in range(3)] == [base, base + 1, base + 2]
    # The iteration prefetched the rest; the reset must clear that.
    topic.reset_group(g, {0: topic.position(0, base + 10)})
    member.heartbeat()  # at the latest here the handle learns of the reset
    assert [next(iteration).sequence for _ in range(3)] == [base + 11, base + 12, base + 13]
    publish_all(topic, [20])
    assert [next(iteration).value for _ in range(7)] == [14, 15, 16, 17, 18, 19, 20]
    member.close()


def _iterate(member: rt.Subscriber, style: str):
    """Elements one at a time, as ``style`` iterates: element by element, or by batches."""
    if style == "elements":
        yield from member
    else:
        for batch in member.iter_batches(5):
            yield from batch


@pytest.mark.parametrize("style", ["elements", "batches"])
def test_an_element_iteration_held_across_a_reset_commits_rejected(one_channel, unique_name, style):
    # The iteration keeps a receive waiting at the channel: the reset lets it take the
    # replayed elements at once, so the position alone no longer shows that the held
    # element was read before the reset (it committed COMMITTED, and the replay then
    # answered ALREADY_COMMITTED: the reset was undone).
    topic, g = one_channel, unique_name("g")
    member = topic.subscriber(group=g, start="latest")
    base = next_sequences(topic)[0]
    publish_all(topic, list(range(20)))
    elements = _iterate(member, style)
    for element in elements:
        if element.value == 10:
            held = element
            break
        assert element.commit().status is COMMITTED
    topic.reset_group(g, {0: topic.position(0, base - 1)})
    assert held.commit().status is REJECTED
    # What the iteration had fetched before the reset is dropped: the replay follows.
    # (By batches, the rest of the held batch was handed out with it: read before too.)
    stale = 4 if style == "batches" else 0
    replayed = []
    for element in elements:
        replayed.append((element.value, element.commit().status))
        if len(replayed) == stale + 20:
            break
    assert replayed[:stale] == [(v, REJECTED) for v in range(11, 11 + stale)]
    assert replayed[stale:] == [(v, COMMITTED) for v in range(20)]
    assert member.last_committed() == {0: topic.position(0, base + 19)}
    member.close()


def test_reset_of_an_unknown_group(one_channel):
    topic = one_channel
    groups_before = topic.groups()
    with pytest.raises(rt.GroupNotFoundError):
        topic.reset_group("nobody", "earliest")
    with pytest.raises(LookupError):
        topic.reset_group("nobody", {0: topic.position(0, 0)})
    assert topic.groups() == groups_before


def test_bad_reset_targets_are_refused_and_change_nothing(two_channels, unique_name):
    topic, g = two_channels, unique_name("g")
    topic.create_group(g)
    base = next_sequences(topic)
    b0, b1 = base[0], base[1]
    publish_all(topic, list(range(4)))
    topic.reset_group(g, {0: topic.position(0, b0), 1: topic.position(1, b1 + 1)})
    before = _cursors(topic, g)
    other = rt.Position("0123456789abcdef", 0, 0)
    for target, error in [
        (5, rt.InvalidTypeError),
        (None, rt.InvalidTypeError),
        ([topic.position(0, 0)], rt.InvalidTypeError),
        ("middle", rt.InvalidArgumentError),
        ({}, rt.InvalidArgumentError),
        ({0: 1}, rt.InvalidTypeError),
        ({0: topic.position(1, 0)}, rt.PositionMismatchError),
        ({0: topic.position(0, 0), 1: topic.position(0, 0)}, rt.PositionMismatchError),
        ({0: other}, rt.PositionMismatchError),
        ({5: rt.Position(topic.topic_id, 5, 0)}, rt.InvalidArgumentError),
        ({"0": topic.position(0, 0)}, rt.InvalidTypeError),
    ]:
        with pytest.raises(error):
            topic.reset_group(g, target)
    assert _cursors(topic, g) == before == {0: (b0 + 1, b0, True), 1: (b1 + 2, b1 + 1, True)}


def test_a_failing_reset_leaves_the_group_unchanged(two_channels, unique_name):
    topic, g = two_channels, unique_name("g")
    member = topic.subscriber(group=g, start="latest", complete_on_empty=True)
    b0 = next_sequences(topic)[0]
    publish_all(topic, list(range(6)))
    got = receive_each(member, 4)
    for element in got[-2:]:
        assert element.commit().status is COMMITTED
    before = _cursors(topic, g)
    # Channel 1's part of the reset fails: channel 0's part is undone.
    with pytest.raises(rt.TopicError):
        get(topic._coordinator.request.remote(ResetGroupPositions(g, {0: b0, 1: "bogus"})))
    with pytest.raises(rt.InvalidArgumentError):
        get(topic._coordinator.request.remote(ResetGroupPositions(g, {0: b0, 7: 0})))
    assert _cursors(topic, g) == before
    assert member.last_committed() == {0: got[2].position, 1: got[3].position}
    # The group goes on where it was, and can be reset again.
    assert sorted(e.value for e in receive_each(member, 2)) == [4, 5]
    # "earliest" is just before each channel's head (0 on a topic that removed nothing).
    heads = {c.channel: c.head for c in topic.describe().channels}
    assert topic.reset_group(g, "earliest") == {
        0: topic.position(0, heads[0] - 1),
        1: topic.position(1, heads[1] - 1),
    }
    member.close()


def test_concurrent_resets_of_one_group(two_channels, unique_name, tmp_path, wait_until):
    topic, g, other = two_channels, unique_name("g"), unique_name("other")
    topic.create_group(g)  # at the head, without members
    topic.create_group(other)
    heads = {c.channel: c.head for c in topic.describe().channels}
    base = next_sequences(topic)
    b0, b1 = base[0], base[1]
    publish_all(topic, list(range(4)))
    marker = tmp_path / "channel-0-is-busy"
    busy = topic.ringbuffer(0).read_many_async(b0, 1, 1, slow_filter(str(marker), 2.0))
    wait_until(marker.exists, timeout=10)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(topic.reset_group, g, {0: topic.position(0, b0 + 1)})
        second = pool.submit(topic.reset_group, g, {0: topic.position(0, b0)})
        # Another group is independent (and its channel is not busy).
        other_at = topic.position(1, b1 + 1)
        assert topic.reset_group(other, {1: other_at}) == {1: other_at}
        outcomes = []
        for future in (first, second):
            try:
                outcomes.append(future.result(timeout=30))
            except rt.ResetInProgressError as error:
                outcomes.append(error)
    assert get(busy)[0] == 0
    errors = [o for o in outcomes if isinstance(o, rt.ResetInProgressError)]
    done = [o for o in outcomes if not isinstance(o, Exception)]
    assert len(errors) == 1 and len(done) == 1, outcomes
    (winner,) = done
    assert _cursors(topic, g)[0] == (winner[0].sequence + 1, winner[0].sequence, True)
    assert _cursors(topic, g)[1] == (heads[1], heads[1] - 1, False)
    # Once it finished, the group can be reset again.
    assert topic.reset_group(g, "latest") == {
        0: topic.position(0, b0 + 1),
        1: topic.position(1, b1 + 1),
    }
