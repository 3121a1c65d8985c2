"""Topics: create, find, list, describe, destroy; the factory of publishers and subscribers."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Unpack

import ray

from raytopic.client.publisher import Publisher
from raytopic.client.ringbuffer import Ringbuffer
from raytopic.client.stats import TopicStats, topic_stats
from raytopic.client.subscriber import Subscriber
from raytopic.client.subscriber_options import SubscriberArgs, SubscriberOptions
from raytopic.client.table import TableView
from raytopic.coordinator.coordinator import TopicInfo
from raytopic.coordinator.launch import (
    actor_names,
    finding,
    launching,
    named_actor,
    released,
)
from raytopic.core.config import (
    Overflow,
    OverflowName,
    PlacementName,
    RoundRobin,
    RoundRobinName,
    SyncName,
    TopicConfig,
    check_bool,
    check_datetime,
    check_name,
    check_namespace,
)
from raytopic.core.destroyed import check_topic, destroyed_error, mark_destroyed, topic_calls
from raytopic.core.errors import (
    GroupModeError,
    InvalidArgumentError,
    InvalidTypeError,
    StoreError,
    TopicNotFoundError,
)
from raytopic.core.naming import (
    coordinator_actor_name,
    scaled_member_prefix,
    scaler_prefix,
    topic_found_alive,
    topic_of_actor_name,
)
from raytopic.core.protocol import (
    CoordinatorRequest,
    DeclareGroup,
    DescribeTopic,
    DestroyGroup,
    DestroyTopic,
    EndTopic,
    PurgeTopic,
    ReadGroupNames,
    ReadRingFigures,
    ResetGroupPositions,
    pack_request,
)
from raytopic.core.records import Position
from raytopic.core.shared_group import SharedGroup
from raytopic.core.steps import Get, Steps, run_blocking

if TYPE_CHECKING:
    from raytopic.autoscale.autoscaler import Autoscaler
    from raytopic.core.compaction import Compaction

__all__ = ["Topic", "create_topic", "get_topic", "list_topics"]

ANSWERS_HEARD_TIMEOUT = 2.0
"""Seconds a destroy waits at most, between ending the topic's waits and killing its
actors, for the channels' answers to this process's calls (see ``_answers_heard``)."""


def create_topic(
    name: str,
    *,
    channels: int = 8,
    capacity: int = 1_000_000,
    retain: bool | None = None,
    ttl: float | None = None,
    overflow: Overflow | OverflowName = "block",
    store: Any = None,
    groups: Iterable[str | SharedGroup] = (),
    namespace: str | None = None,
    exist_ok: bool = False,
    sync: SyncName | float = "always",
    store_retention: Mapping[str, float] | None = None,
    placement: PlacementName = "spread",
    default_window: int = 1000,
    compaction: Compaction | None = None,
) -> Topic:
    """Create a topic: a coordinator actor and ``channels`` channel actors, all named
    and detached, so the topic outlives this driver until ``destroy()``. A creator
    that dies after making the actors and before starting them leaves a topic that
    starts itself 20 s later (``get_topic`` and other calls wait for it meanwhile).

    Args:
        name: Unique in its namespace: 1-128 letters, digits, ``_ . -``.
        channels: Channel actors (1 to 10,000); the unit of ordering and parallelism.
        capacity: Elements each channel holds at most (>= 1).
        retain: Keep elements after every group committed them (until
            capacity or TTL removes them); False (the default, but for a
            compacted topic) removes them once committed.
        ttl: Seconds an element lives (> 0, at most a century), or None.
        overflow: When a channel is full: "block" (publishers wait),
            "overwrite" (drop the oldest) or "fail" (TopicFullError).
        store: None (in memory: a channel that restarts starts empty and its
            readers get DataLossError), a directory (the embedded segment log
            under ``<store>/<namespace>/<name>/<channel>``; a directory every
            node mounts lets a channel restart on another node), or a factory
            ``(topic_name, channel) -> store`` for a store of your own (any object
            with the four methods of ``rt.RingbufferStore``; a factory that
            raises or makes something else fails ``create_topic``).
            A store that holds this topic (its actors gone: a whole-cluster
            restart) reopens it, with its elements, groups, commits and id, if
            the settings fixed at creation (channels, capacity, retain, ttl,
            overflow, compaction) are the ones it was made with.
        groups: Durable subscriber groups that exist from the start, so they
            miss nothing published: names (channel-owned groups) and
            ``SharedGroup`` definitions (shared groups; their dead-letter
            topics are created too).
        namespace: Ray namespace of the topic's actors (default "raytopic").
        exist_ok: Return the existing topic instead of raising.
        sync: With the embedded store, when a publish is acknowledged:
            "always" (after an fdatasync covering it; survives an OS crash),
            "write" (once written; survives a process kill), or seconds between
            background syncs (> 0, at most an hour).
        store_retention: ``{"seconds": s, "bytes": n}`` (either or both): stored
            elements below the ring's head stay on disk this long (at most a
            century) / this much
            (Kafka's retention.ms / retention.bytes); default: only what the
            ring holds.
        placement: "spread" (default) puts the channel actors on different nodes
            where it can (Ray's SPREAD strategy); "pack" leaves it to Ray.
        default_window: Most unacknowledged elements per shared-group member
            when neither the member nor its group gives a window.
        compaction: None, or ``rt.Compaction(...)``: a compacted topic
            (docs/guides/compacted-topics.md). Every value needs a key;
            ``Publisher.delete(key)`` appends a delete; older elements of each
            key are removed in the background, leaving gaps that every reader
            steps over. It keeps its elements (``retain`` is True;
            ``retain=False`` is refused), and ``capacity`` and ``overflow``
            count the elements that remain.

    Returns:
        A handle to the new topic (or, with ``exist_ok``, to the existing one).

    Raises:
        TopicExistsError: the name is taken and ``exist_ok`` is False.
        InvalidArgumentError, InvalidTypeError: a bad argument (named in the message),
            or a store factory that made something that is not a store.
        StoreError: a channel's store could not be opened (its factory raised);
            the topic is not made.
        ChannelUnavailableError: a channel's actor did not start within 30 s (a
            loaded machine); the topic is not made and nothing of it is left (create
            it again).
        TopicSettingsError: the store holds this topic, made with other fixed
            settings (each named, in ``differences``); nothing is created or
            written.

    Example:
        >>> topic = rt.create_topic("orders", channels=4, groups=["billing"])
    """
    check_bool(exist_ok, "exist_ok")
    config = TopicConfig.create(
        name,
        channels=channels,
        capacity=capacity,
        retain=retain,
        ttl=ttl,
        overflow=overflow,
        groups=groups,
        namespace=namespace,
        store=store,
        sync=sync,
        store_retention=store_retention,
        placement=placement,
        default_window=default_window,
        compaction=compaction,
    )
    return run_blocking(opening(config, exist_ok=exist_ok))


def opening(config: TopicConfig, *, exist_ok: bool) -> Steps[Topic]:
    """``create_topic`` of a validated configuration, as steps (a driver runs them
    blocking; an async actor's control log, ``raytopic.client.control_log``, awaits
    them).

    Raises:
        As ``create_topic``.
    """
    coordinator, info = yield from launching(config, exist_ok=exist_ok)
    topic_found_alive(info.config.topic_id)  # reopened from its store: the same id
    return Topic(coordinator, info)


def get_topic(name: str, *, namespace: str | None = None) -> Topic:
    """Find a topic created by any job on the cluster.

    Args:
        name: The topic's name.
        namespace: Ray namespace of its actors (default "raytopic").

    Returns:
        A handle to the topic.

    Raises:
        TopicNotFoundError: no such topic in the namespace, or its coordinator died.
        ChannelUnavailableError: the topic was being made, and is not: a channel of
            it did not start in time (as its ``create_topic`` raises).
        InvalidArgumentError, InvalidTypeError: ``name`` or ``namespace`` is not a
            valid name.
    """
    return run_blocking(getting(name, namespace))


def getting(name: str, namespace: str | None) -> Steps[Topic]:
    """``get_topic`` as steps (an async actor awaits them).

    Raises:
        As ``get_topic``.
    """
    check_name(name, "topic name")
    coordinator, info = yield from finding(name, check_namespace(namespace))
    topic_found_alive(info.config.topic_id)
    return Topic(coordinator, info)


def list_topics(*, namespace: str | None = None) -> list[str]:
    """Names of the topics in a namespace.

    Args:
        namespace: Ray namespace to look in (default "raytopic").

    Returns:
        The topics' names, sorted.

    Raises:
        InvalidArgumentError, InvalidTypeError: ``namespace`` is not a valid name.
    """
    namespace = check_namespace(namespace)
    names = []
    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor.get("namespace") == namespace:
            topic = topic_of_actor_name(actor["name"])
            if topic is not None:
                names.append(topic)
    return sorted(names)


class Topic:
    """A handle to a topic: picklable, cheap, usable from any process of the cluster.

    **Ordering**: per channel; a key always maps to the same channel.
    **Delivery**: every value reaches every group (one member of each) and
    every anonymous subscriber.
    **Durability**: with a store, every acknowledged element and committed
    position survives a channel, coordinator or node dying; without one, a
    restarted channel's loss is reported (``DataLossError``). The topic lives
    until ``destroy()``, independent of the driver that created it; from then on
    every call on a handle of it raises ``TopicNotFoundError``.
    """

    def __init__(self, coordinator: Any, info: TopicInfo) -> None:
        self._coordinator = coordinator
        self._info = info
        self.config = info.config
        self._channel_actors = info.channels

    def __reduce__(self) -> tuple[Any, ...]:
        return (Topic, (self._coordinator, self._info))

    def __repr__(self) -> str:
        return f"Topic({self.name!r}, channels={self.channel_count}, namespace={self.namespace!r})"

    @property
    def name(self) -> str:
        """The topic's name."""
        return self.config.name

    @property
    def namespace(self) -> str:
        """The Ray namespace of its actors."""
        return self.config.namespace

    @property
    def topic_id(self) -> str:
        """The id its Positions carry."""
        return self.config.topic_id

    @property
    def channel_count(self) -> int:
        """How many channels it has."""
        return self.config.channels

    # -- handles ---------------------------------------------------------------

    def publisher(
        self,
        *,
        ordering: Callable[[Any], Any] | None = None,
        block_timeout: float = 60.0,
        batch_size: int = 1000,
        linger: float = 0.0,
        max_in_flight: int = 2,
        round_robin: RoundRobinName | RoundRobin = "value",
    ) -> Publisher:
        """A new Publisher to this topic (see :class:`~raytopic.Publisher`).

        Args:
            ordering: None for round robin, or ``value -> key`` for values
                published without a key.
            block_timeout: Seconds a value may wait for room in a full channel
                (overflow "block") before it fails with TopicFullError (> 0, at
                most a year).
            batch_size: Values one append call carries at most.
            linger: Seconds a partial batch may wait for more values (0: none;
                at most an hour).
            max_in_flight: Append calls of this publisher outstanding at most.
            round_robin: How ``publish_batch`` spreads values without a key: "value"
                (each to the next channel: a part per channel) or "batch" (the
                whole batch to the next channel: one part, one call).

        Returns:
            The publisher; close it (or use it as a context manager) when done.

        Raises:
            InvalidArgumentError, InvalidTypeError: a bad setting (named in the message).
            TopicNotFoundError: the topic was destroyed.
        """
        check_topic(self.topic_id, self.name, *self._channel_actors)
        return Publisher(
            self,
            ordering=ordering,
            block_timeout=block_timeout,
            batch_size=batch_size,
            linger=linger,
            max_in_flight=max_in_flight,
            round_robin=round_robin,
        )

    def subscriber(self, **options: Unpack[SubscriberArgs]) -> Subscriber:
        """A Subscriber (see its docs): anonymous without ``group``, else a group member.

        ``mode`` is "owned" (the default: channel-owned groups) or "shared".
        ``mode="shared"`` joins (or creates, with the defaults) a shared group:
        any member receives any element and acknowledges it alone
        (``Element.ack``); ``window`` is then its most unacknowledged elements
        (None or negative: the group's, else the topic's ``default_window``).
        ``group`` may also be a ``SharedGroup``: a shared group created with
        that definition if it does not exist.

        Args:
            **options: The subscriber's options, each by keyword (written once, in
                :class:`~raytopic.client.subscriber_options.SubscriberArgs`).

        Returns:
            The subscriber; close it (or use it as a context manager) when done.

        Raises:
            InvalidArgumentError, InvalidTypeError: a bad argument.
            GroupModeError: the group exists in the other mode.
            GroupNotFoundError: ``create_group=False`` and no such group.
        """
        checked = SubscriberOptions.check(**options)
        if checked.mode == "shared":
            _check_shared_allowed(self.config)
        return Subscriber._with_options(self, checked)

    def table(self, *, timeout: float | None = 60.0) -> TableView:
        """A view of the latest value of every key, kept live (see
        :class:`~raytopic.TableView`).

        Whole when it returns: it holds every key's latest value up to the tails the
        channels had at this call, read in bulk (on a compacted topic, little more
        than each key's survivor; on any other topic every version, slower).

        Args:
            timeout: Seconds the bootstrap may take (> 0; None: no limit); also the
                default of the view's ``refresh()``.

        Returns:
            The view; close it (or use it as a context manager) when done.

        Raises:
            TimeoutError: the view was not whole within ``timeout``.
            DataLossError: a stored record the bootstrap would read is damaged.
            InvalidArgumentError, InvalidTypeError: a bad ``timeout``.
            TopicNotFoundError: the topic was destroyed.

        Example:
            >>> with topic.table() as view:
            ...     view.get("a1")
        """
        return TableView(self, timeout=timeout)

    def ringbuffer(self, channel: int) -> Ringbuffer:
        """One channel with Hazelcast Ringbuffer semantics.

        Args:
            channel: The channel number, ``0 <= channel < channel_count``.

        Returns:
            A handle to that channel as a ring buffer.

        Raises:
            InvalidTypeError: ``channel`` is not an int.
            InvalidArgumentError: the topic has no such channel.
            TopicNotFoundError: the topic was destroyed.
        """
        channel = self._check_channel(channel)
        check_topic(self.topic_id, self.name, self._channel_actors[channel])
        return Ringbuffer(self, channel)

    # -- groups ----------------------------------------------------------------

    def groups(self) -> list[str]:
        """Names of the topic's subscriber groups.

        Returns:
            The group names (channel-owned and shared).
        """
        return self._call(ReadGroupNames())

    def create_group(self, group: str | SharedGroup) -> None:
        """Create a durable group now: a name for a channel-owned group, a
        ``SharedGroup`` for a shared one. Like any new group it starts at the head
        (the earliest element still retained), and from now on the channels keep
        every element until it has committed (acknowledged) it. Nothing happens if
        it exists in that mode. A shared group's dead-letter topic is created too.

        Args:
            group: A group name, or a ``SharedGroup`` definition.

        Raises:
            GroupModeError: it exists in the other mode.
            InvalidArgumentError, InvalidTypeError: not a valid group name, or a
                shared group's filter that the channels cannot load (the group and
                its dead-letter topic are not made).
        """
        if isinstance(group, SharedGroup):
            _check_shared_allowed(self.config)
            # The coordinator makes the dead-letter topic once the group is made.
            self._call(DeclareGroup(group.name, mode="shared", spec=group))
        else:
            check_name(group, "group name")
            self._call(DeclareGroup(group))

    def purge(self) -> int:
        """Remove every element of every channel (an operator's call). Groups and
        readers continue after them; shared groups drop what they held or
        waited for.

        Returns:
            How many elements were removed.
        """
        return self._call(PurgeTopic())

    def destroy_group(self, name: str) -> None:
        """Delete a group: its positions, and the retention it held.

        Args:
            name: The group's name.

        Raises:
            GroupNotFoundError: no such group.
            InvalidArgumentError, InvalidTypeError: not a valid group name.
        """
        check_name(name, "group name")
        self._call(DestroyGroup(name))

    def reset_group(
        self,
        name: str,
        to: Mapping[int, Position] | datetime | str,
    ) -> dict[int, Position]:
        """Move a whole group's read and commit positions (Pulsar-style seek).

        Args:
            name: The group.
            to: A map channel -> Position ("next received is the first after
                it"; only those channels are reset), a datetime ("the first
                published after it"; a naive one is local time), "earliest" or
                "latest" (every channel).

        Returns:
            Per reset channel, the Position set.

        Raises:
            GroupNotFoundError: no such group.
            ResetInProgressError: a reset of this group is running.
            GroupBusyError: a stream consumes the group (reset it once the stream
                ends: it reads on from its own offset log).
            PositionMismatchError: a Position of another topic or channel.
            InvalidArgumentError, InvalidTypeError: a bad name or target (a
                datetime out of range too); nothing is reset.
        """
        check_name(name, "group name")
        targets = self._reset_targets(to)
        positions = self._call(ResetGroupPositions(name, targets))
        return {
            channel: self.position(channel, sequence) for channel, sequence in positions.items()
        }

    def _reset_targets(self, to: Any) -> dict[int, int | float | str]:
        every = range(self.channel_count)
        if isinstance(to, str):
            if to not in ("earliest", "latest"):
                raise InvalidArgumentError(f"to must be 'earliest', 'latest', ... got {to!r}")
            return dict.fromkeys(every, to)
        if isinstance(to, datetime):
            return dict.fromkeys(every, check_datetime(to, "to"))
        if isinstance(to, Mapping):
            if not to:
                raise InvalidArgumentError("to is an empty map: nothing to reset")
            targets: dict[int, int | float | str] = {}
            for channel, position in to.items():
                self._check_channel(channel)
                if not isinstance(position, Position):
                    raise InvalidTypeError(
                        f"to[{channel}] must be a Position, got {type(position).__name__}"
                    )
                position.check_belongs(self.topic_id, channel)
                targets[channel] = position.sequence
            return targets
        raise InvalidTypeError("to must be a map of Positions, a datetime, 'earliest' or 'latest'")

    # -- elastic consumers ---------------------------------------------------------------

    def autoscale(
        self,
        group: str | SharedGroup,
        handler: Callable[[list[Any]], Any],
        *,
        min_members: int = 0,
        max_members: int = 8,
        target_lag_per_member: int = 1000,
        activation_lag: int = 1,
        poll_s: float = 1.0,
        scale_down_after_s: float = 30.0,
        batch_size: int = 100,
        member_options: Mapping[str, Any] | None = None,
        max_deliveries: int | None = None,
        dead_letter: str | None = None,
    ) -> Autoscaler:
        """Consume ``group`` with member actors, as many as its lag asks for.

        See docs/guides/autoscaling.md.

        A detached autoscaler actor (it outlives this driver; ``autoscaler(group)``
        finds it from any job) reads the group's lag every ``poll_s`` seconds and
        keeps ``ceil(lag / target_lag_per_member)`` members, within
        ``[min_members, max_members]``: from 0 only once the lag reaches
        ``activation_lag``; fewer only after fewer were wanted for
        ``scale_down_after_s``. An owned group gets no more members than channels
        with lag; a shared group may get more members than channels.

        Each member receives up to ``batch_size`` values, calls ``handler(values)``,
        then commits (owned) or acknowledges (shared) them. A handler that raises
        is logged (one line) and counted (``describe()``); a shared group nacks the
        batch (delivered again; dead letters as the group says), an owned member
        goes back to its last commit and tries again after a pause (1 s, doubling
        with each failure in a row, at most a minute); with ``max_deliveries``,
        the elements handed to a failing handler that many times go to the
        ``dead_letter`` topic and the member commits past them.

        **Delivery**: scaling hands no element to two handlers: a channel moves to
        a new member only after its old one committed what it handed out, and a
        leaving member commits first. A member that dies is replaced; only its
        uncommitted batch is handled again.

        Args:
            group: A group name (an existing group in its mode; a new one is
                owned), or a ``SharedGroup`` (made if missing).
            handler: ``handler(values: list)``, run in the member actors.
            min_members: Members kept even without lag (>= 0).
            max_members: Most members (>= 1, >= ``min_members``).
            target_lag_per_member: Lag each member is meant to carry (>= 1).
            activation_lag: Lag that wakes a group at 0 members (>= 1).
            poll_s: Seconds between looks at the lag (> 0, at most an hour).
            scale_down_after_s: Seconds fewer members must be wanted before
                members stop (>= 0).
            batch_size: Most values per handler call (1 to 100,000).
            member_options: Ray actor options for the members (``num_gpus``,
                ``resources``, ``runtime_env``, ...); not those the autoscaler
                sets itself (name, lifetime, restarts, concurrency).
            max_deliveries: An owned group's failed handler calls on an element
                after which it goes to ``dead_letter`` (>= 1; None: tried until it
                succeeds). A shared group has its own (``rt.SharedGroup``).
            dead_letter: The topic those elements go to, as
                ``{"value", "reason", "deliveries", "topic", "channel", "position"}``
                (created with one retained channel if missing). Needed with
                ``max_deliveries``, and only with it.

        Returns:
            The autoscaler's handle (``members``, ``describe()``, ``stop()``).

        Raises:
            InvalidArgumentError, InvalidTypeError: a bad argument (nothing is started),
                the group is autoscaled already, or ``max_deliveries`` for a shared
                group.
            GroupModeError: a ``SharedGroup`` named like an owned group.
            TopicNotFoundError: the topic was destroyed.

        Example:
            >>> scaler = topic.autoscale("work", handle, max_members=8,
            ...                          member_options={"num_gpus": 1})
        """
        from raytopic.autoscale.autoscaler import start_autoscaler

        return start_autoscaler(
            self,
            group,
            handler,
            member_options=member_options,
            min_members=min_members,
            max_members=max_members,
            target_lag_per_member=target_lag_per_member,
            activation_lag=activation_lag,
            poll_s=poll_s,
            scale_down_after_s=scale_down_after_s,
            batch_size=batch_size,
            max_deliveries=max_deliveries,
            dead_letter=dead_letter,
        )

    def autoscaler(self, group: str) -> Autoscaler | None:
        """The autoscaler of ``group`` (started by any job), or None.

        Args:
            group: The group's name.

        Returns:
            Its handle, or None when the group is not autoscaled.

        Raises:
            InvalidArgumentError, InvalidTypeError: not a valid group name.
            TopicNotFoundError: the topic was destroyed.
        """
        from raytopic.autoscale.autoscaler import find_autoscaler

        check_topic(self.topic_id, self.name, self._coordinator)
        if _name_is_another_topic_s(self):  # its autoscalers are found by the name
            mark_destroyed(self.topic_id)
            raise destroyed_error(self.name)
        return find_autoscaler(self, group)

    # -- observing and deleting ---------------------------------------------------

    def describe(self) -> TopicStats:
        """The topic's figures, as its coordinator and channels see them now.

        Returns:
            Per channel head, tail, size, epoch, node and process; per group
            members, ownership, commits, depth, unacked and lag.
        """
        return topic_stats(self._call(DescribeTopic()))

    def destroy(self) -> None:
        """Remove the topic's stored data, kill its actors (its autoscalers and their
        members too) and free its name. Idempotent.

        Returns once the actors are dead (``ray.kill`` only asks), so from then
        on ``get_topic`` and ``list_topics`` no longer see the topic, and every
        call on a handle of it raises TopicNotFoundError. A topic made again of
        that name over the same store starts empty, with no groups.

        Raises:
            StoreError: the topic is destroyed (its actors are gone), but its store
                could not be removed; the message says what was left (a store
                marked destroyed is removed by the next topic made over it; one
                left as it was is reopened by it).
        """
        run_blocking(self.destroying())

    def destroying(self) -> Steps[None]:
        """:meth:`destroy` as steps (an async actor awaits them)."""
        mark_destroyed(self.topic_id)  # this process's handles know it from now on
        if _name_is_another_topic_s(self):
            return  # destroyed before: what the name finds now is not this topic's to kill
        yield from _stop_autoscalers(self)  # first: a scaler would start members again
        left: StoreError | None = None
        try:
            with topic_calls(self.topic_id, self.name):
                yield Get(self._coordinator.request.remote(EndTopic()))
            yield from _answers_heard(self._channel_actors)
            with topic_calls(self.topic_id, self.name):
                yield Get(self._coordinator.request.remote(DestroyTopic()))
        except (TopicNotFoundError, ray.exceptions.RayActorError):
            pass  # gone already
        except StoreError as error:
            left = error  # raised once the actors are gone
        actors = (*self._channel_actors, self._coordinator)
        for actor in actors:
            ray.kill(actor, no_restart=True)
        for name, actor in zip(actor_names(self.name, self.channel_count), actors, strict=True):
            yield from released(name, self.namespace, actor=actor)
        if left is not None:
            raise left

    # -- helpers -------------------------------------------------------------------

    def position(self, channel: int, sequence: int) -> Position:
        """The Position of ``sequence`` in ``channel`` of this topic.

        Args:
            channel: The channel number.
            sequence: The sequence in that channel (``>= -1``).

        Returns:
            The Position.

        Raises:
            InvalidArgumentError, InvalidTypeError: a channel the topic does not have,
                a sequence below -1, or not ints.
        """
        return Position(self.topic_id, self._check_channel(channel), sequence)

    def _check_channel(self, channel: object) -> int:
        if not isinstance(channel, int) or isinstance(channel, bool):
            raise InvalidTypeError(f"channel must be an int, got {type(channel).__name__}")
        if not 0 <= channel < self.channel_count:
            raise InvalidArgumentError(
                f"channel {channel} does not exist: the topic has {self.channel_count}"
            )
        return channel

    def _call(self, request: CoordinatorRequest) -> Any:
        """Ask the topic's coordinator; its errors are the topic's."""
        with topic_calls(self.topic_id, self.name):
            return ray.get(self._coordinator.request.remote(request))


def _check_shared_allowed(config: TopicConfig) -> None:
    """A compacted topic has no shared groups (yet: their holds count positions one by
    one, which compaction leaves empty).

    Raises:
        GroupModeError: the topic is compacted.
    """
    if config.compaction is not None:
        raise GroupModeError(f"topic {config.name!r} is compacted: it has no shared groups")


def _name_is_another_topic_s(topic: Topic) -> bool:
    """Whether the topic's name is held by another topic's coordinator: this one was
    destroyed and a topic made again of its name (a restarted coordinator is the
    same actor). Its autoscalers and actors are found by name, so a stale handle's
    ``destroy`` would stop the new topic's and wait for its actors to die."""
    named = named_actor(coordinator_actor_name(topic.name), topic.namespace)
    return named is not None and named != topic._coordinator


def _answers_heard(channels: Sequence[Any]) -> Steps[None]:
    """One call to each channel from this process, its answer waited for (bounded, best
    effort; ``Topic.destroying``, once every wait at the topic has ended).

    A channel answers one process's calls in the order it finished them, over one
    connection: once this call's answer is in, so are those of the calls this process
    sent there before (receives the end of the topic has just answered). Killed
    before its answers were out, a channel would leave their refs to resolve to Ray's
    ActorDiedError: traced at a loaded machine, receives a channel had answered 60 ms
    before the kill (after its notice that every wait had ended) still did so in the
    process that sent them.
    """
    asked = [channel.request.remote(pack_request(ReadRingFigures())) for channel in channels]
    deadline = time.monotonic() + ANSWERS_HEARD_TIMEOUT
    for ref in asked:
        with contextlib.suppress(Exception):  # gone, restarting, late: not waited for
            yield Get(ref, timeout=max(deadline - time.monotonic(), 0.0))


def _stop_autoscalers(topic: Topic) -> Steps[None]:
    """Kill the topic's autoscalers and their members (``Topic.destroy``): the scalers
    first, so that none starts a member again. They are found by their names (the
    scaler and member prefixes of :mod:`raytopic.core.naming`), so the handle needs
    nothing of :mod:`raytopic.autoscale`."""
    scalers, members = scaler_prefix(topic.name), scaled_member_prefix(topic.name)
    named = [
        actor["name"]
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor.get("namespace") == topic.namespace
    ]
    for prefix in (scalers, members):
        for name in (n for n in named if n.startswith(prefix)):
            with contextlib.suppress(ValueError):  # gone meanwhile
                ray.kill(ray.get_actor(name, namespace=topic.namespace), no_restart=True)
    for name in (n for n in named if n.startswith(scalers)):
        yield from released(name, topic.namespace)
