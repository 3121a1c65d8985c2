"""The channel actor: one per channel of a topic.

It owns the channel's ring buffer, every reader's cursor on the channel
(anonymous subscribers' and groups'), the publishers' batch sequence numbers,
and the receive sessions of the subscribers that sent receives here (any
channel can host one; see ``raytopic.actors.receive_session``). It is an async
actor: appends, takes and commits are short synchronous steps between awaits,
so each is atomic; waiting (for data, for room, for a turn) is awaiting.

``raytopic.coordinator.launch`` creates the channels of a topic (named,
detached) and the coordinator introduces them to each other with ``attach``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import functools
import inspect
import logging
import os
import pickle
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np
import ray

from raytopic.actors.channel_metrics import REFRESH_INTERVAL as METRICS_REFRESH_INTERVAL
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.cursors import Cursor, Lease, Lent, clamp
from raytopic.actors.damage import DamageMap
from raytopic.actors.incarnation import was_restarted
from raytopic.actors.payloads import DamagedElements, Payload, PickledValues
from raytopic.actors.publisher_tracks import ACKS_KEPT, PublisherTrack
from raytopic.actors.receive_session import ChannelLink, CursorState, ReceiveSession, SessionSpec
from raytopic.actors.segment_ring import Run, SegmentRing
from raytopic.actors.shared_cursor import SharedCursor
from raytopic.actors.shared_take import take_shared
from raytopic.actors.stores.base import ChannelStore, StoredBatch
from raytopic.actors.stores.group_sync import GroupSync
from raytopic.actors.stores.opening import open_store
from raytopic.actors.turns import DuplicateTurnError, Turns
from raytopic.actors.wire import (
    AppendAck,
    Chunk,
    Delivery,
    RawReadResult,
    ReaderSpec,
    ReceivedBatch,
    StatusBatch,
    pack_request,
    unpack_request,
)
from raytopic.config import Overflow, TopicConfig
from raytopic.errors import (
    ChannelFailedError,
    ChannelUnavailableError,
    DataLossError,
    GroupModeError,
    GroupNotFoundError,
    InvalidArgumentError,
    NotOwnerError,
    StaleSequenceError,
    StoreError,
    SubscriberClosedError,
    TopicError,
    TopicFullError,
    TopicNotFoundError,
)
from raytopic.naming import channel_actor_name, coordinator_actor_name
from raytopic.records import AckStatus, CommitResult, CommitStatus, Position, _Origin
from raytopic.shared_group import SharedGroup

logger = logging.getLogger(__name__)

__all__ = ["ChannelActor"]

MAX_READ_MANY = 1000
"""Most items one ``read_many`` returns (Hazelcast's limit against overload)."""

_POLL_INTERVAL = 0.25
"""Seconds between re-checks while waiting on something a clock changes (TTL)."""

_PUBLISHERS_KEPT = 10_000
"""Publisher tracks a channel keeps before it looks for idle ones to forget."""

_PUBLISHER_IDLE_S = 600.0
"""A publisher silent this long is forgotten (when there are many). If it comes
back, its next batch waits for the turn gap timeout once: the channel no longer
knows which number comes next."""

ONCE_WRITER_PREFIX = "once:"
"""Writers of ``append_once`` (streaming sinks): their last version is their
exactly-once record, so they are never forgotten for idleness."""

_PUBLISHER_SWEEP_S = 60.0
"""Seconds between looks for idle publishers."""

_STOPPED_TAKES_KEPT = 10_000
"""Stop requests remembered for fetches that have not arrived (yet, or ever)."""

_END_RECEIVES_TIMEOUT = 1.0
"""Seconds a destroy waits for the receives it ended to answer."""

_DEAD_LETTER_BATCH = 1000
"""Elements one dead-letter append carries at most."""

_DEAD_LETTER_TIMEOUT = 5.0
"""Seconds a dead-letter append may wait for room; then it is tried again later."""

_ANNOUNCE_AGAIN = 2.0
"""Seconds a call to a channel waiting for its groups waits before the channel
tells its coordinator again that it restarted."""

_SEED_TIMEOUT = 30.0
"""Seconds a call to a channel restarted without a store waits for the coordinator
to tell it its epoch and groups; then ChannelUnavailableError."""


def _fresh_start() -> int:
    """Where a channel restarted without a store numbers its elements (and jump
    counts) from: the time in microseconds, times 1024. Later than every position
    (and jump count) of an earlier incarnation unless one appended more than a
    thousand elements per microsecond of its life, and it needs no memory of the
    earlier incarnations (the epoch a coordinator remembers may be stale)."""
    return (time.time_ns() // 1000) << 10


_LENT_TIMEOUT = 10.0
"""Seconds a take waits for a fetch's session to settle what it took; then the
session is taken for gone (its elements never reached anyone): read them again."""


@dataclass(slots=True)
class _Reader:
    """A subscriber as this channel knows it."""

    reader_id: str
    spec: ReaderSpec
    cursor: Cursor | None  # anonymous readers only; members use their group's
    filter: Callable[[Any], bool] | None = None
    converter: Callable[[Any], Any] | None = None
    resequence: Any = None

    @property
    def session_spec(self) -> SessionSpec:
        """How its receive sessions behave."""
        spec = self.spec
        return SessionSpec(self.reader_id, spec.complete_on_empty, spec.window, self.resequence)


@dataclass(slots=True)
class _Pending:
    """An append written to the store, visible to readers once a sync covers it."""

    payload: Payload
    stamp: float
    change: int  # its mark in the log's GroupSync


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
    """

    def __init__(self, config: TopicConfig, channel: int) -> None:
        self._config = config
        self._channel = channel
        self._ring = SegmentRing(config.capacity, config.ttl, clock=_stamp_clock)
        self._readers: dict[str, _Reader] = {}
        self._groups: dict[str, Cursor] = {}
        # Shared groups: their cursors, definitions and filters (see _take_shared).
        self._shared: dict[str, SharedCursor] = {}
        self._shared_specs: dict[str, SharedGroup] = {}
        self._shared_filters: dict[str, Callable[[Any], bool] | None] = {}
        self._shared_task: asyncio.Task[None] | None = None
        self._shared_wake = asyncio.Event()  # dead letters to send now
        self._dead_letter_channels: dict[str, Any] = {}  # dead-letter topic -> its channel
        # Fetch token -> (group, member, entries): what a sibling's session took
        # here, until it settles (taken back at once if that sibling restarts).
        self._shared_loans: dict[str, tuple[str, str, tuple[tuple[int, int], ...]]] = {}
        self._departed: dict[str, set[str]] = {}  # shared group -> members told gone
        self._publishers: dict[str, PublisherTrack] = {}
        self._publishers_swept = time.monotonic()
        self._publish_turns = Turns()
        self._sessions: dict[str, ReceiveSession] = {}
        # group -> member -> (version, leases): the latest view pushed here, so a
        # session opened later starts from it even if its handle lags behind.
        self._member_views: dict[str, dict[str, tuple[int, dict[int, Lease]]]] = {}
        self._stopped_takes: dict[str, None] = {}  # fetches told to stop waiting (bounded)
        self._fetching: dict[str, set[str]] = {}  # reader -> tokens of its fetches waiting here
        self._links: dict[int, ChannelLink] = {}
        self._sibling_calls: set[Any] = set()  # calls to sibling channels not yet answered
        self._siblings: list[Any] = []
        self._changed = asyncio.Event()
        # Durability: the store, appends waiting for a sync, and the incarnation.
        self._epoch = 1
        self._store: ChannelStore | None = None
        self._log_sync: GroupSync | None = None
        self._state_sync: GroupSync | None = None
        self._pending: deque[_Pending] = deque()
        self._pending_count = 0
        self._pending_stamp = 0.0
        self._sync_task: asyncio.Task[None] | None = None
        self._damage = DamageMap()  # stored records found damaged (see raytopic.actors.damage)
        self._group_marks: dict[str, tuple[int, int]] = {}  # group -> (version, generation)
        self._loss: DataLossError | None = None  # a restart without a store lost elements
        self._loss_readers: set[str] = set()  # readers still to be told of it
        self._failure: str | None = None  # why the channel is fenced
        self._opening_error: TopicError | None = None  # its store could not be opened
        self._seeded = asyncio.Event()
        self._restarted = was_restarted()
        self._metrics = ChannelMetrics(config.name, channel)
        self._metrics_task: asyncio.Task[None] | None = None
        self._receiving = 0  # receive calls running here
        self._announced = 0.0  # when the coordinator was last told of a restart
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
        self._store = store
        self._log_sync = GroupSync(lambda _: store.sync())
        self._state_sync = GroupSync(store.save_state, self._snapshot)
        state = store.load_state() or {}
        self._epoch = int(state.get("epoch", 0)) + 1
        self._damage = DamageMap(store.damaged())
        largest = store.largest_sequence()
        saved_next = int(state.get("next_sequence", 0))
        if saved_next - 1 > largest:
            # Records the state file says were appended are gone (cut off on
            # disk): report them, and never give their positions to others.
            self._damage.add(largest + 1, saved_next - 1)
            largest = saved_next - 1
        # The ring starts at what the store keeps (a damaged first record
        # included: its readers are told), up to the capacity.
        start = max(self._store_first(), largest + 1 - self._config.capacity)
        ring = self._ring = SegmentRing(
            self._config.capacity, self._config.ttl, clock=_stamp_clock, first_sequence=start
        )
        if self._restarted and not state:
            # A store that keeps no state (a user's, with the defaults): its
            # elements are back; the coordinator restores groups and readers.
            self._load_elements(store, start, largest)
            return
        for pid, saved in state.get("publishers", {}).items():
            self._publishers[pid] = PublisherTrack.from_state(saved)
        self._load_elements(store, start, largest)
        for pid, track in self._publishers.items():
            self._publish_turns.resume(pid, track.last_batch + 1)
        for group, saved in state.get("groups", {}).items():
            self._groups[group] = Cursor.from_state(saved, group=True)
        for saved in state.get("shared", {}).values():
            spec = pickle.loads(base64.b64decode(saved["spec"]))
            shared = SharedCursor.from_state(saved["cursor"])
            # What was held comes back to deliver again: past the limit, dead.
            shared.enforce_limit(spec.max_deliveries, "held when its channel restarted")
            self._add_shared(spec, shared)
            self._forget_damaged_deliveries(spec.name, shared)
        self._evict_committed()
        self._group_marks = {g: (int(v), int(n)) for g, (v, n) in state.get("marks", {}).items()}
        for reader_id, saved in state.get("readers", {}).items():
            if not self._restore_reader(reader_id, saved["spec"]):
                continue
            cursor = self._readers[reader_id].cursor
            if cursor is not None and saved.get("cursor"):
                self._readers[reader_id].cursor = Cursor.from_state(saved["cursor"], group=False)
        store.save_state(self._snapshot())  # the new epoch, before anything is served
        self._release_store()
        self._seeded.set()
        if self._restarted or ring.size:
            logger.info(
                "channel %d of %s recovered: epoch %d, sequences %d..%d, %d groups",
                self._channel,
                self._config.name,
                self._epoch,
                ring.head,
                ring.tail,
                len(self._groups),
            )
        if self._damage:
            logger.error(
                "channel %d of %s: stored elements %s are damaged (checksum mismatch): "
                "lost; every reader that reaches them is told once (DataLossError)",
                self._channel,
                self._config.name,
                ", ".join(f"{first}..{last}" for first, last in self._damage.ranges),
            )

    def _restore_reader(self, reader_id: str, spec: ReaderSpec | str) -> bool:
        """Open a reader a restart brings back (``spec`` as the state file keeps it,
        or as the coordinator has it). One that cannot come back (its filter no
        longer loads, its group is gone) is logged and skipped, blocking nothing."""
        try:
            if isinstance(spec, str):
                spec = pickle.loads(base64.b64decode(spec))
            self._open_reader(reader_id, spec)  # type: ignore[arg-type]
        except Exception as error:
            logger.warning("channel %d: reader %s not back: %s", self._channel, reader_id, error)
            return False
        return True

    def _load_elements(self, store: ChannelStore, start: int, last: int) -> None:
        """Fill the ring from the store, from ``start`` up to ``last`` (and learn the
        publishers' batches from the records). Damaged records keep their
        positions, as runs of DamagedElements: what follows stays readable."""
        ring = self._ring
        for batch in store.load_batches(start):
            payload = batch.payload
            if batch.first < start:
                payload = payload.slice(start - batch.first, len(payload))
            first = batch.first + len(batch.payload) - len(payload)
            if first < ring.tail + 1:
                logger.error("channel %d: stored record at %d overlaps", self._channel, first)
                continue
            self._keep_damaged(ring.tail + 1, first - 1, batch.stamp)
            ring.append(payload, overwrite=True, stamp=batch.stamp)
            if batch.publisher_id:
                track = self._publishers.setdefault(batch.publisher_id, PublisherTrack())
                track.add_run(batch.batch, batch.first, len(batch.payload), batch.stamp)
        self._keep_damaged(ring.tail + 1, last, ring.stamp_of_last_append())
        store.release_cache()

    def _keep_damaged(self, first: int, last: int, stamp: float) -> None:
        """Positions ``first..last`` have no intact record: they go into the ring as
        damaged (a gap the store did not report is reported now)."""
        if first > last:
            return
        known = self._damage.at(first)
        if known is None or known[1] < last:
            logger.error("channel %d: stored elements %d..%d missing", self._channel, first, last)
            self._damage.add(first, last)
        self._ring.append(DamagedElements(last - first + 1), overwrite=True, stamp=stamp)

    def _forget_damaged_deliveries(self, group: str, shared: SharedCursor) -> None:
        """A shared group's elements to deliver again whose records are damaged now
        are settled (nothing altered is delivered); the loss is logged."""
        for first, last in self._damage.overlapping(shared.floor + 1, shared.next - 1):
            # Those not yet looked at stay: the group is told when it reaches them.
            last = min(last, shared.next - 1)
            forgotten = shared.forget(first, last)
            if forgotten:
                logger.error(
                    "channel %d: %d elements of shared group %s in %d..%d were damaged "
                    "on disk before they were acknowledged: lost",
                    self._channel,
                    forgotten,
                    group,
                    first,
                    last,
                )

    def _store_first(self) -> int:
        """The oldest sequence the store keeps, a damaged record just before its
        first intact one included (its readers are to be told of it)."""
        assert self._store is not None
        first = self._store.first_sequence()
        lost = self._damage.at(first - 1)
        return first if lost is None else lost[0]

    def _snapshot(self) -> dict[str, Any]:
        """The state a store keeps (JSON-ready): epoch, groups, publishers, readers."""
        return {
            "epoch": self._epoch,
            "next_sequence": self._ring.tail + 1 + self._pending_count,
            "groups": {group: cursor.to_state() for group, cursor in self._groups.items()},
            "shared": {
                group: {
                    "spec": base64.b64encode(pickle.dumps(self._shared_specs[group])).decode(),
                    "cursor": cursor.to_state(),
                }
                for group, cursor in self._shared.items()
            },
            "marks": dict(self._group_marks),
            "publishers": {pid: track.to_state() for pid, track in self._publishers.items()},
            "readers": {
                reader_id: {
                    "spec": base64.b64encode(pickle.dumps(reader.spec)).decode(),
                    "cursor": None if reader.cursor is None else reader.cursor.to_state(),
                }
                for reader_id, reader in self._readers.items()
            },
        }

    def _state_changed(self) -> None:
        """A change worth keeping but not worth waiting for: saved in the background."""
        if self._state_sync is not None:
            task = asyncio.ensure_future(self._save_state())
            task.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def _save_state(self) -> None:
        """Make the state durable now (shared with every change waiting meanwhile)."""
        if self._state_sync is None:
            return
        try:
            await self._state_sync.wait(self._state_sync.mark())
        except Exception as error:
            self._fail(f"its state could not be written: {error}")
            raise ChannelFailedError(self._failure) from error
        # Only now may the store drop what the commits released: a crash
        # before this point recovers the older commits, whose elements must
        # still be on disk.
        self._release_store()

    def _fail(self, reason: str) -> None:
        """Fence the channel: from now on every call gets ChannelFailedError."""
        if self._failure is None:
            logger.error("channel %d of %s failed: %s", self._channel, self._config.name, reason)
            self._failure = f"channel {self._channel} of topic {self._config.name!r}: {reason}"
        self._notify()

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
        """
        if self._seeded.is_set():
            return self.identity()
        self._epoch = max(old_epoch + 1, 2)
        kept = self._store is not None  # a store without state: its elements are back
        first = self._ring.head if kept else _fresh_start()
        if not kept:
            self._ring = SegmentRing(
                self._config.capacity, self._config.ttl, clock=_stamp_clock, first_sequence=first
            )
        for group, (lease, version, generation) in groups.items():
            self._group_marks[group] = (version, generation)
            if shared and group in shared:
                self._add_shared(shared[group], SharedCursor.starting_at(first))
                continue
            cursor = self._groups[group] = Cursor.starting_at(first)
            cursor.owner = lease
        for group, members in views.items():
            self._member_views[group] = dict(members)
        for reader_id, spec in readers.items():
            self._restore_reader(reader_id, spec)
        # Handles drop deliveries whose jump count is below one they saw: this
        # incarnation's counts start above the old one's.
        for cursor in [*self._groups.values(), *(r.cursor for r in self._readers.values())]:
            if cursor is not None:
                cursor.jumps = _fresh_start()
        self._loss_readers = set(self._readers)
        if kept:
            self._seeded.set()
            await self._save_state()
            return self.identity()
        self._loss = DataLossError(
            f"channel {self._channel} of {self._config.name!r} restarted without a store "
            f"(epoch {old_epoch} -> {self._epoch}): the elements it held are lost; "
            f"continuing at {first}",
            head_sequence=first,
            channel=self._channel,
            old_epoch=old_epoch,
            new_epoch=self._epoch,
        )
        self._seeded.set()
        logger.warning("%s", self._loss)
        return self.identity()

    def reader_specs(self) -> dict[str, ReaderSpec]:
        """Every open reader's spec (a restarted coordinator asks)."""
        return {reader_id: reader.spec for reader_id, reader in self._readers.items()}

    # -- life cycle ------------------------------------------------------------

    def attach(self, siblings: list[Any]) -> dict[str, Any]:
        """Learn every channel actor of the topic (index = channel); return who we are."""
        self._siblings = list(siblings)
        for channel, handle in enumerate(siblings):
            if channel == self._channel:
                self._links[channel] = ChannelLink(
                    channel, self._local_call, local=True, state=self.cursor_state
                )
            else:
                caller = _remote_caller(handle, self._sibling_calls)
                self._links[channel] = ChannelLink(channel, caller, local=False)
        return self.identity()

    def _ensure_siblings(self) -> None:
        """A restarted channel finds its siblings by name (``attach`` ran in an earlier
        incarnation)."""
        config = self._config
        if len(self._links) == config.channels:
            return
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
        if self._failure is not None:
            state = "failed"
        elif not self._seeded.is_set():
            state = "recovering"
        else:
            state = "serving"
        return {
            "channel": self._channel,
            "epoch": self._epoch,
            "node_id": context.get_node_id(),
            "pid": os.getpid(),
            "state": state,
            "durable": self._store is not None,
            "failure": self._failure,
            "damaged": self._damage.ranges,
        }

    @_guarded
    async def request(self, packed: bytes, payload: Payload | None = None) -> Any:
        """Serve a data-path call packed by :func:`pack_request` (append, receive,
        take, stop_take, settle_take, watch, give_back): one argument crosses Ray
        instead of six.
        An append's payload comes as its own argument (see ``pack_request``)."""
        method, args = unpack_request(packed)
        if payload is None:
            return await self._local_call(method, *args)
        return await self._local_call(method, *args, payload)

    async def _local_call(self, method: str, *args: Any) -> Any:
        return await getattr(self, method)(*args)

    def _notify(self) -> None:
        """Wake everything waiting on this channel's state (data, room, commits)."""
        self._wake_waiters()
        # Sessions hosted here hear of their home channel directly: no watcher
        # task between an append and a waiting receive.
        for session in self._sessions.values():
            session.poke(self._channel)

    def _wake_waiters(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_change(self, timeout: float) -> None:
        changed = self._changed
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout)

    # -- ring buffer -----------------------------------------------------------

    @_guarded
    def head_sequence(self) -> int:
        """Sequence of the oldest stored element."""
        return self._ring.head

    @_guarded
    def tail_sequence(self) -> int:
        """Sequence of the newest element (head - 1 when empty)."""
        return self._ring.tail

    @_guarded
    def size(self) -> int:
        """Elements stored now."""
        return self._ring.size

    @_guarded
    def capacity(self) -> int:
        """Most elements held at once."""
        return self._ring.capacity

    @_guarded
    def remaining_capacity(self) -> int:
        """``capacity - size``."""
        return self._ring.room()

    @_guarded
    def sizes(self) -> tuple[int, int, int]:
        """(head, tail, size) read together."""
        head = self._ring.head
        return head, self._ring.tail, self._ring.tail - head + 1

    @_guarded
    async def add_all(self, payload: Payload, overflow: str, timeout: float | None = None) -> int:
        """Append items; return the LAST sequence (the tail for an empty batch), or -1.

        ``"fail"`` refuses a batch that does not fit whole; ``"block"`` waits
        for room up to ``timeout`` seconds and then returns -1.
        """
        policy = Overflow.parse(overflow)
        payload = _check_payload(payload)
        if not len(payload):
            return self._ring.tail
        if policy is Overflow.BLOCK and len(payload) > self._ring.capacity:
            raise InvalidArgumentError(
                f"{len(payload)} items can never fit a capacity of {self._ring.capacity}"
            )
        ack, change = await self._append_batch(payload, policy, timeout, whole=True)
        await self._durable(change)
        if isinstance(ack.error, StoreError):
            raise ack.error
        return ack.first + ack.accepted - 1 if ack.accepted == len(payload) else -1

    @_guarded
    async def read_one(self, sequence: int) -> Run:
        """The element at ``sequence`` (a run of one); waits while ``sequence == tail + 1``.
        Below the ring's head it is read from the store, if it still has it.

        Raises:
            DataLossError: ``sequence``'s stored record is damaged (the error
                names the range and the sequence after it).
            StaleSequenceError: ``sequence`` is gone (below the head, not stored).
        """
        _check_sequence(sequence, "sequence")
        while True:
            tail = self._ring.tail
            if sequence > tail + 1:
                raise InvalidArgumentError(
                    f"sequence {sequence} is beyond the tail + 1 ({tail + 1})"
                )
            if sequence <= tail:
                return self._readable(self._read_log(sequence, 1))[0]
            await self._wait_change(_POLL_INTERVAL)

    @_guarded
    async def read_many(
        self, start: int, min_count: int, max_count: int, filter_bytes: bytes | None
    ) -> RawReadResult:
        """Hazelcast ``readManyAsync``: a ReadResultSet once it reaches the reader.

        Blocks until ``min_count`` matching items are read; ``read_count``
        counts every item read, matching or not.
        """
        _check_sequence(start, "start_sequence")
        _check_sequence(min_count, "min_count")
        _check_sequence(max_count, "max_count")
        if min_count > max_count:
            raise InvalidArgumentError(f"min_count {min_count} > max_count {max_count}")
        if max_count > MAX_READ_MANY:
            raise InvalidArgumentError(f"max_count {max_count} > {MAX_READ_MANY}")
        if max_count > self._ring.capacity:
            raise InvalidArgumentError(f"max_count {max_count} > capacity {self._ring.capacity}")
        if start > self._ring.tail + 1:
            raise InvalidArgumentError(
                f"start_sequence {start} is beyond the tail + 1 ({self._ring.tail + 1})"
            )
        predicate = cloudpickle.loads(filter_bytes) if filter_bytes else None
        chunks: list[Chunk] = []
        found = 0
        sequence = start
        while True:
            while sequence <= self._ring.tail and found < max_count:
                # Below the ring's head from the store (what it still keeps).
                runs = self._read_log(sequence, max_count - found)
                runs, lost = self._damage.split(runs)
                if lost is not None and not runs:
                    if sequence > start:  # what was read before the damage first
                        return RawReadResult(start, sequence - start, chunks)
                    raise self._damage.error(self._channel, self._epoch, lost)
                picked, sequence = _pick(runs, predicate, None, max_count - found)
                chunks.extend(picked)
                found += sum(len(chunk.payload) for chunk in picked)
            if found >= min_count:
                return RawReadResult(start, sequence - start, chunks)
            await self._wait_change(_POLL_INTERVAL)

    @_guarded
    def read_range(self, start: int, stop: int, max_count: int) -> tuple[Chunk, ...]:
        """Bulk read (``raytopic.data`` and ``raytopic.spark``): the elements from
        ``start`` up to ``stop`` (exclusive) or the tail, at most ``max_count``,
        as they are held (Arrow rows stay Arrow). Never waits; an empty tuple
        when ``start`` is past the tail. Below the ring's head it reads the store.

        Raises:
            StaleSequenceError: ``start`` is gone (below the head and not stored).
        """
        _check_sequence(start, "start")
        _check_sequence(stop, "stop")
        _check_sequence(max_count, "max_count")
        end = min(stop, self._ring.tail + 1, start + max_count)
        runs: list[Run] = []
        sequence = start
        while sequence < end:
            more, lost = self._damage.split(self._read_log(sequence, end - sequence))
            runs.extend(more)
            if lost is not None:
                if not runs:
                    raise self._damage.error(self._channel, self._epoch, lost)
                break  # the next read starts at the damage, and is told of it
            if not more:
                break
            sequence = more[-1].last + 1
        return tuple(Chunk(run.first, run.stamp, run.payload) for run in runs)

    def _read_log(self, start: int, max_count: int) -> list[Run]:
        """Up to ``max_count`` elements from ``start`` (``start <= tail``): from the
        store below the ring's head (up to the head), else from the ring. A damaged
        range comes as a run of DamagedElements (see ``_readable``).

        Raises:
            StaleSequenceError: ``start`` is below the head and not in the store.
        """
        head = self._ring.head
        if start < head:
            return self._stored_runs(start, min(max_count, head - start))
        return self._ring.read(start, max_count)

    def _readable(self, runs: list[Run]) -> list[Run]:
        """The runs before any damaged range; a read that starts at one raises.

        Raises:
            DataLossError: the first run is damaged (names the whole range).
        """
        runs, lost = self._damage.split(runs)
        if lost is not None and not runs:
            raise self._damage.error(self._channel, self._epoch, lost)
        return runs

    def _stored_runs(self, start: int, max_count: int) -> list[Run]:
        """Up to ``max_count`` elements from ``start`` (below the ring's head) as the
        store keeps them (DESIGN 5.2: a read below the head falls back to the store);
        a damaged range as a run of DamagedElements.

        Raises:
            StaleSequenceError: the store does not have ``start`` (no store, or
                past its retention).
        """
        runs: list[Run] = []
        sequence = start
        taken = 0
        if self._store is not None:
            for batch in self._store.load_batches(start):
                if taken >= max_count:
                    break
                if batch.first > sequence:  # a gap: a damaged record, or the end
                    lost = self._damage.at(sequence)
                    if lost is None:
                        break
                    count = min(lost[1] + 1, batch.first, sequence + max_count - taken) - sequence
                    runs.append(Run(sequence, batch.stamp, DamagedElements(count)))
                    taken += count
                    sequence += count
                    if sequence < batch.first or taken >= max_count:
                        break
                offset = sequence - batch.first
                stop = min(len(batch.payload), offset + max_count - taken)
                runs.append(Run(sequence, batch.stamp, batch.payload.slice(offset, stop)))
                taken += stop - offset
                sequence = batch.first + stop
        if not runs:
            head = self._ring.head
            raise StaleSequenceError(
                f"sequence {start} is below the head {head} and not in the store",
                head_sequence=head,
            )
        return runs

    @_guarded
    def first_after(self, stamp: float) -> int:
        """Sequence of the first element stamped strictly after ``stamp`` (tail + 1 if none)."""
        return self._ring.first_after(stamp)

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
        """
        arrived = time.perf_counter()
        payload = _check_payload(payload)
        track = self._publishers.get(publisher_id)
        if track is not None and batch <= track.last_batch:
            ack = track.acks.get(batch)
            if ack is None and track.last_batch - batch < ACKS_KEPT:
                # Recent, yet no record of it: it appended nothing (refused whole
                # before the channel restarted).
                ack = AppendAck(-1, 0, 0.0)
            if ack is not None:  # a retry (a lost reply, or a restart in between)
                if ack.accepted < len(payload) and ack.error is None:
                    # Recovered from the store, which keeps what was appended,
                    # not why the rest was not (the channel restarted meanwhile).
                    ack = dataclasses.replace(
                        ack,
                        error=TopicFullError(
                            f"channel {self._channel}: {len(payload) - ack.accepted} of "
                            f"{len(payload)} values not appended (it restarted meanwhile)"
                        ),
                    )
                return self._ack_reply(ack, statuses)
            raise InvalidArgumentError(f"batch {batch} of publisher {publisher_id} is stale")
        try:
            async with self._publish_turns.turn(publisher_id, batch):
                ack, change = await self._append_batch(
                    payload,
                    Overflow.parse(overflow),
                    timeout,
                    whole=statuses,
                    publisher_id=publisher_id,
                    batch=batch,
                )
        except DuplicateTurnError as error:
            raise InvalidArgumentError(str(error)) from None
        # Outside the turn: the publisher's next batch is written meanwhile, and
        # one fdatasync covers both.
        await self._durable(change)
        self._metrics.appended(time.perf_counter() - arrived)
        self._ensure_metrics_task()
        track = self._publishers.setdefault(publisher_id, PublisherTrack())
        track.remember(batch, ack)
        if (
            len(self._publishers) > _PUBLISHERS_KEPT
            and track.seen - self._publishers_swept > _PUBLISHER_SWEEP_S
        ):
            self._forget_idle_publishers(track.seen)
        return self._ack_reply(ack, statuses)

    async def append_once(
        self, writer_id: str, version: int, overflow: str, timeout: float | None, payload: Payload
    ) -> AppendAck:
        """Append a writer's ``version`` unless this channel has it already (exactly
        once: Spark's streaming sink appends micro-batch ``version`` of query
        ``writer_id`` here, and again when Spark re-runs the batch).

        Versions only grow, with gaps (a batch with no rows for this channel
        skips it); one at or below the last one appended here appends
        nothing and is answered with an empty ack (what THIS call appended).
        The (writer, version) pair is in the store record with the rows, so
        this holds across a restart with a store. Writers whose id starts
        with ``once:`` are never forgotten for idleness.
        """
        track = self._publishers.get(writer_id)
        if track is not None and version <= track.last_batch:
            return AppendAck(-1, 0, 0.0)
        self._publish_turns.resume(writer_id, version)  # no wait for the versions skipped
        return await self.append(writer_id, version, overflow, timeout, False, payload)

    def _forget_idle_publishers(self, now: float) -> None:
        """Drop the tracks and turns of publishers idle for long (each pickled
        Publisher is a new publisher; a long-gone one needs no ordering or retry
        record)."""
        self._publishers_swept = now
        idle = [
            pid
            for pid, t in self._publishers.items()
            if now - t.seen > _PUBLISHER_IDLE_S and not pid.startswith(ONCE_WRITER_PREFIX)
        ]
        for publisher_id in idle:
            if self._publish_turns.forget(publisher_id):
                del self._publishers[publisher_id]

    def _ack_reply(self, ack: AppendAck, statuses: bool) -> AppendAck | StatusBatch:
        if statuses:
            if ack.error is not None:
                # Raised here, not in the caller's deserialization, so the
                # ObjectRef fails with the typed error itself.
                raise ack.error
            return StatusBatch(self._config.topic_id, self._channel, ack)
        return ack

    async def _append_batch(
        self,
        payload: Payload,
        policy: Overflow,
        timeout: float | None,
        *,
        whole: bool,
        publisher_id: str = "",
        batch: int = -1,
    ) -> tuple[AppendAck, int | None]:
        """The one place where elements enter the channel (publishes, ring buffer adds,
        Arrow batches): room, then the store write (or the ring). Returns the ack
        and the change to make durable (:meth:`_durable`) before answering."""
        ring = self._ring
        count = len(payload)
        if not count:
            return AppendAck(ring.tail, 0, ring.stamp_of_last_append()), None
        if policy is Overflow.OVERWRITE:
            try:
                first, stamp, change = self._put(payload, True, publisher_id, batch)
            except StoreError as error:
                return AppendAck(-1, 0, 0.0, error), None
            return AppendAck(first, count, stamp), change
        # "fail" takes what fits now, or with ``whole`` (a publish_batch, whose
        # caller sees one error for all its values) nothing unless all fit.
        # "block" waits until the whole batch fits (so its positions are
        # contiguous and share one stamp); only a batch larger than the
        # capacity goes in several pieces.
        deadline = None if timeout is None else time.monotonic() + timeout
        runs: list[tuple[int, int, float]] = []
        accepted = 0
        error: TopicError | None = None
        if policy is Overflow.FAIL and whole and self._room() < count:
            refused = TopicFullError(
                f"channel {self._channel} has room for {self._room()} of "
                f"{count} values: none of them appended"
            )
            return AppendAck(-1, 0, 0.0, refused), None
        change = None
        while accepted < count:
            wanted = min(count - accepted, ring.capacity)
            if (
                policy is Overflow.BLOCK
                and self._room() < wanted
                and not await self._wait_room(wanted, _left(deadline))
            ):
                break
            size = max(0, min(wanted, self._room()))
            if not size:
                break
            piece = payload.slice(accepted, accepted + size)
            try:
                first, stamp, change = self._put(piece, False, publisher_id, batch)
            except StoreError as refused:
                error = refused
                break
            runs.append((first, size, stamp))
            accepted += size
            if policy is Overflow.FAIL:
                break
        if accepted < count and error is None:
            error = TopicFullError(
                f"channel {self._channel} is full ({ring.capacity} elements): "
                f"{count - accepted} of {count} values not appended"
            )
        if not runs:
            return AppendAck(-1, 0, 0.0, error), None
        first, _, stamp = runs[0]
        pieces = tuple(runs) if len(runs) > 1 else ()
        return AppendAck(first, accepted, stamp, error, pieces), change

    def _room(self) -> int:
        """Elements that fit now, counting appends still waiting for their sync."""
        return self._ring.room() - self._pending_count

    def _put(
        self, payload: Payload, overwrite: bool, publisher_id: str, batch: int
    ) -> tuple[int, float, int | None]:
        """Append ``payload`` (room already checked): into the ring, or with a store
        into the store, pending until :meth:`_durable` of the change returned.
        Returns (first, stamp, change: None without a store).

        Raises:
            StoreError: the store refused it; nothing was appended anywhere.
        """
        ring = self._ring
        store = self._store
        if store is None:
            first = ring.append(payload, overwrite=overwrite)
            self._metrics.published(len(payload), payload.nbytes)
            self._appended()
            return first, ring.stamp_of_last_append(), None
        first = ring.tail + 1 + self._pending_count
        stamp = self._pending_stamp = max(ring.next_stamp(), self._pending_stamp)
        record = StoredBatch(first, stamp, payload, self._epoch, publisher_id, batch)
        try:
            store.store_batch(record)
        except Exception as error:
            logger.warning("channel %d: store refused an append: %s", self._channel, error)
            if isinstance(error, StoreError):
                raise
            raise StoreError(f"the store refused the append: {error}") from error
        log_sync = self._log_sync
        assert log_sync is not None
        change = log_sync.mark()
        self._pending.append(_Pending(payload, stamp, change))
        self._pending_count += len(payload)
        if self._config.sync != "always":
            self._publish_synced(change)
            self._ensure_sync_task()
        return first, stamp, change

    async def _durable(self, change: int | None) -> None:
        """Wait until the appends up to ``change`` are as durable as ``sync`` asks
        (with "always": an fdatasync covers them); readers see them from then on.

        Raises:
            ChannelFailedError: the sync failed; the channel is fenced.
        """
        log_sync = self._log_sync
        if change is None or log_sync is None or self._config.sync != "always":
            return
        try:
            await log_sync.wait(change)
        except Exception as error:
            self._fail(
                f"fdatasync failed: {error}; appends since the last sync are not acknowledged"
            )
            raise ChannelFailedError(self._failure) from error
        self._publish_synced(log_sync.covered)

    def _publish_synced(self, covered: int) -> None:
        """Let readers see the pending appends a sync covered, in sequence order."""
        pending = self._pending
        head = self._ring.head
        appended = False
        while pending and pending[0].change <= covered:
            entry = pending.popleft()
            self._pending_count -= len(entry.payload)
            # Room was reserved when it was stored; it is durable: it must show.
            self._ring.append(entry.payload, overwrite=True, stamp=entry.stamp)
            self._metrics.published(len(entry.payload), entry.payload.nbytes)
            appended = True
        if appended:
            if self._ring.head != head:  # "overwrite" dropped the oldest
                self._release_store()
            self._appended()

    def _ensure_metrics_task(self) -> None:
        """Start the metrics reports (once; after a publish, when there is
        something to measure). They end with the actor."""
        if self._metrics_task is None or self._metrics_task.done():
            self._metrics_task = asyncio.ensure_future(self._report_metrics())

    async def _report_metrics(self) -> None:
        """Background: hand Ray the counts, and each group's lag and depth here,
        every few seconds."""
        while True:
            tail = self._ring.tail
            self._metrics.report(
                [
                    *(
                        (group, max(0, tail - cursor.committed), max(0, tail - cursor.next + 1))
                        for group, cursor in self._groups.items()
                    ),
                    *(
                        (group, max(0, tail - cursor.floor), cursor.depth(tail))
                        for group, cursor in self._shared.items()
                    ),
                ]
            )
            await asyncio.sleep(METRICS_REFRESH_INTERVAL)

    def _ensure_sync_task(self) -> None:
        """With ``sync`` a number of seconds: start the background sync (once)."""
        interval = self._config.sync
        if isinstance(interval, float) and (self._sync_task is None or self._sync_task.done()):
            self._sync_task = asyncio.ensure_future(self._sync_periodically(interval))

    async def _sync_periodically(self, interval: float) -> None:
        """Background (``sync`` in seconds): sync the log every ``interval``."""
        log_sync = self._log_sync
        assert log_sync is not None
        while self._failure is None:
            await asyncio.sleep(interval)
            try:
                await log_sync.wait()
            except Exception as error:
                self._fail(f"background fdatasync failed: {error}")

    async def _wait_room(self, count: int, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._room() < count:
            left = _left(deadline)
            if left is not None and left <= 0:
                return False
            await self._wait_change(_POLL_INTERVAL if left is None else min(left, _POLL_INTERVAL))
        return True

    def _appended(self) -> None:
        self._notify()

    # -- readers ----------------------------------------------------------------

    @_guarded
    async def open_reader(self, reader_id: str, spec: ReaderSpec) -> CursorState:
        """Register a subscriber on this channel (its cursor, if anonymous)."""
        known = reader_id in self._readers
        state = self._open_reader(reader_id, spec)
        if not known:
            await self._save_state()
        return state

    def _open_reader(self, reader_id: str, spec: ReaderSpec) -> CursorState:
        reader = self._readers.get(reader_id)
        if reader is None:
            cursor = None
            if spec.group is None:
                start = self._ring.tail + 1 if spec.start_latest else self._ring.head
                cursor = Cursor.starting_at(start)
            elif spec.group not in self._groups and spec.group not in self._shared:
                raise GroupNotFoundError(f"group {spec.group!r} does not exist")
            reader = _Reader(
                reader_id,
                spec,
                cursor,
                cloudpickle.loads(spec.filter) if spec.filter else None,
                cloudpickle.loads(spec.converter) if spec.converter else None,
                cloudpickle.loads(spec.resequence) if spec.resequence else None,
            )
            self._readers[reader_id] = reader
        if reader.spec.group in self._shared:
            return self._shared_state(reader, None, check=False)
        return self._state(self._cursor_of(reader, None, check=False))

    @_guarded
    async def close_reader(self, reader_id: str) -> None:
        """Forget a subscriber; its session here (if any) ends."""
        if self._close_reader(reader_id):
            await self._save_state()

    def _close_reader(self, reader_id: str) -> bool:
        reader = self._readers.pop(reader_id, None)
        if reader is not None and reader.spec.group is not None:
            self._member_views.get(reader.spec.group, {}).pop(reader_id, None)
            if reader.spec.group in self._shared:
                self._release_member(reader.spec.group, reader_id, "its member closed")
                self._departed.get(reader.spec.group, set()).discard(reader_id)
        session = self._sessions.pop(reader_id, None)
        if session is not None:
            session.close()
        self._notify()
        return reader is not None

    def _reader(self, reader_id: str) -> _Reader:
        reader = self._readers.get(reader_id)
        if reader is None:
            raise SubscriberClosedError(f"subscriber {reader_id} is closed")
        return reader

    def _cursor_of(self, reader: _Reader, fence: Any, *, check: bool = True) -> Cursor:
        if reader.cursor is not None:
            return reader.cursor
        group = reader.spec.group
        cursor = self._groups.get(group)  # type: ignore[arg-type]
        if cursor is None:
            raise NotOwnerError(f"group {group!r} no longer exists")
        if check and (cursor.owner is None or cursor.owner != fence):
            raise NotOwnerError(
                f"channel {self._channel} of group {group!r} is not owned by {fence}"
            )
        return cursor

    def _state(self, cursor: Cursor) -> CursorState:
        return CursorState(
            cursor.next,
            cursor.committed,
            self._ring.tail,
            cursor.jumps,
            cursor.has_commit,
            cursor.unacked,
        )

    async def take(
        self,
        reader_id: str,
        fence: Any,
        max_count: int,
        wait: float = 0.0,
        token: str | None = None,
    ) -> Delivery:
        """Deliver up to ``max_count`` elements from the reader's cursor.

        With ``wait``, a *fetch*: first wait up to ``wait`` seconds for an element
        to read, then take it; stopped (``stop_take(token)``, or a direct take
        of the same reader here) it takes nothing. What a fetch takes stays
        *lent* until its session settles it (``settle_take``): meanwhile the
        reader's cursor serves no other take, so a give-back finds it where the
        fetch left it and the reader's order per channel holds across sessions.

        A shared group's member takes what its group's cursor hands it
        (:meth:`_take_shared`).
        """
        shared_reader = self._readers.get(reader_id)
        if shared_reader is not None and shared_reader.spec.group in self._shared:
            return await self._take_shared(shared_reader, fence, max_count, wait, token)
        if wait > 0:
            if not await self._wait_for_data(reader_id, fence, wait, token):
                max_count = 0
        else:
            self._stop_fetches_of(reader_id)
        if max_count > 0:
            reader, cursor = await self._unlent(reader_id, fence, token)
        else:  # a stopped fetch takes nothing: it need not wait for another's
            reader = self._reader(reader_id)
            cursor = self._cursor_of(reader, fence)
        ring = self._ring
        head = ring.head
        if self._loss is not None and reader_id in self._loss_readers:
            self._loss_readers.discard(reader_id)  # told once
            cursor.skip_to_head(head)
            raise self._loss
        if cursor.next < head and not self._readable_below_head(cursor.next):
            self._skip_lost(cursor, head)
        if max_count <= 0 or cursor.next > ring.tail:
            chunks, next_sequence = [], cursor.next
        elif reader.filter is None and reader.converter is None:
            runs = self._deliverable(cursor, self._read_log(cursor.next, max_count))
            chunks = [Chunk(run.first, run.stamp, run.payload) for run in runs]
            next_sequence = runs[-1].last + 1 if runs else cursor.next
        else:
            # Read a bounded slice: a filter that matches nothing must not hold
            # the actor for the whole buffer.
            runs = self._deliverable(cursor, self._read_log(cursor.next, max(max_count, 1000)))
            chunks, next_sequence = _pick(runs, reader.filter, reader.converter, max_count)
            next_sequence = max(next_sequence, cursor.next)
        last_delivered = _last_sequence(chunks) if chunks else cursor.next - 1
        if chunks:
            self._metrics.delivered(
                sum(len(chunk.payload) for chunk in chunks),
                sum(chunk.payload.nbytes for chunk in chunks),
                time.time() - chunks[0].stamp,
            )
            cursor.delivered(last_delivered, next_sequence)
            if token is not None:
                cursor.lent = Lent(token, chunks[0].first, next_sequence)
        else:
            cursor.next = next_sequence
        # A filter's misses after the last match are read, not delivered.
        cursor.passed_over(last_delivered + 1, next_sequence - 1)
        config = self._config
        origin = _Origin(
            config.topic_id, config.name, config.namespace, reader_id, fence, cursor.jumps
        )
        return Delivery.pack(
            self._channel,
            chunks,
            cursor.jumps,
            cursor.next,
            ring.tail,
            cursor.committed,
            origin,
            cursor.unacked,
        )

    def _readable_below_head(self, sequence: int) -> bool:
        """Whether a reader behind the ring's head reads ``sequence`` from the store.

        Only within what the topic keeps: the capacity, or ``store_retention``.
        An element the ring dropped by "overwrite" or TTL is gone for readers
        (StaleSequenceError, DESIGN 5.6), as without a store. A damaged record
        counts as kept: the read reports it (see ``_deliverable``).
        """
        store = self._store
        config = self._config
        kept = (
            sequence > self._ring.tail - config.capacity
            or config.retention_seconds is not None
            or config.retention_bytes is not None
        )
        return (
            kept
            and store is not None
            and self._store_first() <= sequence <= store.largest_sequence()
        )

    def _deliverable(self, cursor: Cursor, runs: list[Run]) -> list[Run]:
        """What a cursor's take may deliver of ``runs``: those before a damaged range.
        A take that starts at one moves the cursor past it and raises.

        Raises:
            DataLossError: the cursor reached a damaged range (named in the error).
        """
        runs, lost = self._damage.split(runs)
        if lost is not None and not runs:
            cursor.pass_lost(*lost)
            raise self._damage.error(self._channel, self._epoch, lost)
        return runs

    def _skip_lost(self, cursor: Cursor, head: int) -> None:
        """The cursor's next elements are gone (overwritten, expired, or past the
        store's retention): move it to the next one there is and say so once."""
        resume = head
        if self._store is not None and cursor.next < self._store_first():
            resume = min(head, self._store_first())
        skipped = cursor.skip_to_head(resume)
        raise StaleSequenceError(
            f"channel {self._channel}: {skipped} elements were removed before they "
            f"were received; continuing from {resume}",
            head_sequence=resume,
            skipped=skipped,
        )

    async def _wait_for_data(
        self, reader_id: str, fence: Any, wait: float, token: str | None
    ) -> bool:
        """Wait (a fetch) until the reader has an element to read here: True, or
        False when stopped (nothing is to be taken) or after ``wait`` seconds."""
        deadline = time.monotonic() + wait
        fetching = self._fetching.setdefault(reader_id, set())
        fetching.add(token)  # type: ignore[arg-type]
        try:
            while token not in self._stopped_takes:
                if self._has_data(self._reader(reader_id), fence):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                await self._wait_change(min(left, _POLL_INTERVAL) if self._config.ttl else left)
            return False
        finally:
            self._stopped_takes.pop(token, None)  # type: ignore[arg-type]
            fetching.discard(token)  # type: ignore[arg-type]
            if not fetching:
                self._fetching.pop(reader_id, None)

    def _has_data(self, reader: _Reader, fence: Any) -> bool:
        """Whether the reader has an element to read here now."""
        if reader.spec.group in self._shared:
            return self._shared_state(reader, fence).available
        cursor = self._cursor_of(reader, fence)
        return cursor.next <= self._ring.tail or cursor.next < self._ring.head

    async def _unlent(
        self, reader_id: str, fence: Any, token: str | None
    ) -> tuple[_Reader, Cursor]:
        """The reader and its cursor, once no other fetch's take on it is unsettled."""
        deadline = time.monotonic() + _LENT_TIMEOUT
        while True:
            reader = self._reader(reader_id)
            cursor = self._cursor_of(reader, fence)
            lent = cursor.lent
            if lent is None or lent.token == token:
                return reader, cursor
            left = deadline - time.monotonic()
            if left <= 0:
                logger.warning(
                    "channel %d: fetch %s never settled; reading again", self._channel, lent.token
                )
                cursor.settle_lent(lent.token, lent.first)
                continue
            await self._wait_change(left)

    def _stop_fetches_of(self, reader_id: str) -> None:
        """A direct take of a reader goes first: its fetches waiting here take nothing."""
        tokens = self._fetching.get(reader_id)
        if tokens:
            for token in tokens:
                self._remember_stop(token)
            self._wake_waiters()

    async def stop_take(self, token: str) -> None:
        """End the wait of fetch ``token``: it takes nothing (it may not have arrived
        yet: remember it)."""
        self._remember_stop(token)
        self._wake_waiters()

    def _remember_stop(self, token: str) -> None:
        self._stopped_takes[token] = None
        while len(self._stopped_takes) > _STOPPED_TAKES_KEPT:
            del self._stopped_takes[next(iter(self._stopped_takes))]

    async def settle_take(
        self, reader_id: str, fence: Any, token: str, give_back_from: int | None
    ) -> bool:
        """A fetch's session used what the fetch took, up to ``give_back_from``
        (None: all); the rest is read again. False if a seek, reset or new owner
        voided it meanwhile."""
        reader = self._readers.get(reader_id)
        if reader is not None and reader.spec.group in self._shared:
            # The session has them: they are its member's (a fetch's rest, given
            # back, is delivered again without counting).
            loan = self._shared_loans.pop(token, None)
            if loan is not None and give_back_from is not None:
                group, member, entries = loan
                for sequence, count in entries:
                    if sequence >= give_back_from and group in self._shared:
                        self._shared[group].give_back(sequence, member, count)
                self._notify()
            return True
        cursor = self._owned_cursor(reader_id, fence)
        if cursor is None:
            return False
        settled = cursor.settle_lent(token, give_back_from)
        if settled:
            self._notify()
        return settled

    @_guarded
    def host_restarted(self, host: int) -> int:
        """Channel ``host`` restarted: the receive sessions it hosted are gone, so
        what they took here and never settled is read again now (instead of
        after ``_LENT_TIMEOUT``). Returns how many loans were taken back."""
        prefix = f"{host}:"
        cursors = [*self._groups.values(), *(r.cursor for r in self._readers.values())]
        taken_back = 0
        for cursor in cursors:
            lent = None if cursor is None else cursor.lent
            if lent is not None and lent.token.startswith(prefix):
                cursor.settle_lent(lent.token, lent.first)  # type: ignore[union-attr]
                taken_back += 1
        for token in [t for t in self._shared_loans if t.startswith(prefix)]:
            group, member, entries = self._shared_loans.pop(token)
            if group in self._shared:
                for sequence, count in entries:
                    self._shared[group].give_back(sequence, member, count)
            taken_back += 1
        if taken_back:
            logger.info(
                "channel %d: %d loans of restarted %d back", self._channel, taken_back, host
            )
            self._notify()
        return taken_back

    def _owned_cursor(self, reader_id: str, fence: Any) -> Cursor | None:
        """The reader's cursor if the reader is open and ``fence`` owns it, else None."""
        reader = self._readers.get(reader_id)
        if reader is None:
            return None
        try:
            return self._cursor_of(reader, fence)
        except NotOwnerError:
            return None

    async def give_back(
        self,
        reader_id: str,
        fence: Any,
        first: int,
        expected_next: int,
        jumps: int,
        entries: tuple[tuple[int, int], ...] = (),
    ) -> bool:
        """Undo a take nobody saw: move the cursor back to ``first`` if it still stands
        where that take left it, with the same jump count (no seek or reset since).
        A shared group's member gives back the ``entries`` (sequence, delivery
        count) it was handed."""
        reader = self._readers.get(reader_id)
        if reader is not None and reader.spec.group in self._shared:
            cursor_shared = self._shared[reader.spec.group]
            given = [cursor_shared.give_back(s, reader_id, n) for s, n in entries]
            if any(given):
                self._notify()
            return all(given)
        cursor = self._owned_cursor(reader_id, fence)
        if cursor is None or cursor.next != expected_next or cursor.jumps != jumps:
            return False
        cursor.rewind(max(first, self._ring.head))
        self._notify()
        return True

    async def watch(
        self, reader_id: str, fence: Any, known: CursorState | None, timeout: float
    ) -> CursorState:
        """The reader's cursor state once it differs from ``known`` (or after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            reader = self._reader(reader_id)
            shared = reader.spec.group in self._shared
            if shared:
                state = self._shared_state(reader, fence)
            else:
                state = self._state(self._cursor_of(reader, fence))
            left = deadline - time.monotonic()
            if state != known or left <= 0:
                return state
            # A shared group's nack delays end with the clock, as TTLs do.
            polled = self._config.ttl or shared
            await self._wait_change(min(left, _POLL_INTERVAL) if polled else left)

    @_guarded
    def cursor_state(self, reader_id: str, fence: Any = None) -> CursorState:
        """The reader's cursor (for heads, tails, remaining messages, last commits).

        A cursor left below the head (its next elements were overwritten or
        expired) reports the head as its next: that is what it reads next, and
        what was removed is not "remaining".
        """
        reader = self._reader(reader_id)
        if reader.spec.group in self._shared:
            return self._shared_state(reader, fence, check=fence is not None)
        state = self._state(self._cursor_of(reader, fence, check=fence is not None))
        head = self._ring.head
        if state.next < head:
            state = dataclasses.replace(state, next=head)
        return state

    @_guarded
    async def commit(self, reader_id: str, sequence: int, fence: Any) -> CommitResult:
        """Commit ``sequence`` (and every earlier one) for the reader or its group.

        With a store, answered once the commit is on disk."""
        position = Position(self._config.topic_id, self._channel, sequence)
        self._refuse_shared(reader_id, "commit")
        cursor = self._owned_cursor(reader_id, fence)
        if cursor is None:
            return CommitResult(self._channel, position, CommitStatus.NOT_OWNER)
        status = cursor.commit(sequence, self._ring.tail)
        if status is CommitStatus.COMMITTED:
            self._metrics.committed()
            self._commits_moved()
            await self._save_state()
        return CommitResult(self._channel, position, status)

    @_guarded
    async def seek(
        self, reader_id: str, fence: Any, target: int | float, by_time: bool, commit: bool
    ) -> tuple[int, int]:
        """Move the reader's cursor; return (position set, new jump count).

        ``target`` is a sequence ("next is the first after it") or, with
        ``by_time``, a time stamp ("next is the first published after it").
        """
        self._refuse_shared(reader_id, "seek")
        reader = self._reader(reader_id)
        cursor = self._cursor_of(reader, fence)
        ring = self._ring
        position = ring.first_after(target) - 1 if by_time else int(target)
        position = cursor.seek(position, ring.head, ring.tail, commit=commit)
        self._commits_moved()
        await self._save_state()
        return position, cursor.jumps

    def _commits_moved(self) -> None:
        self._evict_committed()
        self._notify()

    def _evict_committed(self) -> None:
        """With ``retain=False``: drop what every group committed."""
        if not self._config.retain and (self._groups or self._shared):
            lowest = min(
                [cursor.committed for cursor in self._groups.values()]
                + [cursor.floor for cursor in self._shared.values()]
            )
            if self._ring.evict_to(lowest + 1):
                logger.debug("channel %d released up to %d", self._channel, lowest)

    def _release_store(self) -> None:
        """The ring released elements: the store may drop what its retention allows."""
        if self._store is not None:
            try:
                self._store.truncate(self._ring.head)
            except Exception as error:  # keeping too much is no loss: log it
                logger.warning("channel %d: store truncation failed: %s", self._channel, error)

    # -- groups (called by the coordinator) ---------------------------------------

    @_guarded
    async def ensure_group(
        self, group: str, start_latest: bool, shared: SharedGroup | None = None
    ) -> CursorState:
        """Create the group's cursor here if it does not exist yet (``shared``: a
        shared group's, with its definition)."""
        if shared is not None or group in self._shared:
            if group in self._groups or shared is None:
                raise GroupModeError(f"group {group!r} exists in the other mode")
            if group not in self._shared:
                start = self._ring.tail + 1 if start_latest else self._ring.head
                self._add_shared(shared, SharedCursor.starting_at(start))
                await self._save_state()
            cursor_shared = self._shared[group]
            return CursorState(cursor_shared.next, cursor_shared.floor, self._ring.tail, 0)
        cursor = self._groups.get(group)
        if cursor is None:
            start = self._ring.tail + 1 if start_latest else self._ring.head
            cursor = self._groups[group] = Cursor.starting_at(start)
            await self._save_state()
        return self._state(cursor)

    @_guarded
    async def destroy_group(self, group: str) -> None:
        """Forget a group: its positions and the retention it held."""
        self._groups.pop(group, None)
        self._shared.pop(group, None)
        self._shared_specs.pop(group, None)
        self._shared_filters.pop(group, None)
        self._departed.pop(group, None)
        self._member_views.pop(group, None)
        self._group_marks.pop(group, None)
        for reader_id, reader in list(self._readers.items()):
            if reader.spec.group == group:
                self._close_reader(reader_id)
        self._commits_moved()
        await self._save_state()

    @_guarded
    async def grant(self, group: str, lease: Lease | None) -> None:
        """Give the group's channel to a member (None: to nobody); it resumes after the commit."""
        cursor = self._groups.get(group)
        if cursor is None:
            raise GroupNotFoundError(f"group {group!r} does not exist")
        if cursor.owner != lease:
            cursor.grant(lease)
            self._notify()
            await self._save_state()

    @_guarded
    async def reset_group(
        self, group: str, target: int | float | str
    ) -> tuple[int, dict[str, Any]]:
        """Move the group's read and commit positions; return (position, previous state).

        ``target``: a sequence, a time stamp (float), ``"earliest"`` or ``"latest"``.
        A shared group starts over after the position: everything after it is
        to deliver, what its members hold can no longer be acknowledged.
        """
        ring = self._ring
        shared = self._shared.get(group)
        if shared is not None:
            saved = {"shared": shared.to_state()}
            position = clamp(self._reset_target(target), ring.head, ring.tail)
            self._shared[group] = SharedCursor.starting_at(position + 1)
            self._commits_moved()
            await self._save_state()
            return position, saved
        cursor = self._groups.get(group)
        if cursor is None:
            raise GroupNotFoundError(f"group {group!r} does not exist")
        previous = {
            "next": cursor.next,
            "committed": cursor.committed,
            "has_commit": cursor.has_commit,
            "reset_floor": cursor.reset_floor,
            "delivered_high": cursor.delivered_high,
            "unread": list(cursor.unread),
        }
        position = cursor.reset(self._reset_target(target), ring.head, ring.tail)
        self._commits_moved()
        await self._save_state()
        return position, previous

    def _reset_target(self, target: int | float | str) -> int:
        """The sequence a reset target names ("next is the one after it")."""
        ring = self._ring
        if target == "earliest":
            return ring.head - 1
        if target == "latest":
            return ring.tail
        if isinstance(target, float):
            return ring.first_after(target) - 1
        return int(target)

    @_guarded
    async def restore_group(self, group: str, previous: dict[str, Any]) -> None:
        """Undo a reset (a reset of several channels is all or nothing)."""
        if group in self._shared and "shared" in previous:
            self._shared[group] = SharedCursor.from_state(previous["shared"])
            self._notify()
            await self._save_state()
            return
        cursor = self._groups.get(group)
        if cursor is None:
            return
        for name, value in previous.items():
            setattr(cursor, name, value)
        cursor.jumps += 1
        self._notify()
        await self._save_state()

    def group_cursors(self) -> dict[str, dict[str, Any]]:
        """Every group's cursor here, for ``describe`` (and a restarted coordinator)."""
        cursors: dict[str, dict[str, Any]] = {
            group: {
                "next": cursor.next,
                "committed": cursor.committed,
                "has_commit": cursor.has_commit,
                "unacked": cursor.unacked,
                "owner": cursor.owner,
                "jumps": cursor.jumps,
            }
            for group, cursor in self._groups.items()
        }
        tail = self._ring.tail
        for group, shared in self._shared.items():
            cursors[group] = {
                "mode": "shared",
                "spec": self._shared_specs[group],
                "next": shared.next,
                "committed": shared.floor,
                "has_commit": False,
                "depth": shared.depth(tail),
                "unacked": shared.unacked,
                "holdings": shared.holdings(),
                "redelivered": shared.redelivered,
                "dead_lettered": shared.dead_lettered,
                "owner": None,
                "jumps": 0,
            }
        return cursors

    def describe(self) -> dict[str, Any]:
        """Channel figures and group cursors in one call (a failed channel answers
        too: its state says so)."""
        head, tail = self._ring.head, self._ring.tail
        size = tail - head + 1
        return {
            **self.identity(),
            "head": head,
            "tail": tail,
            "size": size,
            "capacity": self._ring.capacity,
            "groups": self.group_cursors(),
        }

    # -- shared groups (per-element acknowledgement) --------------------------------

    def _add_shared(self, spec: SharedGroup, cursor: SharedCursor) -> None:
        """Keep a shared group here (created, recovered or seeded) and start tending it."""
        self._shared[spec.name] = cursor
        self._shared_specs[spec.name] = spec
        self._shared_filters[spec.name] = spec.load_filter()
        with contextlib.suppress(RuntimeError):  # in __init__ no loop runs yet: later
            asyncio.get_running_loop()
            self._ensure_shared_task()

    def _refuse_shared(self, reader_id: str, what: str) -> None:
        reader = self._readers.get(reader_id)
        if reader is not None and reader.spec.group in self._shared:
            raise GroupModeError(
                f"group {reader.spec.group!r} is shared: its members acknowledge elements "
                f"one by one (ack, nack) and cannot {what}"
            )

    def _check_member(self, group: str, member: str, fence: Any) -> None:
        """``fence`` must be the member's lease for this channel, and the member must
        not have been told gone (it rejoins first)."""
        if member in self._departed.get(group, ()) or fence is None:
            raise NotOwnerError(f"{member} is not a member of shared group {group!r}")
        known = self._member_views.get(group, {}).get(member)
        if known is not None and known[1].get(self._channel) != fence:
            raise NotOwnerError(f"{member} holds a stale lease of shared group {group!r}")

    def _shared_state(self, reader: _Reader, fence: Any, *, check: bool = True) -> CursorState:
        """A shared member's state here, shaped as a cursor's: ``next`` is the tail
        when it has something to take (else tail + 1), ``committed`` and
        ``unacked`` are the elements it holds here (a watch sees its acks)."""
        group = reader.spec.group
        assert group is not None
        if check:
            self._check_member(group, reader.reader_id, fence)
        cursor = self._shared[group]
        held = cursor.held_by(reader.reader_id)
        tail = self._ring.tail
        key_order = self._shared_specs[group].ordering == "key"
        work = cursor.has_work(reader.reader_id, tail, time.monotonic(), key_order=key_order)
        return CursorState(tail if work else tail + 1, held, tail, 0, False, held)

    async def _take_shared(
        self, reader: _Reader, fence: Any, max_count: int, wait: float, token: str | None
    ) -> Delivery:
        """A shared group's member takes up to ``max_count`` elements: ones to deliver
        again first, then new ones; each is held by the member under an ack lease."""
        if wait > 0 and not await self._wait_for_data(reader.reader_id, fence, wait, token):
            max_count = 0
        group = reader.spec.group
        assert group is not None
        self._check_member(group, reader.reader_id, fence)
        self._ensure_shared_task()  # (after a restart: the first call starts it)
        if self._loss is not None and reader.reader_id in self._loss_readers:
            self._loss_readers.discard(reader.reader_id)  # told once
            raise self._loss
        cursor, spec = self._shared[group], self._shared_specs[group]
        floor = cursor.floor
        lost = self._damage.first_from(max(cursor.next, self._ring.head))
        if lost is not None and lost[0] <= cursor.next and max_count > 0:
            # The group reached a damaged range: past it, and told once.
            cursor.forget(*lost)
            self._commits_moved()
            self._state_changed()
            raise self._damage.error(self._channel, self._epoch, lost)
        chunks = take_shared(
            cursor,
            self._ring,
            reader.reader_id,
            max_count,
            time.monotonic(),
            spec.ack_timeout,
            keep=self._shared_filters[group],
            convert=reader.converter,
            key_order=spec.ordering == "key",
            stop=None if lost is None else lost[0],
        )
        if chunks:
            self._metrics.delivered(
                sum(len(chunk.payload) for chunk in chunks),
                sum(chunk.payload.nbytes for chunk in chunks),
                time.time() - chunks[0].stamp,
            )
        if cursor.floor != floor:  # the filter passed over some: room for appends
            self._commits_moved()
        if chunks or cursor.floor != floor:
            self._state_changed()  # delivery counts and passes: kept in the background
        state = self._shared_state(reader, fence, check=False)
        config = self._config
        origin = _Origin(
            config.topic_id,
            config.name,
            config.namespace,
            reader.reader_id,
            fence,
            0,
            True,
            self._epoch,
        )
        delivery = Delivery.pack(
            self._channel, chunks, 0, state.next, state.tail, state.committed, origin, state.unacked
        )
        if token is not None and chunks:
            self._lend_shared(token, group, reader.reader_id, delivery.entries())
        return delivery

    def _lend_shared(
        self, token: str, group: str, member: str, entries: tuple[tuple[int, int], ...]
    ) -> None:
        loans = self._shared_loans
        loans[token] = (group, member, entries)
        while len(loans) > _STOPPED_TAKES_KEPT:  # sessions that never settled (bounded)
            del loans[next(iter(loans))]

    @_guarded
    async def ack(
        self, reader_id: str, entries: tuple[tuple[int, int, int], ...], single: bool = False
    ) -> AckStatus | list[AckStatus]:
        """Acknowledge elements a shared group's member holds, each named by its
        delivery id (sequence, delivery count, channel epoch); with a store,
        answered once on disk."""
        return await self._acknowledge(
            reader_id,
            entries,
            single,
            AckStatus.ACKED,
            lambda cursor, spec, sequence, count: cursor.ack(sequence, reader_id, count),
        )

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
        if not isinstance(delay, int | float) or delay < 0:
            raise InvalidArgumentError(f"delay must be a number >= 0, got {delay!r}")
        not_before = time.monotonic() + delay if delay else 0.0
        if delay:  # waiting receives look again when the delay ends
            asyncio.get_running_loop().call_later(delay, self._notify)
        return await self._acknowledge(
            reader_id,
            entries,
            single,
            AckStatus.NACKED,
            lambda cursor, spec, sequence, count: cursor.nack(
                sequence, reader_id, count, not_before, spec.max_deliveries
            ),
        )

    @_guarded
    async def extend_lease(
        self,
        reader_id: str,
        entries: tuple[tuple[int, int, int], ...],
        seconds: float | None = None,
        single: bool = False,
    ) -> AckStatus | list[AckStatus]:
        """Extend the ack leases of elements the member holds: they end ``seconds``
        from now (None: the group's ``ack_timeout`` from now)."""
        now = time.monotonic()
        return await self._acknowledge(
            reader_id,
            entries,
            single,
            AckStatus.EXTENDED,
            lambda cursor, spec, sequence, count: cursor.extend(
                sequence, reader_id, count, now + (seconds or spec.ack_timeout)
            ),
            durable=False,
        )

    async def _acknowledge(
        self,
        reader_id: str,
        entries: tuple[tuple[int, int, int], ...],
        single: bool,
        success: AckStatus,
        apply: Callable[[SharedCursor, SharedGroup, int, int], bool],
        *,
        durable: bool = True,
    ) -> AckStatus | list[AckStatus]:
        """Apply ``apply`` to each (sequence, count, epoch); REJECTED where it does not
        hold, or the delivery was of an earlier incarnation of this channel (what
        it held came back). A closed member's elements went back: all REJECTED."""
        reader = self._readers.get(reader_id)
        group = None if reader is None else reader.spec.group
        if reader is not None and group not in self._shared:
            raise GroupModeError(f"subscriber {reader_id} is not in a shared group: commit")
        if not isinstance(entries, tuple | list):
            raise InvalidArgumentError("entries must be (sequence, delivery count, epoch)")
        statuses: list[AckStatus] = []
        cursor = self._shared.get(group)  # type: ignore[arg-type]
        for entry in entries:
            sequence, count, epoch = entry
            _check_sequence(sequence, "sequence")
            # A delivery of an earlier incarnation is over: what it held came back.
            applied = (
                epoch == self._epoch
                and cursor is not None
                and apply(
                    cursor,
                    self._shared_specs[group],  # type: ignore[index]
                    sequence,
                    count,
                )
            )
            statuses.append(success if applied else AckStatus.REJECTED)
        if durable and success in statuses:
            if success is AckStatus.ACKED:
                self._metrics.committed()
            if cursor is not None and cursor.dead:
                self._shared_wake.set()  # past max_deliveries: to the dead letters now
            self._commits_moved()
            await self._save_state()
        return statuses[0] if single else statuses

    def _release_member(self, group: str, member: str, reason: str) -> None:
        """What ``member`` holds goes back to the group (it closed, left or died)."""
        cursor = self._shared[group]
        released = cursor.release(member, self._shared_specs[group].max_deliveries, reason)
        if released:
            logger.info(
                "channel %d: %d elements of %s go back to shared group %s (%s)",
                self._channel,
                len(released),
                member[:8],
                group,
                reason,
            )
            self._notify()
            self._state_changed()
            if cursor.dead:
                self._shared_wake.set()

    def _ensure_shared_task(self) -> None:
        """Start tending the shared groups (once; it ends when none is left)."""
        if self._shared_task is None or self._shared_task.done():
            self._shared_task = asyncio.ensure_future(self._tend_shared_groups())

    async def _tend_shared_groups(self) -> None:
        """Background: leases that expired go back to their groups, and dead letters
        go to their topics (at once when an ack call or a release makes some)."""
        while self._shared and self._failure is None:
            timeouts = [spec.ack_timeout for spec in self._shared_specs.values()]
            tick = min(1.0, max(0.02, min(timeouts, default=1.0) / 10))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._shared_wake.wait(), tick)
            self._shared_wake.clear()
            now = time.monotonic()
            changed = False
            for group, cursor in list(self._shared.items()):
                spec = self._shared_specs[group]
                if cursor.expire(now, spec.max_deliveries):
                    changed = True
                if cursor.dead:
                    try:
                        await self._send_dead_letters(group, cursor, spec)
                    except Exception as error:  # kept: tried again on the next round
                        logger.warning(
                            "channel %d: dead letters of %s not sent: %s",
                            self._channel,
                            group,
                            error,
                        )
            if changed:
                self._notify()
                self._state_changed()

    async def _send_dead_letters(self, group: str, cursor: SharedCursor, spec: SharedGroup) -> None:
        """Append the group's dead elements to its dead-letter topic (from this event
        loop, by actor call: a Publisher's threads cannot run here), exactly once:
        the batch and its version are on disk before the append, so a restart
        sends the same batch under the same version (see ``SharedCursor.sending``)."""
        assert spec.dead_letter is not None
        version, sequences = cursor.dead_batch(_DEAD_LETTER_BATCH)
        await self._save_state()
        config = self._config
        head = self._ring.head
        letters = []
        for sequence in sequences:
            if sequence < head or sequence not in cursor.dead:
                continue  # removed meanwhile (purge, overwrite): nothing to send
            deliveries, reason = cursor.dead[sequence]
            try:
                value = self._ring.get(sequence).payload.decode()[0]
            except Exception as error:  # its class does not load here
                value = f"<not decodable in the channel: {error}>"
            letters.append(
                {
                    "value": value,
                    "reason": reason,
                    "deliveries": deliveries,
                    "topic": config.name,
                    "channel": self._channel,
                    "position": str(Position(config.topic_id, self._channel, sequence)),
                }
            )
        if letters:
            writer = f"{ONCE_WRITER_PREFIX}dead:{config.topic_id}:{cursor.life}:{self._channel}"
            request = pack_request("append_once", writer, version, "block", _DEAD_LETTER_TIMEOUT)
            values = PickledValues.from_values(letters)
            try:
                target = await self._dead_letter_channel(spec)
                ack = await target.request.remote(request, values)
            except ray.exceptions.ActorDiedError:
                # The dead-letter topic was destroyed (maybe made again under its
                # name): find or make it anew, and send the same batch under the
                # same version.
                self._dead_letter_channels.pop(spec.dead_letter, None)
                target = await self._dead_letter_channel(spec)
                ack = await target.request.remote(request, values)
            if ack.error is not None:
                cursor.dead_letter_failed()
                raise ack.error
        cursor.dead_lettered_now(sequences)
        logger.info(
            "channel %d: %d elements of %s to dead-letter topic %s",
            self._channel,
            len(letters),
            group,
            spec.dead_letter,
        )
        self._commits_moved()
        await self._save_state()

    async def _dead_letter_channel(self, spec: SharedGroup) -> Any:
        """The channel of the group's dead-letter topic this channel appends to; the
        topic is created if it is missing (deleted since the group was made)."""
        topic = spec.dead_letter
        assert topic is not None
        handle = self._dead_letter_channels.get(topic)
        if handle is None:
            from raytopic.topic import ensure_dead_letter_topic

            # create_topic blocks on Ray calls: off this event loop.
            await asyncio.to_thread(ensure_dead_letter_topic, spec, self._config.namespace)
            coordinator = ray.get_actor(
                coordinator_actor_name(topic), namespace=self._config.namespace
            )
            info = await coordinator.ready.remote()
            handle = info.channels[self._channel % len(info.channels)]
            self._dead_letter_channels[topic] = handle
        return handle

    @_guarded
    async def purge(self) -> int:
        """Remove every element (an operator's ``Topic.purge``); groups and readers
        continue after them, and shared groups forget what they held or waited
        for. Returns how many elements were removed."""
        ring = self._ring
        removed = ring.evict_to(ring.tail + 1)
        head = ring.head
        for cursor in self._groups.values():
            cursor.skip_to_head(head)
        for reader in self._readers.values():
            if reader.cursor is not None:
                reader.cursor.skip_to_head(head)
        for shared in self._shared.values():
            shared.drop_below(head)
        self._release_store()
        self._notify()
        await self._save_state()
        return removed

    # -- receive sessions (the receives sent to this channel) ---------------------

    def _session(self, reader_id: str, view: tuple[int, dict[int, Any]] | None) -> ReceiveSession:
        """The reader's receive session here (opened on its first receive here),
        brought up to the newer of ``view`` (its handle's) and the last one pushed."""
        session = self._sessions.get(reader_id)
        reader = self._reader(reader_id)  # SubscriberClosedError once closed
        if session is None:
            self._ensure_siblings()
            owned: dict[int, Any] = (
                dict.fromkeys(range(self._config.channels)) if reader.spec.group is None else {}
            )
            session = ReceiveSession(
                reader.session_spec, self._links, owned, self._channel, restarted=self._restarted
            )
            self._sessions[reader_id] = session
            if reader.spec.group is not None:
                pushed = self._member_views.get(reader.spec.group, {}).get(reader_id)
                if pushed is not None:
                    session.update_view(*pushed)
        if view is not None:
            session.update_view(*view)
        return session

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
        mark = self._group_marks.get(group, (0, 0))
        if version > mark[0] or generation > mark[1]:
            self._group_marks[group] = (max(version, mark[0]), max(generation, mark[1]))
            self._state_changed()
        self._update_views(group, version, views)

    def group_marks(self) -> dict[str, tuple[int, int]]:
        """Per group, the highest (view version, generation) pushed here."""
        return dict(self._group_marks)

    def _update_views(
        self, group: str, version: int, views: dict[str, dict[int, Lease] | None]
    ) -> None:
        known = self._member_views.setdefault(group, {})
        for member_id, leases in views.items():
            if member_id in known and known[member_id][0] >= version:
                continue
            if leases is None:
                known.pop(member_id, None)
                session = self._sessions.pop(member_id, None)
                if session is not None:
                    session.close()
                if group in self._shared and member_id in self._readers:
                    self._departed.setdefault(group, set()).add(member_id)
                    self._release_member(group, member_id, "its member left or timed out")
                continue
            self._departed.get(group, set()).discard(member_id)
            known[member_id] = (version, leases)
            session = self._sessions.get(member_id)
            if session is not None:
                session.update_view(version, leases)

    @_guarded
    def resequencer_stats(self, reader_id: str) -> Any:
        """The resequencer counts of the reader's session here (None: none)."""
        session = self._sessions.get(reader_id)
        return None if session is None else session.resequencer_stats

    @_guarded
    def interrupt_receives(self, reader_id: str, stream: str, upto: int) -> None:
        """A handle abandons its receives of ``stream`` numbered up to ``upto``: they
        stop waiting (see ReceiveSession.interrupt), even those not arrived yet."""
        if reader_id in self._readers:
            self._session(reader_id, None).interrupt(stream, upto)

    @_guarded
    async def settle_receives(self, reader_id: str, stream: str, upto: int) -> None:
        """Wait until a handle's receives up to ``upto`` finished or wait for data
        (see ReceiveSession.settle); a seek goes after them, then ``resume_receives``."""
        session = self._sessions.get(reader_id)
        if session is not None:
            await session.settle(stream, upto)

    @_guarded
    def resume_receives(self, reader_id: str) -> None:
        """The seek announced by ``settle_receives`` landed: waits may take again."""
        session = self._sessions.get(reader_id)
        if session is not None:
            session.resume_fetches()

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
        """Serve a subscriber's receive (see ReceiveSession).

        ``view`` is a group member's (version, channel -> lease) as its handle
        knows it; the session keeps the newest it has seen.
        """
        session = self._session(reader_id, view)
        self._receiving += 1
        try:
            return await session.receive(stream, number, max_count, single, spread, here_only)
        finally:
            self._receiving -= 1

    async def end_receives(self, reason: str) -> None:
        """The topic is being destroyed: every waiting receive here raises
        TopicNotFoundError(``reason``) instead of dying with the actor (a destroy
        is an expected end). Returns once they have answered, or after a second."""
        error = TopicNotFoundError(reason)
        for session in self._sessions.values():
            session.close(error)
        # Also until the sessions' calls to sibling channels (fetches told to stop,
        # settles, give-backs) are answered: a call to a channel killed under it
        # makes Ray log a failure, and a destroy logs nothing.
        deadline = time.monotonic() + _END_RECEIVES_TIMEOUT
        while (self._receiving or self._sibling_calls) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    def ping(self) -> int:
        """Cheap liveness probe; returns the channel number."""
        return self._channel


def _stamp_clock() -> float:
    """Now, in whole microseconds: the resolution of the datetimes users see.

    An element's ``timestamp`` (and its PublishStatus's) is a datetime, which
    keeps microseconds; a finer stamp would round, and ``seek(c, t)`` with an
    element's own timestamp would then land before that element instead of
    after it.
    """
    return round(time.time(), 6)


def _remote_caller(handle: Any, in_flight: set[Any]) -> Callable[..., Any]:
    """A sibling's caller; each call is in ``in_flight`` until it is answered."""

    async def call(method: str, *args: Any) -> Any:
        ref = handle.request.remote(pack_request(method, *args))
        in_flight.add(ref)
        try:
            return await ref
        finally:
            in_flight.discard(ref)

    return call


def _pick(
    runs: list[Run],
    keep: Callable[[Any], bool] | None,
    convert: Callable[[Any], Any] | None,
    max_count: int,
) -> tuple[list[Chunk], int]:
    """Up to ``max_count`` elements of ``runs`` that ``keep`` accepts, converted.

    Returns the chunks and the sequence to read on from (after the last
    element looked at). The filter and converter see decoded values; what
    is delivered keeps its payload kind unless a converter made new values.
    """
    chunks: list[Chunk] = []
    sequence = runs[0].first if runs else 0
    found = 0
    for run in runs:
        values = run.payload.decode() if keep is not None or convert is not None else None
        picked: list[int] = []
        for offset in range(len(run.payload)):
            sequence = run.first + offset + 1
            if keep is None or keep(values[offset]):  # type: ignore[index]
                picked.append(offset)
                found += 1
                if found >= max_count:
                    break
        if picked:
            if convert is not None:
                payload: Payload = PickledValues.from_values(
                    convert(values[offset])
                    for offset in picked  # type: ignore[index]
                )
            elif len(picked) == len(run.payload):
                payload = run.payload
            else:
                payload = run.payload.take(picked)
            consecutive = picked[-1] - picked[0] + 1 == len(picked)
            sequences = None if consecutive else np.array(picked, dtype=np.int64) + run.first
            chunks.append(Chunk(run.first + picked[0], run.stamp, payload, sequences))
        if found >= max_count:
            break
    return chunks, sequence


def _last_sequence(chunks: list[Chunk]) -> int:
    last = chunks[-1]
    if last.sequences is not None:
        return int(last.sequences[-1])
    return last.first + len(last.payload) - 1


def _check_payload(payload: Any) -> Payload:
    """A payload of this process's own (see ``Payload.owned``), or a clear error."""
    if isinstance(payload, Payload):
        return payload.owned()
    raise InvalidArgumentError(f"not a payload: {type(payload).__name__}")


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def _check_sequence(value: object, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgumentError(f"{what} must be an int, got {type(value).__name__}")
    if value < 0:
        raise InvalidArgumentError(f"{what} must be >= 0, got {value}")
