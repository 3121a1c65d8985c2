"""Topic configuration: validated once, on the caller's side, before any actor exists."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeGuard, TypeVar, overload

from raytopic.core.errors import GroupModeError, InvalidArgumentError, InvalidTypeError
from raytopic.core.user_functions import PickledFunction

__all__ = [
    "DEFAULT_NAMESPACE",
    "FIXED_SETTINGS",
    "MAX_CHANNELS",
    "MAX_COUNT",
    "MAX_LINGER_SECONDS",
    "MAX_RETENTION_SECONDS",
    "MAX_SECONDS",
    "OnPoisonName",
    "Overflow",
    "OverflowName",
    "PlacementName",
    "Start",
    "StartName",
    "SyncName",
    "TopicConfig",
    "check_bool",
    "check_datetime",
    "check_instance",
    "check_int",
    "check_items",
    "check_name",
    "check_namespace",
    "check_nonnegative_int",
    "check_nonnegative_number",
    "check_positive_int",
    "check_seconds",
    "check_store",
    "check_sync",
    "check_timeout",
    "fixed_settings",
    "settings_differences",
    "shown",
]

DEFAULT_NAMESPACE = "raytopic"
"""The Ray namespace topics live in when none is given."""

MAX_SECONDS = 365 * 24 * 3600.0
"""The longest timeout, delay, lease or wait a setting takes: a year, in seconds.
A longer wait is a mistake, and one Python cannot make (``float("inf")``, or past
``threading.TIMEOUT_MAX``, about 292 years) kills the background thread that waits
it out; so every duration is checked, against this or a bound of its own."""

MAX_LINGER_SECONDS = 3600.0
"""The longest a publisher's ``linger`` or a store's background ``sync`` interval
may be: an hour (a batch or an unsynced append held back longer is a mistake)."""

MAX_RETENTION_SECONDS = 100 * MAX_SECONDS
"""The longest an element's ``ttl`` or a store's retention may be: a century
(where the setting allows None, None means no limit)."""

MAX_CHANNELS = 10_000
"""The most channels a topic has: each is an actor process of its own."""

MAX_COUNT = 2**63 - 1
"""The largest count, size, sequence or position any argument takes (a signed 64-bit
int: what Arrow's int64 columns, numpy and Spark's LongType hold) unless it documents
a bound of its own; an int argument below zero is at least ``-MAX_COUNT - 1``. A
larger one is a mistake some layer could not carry (an OverflowError deep in a task)."""

_BOUND_NAMES = {
    MAX_SECONDS: "a year",
    MAX_LINGER_SECONDS: "an hour",
    MAX_RETENTION_SECONDS: "a century",
}

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


_Named = TypeVar("_Named", bound=enum.StrEnum)


def _from_name(
    options: type[_Named], value: object, argument: str, *, str_only: bool = False
) -> _Named:
    """``value`` as one of ``options``, read from its name (or given as one); raise
    InvalidArgumentError naming ``argument`` and the names otherwise (InvalidTypeError
    for a value that is not a str, with ``str_only``)."""
    if isinstance(value, str) and value in options._value2member_map_:
        return options(value)
    if str_only and not isinstance(value, str):
        raise InvalidTypeError(f"{argument} must be a str, got {type(value).__name__}")
    names = [repr(option.value) for option in options]
    listed = " or ".join(names) if len(names) == 2 else f"one of {', '.join(names)}"
    raise InvalidArgumentError(f"{argument} must be {listed}, got {value!r}")


class Overflow(enum.StrEnum):
    """What an append does when the channel is full."""

    BLOCK = "block"
    """Wait for room (publisher back-pressure), up to the publisher's block_timeout."""
    OVERWRITE = "overwrite"
    """Drop the oldest elements (Hazelcast OVERWRITE)."""
    FAIL = "fail"
    """Refuse the whole batch: -1 from the ring buffer, TopicFullError for publishes."""

    @classmethod
    def parse(cls, value: object, *, argument: str = "overflow") -> Overflow:
        """Read an Overflow from its name; raise InvalidArgumentError naming ``argument``."""
        return _from_name(cls, value, argument)


