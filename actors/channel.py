"""The channel actor: one per channel of a topic, a shell around plain parts.

The actor holds the channel's configuration, epoch, failure state and
background tasks, and answers Ray calls; each call is a few lines handed to
the part whose job it is:

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
  links to sibling channels, group views;
- :class:`~raytopic.actors.transactions.TransactionParticipant`: staged
  elements and the two-phase commit of transactions;
- :class:`~raytopic.actors.channel_state.ChannelState`: the durable state and
  what changed in it.

It is an async actor: appends, takes and commits are short synchronous steps
between awaits, so each is atomic; waiting (for data, for room, for a turn) is
awaiting. ``raytopic.coordinator.launch`` creates the channels of a topic
(named, detached) and the coordinator introduces them with ``attach``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import ray

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_metrics import REFRESH_INTERVAL as METRICS_REFRESH_INTERVAL
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.readers import loaded_functions
from raytopic.actors.ring_api import check_payload
from raytopic.actors.segment_ring import Run
from raytopic.actors.session_host import remote_caller
from raytopic.actors.stores.opening import open_store
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import (
    ChannelFailedError,
    ChannelUnavailableError,
    GroupModeError,
    GroupNotFoundError,
    StoreError,
    TopicError,
)
from raytopic.core.gather import Joined, join_replies
from raytopic.core.incarnation import was_restarted
from raytopic.core.naming import channel_actor_name, coordinator_actor_name
from raytopic.core.payloads import Payload
from raytopic.core.protocol import (
    CHANNEL_REQUESTS,
    TRANSACTION_REQUESTS,
    AppendAck,
    ChannelRequest,
    Chunk,
    CursorState,
    Delivery,
    Lease,
    Poison,
    RawReadResult,
    ReaderSpec,
    ReceivedBatch,
    StatusBatch,
    unpack_request,
)
from raytopic.core.records import AckStatus, CommitResult, CommitStatus
from raytopic.core.shared_group import SharedGroup
from raytopic.core.stream_log import (
    ClaimStream,
    CommitMicroBatch,
    ReadStreamLog,
    RecordMicroBatch,
    StreamLogState,
    StreamRequest,
)

logger = logging.getLogger(__name__)

__all__ = ["ChannelActor"]

_ANNOUNCE_AGAIN = 2.0  # s a call waiting for the groups waits before re-announcing

_SEED_TIMEOUT = 30.0
"""Seconds a call to a channel restarted without a store waits for the coordinator's
epoch and groups (then ChannelUnavailableError)."""


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    """A public method of the channel that a failed channel refuses (typed), and that
    waits, on a channel restarted without a store, until the coordinator seeded it."""
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def guarded_async(self: ChannelActor, *args: Any, **kwargs: Any) -> Any:
            if self._failure is not None:
                raise ChannelFailedError(self._failure)
            if not self._seeded.is_set():
                await self._wait_seeded()
            return await method(self, *args, **kwargs)

        return guarded_async

    @functools.wraps(method)
    def guarded(self: ChannelActor, *args: Any, **kwargs: Any) -> Any:
        if self._failure is not None:
            raise ChannelFailedError(self._failure)
        if not self._seeded.is_set():
            raise ChannelUnavailableError(
                f"channel {self._channel} restarted and is getting its groups back: try again"
            )
        return method(self, *args, **kwargs)

    return guarded


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
        self._config = config
        self._channel = channel
        self._context = context = ChannelContext(
            config, channel, ChannelMetrics(config.name, channel)
        )
        self._failure: str | None = None  # why the channel is fenced
        self._opening_error: TopicError | None = None  # its store could not be opened
        self._seeded = asyncio.Event()
        self._restarted = was_restarted()
        self._announced = 0.0  # when the coordinator was last told of a restart
        self._tasks: dict[str, asyncio.Task[None]] = {}  # background tasks by job
        self._parts = parts = ChannelParts.build(
            context, self._fail, self._local_call, self.cursor_state, restarted=self._restarted
        )
        self._log, self._state, self._readers = parts.log, parts.state, parts.readers
        self._publishers, self._host = parts.publishers, parts.host
        try:
            self._recover()
        except Exception as error:
            # Never raise out of __init__: Ray would mark the actor dead for good
            # and free its name. Come up fenced instead, saying why.
            if isinstance(error, TopicError):
                self._opening_error = error
            if self._restarted:
                logger.exception("channel %d of %s cannot recover", channel, config.name)
            self._failure = (
                f"channel {channel} of topic {config.name!r} could not recover its store: {error}"
            )
        if self._restarted:
            self._announce_restart()

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
            coordinator.channel_restarted.remote(config.topic_id, self._channel, self.identity())
        except Exception as error:
            logger.warning("channel %d: could not tell its coordinator: %s", self._channel, error)

    # -- recovery -----------------------------------------------------------------

    def _recover(self) -> None:
        """Open the store and load it (elements, groups, publishers, readers), under a
        new epoch. Without a store, a restarted channel waits for ``seed``."""
        store = open_store(self._config, self._channel, restarted=self._restarted)
        if store is None:
            if not self._restarted:
                self._seeded.set()
            return
        if self._parts.recover(store, restarted=self._restarted) or not self._restarted:
            self._seeded.set()

    def _fail(self, reason: str) -> str:
        """Fence the channel: from now on every call gets ChannelFailedError (this
        failure, returned)."""
        if self._failure is None:
            logger.error("channel %d of %s failed: %s", self._channel, self._config.name, reason)
            self._failure = f"channel {self._channel} of topic {self._config.name!r}: {reason}"
        self._context.notify()
        return self._failure

    async def _wait_seeded(self) -> None:
        deadline = time.monotonic() + _SEED_TIMEOUT
        try:
            while not self._seeded.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._seeded.wait(), min(left, _ANNOUNCE_AGAIN))
                if time.monotonic() - self._announced >= _ANNOUNCE_AGAIN:
                    self._announce_restart()  # the first word may have been lost
        except TimeoutError:
            raise ChannelUnavailableError(
                f"channel {self._channel} of {self._config.name!r} restarted without a store "
                f"and its coordinator has not restored its groups within {_SEED_TIMEOUT:.0f} s"
            ) from None

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
        self._parts.seed(old_epoch, groups, views, readers, shared)
        if self._readers.shared.groups:
            self._start("shared", self._tend_shared_groups)
        self._seeded.set()
        if self._log.store is not None:
            await self._state.save()
        return self.identity()

    def reader_specs(self) -> dict[str, ReaderSpec]:
        """Every open reader's spec (a restarted coordinator asks)."""
        return self._readers.specs()

    # -- life cycle ------------------------------------------------------------

    def attach(self, siblings: list[Any]) -> dict[str, Any]:
        """Learn every channel actor of the topic (index = channel); return who we are."""
        self._host.link(list(siblings), remote_caller)
        return self.identity()

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

    def opening_error(self) -> TopicError | None:
        """Why this channel's store could not be opened (a typed error naming the
        store), or None. A topic being created fails with it (see the coordinator's
        ``start``)."""
        if self._opening_error is None and self._failure is not None:
            return StoreError(self._failure)
        return self._opening_error

    def identity(self) -> dict[str, Any]:
        """Where this channel runs: epoch, node id, process id, and its state
        ("serving", "recovering": restarted without a store, waiting for its
        coordinator, or "failed")."""
        context = ray.get_runtime_context()
        state = "serving" if self._seeded.is_set() else "recovering"
        if self._failure is not None:
            state = "failed"
        return {
            "channel": self._channel,
            "epoch": self._context.epoch,
            "node_id": context.get_node_id(),
            "pid": os.getpid(),
            "state": state,
            "durable": self._log.store is not None,
            "failure": self._failure,
            "damaged": self._log.damage.ranges,
        }

    @_guarded
    async def request(
        self, packed: bytes, payload: Payload | None = None, joined: Joined | None = None
    ) -> Any:
        """Serve a data-path request packed by :func:`pack_request` (append, receive,
        take, watch, ack, ...; see ``raytopic.core.protocol.channel``): one argument
        crosses Ray instead of six. An append's payload comes as its own argument.

        ``joined``: this call is the lead of several channels' calls (a
        ``publish_batch`` or a bulk acknowledgement over several channels): its
        reply is every part's, joined in the input's order (``raytopic.core.gather``).
        """
        request = unpack_request(packed, CHANNEL_REQUESTS)
        self._tend_transactions()  # e.g. one prepared before a restart
        if joined is None:
            return await self._serve(request, payload)
        try:
            own = await self._serve(request, payload)
        except Exception as error:  # the others' replies are awaited all the same
            own = error
        if isinstance(own, StatusBatch):
            own = own.statuses()
        return await join_replies(own, joined)

    async def _serve(self, request: ChannelRequest, payload: Payload | None) -> Any:
        if payload is None:
            return await self._local_call(request)
        return await getattr(self, request.method)(**request._asdict(), payload=payload)

    @_guarded
    async def transact(self, packed: bytes, payload: Payload | None = None) -> Any:
        """Serve a transaction's request (see ``raytopic.actors.transactions``)."""
        request = unpack_request(packed, TRANSACTION_REQUESTS)
        self._start("metrics", self._report_metrics)  # a lead counts its decisions
        transactions = self._parts.transactions
        try:
            return await getattr(transactions, request.method)(request, payload)
        finally:
            self._tend_transactions()

    async def _local_call(self, request: ChannelRequest) -> Any:
        """Serve ``request`` in this process (a session's call to its home channel)."""
        return await getattr(self, request.method)(**request._asdict())

    def _tend_transactions(self) -> None:
        if self._parts.transactions.needs_tending:
            self._start("transactions", self._parts.transactions.tend)

    def _start(self, job: str, work: Callable[[], Any]) -> None:
        """Run background ``job`` (once at a time; it ends with the actor)."""
        task = self._tasks.get(job)
        if task is None or task.done():
            self._tasks[job] = asyncio.ensure_future(work())

    async def _report_metrics(self) -> None:
        """Background (from the first publish): hand Ray the counts and group gauges."""
        readers = self._readers
        while True:
            tail = self._log.ring.tail
            self._context.metrics.report([*readers.owned.lag(tail), *readers.shared.lag(tail)])
            await asyncio.sleep(METRICS_REFRESH_INTERVAL)

    async def _tend_shared_groups(self) -> None:
        """Background (while shared groups exist): see :meth:`SharedGroups.tend`."""
        await self._readers.shared.tend(
            self._parts.dead_letters.send, lambda: self._failure is None
        )

    # -- ring buffer (the Hazelcast API) --------------------------------------------

    @_guarded
    def head_sequence(self) -> int:
        """Sequence of the oldest stored element."""
        return self._log.ring.head

    @_guarded
    def tail_sequence(self) -> int:
        """Sequence of the newest element (head - 1 when empty)."""
        return self._log.ring.tail

    @_guarded
    def size(self) -> int:
        """Elements stored now."""
        return self._log.ring.size

    @_guarded
    def capacity(self) -> int:
        """Most elements held at once."""
        return self._log.ring.capacity

    @_guarded
    def remaining_capacity(self) -> int:
        """``capacity - size``."""
        return self._log.ring.room()

    @_guarded
    def sizes(self) -> tuple[int, int, int]:
        """(head, tail, size) read together."""
        ring = self._log.ring
        return ring.head, ring.tail, ring.tail - ring.head + 1

    @_guarded
    def first_after(self, stamp: float) -> int:
        """Sequence of the first element stamped strictly after ``stamp`` (tail + 1 if none)."""
        return self._log.ring.first_after(stamp)

    @_guarded
    async def add_all(self, payload: Payload, overflow: str, timeout: float | None = None) -> int:
        """Append items; return the LAST sequence, or -1 (see :meth:`RingbufferApi.add_all`)."""
        return await self._parts.ring_api.add_all(payload, overflow, timeout)

    @_guarded
    async def read_one(self, sequence: int) -> Run:
        """The element at ``sequence`` (see :meth:`RingbufferApi.read_one`)."""
        return await self._parts.ring_api.read_one(sequence)

    @_guarded
    async def read_many(
        self, start: int, min_count: int, max_count: int, filter_bytes: bytes | None
    ) -> RawReadResult:
        """Hazelcast ``readManyAsync`` (see :meth:`RingbufferApi.read_many`)."""
        return await self._parts.ring_api.read_many(start, min_count, max_count, filter_bytes)

    @_guarded
    def read_range(self, start: int, stop: int, max_count: int) -> tuple[Chunk, ...]:
        """Bulk read for ``raytopic.data`` and ``raytopic.spark`` (see
        :meth:`RingbufferApi.read_range`)."""
        return self._parts.ring_api.read_range(start, stop, max_count)

    # -- publishing ------------------------------------------------------------

    async def append(
        self,
        publisher_id: str,
        batch: int,
        overflow: str,
        timeout: float | None,
        statuses: bool,
        payload: Payload,
    ) -> AppendAck | StatusBatch:
        """Append one publisher batch, in the publisher's batch order.

        A batch number seen before returns the ack it got then (a retry after
        a lost reply appends nothing twice).

        Args:
            publisher_id: The publisher's id.
            batch: Its batch number on this channel (0, 1, 2, ...).
            overflow: The topic's overflow policy.
            timeout: For "block": seconds to wait for room.
            statuses: Reply with a StatusBatch (``publish_batch``) instead of an ack.
            payload: The values: pickled values, or Arrow rows.

        Returns:
            The ack, or with ``statuses`` the batch's statuses.

        Raises:
            InvalidArgumentError: a stale or duplicate batch number, or not a payload.
            TopicError: with ``statuses``, why the batch was not appended.
        """
        arrived = time.perf_counter()
        payload = check_payload(payload)
        publishers = self._publishers
        ack = publishers.earlier_ack(publisher_id, batch, len(payload))
        if ack is not None:  # a retry (a lost reply, or a restart in between)
            return self._ack_reply(ack, statuses)
        async with publishers.turn(publisher_id, batch):
            ack, change = await self._log.append(
                payload,
                Overflow.parse(overflow),
                timeout,
                whole=statuses,
                publisher_id=publisher_id,
                batch=batch,
            )
        # Outside the turn: the publisher's next batch is written meanwhile, and
        # one fdatasync covers both.
        await self._log.durable(change)
        self._context.metrics.appended(time.perf_counter() - arrived)
        self._start("metrics", self._report_metrics)
        publishers.remember(publisher_id, batch, ack)
        return self._ack_reply(ack, statuses)

    async def append_once(
        self, writer_id: str, version: int, overflow: str, timeout: float | None, payload: Payload
    ) -> AppendAck:
        """Append a writer's ``version`` unless this channel has it already: exactly once
        across re-runs of a Spark micro-batch and across restarts with a store (the
        pair is in the record). Answers an empty ack for a version it has."""
        if self._publishers.has_version(writer_id, version):
            return AppendAck(-1, 0, 0.0)
        return await self.append(writer_id, version, overflow, timeout, False, payload)

    def _ack_reply(self, ack: AppendAck, statuses: bool) -> AppendAck | StatusBatch:
        if statuses:
            if ack.error is not None:
                # Raised here, not in the caller's deserialization, so the
                # ObjectRef fails with the typed error itself.
                raise ack.error
            return StatusBatch(self._config.topic_id, self._channel, ack)
        return ack

    # -- readers ----------------------------------------------------------------

    @_guarded
    async def open_reader(self, reader_id: str, spec: ReaderSpec) -> CursorState:
        """Register a subscriber on this channel (its cursor, if anonymous)."""
        state, created = self._readers.open(reader_id, spec)
        if created:
            await self._state.save()
        return state

    @_guarded
    async def close_reader(self, reader_id: str) -> None:
        """Forget a subscriber; its session here (if any) ends."""
        if self._readers.close(reader_id):
            await self._state.save()

    async def take(
        self,
        reader_id: str,
        fence: Any,
        max_count: int,
        wait: float = 0.0,
        token: str | None = None,
    ) -> Delivery:
        """Deliver up to ``max_count`` elements (``wait``: a fetch); see :meth:`Readers.take`."""
        if self._readers.in_shared(reader_id):
            self._start("shared", self._tend_shared_groups)  # (after a restart: the first take)
        return await self._readers.take(reader_id, fence, max_count, wait, token)

    async def stop_take(self, token: str) -> None:
        """End the wait of fetch ``token``: it takes nothing (it may not have arrived yet)."""
        self._readers.fetches.stop(token)

    async def settle_take(
        self, reader_id: str, fence: Any, token: str, give_back_from: int | None
    ) -> bool:
        """A fetch's session used what it took, up to ``give_back_from`` (None: all)."""
        return self._readers.settle(reader_id, fence, token, give_back_from)

    @_guarded
    def host_restarted(self, host: int) -> int:
        """Channel ``host`` restarted: what its sessions took here is read again now."""
        return self._readers.host_restarted(host)

    async def give_back(
        self,
        reader_id: str,
        fence: Any,
        first: int,
        expected_next: int,
        jumps: int,
        entries: tuple[tuple[int, int], ...] = (),
    ) -> bool:
        """Undo a take nobody saw (see :meth:`Readers.give_back`)."""
        return self._readers.give_back(reader_id, fence, first, expected_next, jumps, entries)

    async def report_poison(
        self,
        reader_id: str,
        fence: Any,
        jumps: int,
        sequence: int,
        cause_type: str,
        cause_message: str,
        skipped: bool = False,
    ) -> bool:
        """A reader could not decode an element (see :meth:`Readers.report_poison`)."""
        poison = Poison(sequence, cause_type, cause_message)
        return self._readers.report_poison(reader_id, fence, jumps, poison, skipped)

    async def watch(
        self, reader_id: str, fence: Any, known: CursorState | None, timeout: float
    ) -> CursorState:
        """The reader's cursor state once it differs from ``known`` (or after ``timeout``)."""
        return await self._readers.watch(reader_id, fence, known, timeout)

    @_guarded
    def cursor_state(self, reader_id: str, fence: Any = None) -> CursorState:
        """The reader's cursor (for heads, tails, remaining messages, last commits).

        A cursor left below the head (its next elements were overwritten or
        expired) reports the head as its next: that is what it reads next, and
        what was removed is not "remaining".
        """
        state = self._readers.state(reader_id, fence, check=fence is not None)
        head = self._log.ring.head
        if state.next < head and not self._readers.in_shared(reader_id):
            state = dataclasses.replace(state, next=head)
        return state

    @_guarded
    async def commit(self, reader_id: str, sequence: int, fence: Any) -> CommitResult:
        """Commit ``sequence`` (and every earlier one) for the reader or its group;
        with a store, answered once the commit is on disk."""
        self._readers.refuse_shared(reader_id, "commit")
        result = self._readers.owned.commit(self._readers.by_id.get(reader_id), sequence, fence)
        if result.status is CommitStatus.COMMITTED:
            self._readers.commits_moved()
            await self._state.save()
        return result

    @_guarded
    async def seek(
        self, reader_id: str, fence: Any, target: int | float, by_time: bool, commit: bool
    ) -> tuple[int, int]:
        """Move the reader's cursor; return (position set, new jump count).

        ``target`` is a sequence ("next is the first after it") or, with
        ``by_time``, a time stamp ("next is the first published after it").
        """
        self._readers.refuse_shared(reader_id, "seek")
        reader = self._readers.get(reader_id)
        moved = self._readers.owned.seek(reader, fence, target, by_time, commit)
        self._readers.commits_moved()
        await self._state.save()
        return moved

    # -- groups (called by the coordinator) ---------------------------------------

    @_guarded
    async def ensure_group(
        self,
        group: str,
        start_latest: bool,
        shared: SharedGroup | None = None,
        reader: ReaderSpec | None = None,
    ) -> CursorState:
        """Create the group's cursor here if it does not exist yet (``shared``: a
        shared group's, with its definition). ``reader``: the spec of the member
        the group is made for, checked first: a group is not made for a reader
        that cannot open here (InvalidArgumentError)."""
        if reader is not None:
            loaded_functions(reader)
        state, created = self._readers.ensure_group(group, start_latest, shared)
        if shared is not None:
            self._start("shared", self._tend_shared_groups)
        if created:
            await self._state.save()
        return state

    @_guarded
    async def destroy_group(self, group: str) -> None:
        """Forget a group: its positions and the retention it held."""
        self._readers.destroy_group(group)
        self._host.forget_group(group)
        self._state.touch("marks", group)
        if self._parts.streams.forget(group):
            self._state.touch("streams", group)
        await self._state.save()

    @_guarded
    async def grant(self, group: str, lease: Lease | None) -> None:
        """Give the group's channel to a member (None: to nobody); it resumes after the commit."""
        if self._readers.owned.grant(group, lease):
            await self._state.save()

    @_guarded
    async def reset_group(
        self, group: str, target: int | float | str
    ) -> tuple[int, dict[str, Any]]:
        """Move the group's read and commit positions; return (position, previous state)
        (see :meth:`Readers.reset_group`)."""
        reset = self._readers.reset_group(group, target)
        await self._state.save()
        return reset

    @_guarded
    async def restore_group(self, group: str, previous: dict[str, Any]) -> None:
        """Undo a reset (a reset of several channels is all or nothing)."""
        if self._readers.restore_group(group, previous):
            await self._state.save()

    @_guarded
    async def stream_log(self, request: StreamRequest) -> StreamLogState | None:
        """Serve a stream's request on its group's offset log here (see
        ``raytopic.core.stream_log``): read or claim it, record a batch, or commit
        one (the group's commit moves to the batch's end here). A change is
        answered once it is durable, in the same state write as the cursor.

        Raises:
            GroupNotFoundError: no such group.
            GroupModeError: a shared group (its members acknowledge element by element).
            NotOwnerError: a newer stream holds the group (a claim, record or commit
                of an older one).
        """
        group, owned, streams = request.group, self._readers.owned, self._parts.streams
        if group not in owned.groups:
            if group in self._readers.shared:
                raise GroupModeError(f"group {group!r} is shared: a stream reads an owned group")
            raise GroupNotFoundError(f"group {group!r} does not exist")
        match request:
            case ReadStreamLog():
                return StreamLogState(streams.record_of(group), owned.groups[group].committed)
            case ClaimStream():
                streams.claim(request)
            case RecordMicroBatch():
                streams.record(request)
            case CommitMicroBatch():
                through = streams.commit(request)
                if through is not None:
                    owned.advance(group, through)
                    self._readers.commits_moved()
        self._state.touch("streams", group)
        await self._state.save()
        if isinstance(request, ClaimStream):
            return StreamLogState(streams.record_of(group), owned.groups[group].committed)
        return None

    def group_cursors(self) -> dict[str, dict[str, Any]]:
        """Every group's cursor here, for ``describe`` (and a restarted coordinator)."""
        return self._readers.describe_groups()

    def describe(self) -> dict[str, Any]:
        """Channel figures and group cursors in one call (a failed channel answers
        too: its state says so)."""
        ring = self._log.ring
        return {
            **self.identity(),
            "head": ring.head,
            "tail": ring.tail,
            "size": ring.tail - ring.head + 1,
            "capacity": ring.capacity,
            "groups": self.group_cursors(),
            "transactions": self._parts.transactions.table.describe(time.time()),
        }

    # -- shared groups (per-element acknowledgement) --------------------------------

    @_guarded
    async def ack(
        self, reader_id: str, entries: tuple[tuple[int, int, int], ...], single: bool = False
    ) -> AckStatus | list[AckStatus]:
        """Acknowledge elements a shared group's member holds, each named by its
        delivery id (sequence, delivery count, channel epoch); with a store,
        answered once on disk."""
        statuses = self._readers.shared.ack(reader_id, entries)
        return await self._acknowledged(statuses, AckStatus.ACKED, single)

    @_guarded
    async def nack(
        self,
        reader_id: str,
        entries: tuple[tuple[int, int, int], ...],
        delay: float = 0.0,
        single: bool = False,
    ) -> AckStatus | list[AckStatus]:
        """Give elements back to their shared group, to be delivered again after
        ``delay`` seconds (past ``max_deliveries``: to the dead-letter topic)."""
        statuses = self._readers.shared.nack(reader_id, entries, delay)
        return await self._acknowledged(statuses, AckStatus.NACKED, single)

    @_guarded
    async def extend_lease(
        self,
        reader_id: str,
        entries: tuple[tuple[int, int, int], ...],
        seconds: float | None = None,
        single: bool = False,
    ) -> AckStatus | list[AckStatus]:
        """Move the ack deadlines of elements the member holds: they end ``seconds``
        from now (None: the group's ``ack_timeout`` from now). Not written to the
        store: a restart delivers what was held again anyway."""
        statuses = self._readers.shared.extend(reader_id, entries, seconds)
        return statuses[0] if single else statuses

    async def _acknowledged(
        self, statuses: list[AckStatus], success: AckStatus, single: bool
    ) -> AckStatus | list[AckStatus]:
        """After acks or nacks: room may be free and dead letters due; durable first."""
        if success in statuses:
            self._readers.commits_moved()
            await self._state.save()
        return statuses[0] if single else statuses

    @_guarded
    async def purge(self) -> int:
        """Remove every element (an operator's ``Topic.purge``); groups and readers
        continue after them, and shared groups forget what they held or waited
        for. Returns how many elements were removed."""
        log = self._log
        removed = log.evict_to(log.ring.tail + 1)
        self._readers.skip_to_head()
        log.release()
        self._context.notify()
        await self._state.save()
        return removed

    # -- receive sessions (the receives sent to this channel) ---------------------

    @_guarded
    async def update_views(
        self,
        group: str,
        version: int,
        views: dict[str, dict[int, Lease] | None],
        generation: int = 0,
    ) -> None:
        """Members' channels changed: sessions here read these from now on. A member
        that left or timed out (None) owns nothing: its session here ends (a
        member that comes back opens a new one on its next receive).

        The group's version and generation are kept (with a store, durably): a
        restarted coordinator continues above them."""
        shared, readers = self._readers.shared, self._readers.by_id

        def left(member: str) -> None:
            if group in shared and member in readers:
                shared.member_left(group, member)

        if self._host.update_views(
            group, version, generation, views, left, lambda m: shared.member_back(group, m)
        ):
            self._state.touch("marks", group)
            self._state.save_later()

    def group_marks(self) -> dict[str, tuple[int, int]]:
        """Per group, the highest (view version, generation) pushed here."""
        return dict(self._host.marks)

    @_guarded
    def resequencer_stats(self, reader_id: str) -> Any:
        """The resequencer counts of the reader's session here (None: none)."""
        session = self._host.sessions.get(reader_id)
        return None if session is None else session.resequencer_stats

    @_guarded
    def interrupt_receives(self, reader_id: str, stream: str, upto: int) -> None:
        """A handle abandons its receives of ``stream`` up to ``upto`` (see ReceiveSession)."""
        if reader_id in self._readers.by_id:
            self._session(reader_id, None).interrupt(stream, upto)

    @_guarded
    async def settle_receives(self, reader_id: str, stream: str, upto: int) -> None:
        """Wait until a handle's receives up to ``upto`` finished (a seek goes after them)."""
        session = self._host.sessions.get(reader_id)
        if session is not None:
            await session.settle(stream, upto)

    @_guarded
    def resume_receives(self, reader_id: str) -> None:
        """The seek announced by ``settle_receives`` landed: waits may take again."""
        session = self._host.sessions.get(reader_id)
        if session is not None:
            session.resume_fetches()

    def _session(self, reader_id: str, view: tuple[int, dict[int, Any]] | None) -> Any:
        """The reader's receive session here (a restarted channel links its siblings first)."""
        if reader_id in self._readers.by_id and reader_id not in self._host.sessions:
            self._ensure_siblings()
        return self._host.session(reader_id, view)

    async def receive(
        self,
        reader_id: str,
        stream: str,
        number: int,
        max_count: int,
        single: bool,
        spread: bool = False,
        here_only: bool = False,
        view: tuple[int, dict[int, Any]] | None = None,
    ) -> ReceivedBatch:
        """Serve a subscriber's receive at its session here (see ReceiveSession)."""
        self._session(reader_id, view)
        return await self._host.receive(
            reader_id, stream, number, max_count, single, spread, here_only, view
        )

    async def end_receives(self, reason: str) -> None:
        """The topic is being destroyed: waiting receives here raise TopicNotFoundError,
        and so does every other wait (ring buffer reads, appends waiting for room)."""
        self._context.end_waits(reason)
        await self._host.end_receives(reason)

    def ping(self) -> int:
        """Cheap liveness probe; returns the channel number."""
        return self._channel
