"""Unit tests of a transaction's consumed commit (no Ray): its done runs."""

from __future__ import annotations

from raytopic.core.protocol import ConsumedCommit, Lease

COMMIT = ConsumedCommit("r", 4, Lease("m", 1), 2)


def test_the_positions_consumed_are_its_done_runs() -> None:
    # All of them, at or below its sequence too: a channel that holds the commit below
    # an element a dropped reply carried makes done what was consumed above it
    # (Cursor.consumed), and clips the rest.
    consumed = {9, 2, 4, 6, 7, 8, 12}
    assert COMMIT.with_done(consumed).done == ((2, 2), (4, 4), (6, 9), (12, 12))


def test_a_commit_with_nothing_consumed_is_itself() -> None:
    assert COMMIT.with_done([]) is COMMIT
