"""Where a topic's actors come from, and how they are found and let go: its
coordinator and its channels, all created at once (each is a process that takes a
while to start; one after the other, a topic would take the coordinator's start-up
longer to make).

All are named and detached in the topic's namespace, so any job finds them and
they outlive the driver that made them. The coordinator's ``start`` then
introduces the channels to each other. A shared group's dead-letter topic is made
with ``ensure_dead_letter_topic``, by the group's coordinator alone.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import TYPE_CHECKING, Any

import ray

from raytopic.core.config import TopicConfig
from raytopic.core.errors import TopicExistsError, TopicNotFoundError, unwrap_ray_error
from raytopic.core.naming import channel_actor_name, coordinator_actor_name

if TYPE_CHECKING:
    from raytopic.coordinator.coordinator import TopicInfo

logger = logging.getLogger(__name__)

__all__ = [
    "NAME_RELEASE_TIMEOUT",
    "NameTakenError",
    "actor_names",
    "create_topic_actors",
    "ensure_dead_letter_topic",
    "find_topic",
    "launch_topic",
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
    from raytopic.actors.channel import ChannelActor

    return ray.remote(ChannelActor)


def create_topic_actors(config: TopicConfig) -> tuple[Any, list[Any]]:
    """Create the coordinator and the channel actors of ``config``'s topic, without
    waiting for them to start.

    Raises:
        NameTakenError: a live topic of that name exists.
    """
    coordinator = _named(
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
        lambda: _being_destroyed(config),
    )
    channels = [
        _named(
            lambda channel=channel: (
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
            ),
            lambda: True,  # the coordinator's name was free: a predecessor is going
        )
        for channel in range(config.channels)
    ]
    return coordinator, channels


def _named(create: Any, predecessor_going: Any) -> Any:
    """``create()`` a named actor, again while a destroyed predecessor still holds its
    name (``ray.kill`` frees it a moment later).

    Raises:
        NameTakenError: the name is held, and not by an actor on its way out.
    """
    deadline = time.monotonic() + NAME_RELEASE_TIMEOUT
    while True:
        try:
            return create()
        except ValueError as error:
            if not predecessor_going() or time.monotonic() > deadline:
                raise NameTakenError(str(error)) from error
            time.sleep(0.05)


def _being_destroyed(config: TopicConfig) -> bool:
    """Whether the coordinator holding the topic's name is on its way out."""
    try:
        coordinator = ray.get_actor(coordinator_actor_name(config.name), namespace=config.namespace)
    except ValueError:
        return True
    try:
        ray.get(coordinator.info.remote(), timeout=5)
    except Exception:
        return True
    return False


def launch_topic(config: TopicConfig, *, exist_ok: bool) -> tuple[Any, TopicInfo]:
    """Create and start ``config``'s topic (``create_topic`` without the handle); its
    coordinator makes the dead-letter topics of its shared groups as it starts.

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
    """
    if exist_ok:
        try:
            coordinator, info = find_topic(config.name, config.namespace)
        except TopicNotFoundError:
            pass
        else:
            _warn_if_different(info.config, config)
            return coordinator, info
    try:
        coordinator, channels = create_topic_actors(config)
    except NameTakenError as error:
        if exist_ok:  # made by another process a moment ago
            return find_topic(config.name, config.namespace)
        raise TopicExistsError(
            f"topic {config.name!r} already exists in namespace {config.namespace!r}"
        ) from error
    try:
        with unwrap_ray_error():
            info: TopicInfo = ray.get(coordinator.start.remote(channels))
    except Exception:
        # Not made (a store that cannot be opened): leave no actor and no name behind.
        for actor in (*channels, coordinator):
            ray.kill(actor, no_restart=True)
        for actor_name in actor_names(config.name, config.channels):
            wait_released(actor_name, config.namespace)
        raise
    return coordinator, info


def find_topic(name: str, namespace: str) -> tuple[Any, TopicInfo]:
    """The coordinator actor of a topic and what it reports, once it has started.

    Raises:
        TopicNotFoundError: no such topic in the namespace, or its coordinator died.
    """
    try:
        coordinator = ray.get_actor(coordinator_actor_name(name), namespace=namespace)
    except ValueError:
        raise TopicNotFoundError(f"no topic {name!r} in namespace {namespace!r}") from None
    try:
        with unwrap_ray_error():
            info: TopicInfo = ray.get(coordinator.ready.remote())
    except ray.exceptions.RayActorError as error:
        raise TopicNotFoundError(f"topic {name!r} is gone (its coordinator died)") from error
    return coordinator, info


def ensure_dead_letter_topic(name: str, namespace: str) -> None:
    """Create a dead-letter topic if it is missing: one channel, elements retained
    until someone reads them. Blocks on Ray calls (the coordinator calls it off its
    event loop).

    Args:
        name: The topic's name (a shared group's ``dead_letter``).
        namespace: The Ray namespace of the group's topic (and so of its dead letters).
    """
    config = TopicConfig.create(name, channels=1, retain=True, namespace=namespace)
    launch_topic(config, exist_ok=True)


def actor_names(topic: str, channels: int) -> list[str]:
    """The Ray actor names of a topic's channels and coordinator."""
    return [*(channel_actor_name(topic, c) for c in range(channels)), coordinator_actor_name(topic)]


def wait_released(name: str, namespace: str, timeout: float = NAME_RELEASE_TIMEOUT) -> None:
    """Wait until a killed actor's name is free, which it is once the actor is dead
    (bounded: a kill is not synchronous). Asked of the GCS by name: a call to the
    actor itself would make Ray log that it retries the call."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get_actor(name, namespace=namespace)
        except ValueError:
            return
        time.sleep(0.01)
    logger.warning("actor %s still alive %.0f s after ray.kill", name, timeout)


def _warn_if_different(existing: TopicConfig, asked: TopicConfig) -> None:
    fields = ("channels", "capacity", "retain", "ttl", "overflow")
    different = [f for f in fields if getattr(existing, f) != getattr(asked, f)]
    if different:
        logger.warning(
            "topic %r exists with other settings (%s); using the existing topic",
            existing.name,
            ", ".join(f"{f}={getattr(existing, f)!r}" for f in different),
        )
