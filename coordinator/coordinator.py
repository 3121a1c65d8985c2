"""The coordinator actor: one per topic, never on the data path.

It introduces the topic's channel actors to each other (they are created
with it: ``raytopic.coordinator.launch``), keeps the topic's configuration, and
runs its subscriber groups, deciding who consumes each (members, or one stream
that holds the whole group: ``ClaimStream``): membership
(join, leave, heartbeats, timeouts on a monotonic clock), sticky channel
assignment with leases pushed to the channels before a join returns, group
resets (fenced, all or nothing), and ``DescribeTopic``.

Members learn of a change to their group's view without asking on their
data path: every view change is pushed to every channel (so the receive
sessions they host read the new channels at once), and each member keeps
one ``Heartbeat`` request waiting here that returns as soon as its group's
view changes (a long poll; see ``raytopic.client.membership``).

Background work is one named coroutine, stopped by ``DestroyTopic``:
``GroupService._expire_members`` (started on the first join), which sleeps until a member
could time out. Idle channels are never polled: a channel that restarts says
so itself (``ChannelRestarted``), and one without a store gets its groups
back then.

**Restarts**: the coordinator keeps nothing the channels do not: a restarted
coordinator rebuilds its groups, leases, members, streams, versions and
generations from the channels (``recovered_groups``) before it answers any call.

The actor is a shell with one entry, ``request``: every call is a typed request
(``raytopic.core.protocol.coordinator``), dispatched once on its type. Every
call to the channels goes through its ``ChannelFleet``
(``raytopic.coordinator.fleet``: one timeout and error policy); groups, readers,
membership, rebalances, expiry and resets are the ``GroupService``'s, channel
restarts the ``ChannelRestarts``' (neither holds a Ray handle); here they are
wired, and Ray is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import ray

from raytopic.coordinator.channel_restarts import ChannelRestarts
from raytopic.coordinator.fleet import END_NOTICE_TIMEOUT, NOTICE_TIMEOUT, RayChannelFleet
from raytopic.coordinator.group_service import GroupService
from raytopic.coordinator.groups import Group
from raytopic.coordinator.launch import (
    ensure_dead_letter_topic,
    found_or_made_channels,
    named_channel,
)
from raytopic.core.actor_logs import log_info_here
from raytopic.core.config import TopicConfig
from raytopic.core.errors import (
    GroupFilterError,
    GroupModeError,
    InvalidArgumentError,
    StoreError,
    TopicError,
)
from raytopic.core.incarnation import was_restarted
from raytopic.core.naming import channel_actor_name
from raytopic.core.protocol import (
    COORDINATOR_REQUESTS,
    AwaitTopic,
    ChannelRestarted,
    ClaimStream,
    CloseReader,
    CoordinatorRequest,
    DeclareGroup,
    DescribeTopic,
    DestroyGroup,
    DestroyTopic,
    EndReceives,
    EndStream,
    EndTopic,
    EnsureDeadLetterTopic,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    MarkDestroyed,
    OpenReader,
    OpenStore,
    Purge,
    PurgeTopic,
    ReadGroupLag,
    ReadGroupNames,
    ReadOpeningError,
    ReadStoredTopic,
    ReadTopicInfo,
    ReadTopicLag,
    ReleaseChannels,
    RemoveStore,
    ResetGroupPositions,
    StartTopic,
    StreamHeartbeat,
)
from raytopic.core.shared_group import SharedGroup
from raytopic.core.steps import run_awaiting
from raytopic.core.topic_record import opening

logger = logging.getLogger(__name__)

START_GRACE = 20.0
"""Seconds a new coordinator waits for its creator's StartTopic before it starts its
topic itself (its creator died meanwhile). The creator sends it right after making the
channel actors (named, not waited for): well under a second, a few under heavy load."""

__all__ = ["CoordinatorActor", "TopicInfo"]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """What a Topic handle needs: the configuration and the channel actors."""

    config: TopicConfig
    channels: tuple[Any, ...]
    identities: tuple[dict[str, Any], ...]


class CoordinatorActor:
    """Coordinator of one topic (a shell over ``GroupService`` and ``ChannelRestarts``).

    **Ordering**: membership changes and resets of one group run one at a
    time; a second reset of a group while one runs fails at once.

    **Delivery**: a member that joins gets its channels only after every
    channel has the new lease, so two live members never both own a channel.
    """

    def __init__(self, config: TopicConfig) -> None:
        log_info_here()
        self._config = config
        self._wire(RayChannelFleet(()), [])
        self._started = asyncio.Event()
        self._starting = False
        self._start_error: BaseException | None = None  # the topic could not be made
        self._ended = False  # every wait at the topic ended: a destroy's first step
        self._restarted = was_restarted()
        self._made_at = time.monotonic()
        self._rebalances = _rebalance_counter(config.name)

    def __repr__(self) -> str:
        # Ray names the actor's output after it (as ChannelActor's).
        return f"CoordinatorActor(topic={self._config.name!r})"

    def _wire(self, fleet: RayChannelFleet, identities: list[dict[str, Any]]) -> None:
        """Build the services over ``fleet`` (its channels are known once the
        coordinator starts or recovers)."""
        self._fleet = fleet
        self._groups = GroupService(
            self._config.name,
            self._config.channels,
            fleet,
            time.monotonic,
            on_rebalance=lambda group: self._rebalances.inc(tags={"group": group}),
        )
        self._restarts = ChannelRestarts(self._config.name, fleet, self._groups, identities)

    # -- the entry ------------------------------------------------------------------

    async def request(self, request: CoordinatorRequest) -> Any:
        """Serve a request (see ``raytopic.core.protocol.coordinator``). Every request
        but the topic's start, its info and its destruction first waits until the
        coordinator serves (a restarted one recovers first).

        Raises:
            InvalidArgumentError: not a coordinator request.
            TopicError: the topic could not be made (a channel's store cannot be
                opened; its channels are gone), and what each request names.
        """
        if not isinstance(request, COORDINATOR_REQUESTS):
            raise InvalidArgumentError(f"{type(request).__name__} is not a coordinator request")
        match request:
            case StartTopic(channels):
                return await self._start(list(channels))
            case ReadTopicInfo():
                return self._info()
            case EndTopic():
                return await self._end()
            case DestroyTopic():
                return await self._destroy()
        await self._up()
        groups = self._groups
        match request:
            case AwaitTopic():
                return self._info()
            case PurgeTopic():
                return await self._purge()
            case DescribeTopic():
                return await self._describe()
            case ChannelRestarted(topic_id, channel, identity):
                if topic_id == self._config.topic_id and 0 <= channel < self._fleet.size:
                    await self._restarts.restarted(channel, identity)
            case OpenReader(reader_id, spec):
                await groups.open_reader(reader_id, spec)
            case CloseReader(reader_id):
                await groups.close_reader(reader_id)
            case ReadGroupNames():
                return sorted(groups.groups)
            case DeclareGroup():
                return await self._declare_group(request)
            case EnsureDeadLetterTopic(group):
                await self._ensure_dead_letter_topics([groups.group(group)])
            case DestroyGroup(group):
                await groups.destroy(group)
            case ResetGroupPositions(group, targets):
                return await groups.reset(group, targets)
            case ReadTopicLag(group):
                return await self._lag(group)
            case JoinGroup(group, reader_id, timeout, cooperative, origin):
                return await groups.join(group, reader_id, timeout, cooperative, origin)
            case LeaveGroup(group, reader_id):
                await groups.leave(group, reader_id)
            case ReleaseChannels(group, reader_id, channels):
                return await groups.release(group, reader_id, list(channels))
            case Heartbeat(group, reader_id, version, touch, idle, wait, cooperative):
                return await groups.heartbeat(
                    group, reader_id, version, touch, idle, wait, cooperative
                )
            case ClaimStream(group, stream_id, timeout, start_latest):
                await groups.ensure(group, start_latest)
                return await groups.claim_stream(group, stream_id, timeout)
            case StreamHeartbeat(group, stream_id, timeout):
                return groups.stream_heartbeat(group, stream_id, timeout)
            case EndStream(group, stream_id):
                await groups.end_stream(group, stream_id)
        return None

    # -- life cycle ------------------------------------------------------------

    async def _start(self, channels: list[Any]) -> TopicInfo:
        """Take the topic's channel actors (created with this one, see
        ``raytopic.coordinator.launch``), introduce them to each other, and make
        the groups named at creation. Once; later calls wait for the first (Ray's
        retry on this coordinator restarted makes the groups it finds missing).

        Raises:
            TopicError: the topic cannot be made (a channel's store cannot be
                opened); its channels are gone.
        """
        if self._starting or self._restarted:
            await self._up()
            if self._restarted:
                # Ray retried the creator's StartTopic here: this coordinator died while
                # the topic was made, maybe before its groups were (they would be missing).
                await self._make_configured_groups()
                await self._ensure_dead_letter_topics(list(self._groups.groups.values()))
            return self._info()
        self._starting = True
        await self._begin(channels)
        return self._info()

    async def _begin(self, channels: list[Any] | None) -> None:
        """Start the topic on ``channels`` (None: its channels by name, as an orphan
        finds them); see :meth:`_start`."""
        try:
            if channels is None:
                channels = await run_awaiting(found_or_made_channels(self._config))
            await self._start_channels(channels)
        except BaseException as error:
            # The topic is not made: its channels go, and callers waiting for it
            # hear why (its creator removes this coordinator).
            self._fleet.kill()
            self._start_error = error
            self._started.set()
            raise
        self._started.set()
        # Once it serves: a dead-letter topic's making waits for nothing of this one.
        await self._ensure_dead_letter_topics(list(self._groups.groups.values()))

    async def _start_channels(self, handles: list[Any]) -> None:
        """Introduce the channels to each other, open their stores and make the
        configured groups."""
        self._wire(RayChannelFleet(handles), [])
        self._restarts.identities[:] = await self._fleet.attach(self._config.name)
        await self._refuse_failed_channels()
        await self._open_stores()
        await self._groups.adopt()  # a reopened topic's, from its stores
        await self._make_configured_groups()

    async def _make_configured_groups(self) -> None:
        """Make the groups named at creation that are missing."""
        for group in self._config.groups:
            if isinstance(group, SharedGroup):
                await self._groups.ensure(group.name, False, group)
            else:
                await self._groups.ensure(group, start_latest=False)

    async def _refuse_failed_channels(self) -> None:
        """A topic whose channels cannot open their stores is not made: ``start``
        raises the first one's typed error."""
        failed = [
            channel
            for channel, identity in enumerate(self._restarts.identities)
            if identity["state"] == "failed"
        ]
        if not failed:
            return
        error = await self._fleet.ask(failed[0], ReadOpeningError())
        raise error if isinstance(error, TopicError) else TopicError(str(error))

    async def _open_stores(self) -> None:
        """New channels with a store begin once every one's store was read (see
        ``raytopic.core.topic_record``): the topic in them is reopened under its id,
        wiped first if it was destroyed, or refused with TopicSettingsError (nothing
        written) if it was made with other fixed settings."""
        if not any(identity["state"] == "opening" for identity in self._restarts.identities):
            return
        records = await self._fleet.ask_each(ReadStoredTopic())
        plan = opening(self._config, records)
        self._config = dataclasses.replace(self._config, topic_id=plan.topic_id)
        self._restarts.identities[:] = await self._fleet.ask_each(
            OpenStore(plan.topic_id, plan.wipe)
        )

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
                await self._ensure_dead_letter_topics(list(self._groups.groups.values()))
            except Exception as error:  # the channels ask again when they send
                logger.warning("dead-letter topics of %s not made: %s", self._config.name, error)
        elif not self._restarted and not self._starting:
            await self._start_if_orphaned()
        await self._started.wait()
        if self._start_error is not None:
            raise self._start_error

    async def _start_if_orphaned(self) -> None:
        """Wait for the creator's StartTopic up to ``START_GRACE`` after this
        coordinator was made; past it, its creator died between making the topic's
        actors and starting them (a driver or an actor killed there): the topic
        starts itself from its channels by name (making those its creator did not),
        so its name is not held for ever by a topic nobody can use."""
        left = self._made_at + START_GRACE - time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._started.wait(), max(left, 0.0))
        if self._started.is_set() or self._starting:
            return
        self._starting = True  # a StartTopic arriving now waits for this start
        logger.warning(
            "topic %s was not started by its creator within %.0f s; it starts itself",
            self._config.name,
            START_GRACE,
        )
        with contextlib.suppress(Exception):  # callers hear it as the start's error
            await self._begin(None)

    async def _recover(self) -> None:
        """Rebuild this restarted coordinator from its channels (named, detached:
        they outlive it)."""
        config = self._config
        fleet = RayChannelFleet(
            [
                ray.get_actor(channel_actor_name(config.name, channel), namespace=config.namespace)
                for channel in range(config.channels)
            ]
        )
        self._wire(fleet, await fleet.identities())
        # The topic's id is its stores' (a reopened topic's), as its channels say.
        topic_id = self._restarts.identities[0].get("topic_id", config.topic_id)
        self._config = dataclasses.replace(config, topic_id=topic_id)
        await self._open_stores()  # it died while the topic was being made
        await self._groups.adopt()
        await self._groups.adopt_readers()
        await self._restarts.recover()
        if any(group.members or group.stream for group in self._groups.groups.values()):
            self._groups.watch_expiry()
        logger.info(
            "coordinator of %s recovered: groups %s", config.name, sorted(self._groups.groups)
        )

    def _info(self) -> TopicInfo:
        """The configuration and channel actors."""
        return TopicInfo(self._config, self._fleet.handles, tuple(self._restarts.identities))

    async def _purge(self) -> int:
        """Remove every element of every channel (``Topic.purge``); returns how many."""
        removed = sum(await self._fleet.ask_each(Purge()))
        logger.info("topic %s purged: %d elements removed", self._config.name, removed)
        return removed

    async def _destroy(self) -> None:
        """Stop background work, remove the stored data and kill the channel actors
        (``Topic.destroy``). A retry (after this coordinator restarted) does it again.

        Every channel's store first records that the topic was destroyed; only then
        does any remove its data, so a destroy stopped midway (every actor gone)
        never leaves half a topic to be reopened: a topic made over those stores
        finishes it (see ``raytopic.core.topic_record``).

        Raises:
            StoreError: a store could not be marked or removed (the actors are gone
                all the same; the message says what is left).
        """
        if not self._ended:
            await self._end()
        try:
            if self._config.store is not None:
                await self._remove_stores()
        finally:
            self._fleet.kill()

    async def _end(self) -> None:
        """End every wait at the topic, its actors left up (see ``EndTopic``): members'
        long polls and receives waiting for data answer "destroyed" rather than dying
        with the actors."""
        reason = f"topic {self._config.name!r} was destroyed"
        if not self._fleet.size:  # restarted: it has not recovered, nor does it need to
            self._fleet = RayChannelFleet(self._channels_by_name())
        self._groups.end(reason)
        await self._fleet.tell(EndReceives(reason), timeout=END_NOTICE_TIMEOUT)
        self._ended = True

    async def _remove_stores(self) -> None:
        name = self._config.name
        if self._fleet.size < self._config.channels:  # one is gone: its store cannot be marked
            raise StoreError(
                f"topic {name!r} is destroyed, but its stores were left as they were (a "
                "channel actor is gone); a topic made of that name over them reopens it"
            )
        try:
            await self._fleet.ask_each(MarkDestroyed())
        except Exception as error:
            raise StoreError(
                f"topic {name!r} is destroyed, but its stores were left as they were "
                f"(a channel could not mark its store: {error}); a topic made of that "
                "name over them reopens it"
            ) from error
        try:
            await self._fleet.ask_each(RemoveStore())
        except Exception as error:
            raise StoreError(
                f"topic {name!r} is destroyed, but a channel's store could not be removed "
                f"({error}); it is marked destroyed: a topic made of that name over it "
                "removes it first"
            ) from error

    def _channels_by_name(self) -> list[Any]:
        """The channel actors still alive, found by name."""
        found = (named_channel(self._config, c) for c in range(self._config.channels))
        return [actor for actor in found if actor is not None]

    # -- groups ------------------------------------------------------------------

    async def _declare_group(self, request: DeclareGroup) -> SharedGroup | None:
        """Make a durable group unless it exists (it holds retention from then on);
        see ``DeclareGroup``. Returns the shared group's definition (None: owned).

        Raises:
            GroupModeError: the group exists in the other mode.
            GroupFilterError: the member's filter is not the shared group's filter.
            GroupNotFoundError: no such group, and not ``create``.
            InvalidArgumentError: a channel cannot load the group's filter or the
                reader's functions; the group is not made.
        """
        group, mode, spec, member_filter = (
            request.group,
            request.mode,
            request.spec,
            request.member_filter,
        )
        if not request.create:
            self._groups.group(group)  # GroupNotFoundError
        if spec is not None and member_filter not in (None, spec.filter):
            raise GroupFilterError(
                f"the member's filter is not the one given for shared group {group!r}"
            )
        if mode == "shared" and spec is None:
            spec = SharedGroup(group, filter=member_filter)
        shared = spec if mode == "shared" else None
        created = group not in self._groups.groups
        state = await self._groups.ensure(group, request.start_latest, shared, request.reader)
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

    async def _ensure_dead_letter_topics(self, groups: Iterable[Group]) -> None:
        """Make the missing dead-letter topics of these groups (those shared with
        one). The control plane's one place where they are made: at the topic's
        start, a group's making, a restart, and a channel's call."""
        for state in groups:
            spec = state.shared
            if spec is None or spec.dead_letter in (None, self._config.name):
                continue  # this topic itself exists
            await ensure_dead_letter_topic(spec.dead_letter, self._config.namespace)

    # -- describe ----------------------------------------------------------------

    async def _describe(self) -> dict[str, Any]:
        """Channels' figures and groups' membership, in one snapshot per channel.

        A membership change still under way (its members not yet told) is
        waited for: what describe shows, the members have heard of.
        """
        channels = await asyncio.gather(
            *(self._describe_channel(channel) for channel in self._fleet.channels())
        )
        groups = await self._groups.describe()
        return {"config": self._config, "channels": list(channels), "groups": groups}

    async def _lag(self, group: str) -> dict[int, int]:
        """The group's lag per channel (see ``ReadTopicLag``).

        Raises:
            GroupNotFoundError: no such group.
        """
        self._groups.group(group)
        channels = self._fleet.channels()
        lags = await asyncio.gather(
            *(
                asyncio.wait_for(self._fleet.ask(channel, ReadGroupLag(group)), NOTICE_TIMEOUT)
                for channel in channels
            ),
            return_exceptions=True,
        )
        return {
            channel: lag
            for channel, lag in zip(channels, lags, strict=True)
            if isinstance(lag, int)
        }

    async def _describe_channel(self, channel: int) -> dict[str, Any]:
        """A channel's figures, or what is known of it while it does not answer."""
        try:
            return await self._fleet.describe(channel)
        except Exception as error:  # restarting (its calls wait), or gone
            return {
                **self._restarts.known(channel),
                "channel": channel,
                "state": "unreachable",
                "failure": f"{type(error).__name__}: {error}",
                "head": None,
                "tail": None,
                "size": None,
                "capacity": self._config.capacity,
                "groups": {},
            }


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
