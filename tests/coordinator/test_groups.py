"""Unit tests of subscriber groups (no Ray): membership, generations, leases, timeouts, views."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytopic.coordinator.groups import Group, MemberView, Rebalance
from raytopic.core.errors import GroupBusyError
from raytopic.core.protocol import Lease


def owners(group: Group) -> dict[int, str | None]:
    return {channel: group.owner(channel) for channel in range(group.channel_count)}


def held_by(leases: dict[int, Lease | None], member: str) -> dict[int, Lease]:
    return {c: lease for c, lease in leases.items() if lease and lease.reader_id == member}


# -- examples ------------------------------------------------------------------


def test_a_new_group_has_no_members_and_no_owners() -> None:
    group = Group("g", 4)
    assert (group.generation, group.version, group.members, group.leases) == (0, 0, {}, {})
    assert owners(group) == {0: None, 1: None, 2: None, 3: None}
    assert group.channels_of("a") == {}
    assert group.view("a") is None


def test_the_first_member_gets_every_channel_under_a_new_generation() -> None:
    group = Group("g", 4)
    rebalance = group.join("a", timeout=30.0, now=100.0)
    lease = Lease("a", 1)
    assert rebalance == Rebalance({0: lease, 1: lease, 2: lease, 3: lease}, ("a",))
    assert (group.generation, group.version) == (1, 1)
    member = group.members["a"]
    assert (member.generation, member.timeout, member.last_seen) == (1, 30.0, 100.0)
    assert group.view("a") == MemberView("a", 1, 1, {0: lease, 1: lease, 2: lease, 3: lease}, {})


def test_a_join_moves_only_the_newcomers_channels_under_new_leases() -> None:
    group = Group("g", 4)
    group.join("a", 30.0, 0.0)
    rebalance = group.join("b", 30.0, 1.0)
    assert group.generation == 2
    assert rebalance.grants == {2: Lease("b", 2), 3: Lease("b", 2)}
    assert rebalance.members == ("a", "b")
    assert group.channels_of("a") == {0: Lease("a", 1), 1: Lease("a", 1)}  # untouched
    assert group.channels_of("b") == {2: Lease("b", 2), 3: Lease("b", 2)}
    assert group.view("b").generation == 2
    assert group.view("a").generation == 1


def test_a_leave_hands_over_only_the_leavers_channels() -> None:
    group = Group("g", 4)
    group.join("a", 30.0, 0.0)
    group.join("b", 30.0, 0.0)
    rebalance = group.leave("b")
    assert rebalance == Rebalance({2: Lease("a", 3), 3: Lease("a", 3)}, ("a", "b"))
    assert group.generation == 3
    assert group.channels_of("a") == {
        0: Lease("a", 1),
        1: Lease("a", 1),
        2: Lease("a", 3),
        3: Lease("a", 3),
    }
    assert group.view("b") is None


def test_the_last_leave_leaves_every_channel_unowned() -> None:
    group = Group("g", 2)
    group.join("a", 30.0, 0.0)
    assert group.leave("a") == Rebalance({0: None, 1: None}, ("a",))
    assert owners(group) == {0: None, 1: None}
    assert group.generation == 2


def test_leaving_when_not_a_member_changes_nothing() -> None:
    group = Group("g", 2)
    group.join("a", 30.0, 0.0)
    assert group.leave("zz") is None
    assert (group.generation, group.version) == (1, 1)
    assert group.leave("a") is not None
    assert group.leave("a") is None
    assert (group.generation, group.version) == (2, 2)


def test_a_rejoining_member_never_keeps_an_old_lease() -> None:
    group = Group("g", 4)
    group.join("a", 30.0, 0.0)
    group.join("b", 30.0, 0.0)
    rebalance = group.join("a", 60.0, 5.0)  # rejoin: new generation, new leases
    assert group.generation == 3
    assert rebalance.grants == {0: Lease("a", 3), 1: Lease("a", 3)}
    assert rebalance.members == ("a",)
    assert group.channels_of("a") == {0: Lease("a", 3), 1: Lease("a", 3)}
    assert group.channels_of("b") == {2: Lease("b", 2), 3: Lease("b", 2)}
    member = group.members["a"]
    assert (member.generation, member.timeout, member.last_seen) == (3, 60.0, 5.0)


def test_a_member_beyond_the_channel_count_owns_nothing_but_hears_of_its_join() -> None:
    group = Group("g", 1)
    group.join("a", 30.0, 0.0)
    rebalance = group.join("b", 30.0, 0.0)
    assert rebalance == Rebalance({}, ("b",))
    assert group.view("b") == MemberView("b", 2, 2, {}, {})
    assert group.channels_of("a") == {0: Lease("a", 1)}


def test_touch_records_a_heartbeat_of_members_only() -> None:
    group = Group("g", 2)
    group.join("a", 10.0, 0.0)
    assert group.touch("a", 7.5) is True
    assert group.members["a"].last_seen == 7.5
    assert group.touch("b", 7.5) is False
    assert (group.generation, group.version) == (1, 1)


def test_expire_removes_members_silent_longer_than_their_timeout() -> None:
    group = Group("g", 4)
    group.join("a", 10.0, 0.0)
    group.join("b", 10.0, 0.0)
    group.join("c", 100.0, 0.0)
    group.touch("b", 5.0)
    assert group.expire(10.0) == ([], None)  # exactly the timeout: still alive
    assert group.generation == 3
    expired, rebalance = group.expire(12.0)
    assert expired == ["a"]
    assert group.generation == 4
    # a held 0 and 1, b held 2, c held 3: only a's channels move.
    assert rebalance == Rebalance({0: Lease("b", 4), 1: Lease("c", 4)}, ("a", "b", "c"))
    assert group.view("a") is None
    assert group.touch("a", 12.0) is False
    expired, rebalance = group.expire(15.5)
    assert expired == ["b"]
    assert rebalance == Rebalance({0: Lease("c", 5), 2: Lease("c", 5)}, ("b", "c"))
    assert group.channels_of("c") == {
        0: Lease("c", 5),
        1: Lease("c", 4),
        2: Lease("c", 5),
        3: Lease("c", 3),
    }


def test_expire_of_several_members_at_once_bumps_the_generation_once() -> None:
    group = Group("g", 3)
    for member in ("a", "b", "c"):
        group.join(member, 1.0, 0.0)
    expired, rebalance = group.expire(2.0)
    assert sorted(expired) == ["a", "b", "c"]
    assert group.generation == 4
    assert rebalance == Rebalance({0: None, 1: None, 2: None}, ("a", "b", "c"))


def test_view_jumps_are_a_copy_of_the_groups_reset_jumps() -> None:
    group = Group("g", 2)
    group.join("a", 30.0, 0.0)
    group.jumps[1] = 7
    view = group.view("a")
    assert view.jumps == {1: 7}
    group.jumps[1] = 8
    assert view.jumps == {1: 7}


# -- properties ----------------------------------------------------------------

POOL = ["a", "b", "c", "d", "e", "f"]
operations = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.sampled_from(POOL)),
        st.tuples(st.just("leave"), st.sampled_from(POOL)),
        st.tuples(st.just("touch"), st.sampled_from(POOL)),
        st.tuples(st.just("tick"), st.integers(1, 8)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), operations)
def test_membership_changes_keep_leases_fenced_and_balanced(
    channel_count: int, ops: list[tuple[str, object]]
) -> None:
    group = Group("g", channel_count)
    now = 0.0
    for op, arg in ops:
        before_owners = owners(group)
        before_leases = dict(group.leases)
        before_generation, before_version = group.generation, group.version
        rebalance: Rebalance | None = None
        involved: set[str] = set()
        if op == "join":
            rebalance = group.join(str(arg), timeout=10.0, now=now)
            involved = {str(arg)}
        elif op == "leave":
            was_member = arg in group.members
            rebalance = group.leave(str(arg))
            assert (rebalance is None) == (not was_member)
            involved = {str(arg)}
        elif op == "touch":
            assert group.touch(str(arg), now) == (arg in group.members)
        else:
            now += float(arg)  # type: ignore[arg-type]
            expired, rebalance = group.expire(now)
            assert (rebalance is None) == (not expired)
            involved = set(expired)
            assert not involved & set(group.members)

        if rebalance is None:
            assert (group.generation, group.version) == (before_generation, before_version)
            assert group.leases == before_leases
            continue
        # Generations only grow, one step per membership change.
        assert group.generation == before_generation + 1
        assert group.version == before_version + 1
        # Every channel that changed owner (or lost its lease) got a new lease now...
        after_owners = owners(group)
        for channel in range(channel_count):
            lease = group.leases.get(channel)
            if channel in rebalance.grants:
                assert rebalance.grants[channel] == lease
                assert lease is None or lease.generation == group.generation
            else:
                assert lease == before_leases.get(channel)
            if after_owners[channel] != before_owners[channel]:
                assert channel in rebalance.grants
        # ... and the members told are those whose channels changed, plus the one(s) involved.
        changed = {
            member
            for member in set(group.members) | set(before_owners.values()) - {None}
            if held_by(group.leases, member) != held_by(before_leases, member)
        }
        assert set(rebalance.members) == changed | involved
        assert list(rebalance.members) == sorted(rebalance.members)
        # Owners are live members; a member never holds a lease older than its join.
        for lease in group.leases.values():
            if lease is not None:
                member = group.members[lease.reader_id]
                assert member.generation <= lease.generation <= group.generation
        if group.members:
            held = [len(group.channels_of(m)) for m in group.members]
            assert sum(held) == channel_count
            assert max(held) - min(held) <= 1
        else:
            assert set(after_owners.values()) == {None}
        for reader_id, member in group.members.items():
            view = group.view(reader_id)
            assert view is not None
            assert (view.reader_id, view.generation, view.version) == (
                reader_id,
                member.generation,
                group.version,
            )
            assert view.leases == group.channels_of(reader_id)


# -- a restarted coordinator ----------------------------------------------------------


def test_recovered_groups_come_from_the_channels_leases_and_marks_and_only_grow() -> None:
    from raytopic.coordinator.groups import RECOVERED_TIMEOUT, recovered_groups

    a, b = Lease("a", 3), Lease("b", 5)
    cursors = [
        {"g": {"owner": a, "jumps": 2}, "h": {"owner": None, "jumps": 0}},
        {"g": {"owner": b, "jumps": 1}, "h": {"owner": None, "jumps": 0}},
        {"g": {"owner": b, "jumps": 0}},  # a channel that lost "h" (restarted, no store)
    ]
    # A member with no channel joined at generation 7: only the marks know it.
    marks = [{"g": (9, 7)}, {"g": (11, 6)}, {}]
    groups = recovered_groups(3, cursors, marks, now=100.0)

    g = groups["g"]
    assert g.leases == {0: a, 1: b, 2: b}
    assert g.jumps == {0: 2, 1: 1, 2: 0}
    assert {m.reader_id: (m.generation, m.timeout, m.last_seen) for m in g.members.values()} == {
        "a": (3, RECOVERED_TIMEOUT, 100.0),
        "b": (5, RECOVERED_TIMEOUT, 100.0),
    }
    # Above everything any channel saw: members' next views are news to them,
    # and the next join gets a generation no one had.
    assert (g.version, g.generation) == (12, 8)
    assert g.channels_of("b") == {1: b, 2: b}
    h = groups["h"]
    assert (h.members, h.leases, h.version, h.generation) == ({}, {0: None, 1: None}, 1, 1)
    change = g.join("c", 30.0, now=101.0)
    assert g.generation == 9 and g.members["c"].generation == 9
    assert set(change.grants)  # the newcomer takes a channel under the new generation


def test_recovered_channels_that_lost_their_cursors_go_to_members() -> None:
    from raytopic.coordinator.groups import recovered_groups

    a = Lease("a", 3)
    # Channel 1 restarted without a store while the coordinator was down: no cursor.
    groups = recovered_groups(2, [{"g": {"owner": a, "jumps": 0}}, {}], [{}, {}], now=1.0)
    g = groups["g"]
    assert g.leases == {0: a} and g.assign_unowned() is not None
    assert set(g.channels_of("a")) == {0, 1} and g.leases[1].generation == g.generation
    assert g.assign_unowned() is None  # every channel is owned now
    empty = Group("e", 2)
    assert empty.assign_unowned() is None  # nobody to give them to


# -- cooperative hand-over -------------------------------------------------------


def test_a_cooperative_owner_keeps_a_moving_channel_until_it_releases_it() -> None:
    group = Group("g", 4)
    group.join("a", 10.0, 0.0, cooperative=True)
    rebalance = group.join("b", 10.0, 1.0)
    assert rebalance.grants == {}  # nothing moves yet: a still owns all four
    assert rebalance.members == ("a", "b")
    assert owners(group) == dict.fromkeys(range(4), "a")
    assert group.view("a").revoking == {2, 3}
    assert group.view("b").leases == {}
    # a committed what it handed out from 2 and 3: they go to b now.
    released = group.release("a", [2, 3], 2.0)
    assert released.grants == {2: Lease("b", 3), 3: Lease("b", 3)}
    assert group.view("a").revoking == frozenset()
    assert set(group.channels_of("b")) == {2, 3}
    assert group.handovers == {}


def test_a_release_of_channels_not_being_handed_over_changes_nothing() -> None:
    group = Group("g", 2)
    group.join("a", 10.0, 0.0, cooperative=True)
    version = group.version
    assert group.release("a", [0, 1], 1.0) is None
    assert group.release("b", [0], 1.0) is None
    assert group.version == version


def test_a_hand_over_runs_out_after_the_owners_timeout() -> None:
    group = Group("g", 2)
    group.join("a", 10.0, 0.0, cooperative=True)
    group.join("b", 10.0, 1.0)
    group.touch("a", 10.5)
    group.touch("b", 10.5)
    assert group.deadline() == 11.0  # the hand-over began at 1.0, a's timeout is 10
    assert group.expire(10.9) == ([], None)
    expired, rebalance = group.expire(11.0)
    assert expired == []  # both alive: only the channel moves, without a's release
    assert rebalance.grants == {1: Lease("b", 3)}
    assert group.handovers == {}


def test_a_leaving_cooperative_member_hands_over_at_once() -> None:
    group = Group("g", 2)
    group.join("a", 10.0, 0.0, cooperative=True)
    group.join("b", 10.0, 1.0)
    rebalance = group.leave("a", 2.0)
    assert rebalance.grants == {0: Lease("b", 3), 1: Lease("b", 3)}
    assert group.handovers == {}


def test_a_heartbeat_marks_a_recovered_member_cooperative_again() -> None:
    group = Group("g", 2)
    group.join("a", 10.0, 0.0)
    group.touch("a", 1.0, cooperative=True)
    group.join("b", 10.0, 2.0)
    assert group.view("a").revoking == {1}


# -- a stream's claim ------------------------------------------------------------


def test_a_stream_owns_every_channel_and_members_are_refused_while_it_holds_the_group() -> None:
    group = Group("g", 3)
    rebalance = group.claim_stream("s", timeout=5.0, now=10.0)
    lease = Lease("s", 1)
    assert rebalance == Rebalance(dict.fromkeys(range(3), lease), (), "s")
    assert owners(group) == dict.fromkeys(range(3), "s") and group.members == {}
    with pytest.raises(GroupBusyError, match="consumed by stream s"):
        group.join("m", 30.0, now=11.0)
    assert (group.members, group.generation) == ({}, 1)  # the refusal changed nothing
    assert group.touch_stream("s", now=12.0, timeout=5.0) and group.deadline() == 17.0
    assert not group.touch_stream("other", now=12.0, timeout=5.0)


def test_a_stream_is_refused_while_the_group_has_members() -> None:
    group = Group("g", 2)
    group.join("m", 30.0, now=0.0)
    with pytest.raises(GroupBusyError, match=r"has members \(m\)"):
        group.claim_stream("s", 5.0, now=1.0)
    assert group.stream is None and owners(group) == {0: "m", 1: "m"}
    group.leave("m", now=2.0)
    assert set(group.claim_stream("s", 5.0, now=3.0).grants) == {0, 1}


def test_a_newer_stream_takes_the_group_and_the_older_ones_end_changes_nothing() -> None:
    group = Group("g", 2)
    group.claim_stream("old", 5.0, now=0.0)
    newer = group.claim_stream("new", 5.0, now=1.0)
    assert newer.grants == {0: Lease("new", 2), 1: Lease("new", 2)}
    assert group.end_stream("old") is None and group.stream.reader_id == "new"
    assert not group.touch_stream("old", now=2.0, timeout=5.0)
    ended = group.end_stream("new")
    assert ended == Rebalance({0: None, 1: None}, (), "new")
    assert group.stream is None and owners(group) == {0: None, 1: None}
    assert group.generation == 3
    group.join("m", 30.0, now=3.0)  # the group is free


def test_a_silent_stream_times_out_as_a_member_does() -> None:
    group = Group("g", 2)
    group.claim_stream("s", timeout=5.0, now=0.0)
    assert group.expire(5.0) == ([], None)  # silent for exactly its timeout: not yet
    expired, change = group.expire(5.1)
    assert expired == ["s"] and change == Rebalance({0: None, 1: None}, (), "s")
    assert group.stream is None and group.deadline() is None


def test_a_restarted_coordinator_knows_a_stream_from_a_member_by_the_channels_word() -> None:
    from raytopic.coordinator.groups import RECOVERED_TIMEOUT, recovered_groups

    stream = Lease("s", 4)
    # Channel 1 restarted without a store and was seeded the lease: it does not say
    # the lease is a stream's (its record came back empty); channel 0 does.
    cursors = [{"g": {"owner": stream, "stream": True}}, {"g": {"owner": stream}}]
    g = recovered_groups(2, cursors, [{}, {}], now=50.0)["g"]
    assert g.members == {}
    assert (g.stream.reader_id, g.stream.generation, g.stream.timeout) == (
        "s",
        4,
        RECOVERED_TIMEOUT,
    )
    assert g.leases == {0: stream, 1: stream} and g.generation == 5
    with pytest.raises(GroupBusyError):
        g.join("m", 30.0, now=51.0)
    # Its heartbeats tell the restarted coordinator its own timeout again.
    assert g.touch_stream("s", now=52.0, timeout=3.0) and g.deadline() == 55.0


def test_channels_that_came_back_unowned_go_to_the_stream() -> None:
    group = Group("g", 2)
    group.claim_stream("s", 5.0, now=0.0)
    group.leases[1] = None  # restarted without a store while the coordinator was down
    change = group.assign_unowned()
    assert change == Rebalance({1: Lease("s", 1)}, (), "s")
    assert group.assign_unowned() is None
