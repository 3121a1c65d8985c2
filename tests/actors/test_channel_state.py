"""Unit tests of ChannelState (no Ray): a write carries only the keys touched (plus the
epoch and next sequence), a key gone is deleted, no store means no writes, a failed write
fails the channel, and the snapshot and the stored state agree (a user's in-memory store
through ChannelStore, and a real segment log)."""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_state import SECTIONS, STATE_VERSION, ChannelState, Keep
from raytopic.actors.stores.base import ChannelStore
from raytopic.actors.stores.segment_log import SegmentLogStore
from raytopic.actors.stores.state_log import StateChange
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import ChannelFailedError, StoreError
from raytopic.core.topic_record import TopicRecord

from tests.seed_store import SeedStore

CONFIG = TopicConfig("t", "ns", "t0pic1d", 1, 100, True, None, Overflow.BLOCK, ())


class _LoggingStore(SeedStore):
    """A user's store with its own state log: records every write it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: dict[str, Any] | None = None
        self.appended: list[list[StateChange]] = []
        self.fail = False

    def save_state(self, state: dict[str, Any]) -> None:
        self.saved = copy.deepcopy(state)

    def append_state(self, changes: Sequence[StateChange]) -> None:
        if self.fail:
            raise StoreError("disk full")
        self.appended.append(list(changes))

    def load_state(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.saved)


class _Channel:
    """A channel's state with one plain dict per section behind its providers."""

    def __init__(self) -> None:
        self.context = ChannelContext(CONFIG, 0, ChannelMetrics("t", 0))
        self.next_sequence = 0
        self.sections: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
        self.saves = 0
        self.state = ChannelState(self.context, lambda: self.next_sequence, self._saved)
        for section, values in self.sections.items():
            self.state.provide(section, values.get, values.keys)

    def _saved(self) -> None:
        self.saves += 1

    def set(self, section: str, key: str, value: Any) -> None:
        """Change a key, as a part does, and touch it."""
        if value is None:
            self.sections[section].pop(key, None)
        else:
            self.sections[section][key] = value
        self.state.touch(section, key)


def _keys(changes: list[StateChange]) -> list[tuple[str, str | None]]:
    return [(change.section, change.key) for change in changes]


def test_a_write_carries_only_the_touched_keys_with_the_epoch_and_next_sequence() -> None:
    async def main() -> None:
        channel = _Channel()
        store = _LoggingStore()
        assert channel.state.open(ChannelStore(store)) == {}
        channel.sections["groups"]["untouched"] = {"next": 1}
        channel.context.epoch = 3
        channel.next_sequence = 7
        channel.set("groups", "g", {"next": 5})
        channel.set("publishers", "p", [0, []])
        channel.set("groups", "g", {"next": 6})  # touched twice: written once, as it is now
        await channel.state.save()
        (changes,) = store.appended
        assert _keys(changes) == [
            ("epoch", None),
            ("next_sequence", None),
            ("groups", "g"),
            ("publishers", "p"),
        ]
        assert [change.value for change in changes] == [3, 7, {"next": 6}, [0, []]]
        await channel.state.save()  # nothing touched since: the scalars only
        assert _keys(store.appended[1]) == [("epoch", None), ("next_sequence", None)]

    asyncio.run(main())


def test_a_key_whose_provider_returns_none_is_written_as_deleted() -> None:
    async def main() -> None:
        channel = _Channel()
        store = _LoggingStore()
        channel.state.open(ChannelStore(store))
        channel.set("readers", "r", {"spec": "x"})
        channel.set("readers", "r", None)  # closed before the write
        await channel.state.save()
        change = store.appended[0][-1]
        assert (change.section, change.key, change.deleted) == ("readers", "r", True)

    asyncio.run(main())


def test_without_a_store_nothing_is_written_and_saves_return_at_once() -> None:
    async def main() -> None:
        channel = _Channel()
        channel.set("groups", "g", {"next": 1})  # before any store: not remembered
        assert not channel.state.durable
        await channel.state.save()
        channel.state.save_later()
        assert channel.saves == 0  # no write, so nothing for the store to release
        store = _LoggingStore()
        channel.state.open(ChannelStore(store))
        assert channel.state.durable
        await channel.state.save()
        assert _keys(store.appended[0]) == [("epoch", None), ("next_sequence", None)]

    asyncio.run(main())


