"""Ray actor names of a topic's actors, and a per-process cache of channel handles.

``:`` never occurs in topic names, so these names cannot collide.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "channel_actor",
    "channel_actor_name",
    "coordinator_actor_name",
    "topic_of_actor_name",
]

_PREFIX = "raytopic:"
_channel_handles: dict[tuple[str, str, int], Any] = {}


def coordinator_actor_name(topic: str) -> str:
    """The Ray actor name of a topic's coordinator."""
    return f"{_PREFIX}topic:{topic}"


def channel_actor_name(topic: str, channel: int) -> str:
    """The Ray actor name of one channel of a topic."""
    return f"{_PREFIX}channel:{topic}:{channel}"


def topic_of_actor_name(name: str) -> str | None:
    """The topic a coordinator's actor name belongs to, or None for other actors."""
    prefix = f"{_PREFIX}topic:"
    return name[len(prefix) :] if name.startswith(prefix) else None


def channel_actor(namespace: str, topic: str, channel: int) -> Any:
    """The handle of a channel actor, looked up once per process.

    Elements name their channel instead of carrying its ActorHandle:
    (de)serializing a handle costs about a millisecond, per batch, per hop.
    """
    key = (namespace, topic, channel)
    handle = _channel_handles.get(key)
    if handle is None:
        import ray

        handle = ray.get_actor(channel_actor_name(topic, channel), namespace=namespace)
        _channel_handles[key] = handle
    return handle
