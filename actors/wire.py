"""What crosses the wire between handles and channel actors.

Messages are small frozen dataclasses. The two replies that carry elements or
publish statuses in bulk (:class:`ReceivedBatch`, :class:`StatusBatch`)
travel in a compact columnar form and rebuild into the user's records
(``list[Element]``, ``list[PublishStatus]``) wherever the ObjectRef is
resolved: in the subscriber's driver, or in a Ray task it was handed to.

Values travel as pickled bytes from publisher to subscriber: the channel
never needs to import the user's classes unless a filter or converter runs.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle

from raytopic.errors import InvalidArgumentError, InvalidTypeError
from raytopic.records import Element, Position, PublishStatus, _Origin, stamp_to_datetime

__all__ = [
    "AppendAck",
    "Delivery",
    "ReaderSpec",
    "ReceivedBatch",
    "StatusBatch",
    "dumps_value",
    "loads_value",
    "pack_request",
    "unpack_request",
]


# -- requests ----------------------------------------------------------------

PACKED_METHODS = frozenset({"append", "receive", "take", "watch", "give_back"})
"""The channel methods on the data path, called through ``ChannelActor.request``."""


def pack_request(method: str, *args: Any) -> bytes:
    """One channel call (method name and arguments) as a single bytes argument.

    Ray serializes each argument of an actor call on its own, at tens of
    microseconds each way; the data-path calls carry five or six small
    arguments, so they travel as one pickled tuple instead (about a quarter
    of a millisecond less per call here). The arguments hold no ObjectRefs.
    """
    return pickle.dumps((method, args), protocol=5)


def unpack_request(packed: bytes) -> tuple[str, tuple[Any, ...]]:
    """The method name and arguments of a :func:`pack_request` request.

    Raises:
        InvalidArgumentError: not a request, or not one of :data:`PACKED_METHODS`.
    """
    try:
        method, args = pickle.loads(packed)
    except Exception as error:
        raise InvalidArgumentError(f"not a packed channel request: {error}") from None
    if method not in PACKED_METHODS or not isinstance(args, tuple):
        raise InvalidArgumentError(f"{method!r} cannot be called as a packed request")
    return method, args


# -- values ------------------------------------------------------------------

_REF_MARKER = b"ObjectRef"
_MAIN_MARKER = b"__main__"


def dumps_value(value: Any) -> bytes:
    """Pickle one published value, refusing what cannot be stored as a value.

    Plain pickle first (fast); cloudpickle when plain pickle cannot, or when
    the value refers to ``__main__`` (which a consumer process could not
    import). ObjectRefs, bare or nested, are refused: a ref stored in a topic
    would die with the publisher.

    Raises:
        InvalidTypeError: ``value`` is None, an ObjectRef (or holds one), or
            cannot be pickled.
    """
    if value is None:
        raise InvalidTypeError("None is not a value: publish something else")
    try:
        data = pickle.dumps(value, protocol=5)
        if _MAIN_MARKER in data:
            data = cloudpickle.dumps(value, protocol=5)
    except Exception:
        try:
            data = cloudpickle.dumps(value, protocol=5)
        except Exception as error:
            raise InvalidTypeError(
                f"value of type {type(value).__name__} cannot be pickled: {error}"
            ) from error
    if _REF_MARKER in data and _holds_object_ref(value):
        raise InvalidTypeError(
            "an ObjectRef cannot be published: it would die with its owner; "
            "publish the value (ray.get it first)"
        )
    return data


def _holds_object_ref(value: Any) -> bool:
    """Exact check behind the fast byte test in :func:`dumps_value`."""
    import io

    import ray

    found = False

    class _Finder(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            nonlocal found
            if isinstance(obj, ray.ObjectRef):
                found = True
                return (str, ("",))
            return super().reducer_override(obj)

    _Finder(io.BytesIO(), protocol=5).dump(value)
    return found


def loads_value(data: bytes) -> Any:
    """Unpickle one stored value."""
    return pickle.loads(data)


# -- publishing ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendAck:
    """A channel's answer to one publisher batch.

    The first ``accepted`` values were appended, from ``first`` on, with time
    stamp ``stamp``; the rest failed with ``error`` (overflow "fail", or
    "block" timing out). A batch larger than the channel's capacity goes in
    several pieces under "block": then ``runs`` lists every piece as
    ``(first, count, stamp)``.
    """

    first: int
    accepted: int
    stamp: float
    error: Exception | None = None
    runs: tuple[tuple[int, int, float], ...] = ()

    def locate(self, index: int) -> tuple[int, float]:
        """(sequence, stamp) of the ``index``-th accepted value."""
        if not self.runs:
            return self.first + index, self.stamp
        for first, count, stamp in self.runs:
            if index < count:
                return first + index, stamp
            index -= count
        raise IndexError("value was not accepted")


class StatusBatch:
    """``publish_batch``'s reply from one channel; rebuilds into ``list[PublishStatus]``."""

    __slots__ = ("ack", "channel", "topic_id")

    def __init__(self, topic_id: str, channel: int, ack: AppendAck) -> None:
        self.topic_id = topic_id
        self.channel = channel
        self.ack = ack

    def __reduce__(self) -> tuple[Any, ...]:
        return (_build_statuses, (self.topic_id, self.channel, self.ack))

    def statuses(self) -> list[PublishStatus]:
        """The statuses, one per value, in publish order; raises the error of a refused value."""
        return _build_statuses(self.topic_id, self.channel, self.ack)


