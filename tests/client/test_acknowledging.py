"""A reader's acknowledgements as a part: its small interface (no Ray call is
made when the checks refuse)."""

from __future__ import annotations

import pytest

import raytopic as rt
from raytopic.client.acknowledging import Acknowledgements


class _Role:
    """The membership side of the interface: may it acknowledge?"""

    def __init__(self, shared: bool) -> None:
        self.shared = shared
        self.asked = 0

    def check_acknowledging(self) -> None:
        self.asked += 1
        if not self.shared:
            raise rt.GroupModeError("only a shared group's members acknowledge elements")


def test_an_owned_member_is_refused_nacks_before_its_elements_are_looked_at() -> None:
    role = _Role(shared=False)
    acks = Acknowledgements("reader", "topic-id", role)
    for send in (lambda e: acks.nack(e, None), lambda e: acks.extend_hold(e, None)):
        with pytest.raises(rt.GroupModeError):
            send(None)  # type: ignore[arg-type]
    assert role.asked == 2


def test_any_reader_acks_only_its_own_elements() -> None:
    # An owned group's member acks too (its elements are marked done): the elements
    # are checked, the membership is not asked.
    role = _Role(shared=False)
    acks = Acknowledgements("reader", "topic-id", role)
    with pytest.raises(rt.InvalidTypeError):
        acks.ack(None)  # type: ignore[arg-type]
    assert role.asked == 0


def test_what_is_not_a_list_of_elements_is_a_type_error() -> None:
    acks = Acknowledgements("reader", "topic-id", _Role(shared=True))
    for bad in (None, "abc", {1: 2}, [1]):
        with pytest.raises(rt.InvalidTypeError):
            acks.ack(bad)  # type: ignore[arg-type]
