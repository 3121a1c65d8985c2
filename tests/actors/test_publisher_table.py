"""Unit tests of PublisherTable (no Ray): retries answered with their first ack,
stale batches refused, idle publishers forgotten with their turns, once-writers kept."""

from __future__ import annotations

import asyncio

import pytest

from raytopic.actors.publisher_table import (
    PUBLISHER_IDLE_S,
    PUBLISHER_SWEEP_S,
    PUBLISHERS_KEPT,
    PublisherTable,
)
from raytopic.actors.publisher_tracks import ACKS_KEPT
from raytopic.actors.stores.base import StoredBatch
from raytopic.core.errors import InvalidArgumentError, TopicFullError
from raytopic.core.payloads import PickledValues
from raytopic.core.protocol import AppendAck


def _appended(table: PublisherTable, publisher_id: str, batch: int, first: int = 0) -> None:
    """``batch`` of ``publisher_id`` went in, in its turn."""
    _all_appended(table, [publisher_id], batch, first)


def _all_appended(
    table: PublisherTable, publisher_ids: list[str], batch: int, first: int = 0
) -> None:
    """``batch`` of each of ``publisher_ids`` went in, in its turn, one after another
    (in one event loop: ten thousand loops of their own took a second)."""

    async def append() -> None:
        for publisher_id in publisher_ids:
            async with table.turn(publisher_id, batch):
                table.remember(publisher_id, batch, AppendAck(first, 1, 1.0))

    asyncio.run(append())


def test_a_retried_batch_gets_the_ack_it_got_the_first_time() -> None:
    table = PublisherTable(0)
    _appended(table, "p", 0, first=7)
    assert table.earlier_ack("p", 0, 1) == AppendAck(7, 1, 1.0)
    assert table.earlier_ack("p", 1, 1) is None  # the next batch: new
    assert table.earlier_ack("q", 0, 1) is None  # a publisher never seen: new


def test_a_batch_older_than_the_acks_kept_is_refused() -> None:
    table = PublisherTable(0)
    for batch in range(ACKS_KEPT + 5):
        _appended(table, "p", batch)
    with pytest.raises(InvalidArgumentError, match="stale"):
        table.earlier_ack("p", 0, 1)
    # A recent batch with no record was refused whole before a restart: nothing went in.
    del table.tracks["p"].acks[ACKS_KEPT + 4]
    ack = table.earlier_ack("p", ACKS_KEPT + 4, 1)
    assert ack is not None and (ack.first, ack.accepted) == (-1, 0)
    assert isinstance(ack.error, TopicFullError)


def test_a_retry_of_a_batch_the_store_kept_in_part_says_what_was_not_appended() -> None:
    table = PublisherTable(3)
    values = PickledValues.from_values(["a", "b"])
    table.learn(StoredBatch(10, 1.0, values, 1, "p", 0))  # recovered: 2 of 5 went in
    table.resume_turns()
    ack = table.earlier_ack("p", 0, 5)
    assert ack is not None and (ack.first, ack.accepted) == (10, 2)
    assert isinstance(ack.error, TopicFullError) and "3 of 5" in str(ack.error)


def test_a_batch_open_at_a_restart_is_resumed_before_the_publisher_s_later_ones() -> None:
    """Its retry appends the rest (not answered from the store), in its turn."""
    table = PublisherTable(3)
    values = PickledValues.from_values(["a", "b"])
    table.restore_state({"p": [0, [], 0], "w": [-1, [], 0]})  # open: "w" stored nothing yet
    table.learn(StoredBatch(10, 1.0, values, 1, "p", 0))
    table.resume_turns()
    assert table.earlier_ack("p", 0, 5) is None and table.turns.expected("p") == 0
    assert table.stored("p", 0) == AppendAck(10, 2, 1.0)
    assert table.earlier_ack("w", 0, 5) is None and table.turns.expected("w") == 0
    # A batch open in a state written before a later batch's record: it had ended.
    ended = PublisherTable(3)
    ended.restore_state({"p": [0, [[0, [[10, 2, 1.0]]]], 0]})
    ended.learn(StoredBatch(12, 1.1, values, 1, "p", 1))
    ended.resume_turns()
    ack = ended.earlier_ack("p", 0, 5)
    assert ack is not None and isinstance(ack.error, TopicFullError)
    assert ended.stored("p", 0) is None and ended.turns.expected("p") == 2


