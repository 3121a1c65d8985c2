"""Destroyed topics: what this process knows of them, and the error that says so.

A topic's actors restart after any crash (``max_restarts=-1``, their calls
retried), so an actor of a topic that is dead for good was killed by
``Topic.destroy()``. A call to it fails with Ray's ``ActorDiedError``; every
handle says ``TopicNotFoundError`` instead, in one of two places:

- **Before a call whose ObjectRef the handle hands back** (receives, commits,
  ``publish_batch``, the ring buffer's ``*_async``): :func:`check_topic`. A ref
  that Ray fails runs no raytopic code when the user calls ``ray.get`` on it,
  so a dead actor's ref can only be typed by not making it. The check asks nobody:
  this process's set of destroyed topic ids (a ``Topic.destroy()`` here, or a
  call of this process that found a topic actor dead, adds to it), then Ray's
  own view of the actor in this process (``ActorHandle._get_local_state``: a
  read of the core worker's actor table, about half a microsecond; Ray sets it
  when it hears of the death, a few milliseconds after it, in every process
  that has called the actor).
- **Where a handle waits for a result itself**: :func:`topic_calls` turns an
  ``ActorDiedError`` into ``TopicNotFoundError`` (and remembers the topic).

What stays Ray's: a ref handed out before this process could know, which the
kill then failed: one returned while the actor still lived and that was not
waiting at the channel (the channels' waits, for data or for room, answer
``TopicNotFoundError`` before the kill: ``Topic.destroy()`` tells every channel
to end them first, and the destroying process hears every channel's answers to
its own calls before it kills them), or one returned by this process's very
first call to that actor (Ray here keeps no view of an actor it never called, so
it learns of the death from that call). Ray fails such a ref itself, and
resolving it runs no raytopic code.

What the cluster knows: a channel told the topic is being destroyed records itself in
Ray's GCS (:func:`record_destroyed_channel`) before any store is removed. A channel
SIGKILLed after its store was removed, before it was killed, restarts over a store
that cannot say the topic was destroyed (a user's store may start empty, as one
whose channel crashed before its first write does); the record says it
(:func:`channel_destroyed`), so the channel serves nothing and writes nothing there.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from raytopic.core.errors import TopicNotFoundError, unwrap_ray_error

logger = logging.getLogger(__name__)

__all__ = [
    "channel_destroyed",
    "check_topic",
    "destroyed_error",
    "is_destroyed",
    "mark_destroyed",
    "mark_alive",
    "record_destroyed_channel",
    "topic_calls",
]

_destroyed: set[str] = set()
"""Ids of the topics this process knows are destroyed (a few bytes per topic)."""

_DEAD = 4
"""``ActorTableData.DEAD``: the state Ray gives an actor that will never run again."""


def mark_destroyed(topic_id: str) -> None:
    """Remember that the topic ``topic_id`` is destroyed (this process destroyed it,
    or found one of its actors dead for good)."""
    _destroyed.add(topic_id)


def mark_alive(topic_id: str) -> None:
    """The topic ``topic_id`` has live actors (found by ``create_topic`` or
    ``get_topic``): a topic reopened from its store after its actors were gone
    keeps its id, and is no longer known destroyed here."""
    _destroyed.discard(topic_id)


def is_destroyed(topic_id: str) -> bool:
    """Whether this process knows the topic ``topic_id`` is destroyed (a set lookup)."""
    return topic_id in _destroyed


def destroyed_error(name: str) -> TopicNotFoundError:
    """The error a call on a handle of the destroyed topic ``name`` raises."""
    return TopicNotFoundError(f"topic {name!r} was destroyed")


def check_topic(topic_id: str, name: str, *actors: Any) -> None:
    """Raise TopicNotFoundError if the topic is known destroyed here, or if Ray in this
    process knows one of ``actors`` (the topic's, about to be called) is dead.

    Asks nobody (no Ray call, no GCS lookup): cheap enough for every receive.

    Raises:
        TopicNotFoundError: the topic was destroyed.
    """
    if topic_id in _destroyed:
        raise destroyed_error(name)
    for actor in actors:
        if _dead(actor):
            _destroyed.add(topic_id)
            raise destroyed_error(name)


@contextlib.contextmanager
def topic_calls(topic_id: str, name: str) -> Iterator[None]:
    """Around waiting for a topic actor's reply: raytopic errors unwrapped (see
    :func:`~raytopic.core.errors.unwrap_ray_error`), a dead actor as TopicNotFoundError.

    Raises:
        TopicNotFoundError: an actor of the topic is dead for good: it was destroyed.
    """
    import ray.exceptions

    try:
        with unwrap_ray_error():
            yield
    except ray.exceptions.ActorDiedError as error:
        _destroyed.add(topic_id)
        raise destroyed_error(name) from error


_RECORDS = "raytopic"
"""The namespace of raytopic's records in Ray's internal key-value store (the GCS)."""


def record_destroyed_channel(namespace: str, name: str, channel: int) -> None:
    """Record in Ray's GCS that the running channel actor (``channel`` of topic
    ``name``) is destroyed: before its store is removed. One record per channel of a
    name (the next topic of the name, destroyed, replaces it: this actor is dead for
    good by then), kept for the cluster's life.

    Raises:
        Exception: the GCS could not be written (Ray's error).
    """
    import ray
    from ray.experimental import internal_kv

    actor_id = ray.get_runtime_context().get_actor_id() if ray.is_initialized() else None
    if actor_id is None:  # not an actor (a channel's class used in-process): none restarts
        return
    key = _record_key(namespace, name, channel)
    internal_kv._internal_kv_put(key, actor_id.encode(), overwrite=True, namespace=_RECORDS)


def channel_destroyed(namespace: str, name: str, channel: int) -> bool:
    """Whether the running channel actor is recorded destroyed (see
    :func:`record_destroyed_channel`); False, logged, if the GCS cannot say."""
    import ray
    from ray.experimental import internal_kv

    key = _record_key(namespace, name, channel)
    try:
        value = internal_kv._internal_kv_get(key, namespace=_RECORDS)
    except Exception as error:  # as before records were kept: the store decides
        logger.warning("topic %r: channel %d's destroy record unread: %s", name, channel, error)
        return False
    return value is not None and value.decode() == ray.get_runtime_context().get_actor_id()


def _record_key(namespace: str, name: str, channel: int) -> bytes:
    return f"destroyed-channel:{namespace}:{name}:{channel}".encode()


def _dead(actor: Any) -> bool:
    """Whether Ray in this process knows ``actor`` is dead for good (False when it does
    not know: it has not called the actor yet, or Ray has no such view)."""
    try:
        return actor._get_local_state() == _DEAD
    except Exception:  # not an actor handle of this Ray, or Ray is down here
        return False
