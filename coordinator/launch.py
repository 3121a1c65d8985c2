"""Where a topic's actors come from, and how they are found and let go: its
coordinator and its channels, all created at once (each is a process that takes a
while to start; one after the other, a topic would take the coordinator's start-up
longer to make).

All are named and detached in the topic's namespace, so any job finds them and
they outlive the driver that made them. The coordinator's ``StartTopic`` then
introduces the channels to each other. A shared group's dead-letter topic is made
with ``ensure_dead_letter_topic``, by the group's coordinator alone.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import ray

from raytopic.core.config import TopicConfig, fixed_settings, settings_differences
from raytopic.core.dead_letters import dead_letter_topic_config
from raytopic.core.errors import TopicExistsError, TopicNotFoundError, unwrap_ray_error
from raytopic.core.naming import channel_actor_name, coordinator_actor_name
from raytopic.core.protocol import AwaitTopic, ReadTopicInfo, StartTopic
from raytopic.core.steps import Get, Sleep, Steps, run_awaiting, run_blocking

if TYPE_CHECKING:
    from raytopic.coordinator.coordinator import TopicInfo

logger = logging.getLogger(__name__)

__all__ = [
    "NAME_RELEASE_TIMEOUT",
    "NameTakenError",
    "actor_names",
    "create_topic_actors",
    "ensure_dead_letter_topic",
    "finding",
    "found_or_made_channels",
    "launch_topic",
    "launching",
    "named_actor",
    "named_channel",
    "released",
    "wait_released",
]

NAME_RELEASE_TIMEOUT = 30.0
"""Seconds a name held by a destroyed predecessor may take to be freed."""


class NameTakenError(Exception):
    """The coordinator's name belongs to a live topic."""


# The actor classes are imported when a topic is first made here: the coordinator
# imports this module to make dead-letter topics (so this one cannot import it
# first), and a coordinator that never makes one never loads the channel's code.


@functools.cache
def _coordinator_class() -> Any:
    from raytopic.coordinator.coordinator import CoordinatorActor

    return ray.remote(CoordinatorActor)


@functools.cache
def _channel_class() -> Any:
    from raytopic.actors.channel_actor import ChannelActor

    return ray.remote(ChannelActor)


def create_topic_actors(config: TopicConfig) -> Steps[tuple[Any, list[Any]]]:
    """Create the coordinator and the channel actors of ``config``'s topic, without
    waiting for them to start.

    Raises:
        NameTakenError: a live topic of that name exists.
    """
    coordinator = yield from _named(
        lambda: (
            _coordinator_class()
            .options(
                name=coordinator_actor_name(config.name),
                namespace=config.namespace,
                lifetime="detached",
                num_cpus=0,
                max_concurrency=10_000,
                # It rebuilds itself from its channels; calls made meanwhile wait.
                max_restarts=-1,
                max_task_retries=-1,
            )
            .remote(config)
        ),
        config,
    )
    channels = []
    for channel in range(config.channels):
        # None: the coordinator's name was free, so a predecessor is going.
        made = yield from _named(partial(_start_channel, config, channel), None)
        channels.append(made)
    return coordinator, channels


def named_actor(name: str, namespace: str) -> Any | None:
    """The live actor named ``name`` in ``namespace``, asked of the GCS (None: none)."""
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None


def named_channel(config: TopicConfig, channel: int) -> Any | None:
    """Channel ``channel``'s actor of ``config``'s topic, found by name (None: none)."""
    return named_actor(channel_actor_name(config.name, channel), config.namespace)


def found_or_made_channels(config: TopicConfig) -> Steps[list[Any]]:
    """The topic's channel actors, found by name; those its creator did not make (it
    died while it made them) are made here. A coordinator its creator never started
    starts its topic on them."""
    channels = []
    for channel in range(config.channels):
        found = named_channel(config, channel)
        if found is None:
            found = yield from _named(partial(_start_channel, config, channel), None)
        channels.append(found)
    return channels


def _start_channel(config: TopicConfig, channel: int) -> Any:
    """Start channel ``channel`` of the topic (see :func:`_named`)."""
    return (
        _channel_class()
        .options(
            name=channel_actor_name(config.name, channel),
            namespace=config.namespace,
            lifetime="detached",
            num_cpus=0,
            max_concurrency=100_000,
            # A killed channel comes back (from its store, if it has one);
            # calls made meanwhile wait for it and are retried: appends are
            # idempotent, reads and commits are safe.
            max_restarts=-1,
            max_task_retries=-1,
            # Over the nodes (best effort: actors that need no CPU may
            # still share one); a channel whose node died restarts on another.
            scheduling_strategy="SPREAD" if config.placement == "spread" else None,
        )
        .remote(config, channel)
    )


def _named(create: Callable[[], Any], coordinator_of: TopicConfig | None) -> Steps[Any]:
    """``create()`` a named actor, again while a destroyed predecessor still holds its
    name (``ray.kill`` frees it a moment later). ``coordinator_of``: the actor is
    that topic's coordinator (its predecessor is asked whether it is going; the
    channels' predecessors are, once the coordinator's name was free).

    Raises:
        NameTakenError: the name is held, and not by an actor on its way out.
    """
    deadline = time.monotonic() + NAME_RELEASE_TIMEOUT
    while True:
        try:
            return create()
        except ValueError as error:
            going = coordinator_of is None or (yield from _being_destroyed(coordinator_of))
            if not going or time.monotonic() > deadline:
                raise NameTakenError(str(error)) from error
            yield Sleep(0.05)


