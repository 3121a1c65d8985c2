"""A channel's readers: who is open here, and which mode serves each. No Ray.

Every reader call of the channel (take, watch, commit, state) goes
through :class:`Readers`, which finds the reader and dispatches to its mode
once: :class:`~raytopic.actors.owned_readers.OwnedReaders` (anonymous readers
and channel-owned groups) or :class:`~raytopic.actors.shared_groups.SharedGroups`.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from raytopic.actors.channel_context import POLL_INTERVAL, ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.channel_state import ChannelState
from raytopic.actors.cursors import Cursor
from raytopic.actors.owned_readers import OwnedReaders
from raytopic.actors.reader_parts import LossNotice, Reader, ReaderMode
from raytopic.actors.shared_cursor import SharedCursor
from raytopic.actors.shared_groups import Entries, MemberViews, SharedGroups
from raytopic.core.errors import GroupModeError, GroupNotFoundError, SubscriberClosedError
from raytopic.core.protocol import (
    CursorState,
    Delivery,
    Lease,
    Poison,
    ReaderLease,
    ReaderSpec,
    Take,
)
from raytopic.core.records import AckStatus, CommitResult, CommitStatus
from raytopic.core.shared_group import SharedGroup
from raytopic.core.user_functions import load_pickled

logger = logging.getLogger(__name__)

__all__ = ["READERS_FORMAT", "Readers", "loaded_functions", "spec_from_state", "spec_state"]

READERS_FORMAT = 1
"""The format of the readers section (see :meth:`Readers.state_of`)."""


class Readers:
    """The open readers of one channel and the two modes that serve them.

    Args:
        context: The channel's identity and wake-up signal.
        log: The channel's log.
        state: The channel's durable state.
        views: The members' latest views (owned by the session host).
        closed: Called with a reader that closed (its session here ends).
    """

    def __init__(
        self,
        context: ChannelContext,
        log: ChannelLog,
        state: ChannelState,
        views: MemberViews,
        closed: Callable[[Reader], None],
    ) -> None:
        self._context = context
        self._log = log
        self._state = state
        self._closed = closed
        self.by_id: dict[str, Reader] = {}
        # reader -> when it last acked, nacked or extended here (monotonic): signs of
        # life the coordinator asks for before it times a member out.
        self._heard: dict[str, float] = {}
        self.loss = LossNotice()
        self.owned = OwnedReaders(context, log, self.loss, state, self.get)
        self.shared = SharedGroups(
            context, log, self.loss, state, views, self.get, self.commits_moved
        )

    def get(self, reader_id: str) -> Reader:
        """The open reader ``reader_id``.

        Raises:
            SubscriberClosedError: it is not open here.
        """
        reader = self.by_id.get(reader_id)
        if reader is None:
            raise SubscriberClosedError(f"subscriber {reader_id} is closed")
        return reader

    def mode(self, reader: Reader) -> ReaderMode:
        """The mode that serves ``reader``: its group's kind."""
        return self.group_mode(reader.group)

    def group_mode(self, group: str | None) -> ReaderMode:
        """The mode of ``group`` (anonymous readers, and groups not here, are owned)."""
        return self.shared if group in self.shared else self.owned

    def has_group(self, group: str) -> bool:
        """Whether ``group`` exists here, in either mode."""
        return group in self.owned.groups or group in self.shared

    def _open_mode(self, reader_id: str) -> tuple[Reader | None, ReaderMode]:
        """The reader if open (None: closed), and the mode that answers for it (a
        closed reader's calls get the owned mode's answer: not the owner)."""
        reader = self.by_id.get(reader_id)
        return reader, self.owned if reader is None else self.mode(reader)

    @property
    def has_shared_groups(self) -> bool:
        """Whether a shared group exists here (its holds need tending)."""
        return bool(self.shared.groups)

    # -- opening and closing ------------------------------------------------------------

    def open(self, reader_id: str, spec: ReaderSpec) -> tuple[CursorState, bool]:
        """Register a subscriber here (its own cursor, if anonymous); returns (its
        state, whether it is new).

        Raises:
            GroupNotFoundError: its group does not exist here.
            InvalidArgumentError: its filter, converter or resequence cannot be loaded here.
        """
        reader = self.by_id.get(reader_id)
        created = reader is None
        if reader is None:
            cursor = None
            if spec.group is None:
                cursor = self.owned.new_cursor(spec.start_latest)
            elif not self.has_group(spec.group):
                raise GroupNotFoundError.of(self._context.name, spec.group)
            reader = Reader(reader_id, spec, cursor, *loaded_functions(spec))
            self.by_id[reader_id] = reader
            self._state.touch("readers", reader_id)
        return self.mode(reader).state(reader, None, check=False), created

    def restore(self, reader_id: str, spec: ReaderSpec) -> bool:
        """Open a reader a restart brings back. One that cannot come back (its filter
        no longer loads, its group is gone) is logged and skipped, blocking nothing."""
        try:
            self.open(reader_id, spec)
        except Exception as error:
            logger.warning(
                "channel %d: reader %s not back: %s", self._context.channel, reader_id, error
            )
            return False
        return True

    def close(self, reader_id: str) -> bool:
        """Forget a subscriber (what a shared member holds goes back); True if it was open."""
        reader = self.by_id.pop(reader_id, None)
        self._heard.pop(reader_id, None)
        if reader is not None:
            self._state.touch("readers", reader_id)
            self.mode(reader).reader_closed(reader)
            self._closed(reader)
        self._context.notify()
        return reader is not None

    def close_group(self, group: str) -> None:
        """Close every reader of ``group`` (it is being destroyed)."""
        for reader_id, reader in list(self.by_id.items()):
            if reader.group == group:
                self.close(reader_id)

    # -- the reader calls ---------------------------------------------------------------

    async def take(self, take: Take) -> Delivery:
        """Hand the reader elements (see ``Take`` and the modes' ``take``).

        Raises:
            SubscriberClosedError: the reader is not open here.
        """
        reader = self.get(take.reader_id)
        return await self.mode(reader).take(reader, take)

    def take_now(self, take: Take) -> Delivery | None:
        """``take`` served now if it needs no wait (see :meth:`OwnedReaders.take_now`),
        else None; None for a shared group's member (its takes hold what they hand out),
        and in a channel that does not serve as usual (failed, recovering, ending).

        Raises:
            SubscriberClosedError: the reader is not open here.
        """
        if not self._context.admits_all:
            return None
        reader = self.get(take.reader_id)
        return self.owned.take_now(reader, take) if self.mode(reader) is self.owned else None

    def report_poison(
        self, reader_id: str, lease: ReaderLease, jumps: int, poison: Poison, skipped: bool
    ) -> bool:
        """A reader could not decode an element it was handed (see
        :meth:`OwnedReaders.report_poison`; a shared group's member nacks it instead)."""
        reader = self.by_id.get(reader_id)
        if reader is None:
            return False
        return self.mode(reader).report_poison(reader, lease, jumps, poison, skipped)

    def commit(
        self,
        reader_id: str,
        sequence: int,
        lease: ReaderLease,
        jumps: int | None = None,
        bound: int | None = None,
    ) -> CommitResult:
        """Commit ``sequence`` (and every earlier one) for the reader or its group;
        ``jumps``: the count an element's commit read it at (None: a bare position);
        no further than ``bound`` (a resequenced element's hand-over mark).

        Raises:
            GroupModeError: the reader is a shared group's member (it acks instead).
        """
        reader, mode = self._open_mode(reader_id)
        result = mode.commit(reader, sequence, lease, jumps, bound)
        if result.status is CommitStatus.COMMITTED:
            self.commits_moved()
        return result

    def seek(
        self, reader_id: str, lease: ReaderLease, target: int | float, by_time: bool, commit: bool
    ) -> tuple[int, int]:
        """Move the reader's cursor; return (position set, new jump count).

        Raises:
            SubscriberClosedError: the reader is not open here.
            GroupModeError: the reader is a shared group's member.
        """
        reader = self.get(reader_id)
        moved = self.mode(reader).seek(reader, lease, target, by_time, commit)
        self.commits_moved()
        return moved

    async def seek_to_committed(self, reader_id: str, lease: ReaderLease) -> tuple[int, int]:
        """Move the reader's cursor back to its commit; return (the commit, new jump count).

        Raises:
            SubscriberClosedError: the reader is not open here.
            GroupModeError: the reader is a shared group's member.
        """
        reader = self.get(reader_id)
        moved = await self.mode(reader).seek_to_committed(reader, lease)
        self.commits_moved()
        return moved

    def grant(self, group: str, lease: Lease | None) -> bool:
        """Give an owned group's channel to a member (None: to nobody); True if it changed."""
        return self.owned.grant(group, lease)

    def ack(
        self,
        reader_id: str,
        entries: Entries,
        lease: ReaderLease = None,
        jumps: tuple[int, ...] = (),
    ) -> list[AckStatus]:
        """Acknowledge elements: a shared group's member's holds (see
        :meth:`SharedGroups.ack`), or an owned reader's elements done one by one
        (see :meth:`OwnedReaders.ack`: ``lease`` and the ``jumps`` each was read at)."""
        self._heard_from(reader_id)
        reader, mode = self._open_mode(reader_id)
        if mode is self.shared:
            statuses = self.shared.ack(reader_id, entries)
        else:
            statuses = self.owned.ack(reader, lease, entries, jumps)
        return self._acknowledged(statuses, AckStatus.ACKED)

    def nack(self, reader_id: str, entries: Entries, delay: float) -> list[AckStatus]:
        """Give held elements back (see :meth:`SharedGroups.nack`)."""
        self._heard_from(reader_id)
        return self._acknowledged(self.shared.nack(reader_id, entries, delay), AckStatus.NACKED)

    def extend(self, reader_id: str, entries: Entries, seconds: float | None) -> list[AckStatus]:
        """Move the ack deadlines of held elements (see :meth:`SharedGroups.extend`)."""
        self._heard_from(reader_id)
        return self.shared.extend(reader_id, entries, seconds)

    def _heard_from(self, reader_id: str) -> None:
        if reader_id in self.by_id:
            self._heard[reader_id] = time.monotonic()

    def quiet_for(self, reader_ids: tuple[str, ...]) -> dict[str, float]:
        """Seconds since each of ``reader_ids`` last acked, nacked or extended a hold
        here (those never heard from here are left out)."""
        now = time.monotonic()
        return {r: now - self._heard[r] for r in reader_ids if r in self._heard}

    def _acknowledged(self, statuses: list[AckStatus], success: AckStatus) -> list[AckStatus]:
        if success in statuses:  # room may be free, and dead letters due
            self.commits_moved()
        return statuses

    def owned_group(self, group: str) -> Cursor:
        """An owned group's cursor here (a stream reads owned groups).

        Raises:
            GroupModeError: the group is shared (its members acknowledge element by element).
            GroupNotFoundError: no such group.
        """
        cursor = self.owned.groups.get(group)
        if cursor is not None:
            return cursor
        if group in self.shared:
            raise GroupModeError(f"group {group!r} is shared: a stream reads an owned group")
        raise GroupNotFoundError.of(self._context.name, group)

    def advance(self, group: str, sequence: int) -> None:
        """Move an owned group's commit up to ``sequence`` (a stream's micro-batch)."""
        self.owned.advance(group, sequence)
        self.commits_moved()

    def lag(self, head: int, tail: int) -> list[tuple[str, int, int]]:
        """Per group: (name, lag behind the tail, elements still to deliver); what is
        below the head (expired, or dropped) is neither."""
        return [*self.owned.lag(head, tail), *self.shared.lag(tail)]

    async def tend_shared_groups(
        self,
        send_dead_letters: Callable[[str, SharedCursor, SharedGroup], Awaitable[None]],
        serving: Callable[[], bool],
    ) -> None:
        """Tend the shared groups while there are any (see :meth:`SharedGroups.tend`)."""
        await self.shared.tend(send_dead_letters, serving)

    def state(self, reader_id: str, lease: ReaderLease, *, check: bool = True) -> CursorState:
        """The reader's state here (raises as the mode does)."""
        reader = self.get(reader_id)
        return self.mode(reader).state(reader, lease, check=check)

    def reported(self, reader_id: str, lease: ReaderLease) -> CursorState:
        """The reader's cursor as heads, tails, remaining messages and last commits
        report it (see :meth:`ReaderMode.reported`); checked against ``lease`` if one
        is given."""
        reader = self.get(reader_id)
        return self.mode(reader).reported(reader, lease)

    async def watch(
        self, reader_id: str, lease: ReaderLease, known: CursorState | None, timeout: float
    ) -> CursorState:
        """The reader's state once it differs from ``known`` (or after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            reader = self.get(reader_id)
            mode = self.mode(reader)
            state = mode.state(reader, lease)
            left = deadline - time.monotonic()
            if state != known or left <= 0:
                return state
            # A shared group's nack delays end with the clock, as TTLs do.
            polled = mode.polls_clock
            await self._context.wait_change(min(left, POLL_INTERVAL) if polled else left)

    # -- groups (the coordinator's calls) ---------------------------------------------

    def ensure_group(
        self, group: str, start_latest: bool, shared: SharedGroup | None
    ) -> tuple[CursorState, bool]:
        """The group here, created if new (``shared``: a shared group, with its
        definition); returns (its state, created).

        Raises:
            GroupModeError: the group exists here in the other mode.
        """
        if shared is not None or group in self.shared:
            if group in self.owned.groups or shared is None:
                raise GroupModeError(f"group {group!r} exists in the other mode")
            return self.shared.ensure_group(shared, start_latest)
        return self.owned.ensure_group(group, start_latest)

    def destroy_group(self, group: str) -> None:
        """Forget a group (its readers close): its positions and the retention it held."""
        if self.owned.groups.pop(group, None) is not None:
            self._state.touch("groups", group)
        self.shared.destroy(group)
        self.close_group(group)
        self.commits_moved()

    def reset_group(self, group: str, target: int | float | str) -> tuple[int, dict[str, Any]]:
        """Move the group's read and commit positions; returns (position, previous
        state for :meth:`restore_group`).

        ``target``: a sequence, a time stamp (float), ``"earliest"`` or ``"latest"``
        ("next is the one after it"). A shared group starts over after the
        position: everything after it is to deliver, what its members hold can
        no longer be acknowledged.

        Raises:
            GroupNotFoundError: no such group here.
        """
        ring = self._log.ring
        if target == "earliest":
            position = ring.head - 1
        elif target == "latest":
            position = ring.tail
        elif isinstance(target, float):
            position = ring.first_after(target) - 1
        else:
            position = int(target)
        reset = self.group_mode(group).reset(group, position)
        self.commits_moved()
        return reset

    def restore_group(self, group: str, previous: dict[str, Any]) -> bool:
        """Undo a reset; False if the group is gone."""
        return self.group_mode(group).restore(group, previous)

    def describe_groups(self) -> dict[str, dict[str, Any]]:
        """Every group's cursor here (``describe``, a restarted coordinator)."""
        return {**self.owned.describe(), **self.shared.describe()}

    # -- positions ------------------------------------------------------------------------

    def commits_moved(self) -> None:
        """Commits moved: with ``retain=False`` drop what every group committed, and
        wake the waiters (room, watches)."""
        if not self._context.config.retain:
            floors = [self.owned.lowest_committed(), self.shared.lowest_floor()]
            known = [floor for floor in floors if floor is not None]
            if known and self._log.evict_to(min(known) + 1):
                logger.debug("channel %d released up to %d", self._context.channel, min(known))
        self._context.notify()

    def skip_to_head(self) -> None:
        """Every reader continues at the head (the elements before it were purged)."""
        self.owned.skip_to_head(iter(self.by_id.values()))
        self.shared.drop_below(self._log.ring.head)

    def all_cursors(self) -> list[Cursor]:
        """Every owned cursor: the groups' and the anonymous readers'."""
        return [
            *self.owned.groups.values(),
            *(reader.cursor for reader in self.by_id.values() if reader.cursor is not None),
        ]

    def specs(self) -> dict[str, ReaderSpec]:
        """Every open reader's spec (a restarted coordinator asks)."""
        return {reader_id: reader.spec for reader_id, reader in self.by_id.items()}

    def state_keys(self) -> Iterator[str]:
        """The readers the state keeps (the section ``readers``)."""
        return iter(self.by_id)

    def state_of(self, reader_id: str) -> dict[str, Any] | None:
        """A reader as the state file keeps it (None: closed)."""
        reader = self.by_id.get(reader_id)
        if reader is None:
            return None
        return {
            "spec": spec_state(reader.spec),
            "cursor": None if reader.cursor is None else reader.cursor.to_state(),
        }

    def restore_state(self, saved: dict[str, Any]) -> None:
        """Bring back the readers a state file kept, anonymous ones at their saved
        positions."""
        for reader_id, state in saved.items():
            if not self.restore(reader_id, spec_from_state(state["spec"])):
                continue
            reader = self.by_id[reader_id]
            if reader.cursor is not None and state.get("cursor"):
                reader.cursor = Cursor.from_state(state["cursor"], group=False)


