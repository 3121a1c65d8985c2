"""The channel actor: one per channel of a topic, a shell around plain parts.

Ray sees two entries, one convention: ``request`` (a packed request: the data
path, a transaction's steps, a stream's) and ``control`` (a coordinator's
request, as it is) both serve a typed request from ``raytopic.core.protocol``
through the handler registered for its type (``raytopic.actors.channel_dispatch``),
each a few lines handed to the part whose job it is. What the parts share
(identity, epoch, wake-up signal, whether the channel serves or has failed) is
the :class:`~raytopic.actors.channel_context.ChannelContext`. The shell does
three things itself, each in one place (``_serve``): it guards requests while the
channel recovers or has failed, it serves every request as a unit of work
(:meth:`ChannelState.unit_of_work`: the reply waits until what the request
changed is durable; no part writes the state itself), and it starts the
background jobs the state needs after each request
(:class:`~raytopic.actors.channel_upkeep.ChannelUpkeep`; ``_close`` stops them).
The parts:

- :class:`~raytopic.actors.channel_log.ChannelLog`: the ring buffer and the
  store as one log (appends, reads below and above the head, durability, room);
- :class:`~raytopic.actors.appends.Appends`: publishers' batches into the log,
  over :class:`~raytopic.actors.publisher_table.PublisherTable` (publishers'
  turns, retry acks, idle sweep);
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
(named, detached) and the coordinator introduces them (``AttachChannels``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import ray

from raytopic.actors.appends import Appends
from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_dispatch import SERVED, Admit, call_handler, entry, in_turn, serves
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.channel_recovery import ChannelRecovery
from raytopic.actors.channel_state import Keep
from raytopic.actors.channel_upkeep import ChannelUpkeep
from raytopic.actors.latest_values import LatestValues
from raytopic.actors.readers import loaded_functions
from raytopic.actors.segment_ring import Run
from raytopic.actors.stored_topic import StoredTopic
from raytopic.actors.stream_steps import RayStreamPeers, StreamSteps
from raytopic.actors.transaction_lead import RayPeers, TransactionLead
from raytopic.core.actor_logs import log_info_here
from raytopic.core.config import TopicConfig
from raytopic.core.destroyed import channel_destroyed, record_destroyed_channel
from raytopic.core.errors import InvalidArgumentError, TopicError
from raytopic.core.gather import Joined, join_replies
from raytopic.core.incarnation import was_restarted
from raytopic.core.naming import channel_actor_name, coordinator_actor_name
from raytopic.core.payloads import Payload
from raytopic.core.protocol import (
    CHANNEL_REQUESTS,
    CONTROL_REQUESTS,
    STREAM_REQUESTS,
    TRANSACTION_REQUESTS,
    Ack,
    AddAll,
    Append,
    AppendAck,
    AppendOnce,
    AppendPieces,
    AppendUnless,
    AttachChannels,
    ChannelRestarted,
    Chunk,
    CloseReader,
    Commit,
    CommitMicroBatch,
    CommitThenReceive,
    ControlRequest,
    CursorState,
    DecideTransaction,
    Delivery,
    DescribeChannel,
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
    MarkDestroyed,
    Nack,
    OpenReader,
    OpenStore,
    Outcome,
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
    ReadIdentity,
    ReadLatest,
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
    RecordMicroBatch,
    RemoveStore,
    ReportPoison,
    ResetGroup,
    ResolveTransaction,
    RestoreGroup,
    ResumeReceives,
    RingFigures,
    SeedChannel,
    Seek,
    SeekToCommitted,
    StageTransaction,
    StatusBatch,
    StreamLogState,
    StreamPart,
    StreamRequest,
    Take,
    TransactionEnded,
    UpdateViews,
    Watch,
    unpack_call,
)
from raytopic.core.records import AckStatus, CommitResult
from raytopic.core.topic_record import TopicRecord

__all__ = ["ChannelActor"]

PACKED_REQUESTS = CHANNEL_REQUESTS + TRANSACTION_REQUESTS + STREAM_REQUESTS
"""What the channel serves through ``request``: data-path, transaction and stream requests."""

REPORTED_REQUESTS = (Append, AppendPieces, AppendOnce, AppendUnless, *TRANSACTION_REQUESTS)
"""Requests after which the channel reports its metrics (publishes and transactions)."""

PUBLISHING_REQUESTS = (*REPORTED_REQUESTS, AddAll)
"""Requests that make elements visible: the receives and fetches they woke answer first."""

END_RECEIVES_TIMEOUT = 5.0
"""Seconds a destroy's EndReceives waits for the calls in service at a channel to
answer (a channel waiting to be seeded holds its calls until then)."""


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
        restarted = was_restarted()
        self._parts = parts = ChannelParts.build(
            context, restarted=restarted, find_siblings=_sibling_finder(context)
        )
        self._upkeep = ChannelUpkeep(parts)
        self._recovery = ChannelRecovery(
            context,
            parts.log,
            node_id=lambda: ray.get_runtime_context().get_node_id(),
            restarted=restarted,
            announce=_coordinator_port(context),
        )
        self._log, self._state, self._readers = parts.log, parts.state, parts.readers
        self._host = parts.host
        self._streams, self._ring_api = parts.streams, parts.ring_api
        peers = RayStreamPeers(config)
        self._stream_steps = StreamSteps(
            channel, config.channels, parts.streams, parts.readers, parts.state, peers
        )
        self._appends = Appends(context, parts.log, parts.publishers, parts.state.checkpoint)
        self._latest = LatestValues(parts.log, compacted=config.compaction is not None)
        self._dead_letters = parts.dead_letters
        self._in_service = 0  # ``request`` calls running here (a destroy waits for them)
        destroyed = restarted and channel_destroyed(config.namespace, config.name, channel)
        self._stored = StoredTopic(context, parts, restarted=restarted, destroyed=destroyed)
        if self._stored.open():  # or the channel comes up failed, saying why
            self._seeded.set()
        # Once the store named the topic's id (the lead names this channel by it).
        self._lead = self._new_lead()
        if restarted:
            self._recovery.announce_restart()

    @property
    def _config(self) -> TopicConfig:
        """The topic's configuration (its id: the one the store holds, if it holds one)."""
        return self._context.config

    def _new_lead(self) -> TransactionLead:
        parts = self._parts
        return TransactionLead(parts.transactions, RayPeers(), parts.transactions.address)

    # -- health (see ``raytopic.actors.channel_recovery``) ---------------------------

    @property
    def _seeded(self) -> asyncio.Event:
        """Set once the channel serves (see :attr:`ChannelContext.seeded`)."""
        return self._context.seeded

    # -- the entries: every Ray-callable method ----------------------------------

    @entry
    async def request(
        self, packed: bytes, payload: Payload | None = None, joined: Joined | None = None
    ) -> Any:
        """Serve a request packed by :func:`pack_request` (one argument crosses Ray
        instead of six): a handle's or a sibling channel's data-path request
        (``raytopic.core.protocol.channel``: appends, receives, takes, commits, acks,
        ring buffer reads, ...), a transaction's step
        (``raytopic.core.protocol.transactions``) or a stream's
        (``raytopic.core.protocol.streams``). An append's payload comes as its own
        argument.

        ``joined``: this call is the lead of several channels' calls (a
        ``publish_batch`` or a bulk acknowledgement over several channels): its
        reply is every part's, joined in the input's order (``raytopic.core.gather``).

        Raises:
            InvalidArgumentError: not such a packed request.
        """
        self._in_service += 1
        try:
            request, payload = unpack_call(packed, payload, PACKED_REQUESTS)
            if joined is None:
                return await self._serve(request, payload)
            try:
                own = await self._serve(request, payload)
            except Exception as error:  # the others' replies are awaited all the same
                own = error
            if isinstance(own, StatusBatch):
                own = own.statuses()
            return await join_replies(own, joined)
        finally:
            self._in_service -= 1

    @entry
    async def control(self, request: ControlRequest) -> Any:
        """Serve a coordinator's request (see ``raytopic.core.protocol.control``): the
        channel's siblings and seed, readers, groups, grants, resets, views, purges,
        and what a coordinator reads back to rebuild itself.

        Raises:
            InvalidArgumentError: not a control request.
        """
        if not isinstance(request, CONTROL_REQUESTS):
            raise InvalidArgumentError(f"{type(request).__name__} is not a control request")
        return await self._serve(request, None)

    async def _serve(self, request: Any, payload: Payload | None) -> Any:
        """Every request, one way: admitted as its type's registration says, served
        by its handler as one unit of work (answered once what it changed is
        durable; a publish after the receives it woke), then the background jobs the
        state needs are started."""
        handler, admit = SERVED[type(request)]
        if not self._context.admits_all:
            await self._recovery.admit(admit)
        if isinstance(request, REPORTED_REQUESTS):
            self._upkeep.report_from_now()
        self._upkeep.tend()  # e.g. a transaction prepared before a restart
        try:
            async with self._state.unit_of_work():
                reply = await call_handler(handler, self, request, payload)
            if isinstance(request, PUBLISHING_REQUESTS):
                await self._context.answer_woken_first()
            return reply
        finally:
            self._upkeep.tend()

    # -- life cycle (the coordinator's) ---------------------------------------------

    @serves(AttachChannels, Admit.ALWAYS)
    async def _attach(self, request: AttachChannels) -> dict[str, Any]:
        """Learn every channel actor of the topic (index = channel); return who we are."""
        self._host.link(list(request.channels))
        return self._recovery.identity()

    @serves(SeedChannel, Admit.ALWAYS)
    async def _seed(self, request: SeedChannel) -> dict[str, Any]:
        """Restore a channel that restarted without a store (see ``SeedChannel``)."""
        if not self._seeded.is_set():
            self._parts.seed(  # with a store: written
                request.old_epoch, request.groups, request.views, request.readers, request.shared
            )
            self._seeded.set()
        return self._recovery.identity()

    @serves(ReadIdentity, Admit.ALWAYS)
    async def _read_identity(self, _: ReadIdentity) -> dict[str, Any]:
        return self._recovery.identity()

    @serves(DescribeChannel, Admit.ALWAYS)
    async def _describe(self, _: DescribeChannel) -> dict[str, Any]:
        """Channel figures and group cursors in one call (see ``DescribeChannel``)."""
        figures = self._log.figures()
        return {
            **self._recovery.identity(),
            "head": figures.head,
            "tail": figures.tail,
            "size": figures.size,
            "capacity": figures.capacity,
            "groups": self._readers.describe_groups(),
            "transactions": self._parts.transactions.table.describe(time.time()),
            "compaction": self._parts.compactor.describe(time.time()),
        }

    async def _close(self) -> None:
        """Stop the channel's background work (see :meth:`ChannelUpkeep.close`). The
        actor answers calls afterwards, with no background work."""
        await self._upkeep.close()

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
        """Bulk read for ``raytopic.data``, ``raytopic.spark`` (``RingbufferApi.read_range``)."""
        return self._ring_api.read_range(request.start, request.stop, request.max_count)

    @serves(ReadNewest, Admit.NOW)
    async def _read_newest(self, _: ReadNewest) -> Chunk | None:
        """The newest element, even if removed (see :meth:`RingbufferApi.newest`)."""
        return self._ring_api.newest()

    # -- publishing (see ``raytopic.actors.appends``) ------------------------------

    @serves(Append)
    async def _append(self, request: Append, payload: Payload) -> AppendAck | StatusBatch:
        return await self._appends.append(request, payload)

    @serves(AppendPieces)
    async def _append_pieces(
        self, request: AppendPieces, payloads: tuple[Payload, ...]
    ) -> tuple[AppendAck, ...]:
        return await self._appends.append_pieces(request, payloads)

    @serves(AppendOnce)
    async def _append_once(self, request: AppendOnce, payload: Payload) -> AppendAck:
        return await self._appends.append_once(request, payload)

    @serves(AppendUnless)
    async def _append_unless(self, request: AppendUnless, payload: Payload) -> tuple[Any, ...]:
        return await self._latest.append_unless(request, payload)

    @serves(ReadLatest)
    async def _read_latest(self, request: ReadLatest) -> tuple[Any, ...]:
        return await self._latest.read(request)

    # -- transactions (see ``raytopic.actors.transactions``) -------------------------

    @serves(StageTransaction)
    async def _stage_transaction(
        self, request: StageTransaction, payload: Payload | None = None
    ) -> int:
        return await self._parts.transactions.stage(request, payload)

    @serves(EndTransaction)
    async def _end_transaction(self, request: EndTransaction) -> TransactionEnded:
        """This channel leads the transaction (``raytopic.actors.transaction_lead``)."""
        return await self._lead.end(request)

    @serves(PrepareTransaction)
    async def _prepare_transaction(self, request: PrepareTransaction) -> Outcome | None:
        return await self._parts.transactions.prepare(request)

    @serves(DecideTransaction)
    async def _decide_transaction(self, request: DecideTransaction) -> tuple[str, str, Any]:
        return await self._parts.transactions.decide(request)

    @serves(FinishTransaction)
    async def _finish_transaction(self, request: FinishTransaction) -> tuple[Any, ...]:
        return await self._parts.transactions.finish(request)

    @serves(ResolveTransaction)
    async def _resolve_transaction(self, request: ResolveTransaction) -> str | None:
        return await self._parts.transactions.resolve(request)

    @serves(ForgetTransaction)
    async def _forget_transaction(self, request: ForgetTransaction) -> None:
        await self._parts.transactions.forget(request)

    @serves(FenceTransactions)
    async def _fence_transactions(self, request: FenceTransactions) -> None:
        await self._parts.transactions.fence(request)

    # -- streams (see ``raytopic.actors.stream_steps``) -------------------------------

    @serves(RecordMicroBatch)
    @serves(CommitMicroBatch)
    async def _lead_stream_step(self, request: StreamRequest) -> None:
        """Lead a stream's step: this channel's part and every other's, answered once
        each is durable.

        Raises:
            NotOwnerError: the stream no longer holds the group (a newer stream took
                it, or its claim ended).
            GroupNotFoundError, GroupModeError: no such owned group.
        """
        await self._stream_steps.lead(request)

    @serves(StreamPart)
    async def _stream_part(self, request: StreamPart) -> None:
        """This channel's part of a stream's step (its lead asks), in one state write
        with the group's cursor."""
        self._stream_steps.serve(request.step)

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

    @serves(CommitThenReceive)
    async def _commit_then_receive(self, request: CommitThenReceive) -> tuple[Any, ...]:
        """A commit, then the reader's next receive here (see ``CommitThenReceive``)."""
        commit, receive = request
        return await in_turn(lambda: self._commit(commit), lambda: self._receive(receive))

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
        (see :meth:`Readers.reset_group`); refused while a stream's batch is pending."""
        self._streams.check_resettable(request.group)
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
    async def _read_opening_error(self, _: ReadOpeningError) -> TopicError | None:
        """Why this channel's store could not be opened (a typed error naming the
        store), or None. A topic being created fails with it (see the coordinator's
        ``start``)."""
        return self._stored.opening_error

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
        self._upkeep.tend()
        return self._recovery.identity()

    @serves(MarkDestroyed, Admit.ALWAYS)
    async def _mark_destroyed(self, _: MarkDestroyed) -> None:
        """The topic is being destroyed: say so in the store, and to the cluster (for a
        restart over a store removed meanwhile), before any channel removes its data."""
        record_destroyed_channel(self._config.namespace, self._config.name, self._channel)
        await self._stored.mark_destroyed()

    @serves(RemoveStore, Admit.ALWAYS)
    async def _remove_store(self, _: RemoveStore) -> None:
        """Remove the store's data; the background work stops (the actor is about to
        be killed)."""
        await self._close()
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
        """See :meth:`SessionHost.hand_over_mark`."""
        return self._host.hand_over_mark(request.reader_id, request.channel, request.sequence)

    @serves(ReadResequencerStats, Admit.NOW)
    async def _resequencer_stats(self, request: ReadResequencerStats) -> Any:
        """The resequencer counts of the reader's session here (None: none)."""
        return self._host.resequencer_stats(request.reader_id)

    @serves(InterruptReceives, Admit.NOW)
    async def _interrupt_receives(self, request: InterruptReceives) -> None:
        """A handle abandons its receives of ``stream`` up to ``upto`` (see ReceiveSession)."""
        self._host.interrupt(request.reader_id, request.stream, request.upto)

    @serves(PauseReceives)
    async def _pause_receives(self, request: PauseReceives) -> None:
        """Wait until a handle's receives up to ``upto`` finished (see SessionHost)."""
        reader_id, receives_out = request.reader_id, request.receives_out
        await self._host.pause(reader_id, request.stream, request.upto, receives_out)

    @serves(ResumeReceives, Admit.NOW)
    async def _resume_receives(self, request: ResumeReceives) -> None:
        """The seek announced by ``PauseReceives`` landed: waits may take again."""
        self._host.resume(request.reader_id)

    @serves(Receive)
    async def _receive(self, request: Receive) -> ReceivedBatch:
        """Serve a subscriber's receive at its session here (see ReceiveSession)."""
        return await self._host.receive(*request)  # its fields are the host's arguments

    @serves(EndReceives, Admit.ALWAYS)
    async def _end_receives(self, request: EndReceives) -> None:
        """The topic is being destroyed: waiting receives here raise TopicNotFoundError,
        and so does every other wait (ring buffer reads, appends waiting for room); the
        background work stops (``close``), as the actor is about to be killed."""
        self._context.end_waits(request.reason)
        self._host.end_receives(request.reason)
        # The actor is killed once every channel has answered this. A call still in
        # service here then (a receive awaiting a slow sibling's take, a sibling's
        # take, a call waiting to be admitted) would reach its caller as Ray's
        # ActorDiedError, which Ray logs too: wait for them. Those ended above answer
        # at once, the rest within a sibling's reply. So for the calls this channel's
        # sessions sent to siblings: each sibling answers them before its own
        # EndReceives (they are in service there).
        deadline = time.monotonic() + END_RECEIVES_TIMEOUT
        while (self._in_service or self._host.sibling_calls) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await self._close()


def _coordinator_port(context: ChannelContext) -> Callable[[ChannelRestarted], None]:
    """How the channel tells its topic's coordinator it restarted (found by name)."""

    def tell(request: ChannelRestarted) -> None:
        config = context.config
        coordinator = ray.get_actor(coordinator_actor_name(config.name), namespace=config.namespace)
        coordinator.request.remote(request)

    return tell


def _sibling_finder(context: ChannelContext) -> Callable[[], list[Any]]:
    """How a restarted channel finds its siblings: by name."""

    def find() -> list[Any]:
        config = context.config
        return [
            ray.get_actor(channel_actor_name(config.name, c), namespace=config.namespace)
            for c in range(config.channels)
        ]

    return find