def test_an_append_once_writer_skips_versions_and_never_appends_one_twice() -> None:
    table = PublisherTable(0)
    assert not table.has_version("once:w", 5)  # its turn moves to 5 (no wait for 0-4)
    _appended(table, "once:w", 5)
    assert table.has_version("once:w", 5) and table.has_version("once:w", 3)
    assert not table.has_version("once:w", 9)


def test_an_append_once_version_that_ended_short_is_not_had_and_runs_again_in_its_turn() -> None:
    """Open after it ended short (``Appends`` keeps it so): its re-run goes in its turn
    again for the rest, through a state write and a restart too; once a later version
    went in, it is had."""
    table = PublisherTable(0)
    assert not table.has_version("once:w", 5)
    _appended(table, "once:w", 5)  # 1 value went in, the rest was refused
    table.open("once:w", 5)
    assert table.turns.expected("once:w") == 6
    assert not table.has_version("once:w", 5)
    assert table.turns.expected("once:w") == 5  # its re-run may take the turn again
    assert table.stored("once:w", 5) == AppendAck(0, 1, 1.0)  # the rest goes after it
    assert table.earlier_ack("once:w", 5, 3) is None

    restarted = PublisherTable(0)
    restarted.restore_state(dict(table.states()))
    restarted.resume_turns()
    assert not restarted.has_version("once:w", 5) and restarted.turns.expected("once:w") == 5
    assert restarted.stored("once:w", 5) == AppendAck(0, 1, 1.0)
    _appended(restarted, "once:w", 6)  # the writer moved on: 5 is had
    assert restarted.has_version("once:w", 5)


def test_long_idle_publishers_are_forgotten_with_their_turns_a_sweep_interval_apart() -> None:
    changed: list[str] = []
    table = PublisherTable(0, changed.append)
    _all_appended(table, [f"p{publisher}" for publisher in range(PUBLISHERS_KEPT)], 0)
    # Half of them went quiet long ago (their tracks aged, as a clock would).
    for publisher in range(PUBLISHERS_KEPT // 2):
        table.tracks[f"p{publisher}"].seen -= PUBLISHER_IDLE_S + 1
    table.swept -= PUBLISHER_SWEEP_S + 1
    changed.clear()
    _appended(table, "newest", 0)
    assert len(table) == PUBLISHERS_KEPT // 2 + 1
    assert len(table.turns._streams) == len(table)
    assert "p0" not in table and "newest" in table
    assert "p0" in changed and "newest" in changed  # the state forgets them too
    # A forgotten publisher that comes back is a new sender: its batch 0 goes in.
    assert table.earlier_ack("p0", 0, 1) is None
    _appended(table, "p0", 0)
    # The next look comes a sweep interval later, not on every append.
    last = f"p{PUBLISHERS_KEPT - 1}"
    table.tracks[last].seen -= PUBLISHER_IDLE_S + 1
    _appended(table, "another", 0)
    assert last in table


def test_once_writers_are_never_forgotten_for_idleness() -> None:
    table = PublisherTable(0)
    # A once-writer asks first, as the channel does: its turn moves to 5 (no 5 s
    # wait for versions 0-4, which it skipped).
    assert not table.has_version("once:q", 5)
    _appended(table, "once:q", 5)
    _appended(table, "p", 0)
    for track in table.tracks.values():
        track.seen -= PUBLISHER_IDLE_S + 1
    table.forget_idle(table.tracks["p"].seen + PUBLISHER_IDLE_S + 1)
    assert "p" not in table
    assert table.tracks["once:q"].last_batch == 5


def test_the_state_keeps_each_track_and_forgets_a_forgotten_one() -> None:
    table = PublisherTable(0)
    _appended(table, "p", 0, first=4)
    saved = dict(table.states())
    restored = PublisherTable(0)
    restored.restore_state(saved)
    restored.resume_turns()
    assert restored.earlier_ack("p", 0, 1) == AppendAck(4, 1, 1.0)
    assert restored.state_of("gone") is None
