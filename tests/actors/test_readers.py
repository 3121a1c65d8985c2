"""Unit tests of Readers (no Ray): opening and closing readers, the one dispatch that picks
a reader's mode by its group's kind, takes by position in each mode, fetch waits and what
ends them, watches, a lost host's successor reading again, and commits that release
elements."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import cloudpickle
import pytest

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_state import ChannelState
from raytopic.actors.reader_parts import Reader
from raytopic.actors.readers import Readers, spec_from_state, spec_state
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import GroupModeError, GroupNotFoundError, SubscriberClosedError
from raytopic.core.payloads import PickledValues
from raytopic.core.protocol import Delivery, Lease, ReaderSpec, Take
from raytopic.core.records import CommitStatus
from raytopic.core.shared_group import SharedGroup

MEMBER = Lease("m", 1)
WORKER = Lease("w", 1)
ANONYMOUS = ReaderSpec(None, False)


class _Channel:
    """Readers of one channel with an owned group "g" (owned by "m") and a shared group "s"."""

    def __init__(self, *, retain: bool = True) -> None:
        config = TopicConfig("t", "ns", "t0pic1d", 1, 100, retain, None, Overflow.BLOCK, ())
        self.context = ChannelContext(config, 0, ChannelMetrics("t", 0))
        self.log = ChannelLog(self.context)
        self.state = ChannelState(self.context, lambda: self.log.next_sequence, lambda: None)
        self.views: dict[str, dict[str, tuple[int, dict[int, Lease]]]] = {}
        self.closed: list[str] = []
        self.readers = Readers(self.context, self.log, self.state, self.views, self._closed_reader)
        self.readers.owned.ensure_group("g", False)
        self.readers.owned.grant("g", MEMBER)
        self.readers.shared.start(SharedGroup("s"), start_latest=False)

    def _closed_reader(self, reader: Reader) -> None:
        self.closed.append(reader.reader_id)

    def append(self, values: Sequence[Any]) -> None:
        self.log.ring.append(PickledValues.from_values(values), overwrite=True)
        self.context.notify()

    def open_all(self) -> None:
        """Anonymous "a", owned member "m", shared worker "w"."""
        self.readers.open("a", ANONYMOUS)
        self.readers.open("m", ReaderSpec("g", False))
        self.readers.open("w", ReaderSpec("s", False))


def _values(delivery: Delivery) -> list[Any]:
    return [value for chunk in delivery.chunks for value in chunk.payload.decode()]


# -- opening and closing ---------------------------------------------------------------------------


def test_open_gives_an_anonymous_reader_its_own_cursor_once_and_members_none() -> None:
    channel = _Channel()
    channel.append(range(3))
    state, created = channel.readers.open("early", ANONYMOUS)
    assert created and state.next == 0
    state, created = channel.readers.open("late", ReaderSpec(None, True))
    assert created and state.next == 3
    state, created = channel.readers.open("early", ReaderSpec(None, True))
    assert not created and state.next == 0  # open again: the same reader
    channel.readers.open("m", ReaderSpec("g", False))
    assert channel.readers.get("m").cursor is None  # it reads its group's
    with pytest.raises(GroupNotFoundError):
        channel.readers.open("x", ReaderSpec("missing", False))
    assert "x" not in channel.readers.by_id


def test_open_loads_the_reader_s_filter_and_converter() -> None:
    async def main() -> None:
        channel = _Channel()
        channel.append(range(6))
        spec = ReaderSpec(
            None,
            False,
            filter=cloudpickle.dumps(lambda value: value > 3),
            converter=cloudpickle.dumps(str),
        )
        channel.readers.open("a", spec)
        assert _values(await channel.readers.take(Take("a", None, 10, 0.0))) == ["4", "5"]

    asyncio.run(main())


def test_close_forgets_the_reader_once_and_a_shared_member_s_elements_go_back() -> None:
    async def main() -> None:
        channel = _Channel()
        channel.open_all()
        channel.append(range(2))
        await channel.readers.take(Take("w", WORKER, 2, 0.0))
        assert channel.readers.close("w")
        assert not channel.readers.close("w")
        assert channel.closed == ["w"]
        cursor = channel.readers.shared.cursor("s")
        assert cursor.unacked == 0 and sorted(cursor.waiting) == [0, 1]
        with pytest.raises(SubscriberClosedError):
            channel.readers.get("w")
        channel.readers.close_group("g")
        assert channel.closed == ["w", "m"] and "a" in channel.readers.by_id

    asyncio.run(main())


# -- the dispatch ----------------------------------------------------------------------------------


def test_the_mode_is_picked_by_the_kind_of_the_reader_s_group() -> None:
    async def main() -> None:
        channel = _Channel()
        channel.open_all()
        readers = channel.readers
        assert readers.mode(readers.get("a")) is readers.owned
        assert readers.mode(readers.get("m")) is readers.owned
        assert readers.mode(readers.get("w")) is readers.shared
        assert readers.has_shared_groups
        channel.append(range(4))
        member = await readers.take(Take("m", MEMBER, 2, 0.0))
        worker = await readers.take(Take("w", WORKER, 2, 0.0))
        assert _values(member) == [0, 1] and member.origin.shared is False
        assert _values(worker) == [0, 1] and worker.origin.shared is True
        assert readers.state("w", WORKER).unacked == 2  # the shared group's figures
        assert readers.state("m", MEMBER).next == 2  # the group cursor's

    asyncio.run(main())


def test_commit_and_seek_are_refused_only_to_a_shared_group_s_members() -> None:
    channel = _Channel()
    channel.open_all()
    readers = channel.readers
    channel.append(range(3))
    with pytest.raises(GroupModeError, match="cannot commit"):
        readers.commit("w", 0, WORKER)
    with pytest.raises(GroupModeError, match="cannot seek"):
        readers.seek("w", WORKER, 0, False, False)
    assert readers.commit("m", 0, MEMBER).status is CommitStatus.COMMITTED
    assert readers.commit("closed", 0, None).status is CommitStatus.NOT_OWNER
    assert readers.seek("a", None, 1, False, False)[0] == 1
    with pytest.raises(SubscriberClosedError):
        readers.seek("closed", None, 0, False, False)


def test_a_take_reaches_the_reader_s_mode_an_owned_one_by_position_a_shared_one_as_holds() -> None:
    async def main() -> None:
        channel = _Channel()
        channel.open_all()
        channel.append(range(3))
        readers = channel.readers
        owned = await readers.take(Take("m", MEMBER, 3, 0.0))
        assert (owned.next, owned.stands) == (3, 3)
        # Its session handed over one: the read position goes back to 1.
        again = await readers.take(Take("m", MEMBER, 5, 0.0, 1, owned.stands, owned.jumps))
        assert _values(again) == [1, 2]
        shared = await readers.take(Take("w", WORKER, 3, 0.0, 1, 0, 0))  # no position there
        assert _values(shared) == [0, 1, 2] and readers.shared.cursor("s").unacked == 3

    asyncio.run(main())


# -- fetches and watches ---------------------------------------------------------------------------


def test_a_fetch_waits_for_data_and_takes_it() -> None:
    async def main() -> None:
        channel = _Channel()
        channel.open_all()
        fetch = asyncio.ensure_future(channel.readers.take(Take("a", None, 5, 2.0)))
        await asyncio.sleep(0.05)
        assert not fetch.done()
        channel.append(["x"])
        assert _values(await asyncio.wait_for(fetch, 1.0)) == ["x"]

    asyncio.run(main())


def test_a_fetch_whose_read_position_another_take_moves_takes_nothing() -> None:
    async def main() -> None:
        channel = _Channel()
        channel.open_all()
        fetch = asyncio.ensure_future(channel.readers.take(Take("a", None, 5, 5.0)))
        await asyncio.sleep(0.05)  # it waits for data at 0
        channel.append(["x"])
        direct = await channel.readers.take(Take("a", None, 5, 0.0))  # before it wakes
        assert _values(direct) == ["x"]
        assert (await asyncio.wait_for(fetch, 0.5)).count == 0
        channel.append(["y"])
        assert _values(await channel.readers.take(Take("a", None, 5, 0.0))) == ["y"]

    asyncio.run(main())


def test_a_shared_members_fetches_wait_side_by_side_and_each_takes_what_is_free() -> None:
    async def main() -> None:
        channel = _Channel()
        channel.open_all()
        readers = channel.readers
        first = asyncio.ensure_future(readers.take(Take("w", WORKER, 1, 5.0)))
        second = asyncio.ensure_future(readers.take(Take("w", WORKER, 1, 5.0)))
        await asyncio.sleep(0.05)
        channel.append(["x", "y"])
        taken = await asyncio.wait_for(asyncio.gather(first, second), 1.0)
        assert sorted(v for d in taken for v in _values(d)) == ["x", "y"]

    asyncio.run(main())


def test_watch_returns_when_the_state_changes_or_at_its_timeout() -> None:
    async def main() -> None:
        channel = _Channel()
        channel.open_all()
        known = channel.readers.state("a", None)
        started = time.monotonic()
        same = await channel.readers.watch("a", None, known, 0.1)
        assert same == known and time.monotonic() - started >= 0.1
        watching = asyncio.ensure_future(channel.readers.watch("a", None, known, 5.0))
        await asyncio.sleep(0.05)
        assert not watching.done()
        channel.append(["x"])
        changed = await asyncio.wait_for(watching, 1.0)
        assert changed.tail == 0 and changed.available
        # A state other than the one known comes back at once.
        assert await asyncio.wait_for(channel.readers.watch("a", None, known, 5.0), 0.1)

    asyncio.run(main())


def test_a_lost_host_s_successor_reads_again_after_an_owned_group_s_commit_only() -> None:
    async def main() -> None:
        channel = _Channel()
        channel.open_all()
        channel.append(range(3))
        readers = channel.readers
        await readers.take(Take("m", MEMBER, 3, 0.0))
        await readers.take(Take("w", WORKER, 3, 0.0))
        again = await readers.take(Take("m", MEMBER, 3, 0.0, again=True))
        assert _values(again) == [0, 1, 2]
        # A shared member's holds are its record: they come back when their ack
        # deadline passes, not because a take says so.
        assert (await readers.take(Take("w", WORKER, 3, 0.0, again=True))).count == 0
        assert readers.shared.cursor("s").unacked == 3

    asyncio.run(main())


# -- positions and state ---------------------------------------------------------------------------


def test_commits_moved_without_retain_releases_what_every_group_settled() -> None:
    async def main() -> None:
        channel = _Channel(retain=False)
        channel.open_all()
        channel.append(range(6))
        readers = channel.readers
        await readers.take(Take("m", MEMBER, 6, 0.0))
        readers.owned.commit(readers.get("m"), 4, MEMBER)
        shared = await readers.take(Take("w", WORKER, 3, 0.0))
        readers.shared.ack("w", tuple((s, n, 1) for s, n in shared.entries()[:2]))
        readers.commits_moved()
        assert channel.log.ring.head == 2  # the shared group settled 0..1 only
        readers.shared.ack("w", tuple((s, n, 1) for s, n in shared.entries()[2:]))
        readers.commits_moved()
        assert channel.log.ring.head == 3

    asyncio.run(main())


def test_commits_moved_with_retain_keeps_every_element() -> None:
    async def main() -> None:
        channel = _Channel(retain=True)
        channel.open_all()
        channel.append(range(3))
        await channel.readers.take(Take("m", MEMBER, 3, 0.0))
        channel.readers.owned.commit(channel.readers.get("m"), 2, MEMBER)
        channel.readers.shared.destroy("s")
        channel.readers.commits_moved()
        assert channel.log.ring.head == 0

    asyncio.run(main())


def test_the_readers_state_brings_back_anonymous_positions_and_skips_what_cannot_open() -> None:
    async def main() -> None:
        channel = _Channel()
        channel.open_all()
        channel.readers.open("gone", ReaderSpec("g", False))
        channel.append(range(5))
        await channel.readers.take(Take("a", None, 3, 0.0))
        saved = {reader: channel.readers.state_of(reader) for reader in ("a", "m", "gone")}
        assert channel.readers.state_of("never") is None

        again = _Channel()
        again.readers.owned.groups.pop("g")  # its group was destroyed meanwhile
        again.append(range(5))
        again.readers.restore_state(saved)
        assert sorted(again.readers.by_id) == ["a"]
        assert again.readers.state("a", None).next == 3
        assert again.readers.specs() == {"a": ANONYMOUS}

    asyncio.run(main())


def test_a_reader_spec_is_kept_as_named_plain_fields_its_functions_as_their_pickles() -> None:
    spec = ReaderSpec(
        "g",
        True,
        filter=cloudpickle.dumps(lambda v: v > 1),
        converter=None,
        complete_on_empty=True,
        window=7,
        resequence=b"\x00opaque",
        skip_poison=True,
    )
    kept = spec_state(spec)
    assert json.loads(json.dumps(kept)) == kept  # plain JSON: no class of ours pickled
    assert (kept["group"], kept["start_latest"], kept["window"], kept["converter"]) == (
        "g",
        True,
        7,
        None,
    )
    assert spec_from_state(json.loads(json.dumps(kept))) == spec
    assert spec_from_state(spec_state(ANONYMOUS)) == ANONYMOUS
