"""Readers that own their channel: anonymous subscribers and channel-owned groups. No Ray.

An anonymous subscriber has its own cursor on every channel; a channel-owned
group has one cursor per channel, leased to one member at a time (its
``lease``). The cursor keeps the reader's read position and its commit; a take
reads from the position its session names when the read position still stands
where that session left it (see ``Take``), and moves the read position over what
it hands out. A fetch's offer moves nothing: nothing is lent, so nothing is
given back.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from itertools import repeat
from typing import Any

import numpy as np

from raytopic.actors.channel_context import POLL_INTERVAL, ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.channel_state import ChannelState, Keep
from raytopic.actors.cursors import Cursor, bounded
from raytopic.actors.reader_parts import LossNotice, Reader, delivered_count, pick
from raytopic.actors.segment_ring import Run
from raytopic.core.errors import GroupNotFoundError, NotOwnerError, StaleSequenceError
from raytopic.core.protocol import (
    Chunk,
    CursorState,
    Delivery,
    Lease,
    Poison,
    ReaderLease,
    Take,
    poison_error,
)
from raytopic.core.protocol.channel import STANDS_UNKNOWN, Entries
from raytopic.core.records import AckStatus, CommitResult, CommitStatus, Position, _Origin

logger = logging.getLogger(__name__)

__all__ = ["GROUPS_FORMAT", "OwnedReaders"]

GROUPS_FORMAT = 1
"""The format of the groups section (see :meth:`OwnedReaders.state_of`)."""

HELD_POLL = 0.2
"""Seconds between looks at a transaction's commit a take waits for."""

_ALL = 1 << 62
"""No bound on what a take may read (no poison element ahead)."""

FILTERED_READ = 1000
"""Elements a filtered take looks at, at least: a filter that matches nothing
must not hold the actor for the whole buffer."""