OverflowName = Literal["block", "overwrite", "fail"]
"""``overflow`` by name, as public signatures take it (or an :class:`Overflow`)."""


class Start(enum.StrEnum):
    """Where a new subscriber (or a new group) starts reading."""

    EARLIEST = "earliest"
    """At the head: the oldest element still stored."""
    LATEST = "latest"
    """At the tail: only elements published from now on."""

    @classmethod
    def parse(cls, value: str | Start) -> Start:
        """Read a Start from its name; raise InvalidArgumentError otherwise."""
        return _from_name(cls, value, "start")


StartName = Literal["earliest", "latest"]
"""``start`` by name, as public signatures take it (or a :class:`Start`)."""


class OnPoison(enum.StrEnum):
    """What a subscriber does with a poison element: one it cannot decode, or on
    which its filter or converter raises (see ``rt.PoisonElementError``)."""

    RAISE = "raise"
    """Stop before it and raise PoisonElementError once; skip it with a ``seek``."""
    SKIP = "skip"
    """Pass over it: logged, and counted in ``raytopic_poison_skipped``."""

    @classmethod
    def parse(cls, value: object) -> OnPoison:
        """Read an OnPoison from its name; raise InvalidArgumentError otherwise
        (InvalidTypeError for a value that is not a str)."""
        return _from_name(cls, value, "on_poison", str_only=True)


OnPoisonName = Literal["raise", "skip"]
"""``on_poison`` by name, as public signatures take it (or an :class:`OnPoison`)."""


class RoundRobin(enum.StrEnum):
    """How a publisher's ``publish_batch`` sends its values without a key to the channels."""

    VALUE = "value"
    """Value by value: each value to the next channel (a batch of N over K channels
    is K parts, one call each)."""
    BATCH = "batch"
    """Batch by batch: the batch's keyless values to one channel, the next batch's
    to the next (one part, one call, whatever the channel count)."""

    @classmethod
    def parse(cls, value: object) -> RoundRobin:
        """Read a RoundRobin from its name; raise InvalidArgumentError otherwise
        (InvalidTypeError for a value that is not a str)."""
        return _from_name(cls, value, "round_robin", str_only=True)


RoundRobinName = Literal["value", "batch"]
"""``round_robin`` by name, as public signatures take it (or a :class:`RoundRobin`)."""

SyncName = Literal["always", "write"]
"""``sync`` by name (or seconds between background syncs)."""

PlacementName = Literal["spread", "pack"]
"""``placement``: channels spread over the nodes, or packed on few."""


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


