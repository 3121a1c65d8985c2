"""A compacted channel's compaction: when a pass runs, and what one does, over the ring
and the store. No Ray.

The rules (what survives, when a pass is due) are
:mod:`raytopic.actors.compaction_rules`'; the store's file work (rewriting sealed
segments, the atomic swap) is :mod:`raytopic.actors.stores.segment_compaction`'s.
This part runs a pass as the channel's background job ``compaction``, off the
append path:

1. On the event loop: the ring's segments and the store's sealed segments (the
   store seals its active one: appends go on into a new one) as they are now.
2. In a thread: every element's key, position, time stamp and whether it is a
   delete, read from the store (all of it: what the ring holds is the store's
   newest part) or, without a store, from the ring; the rules say which go;
   the store's segments that lose an element are rewritten into new files,
   synced; the ring's new segments are made.
3. On the event loop: the channel's state is made durable (the publishers'
   tracks and transactions' records the rewritten records no longer name), the
   swap is committed (in a thread) and installed, and the ring's new segments
   replace the old ones, in one step: readers see the old log or the new one.

Readers need nothing from a pass: a position compacted away reads as the next
element, and positions never change. A user's store (not the embedded one) is
never rewritten: compaction then keeps to the ring.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.channel_state import ChannelState
from raytopic.actors.compaction_rules import Dirt, Entries, expiry_of, kept, next_due, point_of
from raytopic.actors.segment_ring import RingPlan, RingSnapshot, Run, plan_compaction
from raytopic.actors.stores import segment_compaction
from raytopic.actors.stores.base import StoredBatch
from raytopic.actors.stores.segment_compaction import NewSegment, RecordSpan
from raytopic.actors.stores.segment_log import SegmentLogStore
from raytopic.core.compaction import Compaction

logger = logging.getLogger(__name__)

__all__ = ["CHECK_INTERVAL", "CompactionRun", "Compactor", "NoCompaction", "compactor_of"]

CHECK_INTERVAL = 0.25
"""Seconds between looks at whether a pass is due (a full channel's blocked
publishers wait at most about this long for a pass to start)."""

QUIET_FACTOR = 4.0
"""After a pass, a full or half-new channel waits this many times the pass's length
(at least ``MIN_QUIET``) before the next: compaction never takes most of a channel."""
MIN_QUIET = 0.5
RETRY_AFTER = 5.0
"""Seconds after a pass that failed (a store error) before the next try."""


@dataclass(frozen=True, slots=True)
class CompactionRun:
    """What the last pass did (``describe()``)."""

    at: float
    """When it ended (seconds since the epoch)."""
    seconds: float
    """How long it took."""
    point: int
    """Its compaction point: every element below it that a later one of its key
    superseded is gone."""
    removed: int
    """Elements it removed."""
    bytes_before: int
    """Bytes of the log before it (the store's files, or the ring's values)."""
    bytes_after: int
    """...and after."""
    live_keys: int
    """Keys whose latest element (below the point) is not a delete."""


@dataclass(slots=True)
class _Planned:
    """A pass's work done off the event loop, waiting to be installed."""

    point: int
    removed: int
    live_keys: int
    tombstone_expiry: float | None
    ring: RingPlan
    rewritten: list[NewSegment]
    bytes_before: int
    bytes_after: int


class NoCompaction:
    """A channel of a topic that is not compacted: nothing to tend or describe."""

    needs_tending = False

    async def tend(self) -> None:
        """Nothing to do."""

    def describe(self, now: float) -> None:
        """Nothing to say."""
        return None


