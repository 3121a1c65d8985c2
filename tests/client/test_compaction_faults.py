"""A compacted channel SIGKILLed while it compacts, again and again
(docs/guides/compacted-topics.md): it recovers the old set of segments or the new one,
never a mix; no acknowledged element that nothing superseded is lost; positions and
order never change; and a deleted key never comes back (nats-server#8505).

The channel's store is the embedded segment log with small segments (64 KiB: a pass
rewrites dozens of files at once, so a swap that were not atomic would show), made by
a store factory; its passes pause at their commit point, so that a kill lands there
on a loaded machine too. A watcher kills the channel's process the moment a pass's files
appear on disk (``compacting/``, then ``swap.json``: before and after the commit
point), and checks after the kill that they were still there: the kill landed inside
the pass."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray

import raytopic as rt
from raytopic.actors.stores import segment_compaction
from raytopic.actors.stores.segment_log import SegmentLogStore

from tests.topic_helpers import TIMEOUT, get, serving_again

KEYS = 2500
"""New keys per round (each a value, then for half of them a delete, for the others a
second value)."""
PADDING = "x" * 200
"""Makes a round's values a few MiB: a pass long enough to be killed inside."""


SWAP_PAUSE = 0.3
"""Seconds a pass waits at its commit point (see ``PausingAtTheSwap``)."""


class PausingAtTheSwap(SegmentLogStore):
    """The embedded segment log, whose pass waits a moment at its commit point
    (``swap.json`` written and synced) before it moves the new segments into place:
    that step lasts milliseconds, which a watcher thread on a loaded machine missed
    (then no kill landed after the commit point)."""

    def install(self, rewritten: Any) -> None:
        time.sleep(SWAP_PAUSE)
        super().install(rewritten)


@dataclass(frozen=True)
class SmallSegments:
    """A store factory: the embedded segment log, with small segments."""

    root: str
    segment_bytes: int = 64 * 1024

    def __call__(self, topic_name: str, channel: int) -> SegmentLogStore:
        return PausingAtTheSwap(
            Path(self.root) / topic_name / str(channel), segment_bytes=self.segment_bytes
        )


class History:
    """What was acknowledged: per position its (key, value); per key its positions."""

    def __init__(self) -> None:
        self.at: dict[int, tuple[str, Any]] = {}
        self.of: dict[str, list[int]] = {}
        self.order: list[int] = []  # positions, as their acknowledgements came

    def published(self, keys: list[str], values: list[Any], statuses: Any) -> None:
        for key, value, status in zip(keys, values, statuses, strict=True):
            self.at[status.position.sequence] = (key, value)
            self.of.setdefault(key, []).append(status.position.sequence)
            self.order.append(status.position.sequence)

    def check_snapshot(self, held: list[tuple[int, Any, Any]], known: int) -> None:
        """The guarantees, on every element one consistent state of the log holds
        (sequence, key, value): what a store recovers. ``known``: how many elements
        had been acknowledged when it was left (the kill may land in a pass that
        began before the round's elements came; those acknowledged after it, by the
        restarted channel, need not be there)."""
        positions = [sequence for sequence, _, _ in held]
        assert positions == sorted(positions)  # order never changes
        present: dict[str, list[int]] = {}
        for sequence, key, value in held:  # a position never changes what it holds
            assert self.at[sequence] == (key, value)
            present.setdefault(key, []).append(sequence)
        acknowledged = set(self.order[:known])
        for key, history in self.of.items():
            mine = present.get(key, [])
            before = [sequence for sequence in history if sequence in acknowledged]
            if before:
                latest = before[-1]
                newer = [sequence for sequence in mine if sequence > latest]
                if self.at[latest][1] is not None:
                    assert latest in mine or newer, f"{key}: its latest value at {latest} was lost"
                elif latest not in mine:  # its delete went: so did every older value
                    assert mine == newer, f"{key} was deleted and came back at {mine}"
            if mine:  # what stays of a key is its newest, up to its last element here
                upto = [sequence for sequence in history if sequence <= mine[-1]]
                assert mine == upto[len(upto) - len(mine) :]

    def check_read(self, read: list[rt.Element]) -> None:
        """What a reader from the earliest got while passes may run: in order, each at
        its position, the latest value of every key (a delete, and older values, may
        go while it reads: Kafka's delete.retention.ms bounds such a read)."""
        positions = [e.sequence for e in read]
        assert positions == sorted(positions)
        got = {e.sequence for e in read}
        for element in read:
            assert self.at[element.sequence] == (element.key, element.value)
        for key, history in self.of.items():
            if self.at[history[-1]][1] is not None:
                assert history[-1] in got, f"{key}: its latest value was lost"