def shown(value: object) -> str:
    """``value`` as an error message shows it: its repr, cut short (a huge int by its size)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # a user's object whose repr raises
        text = f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


def _is_number(value: object) -> TypeGuard[int | float]:
    """An int or a float; a bool is not a number here (``timeout=True`` is a mistake)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_int(
    value: object, what: str, *, minimum: int = -MAX_COUNT - 1, maximum: int = MAX_COUNT
) -> int:
    """Return ``value`` if it is an int (not a bool) within ``[minimum, maximum]``
    (a signed 64-bit int's range unless given: see ``MAX_COUNT``).

    Raises:
        InvalidTypeError: not an int, naming ``what``.
        InvalidArgumentError: out of range, naming ``what`` and the bound.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidTypeError(f"{what} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise InvalidArgumentError(f"{what} must be >= {minimum}, got {shown(value)}")
    if value > maximum:
        raise InvalidArgumentError(f"{what} must be <= {maximum}, got {shown(value)}")
    return value


def check_positive_int(value: object, what: str, *, maximum: int = MAX_COUNT) -> int:
    """Return ``value`` if it is an int >= 1 and <= ``maximum``, else raise naming ``what``."""
    return check_int(value, what, minimum=1, maximum=maximum)


def check_nonnegative_int(value: object, what: str, *, maximum: int = MAX_COUNT) -> int:
    """Return ``value`` if it is an int >= 0 and <= ``maximum``, else raise naming ``what``."""
    return check_int(value, what, minimum=0, maximum=maximum)


def check_seconds(
    value: object,
    what: str,
    *,
    allow_none: bool = False,
    allow_zero: bool = False,
    maximum: float = MAX_SECONDS,
) -> float | None:
    """Return ``value`` as seconds: a finite number > 0 (>= 0 with ``allow_zero``) and
    at most ``maximum`` (a year unless the setting documents another bound); None
    where ``allow_none``.

    Raises:
        InvalidTypeError: not a number (a bool is not one), naming ``what``.
        InvalidArgumentError: out of range (NaN and infinities too), naming ``what``
            and the bound.
    """
    if value is None and allow_none:
        return None
    if not _is_number(value):
        raise InvalidTypeError(f"{what} must be a number of seconds, got {type(value).__name__}")
    in_range = value >= 0 if allow_zero else value > 0  # False for NaN
    if not (in_range and value <= maximum):
        lowest = ">= 0" if allow_zero else "> 0"
        bound = _BOUND_NAMES.get(maximum, f"{maximum:g} s")
        raise InvalidArgumentError(
            f"{what} must be {lowest} seconds and at most {maximum:.0f} ({bound}), "
            f"got {shown(value)}"
        )
    return float(value)


def check_nonnegative_number(value: object, what: str, *, maximum: float = MAX_SECONDS) -> float:
    """Return ``value`` as seconds if it is a finite number >= 0 and <= ``maximum`` (a
    year unless given), else raise naming ``what`` (see :func:`check_seconds`)."""
    return check_seconds(value, what, allow_zero=True, maximum=maximum)  # type: ignore[return-value]


@overload
def check_timeout(
    value: object, what: str, *, allow_none: Literal[False], maximum: float = MAX_SECONDS
) -> float: ...
@overload
def check_timeout(
    value: object, what: str, *, allow_none: bool = True, maximum: float = MAX_SECONDS
) -> float | None: ...
def check_timeout(
    value: object, what: str, *, allow_none: bool = True, maximum: float = MAX_SECONDS
) -> float | None:
    """Return ``value`` as seconds if it is None (when allowed) or a finite number > 0
    and <= ``maximum`` (a year unless given); see :func:`check_seconds`."""
    return check_seconds(value, what, allow_none=allow_none, maximum=maximum)


def check_bool(value: object, what: str) -> bool:
    """Return ``value`` if it is a bool (not merely truthy: ``exist_ok=1`` is refused).

    Raises:
        InvalidTypeError: not a bool, naming ``what``.
    """
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{what} must be a bool, got {type(value).__name__}")
    return value


def check_namespace(value: object) -> str:
    """The Ray namespace a call names: ``value``, or the default one for None.

    Raises:
        InvalidTypeError, InvalidArgumentError: not a valid name (as topic names).
    """
    return DEFAULT_NAMESPACE if value is None else check_name(value, "namespace")


def check_items(value: object, what: str) -> list[Any]:
    """``value``'s items as a list, for an argument that takes several (values, keys,
    elements, items).

    A str, bytes or a mapping is refused rather than iterated: its characters,
    bytes or keys are never what was meant.

    Raises:
        InvalidTypeError: not an iterable of items, naming ``what``.
    """
    if isinstance(value, (str, bytes, bytearray, memoryview, Mapping)) or not isinstance(
        value, Iterable
    ):
        raise InvalidTypeError(
            f"{what} must be an iterable of items (a list, a tuple, ...), "
            f"got {type(value).__name__}"
        )
    return list(value)


def check_datetime(value: datetime, what: str) -> float:
    """``value`` as a time stamp (seconds since the epoch); a naive datetime is local
    time, as ``datetime.timestamp()`` reads it.

    Raises:
        InvalidTypeError: not a datetime, naming ``what``.
        InvalidArgumentError: a time the platform cannot place (a naive
            ``datetime(1, 1, 1)`` in a zone east of UTC, say), naming ``what``.
    """
    if not isinstance(value, datetime):
        raise InvalidTypeError(f"{what} must be a datetime, got {type(value).__name__}")
    try:
        return value.timestamp()
    except (ValueError, OverflowError, OSError) as error:
        raise InvalidArgumentError(
            f"{what} {value!r} is out of range: {error} (give an aware datetime)"
        ) from None


def check_instance(value: object, kind: type, what: str) -> Any:
    """Return ``value`` if it is a ``kind`` (a handle the call needs: a Topic, ...).

    Raises:
        InvalidTypeError: it is something else (a topic's name where its Topic is
            expected, say), naming ``what``.
    """
    if not isinstance(value, kind):
        module = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
        raise InvalidTypeError(
            f"{what} must be a {module}{kind.__qualname__}, got {type(value).__name__}"
        )
    return value


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
    """Keep elements after every group committed them (until capacity/TTL; always, on a
    compacted topic)."""
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
    ``(topic_name, channel) -> store`` (see ``RingbufferStore``), carried as a
    ``PickledFunction``."""
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
    compaction: Any = None
    """None, or the ``Compaction`` of a compacted topic: every element has a key,
    and older elements of a key are compacted away (docs/guides/compacted-topics.md)."""

    @classmethod
    def create(
        cls,
        name: object,
        *,
        channels: object = 8,
        capacity: object = 1_000_000,
        retain: object = None,
        ttl: object = None,
        overflow: object = "block",
        groups: object = (),
        namespace: object = None,
        store: object = None,
        sync: object = "always",
        store_retention: object = None,
        placement: object = "spread",
        default_window: object = 1000,
        compaction: object = None,
    ) -> TopicConfig:
        """Validate ``create_topic``'s arguments; every error names the argument.

        ``retain`` None is the default: False, and True for a compacted topic
        (which refuses ``retain=False``: compaction is what removes its elements).
        """
        name = check_name(name, "topic name")
        namespace = check_namespace(namespace)
        channels = check_positive_int(channels, "channels", maximum=MAX_CHANNELS)
        capacity = check_positive_int(capacity, "capacity")
        from raytopic.core.compaction import Compaction  # (it validates with this module)

        if compaction is not None and not isinstance(compaction, Compaction):
            raise InvalidTypeError(
                f"compaction must be None or a raytopic.Compaction, got {type(compaction).__name__}"
            )
        if retain is None:
            retain = compaction is not None
        retain = check_bool(retain, "retain")
        if compaction is not None and not retain:
            raise InvalidArgumentError(
                "retain=False cannot go with compaction: a compacted topic keeps its elements "
                "until compaction removes them (leave retain out)"
            )
        from raytopic.core.shared_group import SharedGroup  # (it validates with this module)

        groups = tuple(
            g if isinstance(g, SharedGroup) else check_name(g, "group name")
            for g in check_items(groups, "groups")
        )
        group_names = tuple(g if isinstance(g, str) else g.name for g in groups)
        retention_seconds, retention_bytes = _check_retention(store_retention, store)
        default_window = check_positive_int(default_window, "default_window")
        if len(set(group_names)) != len(group_names):
            raise InvalidArgumentError(f"groups has duplicates: {list(group_names)}")
        if compaction is not None and len(group_names) != sum(isinstance(g, str) for g in groups):
            raise GroupModeError(f"topic {name!r} is compacted: it has no shared groups")
        return cls(
            name=name,
            namespace=namespace,
            topic_id=uuid.uuid4().hex[:16],
            channels=channels,
            capacity=capacity,
            retain=retain,
            ttl=check_timeout(ttl, "ttl", maximum=MAX_RETENTION_SECONDS),
            overflow=Overflow.parse(overflow),
            groups=groups,
            store=check_store(store),
            sync=check_sync(sync),
            retention_seconds=retention_seconds,
            retention_bytes=retention_bytes,
            placement=_check_placement(placement),
            default_window=default_window,
            compaction=compaction,
        )


