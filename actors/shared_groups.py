"""Shared groups at one channel: elements handed out one by one, acknowledged one by one.
No Ray.

A shared group's members all read every channel. The group's cursor here
(``raytopic.actors.shared_cursor``) hands each member elements to hold under an
ack deadline (a *hold*); an ack is the end of them, a nack or a passed deadline delivers them
again, and past ``max_deliveries`` they go to the group's dead-letter topic
(``raytopic.actors.dead_letters``). A member's ``lease`` is its lease for
this channel in the group's latest view.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from raytopic.actors.channel_context import POLL_INTERVAL, ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.channel_state import ChannelState, Keep
from raytopic.actors.cursors import clamp
from raytopic.actors.reader_parts import (
    LossNotice,
    Reader,
    delivered_count,
)
from raytopic.actors.shared_cursor import SharedCursor
from raytopic.actors.shared_take import take_shared
from raytopic.actors.timers import call_when
from raytopic.core.config import check_nonnegative_int
from raytopic.core.errors import (
    GroupModeError,
    InvalidArgumentError,
    NotOwnerError,
    SubscriberClosedError,
)
from raytopic.core.protocol import CursorState, Delivery, Lease, Poison, ReaderLease, Take
from raytopic.core.records import AckStatus, CommitResult, _Origin
from raytopic.core.shared_group import SharedGroup

logger = logging.getLogger(__name__)

__all__ = ["SHARED_FORMAT", "SharedGroups", "definition_from_state", "definition_state"]

SHARED_FORMAT = 1
"""The format of the shared section (see :meth:`SharedGroups.state_of`)."""

Entries = tuple[tuple[int, int, int], ...]
"""Delivery ids: (sequence, delivery count, channel epoch)."""

MemberViews = Mapping[str, Mapping[str, tuple[int, Mapping[int, Lease]]]]
"""Per group, per member: the latest (view version, channel -> lease) pushed here."""


@dataclass(slots=True)
class _Shared:
    """One shared group here: its definition, its cursor, its loaded filter."""

    spec: SharedGroup
    cursor: SharedCursor
    keep: Callable[[Any], bool] | None


class SharedGroups:
    """Every shared group of one channel.

    Args:
        context: The channel's identity and wake-up signal.
        log: The channel's log.
        loss: The loss a restart without a store left to tell.
        state: The channel's durable state (cursors are kept there).
        views: The members' latest views (owned by the session host).
        lookup: The open reader of an id (raises SubscriberClosedError).
        commits_moved: Called when a group's done position moved (the log
            may release room).
    """

    def __init__(
        self,
        context: ChannelContext,
        log: ChannelLog,
        loss: LossNotice,
        state: ChannelState,
        views: MemberViews,
        lookup: Callable[[str], Reader],
        commits_moved: Callable[[], None],
    ) -> None:
        self._context = context
        self._log = log
        self._loss = loss
        self._state = state
        self._views = views
        self._lookup = lookup
        self._commits_moved = commits_moved
        self.groups: dict[str, _Shared] = {}
        self._departed: dict[str, set[str]] = {}  # group -> members told gone
        self.wake = asyncio.Event()  # dead letters to send now (see tend)

    def __contains__(self, group: object) -> bool:
        return group in self.groups

    def add(self, spec: SharedGroup, cursor: SharedCursor) -> None:
        """Keep a shared group here (created, recovered or seeded)."""
        self.groups[spec.name] = _Shared(spec, cursor, spec.load_filter())
        self._state.touch("shared", spec.name)

    def start(self, spec: SharedGroup, start_latest: bool) -> None:
        """A new shared group, starting at the tail (``start_latest``) or the head."""
        ring = self._log.ring
        self.add(spec, SharedCursor.starting_at(ring.tail + 1 if start_latest else ring.head))

    def cursor(self, group: str) -> SharedCursor:
        """The group's cursor here."""
        return self.groups[group].cursor

    # -- members ----------------------------------------------------------------------

    def check_member(self, group: str, member: str, lease: ReaderLease) -> None:
        """``lease`` must be the member's lease for this channel, and the member must
        not have been told gone (it rejoins first).

        Raises:
            NotOwnerError: it is not.
        """
        if member in self._departed.get(group, ()) or lease is None:
            raise NotOwnerError(f"{member} is not a member of shared group {group!r}")
        known = self._views.get(group, {}).get(member)
        if known is not None and known[1].get(self._context.channel) != lease:
            raise NotOwnerError(f"{member} holds a stale lease of shared group {group!r}")

    def member_left(self, group: str, member: str) -> None:
        """The group's view says ``member`` left or timed out: what it holds goes back."""
        self._departed.setdefault(group, set()).add(member)
        self.release_member(group, member, "its member left or timed out")

    def member_back(self, group: str, member: str) -> None:
        """``member`` is in the group's view again."""
        self._departed.get(group, set()).discard(member)

    def member_closed(self, group: str, member: str) -> None:
        """``member`` closed: what it holds goes back."""
        self.release_member(group, member, "its member closed")
        self._departed.get(group, set()).discard(member)

    def release_member(self, group: str, member: str, reason: str) -> None:
        """What ``member`` holds goes back to the group (it closed, left or died)."""
        shared = self.groups[group]
        released = shared.cursor.release(member, shared.spec.max_deliveries, reason)
        if released:
            logger.info(
                "channel %d: %d elements of %s go back to shared group %s (%s)",
                self._context.channel,
                len(released),
                member[:8],
                group,
                reason,
            )
            self._context.notify()
            self._state.touch("shared", group, Keep.SOON)
            if shared.cursor.dead:
                self.wake.set()

    # -- the reader interface ------------------------------------------------------------

    def state(self, reader: Reader, lease: ReaderLease, *, check: bool = True) -> CursorState:
        """A member's state here, shaped as a cursor's: ``next`` is the tail when it
        has something to take (else tail + 1), ``committed`` and ``unacked`` are
        the elements it holds here (a watch sees its acks)."""
        group = reader.group
        assert group is not None
        if check:
            self.check_member(group, reader.reader_id, lease)
        shared = self.groups[group]
        held = shared.cursor.held_by(reader.reader_id)
        tail = self._log.ring.tail
        key_order = shared.spec.ordering == "key"
        work = shared.cursor.has_work(reader.reader_id, tail, time.monotonic(), key_order=key_order)
        return CursorState(tail if work else tail + 1, held, tail, 0, False, held)

    @property
    def polls_clock(self) -> bool:
        """A nack's delay ends with the clock."""
        return True

    def reader_closed(self, reader: Reader) -> None:
        """What the member holds goes back to its group."""
        self.member_closed(reader.group, reader.reader_id)  # type: ignore[arg-type]

    def commit(
        self,
        reader: Reader | None,
        sequence: int,
        lease: ReaderLease,
        jumps: int | None,
        bound: int | None,
    ) -> CommitResult:
        """Refused: a shared group's members acknowledge elements one by one."""
        raise _refused(reader, "commit")

    def seek(
        self, reader: Reader, lease: ReaderLease, target: int | float, by_time: bool, commit: bool
    ) -> tuple[int, int]:
        """Refused: a shared group's cursor is the group's, not a member's."""
        raise _refused(reader, "seek")

    async def seek_to_committed(self, reader: Reader, lease: ReaderLease) -> tuple[int, int]:
        """Refused: a shared group's cursor is the group's, not a member's."""
        raise _refused(reader, "seek")

    def report_poison(
        self, reader: Reader, lease: ReaderLease, jumps: int, poison: Poison, skipped: bool
    ) -> bool:
        """Not taken: a shared group's member nacks an element it cannot decode."""
        return False

    def reported(self, reader: Reader, lease: ReaderLease) -> CursorState:
        """The reader's state as reported (a shared group's next is never below the
        head: what was removed is dropped from it)."""
        return self.state(reader, lease, check=lease is not None)

    async def take(self, reader: Reader, take: Take) -> Delivery:
        """Hand the member up to ``take.max_count`` elements: ones to deliver again
        first, then new ones; each is held until its ack deadline (the hold is the
        at-least-once record: a reply nobody reads comes back when it ends). With
        ``take.wait``, first wait up to that long for one.

        Raises:
            DataLossError: the group reached a damaged range, or the channel
                restarted without a store (each told once).
            NotOwnerError: ``take.lease`` is not the member's lease here.
            SubscriberClosedError: the member closed meanwhile.
        """
        reader_id, lease, max_count = reader.reader_id, take.lease, take.max_count
        group = reader.group
        assert group is not None
        self.check_member(group, reader_id, lease)
        deadline = time.monotonic() + take.wait
        while take.wait > 0 and not self.state(reader, lease).available:
            left = deadline - time.monotonic()
            if left <= 0:
                max_count = 0
                break
            # A nack's delay ends with the clock.
            await self._context.wait_change(min(left, POLL_INTERVAL))
            reader = self._lookup(reader_id)
        # (A take of nothing, a restarted session's first, is told nothing: it moves nothing.)
        loss = self._loss.tell(reader_id) if take.max_count > 0 else None
        if loss is not None:
            raise loss
        shared = self.groups[group]
        cursor, spec = shared.cursor, shared.spec
        floor = cursor.floor
        lost = self._log.damage.first_from(max(cursor.next, self._log.ring.head))
        if lost is not None and lost[0] <= cursor.next and max_count > 0:
            # The group reached a damaged range: past it, and told once.
            cursor.forget(*lost)
            self._moved(group)
            raise self._log.lost(lost)
        chunks = take_shared(
            cursor,
            self._log.ring,
            reader_id,
            max_count,
            time.monotonic(),
            spec.ack_timeout,
            keep=shared.keep,
            convert=reader.converter,
            key_order=spec.ordering == "key",
            stop=None if lost is None else lost[0],
            max_deliveries=spec.max_deliveries,
        )
        if chunks:
            self._context.metrics.delivered(*delivered_count(chunks), time.time() - chunks[0].stamp)
        if cursor.floor != floor:  # the filter passed over some: room for appends
            self._moved(group)
        elif chunks:
            self._state.touch("shared", group, Keep.SOON)  # delivery counts
        state = self.state(reader, lease, check=False)
        config = self._context.config
        origin = _Origin(
            config.topic_id,
            config.name,
            config.namespace,
            reader_id,
            lease,
            0,
            True,
            self._context.epoch,
        )
        delivery = Delivery.pack(
            self._context.channel,
            chunks,
            0,
            state.next,
            state.tail,
            state.committed,
            origin,
            state.unacked,
        )
        return delivery

    def _moved(self, group: str) -> None:
        """The group's floor moved: room for appends, kept in the background."""
        self._state.touch("shared", group, Keep.SOON)
        self._commits_moved()

    # -- acknowledgements ---------------------------------------------------------------

    def ack(self, reader_id: str, entries: Entries) -> list[AckStatus]:
        """Acknowledge elements the member holds (see :meth:`acknowledge`)."""
        statuses = self.acknowledge(
            reader_id,
            entries,
            AckStatus.ACKED,
            lambda cursor, spec, sequence, count: cursor.ack(sequence, reader_id, count),
        )
        if AckStatus.ACKED in statuses:
            self._context.metrics.committed()
        return statuses

    def nack(self, reader_id: str, entries: Entries, delay: float) -> list[AckStatus]:
        """Give elements back to be delivered again after ``delay`` seconds (past
        ``max_deliveries``: to the dead-letter topic).

        Raises:
            InvalidArgumentError: ``delay`` is not a number >= 0.
        """
        if not isinstance(delay, int | float) or delay < 0:
            raise InvalidArgumentError(f"delay must be a number >= 0, got {delay!r}")
        not_before = time.monotonic() + delay if delay else 0.0
        if delay:  # waiting receives look again when the delay ends (not before it)
            call_when(not_before, self._context.notify, [])
        return self.acknowledge(
            reader_id,
            entries,
            AckStatus.NACKED,
            lambda cursor, spec, sequence, count: cursor.nack(
                sequence, reader_id, count, not_before, spec.max_deliveries
            ),
        )

    def extend(self, reader_id: str, entries: Entries, seconds: float | None) -> list[AckStatus]:
        """Move the ack deadlines of elements the member holds to ``seconds`` from now
        (None: the group's ``ack_timeout``)."""
        now = time.monotonic()
        return self.acknowledge(
            reader_id,
            entries,
            AckStatus.EXTENDED,
            lambda cursor, spec, sequence, count: cursor.extend(
                sequence, reader_id, count, now + (seconds or spec.ack_timeout)
            ),
            Keep.WITH_NEXT_WRITE,  # a restart delivers what was held again anyway
        )

    def acknowledge(
        self,
        reader_id: str,
        entries: Entries,
        success: AckStatus,
        apply: Callable[[SharedCursor, SharedGroup, int, int], bool],
        keep: Keep = Keep.BEFORE_REPLY,
    ) -> list[AckStatus]:
        """Apply ``apply`` to each delivery; REJECTED where it does not hold, or the
        delivery was of an earlier incarnation of this channel (what it held came
        back). A closed member's elements went back: all REJECTED. What changed is
        kept as ``keep`` says.

        Raises:
            GroupModeError: the reader is not in a shared group.
            InvalidArgumentError: malformed entries.
        """
        group = self.group_of(reader_id)
        checked = _delivery_ids(entries)  # all of them before any applies
        shared = self.groups.get(group) if group is not None else None
        statuses: list[AckStatus] = []
        for sequence, count, epoch in checked:
            applied = (
                epoch == self._context.epoch
                and shared is not None
                and apply(shared.cursor, shared.spec, sequence, count)
            )
            statuses.append(success if applied else AckStatus.REJECTED)
        if shared is not None and success in statuses:
            self._state.touch("shared", shared.spec.name, keep)
            if shared.cursor.dead:
                self.wake.set()  # past max_deliveries: to the dead letters now
        return statuses

    def group_of(self, reader_id: str) -> str | None:
        """The shared group of an open reader (None: closed).

        Raises:
            GroupModeError: the reader is open and not in a shared group.
        """
        try:
            reader = self._lookup(reader_id)
        except SubscriberClosedError:
            return None
        if reader.group not in self.groups:
            raise GroupModeError(f"subscriber {reader_id} is not in a shared group: commit")
        return reader.group

    # -- the background round ------------------------------------------------------------

    async def expire_round(self) -> tuple[bool, list[str]]:
        """Wait for a tick (or a wake), then send expired leases back; returns
        (whether any went back, the groups with dead letters to send)."""
        timeouts = [shared.spec.ack_timeout for shared in self.groups.values()]
        tick = min(1.0, max(0.02, min(timeouts, default=1.0) / 10))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), tick)
        self.wake.clear()
        now = time.monotonic()
        changed = False
        dead = []
        for group, shared in list(self.groups.items()):
            if shared.cursor.expire(now, shared.spec.max_deliveries):
                changed = True
                self._state.touch("shared", group)
            if shared.cursor.dead:
                dead.append(group)
        return changed, dead

    async def tend(
        self,
        send_dead_letters: Callable[[str, SharedCursor, SharedGroup], Awaitable[None]],
        serving: Callable[[], bool],
    ) -> None:
        """Tend the groups while there are any and the channel serves: expired holds go
        back to their groups, and dead letters go to their topics (at once when an
        ack or a release makes some; a send that fails is tried on the next round)."""
        while self.groups and serving():
            changed, dead = await self.expire_round()
            for group in dead:
                shared = self.groups.get(group)
                if shared is None:
                    continue
                try:
                    async with self._state.unit_of_work():  # written as a request's are
                        await send_dead_letters(group, shared.cursor, shared.spec)
                        self._state.touch("shared", group)
                        self._commits_moved()
                except Exception as error:  # kept: tried again on the next round
                    logger.warning(
                        "channel %d: dead letters of %s not sent: %s",
                        self._context.channel,
                        group,
                        error,
                    )
            if changed:
                self._context.notify()
                self._state.save_later()

    # -- groups (the coordinator's calls) ---------------------------------------------

    def ensure_group(self, spec: SharedGroup, start_latest: bool) -> tuple[CursorState, bool]:
        """The group here, created if new; returns (its state, created)."""
        created = spec.name not in self.groups
        if created:
            self.start(spec, start_latest)
        cursor = self.groups[spec.name].cursor
        return CursorState(cursor.next, cursor.floor, self._log.ring.tail, 0), created

    def destroy(self, group: str) -> None:
        """Forget the group."""
        if self.groups.pop(group, None) is not None:
            self._state.touch("shared", group)
        self._departed.pop(group, None)

    def reset(self, group: str, position: int) -> tuple[int, dict[str, Any]]:
        """The group starts over after ``position``: everything after it is to
        deliver, what its members hold can no longer be acknowledged. Returns
        (position, previous state for :meth:`restore`)."""
        ring = self._log.ring
        shared = self.groups[group]
        saved = {"shared": shared.cursor.to_state()}
        position = clamp(position, ring.head, ring.tail)
        shared.cursor = SharedCursor.starting_at(position + 1)
        self._state.touch("shared", group)
        return position, saved

    def restore(self, group: str, previous: dict[str, Any]) -> bool:
        """Undo a reset; False if the group is gone (or ``previous`` is not a shared
        group's)."""
        shared = self.groups.get(group)
        if shared is None or "shared" not in previous:
            return False
        shared.cursor = SharedCursor.from_state(previous["shared"])
        self._state.touch("shared", group)
        self._context.notify()
        return True

    def drop_below(self, head: int) -> None:
        """Forget what each group held or waited for below ``head`` (a purge)."""
        for group, shared in self.groups.items():
            shared.cursor.drop_below(head)
            self._state.touch("shared", group)

    def lowest_floor(self) -> int | None:
        """The lowest done position of the groups (None: no group)."""
        return min((shared.cursor.floor for shared in self.groups.values()), default=None)

    def describe(self) -> dict[str, dict[str, Any]]:
        """Every shared group's cursor here (``describe``, a restarted coordinator)."""
        tail = self._log.ring.tail
        return {
            group: {
                "mode": "shared",
                "spec": shared.spec,
                "next": shared.cursor.next,
                "committed": shared.cursor.floor,
                "has_commit": False,
                "depth": shared.cursor.depth(tail),
                "unacked": shared.cursor.unacked,
                "holdings": shared.cursor.holdings(),
                "redelivered": shared.cursor.redelivered,
                "dead_lettered": shared.cursor.dead_lettered,
                "owner": None,
                "jumps": 0,
            }
            for group, shared in self.groups.items()
        }

    def lag(self, tail: int) -> Iterator[tuple[str, int, int]]:
        """Per group: (name, lag behind the tail, elements still to deliver)."""
        for group, shared in self.groups.items():
            yield group, max(0, tail - shared.cursor.floor), shared.cursor.depth(tail)

    # -- durable state ------------------------------------------------------------------

    def state_keys(self) -> Iterator[str]:
        """The shared groups the state keeps (the section ``shared``)."""
        return iter(self.groups)

    def state_of(self, group: str) -> dict[str, Any] | None:
        """A group as the state file keeps it (None: gone)."""
        shared = self.groups.get(group)
        if shared is None:
            return None
        return {"spec": definition_state(shared.spec), "cursor": shared.cursor.to_state()}

    def restore_state(self, saved: dict[str, Any]) -> None:
        """Bring back the groups a state file kept: what was held comes back to
        deliver again (past the limit: dead), and deliveries of records damaged
        since are done (nothing altered is delivered)."""
        for state in saved.values():
            spec = definition_from_state(state["spec"])
            cursor = SharedCursor.from_state(state["cursor"])
            cursor.enforce_limit(spec.max_deliveries, "held when its channel restarted")
            self.add(spec, cursor)
            self._forget_damaged_deliveries(spec.name, cursor)

    def _forget_damaged_deliveries(self, group: str, cursor: SharedCursor) -> None:
        for first, last in self._log.damage.overlapping(cursor.floor + 1, cursor.next - 1):
            # Those not yet looked at stay: the group is told when it reaches them.
            last = min(last, cursor.next - 1)
            forgotten = cursor.forget(first, last)
            if forgotten:
                logger.error(
                    "channel %d: %d elements of shared group %s in %d..%d were damaged "
                    "on disk before they were acknowledged: lost",
                    self._context.channel,
                    forgotten,
                    group,
                    first,
                    last,
                )


