"""A channel's part in transactions: staging, two-phase commit, orphans, recovery.

A transaction's holder (``raytopic.transaction.handles``) stages its publishes
here, then asks its lead channel to end it (``raytopic.actors.transaction_lead``
drives the commit there):

1. ``stage``: each publish sends its elements to their channel, which keeps
   them apart from the ring (they hold room; no reader sees them).
2. ``prepare`` at every participant but the lead, in parallel: the channel
   checks it has every staged element (a restart loses staged elements) and
   that each consumed commit's member still owns the channel, then keeps the
   elements and the commits in its durable state.
3. ``decide`` at the lead, in its own process: the same checks, then in one
   step it appends its part, applies its commits and records the outcome in
   its durable state. The transaction is committed (or aborted) exactly when
   that state write is done.
4. ``finish`` at the others: the outcome; a commit appends the elements as one
   record (consecutive positions) and applies the commits.
5. ``forget`` at the lead, when all finished.

A participant that restarts while prepared, or whose lead went quiet, asks
the lead (``resolve``); an undecided transaction past its deadline is aborted
there, first come first served with the lead's own ``decide``. Until a prepared
transaction's commit of a group's channel is resolved, only the member that
made it reads that channel for the group (another would read again what the
transaction may commit). Staged transactions past their deadline (a dead
holder's) are dropped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import weakref
from typing import Any

import ray

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.channel_state import ChannelState, Keep
from raytopic.actors.done_ranges import DONE_RANGES_KEPT
from raytopic.actors.readers import Readers
from raytopic.actors.stores.base import StoredBatch
from raytopic.actors.transaction_table import (
    TransactionEntry,
    TransactionTable,
    aborted_error,
    transactional_id_of,
)
from raytopic.core.config import Overflow
from raytopic.core.errors import (
    DataLossError,
    TopicFullError,
    TopicNotFoundError,
    TransactionAbortedError,
)
from raytopic.core.naming import channel_actor
from raytopic.core.payloads import Payload
from raytopic.core.protocol import (
    FENCED,
    Address,
    ConsumedCommit,
    DecideTransaction,
    FenceTransactions,
    FinishTransaction,
    ForgetTransaction,
    Outcome,
    PrepareTransaction,
    ResolveTransaction,
    StageTransaction,
    TransactionRequest,
    pack_request,
)

logger = logging.getLogger(__name__)

__all__ = ["PUBLISHER_PREFIX", "TransactionParticipant", "send"]

PUBLISHER_PREFIX = "tx:"
"""A committed transaction's record carries ``tx:<key>`` as its publisher id, so a
restarted channel knows which prepared transactions it already appended."""

TEND_INTERVAL = 0.5
"""Seconds between looks for expired and in-doubt transactions."""

IN_DOUBT_AFTER = 2.0
"""Seconds a prepared transaction waits for its outcome before asking its lead."""


def send(at: Address, request: TransactionRequest, payload: Payload | None = None) -> Any:
    """Send a transaction's request to channel ``at`` (anywhere); returns its ObjectRef
    (``ray.get`` it, or await it in an actor).

    Raises:
        TopicNotFoundError: the channel's topic does not exist.
    """
    packed = pack_request(request)
    if payload is None:
        return channel_actor(*at).request.remote(packed)
    return channel_actor(*at).request.remote(packed, payload)


class TransactionParticipant:
    """This channel's transactions (see the module docstring).

    Args:
        context: The channel's identity and wake-up signal.
        log: The channel's log (staged elements hold room in it).
        readers: The channel's readers (consumed commits move group cursors).
        state: The channel's durable state (the ``transactions`` section).
    """

    def __init__(
        self, context: ChannelContext, log: ChannelLog, readers: Readers, state: ChannelState
    ) -> None:
        self._context = context
        self._log = log
        self._readers = readers
        self._owned = readers.owned
        self._state = state
        self.table = TransactionTable()
        self.needs_tending = False
        self._stored: dict[str, tuple[tuple[int, int], ...]] = {}  # found in the store
        self._decisions: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )  # a lock lives while a decision holds or awaits it

    # -- the holder's calls ---------------------------------------------------------

    async def stage(self, request: StageTransaction, payload: Payload | None) -> int:
        """Keep ``payload`` for the transaction; returns how many elements it staged here.

        Raises:
            TransactionAbortedError: the transaction was aborted here (fenced, timed out).
            TopicFullError: no room for the elements (within the timeout, with "block").
            InvalidArgumentError: an element without a key for a compacted channel.
        """
        now = time.time()
        channel = self._context.channel
        entry = self.table.for_staging(
            request.key, request.transactional_id, request.deadline, now, channel
        )
        if payload is None or not len(payload):
            return entry.staged
        refused = self._log.unkeyed(payload)
        if refused is not None:
            raise refused
        count = len(payload)
        policy = self._context.config.overflow
        if policy is not Overflow.OVERWRITE:
            capacity = self._log.ring.capacity
            if count + entry.staged > capacity:
                raise TopicFullError(
                    f"a transaction stages at most the capacity of channel {channel} "
                    f"({capacity} elements); {entry.staged + count} asked"
                )
            deadline = None if request.timeout is None else time.monotonic() + request.timeout
            if policy is Overflow.BLOCK:
                await self._log.wait_room(count, deadline)
            if self._log.room() < count:
                raise TopicFullError(
                    f"channel {channel} has room for {self._log.room()} of {count} "
                    "values staged in a transaction: none staged"
                )
            # The wait may have let an abort in.
            entry = self.table.for_staging(
                request.key, request.transactional_id, request.deadline, now, channel
            )
        self.table.stage(entry, payload.owned())
        self._reserve()
        self.needs_tending = True
        return entry.staged

    async def prepare(self, request: PrepareTransaction) -> Outcome | None:
        """Check the transaction's part here and keep it durably.

        Returns:
            None; "commit" if it already committed here (its lead asks again).

        Raises:
            TransactionAbortedError: the part cannot commit (it is aborted here).
        """
        entry = self.table.record(
            request.key, request.transactional_id, request.deadline, time.time()
        )
        if entry.done:
            if entry.outcome == Outcome.ABORT:
                raise aborted_error(entry, self._context.channel)
            return entry.outcome
        commits = self._check(entry, request.staged, tuple(request.commits))
        self.table.prepare(entry, request.lead, commits)
        entry.began = time.time()
        self.needs_tending = True
        self._state.touch("transactions", entry.key)
        return None

    async def decide(self, request: DecideTransaction) -> tuple[Outcome, str, Any]:
        """At the lead: the transaction's outcome, decided here once and for all, and
        durable before it returns (the lead tells the others only then).

        Returns:
            (outcome, reason, the (first, count) runs appended here).
        """
        async with self._deciding(request.key):
            return await self._decide(request)

    async def _decide(self, request: DecideTransaction) -> tuple[Outcome, str, Any]:
        entry = self.table.record(
            request.key, request.transactional_id, request.deadline, time.time()
        )
        if not entry.done:
            if request.outcome != Outcome.COMMIT:
                self._abort(entry, request.reason)
            else:
                try:
                    commits = self._check(entry, request.staged, tuple(request.commits))
                except TransactionAbortedError:
                    pass  # aborted here: that is the decision
                else:
                    if commits and entry.staged:
                        # The commit point is the record of this part's elements;
                        # the group positions it moves here are kept first, as a
                        # participant's are, so a restart between the two can
                        # finish them from the record (recover()).
                        self.table.prepare(entry, self.address, commits)
                        self._state.touch("transactions", entry.key)
                        await self._state.checkpoint()
                    entry.commits = commits
                    await self._apply(entry)
            self._context.metrics.transaction_decided(entry.outcome == Outcome.COMMIT)
        for key in request.forget:
            if self.table.forget(key):
                self._state.touch("transactions", key)
        await self._state.checkpoint()  # the commit point: before any other hears it
        return entry.outcome or Outcome.ABORT, entry.reason, entry.runs

    async def finish(self, request: FinishTransaction) -> tuple[Any, ...]:
        """The lead decided: apply the outcome here; returns the runs appended.

        Raises:
            DataLossError: a commit of a transaction this channel no longer holds
                (it restarted without a store after it prepared).
        """
        entry = self.table.get(request.key)
        if entry is None:
            if request.outcome == Outcome.COMMIT:
                raise self._lost(request.key)
            entry = self.table.record(
                request.key, request.transactional_id, request.deadline, time.time()
            )
        if not entry.done:
            if request.outcome == Outcome.COMMIT:
                await self._apply(entry)
            else:
                self._abort(entry, request.reason)
        return entry.runs

    def decided(self, key: str) -> bool:
        """Whether the transaction's outcome is recorded here."""
        entry = self.table.get(key)
        return entry is not None and entry.done

    async def committed_elsewhere(self, request: DecideTransaction) -> DataLossError | None:
        """At a lead that restarted without a store: a participant already finished
        "commit", so this lead had decided it before it lost everything. Record the
        decision again (participants that ask get "commit", not an abort at the
        deadline); returns the loss of this lead's own part (None: it had none).
        """
        async with self._deciding(request.key):
            entry = self.table.record(
                request.key, request.transactional_id, request.deadline, time.time()
            )
            if not entry.done:
                self.table.finish(entry, Outcome.COMMIT)
                self._reserve()
                self._state.touch("transactions", entry.key)
                await self._state.checkpoint()  # before the lead tells anyone
            elif entry.outcome != Outcome.COMMIT:
                logger.error(
                    "channel %d: transaction %s committed at a participant but was "
                    "aborted here after a restart without a store",
                    self._context.channel,
                    request.key,
                )
        return self._lost(request.key) if request.staged else None

    def _lost(self, key: str) -> DataLossError:
        """The error of a committed transaction whose part here a restart lost."""
        return DataLossError(
            f"channel {self._context.channel} of {self._context.name!r} lost "
            f"transaction {key} after it prepared (it restarted without "
            "a store): its part of the committed transaction is lost",
            head_sequence=self._log.ring.head,
            channel=self._context.channel,
            old_epoch=0,  # which incarnation held it is not known here
            new_epoch=self._context.epoch,
        )

    async def resolve(self, request: ResolveTransaction) -> str | None:
        """At the lead: the outcome (None while undecided and within its deadline)."""
        entry = self.table.get(request.key)
        if entry is not None and entry.done:
            return entry.outcome
        if time.time() < request.deadline:
            return None
        async with self._deciding(request.key):
            entry = self.table.record(
                request.key, request.transactional_id, request.deadline, time.time()
            )
            if entry.done:  # decided while this waited
                return entry.outcome
            self._abort(entry, "it timed out before it committed")
            self._context.metrics.transaction_decided(False)
            return Outcome.ABORT

    def _deciding(self, key: str) -> asyncio.Lock:
        """The lock one transaction's decision here is made under: a decision awaits
        its state write and its append, and another (the registry's abort of a
        fenced holder, a participant's resolve) must see it made, not half made."""
        lock = self._decisions.get(key)
        if lock is None:
            lock = self._decisions[key] = asyncio.Lock()
        return lock

    async def fence(self, request: FenceTransactions) -> None:
        """Abort the staged transactions of older incarnations of the id."""
        for entry in self.table.fence(request.transactional_id, request.epoch):
            self._abort(entry, FENCED)
            self._context.metrics.transaction_decided(False)  # no lead will decide it

    async def forget(self, request: ForgetTransaction) -> None:
        """Every participant finished the transaction (nobody waits for it to be written)."""
        if self.table.forget(request.key):
            self._state.touch("transactions", request.key, Keep.SOON)

    # -- steps ---------------------------------------------------------------------

    def _check(
        self, entry: TransactionEntry, staged: int, commits: tuple[ConsumedCommit, ...]
    ) -> tuple[ConsumedCommit, ...]:
        """The part can commit: every staged element is here, every consumed
        commit's member still owns its channel. Else the part is aborted here.

        Returns:
            The commits, each with its group.

        Raises:
            TransactionAbortedError: why it cannot.
        """
        channel, name = self._context.channel, self._context.name
        checked = []
        reason = None
        if entry.staged != staged:
            reason = (
                f"channel {channel} of {name!r} holds {entry.staged} of the {staged} "
                "elements staged there (it restarted)"
            )
        for commit in commits:
            if reason is not None:
                break
            reader = self._readers.by_id.get(commit.reader_id)
            group = None if reader is None else reader.group
            cursor = None if group is None else self._owned.groups.get(group)
            if cursor is None or group is None:
                reason = f"the member that read channel {channel} of {name!r} left its group"
            elif cursor.owner != commit.lease or not cursor.read_stands(
                commit.jumps, max([commit.sequence, *(last for _, last in commit.done)])
            ):
                reason = (
                    f"the member no longer owns channel {channel} of {name!r} for group "
                    f"{group!r} (rebalanced, timed out, or reset since it read)"
                )
            elif commit.sequence > self._log.ring.tail:
                reason = f"position {commit.sequence} of channel {channel} was never published"
            else:
                checked.append(dataclasses.replace(commit, group=group))
        if reason is not None:
            self._abort(entry, reason)
            raise aborted_error(entry, channel)
        return tuple(checked)

    async def _apply(self, entry: TransactionEntry) -> None:
        """Commit the part here: append the elements as one record, move the cursors,
        and record the outcome (the unit of work writes the state)."""
        payload = entry.payload()
        change = None
        runs: tuple[tuple[int, int], ...] = ()
        if payload is not None:
            staged = entry.staged
            self.table.reserved -= staged  # its room is the append's now
            entry.staged = 0
            self._reserve()
            policy = self._context.config.overflow
            try:
                ack, change = await self._log.append(
                    payload,
                    Overflow.OVERWRITE if policy is Overflow.OVERWRITE else Overflow.FAIL,
                    None,
                    whole=True,
                    publisher_id=PUBLISHER_PREFIX + entry.key,
                    batch=0,
                )
                if ack.error is not None:
                    raise ack.error
            except BaseException:
                # Not appended (a store that refused it): the part keeps its room
                # and its count, for the retry of the call that applies it.
                self.table.reserved += staged
                entry.staged = staged
                self._reserve()
                raise
            pieces = ack.runs or ((ack.first, ack.accepted, ack.stamp),)
            runs = tuple((first, count) for first, count, _ in pieces)
        self._commit_consumed(entry.commits)
        self.table.finish(entry, Outcome.COMMIT, runs=runs)
        self._reserve()
        self._state.touch("transactions", entry.key)
        await self._log.durable(change)

    def _commit_consumed(self, commits: tuple[ConsumedCommit, ...]) -> None:
        """Move each group's cursor to the transaction's commit, and mark done what it
        consumed above it (ownership was checked when it prepared; a member that took
        the channel since waited for this)."""
        tail = self._log.ring.tail
        moved = False
        for commit in commits:
            cursor = self._owned.groups.get(commit.group)
            if cursor is None:
                continue
            kept = len(cursor.done.ranges)
            cursor.consumed(commit.sequence, tail, commit.done, commit.jumps)
            if kept <= DONE_RANGES_KEPT < len(cursor.done.ranges):
                logger.warning(
                    "channel %d: group %r keeps %d runs of done positions, past the %d "
                    "its acks may keep: its commit is held below an element not handed "
                    "over yet, and what committed transactions consumed above it is "
                    "never forgotten (each run costs memory and state writes)",
                    self._context.channel,
                    commit.group,
                    len(cursor.done.ranges),
                    DONE_RANGES_KEPT,
                )
            self._state.touch("groups", commit.group)
            self._context.metrics.committed()
            moved = True
        if moved:
            self._readers.commits_moved()
            self._context.notify()

    def _abort(self, entry: TransactionEntry, reason: str) -> None:
        if entry.done:
            return
        self.table.finish(entry, Outcome.ABORT, reason)
        self._reserve()
        self._state.touch("transactions", entry.key)
        self._context.notify()

    @property
    def address(self) -> Address:
        """This channel, as transactions name their participants."""
        config = self._context.config
        return Address(config.namespace, config.name, config.topic_id, self._context.channel)

    def _reserve(self) -> None:
        self._log.reserved = self.table.reserved
        self._context.notify()

    # -- orphans and the in-doubt ------------------------------------------------------

    async def tend(self) -> None:
        """Background, while transactions are open here: drop the expired staged ones,
        and ask the lead about prepared ones whose outcome is late."""
        while self.needs_tending:
            await asyncio.sleep(TEND_INTERVAL)
            async with self._state.unit_of_work():  # written as a request's changes are
                await self._tend_round()
            if not self.table.has_open:
                self.needs_tending = False

    async def _tend_round(self) -> None:
        """Abort the expired staged transactions; ask the leads of the late prepared."""
        now = time.time()
        for entry in self.table.expired(now):
            logger.info(
                "channel %d: transaction %s timed out with %d staged elements: aborted",
                self._context.channel,
                entry.key,
                entry.staged,
            )
            self._abort(entry, "it timed out before it committed (its holder is gone?)")
            self._context.metrics.transaction_decided(False)  # no lead will decide it
        for entry in self.table.in_doubt(now, IN_DOUBT_AFTER):
            await self._ask_lead(entry)

    async def _ask_lead(self, entry: TransactionEntry) -> None:
        """Ask the lead for a prepared transaction's outcome, and apply it if it came."""
        lead = entry.lead
        assert lead is not None
        request = ResolveTransaction(entry.key, entry.transactional_id, entry.deadline)
        try:
            outcome = await send(lead, request)
        except (TopicNotFoundError, ray.exceptions.ActorDiedError):
            if time.time() < entry.deadline:
                return
            # Its decision went with the lead's topic: what it decided is unknowable.
            logger.error(
                "channel %d: transaction %s lost its lead (topic %r destroyed): aborted here",
                self._context.channel,
                entry.key,
                lead.topic,
            )
            outcome = Outcome.ABORT
        except Exception:
            return  # the lead is restarting: ask again
        if entry.done or outcome is None:
            return
        if outcome == Outcome.COMMIT:
            await self._apply(entry)
        else:
            self._abort(entry, "its lead aborted it")

    # -- recovery ----------------------------------------------------------------------

    def learn(self, batch: StoredBatch) -> bool:
        """A stored record seen at recovery: True if a transaction appended it."""
        publisher_id = batch.publisher_id
        if not publisher_id.startswith(PUBLISHER_PREFIX):
            return False
        key = publisher_id[len(PUBLISHER_PREFIX) :]
        self._stored[key] = (*self._stored.get(key, ()), (batch.first, len(batch.payload)))
        return True

    def recover(self, saved: dict[str, Any]) -> None:
        """Load the transactions the store kept; one whose record is in the store
        committed before the restart: finish it (its commits too, if it prepared).

        A record is appended only once the transaction committed, so a record
        with no entry at all is a lead's own part whose state write the restart
        cut off: the lead decided "commit" (its readers see the elements), and
        that is what it answers the other participants.
        """
        self.table.restore(saved)
        for entry in list(self.table.open_entries()):
            runs = self._stored.pop(entry.key, None)
            if runs is not None:
                self._commit_consumed(entry.commits)
                self.table.finish(entry, Outcome.COMMIT, runs=runs)
        now = time.time()
        for key, runs in self._stored.items():
            if self.table.get(key) is None:
                entry = self.table.record(key, transactional_id_of(key), now, now)
                self.table.finish(entry, Outcome.COMMIT, runs=runs)
        self._stored.clear()
        self._reserve()
        self.needs_tending = self.table.has_open
