"""A channel's publishers: their turns, retry acks and idle sweep. No Ray.

Publishers number their batches per channel (0, 1, 2, ...). The table lets one
batch of a publisher in at a time, in number order (``raytopic.actors.turns``),
answers a batch seen before with the ack it got then (a retry after a lost
reply appends nothing twice, see ``raytopic.actors.publisher_tracks``), and
forgets publishers idle for long once there are many.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from raytopic.actors.publisher_tracks import ACKS_KEPT, PublisherTrack
from raytopic.actors.stores.base import StoredBatch
from raytopic.actors.turns import DuplicateTurnError, Turns
from raytopic.core.errors import InvalidArgumentError, TopicFullError
from raytopic.core.protocol import AppendAck

__all__ = [
    "ONCE_WRITER_PREFIX",
    "PUBLISHERS_FORMAT",
    "PUBLISHER_IDLE_S",
    "PUBLISHER_SWEEP_S",
    "PUBLISHERS_KEPT",
    "PublisherTable",
]

PUBLISHERS_FORMAT = 1
"""The format of the publishers section (see :meth:`PublisherTable.state_of`)."""

PUBLISHERS_KEPT = 10_000
"""Publisher tracks a channel keeps before it looks for idle ones to forget."""

PUBLISHER_IDLE_S = 600.0
"""A publisher silent this long is forgotten (when there are many). If it comes
back, its next batch waits for the turn gap timeout once: the channel no longer
knows which number comes next."""

PUBLISHER_SWEEP_S = 60.0
"""Seconds between looks for idle publishers."""

ONCE_WRITER_PREFIX = "once:"
"""Writers of ``append_once`` (streaming sinks): their last version is their
exactly-once record, so they are never forgotten for idleness."""


class PublisherTable:
    """The publishers one channel knows.

    Args:
        channel: The channel's number (for error messages).
        changed: Called with a publisher's id when its track changed (the
            state keeps it) or was forgotten.
    """

    def __init__(self, channel: int, changed: Callable[[str], None] = lambda _: None) -> None:
        self._channel = channel
        self._changed = changed
        self.tracks: dict[str, PublisherTrack] = {}
        self.turns = Turns()
        self.swept = time.monotonic()

    def __len__(self) -> int:
        return len(self.tracks)

    def __contains__(self, publisher_id: object) -> bool:
        return publisher_id in self.tracks

    # -- recovery -----------------------------------------------------------------------

    def restore_state(self, saved: dict[str, Any]) -> None:
        """The tracks a state file kept (before the store's records fill in the rest)."""
        for publisher_id, state in saved.items():
            self.tracks[publisher_id] = PublisherTrack.from_state(state)

    def learn(self, record: StoredBatch) -> None:
        """A stored record tells which publisher batch put elements where."""
        if record.publisher_id:
            track = self.tracks.setdefault(record.publisher_id, PublisherTrack())
            track.add_run(record.batch, record.first, len(record.payload), record.stamp)

    def resume_turns(self) -> None:
        """After recovery: each publisher's next batch is the one after its last, or its
        open batch (its rest goes in first, when Ray retries it)."""
        for publisher_id, track in self.tracks.items():
            resumed = track.open if track.resumable() else track.last_batch + 1
            self.turns.resume(publisher_id, resumed)

    def state_keys(self) -> Iterator[str]:
        """The publishers the state keeps (the section ``publishers``)."""
        return iter(self.tracks)

    def state_of(self, publisher_id: str) -> list[Any] | None:
        """A publisher's track as the state file keeps it (None: forgotten)."""
        track = self.tracks.get(publisher_id)
        return None if track is None else track.to_state()

    def states(self) -> Iterator[tuple[str, list[Any]]]:
        """Every track as the state file keeps it."""
        for publisher_id, track in self.tracks.items():
            yield publisher_id, track.to_state()

    # -- appending ----------------------------------------------------------------------

    def earlier_ack(self, publisher_id: str, batch: int, count: int) -> AppendAck | None:
        """The ack ``batch`` got before if it came already (a retry), else None.

        Raises:
            InvalidArgumentError: ``batch`` is older than the acks kept.
        """
        track = self.tracks.get(publisher_id)
        if track is None or batch > track.last_batch or batch == track.open:
            return None  # new, or open when the channel restarted: its rest goes in
        ack = track.acks.get(batch)
        if ack is None and track.last_batch - batch < ACKS_KEPT:
            # Recent, yet no record of it: it appended nothing (refused whole
            # before the channel restarted).
            ack = AppendAck(-1, 0, 0.0)
        if ack is None:
            raise InvalidArgumentError(f"batch {batch} of publisher {publisher_id} is stale")
        if ack.accepted < count and ack.error is None:
            # Recovered from the store, which keeps what was appended, not why
            # the rest was not (the channel restarted meanwhile).
            ack = dataclasses.replace(
                ack,
                error=TopicFullError(
                    f"channel {self._channel}: {count - ack.accepted} of "
                    f"{count} values not appended (it restarted meanwhile)"
                ),
            )
        return ack

    def has_version(self, writer_id: str, version: int) -> bool:
        """Whether an ``append_once`` writer's ``version`` (or a later one) is here, whole.
        If not, the writer's turn moves to ``version`` (versions skip numbers), or back
        to it if it ended short (it is open: its re-run appends the rest)."""
        track = self.tracks.get(writer_id)
        if track is not None and version <= track.last_batch and version != track.open:
            return True
        if track is not None and version == track.open:
            self.turns.rewind(writer_id, version)
        else:
            self.turns.resume(writer_id, version)
        return False

    @contextlib.asynccontextmanager
    async def turn(self, publisher_id: str, batch: int) -> AsyncIterator[None]:
        """Wait for ``batch``'s turn (the publisher's earlier batches went in).

        Raises:
            InvalidArgumentError: the same batch is in its turn already.
        """
        try:
            async with self.turns.turn(publisher_id, batch):
                yield
        except DuplicateTurnError as error:
            raise InvalidArgumentError(str(error)) from None

    def stored(self, publisher_id: str, batch: int) -> AppendAck | None:
        """What the open ``batch`` stored before the channel restarted, or before it
        ended short (None: nothing, or it is not open): its next run appends the rest."""
        track = self.tracks.get(publisher_id)
        if track is None or track.open != batch:
            return None
        return track.acks.get(batch)

    def is_open(self, publisher_id: str, batch: int) -> bool:
        """Whether ``batch``'s append is known not to have ended (see :meth:`open`)."""
        track = self.tracks.get(publisher_id)
        return track is not None and track.open == batch

    def open(self, publisher_id: str, batch: int) -> None:
        """``batch`` may go in pieces (it waits for room), or an ``append_once`` version
        ended short: until :meth:`close`, its next run (a retry after a restart, a
        re-run of the version) appends the rest. The caller makes this durable (before
        storing, or before the answer)."""
        self.tracks.setdefault(publisher_id, PublisherTrack()).open = batch
        self._changed(publisher_id)

    def close(self, publisher_id: str, batch: int) -> None:
        """``batch``'s append ended (each piece stored, or the rest refused)."""
        track = self.tracks.get(publisher_id)
        if track is not None and track.open == batch:
            track.open = -1
            self._changed(publisher_id)

    def piece(self, publisher_id: str, batch: int, first: int, count: int, stamp: float) -> None:
        """A piece of ``batch`` is stored while the rest waits for room: kept with the
        next state write, so a channel restarted meanwhile knows it went in even once
        its record is trimmed (a retry is told exactly what was not appended)."""
        track = self.tracks.setdefault(publisher_id, PublisherTrack())
        track.add_run(batch, first, count, stamp)
        self._changed(publisher_id)

    def remember(self, publisher_id: str, batch: int, ack: AppendAck) -> None:
        """Keep ``ack`` as the answer to a retry of ``batch``; look for idle
        publishers to forget now and then, once there are many."""
        track = self.tracks.setdefault(publisher_id, PublisherTrack())
        track.remember(batch, ack)
        self._changed(publisher_id)
        if len(self.tracks) > PUBLISHERS_KEPT and track.seen - self.swept > PUBLISHER_SWEEP_S:
            self.forget_idle(track.seen)

    def forget_idle(self, now: float) -> None:
        """Drop the tracks and turns of publishers idle for long (each pickled
        Publisher is a new publisher; a long-gone one needs no ordering or retry
        record). ``append_once`` writers stay."""
        self.swept = now
        idle = [
            publisher_id
            for publisher_id, track in self.tracks.items()
            if now - track.seen > PUBLISHER_IDLE_S
            and not publisher_id.startswith(ONCE_WRITER_PREFIX)
        ]
        for publisher_id in idle:
            if self.turns.forget(publisher_id):
                del self.tracks[publisher_id]
                self._changed(publisher_id)
