"""A member's view of its group: the pure rules (no Ray), and how views reach a
member on its heartbeat replies instead of on its receive path (real Ray)."""

from __future__ import annotations

import ray

import raytopic as rt
from raytopic.client.membership import KnownView
from raytopic.coordinator.groups import MemberView
from raytopic.core.protocol import Lease

from tests.topic_helpers import get, publish_all


def _view(version: int, *channels: int, generation: int = 1) -> MemberView:
    lease = Lease("m", generation)
    return MemberView("m", generation, version, dict.fromkeys(channels, lease), {})


# -- the pure rules --------------------------------------------------------------------


def test_the_first_view_is_told_even_when_it_assigns_nothing() -> None:
    membership = KnownView()
    assert membership.apply(_view(1)) == rt.OwnershipChange(
        frozenset(), frozenset(), frozenset(), frozenset()
    )
    assert membership.channels == ()


def test_views_tell_what_was_assigned_and_revoked_and_ignore_older_ones() -> None:
    membership = KnownView()
    assert membership.apply(_view(1, 0, 1, 2)).assigned == frozenset({0, 1, 2})
    change = membership.apply(_view(3, 1, 2, 3))
    assert change == rt.OwnershipChange(
        frozenset({3}), frozenset({0}), frozenset(), frozenset({1, 2, 3})
    )
    assert membership.apply(_view(2, 0)) is None  # older: ignored
    assert membership.apply(_view(4, 1, 2, 3)) is None  # same channels: nothing to tell
    assert (membership.channels, membership.version) == ((1, 2, 3), 4)
    assert membership.request_view() == (4, {c: Lease("m", 1) for c in (1, 2, 3)})


def test_a_timeout_loses_every_channel_once_and_a_rejoin_assigns_again() -> None:
    membership = KnownView()
    membership.apply(_view(1, 0, 1))
    assert membership.lose() == rt.OwnershipChange(
        frozenset(), frozenset(), frozenset({0, 1}), frozenset()
    )
    assert membership.timed_out and membership.channels == ()
    assert membership.lose() is None  # told already
    change = membership.apply(_view(5, 1, generation=3), rejoined=True)
    assert change == rt.OwnershipChange(frozenset({1}), frozenset(), frozenset(), frozenset({1}))
    assert not membership.timed_out and membership.generation == 3


def test_a_view_is_accepted_unless_older_and_a_rejoin_always() -> None:
    membership = KnownView()
    assert membership.accepts(_view(0))
    membership.apply(_view(4, 0))
    assert membership.accepts(_view(4)) and membership.accepts(_view(5))
    assert not membership.accepts(_view(3))
    assert membership.accepts(_view(1, generation=2), rejoined=True)


def test_a_timed_out_member_ignores_views_of_the_generation_it_lost() -> None:
    # A poll answered before the group dropped the member, and adopted after its
    # timeout was learned, carries the old generation: it must not give back a lease.
    membership = KnownView()
    membership.apply(_view(4, 0))
    membership.lose()
    assert not membership.accepts(_view(4, 0)) and not membership.accepts(_view(5, 0))
    assert membership.apply(_view(4, 0)) is None
    assert membership.timed_out and membership.channels == ()
    assert membership.apply(_view(6, 0, generation=2), rejoined=True) is not None
    assert membership.channels == (0,) and not membership.timed_out


# -- views on heartbeat replies (real Ray) ---------------------------------------------------


def test_a_member_hears_of_a_rebalance_without_calling_anything(make_topic, wait_until) -> None:
    topic = make_topic(channels=2)  # two: b's joining takes one of a's channels
    heard: list[rt.OwnershipChange] = []
    a = topic.subscriber(group="g", on_ownership_change=heard.append)
    version = a._member.version
    b = topic.subscriber(group="g")
    # Nothing is called on `a`: its waiting heartbeat came back with the new view.
    wait_until(lambda: a._member.version > version, timeout=5)
    assert len(heard) == 2 and heard[1].revoked == frozenset(b.channels)
    assert set(a.channels) | set(b.channels) == {0, 1}
    a.close()
    b.close()


def test_receives_never_ask_the_coordinator(make_topic) -> None:
    topic = make_topic(channels=2)
    member = topic.subscriber(group="g", complete_on_empty=True)
    anonymous = topic.subscriber(start="earliest", complete_on_empty=True)
    publish_all(topic, list(range(10)))
    # With the coordinator gone, data still flows: the receive path never touches it.
    ray.kill(topic._coordinator, no_restart=True)
    got = [e.value for e in get(member.receive_batch(10))]
    got += [e.value for e in get(member.receive_batch(10))]
    assert sorted(got) == list(range(10))
    assert sorted(e.value for e in anonymous) == list(range(10))
    assert get(member.receive()) is None
    anonymous.close()


def test_a_heartbeat_without_answer_names_a_stalled_process_not_the_coordinator() -> None:
    # Before: "no answer from the coordinator" also when this process had been
    # stopped (SIGSTOP, a debugger) past the wait, and the coordinator had answered.
    from raytopic.client.membership import STALL_SLACK, _no_answer_cause

    assert _no_answer_cause(0.0) == "no answer from the coordinator"
    assert _no_answer_cause(STALL_SLACK) == "no answer from the coordinator"
    stalled = _no_answer_cause(62.4)
    assert stalled.startswith("this process did not run for 62 s")
    assert "coordinator" not in stalled