class Compactor:
    """The compaction of one compacted channel (see the module docstring).

    Args:
        context: The channel's identity (its topic's ``Compaction``), clock and metrics.
        log: The channel's ring and store.
        state: The channel's durable state (written before a swap commits).
    """

    def __init__(self, context: ChannelContext, log: ChannelLog, state: ChannelState) -> None:
        settings = context.config.compaction
        assert isinstance(settings, Compaction)
        self._settings = settings
        self._context = context
        self._log = log
        self._state = state
        self._point = -1  # below it, the last pass left only survivors
        self._tombstone_expiry: float | None = None
        self._quiet_until = 0.0
        self.last: CompactionRun | None = None
        self.runs = 0

    # -- when --------------------------------------------------------------------------

    def dirt(self, now: float) -> Dirt:
        """What was appended since the last pass (no gaps above its point: one count)."""
        ring = self._log.ring
        start = max(self._point, ring.head)
        count = max(0, ring.tail - start + 1)
        oldest = None
        if count:
            runs = ring.read(start, 1)
            oldest = runs[0].stamp if runs else None
        return Dirt(
            oldest=oldest,
            count=count,
            held=ring.size,
            full=self._log.room() <= 0,
            tombstone_expiry=self._tombstone_expiry,
            quiet_until=self._quiet_until,
        )

    @property
    def needs_tending(self) -> bool:
        """Whether a pass may be due some time (something new, or a delete to drop)."""
        return self._tombstone_expiry is not None or self._log.ring.tail >= max(
            self._point, self._log.ring.head
        )

    async def tend(self) -> None:
        """Background (the channel's job ``compaction``): run each pass when it is due;
        end when none will be until more is appended (the channel starts the job
        again then)."""
        while True:
            now = time.time()
            due = next_due(self.dirt(now), self._settings)
            if due is None:
                return
            if due > now:
                await asyncio.sleep(min(due - now, CHECK_INTERVAL))
                continue
            try:
                await self.run()
            except Exception:
                logger.exception(
                    "channel %d: a compaction pass failed; trying again in %.0f s",
                    self._context.channel,
                    RETRY_AFTER,
                )
                self._quiet_until = time.time() + RETRY_AFTER
                await asyncio.sleep(RETRY_AFTER)

    # -- one pass -----------------------------------------------------------------------

    async def run(self) -> CompactionRun:
        """One pass now (see the module docstring).

        Raises:
            OSError, StoreError: the store's files could not be read or written; the
                old set stands.
        """
        started = time.time()
        ring = self._log.ring
        snapshot = ring.snapshot(ring.tail + 1)
        visible = ring.tail + 1  # what a sync has not covered yet never supersedes
        store = self._embedded_store()
        sealed = store.sealed() if store is not None else None
        committed = False
        try:
            planned = await asyncio.to_thread(self._plan, snapshot, sealed, started, visible)
            if store is not None and planned.rewritten:
                await self._state.checkpoint()  # what the rewritten records named, kept elsewhere
                names = [segment.name for segment in planned.rewritten]
                await asyncio.to_thread(segment_compaction.commit, store.directory, names)
                committed = True
                store.install(planned.rewritten)
            if planned.removed and not ring.install(planned.ring):
                logger.info("channel %d: the ring changed during compaction", self._context.channel)
            if committed:
                await asyncio.to_thread(segment_compaction.finish, store.directory)  # type: ignore[union-attr]
        except Exception as error:
            if committed:  # the new set stands on disk; only a restart puts it in place now
                self._context.fail(f"a compaction committed, then failed: {error}")
            elif store is not None:
                await asyncio.to_thread(segment_compaction.abandon, store.directory)
            raise
        finally:
            if store is not None:
                store.compaction_ended()
        ended = time.time()
        self._point = max(self._point, planned.point)
        self._tombstone_expiry = planned.tombstone_expiry
        self._quiet_until = ended + max(MIN_QUIET, QUIET_FACTOR * (ended - started))
        self.runs += 1
        self.last = CompactionRun(
            at=ended,
            seconds=ended - started,
            point=planned.point,
            removed=planned.removed,
            bytes_before=planned.bytes_before,
            bytes_after=planned.bytes_after,
            live_keys=planned.live_keys,
        )
        self._context.metrics.compacted(planned.bytes_before - planned.bytes_after)
        if planned.removed:
            self._context.notify()  # room for blocked publishers
        return self.last

    def _embedded_store(self) -> SegmentLogStore | None:
        store = self._log.store
        inner = None if store is None else store.inner
        return inner if isinstance(inner, SegmentLogStore) else None

    def _plan(
        self,
        snapshot: RingSnapshot,
        sealed: list[tuple[Path, list[RecordSpan]]] | None,
        now: float,
        visible: int,
    ) -> _Planned:
        """In a thread: what goes, the store's rewritten files (not committed) and the
        ring's new segments."""
        settings = self._settings
        if sealed is None:
            entries = _entries(snapshot.runs())
        else:
            entries = _entries(
                run
                for path, records in sealed
                for batch in segment_compaction.read_batches(path, records)
                for run in [_batch_run(batch)]
                if run is not None
            )
        point = min(point_of(entries.sequences, entries.stamps, now, settings), visible)
        keep = kept(entries, point, now, settings)
        removed = entries.sequences[~keep]
        ring_plan = plan_compaction(snapshot, lambda sequences: ~_among(sequences, removed))
        rewritten: list[NewSegment] = []
        if sealed is None:
            old = {id(segment) for segment in snapshot.segments}
            new = {id(segment) for segment in ring_plan.segments}
            before = sum(segment.payload.nbytes for segment in snapshot.segments)
            after = (
                before
                - sum(s.payload.nbytes for s in snapshot.segments if id(s) not in new)
                + sum(s.payload.nbytes for s in ring_plan.segments if id(s) not in old)
            )
        else:
            before = sum(path.stat().st_size for path, _ in sealed)
            after = before
            if len(removed):
                folder = sealed[0][0].parent / segment_compaction.COMPACTING
                for path, records in sealed:
                    segment = segment_compaction.rewrite_segment(path, records, removed, folder)
                    if segment is not None:
                        rewritten.append(segment)
                        after += segment.size - path.stat().st_size
        return _Planned(
            point=point,
            removed=len(removed),
            live_keys=_live_keys(entries, keep),
            tombstone_expiry=_next_expiry(entries, keep, point, now, settings),
            ring=ring_plan,
            rewritten=rewritten,
            bytes_before=before,
            bytes_after=after,
        )

    def describe(self, now: float) -> dict[str, Any]:
        """The compaction point, live keys, dirty ratio and the last pass (``describe()``)."""
        dirt = self.dirt(now)
        last = self.last
        return {
            "point": self._point,
            "live_keys": None if last is None else last.live_keys,
            "dirty_ratio": dirt.count / dirt.held if dirt.held else 0.0,
            "runs": self.runs,
            "last_run": None
            if last is None
            else {
                "at": last.at,
                "seconds": last.seconds,
                "removed": last.removed,
                "bytes_before": last.bytes_before,
                "bytes_after": last.bytes_after,
            },
        }


