"""What a channel remembers of each publisher: its last batches and their acks. No Ray.

Publishers number their batches per channel (0, 1, 2, ...). A channel appends
them in that order (``raytopic.actors.turns``) and keeps the ack of each of
the last few, so a batch that comes again (its reply was lost, or the channel
restarted in between) is answered with its first ack instead of being
appended twice. With a store the tracks survive a restart: the state file
keeps them, and the store's records (publisher id and batch number in every
header) fill in what came after the last state write.

A batch that waits for room under overflow "block" and may go in pieces is marked
open (durably, before its first piece is stored) until its append ends: a channel
restarted meanwhile resumes it when Ray retries it (the rest goes in under the same
number) and holds the publisher's later batches until then. An ``append_once``
version that ended short (its rest timed out, or was refused) stays open the same
way: a re-run of the version appends exactly the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from raytopic.core.protocol import AppendAck

__all__ = ["ACKS_KEPT", "PublisherTrack"]

ACKS_KEPT = 16
"""Acks a channel keeps per publisher: a publisher has a few batches in flight, and
after a restart each of them may come again (a retry of a batch stored before
the crash gets its ack back, not a second append)."""


@dataclass(slots=True)
class PublisherTrack:
    """The last batches a publisher appended here (for ordering and retries)."""

    last_batch: int = -1
    acks: dict[int, AppendAck] = field(default_factory=dict)
    seen: float = field(default_factory=time.monotonic)
    open: int = -1
    """The batch whose append has not ended, or the ``append_once`` version that ended
    short (-1: none): see the module docstring."""

    def remember(self, batch: int, ack: AppendAck) -> None:
        """Keep ``ack`` as the answer to a retry of ``batch``."""
        self.acks[batch] = ack
        self.last_batch = max(self.last_batch, batch)
        if batch > self.open:  # a later batch went in: the open one ended (or was skipped)
            self.open = -1
        self.seen = time.monotonic()
        while len(self.acks) > ACKS_KEPT:
            del self.acks[min(self.acks)]

    def add_run(self, batch: int, first: int, count: int, stamp: float) -> None:
        """Learn (from a store) that ``batch`` put ``count`` elements at ``first``."""
        ack = self.acks.get(batch)
        if ack is None:
            self.remember(batch, AppendAck(first, count, stamp))
            return
        if any(run[0] == first for run in ack.pieces):
            return  # known already (from the state file)
        self.acks[batch] = ack.then(AppendAck(first, count, stamp))

    def resumable(self) -> bool:
        """Whether the open batch is to be resumed (after a restart): nothing of a
        later batch went in, so its append had not ended."""
        if self.open < self.last_batch:
            self.open = -1  # a later batch is stored: it had ended
        return self.open >= 0

    def to_state(self) -> list[Any]:
        """JSON-ready: the last batch number, the runs of each kept batch, and the open
        batch if there is one (an optional third item: none without it)."""
        state: list[Any] = [
            self.last_batch,
            [
                [batch, [list(run) for run in ack.pieces]]
                for batch, ack in self.acks.items()
                if ack.accepted > 0
            ],
        ]
        if self.open >= 0:
            state.append(self.open)
        return state

    @classmethod
    def from_state(cls, state: list[Any]) -> PublisherTrack:
        """The track saved by :meth:`to_state`."""
        track = cls(int(state[0]))
        for batch, runs in state[1]:
            for run in runs:
                track.add_run(int(batch), *run)
        track.open = int(state[2]) if len(state) > 2 else -1
        return track
