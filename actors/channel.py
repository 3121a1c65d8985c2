"""The channel actor: one per channel of a topic, a shell around plain parts.

The actor answers Ray calls; each call is a few lines handed to the part whose
job it is. What the parts share (identity, epoch, wake-up signal, whether the
channel serves or has failed) is the
:class:`~raytopic.actors.channel_context.ChannelContext`. The shell does three
things itself, each in one place: it serves every request as a unit of work
(:meth:`ChannelState.unit_of_work`: the reply waits until what the request
changed is durable), it starts the background jobs the state needs after each
request (``_tend``, :class:`~raytopic.actors.channel_jobs.ChannelJobs`; ``close``
stops them), and it guards calls while the channel recovers or has failed.
The parts:

- :class:`~raytopic.actors.channel_log.ChannelLog`: the ring buffer and the
  store as one log (appends, reads below and above the head, durability, room);
- :class:`~raytopic.actors.publisher_table.PublisherTable`: publishers' turns,
  retry acks, idle sweep;
- :class:`~raytopic.actors.readers.Readers`: the open readers, served by
  :class:`~raytopic.actors.owned_readers.OwnedReaders` (anonymous readers and
  channel-owned groups) or :class:`~raytopic.actors.shared_groups.SharedGroups`;
- :class:`~raytopic.actors.dead_letters.DeadLetters`: the only code that calls
  another topic;
- :class:`~raytopic.actors.session_host.SessionHost`: receive sessions, the
  ports to sibling channels, group views;
- :class:`~raytopic.actors.transactions.TransactionParticipant`: staged
  elements and the two-phase commit of transactions;
- :class:`~raytopic.actors.stream_steps.StreamSteps`: a stream's offset log here,
  and the steps this channel leads;
- :class:`~raytopic.actors.channel_state.ChannelState`: the durable state (each
  part snapshots and restores its own section) and what changed in it.

It is an async actor: appends, takes and commits are short synchronous steps
between awaits, so each is atomic; waiting (for data, for room, for a turn) is
awaiting. ``raytopic.coordinator.launch`` creates the channels of a topic
(named, detached) and the coordinator introduces them with ``attach``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import ray

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_dispatch import SERVED, Admit, call_handler, entry, serves
from raytopic.actors.channel_jobs import ChannelJobs
from raytopic.actors.channel_metrics import REFRESH_INTERVAL as METRICS_REFRESH_INTERVAL
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.channel_state import Keep
from raytopic.actors.readers import loaded_functions
from raytopic.actors.ring_api import check_payload
from raytopic.actors.segment_ring import Run
from raytopic.actors.session_host import remote_caller
from raytopic.actors.stored_topic import StoredTopic
from raytopic.actors.stream_steps import RayStreamPeers, StreamSteps
from raytopic.actors.transaction_lead import RayPeers, TransactionLead
from raytopic.actors.transactions import TransactionParticipant
from raytopic.core.actor_logs import log_info_here
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import (
    ChannelUnavailableError,
    InvalidArgumentError,
    StoreError,
    TopicError,
)
from raytopic.core.gather import Joined, join_replies
from raytopic.core.incarnation import was_restarted
from raytopic.core.naming import channel_actor_name, coordinator_actor_name
from raytopic.core.payloads import Payload
from raytopic.core.protocol import (
    CHANNEL_REQUESTS,
    CONTROL_REQUESTS,
    TRANSACTION_REQUESTS,
    Ack,
    AddAll,
    Append,
    AppendAck,
    AppendOnce,
    AppendPieces,
    ChannelRestarted,
    Chunk,
    CloseReader,
    Commit,
    ControlRequest,
    CursorState,
    DecideTransaction,
    Delivery,
    DestroyGroup,
    EndReceives,
    EndTransaction,
    EnsureGroup,
    ExtendHold,
    FenceTransactions,
    FinishTransaction,
    FirstAfter,
    ForgetTransaction,
    Grant,
    GrantStream,
    InterruptReceives,
    Lease,
    MarkDestroyed,
    Nack,
    OpenReader,
    OpenStore,
    PauseReceives,
    Poison,
    PrepareTransaction,
    Purge,
    RawReadResult,
    ReadActivity,
    ReadCursor,
    ReaderSpec,
    ReadGroupCursors,
    ReadGroupLag,
    ReadGroupMarks,
    ReadHandOverMark,
    ReadMany,
    ReadNewest,
    ReadOne,
    ReadOpeningError,
    ReadRange,
    ReadReaderSpecs,
    ReadResequencerStats,
    ReadRingFigures,
    ReadStoredTopic,
    Receive,
    ReceivedBatch,
    RemoveStore,
    ReportPoison,
    ResetGroup,
    ResolveTransaction,
    RestoreGroup,
    ResumeReceives,
    RingFigures,
    Seek,
    SeekToCommitted,
    StageTransaction,
    StatusBatch,
    StreamLogState,
    StreamRequest,
    Take,
    UpdateViews,
    Watch,
    unpack_request,
)
from raytopic.core.records import AckStatus, CommitResult
from raytopic.core.shared_group import SharedGroup
from raytopic.core.topic_record import TopicRecord

logger = logging.getLogger(__name__)

__all__ = ["ChannelActor"]

_ANNOUNCE_AGAIN = 2.0  # s a call waiting for the groups waits before re-announcing

_SEED_TIMEOUT = 30.0
"""Seconds a call to a channel restarted without a store waits for the coordinator's
epoch and groups (then ChannelUnavailableError)."""


class ChannelActor:
    """One channel: ring buffer, cursors, group positions, receive sessions.

    **Ordering**: a channel appends one publisher's batches in the order the
    publisher numbered them, and delivers to each reader in sequence order.

    **Back-pressure**: with overflow ``"block"`` an append waits for room
    (freed by group commits with ``retain=False``, or by the TTL) up to the
    publisher's timeout.

    Args:
        config: The topic's configuration.
        channel: This channel's number.
    """

    def __init__(self, config: TopicConfig, channel: int) -> None:
        log_info_here()
        self._channel = channel
        self._context = context = ChannelContext(
            config, channel, ChannelMetrics(config.name, channel)
        )
        self._opening_error: TopicError | None = None  # its store could not be opened
        self._restarted = was_restarted()
        self._announced = 0.0  # when the coordinator was last told of a restart
        self._jobs = ChannelJobs()
        self._reporting = False  # metrics are reported from the first publish or transaction
        self._parts = parts = ChannelParts.build(context, restarted=self._restarted)
        self._log, self._state, self._readers = parts.log, parts.state, parts.readers
        self._publishers, self._host = parts.publishers, parts.host
        self._streams, self._ring_api = parts.streams, parts.ring_api
        self._stream_steps = StreamSteps(
            channel,
            config.channels,
            parts.streams,
            parts.readers,
            parts.state,
            RayStreamPeers(config),
        )
        self._dead_letters = parts.dead_letters
        self._stored = StoredTopic(context, parts, restarted=self._restarted)
        try:
            if self._stored.open():
                self._seeded.set()
        except Exception as error:
            # Never raise out of __init__: Ray would mark the actor dead for good
            # and free its name. Come up failed instead, saying why.
            if isinstance(error, TopicError):
                self._opening_error = error
            if self._restarted:
                logger.exception("channel %d of %s cannot recover", channel, config.name)
            context.failure = (
                f"channel {channel} of topic {config.name!r} could not recover its store: {error}"
            )
        # Once the store named the topic's id (the lead names this channel by it).
        self._lead = self._new_lead()
        if self._restarted:
            self._announce_restart()

    @property
    def _config(self) -> TopicConfig:
        """The topic's configuration (its id: the one the store holds, if it holds one)."""
        return self._context.config

    def _new_lead(self) -> TransactionLead:
        parts = self._parts
        return TransactionLead(parts.transactions, RayPeers(), parts.transactions.address)

    def _announce_restart(self) -> None:
        """Tell the coordinator this channel came back (it is not polled): it restores
        a channel without a store and tells the siblings. Never raises (this
        runs in ``__init__``); a channel waiting for its groups asks again."""
        config = self._config
        self._announced = time.monotonic()
        try:
            coordinator = ray.get_actor(
                coordinator_actor_name(config.name), namespace=config.namespace
            )
            coordinator.request.remote(
                ChannelRestarted(config.topic_id, self._channel, self.identity())
            )
        except Exception as error:
            logger.warning("channel %d: could not tell its coordinator: %s", self._channel, error)

    # -- recovery -----------------------------------------------------------------

    @property
    def _failure(self) -> str | None:
        """Why the channel has failed, or None (see :attr:`ChannelContext.failure`)."""
        return self._context.failure

    @property
    def _seeded(self) -> asyncio.Event:
        """Set once the channel serves (see :attr:`ChannelContext.seeded`)."""
        return self._context.seeded

    async def _wait_seeded(self) -> None:
        deadline = time.monotonic() + _SEED_TIMEOUT
        try:
            while not self._seeded.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._seeded.wait(), min(left, _ANNOUNCE_AGAIN))
                if self._restarted and time.monotonic() - self._announced >= _ANNOUNCE_AGAIN:
                    self._announce_restart()  # the first word may have been lost
        except TimeoutError:
            raise ChannelUnavailableError(
                f"channel {self._channel} of {self._config.name!r} restarted without a store "
                f"and its coordinator has not restored its groups within {_SEED_TIMEOUT:.0f} s"
            ) from None

    async def _admit(self, admit: Admit) -> None:
        """The guard, for a channel failed or recovering (see :class:`Admit`)."""
        if admit is Admit.ALWAYS:
            return
        if admit is Admit.NOW or self._failure is not None:
            self._context.check_serving()
            return
        if not self._seeded.is_set():
            await self._wait_seeded()

    # -- the entries: every Ray-callable method ----------------------------------

    @entry(Admit.ALWAYS)
    async def seed(
        self,
        old_epoch: int,
        groups: dict[str, tuple[Lease | None, int, int]],
        views: dict[str, dict[str, tuple[int, dict[int, Lease]]]],
        readers: dict[str, ReaderSpec],
        shared: dict[str, SharedGroup] | None = None,
    ) -> dict[str, Any]:
        """Restore a channel that restarted without a store (the coordinator calls it).

        Its elements are gone: it starts a new epoch whose positions follow
        every earlier one, with each group's cursor at its start and the lease
        it had, and each reader is told of the loss once (``DataLossError``).

        Args:
            old_epoch: The epoch the coordinator last knew of this channel.
            groups: Per group: (lease, view version, generation).
            views: Per group, the members' latest views.
            readers: The topic's open readers (subscribers).
            shared: The shared groups' definitions (they start over at the new
                epoch's first position).

        Returns:
            The channel's identity (see :meth:`identity`).
        """
        if self._seeded.is_set():
            return self.identity()
        self._parts.seed(old_epoch, groups, views, readers, shared)  # with a store: written
        self._seeded.set()
        self._tend()
        return self.identity()

    @entry(Admit.ALWAYS)
    def attach(self, siblings: list[Any]) -> dict[str, Any]:
        """Learn every channel actor of the topic (index = channel); return who we are."""
        self._host.link(list(siblings), remote_caller)
        return self.identity()

    @entry(Admit.ALWAYS)
    def identity(self) -> dict[str, Any]:
        """Where this channel runs: its topic's id, epoch, node id, process id, and its
        state ("serving"; "opening": new, waiting for its coordinator to open its
        store; "recovering": restarted without a store, waiting for its coordinator;
        or "failed")."""
        context = ray.get_runtime_context()
        state = "serving" if self._seeded.is_set() else "opening"
        if self._restarted and not self._seeded.is_set():
            state = "recovering"
        if self._failure is not None:
            state = "failed"
        return {
            "channel": self._channel,
            "topic_id": self._config.topic_id,
            "epoch": self._context.epoch,
            "node_id": context.get_node_id(),
            "pid": os.getpid(),
            "state": state,
            "durable": self._log.store is not None,
            "failure": self._failure,
            "damaged": self._log.damaged_ranges,
        }

    @entry(Admit.ALWAYS)
    def describe(self) -> dict[str, Any]:
        """Channel figures and group cursors in one call (a failed channel answers
        too: its state says so)."""
        figures = self._log.figures()
        return {
            **self.identity(),
            "head": figures.head,
            "tail": figures.tail,
            "size": figures.size,
            "capacity": figures.capacity,
            "groups": self._readers.describe_groups(),
            "transactions": self._parts.transactions.table.describe(time.time()),
            "compaction": self._parts.compactor.describe(time.time()),
        }

    @entry(Admit.ALWAYS)
    def ping(self) -> int:
        """Cheap liveness probe; returns the channel number."""
        return self._channel

    @entry(Admit.BY_REQUEST)
    async def request(
        self, packed: bytes, payload: Payload | None = None, joined: Joined | None = None
    ) -> Any:
        """Serve a data-path request (a handle's or a sibling channel's; see
        ``raytopic.core.protocol.channel``: appends, receives, takes, commits, acks,
        ring buffer reads, ...) packed by :func:`pack_request`: one argument crosses
        Ray instead of six. An append's payload comes as its own argument.

        ``joined``: this call is the lead of several channels' calls (a
        ``publish_batch`` or a bulk acknowledgement over several channels): its
        reply is every part's, joined in the input's order (``raytopic.core.gather``).
        """
        request = unpack_request(packed, CHANNEL_REQUESTS)
        handler, admit = SERVED[type(request)]
        if self._failure is not None or not self._seeded.is_set():
            await self._admit(admit)
        self._tend()  # e.g. a transaction prepared before a restart
        if joined is None:
            try:
                async with self._state.unit_of_work():
                    return await call_handler(handler, self, request, payload)
            finally:
                self._tend()
        try:
            async with self._state.unit_of_work():
                own = await call_handler(handler, self, request, payload)
        except Exception as error:  # the others' replies are awaited all the same
            own = error
        finally:
            self._tend()
        if isinstance(own, StatusBatch):
            own = own.statuses()
        return await join_replies(own, joined)

    @entry(Admit.BY_REQUEST)
    async def control(self, request: ControlRequest) -> Any:
        """Serve a coordinator's request (see ``raytopic.core.protocol.control``):
        readers, groups, grants, resets, views, restarts, purges, and what a
        coordinator reads back to rebuild itself.

        Raises:
            InvalidArgumentError: not a control request.
        """
        if not isinstance(request, CONTROL_REQUESTS):
            raise InvalidArgumentError(f"{type(request).__name__} is not a control request")
        handler, admit = SERVED[type(request)]
        if self._failure is not None or not self._seeded.is_set():
            await self._admit(admit)
        try:
            async with self._state.unit_of_work():
                return await handler(self, request)
        finally:
            self._tend()

    @entry(Admit.SEEDED)
    async def transact(self, packed: bytes, payload: Payload | None = None) -> Any:
        """Serve a transaction's request (see ``raytopic.actors.transactions``)."""
        request = unpack_request(packed, TRANSACTION_REQUESTS)
        self._reporting = True  # a lead counts its decisions
        try:
            if isinstance(request, EndTransaction):  # this channel leads the transaction
                return await self._lead.end(request)
            step = _TRANSACTION_STEPS[type(request)]
            return await step(self._parts.transactions, request, payload)
        finally:
            self._tend()

    @entry(Admit.SEEDED)
    async def stream(self, request: StreamRequest) -> None:
        """Lead a stream's step (see ``raytopic.actors.stream_steps``): record a
        micro-batch, or commit it, at every channel; answered once every channel's
        part is durable.

        Raises:
            NotOwnerError: the stream no longer holds the group (a newer stream took
                it, or its claim ended).
            GroupNotFoundError, GroupModeError: no such owned group.
        """
        await self._stream_steps.lead(request, self.stream_part)

    @entry(Admit.SEEDED)
    async def stream_part(self, request: StreamRequest) -> None:
        """This channel's part of a stream's step (its lead asks), in one state write
        with the group's cursor."""
        try:
            async with self._state.unit_of_work():
                self._stream_steps.serve(request)
        finally:
            self._tend()

    def _ensure_siblings(self) -> None:
        """A restarted channel finds its siblings by name (``attach`` ran in an earlier
        incarnation)."""
        config = self._config
        if not self._host.linked:
            self.attach(
                [
                    ray.get_actor(channel_actor_name(config.name, c), namespace=config.namespace)
                    for c in range(config.channels)
                ]
            )

    # -- background jobs -----------------------------------------------------------

    def _tend(self) -> None:
        """Start the background jobs the channel's state needs now (the one place
        they start; each runs once at a time, and ``close`` stops them)."""
        jobs = self._jobs
        if self._readers.has_shared_groups:
            jobs.start("shared", self._tend_shared_groups)
        if self._parts.transactions.needs_tending:
            jobs.start("transactions", self._parts.transactions.tend)
        if self._reporting:
            jobs.start("metrics", self._report_metrics)
        if self._parts.compactor.needs_tending:
            jobs.start("compaction", self._parts.compactor.tend)

    @entry(Admit.ALWAYS)
    async def close(self) -> None:
        """Stop the channel's background work (its jobs and its log's periodic sync).
        Idempotent; the actor answers calls afterwards, with no background work."""
        await self._jobs.close()
        await self._log.close()

    async def _report_metrics(self) -> None:
        """Background (from the first publish): hand Ray the counts and group gauges."""
        while True:
            figures = self._log.figures()
            self._context.metrics.report(self._readers.lag(figures.head, figures.tail))
            await asyncio.sleep(METRICS_REFRESH_INTERVAL)

    async def _tend_shared_groups(self) -> None:
        """Background (while shared groups exist): see :meth:`SharedGroups.tend`."""
        await self._readers.tend_shared_groups(
            self._dead_letters.send, lambda: self._failure is None
        )

    # -- ring buffer (the Hazelcast API) --------------------------------------------

    @serves(ReadRingFigures, Admit.NOW)
    async def _ring_figures(self, _: ReadRingFigures) -> RingFigures:
        return self._log.figures()

    @serves(FirstAfter, Admit.NOW)
    async def _first_after(self, request: FirstAfter) -> int:
        """Sequence of the first element stamped strictly after ``stamp`` (tail + 1 if none)."""
        return self._log.first_after(request.stamp)

    @serves(AddAll)
    async def _add_all(self, request: AddAll, payload: Payload) -> int:
        """Append items; return the LAST sequence, or -1 (see :meth:`RingbufferApi.add_all`)."""
        return await self._ring_api.add_all(payload, request.overflow, request.timeout)

    @serves(ReadOne)
    async def _read_one(self, request: ReadOne) -> Run:
        """The element at ``sequence`` (see :meth:`RingbufferApi.read_one`)."""
        return await self._ring_api.read_one(request.sequence)

    @serves(ReadMany)
    async def _read_many(self, request: ReadMany) -> RawReadResult:
        """Hazelcast ``readManyAsync`` (see :meth:`RingbufferApi.read_many`)."""
        return await self._ring_api.read_many(
            request.start, request.min_count, request.max_count, request.filter_bytes
        )

    @serves(ReadRange, Admit.NOW)
    async def _read_range(self, request: ReadRange) -> tuple[Chunk, ...]:
        """Bulk read for ``raytopic.data`` and ``raytopic.spark`` (see
        :meth:`RingbufferApi.read_range`)."""
        return self._ring_api.read_range(request.start, request.stop, request.max_count)

    @serves(ReadNewest, Admit.NOW)
    async def _read_newest(self, _: ReadNewest) -> Chunk | None:
        """The newest element, even if removed (see :meth:`RingbufferApi.newest`)."""
        return self._ring_api.newest()

    # -- publishing ------------------------------------------------------------

    @serves(Append)
    async def _append(self, request: Append, payload: Payload) -> AppendAck | StatusBatch:
        """Append one publisher batch, in the publisher's batch order.

        A batch number seen before returns the ack it got then (a retry after
        a lost reply appends nothing twice). With ``statuses``, the reply is the
        batch's statuses (``publish_batch``) instead of an ack.

        Raises:
            InvalidArgumentError: a stale or duplicate batch number, or not a payload.
            TopicError: with ``statuses``, why the batch was not appended.
        """
        arrived = time.perf_counter()
        payload = check_payload(payload)
        ack, change, fresh = await self._append_batch(
            request.publisher_id,
            request.batch,
            payload,
            Overflow.parse(request.overflow),
            request.timeout,
            whole=request.statuses,
            each=request.each,
        )
        # Outside the turn: the publisher's next batch is written meanwhile, and
        # one fdatasync covers both.
        await self._log.durable(change)
        if fresh:
            self._appended(arrived, request.publisher_id, request.batch, ack)
        return self._ack_reply(ack, request.statuses)

    @serves(AppendPieces)
    async def _append_pieces(
        self, request: AppendPieces, payloads: tuple[Payload, ...]
    ) -> tuple[AppendAck, ...]:
        """Append a publisher's pieces as its consecutive batches (see ``AppendPieces``):
        what one publisher sent one channel while its calls were in flight, in one call.

        Raises:
            InvalidArgumentError: a stale or duplicate batch number, or not one
                payload per piece.
        """
        arrived = time.perf_counter()
        if not isinstance(payloads, tuple) or len(payloads) != len(request.whole):
            raise InvalidArgumentError(f"{len(request.whole)} pieces need as many payloads")
        pieces = [check_payload(payload) for payload in payloads]
        policy = Overflow.parse(request.overflow)
        acks: list[tuple[AppendAck, bool]] = []
        last_change = None
        for index, (payload, whole) in enumerate(zip(pieces, request.whole, strict=True)):
            ack, change, fresh = await self._append_batch(
                request.publisher_id,
                request.batch + index,
                payload,
                policy,
                request.timeout,
                whole=whole,
                each=not whole,
            )
            acks.append((ack, fresh))
            last_change = change if change is not None else last_change
        await self._log.durable(last_change)  # one fdatasync covers every piece
        for index, (ack, fresh) in enumerate(acks):
            if fresh:
                self._appended(arrived, request.publisher_id, request.batch + index, ack)
        return tuple(ack for ack, _ in acks)

    async def _append_batch(
        self,
        publisher_id: str,
        batch: int,
        payload: Payload,
        policy: Overflow,
        timeout: float | None,
        *,
        whole: bool,
        each: bool,
    ) -> tuple[AppendAck, int | None, bool]:
        """Append one publisher batch in its turn (a batch seen before: the ack it got
        then, appending nothing twice). Returns the ack, the change to make durable
        before answering, and whether it is new (not a retry's).

        Raises:
            InvalidArgumentError: a stale or duplicate batch number.
        """
        publishers = self._publishers
        ack = publishers.earlier_ack(publisher_id, batch, len(payload))
        if ack is not None:  # a retry (a lost reply, or a restart in between)
            return ack, None, False
        async with publishers.turn(publisher_id, batch):
            ack, change = await self._log.append(
                payload,
                policy,
                timeout,
                whole=whole,
                each=each,
                publisher_id=publisher_id,
                batch=batch,
            )
        return ack, change, True

    def _appended(self, arrived: float, publisher_id: str, batch: int, ack: AppendAck) -> None:
        """Count a durable append and keep its ack for a retry of ``batch``."""
        self._context.metrics.appended(time.perf_counter() - arrived)
        self._reporting = True
        self._publishers.remember(publisher_id, batch, ack)

    @serves(AppendOnce)
    async def _append_once(self, request: AppendOnce, payload: Payload) -> AppendAck:
        """Append a writer's ``version`` unless this channel has it already: exactly once
        across re-runs of a Spark micro-batch and across restarts with a store (the
        pair is in the record). Answers an empty ack for a version it has."""
        if self._publishers.has_version(request.writer_id, request.version):
            return AppendAck(-1, 0, 0.0)
        append = Append(
            publisher_id=request.writer_id,
            batch=request.version,
            overflow=request.overflow,
            timeout=request.timeout,
        )
        return await self._append(append, payload)

    def _ack_reply(self, ack: AppendAck, statuses: bool) -> AppendAck | StatusBatch:
        if statuses:
            if ack.error is not None:
                # Raised here, not in the caller's deserialization, so the
                # ObjectRef fails with the typed error itself.
                raise ack.error
            return StatusBatch(self._config.topic_id, self._channel, ack)
        return ack

    # -- readers ----------------------------------------------------------------

    @serves(OpenReader)
    async def _open_reader(self, request: OpenReader) -> CursorState:
        """Register a subscriber on this channel (its cursor, if anonymous)."""
        state, created = self._readers.open(request.reader_id, request.spec)
        if created:
            self._host.reader_opened(request.reader_id)
        return state

    @serves(CloseReader)
    async def _close_reader(self, request: CloseReader) -> None:
        """Forget a subscriber; its session here (if any) ends."""
        self._readers.close(request.reader_id)

    @serves(ReadReaderSpecs, Admit.ALWAYS)
    async def _reader_specs(self, _: ReadReaderSpecs) -> dict[str, ReaderSpec]:
        """Every open reader's spec (a restarted coordinator asks)."""
        return self._readers.specs()

    @serves(Take)
    async def _take(self, request: Take) -> Delivery:
        """Hand the reader elements by position (``wait``: a fetch); see ``Take``."""
        return await self._readers.take(request)

    @serves(ReportPoison)
    async def _report_poison(self, request: ReportPoison) -> bool:
        """A reader could not decode an element (see :meth:`Readers.report_poison`)."""
        poison = Poison(request.sequence, request.cause_type, request.cause_message)
        return self._readers.report_poison(
            request.reader_id, request.lease, request.jumps, poison, request.skipped
        )

    @serves(Watch)
    async def _watch(self, request: Watch) -> CursorState:
        """The reader's cursor state once it differs from ``known`` (or after ``timeout``)."""
        return await self._readers.watch(
            request.reader_id, request.lease, request.known, request.timeout
        )

    @serves(ReadCursor, Admit.NOW)
    async def _read_cursor(self, request: ReadCursor) -> CursorState:
        """The reader's cursor, as heads, tails, remaining messages and last commits
        report it (see :meth:`Readers.reported`)."""
        return self._readers.reported(request.reader_id, request.lease)

    @serves(Commit)
    async def _commit(self, request: Commit) -> CommitResult:
        """Commit ``sequence`` (and every earlier one) for the reader or its group;
        with a store, answered once the commit is on disk."""
        return self._readers.commit(
            request.reader_id, request.sequence, request.lease, request.jumps, request.bound
        )

    @serves(Seek)
    async def _seek(self, request: Seek) -> tuple[int, int]:
        """Move the reader's cursor; return (position set, new jump count)."""
        return self._readers.seek(
            request.reader_id, request.lease, request.target, request.by_time, request.commit
        )

    @serves(SeekToCommitted)
    async def _seek_to_committed(self, request: SeekToCommitted) -> tuple[int, int]:
        """Move the reader's cursor back to its commit; return (the commit, new jump
        count)."""
        return await self._readers.seek_to_committed(request.reader_id, request.lease)

    # -- groups (the coordinator's) -------------------------------------------------

    @serves(EnsureGroup)
    async def _ensure_group(self, request: EnsureGroup) -> CursorState:
        """Create the group's cursor here if it does not exist yet (``shared``: a
        shared group's, with its definition). ``reader``: the spec of the member
        the group is made for, checked first: a group is not made for a reader
        that cannot open here (InvalidArgumentError)."""
        if request.reader is not None:
            loaded_functions(request.reader)
        state, _ = self._readers.ensure_group(request.group, request.start_latest, request.shared)
        return state

    @serves(DestroyGroup)
    async def _destroy_group(self, request: DestroyGroup) -> None:
        """Forget a group: its positions and the retention it held."""
        group = request.group
        self._readers.destroy_group(group)
        self._host.forget_group(group)
        self._state.touch("marks", group)
        if self._streams.forget(group):
            self._state.touch("streams", group)

    @serves(Grant)
    async def _grant(self, request: Grant) -> None:
        """Give the group's channel to a member (None: to nobody); it resumes after the commit."""
        self._readers.grant(request.group, request.lease)

    @serves(GrantStream)
    async def _grant_stream(self, request: GrantStream) -> StreamLogState:
        """Give the group's channel to a stream; where its offset log stands here."""
        return self._stream_steps.grant(request)

    @serves(ResetGroup)
    async def _reset_group(self, request: ResetGroup) -> tuple[int, dict[str, Any]]:
        """Move the group's read and commit positions; return (position, previous state)
        (see :meth:`Readers.reset_group`)."""
        return self._readers.reset_group(request.group, request.target)

    @serves(RestoreGroup)
    async def _restore_group(self, request: RestoreGroup) -> None:
        """Undo a reset (a reset of several channels is all or nothing)."""
        self._readers.restore_group(request.group, request.previous)

    @serves(ReadGroupCursors, Admit.ALWAYS)
    async def _group_cursors(self, _: ReadGroupCursors) -> dict[str, dict[str, Any]]:
        """Every group's cursor here, saying which is a stream's (a restarted
        coordinator, and bulk reads, ask)."""
        return self._stream_steps.mark_streams(self._readers.describe_groups())

    @serves(ReadGroupLag, Admit.ALWAYS)
    async def _group_lag(self, request: ReadGroupLag) -> int | None:
        """The group's lag here, None without the group (what scaling polls: one
        figure, not ``describe``'s every cursor and transaction)."""
        figures = self._log.figures()
        lags = self._readers.lag(figures.head, figures.tail)
        return next((lag for group, lag, _ in lags if group == request.group), None)

    @serves(ReadOpeningError, Admit.ALWAYS)
    async def _opening_error(self, _: ReadOpeningError) -> TopicError | None:
        """Why this channel's store could not be opened (a typed error naming the
        store), or None. A topic being created fails with it (see the coordinator's
        ``start``)."""
        if self._opening_error is None and self._failure is not None:
            return StoreError(self._failure)
        return self._opening_error

    # -- the store through the topic's life ------------------------------------------

    @serves(ReadStoredTopic, Admit.ALWAYS)
    async def _stored_topic(self, _: ReadStoredTopic) -> TopicRecord | None:
        """What this channel's store held when it opened (the coordinator of a new
        topic compares every channel's)."""
        return self._stored.record

    @serves(OpenStore, Admit.ALWAYS)
    async def _open_store(self, request: OpenStore) -> dict[str, Any]:
        """Begin over the store (see :meth:`StoredTopic.begin`); returns the identity."""
        await self._stored.begin(request.topic_id, request.wipe)
        self._lead = self._new_lead()
        self._tend()
        return self.identity()

    @serves(MarkDestroyed, Admit.ALWAYS)
    async def _mark_destroyed(self, _: MarkDestroyed) -> None:
        """The topic is being destroyed: say so in the store before any channel
        removes its data."""
        await self._stored.mark_destroyed()

    @serves(RemoveStore, Admit.ALWAYS)
    async def _remove_store(self, _: RemoveStore) -> None:
        """Remove the store's data; the background work stops (the actor is about to
        be killed)."""
        await self.close()
        await self._stored.remove()

    # -- shared groups (per-element acknowledgement) --------------------------------

    @serves(Ack)
    async def _ack(self, request: Ack) -> AckStatus | list[AckStatus]:
        """Acknowledge elements: a shared group's member's holds, each named by its
        delivery id (sequence, delivery count, channel epoch), or an owned reader's
        elements done one by one (under its lease); with a store, answered once on
        disk."""
        statuses = self._readers.ack(
            request.reader_id, request.entries, request.lease, request.jumps
        )
        return statuses[0] if request.single else statuses

    @serves(Nack)
    async def _nack(self, request: Nack) -> AckStatus | list[AckStatus]:
        """Give elements back to their shared group, to be delivered again after
        ``delay`` seconds (past ``max_deliveries``: to the dead-letter topic)."""
        statuses = self._readers.nack(request.reader_id, request.entries, request.delay)
        return statuses[0] if request.single else statuses

    @serves(ExtendHold)
    async def _extend_hold(self, request: ExtendHold) -> AckStatus | list[AckStatus]:
        """Move the ack deadlines of elements the member holds: they end ``seconds``
        from now (None: the group's ``ack_timeout`` from now). Not written to the
        store: a restart delivers what was held again anyway."""
        statuses = self._readers.extend(request.reader_id, request.entries, request.seconds)
        return statuses[0] if request.single else statuses

    @serves(Purge)
    async def _purge(self, _: Purge) -> int:
        """Remove every element (an operator's ``Topic.purge``); groups and readers
        continue after them, and shared groups forget what they held or waited
        for. Returns how many elements were removed."""
        removed = self._log.evict_all()
        self._readers.skip_to_head()
        self._log.release()
        self._context.notify()
        return removed

    # -- receive sessions (the receives sent to this channel) ---------------------

    @serves(UpdateViews)
    async def _update_views(self, request: UpdateViews) -> None:
        """Members' channels changed: sessions here read these from now on. A member
        that left or timed out (None) owns nothing: its session here ends (a
        member that comes back opens a new one on its next receive).

        The group's version and generation are kept (with a store, durably): a
        restarted coordinator continues above them."""
        group = request.group
        shared, readers = self._readers.shared, self._readers.by_id

        def left(member: str) -> None:
            if group in shared and member in readers:
                shared.member_left(group, member)

        if self._host.update_views(
            group,
            request.version,
            request.generation,
            request.views,
            left,
            lambda m: shared.member_back(group, m),
        ):
            self._state.touch("marks", group, Keep.SOON)

    @serves(ReadGroupMarks, Admit.ALWAYS)
    async def _group_marks(self, _: ReadGroupMarks) -> dict[str, tuple[int, int]]:
        """Per group, the highest (view version, generation) pushed here."""
        return dict(self._host.marks)

    @serves(ReadActivity, Admit.ALWAYS)
    async def _activity(self, request: ReadActivity) -> dict[str, float]:
        """Seconds since each reader asked about last acked, nacked or extended here."""
        return self._readers.quiet_for(request.readers)

    @serves(ReadHandOverMark, Admit.NOW)
    async def _hand_over_mark(self, request: ReadHandOverMark) -> int | None:
        """The hand-over mark of a resequenced element the reader's session here
        handed over (None: no session, or it does not know the element)."""
        session = self._host.sessions.get(request.reader_id)
        return (
            None if session is None else session.hand_over_mark(request.channel, request.sequence)
        )

    @serves(ReadResequencerStats, Admit.NOW)
    async def _resequencer_stats(self, request: ReadResequencerStats) -> Any:
        """The resequencer counts of the reader's session here (None: none)."""
        session = self._host.sessions.get(request.reader_id)
        return None if session is None else session.resequencer_stats

    @serves(InterruptReceives, Admit.NOW)
    async def _interrupt_receives(self, request: InterruptReceives) -> None:
        """A handle abandons its receives of ``stream`` up to ``upto`` (see ReceiveSession)."""
        if request.reader_id in self._readers.by_id:
            self._session(request.reader_id, None).interrupt(request.stream, request.upto)

    @serves(PauseReceives)
    async def _pause_receives(self, request: PauseReceives) -> None:
        """Wait until a handle's receives up to ``upto`` finished (a seek goes after them)."""
        session = self._host.sessions.get(request.reader_id)
        if session is not None:
            await session.pause(request.stream, request.upto)

    @serves(ResumeReceives, Admit.NOW)
    async def _resume_receives(self, request: ResumeReceives) -> None:
        """The seek announced by ``PauseReceives`` landed: waits may take again."""
        session = self._host.sessions.get(request.reader_id)
        if session is not None:
            session.resume()

    def _session(self, reader_id: str, view: tuple[int, dict[int, Any]] | None) -> Any:
        """The reader's receive session here (a restarted channel links its siblings first)."""
        if reader_id in self._readers.by_id and reader_id not in self._host.sessions:
            self._ensure_siblings()
        return self._host.session(reader_id, view)

    @serves(Receive)
    async def _receive(self, request: Receive) -> ReceivedBatch:
        """Serve a subscriber's receive at its session here (see ReceiveSession)."""
        reader_id, view = request.reader_id, request.view
        self._session(reader_id, view)
        return await self._host.receive(
            reader_id,
            request.stream,
            request.number,
            request.max_count,
            request.single,
            request.spread,
            request.here_only,
            view,
        )

    @serves(EndReceives, Admit.ALWAYS)
    async def _end_receives(self, request: EndReceives) -> None:
        """The topic is being destroyed: waiting receives here raise TopicNotFoundError,
        and so does every other wait (ring buffer reads, appends waiting for room); the
        background work stops (``close``), as the actor is about to be killed."""
        self._context.end_waits(request.reason)
        await self._host.end_receives(request.reason)
        await self.close()


_TRANSACTION_STEPS: dict[type, Callable[..., Awaitable[Any]]] = {
    StageTransaction: TransactionParticipant.stage,
    PrepareTransaction: TransactionParticipant.prepare,
    DecideTransaction: TransactionParticipant.decide,
    FinishTransaction: TransactionParticipant.finish,
    ResolveTransaction: TransactionParticipant.resolve,
    ForgetTransaction: TransactionParticipant.forget,
    FenceTransactions: TransactionParticipant.fence,
}
"""A transaction's request type -> the participant's step serving it."""
