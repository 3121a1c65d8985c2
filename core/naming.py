"""Ray actor names of a topic's actors, and a per-process cache of channel handles.

``:`` never occurs in topic names, so these names cannot collide.
"""

from __future__ import annotations

from typing import Any

from raytopic.core.destroyed import check_topic, mark_alive, mark_destroyed

__all__ = [
    "channel_actor",
    "topic_found_alive",
    "channel_actor_name",
    "coordinator_actor_name",
    "scaled_member_name",
    "scaled_member_prefix",
    "scaler_actor_name",
    "scaler_prefix",
    "topic_of_actor_name",
    "transaction_registry_name",
]

_PREFIX = "raytopic:"
_channel_handles: dict[tuple[str, int], Any] = {}
"""Channel handles found by name, keyed by topic id: a topic destroyed and made
again under its name is another topic, with other actors."""


def coordinator_actor_name(topic: str) -> str:
    """The Ray actor name of a topic's coordinator."""
    return f"{_PREFIX}topic:{topic}"


def channel_actor_name(topic: str, channel: int) -> str:
    """The Ray actor name of one channel of a topic."""
    return f"{_PREFIX}channel:{topic}:{channel}"


def scaler_prefix(topic: str) -> str:
    """What the actor names of a topic's autoscalers start with."""
    return f"{_PREFIX}scaler:{topic}:"


def scaler_actor_name(topic: str, group: str) -> str:
    """The Ray actor name of the autoscaler of one group of a topic."""
    return f"{scaler_prefix(topic)}{group}"


def scaled_member_prefix(topic: str, group: str | None = None) -> str:
    """What the actor names of a topic's autoscaled members start with (of one
    group's, with ``group``)."""
    base = f"{_PREFIX}member:{topic}:"
    return base if group is None else f"{base}{group}:"


def scaled_member_name(topic: str, group: str, member: str) -> str:
    """The Ray actor name of one autoscaled member (``member``: its id in the scaler)."""
    return f"{scaled_member_prefix(topic, group)}{member}"


def transaction_registry_name() -> str:
    """The Ray actor name of a namespace's transaction registry (one per namespace)."""
    return f"{_PREFIX}transactions"


def topic_of_actor_name(name: str) -> str | None:
    """The topic a coordinator's actor name belongs to, or None for other actors."""
    prefix = f"{_PREFIX}topic:"
    return name[len(prefix) :] if name.startswith(prefix) else None


def topic_found_alive(topic_id: str) -> None:
    """The topic ``topic_id`` has live actors (``create_topic``, ``get_topic``): a
    topic reopened from its store keeps its id, so the handles of its earlier actors
    kept here are dropped, and it is not known destroyed any more."""
    mark_alive(topic_id)
    for key in [key for key in _channel_handles if key[0] == topic_id]:
        del _channel_handles[key]


def channel_actor(namespace: str, topic: str, topic_id: str, channel: int) -> Any:
    """The handle of a channel actor of topic ``topic_id``, looked up once per process.

    Elements name their channel instead of carrying its ActorHandle:
    (de)serializing a handle costs about a millisecond, per batch, per hop.
    The lookup is by name; a topic made again under the same name answers
    for the old topic's readers as it would for strangers (they are not
    among its readers), never with a dead handle.

    Raises:
        TopicNotFoundError: the topic was destroyed (no actor has the name, or
            Ray here knows the one found is dead: its refs would raise Ray's
            ActorDiedError).
    """
    key = (topic_id, channel)
    handle = _channel_handles.get(key)
    if handle is None:
        import ray

        from raytopic.core.errors import TopicNotFoundError

        try:
            handle = ray.get_actor(channel_actor_name(topic, channel), namespace=namespace)
        except ValueError:
            mark_destroyed(topic_id)
            raise TopicNotFoundError(
                f"topic {topic!r} no longer exists in namespace {namespace!r}"
            ) from None
        _channel_handles[key] = handle
    check_topic(topic_id, topic, handle)
    return handle
