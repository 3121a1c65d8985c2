"""The channel actor: one per channel of a topic, a shell around plain parts.

Ray sees two entries, one convention: ``request`` (a packed request: the data
path, a transaction's steps, a stream's) and ``control`` (a coordinator's
request, as it is) both serve a typed request from ``raytopic.core.protocol``
through the handler registered for its type (``raytopic.actors.channel_dispatch``),
each a few lines handed to the part whose job it is. The handlers are grouped by
job into the request families the shell is made of:
:class:`~raytopic.actors.channel_elements.ElementRequests` (publishes, the ring
buffer API, latest values, purge),
:class:`~raytopic.actors.channel_readers.ReaderRequests` (readers, takes, commits,
seeks, per-element acks), :class:`~raytopic.actors.channel_receives.ReceiveRequests`
(receive sessions and views), :class:`~raytopic.actors.channel_groups.GroupRequests`
(the coordinator's groups, streams' steps) and
:class:`~raytopic.actors.channel_transactions.TransactionRequests`; the shell keeps
the life cycle and the store's. What the parts share
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

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_dispatch import Admit, bind, call_handler, entry, in_turn, serves
from raytopic.actors.channel_elements import ElementRequests
from raytopic.actors.channel_groups import GroupRequests
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.channel_readers import ReaderRequests
from raytopic.actors.channel_receives import ReceiveRequests
from raytopic.actors.channel_recovery import ChannelRecovery
from raytopic.actors.channel_transactions import TransactionRequests
from raytopic.actors.channel_upkeep import ChannelUpkeep
from raytopic.actors.direct_offers import OfferInbox, OfferOutbox
from raytopic.actors.stored_topic import StoredTopic
from raytopic.actors.stream_steps import RayStreamPeers, StreamSteps
from raytopic.actors.transaction_lead import RayPeers
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
    AddAll,
    Append,
    AppendOnce,
    AppendPieces,
    AppendUnless,
    AttachChannels,
    ChannelRestarted,
    CommitThenReceive,
    ControlRequest,
    DescribeChannel,
    EndReceives,
    MarkDestroyed,
    OpenStore,
    ReadIdentity,
    ReadOpeningError,
    ReadStoredTopic,
    RemoveStore,
    SeedChannel,
    StatusBatch,
    unpack_call,
)
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
        node_id = _node_id
        # Fetches' replies written straight to their host's process (direct_offers).
        self._offers_in, self._offers_out = OfferInbox(node_id), OfferOutbox(node_id)
        self._parts = parts = ChannelParts.build(
            context,
            restarted=restarted,
            find_siblings=_sibling_finder(context),
            offers=self._offers_in,
        )
        self._upkeep = ChannelUpkeep(parts)
        self._recovery = ChannelRecovery(
            context,
            parts.log,
            node_id=node_id,
            restarted=restarted,
            announce=_coordinator_port(context),
        )
        self._log, self._state, self._readers = parts.log, parts.state, parts.readers
        self._host = parts.host
        stream_steps = StreamSteps(
            channel,
            config.channels,
            parts.streams,
            parts.readers,
            parts.state,
            RayStreamPeers(config),
        )
        self._in_service = 0  # ``request`` calls running here (a destroy waits for them)
        destroyed = restarted and channel_destroyed(config.namespace, config.name, channel)
        self._stored = StoredTopic(context, parts, restarted=restarted, destroyed=destroyed)
        if self._stored.open():  # or the channel comes up failed, saying why
            self._seeded.set()
        # The request families, each served as its handlers' registrations say (the
        # transactions' once the store named the topic's id: the lead names this
        # channel by it).
        self._transactions = TransactionRequests(parts.transactions, RayPeers())
        self._reader_requests = ReaderRequests(parts)
        self._receives = ReceiveRequests(parts)
        self._families = (
            ElementRequests(parts),
            self._transactions,
            GroupRequests(parts, stream_steps),
            self._reader_requests,
            self._receives,
        )
        self._served = bind(self, *self._families)
        if restarted:
            self._recovery.announce_restart()

    @property
    def _config(self) -> TopicConfig:
        """The topic's configuration (its id: the one the store holds, if it holds one)."""
        return self._context.config

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
        handler, admit = self._served[type(request)]
        if not self._context.admits_all:
            await self._recovery.admit(admit)
        if isinstance(request, REPORTED_REQUESTS):
            self._upkeep.report_from_now()
        self._upkeep.tend()  # e.g. a transaction prepared before a restart
        try:
            async with self._state.unit_of_work():
                reply = await call_handler(handler, request, payload)
            if isinstance(request, PUBLISHING_REQUESTS):
                await self._context.answer_woken_first()
            # A fetch's reply goes to its host directly too (then Ray's is a note of it).
            return await self._offers_out.reply(request, reply)
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
        self._offers_in.close()
        self._offers_out.close()

    # -- the store through the topic's life ------------------------------------------

    @serves(ReadOpeningError, Admit.ALWAYS)
    async def _read_opening_error(self, _: ReadOpeningError) -> TopicError | None:
        """Why this channel's store could not be opened (a typed error naming the
        store), or None. A topic being created fails with it (see the coordinator's
        ``start``)."""
        return self._stored.opening_error

    @serves(ReadStoredTopic, Admit.ALWAYS)
    async def _stored_topic(self, _: ReadStoredTopic) -> TopicRecord | None:
        """What this channel's store held when it opened (the coordinator of a new
        topic compares every channel's)."""
        return self._stored.record

    @serves(OpenStore, Admit.ALWAYS)
    async def _open_store(self, request: OpenStore) -> dict[str, Any]:
        """Begin over the store (see :meth:`StoredTopic.begin`); returns the identity."""
        await self._stored.begin(request.topic_id, request.wipe)
        self._transactions.renew_lead()
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

    # -- requests of two families ------------------------------------------------------

    @serves(CommitThenReceive)
    async def _commit_then_receive(self, request: CommitThenReceive) -> tuple[Any, ...]:
        """A commit, then the reader's next receive here (see ``CommitThenReceive``)."""
        commit, receive = request
        return await in_turn(
            lambda: self._reader_requests.commit(commit), lambda: self._receives.receive(receive)
        )

    # -- the end of the topic ------------------------------------------------------------

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


def _node_id() -> str:
    """The Ray node this channel runs on."""
    return ray.get_runtime_context().get_node_id()
