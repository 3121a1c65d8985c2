"""A channel's durable state: what it is made of, and what changed since it was last
written. No Ray.

The state is a dict of sections, as the store keeps it: plain JSON (dicts, lists,
strings, numbers), never a pickle of a class of ours, so moving or renaming a
class never breaks a store. User functions (a reader's filter, a group's filter)
are the exception: they are kept as the cloudpickles their users gave::

    version        the layout of the whole state (STATE_VERSION)
    sections       section -> the version of its values' format (each part's own)
    topic          the topic the store holds: its id, its fixed settings, and
                   whether it was destroyed (``raytopic.core.topic_record``)
    epoch          the channel's incarnation
    next_sequence  the position the next element gets (records cut off on disk
                   below it are reported, never reused)
    groups         group -> its cursor (channel-owned groups)
    shared         group -> its definition and cursor (shared groups)
    marks          group -> (view version, generation) pushed by the coordinator
    publishers     publisher -> its track (last batches and their acks)
    readers        reader -> its spec and, if anonymous, its cursor
    transactions   transaction -> its prepared part here, or its outcome
    streams        group -> its stream's offset log here (``raytopic.core.stream_log``)

Saving happens in one place: the channel serves each request as a unit of work
(:meth:`ChannelState.unit_of_work`; a background job's round is one too), and a
request that changed something worth waiting for (:meth:`ChannelState.touch`,
:attr:`Keep.BEFORE_REPLY`) is answered once a write covering it is done. Parts
only say what changed, and how soon it must be durable (:class:`Keep`); none of
them writes. A protocol whose next step must follow a write (a transaction's
commit point, a compaction's) says so with :meth:`ChannelState.checkpoint`.

A write carries only what changed (:meth:`ChannelState.touch`), so its cost
follows what a call changed, not the channel's history: a commit writes one
cursor, not every publisher the channel has ever seen. The store appends the
changes to its state log and compacts it now and then (see
``raytopic.actors.stores.state_log``); a store without a log of its own
rewrites its whole state, as the store contract's default does.

A state of another version (or of a section's format another version) is
refused with a StoreError: there is no code that reads an older layout.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import enum
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.stores.base import ChannelStore
from raytopic.actors.stores.group_sync import GroupSync
from raytopic.actors.stores.state_log import StateChange
from raytopic.core.errors import ChannelFailedError, StoreError
from raytopic.core.topic_record import TopicRecord

logger = logging.getLogger(__name__)

__all__ = ["SECTIONS", "STATE_VERSION", "ChannelState", "Keep"]

STATE_VERSION = 1
"""The layout of the state as a whole (its scalar and keyed sections)."""

SECTIONS = ("groups", "shared", "marks", "publishers", "readers", "transactions", "streams")
"""The keyed sections of the state, in the order a snapshot lists them."""


class Keep(enum.Enum):
    """How soon a change must be durable (with a store)."""

    BEFORE_REPLY = enum.auto()
    """The request that made it is answered once it is written (a commit, a seek,
    a group created): what the caller was told survives a crash."""
    SOON = enum.auto()
    """Written in the background, nobody waits (delivery counts, group marks):
    losing it to a crash costs a redelivery, never a promise."""
    WITH_NEXT_WRITE = enum.auto()
    """Carried by the next write, whenever that is (a take's cursor move: a crash
    delivers again what was not committed anyway)."""


@dataclass(slots=True)
class _Unit:
    """One request's work: the latest change it must wait for (0: none)."""

    change: int = 0
    open: bool = True
    """False once it ended (a task it started still sees it, and is no part of it)."""