FIXED_SETTINGS = ("channels", "capacity", "retain", "ttl", "overflow", "compaction")
"""The settings a topic keeps for its life, fixed when it is made: each channel's
store records them (with the topic's id), and ``create_topic`` over a store that
holds the topic (reopening it after its actors were gone) must ask the same ones,
else it is refused (``TopicSettingsError``, naming them). ``exist_ok`` warns about
the same list. The others (``sync``, ``store_retention``, ``placement``,
``default_window``, ``groups``) are how one run of the topic works and may change
at a reopen.

A new setting of what a topic stores or how it is read is added here and
nowhere else: its value must be JSON as :func:`fixed_settings` gives it (an enum
is kept as its value, an object with ``to_state()`` as what that returns, as
``Compaction``), and a store recorded before it existed counts as holding its
``TopicConfig`` field's default."""


def fixed_settings(config: TopicConfig) -> dict[str, Any]:
    """``config``'s :data:`FIXED_SETTINGS` as a store records them (JSON values)."""
    return {name: _as_json(getattr(config, name)) for name in FIXED_SETTINGS}


def settings_differences(
    recorded: Mapping[str, Any], config: TopicConfig
) -> dict[str, tuple[Any, Any]]:
    """The fixed settings ``recorded`` (as :func:`fixed_settings` gave them, maybe by
    an earlier raytopic) holds otherwise than ``config``: name -> (recorded, asked)."""
    defaults = {
        field.name: field.default
        for field in dataclasses.fields(TopicConfig)
        if field.default is not dataclasses.MISSING
    }
    asked = fixed_settings(config)
    differences = {}
    for name, value in asked.items():
        if name in recorded:
            kept = recorded[name]
        elif name in defaults:
            kept = _as_json(defaults[name])
        else:
            continue  # recorded before the setting existed, and it has no default
        if kept != value:
            differences[name] = (kept, value)
    return differences