def _build_statuses(topic_id: str, channel: int, ack: AppendAck) -> list[PublishStatus]:
    if ack.error is not None:
        raise ack.error
    statuses = []
    for first, count, stamp in ack.runs or ((ack.first, ack.accepted, ack.stamp),):
        timestamp = stamp_to_datetime(stamp)
        statuses.extend(
            PublishStatus(channel, Position(topic_id, channel, sequence), timestamp)
            for sequence in range(first, first + count)
        )
    return statuses


# -- receiving -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReaderSpec:
    """How a subscriber reads: registered on every channel when it subscribes."""

    group: str | None
    """The group, or None for an anonymous subscriber."""
    start_latest: bool
    """Anonymous cursors (and new groups) start at the tail, else at the head."""
    filter: bytes | None = None
    """cloudpickled ``value -> bool``, run in the channel."""
    converter: bytes | None = None
    """cloudpickled ``value -> value``, run in the channel."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one channel handed one reader in one take.

    The elements travel as ``runs``: one pickled tuple of ``(first_sequence,
    stamp, payloads)`` triples, so a home channel relaying a sibling's
    delivery passes bytes along without unpickling a thousand payloads.
    ``next`` is where the reader's cursor stands afterwards, ``tail`` and
    ``committed`` what the channel knew then.
    """

    channel: int
    first: int
    """Sequence of the first element (``next`` when empty)."""
    count: int
    """How many elements it carries."""
    runs: bytes
    epoch: int
    next: int
    tail: int
    committed: int
    origin: _Origin
    unacked: int = 0
    """The reader's delivered-but-uncommitted count here afterwards."""

    @classmethod
    def pack(
        cls,
        channel: int,
        runs: Sequence[tuple[int, float, Sequence[bytes]]],
        epoch: int,
        next_sequence: int,
        tail: int,
        committed: int,
        origin: _Origin,
        unacked: int = 0,
    ) -> Delivery:
        """Build a delivery from runs of payloads."""
        count = sum(len(run[2]) for run in runs)
        first = runs[0][0] if runs else next_sequence
        blob = pickle.dumps(tuple(runs), protocol=5) if runs else b""
        return cls(
            channel, first, count, blob, epoch, next_sequence, tail, committed, origin, unacked
        )


class ReceivedBatch:
    """A home channel's reply to ``receive``/``receive_batch``.

    Rebuilds into ``Element | None`` (``single``) or ``list[Element]``.
    """

    __slots__ = ("deliveries", "single")

    def __init__(self, deliveries: Sequence[Delivery], single: bool) -> None:
        self.deliveries = tuple(deliveries)
        self.single = single

    def __reduce__(self) -> tuple[Any, ...]:
        packed = tuple((d.channel, d.runs, d.origin) for d in self.deliveries if d.count)
        return (_build_elements, (packed, self.single))


_new = object.__new__
_set_value = Element.value.__set__  # type: ignore[attr-defined]
_set_channel = Element.channel.__set__  # type: ignore[attr-defined]
_set_sequence = Element.sequence.__set__  # type: ignore[attr-defined]
_set_stamp = Element.stamp.__set__  # type: ignore[attr-defined]
_set_origin = Element._origin.__set__  # type: ignore[attr-defined]


def _build_elements(
    packed: tuple[tuple[int, bytes, _Origin], ...],
    single: bool,
) -> list[Element] | Element | None:
    # Elements are frozen dataclasses; filling the slots directly skips the
    # generated __init__ (about half the cost), which matters at a million
    # elements per second.
    loads = pickle.loads
    elements: list[Element] = []
    append = elements.append
    for channel, blob, origin in packed:
        for first, stamp, payloads in loads(blob):
            sequence = first
            for payload in payloads:
                element = _new(Element)
                _set_value(element, loads(payload))
                _set_channel(element, channel)
                _set_sequence(element, sequence)
                _set_stamp(element, stamp)
                _set_origin(element, origin)
                append(element)
                sequence += 1
    if single:
        return elements[0] if elements else None
    return elements
