"""Where a topic's actors come from: its coordinator and its channels, all created at
once (each is a process that takes a while to start; one after the other, a
topic would take the coordinator's start-up longer to make).

All are named and detached in the topic's namespace, so any job finds them and
they outlive the driver that made them. The coordinator's ``start`` then
introduces the channels to each other.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import ray

from raytopic.actors.channel import ChannelActor
from raytopic.config import TopicConfig
from raytopic.coordinator.coordinator import CoordinatorActor
from raytopic.naming import channel_actor_name, coordinator_actor_name

__all__ = ["NameTakenError", "create_topic_actors"]

NAME_RELEASE_TIMEOUT = 30.0
"""Seconds a name held by a destroyed predecessor may take to be freed."""


class NameTakenError(Exception):
    """The coordinator's name belongs to a live topic."""


@functools.cache
def _coordinator_class() -> Any:
    return ray.remote(CoordinatorActor)


@functools.cache
def _channel_class() -> Any:
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
