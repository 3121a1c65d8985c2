"""A topic's subscriber groups as the coordinator runs them, over a ``ChannelFleet``.

Membership (join, leave, release, heartbeats with their long polls), the
streams that consume a whole group (claim, heartbeat, end),
rebalances (leases granted to the channels before anyone hears of them,
then the views pushed), expiry (members that stopped heartbeating, on an
injected monotonic clock), resets (all or nothing: channels that took a
reset are restored if another refuses), the open readers (a channel that
restarts without a store gets them back), and what a restarted channel
needs. No Ray: the unit tests run it against a fake fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raytopic.coordinator.groups import Group, MemberView, Rebalance, recovered_groups
from raytopic.coordinator.member_origins import DEAD_CHECK_INTERVAL, MemberOrigins
from raytopic.coordinator.view_polls import ViewPolls
from raytopic.core.errors import (
    GroupModeError,
    GroupNotFoundError,
    InvalidArgumentError,
    ResetInProgressError,
    TopicError,
    TopicNotFoundError,
)
from raytopic.core.protocol import (
    CloseReader,
    DestroyGroup,
    EnsureGroup,
    Grant,
    GrantStream,
    Lease,
    OpenReader,
    Origin,
    ReadActivity,
    ReaderSpec,
    ReadGroupCursors,
    ReadGroupMarks,
    ReadReaderSpecs,
    ResetGroup,
    RestoreGroup,
    StreamLogState,
    UpdateViews,
)

if TYPE_CHECKING:
    from raytopic.coordinator.fleet import ChannelFleet
    from raytopic.core.shared_group import SharedGroup

logger = logging.getLogger(__name__)

__all__ = ["GroupService"]

EXPIRY_SLACK = 0.01
"""Seconds the expiry loop sleeps past the first moment a member could time out
(a member times out once silent for MORE than its timeout)."""

ACTIVITY_TIMEOUT = 2.0
"""Seconds the expiry waits for a channel to say whether it heard from a silent member
(one that does not answer, restarting, heard nothing it kept)."""

CATCH_UP_TIMEOUT = 1.0
"""Seconds a membership change waits for the members it concerns to hear of it
(a member that died meanwhile never does)."""


class GroupService:
    """The groups and open readers of one topic.

    **Ordering**: membership changes and resets of one group run one at a
    time; a second reset of a group while one runs fails at once.

    **Delivery**: a member that joins gets its channels only after every
    channel has the new lease, so two live members never both own a channel.

    Args:
        topic: The topic's name (for logs).
        channels: How many channels the topic has.
        fleet: The topic's channels.
        clock: Monotonic seconds (members' heartbeats and timeouts).
        on_rebalance: Called with a group's name each time its channel owners
            change (the actor counts it as a metric).
    """

    def __init__(
        self,
        topic: str,
        channels: int,
        fleet: ChannelFleet,
        clock: Callable[[], float],
        on_rebalance: Callable[[str], None] = lambda group: None,
    ) -> None:
        self._topic = topic
        self._channels = channels
        self._fleet = fleet
        self._clock = clock
        self._on_rebalance = on_rebalance
        self.groups: dict[str, Group] = {}
        self.readers: dict[str, ReaderSpec] = {}  # open subscribers (a seed needs them)
        self._locks: dict[str, asyncio.Lock] = {}
        # group -> set once the channels hold the leases of its latest rebalance: a
        # member hears of a channel only after the channel knows it is the owner.
        self._granted: dict[str, asyncio.Event] = {}
        self._polls = ViewPolls()
        self._expiry_task: asyncio.Task[None] | None = None
        self._origins = MemberOrigins()  # where members run: Ray says when that is gone
        self._joined = asyncio.Event()  # wakes the expiry loop
        self._destroyed: str | None = None  # why calls now fail (set by ``end``)

    # -- what the channels keep -------------------------------------------------------

    async def adopt(self) -> None:
        """Learn the groups the channels keep (after a restart, or over an old store)."""
        cursors, marks = await asyncio.gather(
            self._fleet.ask_each(ReadGroupCursors()), self._fleet.ask_each(ReadGroupMarks())
        )
        found = recovered_groups(self._channels, cursors, marks, self._clock())
        for name, group in found.items():
            self.groups.setdefault(name, group)

    async def adopt_readers(self) -> None:
        """Learn the open readers the channels keep (after a restart)."""
        for specs in await self._fleet.ask_each(ReadReaderSpecs()):
            self.readers.update(specs)

    def seed_state(self, channel: int) -> tuple[Any, ...]:
        """What ``channel``, restarted without a store, gets back: per group its
        lease, version and generation; per group its members' views; the open
        readers; the shared groups' definitions."""
        # No group lock: a rebalance holding one may be waiting for this very
        # channel. Groups hold their new leases before they are pushed, so what
        # is read here is never older than what the channel gets later.
        groups = {}
        views = {}
        for name, state in self.groups.items():
            groups[name] = (state.leases.get(channel), state.version, state.generation)
            views[name] = {
                member: (state.version, state.channels_of(member)) for member in state.members
            }
        shared = {name: state.shared for name, state in self.groups.items() if state.shared}
        return groups, views, dict(self.readers), shared

    # -- readers --------------------------------------------------------------------

    async def open_reader(self, reader_id: str, spec: ReaderSpec) -> None:
        """Open a subscriber on every channel, all or nothing, and remember it."""
        await self._fleet.all_or_nothing(OpenReader(reader_id, spec), CloseReader(reader_id))
        self.readers[reader_id] = spec

    async def close_reader(self, reader_id: str) -> None:
        """Close a subscriber on every channel."""
        self.readers.pop(reader_id, None)
        await self._fleet.ask_each(CloseReader(reader_id))

    # -- groups ---------------------------------------------------------------------

    def group(self, group: str) -> Group:
        """The group.

        Raises:
            GroupNotFoundError: no such group.
        """
        state = self.groups.get(group)
        if state is None:
            raise GroupNotFoundError.of(self._topic, group)
        return state

    async def ensure(
        self,
        group: str,
        start_latest: bool,
        shared: SharedGroup | None = None,
        reader: ReaderSpec | None = None,
    ) -> Group:
        """The group, created (owned, or ``shared`` by that definition) if missing;
        all or nothing: if a channel refuses it (its filter, or ``reader``'s
        functions, cannot be loaded there), the others drop it again."""
        state = self.groups.get(group)
        if state is not None:
            return state
        async with self._lock(group):
            state = self.groups.get(group)
            if state is not None:
                return state
            await self._fleet.all_or_nothing(
                EnsureGroup(group, start_latest, shared, reader),
                DestroyGroup(group),  # unknown here, so new on every channel that made it
            )
            state = self.groups[group] = Group(group, self._channels, shared=shared)
            return state

    async def destroy(self, group: str) -> None:
        """Forget a group: its positions, members and the retention it held."""
        async with self._lock(group):
            if self.groups.pop(group, None) is None:
                raise GroupNotFoundError.of(self._topic, group)
            await self._fleet.ask_each(DestroyGroup(group))
            for reader_id, spec in list(self.readers.items()):
                if spec.group == group:
                    del self.readers[reader_id]
            # Members waiting on a view hear that the group is gone.
            self._polls.changed(group)
            self._polls.forget(group)
            self._granted.pop(group, None)

    async def wait_changes_done(self, group: str) -> None:
        """Wait until a rebalance or reset of ``group`` in flight has finished."""
        async with self._lock(group):
            pass

    # -- membership -----------------------------------------------------------------

    async def join(
        self,
        group: str,
        reader_id: str,
        timeout: float,
        cooperative: bool = False,
        origin: Origin | None = None,
    ) -> MemberView:
        """Add a member (or rejoin one); returns once its assignment is in force.
        ``origin``: where it runs (it leaves once Ray says that is gone)."""
        async with self._lock(group):
            state = self.group(group)
            change = state.join(reader_id, timeout, self._clock(), cooperative=cooperative)
            await self._apply(state, change)
            view = state.view(reader_id)
            self._origins.note(group, reader_id, origin)
        self.watch_expiry()
        assert view is not None
        return view

    async def leave(self, group: str, reader_id: str) -> None:
        """A member closed: its channels go to the others."""
        async with self._lock(group):
            state = self.groups.get(group)
            if state is None:
                return
            change = state.leave(reader_id, self._clock())
            if change is not None:
                await self._apply(state, change)
            self._polls.forget(group, reader_id)

    async def release(self, group: str, reader_id: str, channels: list[int]) -> MemberView | None:
        """A cooperative member released ``channels``: grant them to their new owners."""
        async with self._lock(group):
            state = self.group(group)
            change = state.release(reader_id, channels, self._clock())
            if change is not None:
                await self._apply(state, change)
            return state.view(reader_id)

    async def heartbeat(
        self,
        group: str,
        reader_id: str,
        known_version: int,
        touch: bool,
        idle: float,
        wait: float,
        cooperative: bool,
    ) -> MemberView | None:
        """Keep a member alive; its view (None: no longer a member). See
        the coordinator's ``Heartbeat``."""
        state = self.group(group)
        now = self._clock() - max(0.0, idle)
        self._check_not_destroyed()
        if touch:
            alive = state.touch(reader_id, now, cooperative=cooperative)
        else:
            alive = reader_id in state.members
        if alive and wait > 0:
            await self._polls.wait(group, reader_id, known_version, state.version, wait)
        await self._grants_landed(group)
        self._check_not_destroyed()
        state = self.group(group)  # GroupNotFoundError if destroyed meanwhile
        return state.view(reader_id)

    def end(self, reason: str) -> None:
        """The topic is destroyed: stop expiry; members' long polls answer ``reason``."""
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            self._expiry_task = None
        self._destroyed = reason
        for group in self.groups:
            self._polls.changed(group)

    async def _grants_landed(self, group: str) -> None:
        """Wait while a rebalance of ``group`` is granting leases (its view is already
        the new one): a receive sent on that view would find its channel not yet
        granted, be refused as not the owner, and answer "empty"."""
        while (granted := self._granted.get(group)) is not None and not granted.is_set():
            await granted.wait()

    def _check_not_destroyed(self) -> None:
        if self._destroyed is not None:
            raise TopicNotFoundError(self._destroyed)

    # -- streams ----------------------------------------------------------------------

    async def claim_stream(
        self, group: str, stream_id: str, timeout: float
    ) -> tuple[Lease, list[StreamLogState]]:
        """Give the group to a stream (a newer stream fences an older one); returns
        its lease and every channel's offset log, once every channel holds the lease.

        Raises:
            GroupNotFoundError: no such group.
            GroupModeError: a shared group (its members acknowledge element by element).
            GroupBusyError: the group has members.
        """
        async with self._lock(group):
            state = self.group(group)
            if state.shared is not None:
                raise GroupModeError(
                    f"group {group!r} is shared: a stream reads an owned group (its "
                    "positions are committed per channel)"
                )
            change = state.claim_stream(stream_id, timeout, self._clock())
            lease = change.grants[0]
            try:
                answers = await self._apply(state, change)
            except BaseException:
                # Not granted everywhere: no stream holds the group (the channels that
                # took the lease are given to nobody again).
                undone = state.end_stream(stream_id)
                if undone is not None:
                    with contextlib.suppress(Exception):
                        await self._apply(state, undone)
                raise
        self.watch_expiry()
        assert lease is not None
        logger.info("group %s of %s: consumed by stream %s", group, self._topic, stream_id)
        return lease, [answers[channel] for channel in range(self._channels)]

    def stream_heartbeat(self, group: str, stream_id: str, timeout: float) -> bool:
        """The stream is alive; False if it no longer holds the group (a newer stream
        took it, or it timed out)."""
        self._check_not_destroyed()
        return self.group(group).touch_stream(stream_id, self._clock(), timeout)

    async def end_stream(self, group: str, stream_id: str) -> None:
        """The stream ended: its group's channels go to nobody (a member may join)."""
        async with self._lock(group):
            state = self.groups.get(group)
            change = None if state is None else state.end_stream(stream_id)
            if change is not None:
                await self._apply(state, change)  # type: ignore[arg-type]
                logger.info("group %s of %s: stream %s ended", group, self._topic, stream_id)

    # -- rebalances -------------------------------------------------------------------

    async def assign_unowned(self) -> None:
        """Channels that came back from a restart without a store while the
        coordinator was down (it could not learn their owners) go to members."""
        for state in list(self.groups.values()):
            async with self._lock(state.name):
                change = state.assign_unowned()
                if change is not None:
                    await self._apply(state, change)

    async def _apply(self, state: Group, change: Rebalance) -> dict[int, Any]:
        """Push new leases to the channels, then the new views (to every channel
        and to the members' long polls). Returns each granted channel's answer."""
        answers: dict[int, Any] = {}
        if change.grants:
            granted = self._granted[state.name] = asyncio.Event()
            try:
                replies = await asyncio.gather(
                    *(
                        self._fleet.ask(channel, _grant(state.name, lease, change.stream))
                        for channel, lease in change.grants.items()
                    )
                )
            finally:
                granted.set()
            answers = dict(zip(change.grants, replies, strict=True))
            self._on_rebalance(state.name)
            logger.info(
                "group %s of %s: generation %d, channels moved: %s",
                state.name,
                self._topic,
                state.generation,
                {
                    channel: lease.reader_id if lease else None
                    for channel, lease in change.grants.items()
                },
            )
        await self._push_views(state, change.members, marks=change.stream is not None)
        return answers

    async def _push_views(
        self, state: Group, members: tuple[str, ...], *, marks: bool = False
    ) -> None:
        """Tell every channel the new views of ``members`` (any channel may host a
        receive session of theirs), then wake the members' long polls. ``marks``:
        tell the channels the group's version and generation even when no view
        changed (a stream came or went: a restarted coordinator continues above)."""
        # None: the member left or timed out (a channel drops its sessions there).
        views = {
            reader_id: state.channels_of(reader_id) if reader_id in state.members else None
            for reader_id in members
        }
        if views or marks:
            await self._fleet.tell(
                UpdateViews(state.name, state.version, views, state.generation), timeout=None
            )
        polling = self._polls.changed(state.name)
        await self._polls.caught_up(
            state.name,
            polling & set(members) & set(state.members),
            state.version,
            CATCH_UP_TIMEOUT,
        )

    # -- expiry -----------------------------------------------------------------------

    def watch_expiry(self) -> None:
        """Start the expiry loop (once), or wake it: a member joined, whose timeout may
        come before the ones it sleeps until."""
        self._joined.set()
        if self._expiry_task is None or self._expiry_task.done():
            self._expiry_task = asyncio.ensure_future(self._expire_members())

    async def _expire_members(self) -> None:
        """Background: ``expire`` whenever a member could have timed out. It sleeps
        until the first such moment (a heartbeat only moves it later), or until
        a member joins."""
        while True:
            due = [
                deadline
                for group in self.groups.values()
                if (deadline := group.deadline()) is not None
            ]
            delay = max(0.0, min(due) - self._clock()) + EXPIRY_SLACK if due else None
            if self._origins:  # ask Ray about the members' processes this often too
                delay = DEAD_CHECK_INTERVAL if delay is None else min(delay, DEAD_CHECK_INTERVAL)
            self._joined.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._joined.wait(), delay)
            await self._leave_gone_members()
            await self.expire()

    async def _leave_gone_members(self) -> None:
        """Members whose process Ray says is gone (their driver's job ended, their
        actor died) leave now, as a closed member does, rather than at their
        timeout."""
        self._origins.keep_only(
            (name, reader_id) for name, state in self.groups.items() for reader_id in state.members
        )
        for group, reader_id, why in await self._origins.gone():
            logger.info("group %s of %s: member %s leaves: %s", group, self._topic, reader_id, why)
            await self.leave(group, reader_id)
            self._origins.note(group, reader_id, None)

    async def expire(self) -> None:
        """Remove members that stopped heartbeating (and move channels whose
        hand-over ran out), and rebalance."""
        for state in list(self.groups.values()):
            if not state.members and state.stream is None:
                continue
            await self._hear_from_channels(state)
            async with self._lock(state.name):
                expired, change = state.expire(self._clock())
                if change is None:
                    continue
                logger.info(
                    "group %s of %s: members (or its stream) timed out: %s (or a hand-over "
                    "ran out)",
                    state.name,
                    self._topic,
                    expired,
                )
                try:
                    await self._apply(state, change)
                except Exception:
                    logger.exception("rebalance after a timeout failed")
                for reader_id in expired:
                    self._polls.forget(state.name, reader_id)

    async def _hear_from_channels(self, state: Group) -> None:
        """Before members silent here time out, ask the channels whether they acked,
        nacked or extended holds there within their timeout: those are signs of
        life too (a member busy on what it holds, or its tasks acking), and count
        as heartbeats then."""
        overdue = state.overdue(self._clock())
        if not overdue:
            return
        answers = await self._fleet.ask_outcomes(
            dict.fromkeys(self._fleet.channels(), ReadActivity(overdue)), ACTIVITY_TIMEOUT
        )
        now = self._clock()
        for answer in answers.values():
            if isinstance(answer, BaseException):
                continue  # a channel restarting: it heard nothing it kept
            for reader_id, quiet in answer.items():
                state.touch(reader_id, now - quiet)

    # -- reset ------------------------------------------------------------------------

    async def reset(self, group: str, targets: dict[int, int | float | str]) -> dict[int, int]:
        """Move a group's read and commit positions on the given channels, all or
        nothing: if a channel refuses, those that moved are restored.

        Returns:
            Per channel, the position set (clamped to ``[head - 1, tail]``).

        Raises:
            ResetInProgressError: a reset of the group is running.
            GroupBusyError: a stream consumes the group (it reads on from its own
                offset log, and its next commit would undo the reset).
            InvalidArgumentError: a channel does not exist.
            TopicError: a channel refused (its own typed error); nothing changed.
        """
        state = self.group(group)
        state.check_no_stream("the group can be reset")  # its stream's next commit would undo it
        if state.resetting:
            raise ResetInProgressError(f"a reset of group {group!r} is already running")
        for channel in targets:
            if not 0 <= channel < self._channels:
                raise InvalidArgumentError(f"channel {channel} does not exist")
        state.resetting = True
        try:
            async with self._lock(group):
                return await self._reset(state, targets)
        finally:
            state.resetting = False

    async def _reset(self, state: Group, targets: dict[int, int | float | str]) -> dict[int, int]:
        done = await self._fleet.ask_outcomes(
            {channel: ResetGroup(state.name, target) for channel, target in targets.items()}
        )
        failed = [outcome for outcome in done.values() if isinstance(outcome, BaseException)]
        if failed:
            # Compensate: each channel that moved goes back to where it was.
            await self._fleet.ask_outcomes(
                {
                    channel: RestoreGroup(state.name, outcome[1])
                    for channel, outcome in done.items()
                    if not isinstance(outcome, BaseException)
                }
            )
            error = failed[0]
            if isinstance(error, TopicError):
                raise error
            raise TopicError(f"reset of group {state.name!r} failed; nothing changed: {error}")
        positions = {
            channel: outcome[0]
            for channel, outcome in done.items()
            if not isinstance(outcome, BaseException)  # (none is, past the raise above)
        }
        cursors = await self._fleet.ask_each(ReadGroupCursors(), positions)
        for channel, cursor in zip(positions, cursors, strict=True):
            state.jumps[channel] = cursor[state.name]["jumps"]
        state.version += 1
        await self._push_views(state, tuple(state.members))
        logger.info("group %s of %s reset: %s", state.name, self._topic, positions)
        return positions

    # -- describe ---------------------------------------------------------------------

    async def describe(self) -> dict[str, Any]:
        """Each group's mode, definition, generation and members (a change of a
        group still under way finishes first: what this shows, members heard)."""
        groups = {}
        for name, state in sorted(self.groups.items()):
            await self.wait_changes_done(name)
            now = self._clock()
            stream = state.stream
            groups[name] = {
                "mode": state.mode,
                "spec": state.shared,
                "generation": state.generation,
                "stream": None if stream is None else stream.reader_id,
                "members": {
                    reader_id: {
                        "generation": member.generation,
                        "channels": sorted(state.channels_of(reader_id)),
                        "idle": now - member.last_seen,
                        "timeout": member.timeout,
                    }
                    for reader_id, member in sorted(state.members.items())
                },
            }
        return groups

    def _lock(self, group: str) -> asyncio.Lock:
        lock = self._locks.get(group)
        if lock is None:
            lock = self._locks[group] = asyncio.Lock()
        return lock


def _grant(group: str, lease: Lease | None, stream: str | None) -> Grant | GrantStream:
    """The request that gives a channel of ``group`` to ``lease`` (None: nobody): a
    stream's grant when the lease is the stream's."""
    if lease is not None and lease.reader_id == stream:
        return GrantStream(group, lease)
    return Grant(group, lease)
