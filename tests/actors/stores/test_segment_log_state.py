"""Unit tests of the embedded store's state (no Ray): the state file and its log of changes,
compaction, recovery after a crash at each step of it, and state files written before the log."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from raytopic.actors.stores import segment_log
from raytopic.actors.stores.segment_log import SegmentLogStore
from raytopic.actors.stores.state_log import StateChange, apply_changes, encode_changes
from raytopic.core.errors import StoreError

from tests.segment_stores import reopen

STATE_FILE = Path(__file__).parent / "data" / "state_file.json"
"""A state file of generation 0 with no state log yet (one group, one shared group, two
publishers, three readers), from a real channel."""

START = {"epoch": 1, "next_sequence": 0, "groups": {}, "publishers": {}, "readers": {}}


class Crash(BaseException):
    """The process died here (no ``except Exception`` of the store catches it)."""


def crash(*args: Any, **kwargs: Any) -> None:
    raise Crash


def commit(group: str, position: int) -> list[StateChange]:
    return [StateChange("groups", group, {"next": position + 1, "committed": position})]


def state_logs(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("state-*.changes"))


def generation(directory: Path) -> int:
    return json.loads((directory / "state.json").read_bytes()).get("log_generation", 0)


def test_changes_are_appended_and_replayed(opened, tmp_path: Path) -> None:
    store = opened()
    store.save_state(START)
    state_file = (tmp_path / "state.json").read_bytes()
    expected = json.loads(json.dumps(START))
    for position in range(5):
        changes = [*commit("g", position), StateChange("publishers", f"p-{position}", [0, []])]
        store.append_state(changes)
        apply_changes(expected, changes)
        assert store.load_state() == expected
    store.append_state([StateChange("publishers", "p-0", None, deleted=True)])
    del expected["publishers"]["p-0"]
    # Each change went to the log; the state file was not rewritten.
    assert (tmp_path / "state.json").read_bytes() == state_file
    assert state_logs(tmp_path) == [f"state-{generation(tmp_path):010d}.changes"]
    assert reopen(store, opened).load_state() == expected


def test_one_record_per_append(opened, tmp_path: Path) -> None:
    store = opened()
    store.save_state(START)
    for position in range(3):
        store.append_state(commit("g", position))
    (log,) = tmp_path.glob("state-*.changes")
    expected = b"".join(encode_changes(commit("g", position)) for position in range(3))
    assert log.read_bytes() == expected


def test_the_state_kept_is_a_copy(opened) -> None:
    store = opened()
    state = {"epoch": 1, "groups": {"g": {"next": 1}}}
    store.save_state(state)
    value = {"next": 2}
    store.append_state([StateChange("groups", "g", value)])
    value["next"] = 99  # the caller's objects are not the store's
    state["epoch"] = 99
    loaded = store.load_state()
    assert loaded == {"epoch": 1, "groups": {"g": {"next": 2}}}
    loaded["epoch"] = 100
    assert store.load_state()["epoch"] == 1


def test_save_state_replaces_the_state_and_its_log(opened, tmp_path: Path) -> None:
    store = opened()
    store.save_state(START)
    store.append_state(commit("g", 3))
    first = generation(tmp_path)
    store.save_state({"epoch": 2})
    assert store.load_state() == {"epoch": 2}
    assert generation(tmp_path) == first + 1
    assert state_logs(tmp_path) == []  # the next append starts the new generation's log
    store.append_state([StateChange("epoch", None, 3)])
    assert state_logs(tmp_path) == [f"state-{first + 1:010d}.changes"]
    assert reopen(store, opened).load_state() == {"epoch": 3}


def test_changes_without_a_saved_state(opened) -> None:
    store = opened()
    assert store.load_state() is None
    store.append_state(commit("g", 0))
    assert reopen(store, opened).load_state() == {"groups": {"g": {"next": 1, "committed": 0}}}


def test_compaction_keeps_the_state(opened, tmp_path: Path) -> None:
    store = opened(state_log_bytes=2048)
    store.save_state(START)
    expected = json.loads(json.dumps(START))
    generations = {generation(tmp_path)}
    for position in range(200):
        changes = commit(f"g{position % 7}", position)
        if position % 5 == 0:
            changes.append(StateChange("publishers", f"p-{position}", [position, []]))
        if position % 11 == 0:
            changes.append(StateChange("publishers", f"p-{position - 55}", None, deleted=True))
        store.append_state(changes)
        apply_changes(expected, changes)
        generations.add(generation(tmp_path))
        assert len(state_logs(tmp_path)) <= 1
    assert len(generations) > 3  # compacted, more than once
    assert store.load_state() == expected
    # Compaction waits for the log to outgrow twice the state file.
    state_size = (tmp_path / "state.json").stat().st_size
    (log,) = tmp_path.glob("state-*.changes")
    assert log.stat().st_size <= max(2048, 2 * state_size)
    assert reopen(store, opened, state_log_bytes=2048).load_state() == expected


def compacting_store(opened, tmp_path: Path) -> tuple[SegmentLogStore, dict[str, Any], int]:
    """A store whose next append compacts, the state that append leaves, and its generation."""
    store = opened(state_log_bytes=1)
    store.save_state(START)
    expected = json.loads(json.dumps(START))
    for position in range(3):  # below twice the state file's size
        store.append_state(commit("g", position))
        apply_changes(expected, commit("g", position))
    apply_changes(expected, commit("g", 3))
    return store, expected, generation(tmp_path)


def test_a_crash_before_the_new_state_file_is_renamed(opened, tmp_path, monkeypatch) -> None:
    store, expected, before = compacting_store(opened, tmp_path)
    monkeypatch.setattr(segment_log.os, "replace", crash)
    with pytest.raises(Crash):
        store.append_state(commit("g", 3))
    monkeypatch.undo()
    assert (tmp_path / "state.tmp").exists()
    store = reopen(store, opened)
    assert store.load_state() == expected  # the old state file and its log
    assert generation(tmp_path) == before
    assert not (tmp_path / "state.tmp").exists()


@pytest.mark.parametrize(
    "point",
    [(segment_log, "sync_directory"), (segment_log._StateFiles, "_close_log")],
    ids=["before the directory sync", "before the old log is deleted"],
)
def test_a_crash_after_the_rename(opened, tmp_path, monkeypatch, point) -> None:
    store, expected, before = compacting_store(opened, tmp_path)
    monkeypatch.setattr(*point, crash)
    with pytest.raises(Crash):
        store.append_state(commit("g", 3))
    monkeypatch.undo()
    assert generation(tmp_path) == before + 1
    assert state_logs(tmp_path) == [f"state-{before:010d}.changes"]  # the old log is left
    store = reopen(store, opened)
    assert store.load_state() == expected  # the new state file, the old log not replayed
    assert state_logs(tmp_path) == []  # ... but deleted


def test_a_crash_before_the_new_log_has_a_record(opened, tmp_path) -> None:
    store, expected, before = compacting_store(opened, tmp_path)
    store.append_state(commit("g", 3))
    assert generation(tmp_path) == before + 1
    assert state_logs(tmp_path) == []
    store.close()
    (tmp_path / f"state-{before + 1:010d}.changes").touch()  # created, nothing written yet
    store = opened()
    assert store.load_state() == expected
    store.append_state(commit("h", 0))
    apply_changes(expected, commit("h", 0))
    assert reopen(store, opened).load_state() == expected


def test_a_torn_append_is_cut_off(opened, tmp_path) -> None:
    store = opened()
    store.save_state(START)
    store.append_state(commit("g", 0))
    expected = store.load_state()
    store.close()
    (log,) = tmp_path.glob("state-*.changes")
    whole = log.stat().st_size
    with open(log, "ab") as file:
        file.write(encode_changes(commit("g", 1))[:-3])  # the crash came mid-write
    store = opened()
    assert store.load_state() == expected
    assert log.stat().st_size == whole  # cut back: the next record follows the last whole one
    store.append_state(commit("g", 2))
    apply_changes(expected, commit("g", 2))
    assert reopen(store, opened).load_state() == expected


def test_damage_in_the_middle_of_the_log_is_refused(opened, tmp_path) -> None:
    store = opened()
    store.save_state(START)
    store.append_state(commit("g", 0))
    store.append_state(commit("g", 1))
    store.close()
    (log,) = tmp_path.glob("state-*.changes")
    data = bytearray(log.read_bytes())
    data[20] ^= 0x10
    log.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="state log is damaged"):
        opened()


def test_stale_logs_of_other_generations_are_deleted(opened, tmp_path) -> None:
    store = opened()
    store.save_state(START)
    current = generation(tmp_path)
    store.append_state(commit("g", 0))
    store.close()
    for other in (current - 1, current + 1, current + 7):
        (tmp_path / f"state-{other:010d}.changes").write_bytes(encode_changes(commit("x", 9)))
    store = opened()
    assert store.load_state() == {**START, "groups": {"g": {"next": 1, "committed": 0}}}
    assert state_logs(tmp_path) == [f"state-{current:010d}.changes"]


def test_a_state_file_without_its_log_loads_and_takes_changes(opened, tmp_path) -> None:
    shutil.copy(STATE_FILE, tmp_path / "state.json")
    written = json.loads(STATE_FILE.read_bytes())["state"]
    store = opened(must_exist=True)
    assert store.load_state() == written  # generation 0, no log
    billing = dict(written["groups"]["billing"], committed=3, next=4)
    store.append_state([StateChange("groups", "billing", billing)])
    assert state_logs(tmp_path) == ["state-0000000000.changes"]
    written["groups"]["billing"] = billing
    store = reopen(store, opened, must_exist=True)
    assert store.load_state() == written
    store.save_state(store.load_state())  # a new epoch: a new state file, no log
    assert generation(tmp_path) == 1
    assert state_logs(tmp_path) == []
    assert reopen(store, opened).load_state() == written


def test_an_unreadable_state_file_is_refused(opened, tmp_path) -> None:
    (tmp_path / "state.json").write_bytes(b'{"epoch": 1, "gro')
    with pytest.raises(StoreError, match="unreadable"):
        opened()
    (tmp_path / "state.json").write_bytes(b'{"log_generation": 1}')
    with pytest.raises(StoreError, match="not a state file"):
        opened()


def test_a_failed_sync_stops_every_later_state_change(opened, monkeypatch) -> None:
    store = opened()
    store.save_state(START)

    def failing(fd: int) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(segment_log.os, "fdatasync", failing)
    with pytest.raises(StoreError, match="could not be synced"):
        store.append_state(commit("g", 0))
    monkeypatch.undo()
    with pytest.raises(StoreError, match="unknown"):
        store.append_state(commit("g", 1))
    with pytest.raises(StoreError, match="unknown"):
        store.save_state(START)


def test_appending_to_a_closed_store_fails(opened) -> None:
    store = opened()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.append_state(commit("g", 0))
