"""Unit tests of commit_guards (no Ray): what runs before a commit of a reader sent
from this process, and how far a resequenced commit may then go."""

from __future__ import annotations

import gc

from raytopic.core.commit_guards import Floors, before_commit, guard_commits, lowered


class _Handle:
    def __init__(self, floors: Floors) -> None:
        self.floors = floors
        self.told = 0

    def tell(self) -> Floors:
        self.told += 1
        return self.floors


def test_the_guard_of_a_live_handle_runs_and_says_how_far_commits_go() -> None:
    handle = _Handle({0: 9})
    guard_commits("reader-a", handle.tell)
    assert before_commit("reader-a") == {0: 9}
    assert handle.told == 1
    assert before_commit("reader-unknown") is None


def test_a_handle_gone_runs_no_guard() -> None:
    handle = _Handle({0: 9})
    guard_commits("reader-b", handle.tell)
    del handle
    gc.collect()
    assert before_commit("reader-b") is None


def test_lowered_bounds_only_a_resequenced_commit_at_a_floored_channel() -> None:
    assert lowered(12, {0: 9}, 0) == 9
    assert lowered(5, {0: 9}, 0) == 5
    assert lowered(12, {0: 9}, 1) == 12
    assert lowered(12, None, 0) == 12
    assert lowered(None, {0: 9}, 0) is None  # no mark: not a resequencing reader's
