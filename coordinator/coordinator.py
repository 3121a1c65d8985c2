"""The coordinator actor: one per topic, never on the data path.

It creates the topic's channel actors and introduces them to each other,
keeps the topic's configuration, and runs its subscriber groups: membership
(join, leave, heartbeats, timeouts on a monotonic clock), sticky channel
assignment with leases pushed to the channels before a join returns, group
resets (fenced, all or nothing), and ``describe``.

Background work is one named coroutine, ``_expire_members``, started on the
first join and stopped by ``shutdown``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import ray

from raytopic.actors.channel import channel_actor_class
from raytopic.config import TopicConfig
from raytopic.coordinator import notices
from raytopic.coordinator.groups import Group, MemberView, Rebalance
from raytopic.errors import (
    GroupNotFoundError,
    InvalidArgumentError,
    ResetInProgressError,
    TopicError,
)
from raytopic.naming import channel_actor_name

logger = logging.getLogger(__name__)

__all__ = ["CoordinatorActor", "TopicInfo"]

_ACTOR_CREATION_TIMEOUT = 30.0


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
        self._locks: dict[str, asyncio.Lock] = {}
        self._homes: dict[str, int] = {}  # member id -> channel hosting its session
        self._started = asyncio.Event()
        self._starting = False
        self._expiry_task: asyncio.Task[None] | None = None

    # -- life cycle ------------------------------------------------------------

    async def start(self) -> TopicInfo:
        """Create the channel actors (once) and the groups named at creation."""
        if self._starting:
            await self._started.wait()
            return self.info()
        self._starting = True
        config = self._config
        actor_class = channel_actor_class()
        # All at once: each actor is a process that takes a while to start.
        handles = await asyncio.gather(
            *(
                _create_named(
                    actor_class.options(
                        name=channel_actor_name(config.name, channel),
                        namespace=config.namespace,
                        lifetime="detached",
                        num_cpus=0,
                        max_concurrency=100_000,
                        max_restarts=0,
                    ),
                    config,
                    channel,
                )
                for channel in range(config.channels)
            )
        )
        self._channels = list(handles)
        self._identities = list(
            await asyncio.gather(*(handle.attach.remote(handles) for handle in handles))
        )
        for group in config.groups:
            await self._ensure_group(group, start_latest=False)
        self._started.set()
        return self.info()

    def info(self) -> TopicInfo:
        """The configuration and channel actors."""
        return TopicInfo(self._config, tuple(self._channels), tuple(self._identities))

    async def ready(self) -> TopicInfo:
        """Wait until ``start`` has finished; then the same as ``info``."""
        await self._started.wait()
        return self.info()

    async def shutdown(self) -> None:
        """Stop background work and kill the channel actors (``Topic.destroy``)."""
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            self._expiry_task = None
        for handle in self._channels:
            ray.kill(handle, no_restart=True)
        self._channels = []
        for group in self._groups:
            notices.forget_group(self._config.namespace, self._config.name, group)

    # -- groups ------------------------------------------------------------------

    def groups(self) -> list[str]:
        """Names of the topic's groups."""
        return sorted(self._groups)

    async def ensure_group(self, group: str, start_latest: bool) -> None:
        """Create a durable group if it does not exist (it holds retention from now on)."""
        await self._started.wait()
        await self._ensure_group(group, start_latest)

    async def _ensure_group(self, group: str, start_latest: bool) -> None:
        if group in self._groups:
            return
        async with self._lock(group):
            if group in self._groups:
                return
            await asyncio.gather(
                *(handle.ensure_group.remote(group, start_latest) for handle in self._channels)
            )
            self._groups[group] = Group(group, self._config.channels)

    async def destroy_group(self, group: str) -> None:
        """Forget a group: its positions, members and the retention it held."""
        async with self._lock(group):
            if self._groups.pop(group, None) is None:
                raise GroupNotFoundError(f"group {group!r} does not exist")
            await asyncio.gather(*(handle.destroy_group.remote(group) for handle in self._channels))
            # Members find out on their next receive (their view version moved).
            self._publish(group, -1)

    async def join(self, group: str, member_id: str, timeout: float, home: int = -1) -> MemberView:
        """Add a member (or rejoin one); returns once its assignment is in force.

        ``home`` is the channel hosting the member's receive session (-1: not
        open yet; see ``set_home``).
        """
        async with self._lock(group):
            state = self._group(group)
            change = state.join(member_id, timeout, home, time.monotonic())
            if home >= 0:
                self._homes[member_id] = home
            await self._apply(state, change)
            view = state.view(member_id)
        self._ensure_expiry_task()
        assert view is not None
        return view

    async def set_home(self, group: str, member_id: str, home: int) -> None:
        """Record where a member's session lives, and bring it up to date."""
        async with self._lock(group):
            state = self._group(group)
            self._homes[member_id] = home
            await self._push_views(state, (member_id,))

    async def leave(self, group: str, member_id: str) -> None:
        """A member closed: its channels go to the others."""
        async with self._lock(group):
            state = self._groups.get(group)
            if state is None:
                return
            change = state.leave(member_id)
            if change is not None:
                await self._apply(state, change)
            self._homes.pop(member_id, None)

    def heartbeat(
        self,
        group: str,
        member_id: str,
        known_version: int,
        touch: bool = True,
        idle: float = 0.0,
    ) -> MemberView | None:
        """Keep a member alive; return its view.

        Returns None when the member is no longer one (timed out): it must rejoin.
        With ``touch=False`` only the view is read (a ``channels`` read is no
        sign of life). ``idle``: seconds since the member's last receive, when
        its handle reports that from a background thread.
        """
        state = self._groups.get(group)
        if state is None:
            raise GroupNotFoundError(f"group {group!r} does not exist")
        now = time.monotonic() - max(0.0, idle)
        alive = state.touch(member_id, now) if touch else member_id in state.members
        if not alive:
            return None
        return state.view(member_id)

    async def _apply(self, state: Group, change: Rebalance) -> None:
        """Push new leases to the channels, then new views to the members' homes."""
        if change.grants:
            await asyncio.gather(
                *(
                    self._channels[channel].grant.remote(state.name, lease)
                    for channel, lease in change.grants.items()
                )
            )
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
        self._publish(state.name, state.version)

    async def _push_views(self, state: Group, members: tuple[str, ...]) -> None:
        pushes = []
        for member_id in members:
            home = self._homes.get(member_id)
            if home is None:
                continue
            leases = state.channels_of(member_id) if member_id in state.members else {}
            pushes.append(
                self._channels[home].update_session.remote(member_id, state.version, leases)
            )
        results = await asyncio.gather(*pushes, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                logger.warning("could not update a member's session: %s", result)

    def _ensure_expiry_task(self) -> None:
        if self._expiry_task is None or self._expiry_task.done():
            self._expiry_task = asyncio.ensure_future(self._expire_members())

    async def _expire_members(self) -> None:
        """Background: remove members that stopped heartbeating, and rebalance."""
        while True:
            timeouts = [
                member.timeout
                for group in self._groups.values()
                for member in group.members.values()
            ]
            await asyncio.sleep(min([0.5, *(timeout / 4 for timeout in timeouts)]))
            for state in list(self._groups.values()):
                if not state.members:
                    continue
                async with self._lock(state.name):
                    expired, change = state.expire(time.monotonic())
                    if change is None:
                        continue
                    logger.info(
                        "group %s of %s: members timed out: %s",
                        state.name,
                        self._config.name,
                        expired,
                    )
                    try:
                        await self._apply(state, change)
                    except Exception:
                        logger.exception("rebalance after a timeout failed")
                    for member_id in expired:
                        self._homes.pop(member_id, None)

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
            channel: self._channels[channel].reset_group.remote(state.name, target)
            for channel, target in targets.items()
        }
        outcomes = await asyncio.gather(*calls.values(), return_exceptions=True)
        done = dict(zip(calls, outcomes, strict=True))
        failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        if failed:
            await asyncio.gather(
                *(
                    self._channels[channel].restore_group.remote(state.name, outcome[1])
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
            *(self._channels[channel].group_cursors.remote() for channel in positions)
        )
        for channel, cursor in zip(positions, cursors, strict=True):
            state.jumps[channel] = cursor[state.name]["jumps"]
        state.version += 1
        await self._push_views(state, tuple(state.members))
        self._publish(state.name, state.version)
        logger.info("group %s of %s reset: %s", state.name, self._config.name, positions)
        return positions

    # -- describe ----------------------------------------------------------------

    async def describe(self) -> dict[str, Any]:
        """Channels' figures and groups' membership, in one snapshot per channel."""
        channels = await asyncio.gather(*(handle.describe.remote() for handle in self._channels))
        now = time.monotonic()
        groups = {}
        for name, state in sorted(self._groups.items()):
            groups[name] = {
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

    # -- helpers -------------------------------------------------------------------

    def _publish(self, group: str, version: int) -> None:
        """Let members see cheaply that their group's view changed (see notices)."""
        try:
            notices.publish_version(self._config.namespace, self._config.name, group, version)
        except Exception as error:  # members then learn it from their heartbeats
            logger.warning("could not publish the version of group %s: %s", group, error)

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


async def _create_named(options: Any, *args: Any) -> Any:
    """Create a named actor, retrying while a destroyed predecessor still holds the name."""
    deadline = time.monotonic() + _ACTOR_CREATION_TIMEOUT
    while True:
        try:
            handle = options.remote(*args)
            await handle.ping.remote()
            return handle
        except ValueError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