def test_a_failed_write_fails_the_channel_and_every_later_save_fails() -> None:
    async def main() -> None:
        channel = _Channel()
        store = _LoggingStore()
        channel.state.open(ChannelStore(store))
        store.fail = True
        channel.set("groups", "g", {"next": 1})
        with pytest.raises(ChannelFailedError, match="its state could not be written: disk full"):
            await channel.state.save()
        failure = channel.context.failure  # the channel has failed, saying why
        assert failure is not None and "disk full" in failure
        assert channel.saves == 0  # the store must not release what the state still needs
        store.fail = False  # whether the failed write reached the disk is unknown
        with pytest.raises(ChannelFailedError):
            await channel.state.save()
        assert store.appended == []

    asyncio.run(main())


def test_a_successful_save_lets_the_store_release() -> None:
    async def main() -> None:
        channel = _Channel()
        channel.state.open(ChannelStore(_LoggingStore()))
        await channel.state.save()
        await channel.state.save()
        assert channel.saves == 2

    asyncio.run(main())


def test_save_later_writes_in_the_background() -> None:
    async def main() -> None:
        channel = _Channel()
        store = _LoggingStore()
        channel.state.open(ChannelStore(store))
        channel.set("marks", "g", [1, 2])
        channel.state.save_later()
        assert store.appended == []  # not waited for
        for _ in range(100):
            if store.appended:
                break
            await asyncio.sleep(0.01)
        assert ("marks", "g") in _keys(store.appended[0])

    asyncio.run(main())


def test_the_snapshot_has_every_section_and_write_snapshot_replaces_the_stored_state() -> None:
    async def main() -> None:
        channel = _Channel()
        store = _LoggingStore()
        channel.state.open(ChannelStore(store))
        channel.context.epoch = 2
        channel.next_sequence = 4
        channel.set("groups", "g", {"next": 1})
        channel.set("shared", "s", {"cursor": {}})
        snapshot = channel.state.snapshot()
        assert set(snapshot) == {
            "version",
            "sections",
            "topic",
            "epoch",
            "next_sequence",
            *SECTIONS,
        }
        assert snapshot["topic"] == TopicRecord.of(channel.context.config).state()
        assert snapshot["version"] == STATE_VERSION
        assert snapshot["sections"] == dict.fromkeys(SECTIONS, 1)
        assert snapshot["groups"] == {"g": {"next": 1}} and snapshot["readers"] == {}
        assert (snapshot["epoch"], snapshot["next_sequence"]) == (2, 4)
        channel.state.write_snapshot()
        assert store.saved == snapshot
        await channel.state.save()  # the snapshot held the touched keys: not written again
        assert _keys(store.appended[0]) == [("epoch", None), ("next_sequence", None)]

    asyncio.run(main())


def test_the_state_a_user_store_loads_is_the_snapshot_after_changes_are_saved() -> None:
    async def main() -> None:
        channel = _Channel()
        store = ChannelStore(SeedStore())  # the adapter keeps the state in memory
        channel.state.open(store)
        channel.state.write_snapshot()
        channel.set("groups", "g", {"next": 1})
        channel.set("publishers", "p", [3, []])
        await channel.state.save()
        channel.set("publishers", "p", None)
        channel.next_sequence = 9
        await channel.state.save()
        assert store.load_state() == channel.state.snapshot()
        assert store.load_state()["publishers"] == {}

    asyncio.run(main())


def test_a_segment_log_reopened_loads_the_state_saved(tmp_path: Path) -> None:
    async def main() -> None:
        channel = _Channel()
        store = SegmentLogStore(tmp_path)
        channel.state.open(ChannelStore(store))
        channel.state.write_snapshot()
        channel.set("groups", "g", {"next": 1, "committed": 0})
        channel.set("readers", "r", {"spec": "x", "cursor": None})
        channel.next_sequence = 12
        await channel.state.save()
        store.close()
        reopened = SegmentLogStore(tmp_path)
        try:
            again = _Channel()
            assert again.state.open(ChannelStore(reopened)) == channel.state.snapshot()
        finally:
            reopened.close()

    asyncio.run(main())