def _stored(directory: Path) -> list[tuple[int, Any, Any]]:
    """(sequence, key, value) of every element a store directory holds, opened as a
    restarted channel opens it (a pass cut short is finished or undone)."""
    store = SegmentLogStore(directory, must_exist=True)
    held = []
    for batch in store.load_batches(0):
        sequences = (
            range(batch.first, batch.first + len(batch.payload))
            if batch.sequences is None
            else batch.sequences.tolist()
        )
        keys = batch.payload.keys or [None] * len(batch.payload)
        held.extend(zip(sequences, keys, batch.payload.decode(), strict=True))
    store.close()
    return held


def _read_all(topic: rt.Topic) -> list[rt.Element]:
    got: list[rt.Element] = []
    with topic.subscriber(start="earliest", complete_on_empty=True) as subscriber:
        while batch := get(subscriber.receive_batch(5000)):
            got.extend(batch)
    return got


def _publish_round(topic: rt.Topic, history: History, number: int) -> None:
    """Values of new keys, then deletes of half of them and new values of the others,
    then a last element (a delete is never the channel's last)."""
    keys = [f"r{number}k{i}" for i in range(KEYS)]
    with topic.publisher() as publisher:
        values = [{"k": key, "v": 1, "pad": PADDING} for key in keys]
        history.published(keys, values, get(publisher.publish_batch(values, keys=keys)))
        deleted = keys[::2]
        futures = [publisher.delete(key) for key in deleted]
        history.published(deleted, [None] * len(deleted), [f.result(TIMEOUT) for f in futures])
        updated = keys[1::2]
        values = [{"k": key, "v": 2, "pad": PADDING} for key in updated]
        history.published(updated, values, get(publisher.publish_batch(values, keys=updated)))
        last = [f"r{number}-last"]
        history.published(last, ["end"], get(publisher.publish_batch(["end"], keys=last)))


def _kill_when(
    marker: Path,
    pid: int,
    done: threading.Event,
    copy: Path,
    landed: list[bool],
    history: History,
    known: list[int],
) -> None:
    """SIGKILL ``pid`` as soon as ``marker`` exists; once the process is dead, note how
    many elements ``history`` holds (all acknowledged by it), copy its store's
    directory to ``copy`` (before the restarted channel opens it) and record whether
    the marker was still there (the kill landed inside the pass)."""
    while not done.is_set():
        if marker.exists():
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.001)
            known.append(len(history.order))
            shutil.copytree(marker.parent, copy)
            landed.append(marker.exists())
            return
        time.sleep(0.0002)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


@pytest.mark.slow
def test_a_channel_killed_while_compacting_recovers_old_or_new_and_no_deleted_key_comes_back(
    make_topic: Callable[..., rt.Topic], tmp_path: Path
) -> None:
    topic = make_topic(
        channels=1,
        store=SmallSegments(str(tmp_path)),
        compaction=rt.Compaction(min_lag_s=1.5, max_lag_s=1.5, tombstone_retention_s=0.0),
    )
    directory = tmp_path / topic.name / "0"
    history = History()
    landed: list[bool] = []
    known: list[int] = []  # at each kill, how many elements were acknowledged
    markers = [segment_compaction.COMPACTING, segment_compaction.SWAP]
    for number in range(4):
        before = topic.describe().channels[0]
        done = threading.Event()
        marker = directory / markers[number % 2]
        copy = tmp_path / f"copy-{number}"
        watcher = threading.Thread(
            target=_kill_when,
            args=(marker, before.pid, done, copy, landed, history, known),
            daemon=True,
        )
        watcher.start()
        _publish_round(topic, history, number)  # nothing is eligible for 1.5 s: then a pass
        watcher.join(timeout=60.0)
        done.set()
        assert len(landed) == number + 1, f"no {marker.name} appeared within a minute"
        serving_again(topic, 0, before.epoch, 60.0)
        # The set the killed channel left: old or new.
        history.check_snapshot(_stored(copy), known[number])
        history.check_read(_read_all(topic))
    assert any(landed), f"no kill landed inside a pass: {landed}"
    # And once more after the passes that follow the restarts have run: compacted, and
    # a last kill at rest changes nothing.
    deadline = time.monotonic() + 60.0
    while topic.describe().channels[0].compaction["runs"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    before = topic.describe().channels[0]
    os.kill(before.pid, signal.SIGKILL)
    serving_again(topic, 0, before.epoch, 60.0)
    history.check_read(_read_all(topic))
    assert ray.is_initialized()
