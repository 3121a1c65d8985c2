"""A subscriber's place in its group: the null object for anonymous readers and the
owned/shared dispatch (no Ray), and a member's view reaching its receives (real Ray)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import raytopic as rt
from raytopic.client.group_member import (
    GroupMember,
    Membership,
    NoMembership,
    SharedGroupMember,
    membership_for,
)
from raytopic.client.subscriber_options import SubscriberOptions
from raytopic.core.protocol import ReaderSpec

from tests.topic_helpers import get, key_for, publish_all

_TOPIC = SimpleNamespace(channel_count=3, _coordinator=None)
"""Enough of a topic for what these members do without calling the coordinator."""


def _member(group: str | None, mode: str = "owned") -> Membership:
    options = SubscriberOptions.check(group=group, mode=mode)
    return membership_for(_TOPIC, options, "m" * 32)  # type: ignore[arg-type]


# -- the null object ---------------------------------------------------------------------------


def test_an_anonymous_reader_owns_every_channel_and_holds_no_lease() -> None:
    anonymous = _member(None)
    assert isinstance(anonymous, NoMembership)
    assert (anonymous.group, anonymous.mode) == (None, "owned")
    assert anonymous.owned() == anonymous.current_channels() == (0, 1, 2)
    assert anonymous.lease(1) is None
    assert anonymous.lease(1, required=True, refresh=True) is None  # nothing fences it
    assert anonymous.before_receive() is None  # a receive carries no view


def test_an_anonymous_reader_registers_as_it_is_and_has_nothing_to_keep_alive() -> None:
    anonymous = _member(None)
    spec = ReaderSpec(None, True, window=3)
    assert anonymous.prepare(spec) is spec
    anonymous.start(object(), attached=False)  # type: ignore[arg-type]
    anonymous.track(object())  # type: ignore[arg-type]
    anonymous.heartbeat()
    anonymous.stop()
    anonymous.leave()


def test_an_anonymous_reader_commits_and_seeks_but_does_not_acknowledge() -> None:
    anonymous = _member(None)
    anonymous.check_positions("commit")
    with pytest.raises(rt.GroupModeError, match="commit"):
        anonymous.check_acknowledging()


# -- owned and shared groups --------------------------------------------------------------------


def test_the_mode_picks_the_kind_of_member() -> None:
    owned, shared = _member("g"), _member("g", "shared")
    assert type(owned) is GroupMember and (owned.group, owned.mode) == ("g", "owned")
    assert type(shared) is SharedGroupMember and (shared.group, shared.mode) == ("g", "shared")


def test_an_owned_members_positions_and_a_shared_members_acknowledgements() -> None:
    owned, shared = _member("g"), _member("g", "shared")
    owned.check_positions("seek")
    shared.check_acknowledging()
    with pytest.raises(rt.GroupModeError, match="cannot seek"):
        shared.check_positions("seek")
    with pytest.raises(rt.GroupModeError, match="commit"):
        owned.check_acknowledging()


def test_a_member_without_a_view_owns_nothing_and_asks_no_one_for_a_lease() -> None:
    member = _member("g")
    assert member.version == -1
    assert member.owned() == member.current_channels() == ()  # not silent: no call
    assert member.lease(0) is None
    member.stop()  # before its heartbeats ever started


# -- a member's views reach its receives (real Ray) ---------------------------------------------


def test_a_reset_raises_the_receives_jump_counts_without_a_call(make_topic, wait_until) -> None:
    # One channel: a reset moves every channel of the group alike, and what is checked
    # is that the member's receives hear of it without a call.
    topic = make_topic(channels=1)
    publish_all(topic, list(range(4)))
    member = topic.subscriber(group="g")
    jumps = member._receives.stale
    before = [jumps.count(c) for c in range(topic.channel_count)]
    topic.reset_group("g", "latest")
    # Nothing is called on the member: its waiting heartbeat came back with the reset.
    wait_until(lambda: all(jumps.count(c) > n for c, n in enumerate(before)), timeout=10)
    member.close()


def test_a_cooperative_member_hands_a_channel_over_only_after_its_commit(
    make_topic, wait_until
) -> None:
    # a holds both channels and has the first element of channel 1 in hand when b
    # joins: channel 1 must not reach b before a committed that element.
    topic = make_topic(channels=2)
    publish_all(topic, ["first", "second", "third"], key=key_for(1, 2))
    a = topic.subscriber(group="g", cooperative=True, complete_on_empty=True)
    (in_hand,) = get(a.receive_batch(1))
    assert (in_hand.channel, in_hand.value) == (1, "first")
    b = topic.subscriber(group="g", complete_on_empty=True)
    assert a.channels == (0, 1)
    assert b.channels == ()  # nothing moved yet: a holds channel 1 until it releases it
    wait_until(lambda: a.revoking == (1,))
    assert in_hand.commit().status is rt.CommitStatus.COMMITTED
    a.release()
    assert (a.channels, a.revoking) == ((0,), ())
    wait_until(lambda: b.channels == (1,))
    # b starts right after a's commit: what a had in hand never reaches b.
    assert [element.value for element in b] == ["second", "third"]
    a.close()
    b.close()


def test_a_member_that_is_not_cooperative_loses_a_moving_channel_at_once(make_topic) -> None:
    topic = make_topic(channels=2)
    a = topic.subscriber(group="g", complete_on_empty=True)
    b = topic.subscriber(group="g", complete_on_empty=True)
    assert (a.channels, b.channels, a.revoking) == ((0,), (1,), ())
    with pytest.raises(rt.InvalidTypeError, match="cooperative"):
        topic.subscriber(group="g", cooperative=1)
    a.close()
    b.close()