def _batch_run(batch: StoredBatch) -> Run | None:
    """A stored batch's elements as a run (None: it has none)."""
    if not len(batch.payload):
        return None
    first = batch.first if batch.sequences is None else int(batch.sequences[0])
    return Run(first, batch.stamp, batch.payload, batch.sequences, batch.stamps)


def _entries(runs: Any) -> Entries:
    """The keys, positions, stamps and deletes of ``runs``' elements, in order."""
    keys: list[Any] = []
    sequences: list[np.ndarray] = []
    stamps: list[np.ndarray] = []
    tombstones: list[np.ndarray] = []
    for run in runs:
        count = len(run.payload)
        run_keys = run.payload.keys
        keys.extend([None] * count if run_keys is None else run_keys)
        sequences.append(
            np.arange(run.first, run.first + count, dtype=np.int64)
            if run.sequences is None
            else run.sequences
        )
        stamps.append(np.full(count, run.stamp) if run.stamps is None else run.stamps)
        tombstones.append(run.payload.tombstones())
    if not sequences:
        empty = np.empty(0)
        return Entries(keys, empty.astype(np.int64), empty, empty.astype(bool))
    return Entries(
        keys, np.concatenate(sequences), np.concatenate(stamps), np.concatenate(tombstones)
    )


def _among(sequences: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """Whether each of ``sequences`` is in ``removed`` (ascending)."""
    if not len(removed):
        return np.zeros(len(sequences), dtype=bool)
    at = np.searchsorted(removed, sequences)
    return removed[np.minimum(at, len(removed) - 1)] == sequences


def _live_keys(entries: Entries, keep: np.ndarray) -> int:
    """Keys whose latest element kept is not a delete."""
    latest = {key: index for index, key in enumerate(entries.keys) if keep[index]}
    latest.pop(None, None)
    return sum(1 for index in latest.values() if not entries.tombstones[index])


def _next_expiry(
    entries: Entries, keep: np.ndarray, point: int, now: float, settings: Compaction
) -> float | None:
    """When the first delete the pass kept is due to go (None: none will)."""
    below = entries.sequences < point
    stamps = entries.stamps[keep & entries.tombstones & below]
    expiries = [expiry_of(float(stamp), settings) for stamp in stamps]
    later = [expiry for expiry in expiries if expiry > now]
    return min(later) if later else None


def compactor_of(
    context: ChannelContext, log: ChannelLog, state: ChannelState
) -> Compactor | NoCompaction:
    """The compaction part of a channel: a Compactor for a compacted topic's."""
    if context.config.compaction is None:
        return NoCompaction()
    return Compactor(context, log, state)