def _as_json(value: Any) -> Any:
    """A setting's value as JSON gives it back (an enum as its value, an object with
    ``to_state()`` as its state, tuples as lists)."""
    if isinstance(value, enum.Enum):
        value = value.value
    elif callable(getattr(value, "to_state", None)):
        value = value.to_state()
    return json.loads(json.dumps(value))


def check_store(store: object) -> Any:
    """A directory (as an absolute path str), a factory (pickled: only the channels,
    which call it, load it), or None: ``create_topic``'s ``store``, checked (one
    checked already is kept as it is).

    Raises:
        InvalidArgumentError, InvalidTypeError: not a store.
    """
    if store is None or isinstance(store, PickledFunction):
        return store
    if callable(store):
        return PickledFunction.of(store, "store factory")
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
    if not isinstance(placement, str) or placement not in ("spread", "pack"):
        raise InvalidArgumentError(f"placement must be 'spread' or 'pack', got {shown(placement)}")
    return placement


def check_sync(sync: object) -> str | float:
    """Check a ``sync`` setting ("always", "write", or seconds between background
    syncs: > 0 and at most an hour, ``MAX_LINGER_SECONDS``); raise naming it."""
    if isinstance(sync, str) and sync in ("always", "write"):
        return sync
    if _is_number(sync):
        return check_seconds(sync, "sync", maximum=MAX_LINGER_SECONDS)  # type: ignore[return-value]
    raise InvalidArgumentError(
        f"sync must be 'always', 'write' or a number of seconds > 0, got {shown(sync)}"
    )


def _check_retention(retention: object, store: object) -> tuple[float | None, int | None]:
    """``store_retention={"seconds": s, "bytes": n}`` (either or both), only with a store."""
    if retention is None:
        return None, None
    if store is None:
        raise InvalidArgumentError("store_retention needs a store")
    if not isinstance(retention, Mapping) or not set(retention) <= {"seconds", "bytes"}:
        raise InvalidArgumentError(
            f'store_retention must be a dict with "seconds" and/or "bytes", got {shown(retention)}'
        )
    seconds = retention.get("seconds")
    size = retention.get("bytes")
    if seconds is not None:
        seconds = check_nonnegative_number(
            seconds, 'store_retention["seconds"]', maximum=MAX_RETENTION_SECONDS
        )
    if size is not None:
        size = check_nonnegative_int(size, 'store_retention["bytes"]')
    return seconds, size