def test_a_state_of_another_version_is_refused_with_a_store_error() -> None:
    channel = _Channel()
    store = _LoggingStore()
    channel.state.open(ChannelStore(store))
    channel.state.write_snapshot()
    written = copy.deepcopy(store.saved)
    assert channel.state.open(ChannelStore(store))["version"] == STATE_VERSION  # its own: read
    for version in (None, STATE_VERSION + 1, "1"):
        store.saved = {**written, "version": version}
        with pytest.raises(StoreError, match=f"version {version!r}"):
            _Channel().state.open(ChannelStore(store))
    store.saved = {key: value for key, value in written.items() if key != "version"}
    with pytest.raises(StoreError, match="version None"):
        _Channel().state.open(ChannelStore(store))


def test_a_section_of_another_format_version_is_refused_with_a_store_error() -> None:
    channel = _Channel()
    store = _LoggingStore()
    channel.state.open(ChannelStore(store))
    channel.state.write_snapshot()
    store.saved["sections"]["readers"] = 2
    with pytest.raises(StoreError, match="section 'readers' in format version 2"):
        _Channel().state.open(ChannelStore(store))
    store.saved["sections"] = None
    with pytest.raises(StoreError, match="no section versions"):
        _Channel().state.open(ChannelStore(store))


def test_a_unit_of_work_is_answered_once_what_it_must_keep_is_written() -> None:
    async def main() -> None:
        channel = _Channel()
        store = _LoggingStore()
        channel.state.open(ChannelStore(store))
        async with channel.state.unit_of_work():
            channel.set("groups", "g", {"next": 1})  # Keep.BEFORE_REPLY
            assert store.appended == []
        assert ("groups", "g") in _keys(store.appended[0])
        async with channel.state.unit_of_work():  # nothing changed: nothing written
            pass
        async with channel.state.unit_of_work():  # carried by the next write only
            channel.state.touch("readers", "r", Keep.WITH_NEXT_WRITE)
        assert len(store.appended) == 1
        async with channel.state.unit_of_work():
            async with channel.state.unit_of_work():  # in-process: part of the outer one
                channel.set("groups", "g", {"next": 2})
            assert len(store.appended) == 1
        assert _keys(store.appended[1])[-2:] == [("readers", "r"), ("groups", "g")]

    asyncio.run(main())


def test_a_unit_that_raises_waits_for_nothing() -> None:
    async def main() -> None:
        channel = _Channel()
        store = _LoggingStore()
        channel.state.open(ChannelStore(store))
        with pytest.raises(KeyError):
            async with channel.state.unit_of_work():
                channel.set("groups", "g", {"next": 1})
                raise KeyError("refused")
        assert store.appended == []  # the next write carries it
        await channel.state.save()
        assert ("groups", "g") in _keys(store.appended[0])

    asyncio.run(main())


def test_a_unit_waits_for_its_own_changes_not_for_a_concurrent_one_s() -> None:
    async def main() -> None:
        channel = _Channel()
        store = _LoggingStore()
        release = threading.Event()
        writes = store.append_state

        def slow(changes: Sequence[StateChange]) -> None:
            release.wait(10)
            writes(changes)

        store.append_state = slow  # type: ignore[method-assign]
        channel.state.open(ChannelStore(store))

        async def committing() -> None:
            async with channel.state.unit_of_work():
                channel.set("groups", "g", {"next": 1})

        async def taking() -> None:
            async with channel.state.unit_of_work():
                channel.state.touch("readers", "r", Keep.WITH_NEXT_WRITE)

        commit = asyncio.ensure_future(committing())
        await asyncio.sleep(0.05)
        await asyncio.wait_for(taking(), 1.0)  # not held up by the commit's write
        assert not commit.done()
        release.set()
        await asyncio.wait_for(commit, 5.0)

    asyncio.run(main())


def test_a_change_kept_soon_is_written_in_the_background() -> None:
    async def main() -> None:
        channel = _Channel()
        store = _LoggingStore()
        channel.state.open(ChannelStore(store))
        async with channel.state.unit_of_work():
            channel.state.touch("marks", "g", Keep.SOON)
        for _ in range(100):
            if store.appended:
                break
            await asyncio.sleep(0.01)
        assert ("marks", "g") in _keys(store.appended[0])

    asyncio.run(main())