def loaded_functions(spec: ReaderSpec) -> tuple[Any, Any, Any]:
    """A reader's filter, converter and resequence order, loaded in this process.

    Raises:
        InvalidArgumentError: one of them cannot be loaded here (named in the message).
    """
    return (
        load_pickled(spec.filter, "filter") if spec.filter else None,
        load_pickled(spec.converter, "converter") if spec.converter else None,
        load_pickled(spec.resequence, "resequence") if spec.resequence else None,
    )


def spec_state(spec: ReaderSpec) -> dict[str, Any]:
    """A reader's spec as the state keeps it: its fields by name, its functions as
    the cloudpickles the subscriber sent (base64)."""
    return {
        "group": spec.group,
        "start_latest": spec.start_latest,
        "filter": _text(spec.filter),
        "converter": _text(spec.converter),
        "complete_on_empty": spec.complete_on_empty,
        "window": spec.window,
        "resequence": _text(spec.resequence),
        "skip_poison": spec.skip_poison,
    }


def spec_from_state(state: dict[str, Any]) -> ReaderSpec:
    """The spec :func:`spec_state` kept."""
    return ReaderSpec(
        group=state["group"],
        start_latest=bool(state["start_latest"]),
        filter=_bytes(state["filter"]),
        converter=_bytes(state["converter"]),
        complete_on_empty=bool(state["complete_on_empty"]),
        window=state["window"],
        resequence=_bytes(state["resequence"]),
        skip_poison=bool(state["skip_poison"]),
    )


def _text(pickled: bytes | None) -> str | None:
    return None if pickled is None else base64.b64encode(pickled).decode()


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)