def _refused(reader: Reader | None, what: str) -> GroupModeError:
    group = None if reader is None else reader.group
    return GroupModeError(
        f"group {group!r} is shared: its members acknowledge elements "
        f"one by one (ack, nack) and cannot {what}"
    )


def definition_state(spec: SharedGroup) -> dict[str, Any]:
    """A shared group's definition as the state keeps it: its fields by name, its
    filter as the cloudpickle its creator gave (base64)."""
    return {
        "name": spec.name,
        "max_deliveries": spec.max_deliveries,
        "dead_letter": spec.dead_letter,
        "ack_timeout": spec.ack_timeout,
        "window": spec.window,
        "ordering": spec.ordering,
        "filter": None if spec.filter is None else base64.b64encode(spec.filter).decode(),
    }


def definition_from_state(state: dict[str, Any]) -> SharedGroup:
    """The definition :func:`definition_state` kept."""
    kept_filter = state["filter"]
    return SharedGroup(
        state["name"],
        max_deliveries=state["max_deliveries"],
        dead_letter=state["dead_letter"],
        ack_timeout=float(state["ack_timeout"]),
        window=state["window"],
        ordering=state["ordering"],
        filter=None if kept_filter is None else base64.b64decode(kept_filter),
    )


def _delivery_ids(entries: object) -> list[tuple[int, int, int]]:
    """``entries`` as delivery ids (sequence, delivery count, epoch), every one checked.

    Raises:
        InvalidArgumentError: not a sequence of such triples, or a sequence below 0.
    """
    if not isinstance(entries, tuple | list):
        raise InvalidArgumentError("entries must be (sequence, delivery count, epoch) triples")
    checked = []
    for entry in entries:
        if not isinstance(entry, tuple | list) or len(entry) != 3:
            raise InvalidArgumentError(
                f"an entry must be (sequence, delivery count, epoch), got {entry!r}"
            )
        sequence, count, epoch = entry
        check_nonnegative_int(sequence, "sequence")
        checked.append((sequence, count, epoch))
    return checked
