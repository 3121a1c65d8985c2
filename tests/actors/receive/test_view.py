"""Unit tests of OwnedView (no Ray): newer views only, what is forgotten when a
channel changes hands, leases, scope and the window's room."""

from __future__ import annotations

from raytopic.actors.receive.view import OwnedView
from raytopic.core.protocol import CursorState, Lease

from tests.actors.receive.fake_channels import delivery

OLD, NEW = Lease("m", 1), Lease("m", 2)


def test_an_older_view_is_ignored() -> None:
    view = OwnedView({}, host=0, window=None)
    assert view.update(3, {0: OLD})
    assert not view.update(2, {1: OLD})
    assert not view.update(3, {1: OLD})
    assert view.leases == {0: OLD}


def test_a_new_view_forgets_only_the_channels_that_changed_hands() -> None:
    view = OwnedView({0: OLD, 1: OLD, 2: OLD}, host=0, window=None)
    for channel in (0, 1, 2):
        view.learn(delivery(channel, 5, 1, OLD))
    view.update(1, {0: OLD, 1: NEW})  # 1 granted anew, 2 lost
    assert sorted(view.known) == [0]
    assert view.holds(0, OLD) and view.holds(1, NEW) and not view.holds(1, OLD)
    assert not view.owns(2) and view.lease_of(2) is None


def test_a_dropped_channel_is_neither_owned_nor_known() -> None:
    view = OwnedView({0: None, 1: None}, host=1, window=None)
    view.learn(delivery(1, 0, 3))
    view.drop(1)
    assert view.scope(here_only=False) == [0]
    assert view.scope(here_only=True) == []
    assert 1 not in view.known


def test_unknown_channels_may_have_data_and_known_empty_ones_have_none() -> None:
    view = OwnedView({0: None, 1: None}, host=0, window=None)
    assert view.any_maybe_available(here_only=False) and not view.known_available(False)
    view.known[0] = CursorState(4, 3, 3, 0)  # empty
    view.known[1] = CursorState(4, 3, 9, 0)
    assert not view.maybe_available(0) and view.maybe_available(1)
    assert view.known_available(here_only=False) and not view.known_available(here_only=True)


def test_room_counts_the_unacknowledged_elements_of_owned_channels_only() -> None:
    view = OwnedView({0: None, 1: None}, host=0, window=10)
    view.known[0] = CursorState(4, 3, 9, 0, unacked=3)
    view.known[1] = CursorState(4, 3, 9, 0, unacked=4)
    view.known[7] = CursorState(4, 3, 9, 0, unacked=100)  # not owned: not counted
    assert view.room() == 3
