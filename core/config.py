"""Topic configuration: validated once, on the caller's side, before any actor exists."""

from __future__ import annotations

import enum
import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raytopic.core.errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "DEFAULT_NAMESPACE",
    "Overflow",
    "Start",
    "TopicConfig",
    "check_name",
    "check_nonnegative_int",
    "check_nonnegative_number",
    "check_positive_int",
    "check_sync",
    "check_timeout",
]

DEFAULT_NAMESPACE = "raytopic"
"""The Ray namespace topics live in when none is given."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


class Overflow(enum.StrEnum):
    """What an append does when the channel is full."""

    BLOCK = "block"
    """Wait for room (publisher back-pressure), up to the publisher's block_timeout."""
    OVERWRITE = "overwrite"
    """Drop the oldest elements (Hazelcast OVERWRITE)."""
    FAIL = "fail"
    """Refuse the whole batch: -1 from the ring buffer, TopicFullError for publishes."""

    @classmethod
    def parse(cls, value: str | Overflow, *, argument: str = "overflow") -> Overflow:
        """Read an Overflow from its name; raise InvalidArgumentError naming ``argument``."""
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(repr(member.value) for member in cls)
            raise InvalidArgumentError(
                f"{argument} must be one of {choices}, got {value!r}"
            ) from None


class Start(enum.StrEnum):
    """Where a new subscriber (or a new group) starts reading."""

    EARLIEST = "earliest"
    """At the head: the oldest element still stored."""
    LATEST = "latest"
    """At the tail: only elements published from now on."""

    @classmethod
    def parse(cls, value: str | Start) -> Start:
        """Read a Start from its name; raise InvalidArgumentError otherwise."""
        try:
            return cls(value)
        except ValueError:
            raise InvalidArgumentError(
                f"start must be 'earliest' or 'latest', got {value!r}"
            ) from None


class OnPoison(enum.StrEnum):
    """What a subscriber does with a poison element: one it cannot decode, or on
    which its filter or converter raises (see ``rt.PoisonElementError``)."""

    RAISE = "raise"
    """Stop before it and raise PoisonElementError once; skip it with a ``seek``."""
    SKIP = "skip"
    """Pass over it: logged, and counted in ``raytopic_poison_skipped``."""

    @classmethod
    def parse(cls, value: object) -> OnPoison:
        """Read an OnPoison from its name; raise InvalidArgumentError otherwise."""
        if not isinstance(value, str):
            raise InvalidTypeError(f"on_poison must be a str, got {type(value).__name__}")
        try:
            return cls(value)
        except ValueError:
            raise InvalidArgumentError(
                f"on_poison must be 'raise' or 'skip', got {value!r}"
            ) from None


def check_name(value: object, what: str) -> str:
    """Check a topic or group name: 1-128 of letters, digits, ``_ . -``, not starting with those."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{what} must be a str, got {type(value).__name__}")
    if not _NAME.fullmatch(value):
        raise InvalidArgumentError(
            f"{what} {value!r} is not a valid name: use 1-128 letters, digits, '_', '.', '-',"
            " starting with a letter or digit"
        )
    return value


def _check_int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidTypeError(f"{what} must be an int, got {type(value).__name__}")
    return value


def check_positive_int(value: object, what: str) -> int:
    """Return ``value`` if it is an int >= 1, else raise naming ``what``."""
    if _check_int(value, what) < 1:
        raise InvalidArgumentError(f"{what} must be >= 1, got {value}")
    return value  # type: ignore[return-value]


def check_nonnegative_int(value: object, what: str) -> int:
    """Return ``value`` if it is an int >= 0, else raise naming ``what``."""
    if _check_int(value, what) < 0:
        raise InvalidArgumentError(f"{what} must be >= 0, got {value}")
    return value  # type: ignore[return-value]


def check_nonnegative_number(value: object, what: str) -> float:
    """Return ``value`` as a float if it is a number >= 0, else raise naming ``what``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidTypeError(f"{what} must be a number, got {type(value).__name__}")
    if not value >= 0:
        raise InvalidArgumentError(f"{what} must be >= 0, got {value}")
    return float(value)