class ChannelState:
    """What of a channel's state changed, and its writes to the store.

    Each keyed section has a provider (:meth:`provide`): the value of one key
    now (None: the key is gone), every key there is, and the version of the
    values' format.

    Args:
        context: The channel's identity (its epoch is in the state).
        next_sequence: The position the next element gets (read at each write).
        saved: Called after each write (the store may release what the
            written commits no longer need).
    """

    def __init__(
        self,
        context: ChannelContext,
        next_sequence: Callable[[], int],
        saved: Callable[[], None],
    ) -> None:
        self._context = context
        self._next_sequence = next_sequence
        self._saved = saved
        self._providers: dict[str, tuple[Callable[[str], Any], Callable[[], Iterable[str]]]] = {}
        self._versions: dict[str, int] = {}
        self._store: ChannelStore | None = None
        self._sync: GroupSync | None = None
        self._destroyed = False  # the topic was destroyed: its record says so
        self._record_changed = False  # the record goes with the next write
        self._dirty: dict[tuple[str, str], None] = {}  # (section, key), in change order
        # The unit of work of the request being served (each Ray call runs in a
        # task of its own, so each has its own; background tasks start with none).
        self._unit: contextvars.ContextVar[_Unit | None] = contextvars.ContextVar(
            f"raytopic-state-unit-{id(self)}", default=None
        )

    def provide(
        self,
        section: str,
        value_of: Callable[[str], Any],
        keys: Callable[[], Iterable[str]],
        *,
        version: int = 1,
    ) -> None:
        """Where ``section``'s values come from: ``value_of(key)`` (None: gone), ``keys()``.

        Args:
            section: One of :data:`SECTIONS`.
            value_of: The value of a key as the store keeps it (JSON-ready), or
                None: the key is gone.
            keys: Every key the section has now.
            version: The format of the values (the part's own: a part that changes
                what it keeps raises it, and a state of another one is refused).
        """
        self._providers[section] = (value_of, keys)
        self._versions[section] = version

    @property
    def durable(self) -> bool:
        """Whether a store keeps the state."""
        return self._sync is not None

    def open(self, store: ChannelStore) -> dict[str, Any]:
        """Keep the state in ``store`` from now on; returns what it kept ({}: nothing).

        Raises:
            StoreError: the store keeps a state of another version (or a section
                of another format version) than this code writes.
        """
        self._store = store
        self._sync = GroupSync(store.append_state, self._changes)
        saved = store.load_state() or {}
        if saved:
            self._check_versions(saved)
        return saved

    def _check_versions(self, saved: dict[str, Any]) -> None:
        channel = f"channel {self._context.channel} of {self._context.name!r}"
        version = saved.get("version")
        if version != STATE_VERSION:
            raise StoreError(
                f"{channel}: the store keeps a state of version {version!r}; "
                f"this raytopic reads version {STATE_VERSION}"
            )
        kept = saved.get("sections")
        if not isinstance(kept, dict):
            raise StoreError(f"{channel}: the stored state names no section versions")
        for section, version in self._versions.items():
            if section in kept and kept[section] != version:
                raise StoreError(
                    f"{channel}: the store keeps section {section!r} in format version "
                    f"{kept[section]!r}; this raytopic reads version {version}"
                )

    def touch(self, section: str, key: str | None, keep: Keep = Keep.BEFORE_REPLY) -> None:
        """``section[key]`` changed: the next write carries it, and ``keep`` says how
        soon that must be (see :class:`Keep`)."""
        sync = self._sync
        if sync is None or key is None:
            return
        self._dirty[(section, key)] = None
        if keep is Keep.SOON:
            self.save_later()
        elif keep is Keep.BEFORE_REPLY:
            unit = self._unit.get()
            if unit is not None and unit.open:
                unit.change = sync.mark()

    @contextlib.asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[None]:
        """Serve one request: on its way out (unless it raised), wait until what it
        changed with :attr:`Keep.BEFORE_REPLY` is durable. A unit inside a unit
        (a request served in-process for another) is part of the outer one.

        Raises:
            ChannelFailedError: the write failed; the channel has failed.
        """
        outer = self._unit.get()
        if outer is not None and outer.open:
            yield
            return
        unit = _Unit()
        token = self._unit.set(unit)
        try:
            yield
        finally:
            unit.open = False
            self._unit.reset(token)
        sync = self._sync
        if sync is not None and unit.change > sync.covered:
            await self._write(unit.change)

    def snapshot(self) -> dict[str, Any]:
        """The whole state, as a store keeps it."""
        state: dict[str, Any] = {
            "version": STATE_VERSION,
            "sections": dict(self._versions),
            "topic": self._record(),
            "epoch": self._context.epoch,
            "next_sequence": self._next_sequence(),
        }
        for section in SECTIONS:
            value_of, keys = self._providers[section]
            state[section] = {key: value_of(key) for key in keys()}
        return state

    def write_snapshot(self) -> None:
        """Replace the stored state with the whole state now (a new epoch begins:
        called while the channel opens, before anything is served)."""
        assert self._store is not None
        self._dirty.clear()
        self._store.save_state(self.snapshot())

    def _changes(self) -> list[StateChange]:
        """What changed since the last write (run on the event loop just before a
        write: a consistent view)."""
        changes = [
            StateChange("epoch", None, self._context.epoch),
            StateChange("next_sequence", None, self._next_sequence()),
        ]
        if self._record_changed:
            changes.append(StateChange("topic", None, self._record()))
            self._record_changed = False
        for section, key in self._dirty:
            value = self._providers[section][0](key)
            changes.append(StateChange(section, key, value, deleted=value is None))
        self._dirty.clear()
        return changes

    async def checkpoint(self) -> None:
        """An ordering point: what changed so far is durable before the caller's next
        step (a lead's decision before any participant hears it; what a compaction's
        rewritten records named before the rewrite commits). The unit of work still
        writes what changes after it.

        Raises:
            ChannelFailedError: the write failed; the channel has failed.
        """
        await self.save()

    async def save(self) -> None:
        """Make the changes so far durable now (one write serves every caller
        waiting meanwhile): the unit of work's write and the life cycle's; parts
        never call it.

        Raises:
            ChannelFailedError: the write failed; the channel has failed.
        """
        sync = self._sync
        if sync is not None:
            await self._write(sync.mark())

    async def _write(self, change: int) -> None:
        """Wait for a write that covers ``change``; the store may release after it."""
        sync = self._sync
        assert sync is not None
        try:
            await sync.wait(change)
        except Exception as error:
            failure = self._context.fail(f"its state could not be written: {error}")
            raise ChannelFailedError(failure) from error
        # Only now may the store drop what the commits released: a crash before
        # this point recovers the older commits, whose elements must be on disk.
        self._saved()

    def _record(self) -> dict[str, Any]:
        record = TopicRecord.of(self._context.config)
        return dataclasses.replace(record, destroyed=self._destroyed).state()

    async def mark_destroyed(self) -> None:
        """Record in the store, durably, that the topic was destroyed (before any
        channel removes its data: see ``raytopic.core.topic_record``).

        Raises:
            ChannelFailedError: the write failed; the channel has failed.
        """
        self._destroyed = self._record_changed = True
        await self.save()

    async def close(self) -> None:
        """Write what changed, then nothing more (the store is about to be removed)."""
        await self.save()
        self._store = self._sync = None

    def save_later(self) -> None:
        """A change worth keeping but not worth waiting for: written in the background."""
        if self._sync is not None:
            task = asyncio.ensure_future(self.save())
            task.add_done_callback(lambda done: done.cancelled() or done.exception())