class OwnedReaders:
    """The cursors of the readers that own this channel, and their groups'.

    Args:
        context: The channel's identity and wake-up signal.
        log: The channel's log.
        loss: The loss a restart without a store left to tell.
        state: The channel's durable state (cursors are kept there).
        lookup: The open reader of an id (raises SubscriberClosedError).
    """

    def __init__(
        self,
        context: ChannelContext,
        log: ChannelLog,
        loss: LossNotice,
        state: ChannelState,
        lookup: Callable[[str], Reader],
    ) -> None:
        self._context = context
        self._log = log
        self._loss = loss
        self._state = state
        self._lookup = lookup
        self.groups: dict[str, Cursor] = {}
        self.waits_for_commit: Callable[[str, Any], bool] = lambda group, lease: False
        """Whether a group's takes by ``lease`` wait for a prepared transaction's
        commit here (see ``raytopic.actors.transactions``)."""

    # -- cursors ----------------------------------------------------------------------

    def new_cursor(self, start_latest: bool) -> Cursor:
        """A cursor at the tail (``start_latest``) or at the head."""
        ring = self._log.ring
        return Cursor.starting_at(ring.tail + 1 if start_latest else ring.head)

    def cursor_of(self, reader: Reader, lease: ReaderLease, *, check: bool = True) -> Cursor:
        """The reader's cursor here: its own, or its group's if ``lease`` owns it.

        Raises:
            NotOwnerError: the group is gone, or ``lease`` does not own its channel.
        """
        if reader.cursor is not None:
            return reader.cursor
        group = reader.group
        cursor = self.groups.get(group)  # type: ignore[arg-type]
        if cursor is None:
            raise NotOwnerError(f"group {group!r} no longer exists")
        if check and (cursor.owner is None or cursor.owner != lease):
            raise NotOwnerError(
                f"channel {self._context.channel} of group {group!r} is not owned by {lease}"
            )
        return cursor

    def _owned_cursor(self, reader: Reader | None, lease: ReaderLease) -> Cursor | None:
        """The reader's cursor if it is open and ``lease`` owns it, else None."""
        if reader is None:
            return None
        try:
            return self.cursor_of(reader, lease)
        except NotOwnerError:
            return None

    def _touch(self, reader: Reader, keep: Keep = Keep.BEFORE_REPLY) -> None:
        """The reader's cursor changed: the state keeps it, as soon as ``keep`` says."""
        if reader.cursor is not None:
            self._state.touch("readers", reader.reader_id, keep)
        else:
            self._state.touch("groups", reader.group, keep)

    @property
    def polls_clock(self) -> bool:
        """Only a TTL removes elements with the clock here."""
        return self._context.config.ttl is not None

    def reader_closed(self, reader: Reader) -> None:
        """Nothing to give back: what an owned cursor delivered is read again after
        its commit."""

    def reported(self, reader: Reader, lease: ReaderLease) -> CursorState:
        """The reader's state as reported. A cursor left below the head (its next
        elements were overwritten or expired) reports the head as its next: that is
        what it reads next, and what was removed is not "remaining"."""
        state = self.state(reader, lease, check=lease is not None)
        head = self._log.ring.head
        return dataclasses.replace(state, next=head) if state.next < head else state

    def cursor_state(self, cursor: Cursor) -> CursorState:
        """A cursor as its readers see it."""
        return CursorState(
            cursor.next,
            cursor.committed,
            self._log.ring.tail,
            cursor.jumps,
            cursor.has_commit,
            cursor.unacked,
            cursor.stopped,
        )

    def state(self, reader: Reader, lease: ReaderLease, *, check: bool = True) -> CursorState:
        """The reader's cursor state here."""
        return self.cursor_state(self.cursor_of(reader, lease, check=check))

    def has_data(self, reader: Reader, lease: ReaderLease) -> bool:
        """Whether the reader has an element to read here now."""
        cursor = self.cursor_of(reader, lease)
        ring = self._log.ring
        if cursor.stopped:
            return False
        return cursor.next <= ring.tail or cursor.next < ring.head

    # -- taking -----------------------------------------------------------------------

    async def take(self, reader: Reader, take: Take) -> Delivery:
        """Hand the reader up to ``take.max_count`` elements from its read position, or
        from its session's (see ``Take``); with ``take.wait``, a fetch: once an element
        is there, an offer that leaves the read position where it stood (nothing if
        the read position moves first, or none comes within ``wait``).

        Raises:
            DataLossError: the cursor reached a damaged range, or the channel
                restarted without a store (each told once).
            StaleSequenceError: the cursor's next elements were removed.
            NotOwnerError: ``take.lease`` does not own the group's channel.
            SubscriberClosedError: the reader closed meanwhile.
        """
        cursor = self.cursor_of(reader, take.lease)
        if reader.group is not None:
            while self.waits_for_commit(reader.group, take.lease):
                await self._context.wait_change(HELD_POLL)
                reader = self._lookup(reader.reader_id)
                cursor = self.cursor_of(reader, take.lease)
        self._place(reader, cursor, take)
        if take.wait > 0:
            found = await self._until_data(reader, cursor, take.lease, take.wait)
            if found is None:
                return self._as_delivery(reader, cursor, take.lease, [])
            reader, cursor = found
        elif take.max_count <= 0:
            self._touch(reader, Keep.WITH_NEXT_WRITE)
            return self._as_delivery(reader, cursor, take.lease, [])
        return self._serve(reader, cursor, take.lease, take.max_count, offer=take.wait > 0)

    def take_now(self, reader: Reader, take: Take) -> Delivery | None:
        """``take`` (a plain take: no wait, no read again) served now when the reader
        has an element to read here and no transaction's commit holds the group back;
        else None, and nothing changed. What the request that woke a receive waiting
        at this channel takes for it once done (``ReceiveSession.take_for_waiting``).

        Raises:
            As :meth:`take`.
        """
        if take.wait > 0 or take.max_count <= 0 or take.again:
            return None
        if reader.group is not None and self.waits_for_commit(reader.group, take.lease):
            return None
        if not self.has_data(reader, take.lease):
            return None
        cursor = self.cursor_of(reader, take.lease)
        self._place(reader, cursor, take)
        return self._serve(reader, cursor, take.lease, take.max_count, offer=False)

    @staticmethod
    def _place(reader: Reader, cursor: Cursor, take: Take) -> None:
        """Where ``take`` reads from: after the commit (``again``), or its session's
        position (if the read position stands where the session left it)."""
        behind = reader.cursor is None or cursor.has_commit  # a commit to go back to
        if take.again and behind and cursor.next > cursor.committed + 1:
            cursor.redeliver()  # what the lost session took comes again
        if (
            take.from_sequence is not None
            and take.jumps == cursor.jumps
            and (take.stands in (cursor.next, STANDS_UNKNOWN))
        ):
            cursor.read_from(take.from_sequence)
            if take.unseen:
                cursor.hold_commits_below(take.from_sequence)

    async def _until_data(
        self, reader: Reader, cursor: Cursor, lease: ReaderLease, wait: float
    ) -> tuple[Reader, Cursor] | None:
        """The reader and its cursor once an element is there to read, or None when
        the read position moved (or jumped) first, or after ``wait`` seconds."""
        stands = (cursor.next, cursor.jumps)
        deadline = time.monotonic() + wait
        while not self.has_data(reader, lease):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            polled = self.polls_clock  # a TTL removes elements with the clock
            await self._context.wait_change(min(left, POLL_INTERVAL) if polled else left)
            reader = self._lookup(reader.reader_id)
            cursor = self.cursor_of(reader, lease)
            if (cursor.next, cursor.jumps) != stands:
                return None
        return reader, cursor

    def _serve(
        self, reader: Reader, cursor: Cursor, lease: ReaderLease, max_count: int, *, offer: bool
    ) -> Delivery:
        """Deliver up to ``max_count`` elements from the cursor's read position (see
        :meth:`take`); an ``offer`` leaves the read position before them."""
        reader_id = reader.reader_id
        log = self._log
        ring = log.ring
        head = ring.head
        loss = self._loss.tell(reader_id)
        if loss is not None:
            cursor.skip_to_head(head)
            raise loss
        cursor.read_past_commit()
        if cursor.next < head and not log.kept_below_head(cursor.next):
            self._skip_lost(cursor)
        start = cursor.next
        before_done = cursor.skip_done()  # done positions are not delivered again
        passed = (start, cursor.next - 1) if cursor.next > start else None
        mark = cursor.poison_ahead()
        stopped = mark is not None and mark.poison.sequence == cursor.next
        if mark is not None and stopped and (not mark.reported or reader.spec.complete_on_empty):
            # Told once; a receive that would otherwise answer "empty" is told again.
            mark.reported = True
            raise poison_error(self._context.config.topic_id, self._context.channel, mark.poison)
        # Never read past a poison element ahead (one found by an earlier take).
        readable = _ALL if mark is None else mark.poison.sequence - cursor.next
        if before_done is not None:
            readable = min(readable, before_done)
        poison = None
        if stopped or readable <= 0 or cursor.next > ring.tail:
            chunks, next_sequence = [], cursor.next
        elif reader.filter is None and reader.converter is None:
            runs = self._deliverable(cursor, log.read(cursor.next, min(max_count, readable)))
            chunks = [run.chunk() for run in runs]
            next_sequence = runs[-1].last + 1 if runs else cursor.next
        else:
            looked = min(max(max_count, FILTERED_READ), readable)
            runs = self._deliverable(cursor, log.read(cursor.next, looked))
            picked = pick(
                runs,
                reader.filter,
                reader.converter,
                max_count,
                skip_poison=reader.spec.skip_poison,
            )
            chunks, poison = picked.chunks, picked.poison
            next_sequence = max(picked.next_sequence, cursor.next)
            self._skipped(reader_id, picked.skipped)
        last_delivered = _last_sequence(chunks) if chunks else cursor.next - 1
        # A filter's misses are read, not delivered: done.
        for first, last in _misses(cursor.next, next_sequence, chunks):
            cursor.missed(first, last)
        if chunks:
            self._context.metrics.delivered(*delivered_count(chunks), time.time() - chunks[0].stamp)
            cursor.delivered(last_delivered, next_sequence)
        else:
            cursor.next = next_sequence
        self._touch(reader, Keep.WITH_NEXT_WRITE)  # what is not committed is read again
        if poison is not None:
            # What came before it is delivered now; the next take tells of it.
            cursor.stop_at(poison, reported=not chunks)
            logger.warning(
                "channel %d: reader %s stops before poison element %d (%s: %s)",
                self._context.channel,
                reader_id,
                poison.sequence,
                poison.cause_type,
                poison.cause_message,
            )
            if not chunks:
                raise poison_error(self._context.config.topic_id, self._context.channel, poison)
        stands = None
        if offer and chunks:
            # Nothing moves for a fetch's offer: its session's next take (or its
            # pause) moves the read position over what it handed over.
            stands = chunks[0].first
            cursor.rewind(stands)
        return self._as_delivery(
            reader, cursor, lease, chunks, next_sequence, stopped, stands, passed
        )

    def _as_delivery(
        self,
        reader: Reader,
        cursor: Cursor,
        lease: ReaderLease,
        chunks: list[Chunk],
        next_sequence: int | None = None,
        stopped: bool = False,
        stands: int | None = None,
        passed: tuple[int, int] | None = None,
    ) -> Delivery:
        """``chunks`` as the reader gets them, with the cursor's state (``passed``: the
        done positions the take read past)."""
        config = self._context.config
        origin = _Origin(
            config.topic_id,
            config.name,
            config.namespace,
            reader.reader_id,
            lease,
            cursor.jumps,
            skip_poison=reader.spec.skip_poison,
        )
        return Delivery.pack(
            self._context.channel,
            chunks,
            cursor.jumps,
            cursor.next if next_sequence is None else next_sequence,
            self._log.ring.tail,
            cursor.committed,
            origin,
            cursor.unacked,
            stopped or cursor.stopped,
            stands,
            passed,
        )

    def _skipped(self, reader_id: str, skipped: tuple[Poison, ...]) -> None:
        """A skipping reader passed over poison elements: logged and counted."""
        for poison in skipped:
            logger.warning(
                "channel %d: reader %s skips poison element %d (%s: %s)",
                self._context.channel,
                reader_id,
                poison.sequence,
                poison.cause_type,
                poison.cause_message,
            )
        if skipped:
            self._context.metrics.poison_skipped(len(skipped))

    def report_poison(
        self, reader: Reader | None, lease: ReaderLease, jumps: int, poison: Poison, skipped: bool
    ) -> bool:
        """A receive's reply held a poison element its reader could not decode.

        A skipping reader passed over it (counted here); any other stops before
        it, told already (``reported``) or by its next take here. Refused (False)
        when the cursor jumped since that take (a seek, reset, or new owner).
        """
        cursor = self._owned_cursor(reader, lease)
        if cursor is None or cursor.jumps != jumps:
            return False
        if skipped:
            self._skipped(reader.reader_id, (poison,))  # type: ignore[union-attr]
            return True
        cursor.stop_at(poison, reported=False)
        logger.warning(
            "channel %d: reader %s stops before poison element %d (%s: %s)",
            self._context.channel,
            reader.reader_id,  # type: ignore[union-attr]
            poison.sequence,
            poison.cause_type,
            poison.cause_message,
        )
        self._touch(reader, Keep.WITH_NEXT_WRITE)  # type: ignore[arg-type]
        self._context.notify()
        return True

    def _deliverable(self, cursor: Cursor, runs: list[Run]) -> list[Run]:
        """What a cursor's take may deliver of ``runs`` (the log's one damage rule);
        a take that starts at a damaged range moves the cursor past it and raises.

        Raises:
            DataLossError: the cursor reached a damaged range (named in the error).
        """
        runs, lost = self._log.readable(runs)
        if lost is not None and not runs:
            cursor.pass_lost(*lost)
            raise self._log.lost(lost)
        return runs

    def _skip_lost(self, cursor: Cursor) -> None:
        """The cursor's next elements are gone (overwritten, expired, or past the
        store's retention): move it to the next one there is and say so once.

        Raises:
            StaleSequenceError: always (naming what was skipped).
        """
        resume = self._log.resume_point(cursor.next)
        skipped = cursor.skip_to_head(resume)
        raise StaleSequenceError(
            f"channel {self._context.channel}: {skipped} elements were removed before they "
            f"were received; continuing from {resume}",
            head_sequence=resume,
            skipped=skipped,
        )

    # -- commits and seeks ------------------------------------------------------------

    def commit(
        self,
        reader: Reader | None,
        sequence: int,
        lease: ReaderLease,
        jumps: int | None = None,
        bound: int | None = None,
    ) -> CommitResult:
        """Commit ``sequence`` (and every earlier one) for the reader or its group;
        ``jumps``: the count an element's commit read it at (None: a bare position);
        no further than ``bound`` (see ``Cursor.commit``). The result names the
        position committed."""
        cursor = self._owned_cursor(reader, lease)
        if cursor is not None:
            bound = cursor.commit_bound(bound)  # (what a lost reply carried: see Take.unseen)
        status = (
            CommitStatus.NOT_OWNER
            if cursor is None
            else cursor.commit(sequence, self._log.ring.tail, jumps, bound)
        )
        if status in (CommitStatus.COMMITTED, CommitStatus.ALREADY_COMMITTED):
            sequence = bounded(sequence, bound)
        position = Position(self._context.config.topic_id, self._context.channel, sequence)
        if status is CommitStatus.COMMITTED:
            self._context.metrics.committed()
            self._touch(reader)  # type: ignore[arg-type]
        return CommitResult(self._context.channel, position, status)

    def ack(
        self,
        reader: Reader | None,
        lease: ReaderLease,
        entries: Entries,
        jumps: tuple[int, ...] = (),
    ) -> list[AckStatus]:
        """Mark elements done one by one (``Element.ack``; ``jumps``: the count each
        was read at): the commit advances over the done positions right after it
        (see ``Cursor.ack``). NOT_OWNER for each when ``lease`` does not own the
        channel; REJECTED for one a commit of it would be refused; else ACKED.
        With a store, answered once the done positions are on disk."""
        cursor = self._owned_cursor(reader, lease)
        if cursor is None:
            return [AckStatus.NOT_OWNER] * len(entries)
        tail = self._log.ring.tail
        committed = cursor.committed
        statuses, changed = [], False
        for (sequence, _, _), read_at in zip(entries, jumps or repeat(None), strict=False):
            status = cursor.ack(sequence, tail, read_at)
            changed |= status is CommitStatus.COMMITTED
            refused = status is CommitStatus.REJECTED
            statuses.append(AckStatus.REJECTED if refused else AckStatus.ACKED)
        if self._context.config.compaction is not None:
            changed |= cursor.over_gaps(self._first_element_at)
        if changed:
            self._touch(reader)  # type: ignore[arg-type]
        if cursor.committed != committed:
            self._context.metrics.committed()
        return statuses

    def _first_element_at(self, sequence: int) -> int:
        """The position of the first element at or after ``sequence`` (itself when it
        is not readable: below what the channel keeps)."""
        try:
            runs = self._log.read(sequence, 1)
        except StaleSequenceError:
            return sequence
        return runs[0].first if runs else self._log.ring.tail + 1

    def advance(self, group: str, sequence: int) -> None:
        """A stream's commit of ``group`` through ``sequence`` (see ``Cursor.advance``).

        Raises:
            GroupNotFoundError: no such group here.
        """
        cursor = self.groups.get(group)
        if cursor is None:
            raise GroupNotFoundError.of(self._context.name, group)
        if cursor.advance(sequence):
            self._context.metrics.committed()
            self._state.touch("groups", group)

    def seek(
        self, reader: Reader, lease: ReaderLease, target: int | float, by_time: bool, commit: bool
    ) -> tuple[int, int]:
        """Move the reader's cursor; return (position set, new jump count)."""
        cursor = self.cursor_of(reader, lease)
        ring = self._log.ring
        position = ring.first_after(target) - 1 if by_time else int(target)
        position = cursor.seek(position, ring.head, ring.tail, commit=commit)
        self._touch(reader)
        return position, cursor.jumps

    async def seek_to_committed(self, reader: Reader, lease: ReaderLease) -> tuple[int, int]:
        """Move the reader's cursor back to its commit (see ``Cursor.reset_to_commit``);
        return (the commit, new jump count). A prepared transaction's commit of the
        group here (the member's last one, whose finish may come after its holder
        had the answer) lands first: the cursor goes back to the commit it makes.

        Raises:
            NotOwnerError: ``lease`` does not own the group's channel.
        """
        # Any member's prepared commit (no lease is the member's own here).
        while reader.group is not None and self.waits_for_commit(reader.group, None):
            await self._context.wait_change(HELD_POLL)
        cursor = self.cursor_of(reader, lease)
        position = cursor.reset_to_commit()
        self._touch(reader)
        self._context.notify()
        return position, cursor.jumps

    def skip_to_head(self, readers: Iterator[Reader]) -> None:
        """Every cursor continues at the head (the elements before it were purged)."""
        head = self._log.ring.head
        for group, cursor in self.groups.items():
            cursor.skip_to_head(head)
            self._state.touch("groups", group)
        for reader in readers:
            if reader.cursor is not None:
                reader.cursor.skip_to_head(head)
                self._state.touch("readers", reader.reader_id)

    def lowest_committed(self) -> int | None:
        """The lowest commit of the groups (None: no group)."""
        return min((cursor.committed for cursor in self.groups.values()), default=None)

    # -- groups (the coordinator's calls) ---------------------------------------------

    def ensure_group(self, group: str, start_latest: bool) -> tuple[CursorState, bool]:
        """The group's cursor here, created if new; returns (its state, created)."""
        cursor = self.groups.get(group)
        created = cursor is None
        if cursor is None:
            cursor = self.groups[group] = self.new_cursor(start_latest)
            self._state.touch("groups", group)
        return self.cursor_state(cursor), created

    def grant(self, group: str, lease: Lease | None) -> bool:
        """Give the group's channel to a member (None: to nobody); True if it changed.

        Raises:
            GroupNotFoundError: no such group here.
        """
        cursor = self.groups.get(group)
        if cursor is None:
            raise GroupNotFoundError.of(self._context.name, group)
        if cursor.owner == lease:
            return False
        cursor.grant(lease)
        self._state.touch("groups", group)
        self._context.notify()
        return True

    def reset(self, group: str, target: int) -> tuple[int, dict[str, Any]]:
        """Move the group's read and commit positions after ``target``; returns
        (position, previous state for :meth:`restore`).

        Raises:
            GroupNotFoundError: no such group here.
        """
        cursor = self.groups.get(group)
        if cursor is None:
            raise GroupNotFoundError.of(self._context.name, group)
        previous = {
            "next": cursor.next,
            "committed": cursor.committed,
            "has_commit": cursor.has_commit,
            "reset_floor": cursor.reset_floor,
            "delivered_high": cursor.delivered_high,
            "reset_jumps": cursor.reset_jumps,
            "unread": list(cursor.unread),
            "done": cursor.done,
        }
        ring = self._log.ring
        position = cursor.reset(target, ring.head, ring.tail)
        self._state.touch("groups", group)
        return position, previous

    def restore(self, group: str, previous: dict[str, Any]) -> bool:
        """Undo a reset (a reset of several channels is all or nothing)."""
        cursor = self.groups.get(group)
        if cursor is None:
            return False
        for name, value in previous.items():
            setattr(cursor, name, value)
        cursor.jumps += 1
        self._state.touch("groups", group)
        self._context.notify()
        return True

    def describe(self) -> dict[str, dict[str, Any]]:
        """Every group's cursor here (``describe``, a restarted coordinator)."""
        return {
            group: {
                "next": cursor.next,
                "committed": cursor.committed,
                "has_commit": cursor.has_commit,
                "unacked": cursor.unacked,
                "owner": cursor.owner,
                "jumps": cursor.jumps,
                "done": cursor.done.count(  # above what lag counts from (see lag)
                    max(cursor.committed, self._log.ring.head - 1) + 1, self._log.ring.tail
                ),
            }
            for group, cursor in self.groups.items()
        }

    def lag(self, head: int, tail: int) -> Iterator[tuple[str, int, int]]:
        """Per group: (name, lag behind the tail, elements not yet delivered), of the
        elements from ``head`` on (those below it expired or were dropped)."""
        for group, cursor in self.groups.items():
            floor = max(cursor.committed, head - 1)
            done = cursor.done.count(floor + 1, tail) if cursor.done else 0
            yield group, max(0, tail - floor - done), max(0, tail - max(cursor.next, head) + 1)

    # -- durable state ------------------------------------------------------------------

    def state_keys(self) -> Iterator[str]:
        """The groups the state keeps (the section ``groups``)."""
        return iter(self.groups)

    def state_of(self, group: str) -> dict[str, object] | None:
        """A group's cursor as the state keeps it (None: gone)."""
        cursor = self.groups.get(group)
        return None if cursor is None else cursor.to_state()

    def restore_state(self, saved: dict[str, Any]) -> None:
        """Bring back the group cursors a state kept (each after its commit)."""
        for group, state in saved.items():
            self.groups[group] = Cursor.from_state(state, group=True)


def _misses(start: int, next_sequence: int, chunks: list[Chunk]) -> Iterator[tuple[int, int]]:
    """The ranges a take read from ``start`` up to ``next_sequence`` and did not
    deliver in ``chunks`` (a filter's misses)."""
    expected = start
    for chunk in chunks:
        sequences = chunk.sequences
        if sequences is None:
            if chunk.first > expected:
                yield expected, chunk.first - 1
            expected = chunk.first + len(chunk.payload)
            continue
        if sequences[0] > expected:
            yield expected, int(sequences[0]) - 1
        for gap in np.flatnonzero(np.diff(sequences) > 1):
            yield int(sequences[gap]) + 1, int(sequences[gap + 1]) - 1
        expected = int(sequences[-1]) + 1
    if next_sequence > expected:
        yield expected, next_sequence - 1


def _last_sequence(chunks: list[Chunk]) -> int:
    last = chunks[-1]
    if last.sequences is not None:
        return int(last.sequences[-1])
    return last.first + len(last.payload) - 1