def check_timeout(value: object, what: str, *, allow_none: bool = True) -> float | None:
    """Return ``value`` as seconds if it is None (when allowed) or a number > 0."""
    if value is None and allow_none:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidTypeError(f"{what} must be a number of seconds, got {type(value).__name__}")
    if not value > 0:
        raise InvalidArgumentError(f"{what} must be > 0 seconds, got {value}")
    return float(value)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's settings, fixed at ``create_topic``."""

    name: str
    """The topic's name, unique in its namespace."""
    namespace: str
    """The Ray namespace its actors live in."""
    topic_id: str
    """A fresh id: positions name it, so a re-created topic is another topic."""
    channels: int
    """How many channels (channel actors)."""
    capacity: int
    """Elements each channel holds at most."""
    retain: bool
    """Keep elements after every group committed them (until capacity/TTL)."""
    ttl: float | None
    """Seconds an element lives, or None."""
    overflow: Overflow
    """What publishing into a full channel does."""
    groups: tuple[Any, ...]
    """Durable groups that exist from the topic's creation: names (owned groups)
    and ``SharedGroup`` definitions."""
    store: Any = None
    """None (in memory), a directory (the embedded segment log under
    ``<store>/<namespace>/<topic>/<channel>``), or a factory
    ``(topic_name, channel) -> store`` (see ``RingbufferStore``)."""
    sync: str | float = "always"
    """When an append to the embedded store is acknowledged: "always" (after
    fdatasync), "write" (once written), or seconds between background syncs."""
    retention_seconds: float | None = None
    """Keep stored elements below the ring's head readable this long (Kafka retention.ms)."""
    retention_bytes: int | None = None
    """... or up to this many bytes (Kafka retention.bytes)."""
    placement: str = "spread"
    """Where channel actors go: "spread" over the cluster's nodes (Ray's SPREAD),
    or "pack" (Ray's default: where resources are found first)."""
    default_window: int = 1000
    """Most unacknowledged elements per shared group member when neither the
    member nor its group says (Universal Messaging's "ClientQueueWindow")."""

    @classmethod
    def create(
        cls,
        name: object,
        *,
        channels: object = 8,
        capacity: object = 1_000_000,
        retain: object = False,
        ttl: object = None,
        overflow: object = "block",
        groups: object = (),
        namespace: object = None,
        store: object = None,
        sync: object = "always",
        store_retention: object = None,
        placement: object = "spread",
        default_window: object = 1000,
    ) -> TopicConfig:
        """Validate ``create_topic``'s arguments; every error names the argument."""
        check_name(name, "topic name")
        if namespace is None:
            namespace = DEFAULT_NAMESPACE
        check_name(namespace, "namespace")
        check_positive_int(channels, "channels")
        check_positive_int(capacity, "capacity")
        if not isinstance(retain, bool):
            raise InvalidTypeError(f"retain must be a bool, got {type(retain).__name__}")
        if isinstance(groups, str) or not hasattr(groups, "__iter__"):
            raise InvalidTypeError("groups must be a sequence of group names")
        from raytopic.core.shared_group import SharedGroup  # (it validates with this module)

        groups = tuple(
            g if isinstance(g, SharedGroup) else check_name(g, "group name")
            for g in groups  # type: ignore[union-attr]
        )
        group_names = tuple(g if isinstance(g, str) else g.name for g in groups)
        retention_seconds, retention_bytes = _check_retention(store_retention, store)
        check_positive_int(default_window, "default_window")
        if len(set(group_names)) != len(group_names):
            raise InvalidArgumentError(f"groups has duplicates: {list(group_names)}")
        return cls(
            name=name,  # type: ignore[arg-type]
            namespace=namespace,  # type: ignore[arg-type]
            topic_id=uuid.uuid4().hex[:16],
            channels=channels,  # type: ignore[arg-type]
            capacity=capacity,  # type: ignore[arg-type]
            retain=retain,
            ttl=check_timeout(ttl, "ttl"),
            overflow=Overflow.parse(overflow),  # type: ignore[arg-type]
            groups=groups,
            store=_check_store(store),
            sync=check_sync(sync),
            retention_seconds=retention_seconds,
            retention_bytes=retention_bytes,
            placement=_check_placement(placement),
            default_window=default_window,  # type: ignore[arg-type]
        )


def _check_store(store: object) -> Any:
    """A directory (as an absolute path str), a factory, or None."""
    if store is None or callable(store):
        return store
    if isinstance(store, (str, os.PathLike)):
        path = os.fspath(store)
        if not path:
            raise InvalidArgumentError("store must be a directory path, got ''")
        if "://" in path:
            raise InvalidArgumentError(
                f"store {path!r}: URIs are not supported yet; give a directory path"
            )
        return os.path.abspath(path)
    raise InvalidTypeError(
        "store must be a directory path or a factory (topic_name, channel) -> "
        f"RingbufferStore, got {type(store).__name__}"
    )


def _check_placement(placement: object) -> str:
    if placement not in ("spread", "pack"):
        raise InvalidArgumentError(f"placement must be 'spread' or 'pack', got {placement!r}")
    return placement  # type: ignore[return-value]


def check_sync(sync: object) -> str | float:
    """Check a ``sync`` setting ("always", "write" or seconds > 0); raise naming it."""
    if sync in ("always", "write"):
        return sync  # type: ignore[return-value]
    if isinstance(sync, (int, float)) and not isinstance(sync, bool) and sync > 0:
        return float(sync)
    raise InvalidArgumentError(
        f"sync must be 'always', 'write' or a number of seconds > 0, got {sync!r}"
    )


def _check_retention(retention: object, store: object) -> tuple[float | None, int | None]:
    """``store_retention={"seconds": s, "bytes": n}`` (either or both), only with a store."""
    if retention is None:
        return None, None
    if store is None:
        raise InvalidArgumentError("store_retention needs a store")
    if not isinstance(retention, Mapping) or not set(retention) <= {"seconds", "bytes"}:
        raise InvalidArgumentError(
            f'store_retention must be a dict with "seconds" and/or "bytes", got {retention!r}'
        )
    seconds = retention.get("seconds")
    size = retention.get("bytes")
    if seconds is not None:
        seconds = check_nonnegative_number(seconds, 'store_retention["seconds"]')
    if size is not None:
        size = check_nonnegative_int(size, 'store_retention["bytes"]')
    return seconds, size