def _being_destroyed(config: TopicConfig) -> Steps[bool]:
    """Whether the coordinator holding the topic's name is on its way out."""
    coordinator = named_actor(coordinator_actor_name(config.name), config.namespace)
    if coordinator is None:
        return True
    try:
        yield Get(coordinator.request.remote(ReadTopicInfo()), timeout=5)
    except Exception:
        return True
    return False


def launching(config: TopicConfig, *, exist_ok: bool) -> Steps[tuple[Any, TopicInfo]]:
    """Create and start ``config``'s topic (``create_topic`` without the handle); its
    coordinator makes the dead-letter topics of its shared groups as it starts.
    Run by :func:`launch_topic` (a driver) or awaited (the coordinator).

    Args:
        config: The validated configuration.
        exist_ok: Return the existing topic of that name instead of raising (with
            a warning if its settings differ).

    Returns:
        The coordinator actor and what it reports (the channel actors among it).

    Raises:
        TopicExistsError: the name is taken and ``exist_ok`` is False.
        StoreError: a channel's store could not be opened; the topic is not made
            and leaves no actor or name behind.
        ChannelUnavailableError: a channel did not start in time; the same.
    """
    if exist_ok:
        try:
            coordinator, info = yield from finding(config.name, config.namespace)
        except TopicNotFoundError:
            pass
        else:
            _warn_if_different(info.config, config)
            return coordinator, info
    try:
        coordinator, channels = yield from create_topic_actors(config)
    except NameTakenError as error:
        if exist_ok:  # made by another process a moment ago
            return (yield from finding(config.name, config.namespace))
        raise TopicExistsError(
            f"topic {config.name!r} already exists in namespace {config.namespace!r}"
        ) from error
    try:
        with unwrap_ray_error():
            started: TopicInfo = yield Get(coordinator.request.remote(StartTopic(tuple(channels))))
    except Exception:
        # Not made (a store that cannot be opened): leave no actor and no name behind.
        for actor in (*channels, coordinator):
            ray.kill(actor, no_restart=True)
        for actor_name in actor_names(config.name, config.channels):
            yield from released(actor_name, config.namespace)
        raise
    return coordinator, started


def launch_topic(config: TopicConfig, *, exist_ok: bool) -> tuple[Any, TopicInfo]:
    """:func:`launching`, blocking (a driver's ``create_topic``)."""
    return run_blocking(launching(config, exist_ok=exist_ok))


def finding(name: str, namespace: str) -> Steps[tuple[Any, TopicInfo]]:
    """The coordinator actor of a topic and what it reports, once it has started.

    Raises:
        TopicNotFoundError: no such topic in the namespace, or its coordinator died.
    """
    coordinator = named_actor(coordinator_actor_name(name), namespace)
    if coordinator is None:
        raise TopicNotFoundError(f"no topic {name!r} in namespace {namespace!r}")
    try:
        with unwrap_ray_error():
            info: TopicInfo = yield Get(coordinator.request.remote(AwaitTopic()))
    except ray.exceptions.RayActorError as error:
        raise TopicNotFoundError(f"topic {name!r} is gone (its coordinator died)") from error
    return coordinator, info


async def ensure_dead_letter_topic(name: str, namespace: str) -> None:
    """Create a dead-letter topic if it is missing: one channel, elements retained
    until someone reads them. Awaits the topic's actors: the coordinator calls it on
    its event loop.

    Args:
        name: The topic's name (a shared group's ``dead_letter``).
        namespace: The Ray namespace of the group's topic (and so of its dead letters).
    """
    await run_awaiting(launching(dead_letter_topic_config(name, namespace), exist_ok=True))


def actor_names(topic: str, channels: int) -> list[str]:
    """The Ray actor names of a topic's channels and coordinator."""
    return [*(channel_actor_name(topic, c) for c in range(channels)), coordinator_actor_name(topic)]


def released(
    name: str, namespace: str, timeout: float = NAME_RELEASE_TIMEOUT, actor: Any = None
) -> Steps[None]:
    """Wait until a killed actor's name is free, which it is once the actor is dead
    (bounded: a kill is not synchronous), or, given the ``actor`` killed, held by
    another actor (a topic made again of the name: the killed one is dead). Asked of
    the GCS by name: a call to the actor itself would make Ray log that it retries
    the call."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        named = named_actor(name, namespace)
        if named is None or (actor is not None and named != actor):
            return
        yield Sleep(0.01)
    logger.warning("actor %s still alive %.0f s after ray.kill", name, timeout)


def wait_released(
    name: str, namespace: str, timeout: float = NAME_RELEASE_TIMEOUT, actor: Any = None
) -> None:
    """:func:`released`, blocking (a driver's ``destroy``)."""
    run_blocking(released(name, namespace, timeout, actor))


def _warn_if_different(existing: TopicConfig, asked: TopicConfig) -> None:
    different = settings_differences(fixed_settings(existing), asked)
    if different:
        logger.warning(
            "topic %r exists with other settings (%s); using the existing topic",
            existing.name,
            ", ".join(f"{name}={kept!r}" for name, (kept, _) in different.items()),
        )
