"""Which store a channel gets: none, the embedded segment log in a directory, or a user's."""

from __future__ import annotations

import os

from raytopic.actors.stores.base import RingbufferStore
from raytopic.actors.stores.segment_log import SegmentLogStore
from raytopic.config import TopicConfig
from raytopic.errors import InvalidTypeError

__all__ = ["open_store", "store_directory"]


def store_directory(root: str, config: TopicConfig, channel: int) -> str:
    """Where the embedded store of ``channel`` lives under ``root``."""
    return os.path.join(root, config.namespace, config.name, str(channel))


def open_store(
    config: TopicConfig, channel: int, *, restarted: bool = False
) -> RingbufferStore | None:
    """The store of ``channel`` (None without one), opened (and recovered) now.

    A ``restarted`` channel's embedded store must already exist: an empty one
    (a node where the shared directory is not mounted) would silently lose
    everything.

    Raises:
        InvalidTypeError: a factory returned something that is not a RingbufferStore.
        Exception: whatever opening the store raised (the channel then comes up fenced).
    """
    store = config.store
    if store is None:
        return None
    if callable(store):
        made = store(config.name, channel)
        if not isinstance(made, RingbufferStore):
            raise InvalidTypeError(
                f"the store factory returned a {type(made).__name__}, not a RingbufferStore"
            )
        return made
    return SegmentLogStore(
        store_directory(store, config, channel),
        retention_bytes=config.retention_bytes,
        retention_seconds=config.retention_seconds,
        must_exist=restarted,
    )
