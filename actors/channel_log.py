"""A channel's log: its ring buffer and its store as one sequence of elements. No Ray.

Elements enter in one place (:meth:`ChannelLog.append`): room first, then the
record goes to the store (pending until a sync covers it, see
:meth:`ChannelLog.durable`) or straight into the ring. They are read in one
place (:meth:`ChannelLog.read`): below the ring's head from the store (see the ring
buffer view, docs/guides/ring-buffer-and-resequencing.md), else from the ring. A
damaged stored record keeps its positions as a run of DamagedElements, and every
reader meets it through one rule (:meth:`ChannelLog.readable`, see
raytopic.actors.damage).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import numpy as np

from raytopic.actors.channel_context import POLL_INTERVAL, ChannelContext, stamp_clock
from raytopic.actors.damage import DamageMap
from raytopic.actors.segment_ring import Run, SegmentRing
from raytopic.actors.stores.base import ChannelStore, StoredBatch
from raytopic.actors.stores.group_sync import GroupSync
from raytopic.core.config import Overflow
from raytopic.core.errors import (
    ChannelFailedError,
    DataLossError,
    InvalidArgumentError,
    StaleSequenceError,
    StoreError,
    TopicError,
    TopicFullError,
)
from raytopic.core.payloads import DamagedElements, Payload
from raytopic.core.protocol import AppendAck, RingFigures

logger = logging.getLogger(__name__)

__all__ = ["ChannelLog"]


@dataclass(slots=True)
class _Pending:
    """An append written to the store, visible to readers once a sync covers it."""

    payload: Payload
    stamp: float
    change: int  # its mark in the log's GroupSync


class ChannelLog:
    """The ring buffer and the store of one channel, read and appended as one log.

    Args:
        context: The channel's identity and wake-up signal (a failed fdatasync
            fails the channel there: nothing since can be trusted).
    """

    def __init__(self, context: ChannelContext) -> None:
        config = context.config
        self._context = context
        self.ring = SegmentRing(config.capacity, config.ttl, clock=stamp_clock)
        self.store: ChannelStore | None = None
        self.damage = DamageMap()  # stored records found damaged
        self._sync: GroupSync | None = None
        self._pending: deque[_Pending] = deque()
        self._pending_count = 0
        self._pending_stamp = 0.0
        self.reserved = 0  # room held by elements staged in open transactions
        self._sync_task: asyncio.Task[None] | None = None
        self._closed = False  # the periodic sync stopped for good (close)
        self._watchers: list[Callable[[Payload | None, int | None], None]] = []

    def watch(self, appended: Callable[[Payload | None, int | None], None]) -> None:
        """Tell ``appended`` of every append (its payload and change, see :meth:`durable`)
        as it enters the log, and of a purge (None)."""
        self._watchers.append(appended)

    # -- opening ----------------------------------------------------------------------

    def open(self, store: ChannelStore, saved_next: int) -> tuple[int, int]:
        """Take ``store`` as this log's; returns (first, last): the sequences to load
        into the ring (see :meth:`load`). ``saved_next`` is the next sequence the
        state file knew of: records it says were appended but are gone (cut off
        on disk) are reported as damaged, and their positions never reused."""
        self.store = store
        self._sync = GroupSync(lambda _: store.sync())
        self.damage = DamageMap(store.damaged())
        largest = store.largest_sequence()
        if saved_next - 1 > largest:
            self.damage.add(largest + 1, saved_next - 1)
            largest = saved_next - 1
        # The ring starts at what the store keeps (a damaged first record
        # included: its readers are told), up to the capacity (of elements: a
        # compacted store holds fewer than its positions).
        capacity = self._context.config.capacity
        start = max(self.store_first(), min(largest + 1, store.first_of_newest(capacity)))
        if self._context.config.compaction is None:
            start = max(start, largest + 1 - capacity)
        self.restart_at(start)
        return start, largest

    def open_after(self, store: ChannelStore) -> None:
        """Take ``store`` as this log's, starting after what it holds: that is not this
        topic's (a destroyed topic's, which the store could not remove)."""
        self.open(store, 0)
        self.damage = DamageMap()
        self.restart_at(store.largest_sequence() + 1)
        store.release_cache()

    def restart_at(self, first: int) -> None:
        """An empty ring whose next element is ``first`` (a channel starting over)."""
        config = self._context.config
        self.ring = SegmentRing(
            config.capacity, config.ttl, clock=stamp_clock, first_sequence=first
        )

    def load(self, start: int, last: int, learn: Callable[[StoredBatch], None]) -> None:
        """Fill the ring from the store, from ``start`` up to ``last``, telling ``learn``
        of every record (the publishers' batches). Damaged records keep their
        positions, as runs of DamagedElements: what follows stays readable. The
        positions a compacted record covers without an element stay empty."""
        store = self.store
        assert store is not None
        ring = self.ring
        expected = start  # where the next record should begin
        for batch in store.load_batches(start):
            if batch.first + batch.covered <= expected:
                logger.error("channel %d: stored record at %d overlaps", self._channel, batch.first)
                continue
            self._keep_damaged(expected, batch.first - 1, batch.stamp)
            part = stored_part(batch, start, batch.last + 1, batch.covered)
            if part is not None:
                ring.append_at(part.payload, part.first, part.stamp, part.sequences, part.stamps)
            expected = batch.last + 1
            learn(batch)
        self._keep_damaged(expected, last, ring.stamp_of_last_append())
        store.release_cache()

    def _keep_damaged(self, first: int, last: int, stamp: float) -> None:
        """Positions ``first..last`` have no intact record: they go into the ring as
        damaged (a gap the store did not report is reported now)."""
        if first > last:
            return
        known = self.damage.at(first)
        if known is None or known[1] < last:
            logger.error("channel %d: stored elements %d..%d missing", self._channel, first, last)
            self.damage.add(first, last)
        self.ring.append_at(DamagedElements(last - first + 1), first, stamp)

    @property
    def _channel(self) -> int:
        return self._context.channel

    # -- reading ----------------------------------------------------------------------

    def read(self, start: int, max_count: int) -> list[Run]:
        """Up to ``max_count`` elements from ``start`` (``start <= tail``): from the
        store below the ring's head (up to the head), else from the ring; the first
        ones at or after ``start`` (a compacted topic's empty positions are passed
        over). A damaged range comes as a run of DamagedElements (see :meth:`readable`).

        Raises:
            StaleSequenceError: ``start`` is below the head and not in the store.
        """
        head = self.ring.head
        if start < head:
            runs = self._stored_runs(start, head, max_count)
            if runs:
                return runs
            start = head  # what the store has up to the head was compacted away
        return self.ring.read(start, max_count)

    def everything(self, piece: int) -> Iterator[tuple[Payload, int | None]]:
        """Every element the log holds, oldest first, ``piece`` at most at a time: from
        the store (or the ring's head) to its tail, then the appends waiting for a
        sync (with their change). Damaged ranges are passed over.

        Raises:
            StaleSequenceError: the log lost its oldest elements meanwhile.
        """
        sequence = self.store_first() if self.store is not None else self.ring.head
        tail = self.ring.tail
        while sequence <= tail:
            runs = self.read(sequence, piece)
            if not runs:
                break
            for run in runs:
                if not isinstance(run.payload, DamagedElements):
                    yield run.payload, None
            sequence = runs[-1].last + 1
        for pending in list(self._pending):
            yield pending.payload, pending.change

    def readable(self, runs: list[Run]) -> tuple[list[Run], tuple[int, int] | None]:
        """The one rule for damage: the runs a reader may use (those before the first
        damaged range) and that range (None: none was read)."""
        return self.damage.split(runs)

    def lost(self, lost: tuple[int, int]) -> DataLossError:
        """The one DataLossError a reader gets for the damaged range ``lost``."""
        return self.damage.error(self._channel, self._context.epoch, lost)

    def read_readable(self, start: int, max_count: int) -> list[Run]:
        """:meth:`read`, cut before any damaged range; a read that starts at one raises.

        Raises:
            DataLossError: the read starts at a damaged range (named in the error).
            StaleSequenceError: ``start`` is below the head and not in the store.
        """
        runs, lost = self.readable(self.read(start, max_count))
        if lost is not None and not runs:
            raise self.lost(lost)
        return runs

    def read_span(self, start: int, stop: int, max_count: int) -> list[Run]:
        """The elements from ``start`` up to ``stop`` (exclusive) or the tail, at most
        ``max_count``, without waiting (bulk reads); stops before a damaged range
        (the next read starts there and is told of it).

        Raises:
            DataLossError: ``start`` is in a damaged range.
            StaleSequenceError: ``start`` is gone (below the head and not stored).
        """
        end = min(stop, self.ring.tail + 1)
        runs: list[Run] = []
        sequence = start
        taken = 0
        while sequence < end and taken < max_count:
            more, lost = self.readable(runs_before(self.read(sequence, max_count - taken), end))
            runs.extend(more)
            if lost is not None:
                if not runs:
                    raise self.lost(lost)
                break  # the next read starts at the damage, and is told of it
            if not more:
                break
            taken += sum(len(run.payload) for run in more)
            sequence = more[-1].last + 1
        return runs

    def _stored_runs(self, start: int, stop: int, max_count: int) -> list[Run]:
        """Up to ``max_count`` elements from ``start`` up to ``stop`` (below the ring's
        head) as the store keeps them; a damaged range as a run of DamagedElements.
        Empty when what the store keeps there was compacted away.

        Raises:
            StaleSequenceError: the store does not have ``start`` (no store, or
                past its retention).
        """
        runs: list[Run] = []
        sequence = start
        taken = 0
        covered = False
        if self.store is not None:
            for batch in self.store.load_batches(start):
                if taken >= max_count or sequence >= stop:
                    break
                if batch.first > sequence:  # a hole: a damaged record, or the end
                    lost = self.damage.at(sequence)
                    if lost is None:
                        break
                    end = min(lost[1] + 1, batch.first, stop, sequence + max_count - taken)
                    runs.append(Run(sequence, batch.stamp, DamagedElements(end - sequence)))
                    covered = True
                    taken += end - sequence
                    sequence = end
                    if sequence < batch.first or taken >= max_count or sequence >= stop:
                        break
                covered = True
                part = stored_part(batch, sequence, stop, max_count - taken)
                if part is not None:
                    runs.append(part)
                    taken += len(part.payload)
                sequence = max(sequence, batch.last + 1)
            else:  # the store ended: a damaged range may be its last records
                lost = self.damage.at(sequence)
                if lost is not None and taken < max_count and sequence < stop:
                    end = min(lost[1] + 1, stop, sequence + max_count - taken)
                    stamp = runs[-1].stamp if runs else self.ring.stamp_of_last_append()
                    runs.append(Run(sequence, stamp, DamagedElements(end - sequence)))
                    covered = True
        if not covered:
            head = self.ring.head
            raise StaleSequenceError(
                f"sequence {start} is below the head {head} and not in the store",
                head_sequence=head,
            )
        return runs

    def store_first(self) -> int:
        """The oldest sequence the store keeps, a damaged record just before its
        first intact one included (its readers are to be told of it)."""
        assert self.store is not None
        first = self.store.first_sequence()
        lost = self.damage.at(first - 1)
        return first if lost is None else lost[0]

    def kept_below_head(self, sequence: int) -> bool:
        """Whether a reader behind the ring's head reads ``sequence`` from the store.

        Only within what the topic keeps: the capacity, or ``store_retention``.
        An element the ring dropped by "overwrite" or TTL is gone for readers
        (StaleSequenceError: docs/guides/subscribe.md), as without a store, unless the
        retention keeps it. A damaged record counts as kept: the read reports it.
        """
        store = self.store
        config = self._context.config
        kept = (
            sequence > self.ring.tail - config.capacity and sequence >= self.ring.expired_below
        ) or (config.retention_seconds is not None or config.retention_bytes is not None)
        return (
            kept
            and store is not None
            and self.store_first() <= sequence <= store.largest_sequence()
        )

    def resume_point(self, sequence: int) -> int:
        """Where a reader whose next element ``sequence`` is gone reads on."""
        head = self.ring.head
        if self.store is not None and sequence < self.store_first():
            return min(head, self.store_first())
        return head

    # -- appending --------------------------------------------------------------------

    @property
    def next_sequence(self) -> int:
        """The position the next element appended gets (appends pending a sync count)."""
        return self.ring.tail + 1 + self._pending_count

    def room(self) -> int:
        """Elements that fit now, counting appends still waiting for their sync and
        elements staged by open transactions (``reserved``)."""
        return self.ring.room() - self._pending_count - self.reserved

    async def wait_room(self, count: int, deadline: float | None) -> bool:
        """Wait until ``count`` elements fit: True, or False at ``deadline`` (monotonic)."""
        while self.room() < count:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            await self._context.wait_change(
                POLL_INTERVAL if left is None else min(left, POLL_INTERVAL)
            )
        return True

    async def append(
        self,
        payload: Payload,
        policy: Overflow,
        timeout: float | None,
        *,
        whole: bool,
        each: bool = False,
        publisher_id: str = "",
        batch: int = -1,
        on_piece: Callable[[int, int, float], Awaitable[None]] | None = None,
        stored: int = 0,
    ) -> tuple[AppendAck, int | None]:
        """The one place where elements enter the channel (publishes, ring buffer adds,
        Arrow batches): room, then the store write (or the ring). Returns the ack
        and the change to make durable (:meth:`durable`) before answering.

        Args:
            payload: The elements.
            policy: What a full channel does.
            timeout: Seconds "block" waits for room (None: no limit).
            whole: "fail" takes all of the batch or none of it (a ``publish_batch``
                part, a ring buffer ``add_all``); else what fits.
            each: The values were published one by one (``Publisher.publish`` only
                batches them for the wire): "block" appends what fits at once and
                waits only for the rest, and refuses a value only after ``timeout``
                with no room at all; errors name no count of the batch. Else
                "block" waits for room for all of it (pieces only beyond the
                capacity), up to ``timeout`` in all.
            publisher_id: Whose batch it is (kept in the store record).
            batch: The publisher's number of the batch.
            on_piece: Awaited with (first, count, stamp) of each piece stored of a batch
                that goes in several, as it is stored (before the rest goes on).
            stored: Values of the batch stored before ``payload``, its rest (a retry
                after a restart): an error counts the whole batch's.
        """
        ring = self.ring
        count = len(payload)
        if not count:
            return AppendAck(ring.tail, 0, ring.stamp_of_last_append()), None
        refused = self.unkeyed(payload)
        if refused is not None:
            return AppendAck(-1, 0, 0.0, refused), None
        if policy is Overflow.OVERWRITE:
            try:
                first, stamp, change = self._put(payload, True, publisher_id, batch)
            except StoreError as failed:
                return AppendAck(-1, 0, 0.0, failed), None
            return AppendAck(first, count, stamp), change
        # "fail" takes what fits now, or with ``whole`` (a publish_batch, whose
        # caller sees one error for all its values) nothing unless all fit.
        # "block" with ``each`` appends what fits and waits for room for the rest;
        # without, it waits until the whole batch fits (so its positions are
        # contiguous and share one stamp): only a batch larger than the capacity
        # goes in several pieces.
        deadline = None if timeout is None else time.monotonic() + timeout
        runs: list[tuple[int, int, float]] = []
        accepted = 0
        error: TopicError | None = None
        if policy is Overflow.FAIL and whole and self.room() < count:
            full = TopicFullError(
                f"channel {self._channel} has room for {self.room()} of "
                f"{count} values: none of them appended"
            )
            return AppendAck(-1, 0, 0.0, full), None
        change = None
        while accepted < count:
            wanted = min(count - accepted, ring.capacity)
            if policy is Overflow.BLOCK and self.room() < (1 if each else wanted):
                # The appends stored so far hold room until a sync shows them to
                # readers, who free it: make them durable first (sync="always"),
                # this call's pieces and the earlier ones waiting for their sync
                # (a call of a publisher's pieces syncs once, after its last).
                await self.durable(self._pending[-1].change if self._pending else change)
                if each and timeout is not None:  # refused only after timeout with no room
                    deadline = time.monotonic() + timeout
                if not await self.wait_room(1 if each else wanted, deadline):
                    break
            size = max(0, min(wanted, self.room()))
            if not size:
                break
            piece = payload.slice(accepted, accepted + size)
            try:
                first, stamp, change = self._put(piece, False, publisher_id, batch)
            except StoreError as failed:
                error = failed
                break
            runs.append((first, size, stamp))
            if on_piece is not None and size < count:  # not the whole batch at once
                await on_piece(first, size, stamp)
            accepted += size
            if policy is Overflow.FAIL:
                break
        if accepted < count and error is None:
            counted = None if each else (count - accepted, stored + count)
            error = self._full(policy, timeout, counted)
        if not runs:
            return AppendAck(-1, 0, 0.0, error), None
        first, _, stamp = runs[0]
        pieces = tuple(runs) if len(runs) > 1 else ()
        return AppendAck(first, accepted, stamp, error, pieces), change

    def _full(
        self, policy: Overflow, timeout: float | None, refused: tuple[int, int] | None
    ) -> TopicFullError:
        """Why values were not appended: counted as ``(refused, of)`` for a batch that
        is its caller's unit; for values published one by one, about any one of them."""
        reason = f"channel {self._channel} is full ({self.ring.capacity} elements)"
        if refused is not None:
            return TopicFullError(f"{reason}: {refused[0]} of {refused[1]} values not appended")
        if policy is Overflow.BLOCK and timeout is not None:
            return TopicFullError(f"{reason}: no room within {timeout:g} s")
        return TopicFullError(reason)

    def unkeyed(self, payload: Payload) -> InvalidArgumentError | None:
        """Why a compacted channel refuses ``payload`` (an element without a key: there
        is no latest value of nothing), or None."""
        if self._context.config.compaction is None:
            return None
        keys = payload.keys
        if keys is not None and None not in keys:
            return None
        return InvalidArgumentError(
            f"channel {self._channel} of compacted topic {self._context.config.name!r}: "
            "every element needs a key; nothing appended"
        )

    def _put(
        self, payload: Payload, overwrite: bool, publisher_id: str, batch: int
    ) -> tuple[int, float, int | None]:
        """Append ``payload`` (room already checked): into the ring, or with a store
        into the store, pending until :meth:`durable` of the change returned.
        Returns (first, stamp, change: None without a store).

        Raises:
            StoreError: the store refused it; nothing was appended anywhere.
        """
        ring = self.ring
        store = self.store
        if store is None:
            first = ring.append(payload, overwrite=overwrite)
            self._context.metrics.published(len(payload), payload.nbytes)
            self._context.notify()
            for appended in self._watchers:
                appended(payload, None)
            return first, ring.stamp_of_last_append(), None
        first = self.next_sequence
        stamp = self._pending_stamp = max(ring.next_stamp(), self._pending_stamp)
        record = StoredBatch(first, stamp, payload, self._context.epoch, publisher_id, batch)
        try:
            store.store_batch(record)
        except BaseException as error:  # SystemExit too: a user's store costs only the append
            logger.warning("channel %d: store refused an append: %r", self._channel, error)
            if isinstance(error, StoreError):
                raise
            raise StoreError(
                f"the store refused the append: it raised {type(error).__name__} in "
                f"store_batch: {error}"
            ) from error
        sync = self._sync
        assert sync is not None
        change = sync.mark()
        self._pending.append(_Pending(payload, stamp, change))
        self._pending_count += len(payload)
        for appended in self._watchers:
            appended(payload, change)
        if self._context.config.sync != "always":
            self._show_synced(change)
            self._ensure_sync_task()
        return first, stamp, change

    async def durable(self, change: int | None) -> None:
        """Wait until the appends up to ``change`` are as durable as ``sync`` asks
        (with "always": an fdatasync covers them); readers see them from then on.

        Raises:
            ChannelFailedError: the sync failed; the channel has failed.
        """
        sync = self._sync
        if change is None or sync is None or self._context.config.sync != "always":
            return
        try:
            await sync.wait(change)
        except Exception as error:
            failure = self._context.fail(
                f"fdatasync failed: {error}; appends since the last sync are not acknowledged"
            )
            raise ChannelFailedError(failure) from error
        self._show_synced(sync.covered)

    async def close(self) -> None:
        """Stop the periodic sync (``sync`` in seconds), for good: called at the end
        of the channel's life. Idempotent."""
        self._closed = True
        task, self._sync_task = self._sync_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _ensure_sync_task(self) -> None:
        """With ``sync`` a number of seconds: start the background sync (once)."""
        interval = self._context.config.sync
        if self._closed or not isinstance(interval, float):
            return
        if self._sync_task is None or self._sync_task.done():
            self._sync_task = asyncio.ensure_future(self._sync_periodically(interval))

    async def _sync_periodically(self, interval: float) -> None:
        """Background (``sync`` in seconds): sync the log every ``interval``, until
        a sync fails (the channel has failed then)."""
        sync = self._sync
        assert sync is not None
        while True:
            await asyncio.sleep(interval)
            try:
                await sync.wait()
            except Exception as error:
                self._context.fail(f"background fdatasync failed: {error}")
                return

    def _show_synced(self, covered: int) -> None:
        """Let readers see the pending appends a sync covered, in sequence order."""
        pending = self._pending
        head = self.ring.head
        appended = False
        while pending and pending[0].change <= covered:
            entry = pending.popleft()
            self._pending_count -= len(entry.payload)
            # Room was reserved when it was stored; it is durable: it must show.
            self.ring.append(entry.payload, overwrite=True, stamp=entry.stamp)
            self._context.metrics.published(len(entry.payload), entry.payload.nbytes)
            appended = True
        if appended:
            if self.ring.head != head:  # "overwrite" dropped the oldest
                self.release()
            self._context.notify()

    # -- figures ----------------------------------------------------------------------

    def figures(self) -> RingFigures:
        """Head, tail, size, capacity and remaining room of the ring (a compacted
        topic's size counts the elements held, not the positions)."""
        ring = self.ring
        size = ring.size
        return RingFigures(ring.head, ring.tail, size, ring.capacity, ring.capacity - size)

    @property
    def damaged_ranges(self) -> list[tuple[int, int]]:
        """The (first, last) ranges of stored elements found damaged (lost)."""
        return self.damage.ranges

    def first_after(self, stamp: float) -> int:
        """The sequence of the first element stamped strictly after ``stamp`` (tail + 1
        if none)."""
        return self.ring.first_after(stamp)

    # -- releasing --------------------------------------------------------------------

    def evict_to(self, sequence: int) -> int:
        """Drop every element below ``sequence`` from the ring; returns how many."""
        return self.ring.evict_to(sequence)

    def evict_all(self) -> int:
        """Drop every element from the ring (a purge); returns how many."""
        for appended in self._watchers:
            appended(None, None)
        return self.ring.evict_to(self.ring.tail + 1)

    def release(self) -> None:
        """The ring released elements: the store may drop what its retention allows.

        Call only once the state that no longer needs them is durable: a crash
        before that point recovers older commits, whose elements must still be on
        disk.
        """
        if self.store is not None:
            try:
                self.store.truncate(self.ring.head)
            except Exception as error:  # keeping too much is no loss: log it
                logger.warning("channel %d: store truncation failed: %s", self._channel, error)


def stored_part(batch: StoredBatch, start: int, stop: int, max_count: int) -> Run | None:
    """The elements of a stored batch at sequences ``start`` to ``stop - 1``, at most
    ``max_count``, as a run (None: none there)."""
    sequences = batch.sequences
    if sequences is None:
        offset = max(0, start - batch.first)
        end = min(len(batch.payload), stop - batch.first, offset + max_count)
        if end <= offset:
            return None
        return Run(batch.first + offset, batch.stamp, batch.payload.slice(offset, end))
    low = int(np.searchsorted(sequences, start))
    high = min(int(np.searchsorted(sequences, stop)), low + max_count)
    if high <= low:
        return None
    stamps = None if batch.stamps is None else batch.stamps[low:high]
    stamp = batch.stamp if stamps is None else float(stamps[0])
    payload = batch.payload.slice(low, high)
    return Run(int(sequences[low]), stamp, payload, sequences[low:high], stamps)


def runs_before(runs: list[Run], stop: int) -> list[Run]:
    """``runs`` cut before sequence ``stop``."""
    if not runs or runs[-1].last < stop:
        return runs
    kept: list[Run] = []
    for run in runs:
        if run.first >= stop:
            break
        if run.last < stop:
            kept.append(run)
            continue
        if run.sequences is None:
            count = stop - run.first
        else:
            count = int(np.searchsorted(run.sequences, stop))
        kept.append(run.part(0, count))
        break
    return kept
