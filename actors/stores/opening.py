"""Which store a channel gets: none, the embedded segment log in a directory, or a user's."""

from __future__ import annotations

import os
from typing import Any

from raytopic.actors.stores.base import REQUIRED_METHODS, ChannelStore, RingbufferStore
from raytopic.actors.stores.segment_log import SegmentLogStore
from raytopic.core.config import TopicConfig
from raytopic.core.errors import InvalidTypeError, StoreError
from raytopic.core.user_functions import PickledFunction, name_of

__all__ = ["open_store", "store_directory"]


def store_directory(root: str, config: TopicConfig, channel: int) -> str:
    """Where the embedded store of ``channel`` lives under ``root``."""
    return os.path.join(root, config.namespace, config.name, str(channel))


def open_store(
    config: TopicConfig, channel: int, *, restarted: bool = False
) -> ChannelStore | None:
    """The store of ``channel`` (None without one), opened (and recovered) now.

    A ``restarted`` channel's embedded store must already exist: an empty one
    (a node where the shared directory is not mounted) would silently lose
    everything.

    Raises:
        InvalidArgumentError: a factory that cannot be loaded in this process.
        InvalidTypeError: a factory returned something that is not a store.
        StoreError: the factory raised, or the embedded store could not be opened;
            either way the message names the store.
    """
    store = config.store
    if store is None:
        return None
    if isinstance(store, PickledFunction):
        return ChannelStore(_made_by(store.load(), store.name, config, channel))
    if callable(store):
        return ChannelStore(_made_by(store, name_of(store), config, channel))
    try:
        return ChannelStore(
            SegmentLogStore(
                store_directory(store, config, channel),
                retention_bytes=config.retention_bytes,
                retention_seconds=config.retention_seconds,
                must_exist=restarted,
            )
        )
    except StoreError:
        raise
    except Exception as error:
        raise StoreError(
            f"the store {store!r} of channel {channel} of topic {config.name!r} "
            f"could not be opened: {type(error).__name__}: {error}"
        ) from error


def _made_by(factory: Any, name: str, config: TopicConfig, channel: int) -> RingbufferStore:
    """What ``factory`` (called ``name`` in messages) makes for ``channel``, checked
    to be a store."""
    try:
        made = factory(config.name, channel)
    except BaseException as error:  # SystemExit too: it would end the channel, which restarts
        # into the same factory over and over, and create_topic would only time out
        raise StoreError(
            f"the store factory {name} raised for channel {channel} of topic "
            f"{config.name!r}: {type(error).__name__}: {error}"
        ) from error
    if not isinstance(made, RingbufferStore):
        missing = [
            method for method in REQUIRED_METHODS if not callable(getattr(made, method, None))
        ]
        raise InvalidTypeError(
            f"the store factory {name} returned a {type(made).__name__}, which is not a store: "
            f"it lacks {', '.join(missing)} (a store has {', '.join(REQUIRED_METHODS)})"
        )
    return made
