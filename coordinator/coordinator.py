"""The coordinator actor: one per topic, never on the data path.

It introduces the topic's channel actors to each other (they are created
with it: ``raytopic.coordinator.launch``), keeps the topic's configuration, and
runs its subscriber groups: membership
(join, leave, heartbeats, timeouts on a monotonic clock), sticky channel
assignment with leases pushed to the channels before a join returns, group
resets (fenced, all or nothing), and ``describe``.

Members learn of a change to their group's view without asking on their
data path: every view change is pushed to every channel (so the receive
sessions they host read the new channels at once), and each member keeps
one ``heartbeat`` call waiting here that returns as soon as its group's
view changes (a long poll; see ``raytopic.membership``).

Background work is one named coroutine, stopped by ``shutdown``:
``_expire_members`` (started on the first join), which sleeps until a member
could time out. Idle channels are never polled: a channel that restarts says
so itself (``channel_restarted``), and one without a store gets its groups
back then.

**Restarts**: the coordinator keeps nothing the channels do not: a restarted
coordinator rebuilds its groups, leases, members, versions and generations
from the channels (``recovered_groups``) before it answers any call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import ray

from raytopic.coordinator.groups import Group, MemberView, Rebalance, recovered_groups
from raytopic.coordinator.launch import ensure_dead_letter_topic
from raytopic.coordinator.view_polls import ViewPolls
from raytopic.core.config import TopicConfig
from raytopic.core.errors import (
    GroupFilterError,
    GroupModeError,
    GroupNotFoundError,
    InvalidArgumentError,
    ResetInProgressError,
    TopicError,
    TopicNotFoundError,
)
from raytopic.core.incarnation import was_restarted
from raytopic.core.naming import channel_actor_name
from raytopic.core.protocol import (
    CloseReader,
    ControlRequest,
    DestroyGroup,
    EndReceives,
    EnsureGroup,
    Grant,
    HostRestarted,
    OpenReader,
    Purge,
    ReaderSpec,
    ReadGroupCursors,
    ReadGroupMarks,
    ReadOpeningError,
    ReadReaderSpecs,
    ResetGroup,
    RestoreGroup,
    UpdateViews,
)
from raytopic.core.shared_group import SharedGroup

logger = logging.getLogger(__name__)

__all__ = ["CoordinatorActor", "TopicInfo"]

_ACTOR_CREATION_TIMEOUT = 30.0

_IDENTITY_TIMEOUT = 2.0
"""Seconds a channel has to say who it is before ``describe`` reports it unreachable."""

_EXPIRY_SLACK = 0.01
"""Seconds the expiry loop sleeps past the first moment a member could time out
(a member times out once silent for MORE than its timeout)."""

_CATCH_UP_TIMEOUT = 1.0
"""Seconds a membership change waits for the members it concerns to hear of it
(a member that died meanwhile never does)."""


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """What a Topic handle needs: the configuration and the channel actors."""

    config: TopicConfig
    channels: tuple[Any, ...]
    identities: tuple[dict[str, Any], ...]


class CoordinatorActor:
    """Coordinator of one topic.

    **Ordering**: membership changes and resets of one group run one at a
    time; a second reset of a group while one runs fails at once.

    **Delivery**: a member that joins gets its channels only after every
    channel has the new lease, so two live members never both own a channel.
    """

    def __init__(self, config: TopicConfig) -> None:
        self._config = config
        self._channels: list[Any] = []
        self._identities: list[dict[str, Any]] = []
        self._groups: dict[str, Group] = {}
        self._readers: dict[str, ReaderSpec] = {}  # open subscribers (a seed needs them)
        self._locks: dict[str, asyncio.Lock] = {}
        # group -> set once the channels hold the leases of its latest rebalance: a
        # member hears of a channel only after the channel knows it is the owner.
        self._granted: dict[str, asyncio.Event] = {}
        self._polls = ViewPolls()
        self._started = asyncio.Event()
        self._starting = False
        self._start_error: BaseException | None = None  # the topic could not be made
        self._expiry_task: asyncio.Task[None] | None = None
        self._joined = asyncio.Event()  # wakes the expiry loop
        self._restarted = was_restarted()
        self._rebalances = _rebalance_counter(config.name)
        self._destroyed: str | None = None  # why calls now fail (set by shutdown)

    # -- life cycle ------------------------------------------------------------

    async def start(self, channels: list[Any]) -> TopicInfo:
        """Take the topic's channel actors (created with this one, see
        ``raytopic.coordinator.launch``), introduce them to each other, and make
        the groups named at creation. Once; later calls wait for the first.

        Raises:
            TopicError: the topic cannot be made (a channel's store cannot be
                opened); its channels are gone.
        """
        if self._starting or self._restarted:
            await self._up()
            return self.info()
        self._starting = True
        try:
            await self._start_channels(channels)
        except BaseException as error:
            # The topic is not made: its channels go, and callers waiting for it
            # hear why (its creator removes this coordinator).
            for handle in self._channels:
                ray.kill(handle, no_restart=True)
            self._channels = []
            self._start_error = error
            self._started.set()
            raise
        self._started.set()
        # Once it serves: a dead-letter topic's making waits for nothing of this one.
        await self._ensure_dead_letter_topics(list(self._groups.values()))
        return self.info()

    async def _start_channels(self, handles: list[Any]) -> None:
        """Introduce the channels to each other and make the configured groups."""
        config = self._config
        self._channels = list(handles)
        self._identities = list(
            await asyncio.wait_for(
                asyncio.gather(*(handle.attach.remote(handles) for handle in handles)),
                _ACTOR_CREATION_TIMEOUT,
            )
        )
        await self._refuse_failed_channels()
        await self._adopt_groups()  # a store of an earlier topic of this name has some
        for group in config.groups:
            if isinstance(group, SharedGroup):
                await self._ensure_group(group.name, False, group)
            else:
                await self._ensure_group(group, start_latest=False)

    async def _refuse_failed_channels(self) -> None:
        """A topic whose channels cannot open their stores is not made: ``start``
        raises the first one's typed error."""
        failed = [
            handle
            for handle, identity in zip(self._channels, self._identities, strict=True)
            if identity["state"] == "failed"
        ]
        if not failed:
            return
        error = await failed[0].control.remote(ReadOpeningError())
        raise error if isinstance(error, TopicError) else TopicError(str(error))

    async def _on_each_channel(self, request: ControlRequest) -> list[Any]:
        """Every channel's reply to a control request, in channel order."""
        return await asyncio.gather(*(handle.control.remote(request) for handle in self._channels))

    async def _up(self) -> None:
        """Wait until the coordinator serves; a restarted one first recovers (once)."""
        if self._started.is_set():
            return
        if self._restarted and not self._starting:
            self._starting = True
            try:
                await self._recover()
            except BaseException:
                self._starting = False  # the next call tries again
                raise
            self._started.set()
            try:
                await self._ensure_dead_letter_topics(list(self._groups.values()))
            except Exception as error:  # the channels ask again when they send
                logger.warning("dead-letter topics of %s not made: %s", self._config.name, error)
        await self._started.wait()
        if self._start_error is not None:
            raise self._start_error

    async def _recover(self) -> None:
        """Rebuild this restarted coordinator from its channels (named, detached:
        they outlive it)."""
        config = self._config
        self._channels = [
            ray.get_actor(channel_actor_name(config.name, channel), namespace=config.namespace)
            for channel in range(config.channels)
        ]
        self._identities = list(
            await asyncio.gather(*(handle.identity.remote() for handle in self._channels))
        )
        await self._adopt_groups()
        for specs in await self._on_each_channel(ReadReaderSpecs()):
            self._readers.update(specs)
        for channel, identity in enumerate(self._identities):
            if identity["state"] == "recovering":  # it restarted while this one was down
                with contextlib.suppress(Exception):  # it asks again while calls wait
                    self._identities[channel] = await self._seed(channel, self._channels[channel])
        await self._assign_unowned()
        if any(group.members for group in self._groups.values()):
            self._ensure_expiry_task()
        logger.info("coordinator of %s recovered: groups %s", config.name, sorted(self._groups))

    async def _adopt_groups(self) -> None:
        """Learn the groups the channels keep (after a restart, or over an old store)."""
        cursors, marks = await asyncio.gather(
            self._on_each_channel(ReadGroupCursors()), self._on_each_channel(ReadGroupMarks())
        )
        found = recovered_groups(self._config.channels, cursors, marks, time.monotonic())
        for name, group in found.items():
            self._groups.setdefault(name, group)

    def info(self) -> TopicInfo:
        """The configuration and channel actors."""
        return TopicInfo(self._config, tuple(self._channels), tuple(self._identities))

    async def ready(self) -> TopicInfo:
        """Wait until ``start`` has finished; then the same as ``info``."""
        await self._up()
        return self.info()

    async def purge(self) -> int:
        """Remove every element of every channel (``Topic.purge``); returns how many."""
        await self._up()
        removed = await self._on_each_channel(Purge())
        logger.info("topic %s purged: %d elements removed", self._config.name, sum(removed))
        return sum(removed)

    async def shutdown(self) -> None:
        """Stop background work and kill the channel actors (``Topic.destroy``)."""
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            self._expiry_task = None
        # Members' long polls and receives waiting for data answer "destroyed"
        # rather than dying with the actors (then the kill).
        self._destroyed = f"topic {self._config.name!r} was destroyed"
        for group in self._groups:
            self._polls.changed(group)
        ended = [
            handle.control.remote(EndReceives(f"topic {self._config.name!r} was destroyed"))
            for handle in self._channels
        ]
        await asyncio.wait([asyncio.ensure_future(_quietly(ref)) for ref in ended], timeout=2.0)
        for handle in self._channels:
            ray.kill(handle, no_restart=True)
        self._channels = []

    # -- readers ---------------------------------------------------------------------

    async def open_reader(self, reader_id: str, spec: ReaderSpec) -> None:
        """Open a subscriber on every channel (and remember it: a channel that
        restarts without a store gets its readers back from here). All or
        nothing: if a channel refuses it, the others close it again.

        Raises:
            InvalidArgumentError: a channel cannot load its filter, converter or
                resequence order.
            GroupNotFoundError: its group does not exist.
        """
        await self._up()
        await _on_every_channel(
            self._channels,
            lambda handle: handle.control.remote(OpenReader(reader_id, spec)),
            lambda handle: handle.control.remote(CloseReader(reader_id)),
        )
        self._readers[reader_id] = spec

    async def close_reader(self, reader_id: str) -> None:
        """Close a subscriber on every channel."""
        await self._up()
        self._readers.pop(reader_id, None)
        await self._on_each_channel(CloseReader(reader_id))

    # -- groups ------------------------------------------------------------------

    async def groups(self) -> list[str]:
        """Names of the topic's groups."""
        await self._up()
        return sorted(self._groups)

    async def ensure_group(
        self,
        group: str,
        start_latest: bool,
        mode: str = "owned",
        spec: SharedGroup | None = None,
        member_filter: bytes | None = None,
        reader: ReaderSpec | None = None,
    ) -> SharedGroup | None:
        """Create a durable group if it does not exist (it holds retention from now on).

        Args:
            group: Its name.
            start_latest: A new group starts at the tail (else at the head).
            mode: "owned" or "shared"; an existing group must have this mode.
            spec: A new shared group's definition (default: the defaults, with
                ``member_filter``).
            member_filter: The cloudpickled filter of the member about to join a
                shared group: it must be the group's (or None).
            reader: The spec of the member the group is made for: a new group is
                made only if every channel can open that reader.

        Returns:
            The shared group's definition (None for an owned group).

        Raises:
            GroupModeError: the group exists in the other mode.
            GroupFilterError: ``member_filter`` is not the shared group's filter.
            InvalidArgumentError: a channel cannot load the group's filter or the
                reader's functions; the group is not made.
        """
        await self._up()
        if spec is not None and member_filter not in (None, spec.filter):
            raise GroupFilterError(
                f"the member's filter is not the one given for shared group {group!r}"
            )
        if mode == "shared" and spec is None:
            spec = SharedGroup(group, filter=member_filter)
        shared = spec if mode == "shared" else None
        created = group not in self._groups
        state = await self._ensure_group(group, start_latest, shared, reader)
        if state.mode != mode:
            raise GroupModeError(f"group {group!r} is {state.mode}: it cannot be joined as {mode}")
        if state.shared is not None and member_filter not in (None, state.shared.filter):
            raise GroupFilterError(
                f"shared group {group!r} has another filter: a shared group's filter is "
                "part of its definition (give the same one, or none)"
            )
        if created:  # a refused group made none
            await self._ensure_dead_letter_topics([state])
        return state.shared

    async def ensure_dead_letter_topic(self, group: str) -> None:
        """Make a shared group's dead-letter topic again (a channel about to send it
        dead letters found it missing: destroyed since the group was made).

        Raises:
            GroupNotFoundError: no such group.
        """
        await self._up()
        await self._ensure_dead_letter_topics([self._group(group)])

    async def _ensure_dead_letter_topics(self, groups: Iterable[Group]) -> None:
        """Make the missing dead-letter topics of these groups (those shared with
        one). The control plane's one place where they are made: at the topic's
        start, a group's making, a restart, and a channel's call."""
        for state in groups:
            spec = state.shared
            if spec is None or spec.dead_letter in (None, self._config.name):
                continue  # this topic itself exists
            # Making a topic blocks on Ray calls: off this event loop.
            await asyncio.to_thread(
                ensure_dead_letter_topic, spec.dead_letter, self._config.namespace
            )

    async def _ensure_group(
        self,
        group: str,
        start_latest: bool,
        shared: SharedGroup | None = None,
        reader: ReaderSpec | None = None,
    ) -> Group:
        """The group, created (owned, or ``shared`` by that definition) if missing;
        all or nothing: if a channel refuses it (its filter, or ``reader``'s
        functions, cannot be loaded there), the others drop it again."""
        state = self._groups.get(group)
        if state is not None:
            return state
        async with self._lock(group):
            state = self._groups.get(group)
            if state is not None:
                return state
            await _on_every_channel(
                self._channels,
                lambda handle: handle.control.remote(
                    EnsureGroup(group, start_latest, shared, reader)
                ),
                # Unknown here, so new on every channel that made it.
                lambda handle: handle.control.remote(DestroyGroup(group)),
            )
            state = self._groups[group] = Group(group, self._config.channels, shared=shared)
            return state

    async def destroy_group(self, group: str) -> None:
        """Forget a group: its positions, members and the retention it held."""
        await self._up()
        async with self._lock(group):
            if self._groups.pop(group, None) is None:
                raise GroupNotFoundError(f"group {group!r} does not exist")
            await self._on_each_channel(DestroyGroup(group))
            for reader_id, spec in list(self._readers.items()):
                if spec.group == group:
                    del self._readers[reader_id]
            # Members waiting on a view hear that the group is gone.
            self._polls.changed(group)
            self._polls.forget(group)
            self._granted.pop(group, None)

    async def join(
        self, group: str, member_id: str, timeout: float, cooperative: bool = False
    ) -> MemberView:
        """Add a member (or rejoin one); returns once its assignment is in force.
        A ``cooperative`` member releases channels itself before they move
        (:meth:`release`)."""
        await self._up()
        async with self._lock(group):
            state = self._group(group)
            change = state.join(member_id, timeout, time.monotonic(), cooperative=cooperative)
            await self._apply(state, change)
            view = state.view(member_id)
        self._ensure_expiry_task()
        assert view is not None
        return view

    async def leave(self, group: str, member_id: str) -> None:
        """A member closed: its channels go to the others."""
        await self._up()
        async with self._lock(group):
            state = self._groups.get(group)
            if state is None:
                return
            change = state.leave(member_id, time.monotonic())
            if change is not None:
                await self._apply(state, change)
            self._polls.forget(group, member_id)

    async def release(self, group: str, member_id: str, channels: list[int]) -> MemberView | None:
        """A cooperative member committed what it handed out from ``channels`` that
        its group is moving: grant them to their new owners now. Returns its view
        (None: it is no longer a member)."""
        await self._up()
        async with self._lock(group):
            state = self._group(group)
            change = state.release(member_id, channels, time.monotonic())
            if change is not None:
                await self._apply(state, change)
            return state.view(member_id)

    async def heartbeat(
        self,
        group: str,
        member_id: str,
        known_version: int,
        touch: bool = True,
        idle: float = 0.0,
        wait: float = 0.0,
        cooperative: bool = False,
    ) -> MemberView | None:
        """Keep a member alive; return its view.

        Returns None when the member is no longer one (timed out): it must rejoin.
        With ``touch=False`` only the view is read (a ``channels`` read is no
        sign of life). ``idle``: seconds since the member's last receive, when
        its handle reports that from a background thread. ``wait``: if the
        view is still ``known_version``, wait up to that many seconds for it
        to change before answering (the member's long poll). ``cooperative``: the
        member releases channels itself (a restarted coordinator learns it here).
        """
        await self._up()
        state = self._group(group)
        now = time.monotonic() - max(0.0, idle)
        self._check_not_destroyed()
        if touch:
            alive = state.touch(member_id, now, cooperative=cooperative)
        else:
            alive = member_id in state.members
        if alive and wait > 0:
            await self._polls.wait(group, member_id, known_version, state.version, wait)
        await self._grants_landed(group)
        self._check_not_destroyed()
        state = self._group(group)  # GroupNotFoundError if destroyed meanwhile
        return state.view(member_id)

    async def _grants_landed(self, group: str) -> None:
        """Wait while a rebalance of ``group`` is granting leases (its view is already
        the new one): a receive sent on that view would find its channel not yet
        granted, be refused as not the owner, and answer "empty"."""
        while (granted := self._granted.get(group)) is not None and not granted.is_set():
            await granted.wait()

    def _check_not_destroyed(self) -> None:
        if self._destroyed is not None:
            raise TopicNotFoundError(self._destroyed)

    async def _apply(self, state: Group, change: Rebalance) -> None:
        """Push new leases to the channels, then the new views (to every channel
        and to the members' long polls)."""
        if change.grants:
            granted = self._granted[state.name] = asyncio.Event()
            try:
                await asyncio.gather(
                    *(
                        self._channels[channel].control.remote(Grant(state.name, lease))
                        for channel, lease in change.grants.items()
                    )
                )
            finally:
                granted.set()
            self._rebalances.inc(tags={"group": state.name})
            logger.info(
                "group %s of %s: generation %d, channels moved: %s",
                state.name,
                self._config.name,
                state.generation,
                {
                    channel: lease.member_id if lease else None
                    for channel, lease in change.grants.items()
                },
            )
        await self._push_views(state, change.members)

    async def _push_views(self, state: Group, members: tuple[str, ...]) -> None:
        """Tell every channel the new views of ``members`` (any channel may host a
        receive session of theirs), then wake the members' long polls."""
        # None: the member left or timed out (a channel drops its sessions there).
        views = {
            member_id: state.channels_of(member_id) if member_id in state.members else None
            for member_id in members
        }
        if views:
            results = await asyncio.gather(
                *(
                    handle.control.remote(
                        UpdateViews(state.name, state.version, views, state.generation)
                    )
                    for handle in self._channels
                ),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, Exception):
                    logger.warning("could not update members' sessions: %s", result)
        polling = self._polls.changed(state.name)
        await self._polls.caught_up(
            state.name,
            polling & set(members) & set(state.members),
            state.version,
            _CATCH_UP_TIMEOUT,
        )

    def _ensure_expiry_task(self) -> None:
        """Start the expiry loop (once), or wake it: a member joined, whose timeout may
        come before the ones it sleeps until."""
        self._joined.set()
        if self._expiry_task is None or self._expiry_task.done():
            self._expiry_task = asyncio.ensure_future(self._expire_members())

    async def _expire_members(self) -> None:
        """Background: remove members that stopped heartbeating (and move channels
        whose hand-over ran out), and rebalance. It sleeps until the first moment
        a member could time out (a heartbeat only moves that moment later), or
        until a member joins."""
        while True:
            due = [
                deadline
                for group in self._groups.values()
                if (deadline := group.deadline()) is not None
            ]
            delay = max(0.0, min(due) - time.monotonic()) + _EXPIRY_SLACK if due else None
            self._joined.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._joined.wait(), delay)
            for state in list(self._groups.values()):
                if not state.members:
                    continue
                async with self._lock(state.name):
                    expired, change = state.expire(time.monotonic())
                    if change is None:
                        continue
                    logger.info(
                        "group %s of %s: members timed out: %s (or a hand-over ran out)",
                        state.name,
                        self._config.name,
                        expired,
                    )
                    try:
                        await self._apply(state, change)
                    except Exception:
                        logger.exception("rebalance after a timeout failed")
                    for member_id in expired:
                        self._polls.forget(state.name, member_id)

    # -- reset -------------------------------------------------------------------

    async def reset_group(
        self, group: str, targets: dict[int, int | float | str]
    ) -> dict[int, int]:
        """Move a group's read and commit positions on the given channels, all or nothing.

        Args:
            group: The group.
            targets: Per channel: a sequence ("next is the first after it"), a
                time stamp (float), ``"earliest"`` or ``"latest"``.

        Returns:
            Per channel, the position set (clamped to ``[head - 1, tail]``).
        """
        await self._up()
        state = self._group(group)
        if state.resetting:
            raise ResetInProgressError(f"a reset of group {group!r} is already running")
        for channel in targets:
            if not 0 <= channel < self._config.channels:
                raise InvalidArgumentError(f"channel {channel} does not exist")
        state.resetting = True
        try:
            async with self._lock(group):
                return await self._reset(state, targets)
        finally:
            state.resetting = False

    async def _reset(self, state: Group, targets: dict[int, int | float | str]) -> dict[int, int]:
        calls = {
            channel: self._channels[channel].control.remote(ResetGroup(state.name, target))
            for channel, target in targets.items()
        }
        outcomes = await asyncio.gather(*calls.values(), return_exceptions=True)
        done = dict(zip(calls, outcomes, strict=True))
        failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        if failed:
            await asyncio.gather(
                *(
                    self._channels[channel].control.remote(RestoreGroup(state.name, outcome[1]))
                    for channel, outcome in done.items()
                    if not isinstance(outcome, BaseException)
                ),
                return_exceptions=True,
            )
            error = failed[0]
            if isinstance(error, TopicError):
                raise error
            raise TopicError(f"reset of group {state.name!r} failed; nothing changed: {error}")
        positions = {channel: outcome[0] for channel, outcome in done.items()}
        cursors = await asyncio.gather(
            *(self._channels[channel].control.remote(ReadGroupCursors()) for channel in positions)
        )
        for channel, cursor in zip(positions, cursors, strict=True):
            state.jumps[channel] = cursor[state.name]["jumps"]
        state.version += 1
        await self._push_views(state, tuple(state.members))
        logger.info("group %s of %s reset: %s", state.name, self._config.name, positions)
        return positions

    # -- describe ----------------------------------------------------------------

    async def describe(self) -> dict[str, Any]:
        """Channels' figures and groups' membership, in one snapshot per channel.

        A membership change still under way (its members not yet told) is
        waited for: what describe shows, the members have heard of.
        """
        await self._up()
        channels = await asyncio.gather(
            *(self._describe_channel(c, handle) for c, handle in enumerate(self._channels))
        )
        groups = {}
        for name, state in sorted(self._groups.items()):
            async with self._lock(name):
                pass  # a rebalance or reset of this group in flight finishes first
            now = time.monotonic()
            groups[name] = {
                "mode": state.mode,
                "spec": state.shared,
                "generation": state.generation,
                "members": {
                    member_id: {
                        "generation": member.generation,
                        "channels": sorted(state.channels_of(member_id)),
                        "idle": now - member.last_seen,
                        "timeout": member.timeout,
                    }
                    for member_id, member in sorted(state.members.items())
                },
            }
        return {"config": self._config, "channels": list(channels), "groups": groups}

    async def _describe_channel(self, channel: int, handle: Any) -> dict[str, Any]:
        """A channel's figures, or what is known of it while it does not answer."""
        try:
            return await asyncio.wait_for(handle.describe.remote(), _IDENTITY_TIMEOUT)
        except Exception as error:  # restarting (its calls wait), or gone
            known = self._identities[channel] if channel < len(self._identities) else {}
            return {
                **known,
                "channel": channel,
                "state": "unreachable",
                "failure": f"{type(error).__name__}: {error}",
                "head": None,
                "tail": None,
                "size": None,
                "capacity": self._config.capacity,
                "groups": {},
            }

    # -- channels that restart ------------------------------------------------------

    async def channel_restarted(
        self, topic_id: str, channel: int, identity: dict[str, Any]
    ) -> None:
        """A channel came back after its process died: it says so itself, as it
        starts (no polling of idle channels). One without a store waits for
        its groups: it gets them here. Its siblings take back at once what its
        old receive sessions had taken from them.

        Args:
            topic_id: The channel's topic (an announcement for another topic of
                this name, made since, is ignored).
            channel: The channel.
            identity: Its identity as it started (epoch, state, pid, ...).
        """
        await self._up()
        if topic_id != self._config.topic_id or not 0 <= channel < len(self._channels):
            return
        handle = self._channels[channel]
        if identity["state"] == "recovering":
            try:
                identity = await self._seed(channel, handle)
            except Exception as error:  # it asks again while calls wait for it
                logger.warning("channel %d could not be restored yet: %s", channel, error)
                return
            await self._assign_unowned()
        known = self._identities[channel]
        self._identities[channel] = identity
        if identity["epoch"] != known.get("epoch"):
            await self._tell_siblings(channel)

    async def _assign_unowned(self) -> None:
        """Channels that came back from a restart without a store while this
        coordinator was down (it could not learn their owners) go to members."""
        for state in list(self._groups.values()):
            async with self._lock(state.name):
                change = state.assign_unowned()
                if change is not None:
                    await self._apply(state, change)

    async def _tell_siblings(self, host: int) -> None:
        """Channel ``host`` restarted: what its sessions took elsewhere is read again."""
        others = [handle for c, handle in enumerate(self._channels) if c != host]
        results = await asyncio.gather(
            *(
                asyncio.wait_for(handle.control.remote(HostRestarted(host)), _IDENTITY_TIMEOUT)
                for handle in others
            ),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, Exception):
                logger.warning("telling channels that %d restarted: %s", host, result)

    async def _seed(self, channel: int, handle: Any) -> dict[str, Any]:
        """Give a channel that restarted without a store its groups and leases back."""
        old_epoch = int(self._identities[channel].get("epoch", 1))
        groups = {}
        views = {}
        # No group lock: a rebalance holding one may be waiting for this very
        # channel. Groups hold their new leases before they are pushed, so what
        # is read here is never older than what the channel gets later.
        for name, state in self._groups.items():
            groups[name] = (state.leases.get(channel), state.version, state.generation)
            views[name] = {
                member: (state.version, state.channels_of(member)) for member in state.members
            }
        shared = {name: state.shared for name, state in self._groups.items() if state.shared}
        identity = await handle.seed.remote(old_epoch, groups, views, dict(self._readers), shared)
        logger.warning(
            "channel %d of %s restarted without a store: epoch %d -> %d, its elements are lost",
            channel,
            self._config.name,
            old_epoch,
            identity["epoch"],
        )
        return identity

    # -- helpers -------------------------------------------------------------------

    def _group(self, group: str) -> Group:
        state = self._groups.get(group)
        if state is None:
            raise GroupNotFoundError(f"group {group!r} does not exist")
        return state

    def _lock(self, group: str) -> asyncio.Lock:
        lock = self._locks.get(group)
        if lock is None:
            lock = self._locks[group] = asyncio.Lock()
        return lock


