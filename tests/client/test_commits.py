"""Commits, seeks, flow control, retention and describe() of subscriber groups,
against a real Ray (docs/guides/subscribe.md; seed 000 commit and seek rules)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import ray

import raytopic as rt

from tests.topic_helpers import (
    TIMEOUT,
    get,
    key_for,
    kill_channel,
    module_topic,
    next_sequences,
    publish_all,
    receive_each,
    receive_exactly,
    serving_again,
)

COMMITTED = rt.CommitStatus.COMMITTED
ALREADY = rt.CommitStatus.ALREADY_COMMITTED
NOT_OWNER = rt.CommitStatus.NOT_OWNER
REJECTED = rt.CommitStatus.REJECTED


# Topics for tests whose group is their own and starts at the latest position (so it
# reads only what the test publishes) and whose positions count from next_sequences:
# shared to save actors. Tests that read a whole channel's head or size, or need options
# or a channel count of their own, keep their own topic.
shared_one = module_topic(channels=1)
shared_two = module_topic(channels=2)


def _only(subscriber: rt.Subscriber) -> int:
    (channel,) = subscriber.channels
    return channel


def _group_channel(topic: rt.Topic, group: str, channel: int) -> rt.GroupChannelStats:
    (stats,) = [c for c in topic.describe().groups[group].channels if c.channel == channel]
    return stats


@ray.remote(num_cpus=0)
def _commit_element(element: rt.Element) -> rt.CommitResult:
    return element.commit()


@ray.remote(num_cpus=0)
def _commit_element_ref(refs: list[Any]) -> rt.CommitResult:
    return ray.get(refs[0]).commit()


def test_commit_statuses_cumulative_owner_only(shared_two, unique_name):
    topic, g = shared_two, unique_name("g")  # shared: a new group's figures count from base
    base = next_sequences(topic)
    a = topic.subscriber(group=g, start="latest", complete_on_empty=True)
    b = topic.subscriber(group=g, complete_on_empty=True)
    ca, cb = _only(a), _only(b)
    publish_all(topic, list(range(10)))  # five per channel, round robin
    got = receive_each(a, 3)
    assert [(e.channel, e.sequence) for e in got] == [(ca, base[ca] + i) for i in range(3)]
    receive_each(b, 1)

    assert a.last_committed() == {}
    result = a.commit(ca, got[1].position)
    assert result == rt.CommitResult(ca, got[1].position, COMMITTED)
    assert a.last_committed() == {ca: got[1].position}
    # Cumulative: position 1 commits 0 too.
    assert a.commit(ca, got[0].position).status is ALREADY
    assert a.commit(ca, got[1].position).status is ALREADY
    # A position never published is REJECTED; nothing moves.
    assert a.commit(ca, topic.position(ca, base[ca] + 5)).status is REJECTED
    assert a.commit(ca, topic.position(ca, base[ca] + 1000)).status is REJECTED
    assert a.last_committed() == {ca: got[1].position}
    # Only the owner commits; a non-owner gets a status, not an exception.
    assert a.commit(cb, topic.position(cb, base[cb])) == rt.CommitResult(
        cb, topic.position(cb, base[cb]), NOT_OWNER
    )
    assert b.last_committed() == {}
    assert topic.describe().groups[g].committed == {ca: got[1].position}

    ref = a.commit_async(ca, got[2].position)
    assert isinstance(ref, ray.ObjectRef)
    assert get(ref) == rt.CommitResult(ca, got[2].position, COMMITTED)
    assert get(a.commit_async(cb, topic.position(cb, base[cb]))).status is NOT_OWNER
    assert a.last_committed() == {ca: got[2].position}
    stats = _group_channel(topic, g, ca)
    assert (stats.next, stats.depth, stats.unacked, stats.lag) == (base[ca] + 3, 2, 0, 2)
    a.close()
    b.close()


def test_commit_refuses_bad_positions_and_changes_nothing(shared_two, unique_name):
    topic, g = shared_two, unique_name("g")  # shared: a new group, positions from base
    base = next_sequences(topic)
    member = topic.subscriber(group=g, start="latest")
    publish_all(topic, ["a", "b"])
    element = get(member.receive())
    other_channel = 1 - element.channel
    foreign = rt.Position("0123456789abcdef", element.channel, element.sequence)
    for call in (member.commit, member.commit_async):
        with pytest.raises(rt.PositionMismatchError):
            call(element.channel, foreign)
        with pytest.raises(rt.PositionMismatchError):
            call(element.channel, topic.position(other_channel, base[other_channel]))
        with pytest.raises(ValueError):
            call(element.channel, topic.position(other_channel, base[other_channel]))
        with pytest.raises(rt.InvalidTypeError):
            call(element.channel, element.sequence)
        with pytest.raises(rt.InvalidArgumentError):
            call(5, topic.position(0, base[0]))
    assert member.last_committed() == {}
    assert topic.describe().groups[g].committed == {}
    assert member.commit(element.channel, element.position).status is COMMITTED
    member.close()


def test_element_commit_inside_a_ray_task(shared_one, unique_name):
    topic, g = shared_one, unique_name("g")  # shared: a new group, positions from base
    (base,) = next_sequences(topic).values()
    p = lambda n: topic.position(0, base + n)  # noqa: E731
    member = topic.subscriber(group=g, start="latest")
    publish_all(topic, ["a", "b", "c"])
    first, second = member.receive(), member.receive()
    # The Element itself (Ray resolves the top-level ref) ...
    assert get(_commit_element.remote(first)) == rt.CommitResult(0, p(0), COMMITTED)
    # ... or its ObjectRef, resolved inside the task.
    assert get(_commit_element_ref.remote([second])) == rt.CommitResult(0, p(1), COMMITTED)
    assert member.last_committed() == {0: p(1)}
    assert get(_commit_element.remote(first)).status is ALREADY
    # Element.commit_async from the driver.
    third = get(member.receive())
    assert get(third.commit_async()) == rt.CommitResult(0, p(2), COMMITTED)
    member.close()


def test_rejoining_member_resumes_after_the_last_commit(shared_one, unique_name):
    topic, g = shared_one, unique_name("g")  # shared: a new group, positions from base
    (base,) = next_sequences(topic).values()
    first = topic.subscriber(group=g, start="latest", complete_on_empty=True)
    publish_all(topic, list(range(5)))
    got = receive_each(first, 5)
    assert got[2].commit().status is COMMITTED
    first.close()
    # Closing gave the channel up: what was not committed is received again.
    stats = _group_channel(topic, g, 0)
    assert (stats.owner, stats.next, stats.unacked, stats.depth) == (None, base + 3, 0, 2)
    with topic.subscriber(group=g, complete_on_empty=True) as second:
        assert [e.value for e in receive_each(second, 2)] == [3, 4]
        assert get(second.receive()) is None
        # The old member's elements are fenced off.
        assert got[4].commit().status is NOT_OWNER
        assert second.last_committed() == {0: topic.position(0, base + 2)}


def test_commits_sent_without_waiting_land_before_close_gives_the_channels_up(
    shared_two, unique_name
):
    # close() leaves through the coordinator, which tells the channels; Ray does not
    # order that with a commit sent a moment before: served first, the commit would
    # find the channel given up (NOT_OWNER) and the next member would get its elements
    # again. Each way a commit goes without waiting, then close at once.
    topic, g = shared_two, unique_name("g")
    base = next_sequences(topic)
    member = topic.subscriber(group=g, start="latest", complete_on_empty=True)
    publish_all(topic, list(range(40)))  # round robin: 20 per channel
    got = receive_exactly(member, 40)
    by_channel = {c: [e for e in got if e.channel == c] for c in (0, 1)}
    by_channel[0][-1].commit_async()  # an element's
    member.commit_async(1, by_channel[1][-1].position)  # the subscriber's
    member.close()
    for channel in (0, 1):
        stats = _group_channel(topic, g, channel)
        assert (stats.next, stats.depth) == (base[channel] + 20, 0), stats
    second = topic.subscriber(group=g, complete_on_empty=True)
    publish_all(topic, list(range(40, 60)))
    seen = []
    for batch in second.iter_batches(8):
        seen += batch.values
        batch.commit_async()
    second.close()
    assert sorted(seen) == list(range(40, 60))
    assert topic.describe().groups[g].lag == 0


def test_rebalance_redelivers_uncommitted_elements(shared_two, unique_name):
    topic, g = shared_two, unique_name("g")  # shared: a new group reads only these values
    a = topic.subscriber(group=g, start="latest", complete_on_empty=True)
    publish_all(topic, list(range(6)))  # channel 0: 0 2 4, channel 1: 1 3 5
    got = receive_each(a, 6)
    assert get(a.receive()) is None
    by_channel = {c: [e for e in got if e.channel == c] for c in (0, 1)}
    assert by_channel[0][0].commit().status is COMMITTED
    assert by_channel[1][1].commit().status is COMMITTED
    b = topic.subscriber(group=g, complete_on_empty=True)
    moved = _only(b)
    kept = 1 - moved
    assert a.channels == (kept,)
    # The newcomer starts right after the last commit of the channel it took.
    resumed = {0: [2, 4], 1: [5]}[moved]
    assert [e.value for e in receive_each(b, len(resumed))] == resumed
    assert get(b.receive()) is None
    # The member that kept its channel goes on where it was: nothing new.
    assert get(a.receive()) is None
    # The old owner's commits on the moved channel are fenced off.
    assert by_channel[moved][-1].commit().status is NOT_OWNER
    assert a.commit(moved, by_channel[moved][-1].position).status is NOT_OWNER
    assert by_channel[kept][-1].commit().status is COMMITTED
    a.close()
    b.close()


def test_seek_commit_rules(make_topic):
    topic = make_topic(channels=1, retain=True)  # own: it seeks to the channel's head
    publish_all(topic, list(range(10)))
    member = topic.subscriber(group="g", complete_on_empty=True)
    got = receive_each(member, 6)
    assert member.commit(0, got[4].position).status is COMMITTED
    p = lambda sequence: topic.position(0, sequence)  # noqa: E731

    # Forward: the commit stays.
    assert member.seek(0, p(7)) == p(7)
    assert member.last_committed() == {0: p(4)}
    assert member.heads() == {0: p(8)}
    assert get(member.receive()).sequence == 8
    # Back before the commit: the commit rolls back.
    assert member.seek(0, p(2)) == p(2)
    assert member.last_committed() == {0: p(2)}
    assert get(member.receive()).sequence == 3
    # seek_and_commit sets both.
    assert member.seek_and_commit(0, p(6)) == p(6)
    assert member.last_committed() == {0: p(6)}
    assert get(member.receive()).sequence == 7
    # Clamped to the tail.
    assert member.seek(0, p(50)) == p(9)
    assert get(member.receive()) is None
    assert member.remaining_messages() == 0
    # To the head: retained elements come again.
    assert member.seek_to_head() == {0: p(-1)}
    assert member.remaining_messages() == 10
    assert get(member.receive()).sequence == 0
    assert member.seek_to_tail_and_commit() == {0: p(9)}
    assert member.last_committed() == {0: p(9)}
    assert get(member.receive()) is None
    assert member.seek_to_tail(0) == {0: p(9)}
    # A seek forward past received, uncommitted elements keeps the commit:
    # a member that takes over resumes there.
    member.seek(0, p(3))
    assert member.last_committed() == {0: p(3)}
    member.seek(0, p(8))
    member.close()
    with topic.subscriber(group="g", complete_on_empty=True) as successor:
        assert [e.sequence for e in receive_each(successor, 6)] == [4, 5, 6, 7, 8, 9]


def test_seek_by_time(make_topic):
    topic = make_topic(channels=1, retain=True)  # own: a seek before it all clamps to the head
    early = publish_all(topic, ["a", "b"])
    late = publish_all(topic, ["c", "d"])
    assert early[1].timestamp < late[0].timestamp
    member = topic.subscriber(group="g", complete_on_empty=True)
    # The next element is the first published strictly after the time.
    assert member.seek(0, early[1].timestamp) == early[1].position
    assert get(member.receive()).value == "c"
    assert member.seek(0, early[0].timestamp - timedelta(days=1)) == topic.position(0, -1)
    assert get(member.receive()).value == "a"
    assert member.seek_and_commit(0, late[1].timestamp + timedelta(days=1)) == late[1].position
    assert member.last_committed() == {0: late[1].position}
    assert get(member.receive()) is None
    member.close()


def test_seek_refuses_bad_input_and_changes_nothing(shared_two, unique_name):
    topic, g = shared_two, unique_name("g")  # shared: a new group, positions from base
    base = next_sequences(topic)
    a = topic.subscriber(group=g, start="latest")
    b = topic.subscriber(group=g)
    ca, cb = _only(a), _only(b)
    publish_all(topic, list(range(4)))
    heads = a.heads()
    with pytest.raises(rt.NotOwnerError):
        a.seek(cb, topic.position(cb, base[cb]))
    with pytest.raises(rt.NotOwnerError):
        a.seek_and_commit(cb, topic.position(cb, base[cb] + 1))
    with pytest.raises(rt.NotOwnerError):
        a.seek_to_tail(cb)
    with pytest.raises(rt.PositionMismatchError):
        a.seek(ca, topic.position(cb, base[cb]))
    with pytest.raises(rt.PositionMismatchError):
        a.seek(ca, rt.Position("0123456789abcdef", ca, base[ca]))
    with pytest.raises(rt.InvalidTypeError):
        a.seek(ca, 1)
    with pytest.raises(rt.InvalidArgumentError):
        a.seek(9, topic.position(0, base[0]))
    assert a.heads() == heads == {ca: topic.position(ca, base[ca])}
    assert b.heads() == {cb: topic.position(cb, base[cb])}
    assert topic.describe().groups[g].committed == {}
    a.close()
    b.close()


def test_last_committed_lists_owned_channels_with_a_commit(make_topic):
    topic = make_topic(channels=3)  # own: no other test here needs 3 channels
    member = topic.subscriber(group="g", complete_on_empty=True)
    publish_all(topic, list(range(6)))
    got = receive_each(member, 6)
    firsts = {e.channel: e for e in got if e.sequence == 0}
    assert firsts[0].commit().status is COMMITTED
    assert firsts[2].commit().status is COMMITTED
    assert member.last_committed() == {0: topic.position(0, 0), 2: topic.position(2, 0)}
    other = topic.subscriber(group="g")
    owned = set(member.channels)
    assert set(member.last_committed()) == owned & {0, 2}
    assert set(other.last_committed()) == set(other.channels) & {0, 2}
    member.close()
    other.close()


def test_window_limits_received_but_uncommitted(shared_one, unique_name):
    topic, g = shared_one, unique_name("g")  # shared: a new group, positions from base
    (base,) = next_sequences(topic).values()
    member = topic.subscriber(group=g, start="latest", window=2)
    publish_all(topic, list(range(5)))
    first, second = get(member.receive()), get(member.receive())
    assert (first.value, second.value) == (0, 1)
    third = member.receive()
    ready, _ = ray.wait([third], timeout=0.5)
    assert ready == []
    assert topic.describe().groups[g].unacked == 2
    assert first.commit().status is COMMITTED
    assert get(third).value == 2
    fourth = member.receive()
    ready, _ = ray.wait([fourth], timeout=0.5)
    assert ready == []
    # A cumulative commit frees the whole window.
    assert member.commit(0, topic.position(0, base + 2)).status is COMMITTED
    assert get(fourth).value == 3
    assert get(member.receive()).value == 4
    member.close()


def test_window_counts_every_owned_channel(shared_two, unique_name):
    topic, g = shared_two, unique_name("g")  # shared: a new group reads only these values
    member = topic.subscriber(group=g, start="latest", window=3)
    publish_all(topic, list(range(8)))
    got = [get(member.receive()) for _ in range(3)]
    batch = member.receive_batch(10)
    ready, _ = ray.wait([batch], timeout=0.5)
    assert ready == []
    assert topic.describe().groups[g].unacked == 3
    assert got[0].commit().status is COMMITTED
    more = get(batch)
    assert len(more) == 1
    member.close()


def test_a_window_freed_by_commits_sees_what_came_since_with_complete_on_empty(
    shared_two, unique_name
):
    # A receive session learns the window's count at a channel from its takes there; a
    # commit sent to the channel itself (element.commit) does not tell it. With
    # complete_on_empty it answered "empty" from the count it last saw, the window
    # full, though the commits had freed it and new elements waited (a loop over the
    # member ended with them unread, lag 2): it looks again before answering "empty".
    topic, g = shared_two, unique_name("g")  # shared: a new group reads only these values
    member = topic.subscriber(group=g, start="latest", window=4, complete_on_empty=True)
    for channel in range(2):
        key = key_for(channel, 2)
        publish_all(topic, list(range(4)), key=key)
        got = receive_exactly(member, 4)
        assert [e.value for e in got] == [0, 1, 2, 3]
        assert [e.commit().status for e in got] == [COMMITTED] * 4
        publish_all(topic, [10, 11], key=key)
        later: list[rt.Element] = []
        while batch := get(member.receive_batch(4)):  # until it answers "empty"
            later += batch
        assert [e.value for e in later] == [10, 11]
        assert later[-1].commit().status is COMMITTED
    assert topic.describe().groups[g].lag == 0
    member.close()


def test_a_seek_forward_does_not_fill_the_window(shared_one, unique_name):
    topic, g = shared_one, unique_name("g")  # shared: a new group reads only these values
    member = topic.subscriber(group=g, start="latest", window=3)
    statuses = publish_all(topic, list(range(20)))
    assert [get(member.receive()).value for _ in range(2)] == [0, 1]
    member.seek(0, statuses[14].position)  # 2..14 are jumped over, never received
    stats = _group_channel(topic, g, 0)
    assert (stats.unacked, stats.depth) == (2, 5)
    # Room for one more: the jumped elements are not waiting for a commit.
    assert get(member.receive()).value == 15
    blocked = member.receive()
    ready, _ = ray.wait([blocked], timeout=0.5)
    assert ready == []
    assert _group_channel(topic, g, 0).unacked == 3
    assert member.commit(0, statuses[15].position).status is COMMITTED
    assert get(blocked).value == 16
    assert _group_channel(topic, g, 0).unacked == 1
    member.close()


def test_window_must_be_positive(shared_one, unique_name):
    topic, g = shared_one, unique_name("g")  # shared: it checks no group joins those it had
    groups = topic.groups()
    for window in (0, -1):
        with pytest.raises(rt.InvalidArgumentError):
            topic.subscriber(group=g, window=window)
    for window in (1.5, "2", True):
        with pytest.raises(rt.InvalidTypeError):
            topic.subscriber(group=g, window=window)
    assert topic.groups() == groups  # no group made


def test_retention_waits_for_every_group(make_topic):
    # Own topic: the ring's head and size are the channel's, and every group holds them.
    topic = make_topic(channels=1, retain=False, groups=["g1", "g2"])
    ring = topic.ringbuffer(0)
    publish_all(topic, list(range(5)))
    one = topic.subscriber(group="g1", complete_on_empty=True)
    two = topic.subscriber(group="g2", complete_on_empty=True)
    got1, got2 = receive_each(one, 5), receive_each(two, 5)
    assert got1[2].commit().status is COMMITTED
    assert (ring.head_sequence(), ring.size()) == (0, 5)  # g2 has committed nothing
    assert got2[1].commit().status is COMMITTED
    assert (ring.head_sequence(), ring.size()) == (2, 3)
    assert got2[3].commit().status is COMMITTED
    assert (ring.head_sequence(), ring.size()) == (3, 2)
    (channel,) = topic.describe().channels
    assert (channel.head, channel.tail, channel.size) == (3, 4, 2)
    # retain=False: a group can never seek back before its commit.
    assert one.seek(0, topic.position(0, 0)) == topic.position(0, 2)
    # Destroying a group releases what it held.
    topic.destroy_group("g1")
    assert (ring.head_sequence(), ring.size()) == (4, 1)
    two.close()
    one.close()


@pytest.mark.slow
def test_a_commit_of_elements_received_before_a_restart_is_never_delivered_again(
    make_topic, tmp_path
):
    # trial67: a channel SIGKILLed while commits reach it comes back from its store at
    # the commit it had written, and reads on after that one; a commit of elements its
    # member received before passes the read position. They were delivered again (or,
    # released meanwhile, told "removed before they were received").
    topic = make_topic(channels=1, capacity=10, overflow="fail", store=str(tmp_path))
    member = topic.subscriber(group="g", complete_on_empty=True)
    publish_all(topic, list(range(10)))
    got = receive_each(member, 10)
    assert member.commit(0, got[4].position).status is COMMITTED
    old_epoch = kill_channel(topic, 0)
    serving_again(topic, 0, old_epoch, TIMEOUT)
    assert member.commit(0, got[9].position).status is COMMITTED
    assert get(member.receive_batch(10)) == []
    publish_all(topic, ["after"])
    assert [e.value for e in get(member.receive_batch(10))] == ["after"]
    assert topic.describe().groups["g"].lag == 1
    member.close()


def test_retain_keeps_elements_and_seeking_back_redelivers(make_topic):
    topic = make_topic(channels=1, retain=True)  # own: it checks the ring's head and size
    publish_all(topic, ["a", "b", "c"])
    member = topic.subscriber(group="g", complete_on_empty=True)
    got = receive_each(member, 3)
    assert got[2].commit().status is COMMITTED
    ring = topic.ringbuffer(0)
    assert (ring.head_sequence(), ring.size()) == (0, 3)
    assert member.seek(0, topic.position(0, 0)) == topic.position(0, 0)
    assert member.last_committed() == {0: topic.position(0, 0)}
    assert [e.value for e in receive_each(member, 2)] == ["b", "c"]
    member.close()


def test_describe_exact_figures_with_and_without_live_members(make_topic):
    topic = make_topic(channels=2, groups=["idle"])  # own: its figures count the whole topic
    a = topic.subscriber(group="g")
    b = topic.subscriber(group="g")
    ca, cb = _only(a), _only(b)
    publish_all(topic, list(range(10)))  # five per channel
    got_a = receive_each(a, 3)
    receive_each(b, 2)
    assert got_a[1].commit().status is COMMITTED

    stats = topic.describe()
    assert [(c.channel, c.head, c.tail, c.size) for c in stats.channels] == [
        (0, 0, 4, 5),
        (1, 0, 4, 5),
    ]
    group = stats.groups["g"]
    assert {m.member_id: m.channels for m in group.members} == {
        a.subscriber_id: (ca,),
        b.subscriber_id: (cb,),
    }
    assert all(m.timeout == 30.0 for m in group.members)
    assert group.ownership == {ca: a.subscriber_id, cb: b.subscriber_id}
    figures = {c.channel: (c.next, c.depth, c.unacked, c.lag, c.has_commit) for c in group.channels}
    assert figures == {ca: (3, 2, 1, 3, True), cb: (2, 3, 2, 5, False)}
    assert group.committed == {ca: topic.position(ca, 1)}
    assert (group.depth, group.unacked, group.lag) == (5, 3, 8)
    idle = stats.groups["idle"]
    assert idle.members == () and idle.committed == {}
    assert (idle.depth, idle.unacked, idle.lag) == (10, 0, 10)
    assert idle.ownership == {0: None, 1: None}

    a.close()
    b.close()
    # No live member: positions stay; what was received but not committed
    # counts as not received (it will be delivered again).
    group = topic.describe().groups["g"]
    assert group.members == ()
    assert group.ownership == {0: None, 1: None}
    assert group.committed == {ca: topic.position(ca, 1)}
    figures = {c.channel: (c.next, c.depth, c.unacked, c.lag) for c in group.channels}
    assert figures == {ca: (2, 3, 0, 3), cb: (0, 5, 0, 5)}
    assert (group.depth, group.unacked, group.lag) == (8, 0, 8)


def test_commit_on_a_channel_the_handle_has_not_heard_it_owns(shared_two, unique_name):
    topic, g = shared_two, unique_name("g")  # shared: a new group, positions from base
    base = next_sequences(topic)
    a = topic.subscriber(group=g, start="latest")
    b = topic.subscriber(group=g)
    taken = _only(b)
    waiting = a.receive()  # waits: nothing published since the group began
    b.close()  # a's session reads b's channel from now on
    assert topic.ringbuffer(taken).add("x") == base[taken]  # on b's former channel only
    element = get(waiting)
    assert (element.channel, element.sequence, element.value) == (taken, base[taken], "x")
    # Owned at the channel, though the handle has not synced since: COMMITTED.
    result = a.commit(taken, element.position)
    assert result == rt.CommitResult(taken, element.position, COMMITTED)
    assert a.channels == (0, 1)
    assert a.last_committed() == {taken: element.position}
    a.close()
