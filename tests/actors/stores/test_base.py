"""Unit tests of the store adapter's state defaults (no Ray): ``append_state`` over a user's
store with ``save_state``/``load_state`` only, with neither, and with its own."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest

from raytopic.actors.stores.base import OPTIONAL_METHODS, ChannelStore
from raytopic.actors.stores.state_log import StateChange
from raytopic.core.errors import StoreError

from tests.seed_store import SeedStore

START = {"epoch": 1, "groups": {"a": {"next": 0}}, "publishers": {"p": [0, []]}}


class SavingStore(SeedStore):
    """A user's store that keeps its state whole (a copy, as if written to a file)."""

    def __init__(self, saved: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.saved = copy.deepcopy(saved)
        self.saves: list[dict[str, Any]] = []
        self.fail = False

    def save_state(self, state: dict[str, Any]) -> None:
        if self.fail:
            raise StoreError("disk full")
        self.saves.append(state)
        self.saved = copy.deepcopy(state)

    def load_state(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.saved)


def commit(group: str, position: int) -> list[StateChange]:
    return [StateChange("groups", group, {"next": position + 1})]


def test_append_state_is_an_optional_method() -> None:
    assert "append_state" in OPTIONAL_METHODS


def test_a_store_with_save_and_load_gets_the_whole_state_each_change() -> None:
    user = SavingStore()
    store = ChannelStore(user)
    store.save_state(copy.deepcopy(START))
    store.append_state(commit("a", 4))
    store.append_state([*commit("b", 0), StateChange("epoch", None, 2)])
    expected = {**START, "epoch": 2, "groups": {"a": {"next": 5}, "b": {"next": 1}}}
    assert user.saved == expected
    assert store.load_state() == expected
    assert len(user.saves) == 3
    # A state handed to save_state is never altered afterwards (the store may keep it).
    assert user.saves[0] == START
    assert user.saves[1]["groups"] == {"a": {"next": 5}}


def test_the_state_is_loaded_from_the_store_once() -> None:
    user = SavingStore(START)  # a restart: the state is the store's
    store = ChannelStore(user)
    store.append_state(commit("a", 1))
    store.append_state(commit("a", 2))
    assert user.saved == {**START, "groups": {"a": {"next": 3}}}
    user.saved = {"epoch": 99}  # not read again: the adapter applies to what it saved
    store.append_state(commit("a", 3))
    assert user.saved == {**START, "groups": {"a": {"next": 4}}}


def test_a_failed_save_leaves_the_state_as_it_was() -> None:
    user = SavingStore(START)
    store = ChannelStore(user)
    user.fail = True
    with pytest.raises(StoreError):
        store.append_state(commit("a", 1))
    user.fail = False
    store.append_state(commit("b", 1))
    assert user.saved == {**START, "groups": {"a": {"next": 0}, "b": {"next": 2}}}


def test_save_state_replaces_what_changes_apply_to() -> None:
    user = SavingStore(START)
    store = ChannelStore(user)
    store.append_state(commit("a", 1))
    store.save_state({"epoch": 2, "groups": {}})  # a new epoch
    store.append_state(commit("c", 0))
    assert user.saved == {"epoch": 2, "groups": {"c": {"next": 1}}}


def test_a_store_without_state_methods_keeps_the_state_in_memory() -> None:
    store = ChannelStore(SeedStore())
    assert store.load_state() is None
    store.append_state(commit("a", 0))
    assert store.load_state() == {"groups": {"a": {"next": 1}}}
    store.save_state(copy.deepcopy(START))
    store.append_state(commit("a", 7))
    assert store.load_state() == {**START, "groups": {"a": {"next": 8}}}


def test_a_store_with_its_own_append_state_gets_the_changes() -> None:
    class LoggingStore(SavingStore):
        def __init__(self) -> None:
            super().__init__()
            self.appended: list[list[StateChange]] = []

        def append_state(self, changes: Sequence[StateChange]) -> None:
            self.appended.append(list(changes))

    user = LoggingStore()
    store = ChannelStore(user)
    store.save_state(START)
    store.append_state(commit("a", 1))
    assert user.appended == [commit("a", 1)]
    assert user.saves == [START]  # no whole state per change