async def _on_every_channel(
    channels: list[Any], call: Callable[[Any], Any], undo: Callable[[Any], Any]
) -> None:
    """``call`` on every channel, all or nothing: if one refuses, ``undo`` on those
    that did; the first refusal is raised as its own typed error."""
    outcomes = await asyncio.gather(*map(call, channels), return_exceptions=True)
    failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    if failed:
        done = [
            handle
            for handle, outcome in zip(channels, outcomes, strict=True)
            if not isinstance(outcome, BaseException)
        ]
        await asyncio.gather(*map(undo, done), return_exceptions=True)
        raise _typed(failed[0])


def _typed(error: BaseException) -> BaseException:
    """A channel's error as this coordinator raises it: a raytopic error as itself
    (not in Ray's wrapper, so the caller unwraps it once)."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, TopicError) else error


async def _quietly(ref: Any) -> None:
    with contextlib.suppress(Exception):  # a channel already gone needs nothing
        await ref


def _rebalance_counter(topic: str) -> Any:
    """``raytopic_rebalances`` (Ray metric, tagged topic and group): each change of
    a group's channel owners. A no-op outside Ray (the class used in-process)."""
    if not ray.is_initialized():
        return _NoCounter()
    from ray.util.metrics import Counter

    counter = Counter(
        "raytopic_rebalances",
        description="Changes of a group's channel owners",
        tag_keys=("topic", "group"),
    )
    counter.set_default_tags({"topic": topic})
    return counter


class _NoCounter:
    def inc(self, value: float = 1.0, tags: dict[str, str] | None = None) -> None:
        pass
