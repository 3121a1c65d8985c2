"""Unit tests of a transaction's consumed commit (no Ray): its done runs."""

from __future__ import annotations

from raytopic.core.protocol import ConsumedCommit, Lease

COMMIT = ConsumedCommit("r", 4, Lease("m", 1), 2)


def test_the_positions_consumed_above_the_commit_are_its_done_runs() -> None:
    consumed = {9, 2, 4, 6, 7, 8, 12}
    assert COMMIT.with_done(consumed).done == ((6, 9), (12, 12))


def test_a_commit_with_nothing_consumed_above_it_is_itself() -> None:
    assert COMMIT.with_done([1, 3, 4]) is COMMIT
    assert COMMIT.with_done([]) is COMMIT
