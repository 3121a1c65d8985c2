"""The replies that carry values: appends' acks, deliveries, and the replies that
rebuild into the user's records where they are read.

Messages are small frozen dataclasses. The replies that carry elements or
publish statuses in bulk (:class:`ReceivedBatch`, :class:`RawReadResult`,
:class:`StatusBatch`) travel as payload chunks (or runs) and rebuild into the
user's records (``list[Element]``, a ``ReadResultSet``, a ``PublishStatuses``)
wherever the ObjectRef is resolved: in the subscriber's driver, or in a Ray
task it was handed to.

Values travel as payloads (:mod:`raytopic.core.payloads`) from publisher
to subscriber: the channel never needs to import the user's classes unless a
filter or converter runs.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from raytopic.core.element_batch import ElementBatch
from raytopic.core.naming import channel_actor
from raytopic.core.payloads import decode_checked
from raytopic.core.protocol.channel import Nack, ReportPoison
from raytopic.core.protocol.codec import pack_request, pack_small
from raytopic.core.protocol.records import Poison, poison_error
from raytopic.core.reader_calls import ReaderCalls
from raytopic.core.records import Element, ReadResultSet, _Origin, _unfrozen
from raytopic.core.statuses import PublishStatuses

if TYPE_CHECKING:
    from raytopic.core.payloads import Payload

logger = logging.getLogger(__name__)

__all__ = [
    "AppendAck",
    "Chunk",
    "Delivery",
    "RawReadResult",
    "ReceivedBatch",
    "RingFigures",
    "StatusBatch",
    "wait_for_poison_reports",
]


# -- records built in bulk ----------------------------------------------------------

_new = object.__new__
_Unfrozen = _unfrozen(Element)


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

    @property
    def pieces(self) -> tuple[tuple[int, int, float], ...]:
        """Every piece appended, as ``(first, count, stamp)`` (none: nothing was)."""
        if self.runs:
            return self.runs
        return ((self.first, self.accepted, self.stamp),) if self.accepted else ()

    def then(self, more: AppendAck) -> AppendAck:
        """This ack followed by ``more`` of the same batch (its rest, appended later):
        one ack of every piece, with ``more``'s error."""
        if not self.accepted:
            return more
        pieces = (*self.pieces, *more.pieces)
        runs = pieces if len(pieces) > 1 else ()
        return AppendAck(self.first, self.accepted + more.accepted, self.stamp, more.error, runs)

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
    """``publish_batch``'s reply from one channel; rebuilds into a ``PublishStatuses``."""

    __slots__ = ("ack", "channel", "topic_id")

    def __init__(self, topic_id: str, channel: int, ack: AppendAck) -> None:
        self.topic_id = topic_id
        self.channel = channel
        self.ack = ack

    def __reduce__(self) -> tuple[Any, ...]:
        return inline_reduction((_build_statuses, (self.topic_id, self.channel, self.ack)))

    def statuses(self) -> PublishStatuses:
        """The statuses, one per value, in publish order; raises the error of a refused value."""
        return _build_statuses(self.topic_id, self.channel, self.ack)


def _build_statuses(topic_id: str, channel: int, ack: AppendAck) -> PublishStatuses:
    if ack.error is not None:
        raise ack.error
    # The runs only: a status is built when it is read (a publish_batch of a
    # million values would otherwise spend more on its statuses than on its values).
    runs = ack.runs or ((ack.first, ack.accepted, ack.stamp),)
    return PublishStatuses.of_channel(topic_id, channel, runs)


# -- receiving -----------------------------------------------------------------


class Chunk(NamedTuple):
    """Elements of one channel that share a time stamp (or list their own), as they
    travel."""

    first: int
    """Sequence of the first value."""
    stamp: float
    """Append time of these elements (the first one's, with ``stamps``)."""
    payload: Payload
    """The values."""
    sequences: np.ndarray | None = None
    """Each value's sequence when they are not consecutive (a filter's matches, a
    compacted topic's survivors)."""
    counts: np.ndarray | None = None
    """Each value's delivery count (shared groups); None: 1 each."""
    stamps: np.ndarray | None = None
    """Each value's append time when they differ (a compacted topic's survivors of
    several appends); None: all ``stamp``."""

    def sequence_list(self) -> list[int]:
        """Each value's sequence."""
        if self.sequences is None:
            return list(range(self.first, self.first + len(self.payload)))
        return self.sequences.tolist()

    def stamp_list(self) -> list[float]:
        """Each value's append time."""
        if self.stamps is None:
            return [self.stamp] * len(self.payload)
        return self.stamps.tolist()

    @property
    def last(self) -> int:
        """Sequence of the last value."""
        if self.sequences is None:
            return self.first + len(self.payload) - 1
        return int(self.sequences[-1])


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one channel handed one reader in one take.

    ``next`` is where the reader reads on after these elements, ``stands`` where
    the reader's read position at the channel stands afterwards (``next`` after a
    take; before the elements after a fetch, whose elements are an offer), ``tail``
    and ``committed`` what the channel knew then.
    """

    channel: int
    first: int
    """Sequence of the first element (``next`` when empty)."""
    count: int
    """How many elements it carries."""
    chunks: tuple[Chunk, ...]
    jumps: int
    """The reader's cursor jump count at the take (see ``Cursor.jumps``)."""
    next: int
    tail: int
    committed: int
    origin: _Origin
    unacked: int = 0
    """The reader's delivered-but-uncommitted count here afterwards."""
    stopped: bool = False
    """The cursor stops before a poison element (see ``CursorState.stopped``)."""
    stands: int = -1
    """Where the reader's read position at the channel stands after the take (see
    the class docstring; ``pack`` makes it ``next`` unless told)."""
    passed: tuple[int, int] | None = None
    """The done positions ``(first, last)`` the take read past before ``first`` (see
    ``Cursor.skip_done``): never delivered again, so a resequencing session keeps
    released what it released from there (``Resequencer.passed``)."""

    @classmethod
    def pack(
        cls,
        channel: int,
        chunks: Sequence[Chunk],
        jumps: int,
        next_sequence: int,
        tail: int,
        committed: int,
        origin: _Origin,
        unacked: int = 0,
        stopped: bool = False,
        stands: int | None = None,
        passed: tuple[int, int] | None = None,
    ) -> Delivery:
        """Build a delivery from chunks (``stands``: None, at ``next_sequence``)."""
        count = sum(len(chunk.payload) for chunk in chunks)
        first = chunks[0].first if chunks else next_sequence
        return cls(
            channel,
            first,
            count,
            tuple(chunks),
            jumps,
            next_sequence,
            tail,
            committed,
            origin,
            unacked,
            stopped,
            next_sequence if stands is None else stands,
            passed,
        )

    def entries(self) -> tuple[tuple[int, int], ...]:
        """Each element as (sequence, delivery count): what a shared member acks."""
        return tuple(
            (sequence, count)
            for chunk in self.chunks
            for sequence, count in zip(
                chunk.sequence_list(),
                repeat(1) if chunk.counts is None else chunk.counts.tolist(),
                strict=False,
            )
        )

    def one_by_one(self) -> Iterator[tuple[Any, Delivery]]:
        """Each element as (its decoded value, a delivery of it alone); the value of
        one that does not decode here is ``UNDECODABLE`` (it still travels)."""
        for chunk in self.chunks:
            values, _ = decode_checked(chunk.payload)
            for index, value in enumerate(values):
                yield value, self._with([_slice_chunk(chunk, index, index + 1)])

    def split(self, count: int) -> tuple[Delivery, Delivery]:
        """The first ``count`` elements, and the rest (both keep ``next`` and
        ``stands``; the rest's ``first`` is where its reader reads on if it hands
        over only the first part)."""
        head: list[Chunk] = []
        rest: list[Chunk] = []
        left = count
        for chunk in self.chunks:
            size = len(chunk.payload)
            if left >= size:
                head.append(chunk)
            elif left <= 0:
                rest.append(chunk)
            else:
                head.append(_slice_chunk(chunk, 0, left))
                rest.append(_slice_chunk(chunk, left, size))
            left -= size
        return self._with(head), self._with(rest)

    def _with(self, chunks: list[Chunk]) -> Delivery:
        """A delivery of ``chunks`` (part of this one's) with this one's cursor state."""
        fields = (self.jumps, self.next, self.tail, self.committed, self.origin, self.unacked)
        return Delivery.pack(self.channel, chunks, *fields, self.stopped, self.stands)


def _slice_chunk(chunk: Chunk, start: int, stop: int) -> Chunk:
    counts = None if chunk.counts is None else chunk.counts[start:stop]
    stamps = None if chunk.stamps is None else chunk.stamps[start:stop]
    stamp = chunk.stamp if stamps is None or not len(stamps) else float(stamps[0])
    if chunk.sequences is None:
        payload = chunk.payload.slice(start, stop)
        return Chunk(chunk.first + start, stamp, payload, None, counts, stamps)
    sequences = chunk.sequences[start:stop]
    return Chunk(
        int(sequences[0]), stamp, chunk.payload.slice(start, stop), sequences, counts, stamps
    )


class ReceivedBatch:
    """A channel's reply to ``receive``/``receive_batch``.

    Rebuilds into ``Element | None`` (``single``) or ``list[Element]``.
    """

    __slots__ = ("deliveries", "single")

    def __init__(self, deliveries: Sequence[Delivery], single: bool) -> None:
        self.deliveries = tuple(deliveries)
        self.single = single

    def __reduce__(self) -> tuple[Any, ...]:
        packed = tuple((d.channel, d.chunks, d.origin) for d in self.deliveries if d.count)
        return inline_reduction((_build_elements, (packed, self.single)))


def inline_reduction(built: tuple[Any, ...]) -> tuple[Any, ...]:
    """``built`` (a reply's reduction), pickled here when small (no buffer to move out
    of band), so that Ray's pickler (a Python hook per object, and a look-up of each
    function and class it meets) sees bytes and a builtin: 20-30 us a reply instead of
    100-150 (a receive's reply of one element), ~10 instead of ~55 (a publish_batch
    part's statuses). One plain pickle refuses (a key cloudpickle's alone can
    pickle) takes Ray's way."""
    inline = pack_small(_Reduced(built))
    return built if isinstance(inline, _Reduced) else (pickle.loads, (inline,))


class _Reduced:
    """An object that pickles as a given reduction (what ``ReceivedBatch`` packs)."""

    __slots__ = ("reduction",)

    def __init__(self, reduction: tuple[Any, ...]) -> None:
        self.reduction = reduction

    def __reduce__(self) -> tuple[Any, ...]:
        return self.reduction


def _build_elements(
    packed: tuple[tuple[int, tuple[Chunk, ...], _Origin], ...],
    single: bool,
) -> ElementBatch | Element | Exception | None:
    if _stopped_readers:
        packed = _without_void(packed)
    with _no_collection():
        try:
            elements = _decode_elements(packed)
        except BaseException:  # SystemExit too: a value's loading runs its own code
            # An element this process cannot decode: it costs only itself.
            decoded = _decode_poisoned(packed)
            if not isinstance(decoded, ElementBatch):
                return decoded  # ray.get raises it, as the typed error it carries
            elements = decoded
    if single:
        return elements[0] if elements else None
    return elements


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """The garbage collector paused while a batch is decoded (and resumed after).

    A batch of a thousand values makes a few thousand new container objects;
    with the collector on, each few hundred trigger a collection that also
    walks the elements received before, still alive in the caller's buffers:
    about 0.7 us more per element here, as much as decoding itself. Paused,
    the batch counts toward the next collection like any other allocation.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _decode_elements(packed: tuple[tuple[int, tuple[Chunk, ...], _Origin], ...]) -> ElementBatch:
    elements = ElementBatch()
    for channel, chunks, origin in packed:
        for chunk in chunks:
            _add_elements(elements, chunk.payload.decode(), chunk, channel, origin)
    return elements


def _add_elements(
    elements: ElementBatch,
    values: list[Any],
    chunk: Chunk,
    channel: int,
    origin: _Origin,
    keys: list[Any] | None = None,
) -> None:
    """Append an Element per value of ``chunk`` (built in bulk: see ``_unfrozen``), keyed
    by ``keys`` (default: the chunk's payload's)."""
    append = elements.append
    counts = repeat(1) if chunk.counts is None else chunk.counts.tolist()
    if keys is None:
        keys = chunk.payload.keys
    keyed = repeat(None) if keys is None else keys
    stamps = repeat(chunk.stamp) if chunk.stamps is None else chunk.stamps.tolist()
    for value, sequence, count, key, stamp in zip(
        values, chunk.sequence_list(), counts, keyed, stamps, strict=False
    ):
        element = _new(_Unfrozen)
        element.value = value
        element.channel = channel
        element.sequence = sequence
        element.stamp = stamp
        element._origin = origin
        element.delivery_count = count
        element.key = key
        element.__class__ = Element
        append(element)


# -- poison elements (see raytopic.actors.poison) ---------------------------------

_stopped_readers: dict[tuple[str, str, int], tuple[int, int]] = {}
"""(topic id, reader, channel) -> (sequence, jumps): readers this process found a
poison element for. Elements of theirs at or after it, taken under that jump
count or an earlier one (receives already out when the channel was told), are
void: the reader's cursor went back to it."""

POISON_REPORT_WAIT = 5.0
"""Seconds a receive waits for its reader's poison reports to land (a channel that
restarted meanwhile finds the element again when it next delivers it)."""

_poison_reports = ReaderCalls(POISON_REPORT_WAIT)
"""The poison stops this process reported, per reader, not yet seen applied."""


def wait_for_poison_reports(topic_id: str, reader: str) -> None:
    """Wait until the poison stops this process reported for ``reader`` are applied
    at their channels, before the reader's next receive is sent.

    A report is a call of its own, and Ray does not order it with the receives sent
    after it: one served first would find the cursor past the poison element and
    answer "empty" (a reader that completes on empty would end without the error,
    the elements after it void). Waited for, the next receive is told of it there.
    """
    _poison_reports.wait(topic_id, reader)


def _without_void(
    packed: tuple[tuple[int, tuple[Chunk, ...], _Origin], ...],
) -> tuple[tuple[int, tuple[Chunk, ...], _Origin], ...]:
    """``packed`` without the elements a poison element made void."""
    kept = []
    for channel, chunks, origin in packed:
        key = (origin.topic_id, origin.reader, channel)
        stop = _stopped_readers.get(key)
        if stop is not None and origin.jumps > stop[1]:
            del _stopped_readers[key]  # taken after the channel was told: all valid
            stop = None
        if stop is not None:
            chunks = tuple(_chunks_before(chunks, stop[0]))
        kept.append((channel, chunks, origin))
    return tuple(kept)


def _chunks_before(chunks: tuple[Chunk, ...], sequence: int) -> Iterator[Chunk]:
    for chunk in chunks:
        sequences = chunk.sequence_list()
        below = sum(1 for s in sequences if s < sequence)
        if below == len(sequences):
            yield chunk
        elif below:
            yield _slice_chunk(chunk, 0, below)


def _decode_poisoned(
    packed: tuple[tuple[int, tuple[Chunk, ...], _Origin], ...],
) -> ElementBatch | Exception:
    """Decode a reply in which some element cannot be decoded here.

    A channel-owned reader keeps what came before it in its channel and stops
    there: its channel is told (its cursor goes back to the element), and its
    next receive there raises the error; when nothing came before it in the
    whole reply, the error is returned now (``ray.get`` raises it). A reader
    made with ``on_poison="skip"`` passes over it (its channel counts it); a
    shared group's member negatively acknowledges it.
    """
    elements = ElementBatch()
    stopped: list[tuple[_Origin, int, Poison]] = []
    for channel, chunks, origin in packed:
        for chunk in chunks:
            values, failures = decode_checked(chunk.payload)
            kept = list(range(len(values)))
            poison = None
            counts = [1] * len(values) if chunk.counts is None else chunk.counts.tolist()
            for index in sorted(failures):
                poison = Poison.of(chunk.sequence_list()[index], failures[index])
                if origin.shared:
                    _nack_poison(origin, channel, poison, counts[index])
                elif origin.skip_poison:
                    _report_poison(origin, channel, poison, skipped=True)
                else:
                    kept = kept[:index]  # nothing after it in this channel is delivered
                    break
                kept.remove(index)
                poison = None
            part = chunk if len(kept) == len(values) else _chunk_of(chunk, kept)
            keys = chunk.payload.keys
            _add_elements(
                elements,
                [values[index] for index in kept],
                part,
                channel,
                origin,
                None if keys is None else [keys[index] for index in kept],
            )
            if poison is not None:
                stopped.append((origin, channel, poison))
                break
    for origin, channel, poison in stopped:
        key = (origin.topic_id, origin.reader, channel)
        _stopped_readers[key] = (poison.sequence, origin.jumps)
        _report_poison(origin, channel, poison, skipped=False)
    if stopped and not elements:
        origin, channel, poison = stopped[0]
        return _raised(poison_error(origin.topic_id, channel, poison))
    return elements


def _chunk_of(chunk: Chunk, kept: list[int]) -> Chunk:
    """``chunk`` narrowed to the elements at ``kept`` (their sequences and counts; the
    payload is left whole: only sequences and counts are read from it here)."""
    sequences = chunk.sequence_list()
    counts = None if chunk.counts is None else chunk.counts[kept]
    stamps = None if chunk.stamps is None else chunk.stamps[kept]
    picked = np.asarray([sequences[index] for index in kept], dtype=np.int64)
    first = int(picked[0]) if len(kept) else chunk.first
    return Chunk(first, chunk.stamp, chunk.payload, picked, counts, stamps)


def _report_poison(origin: _Origin, channel: int, poison: Poison, *, skipped: bool) -> None:
    """Tell the channel (a channel that restarted meanwhile finds the element again
    when it is next delivered). A stop is waited for by the reader's next receive
    sent from this process (see :func:`wait_for_poison_reports`)."""
    try:
        actor = channel_actor(origin.namespace, origin.topic, origin.topic_id, channel)
        report = ReportPoison(
            reader_id=origin.reader,
            lease=origin.lease,
            jumps=origin.jumps,
            sequence=poison.sequence,
            cause_type=poison.cause_type,
            cause_message=poison.cause_message,
            skipped=skipped,
        )
        ref = actor.request.remote(pack_request(report))
        if not skipped:
            _poison_reports.add(origin.topic_id, origin.reader, ref)
    except Exception as error:  # the topic is gone: nobody to tell
        logger.warning("could not report poison element %s: %s", poison, error)


POISON_NACK_DELAY = 1.0
"""Seconds before a shared group delivers a poison element again (a member that
cannot decode it should not get it back at once)."""


def _nack_poison(origin: _Origin, channel: int, poison: Poison, count: int) -> None:
    """A shared group's member cannot decode an element: give it back (the group's
    ``max_deliveries`` sends it to the dead letters)."""
    logger.warning(
        "channel %d: poison element %d nacked (%s: %s)",
        channel,
        poison.sequence,
        poison.cause_type,
        poison.cause_message,
    )
    try:
        actor = channel_actor(origin.namespace, origin.topic, origin.topic_id, channel)
        nack = Nack(
            reader_id=origin.reader,
            entries=((poison.sequence, count, origin.epoch),),
            delay=POISON_NACK_DELAY,
        )
        actor.request.remote(pack_request(nack))
    except Exception as error:
        logger.warning("could not nack poison element %s: %s", poison, error)


def _raised(error: Exception) -> Exception:
    """``error`` as a reply's value that ``ray.get`` raises: a RayTaskError whose cause
    it is (raised as an instance of both, as Ray raises an actor's errors)."""
    from ray.exceptions import RayTaskError

    return RayTaskError("receive", str(error), error)


class RawReadResult:
    """How a channel sends a ring buffer's ReadResultSet: as chunks, decoded where
    the reply is read (the channel need not import the items' classes)."""

    __slots__ = ("chunks", "read_count", "source", "start")

    def __init__(
        self,
        start: int,
        read_count: int,
        chunks: Sequence[Chunk],
        source: tuple[str, int] = ("", -1),
    ) -> None:
        self.start = start
        self.read_count = read_count
        self.chunks = tuple(chunks)
        self.source = source
        """(topic id, channel): what a poison item's error names."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_read_result_set, (self.start, self.read_count, self.chunks, self.source))


def _read_result_set(
    start: int, read_count: int, chunks: tuple[Chunk, ...], source: tuple[str, int] = ("", -1)
) -> Any:
    items: list[Any] = []
    sequences: list[int] = []
    for chunk in chunks:
        values, failures = decode_checked(chunk.payload)
        if failures:
            # An item this process cannot decode: what came before it, and a
            # read from it raises (as a filter that raises on it does).
            index = min(failures)
            items.extend(values[:index])
            sequences.extend(chunk.sequence_list()[:index])
            poison = Poison.of(chunk.sequence_list()[index], failures[index])
            if not items:
                return _raised(poison_error(*source, poison, ring=True))
            return ReadResultSet(start, poison.sequence - start, items, sequences)
        items.extend(values)
        sequences.extend(chunk.sequence_list())
    return ReadResultSet(start, read_count, items, sequences)


# -- the ring buffer's figures -----------------------------------------------------------


class RingFigures(NamedTuple):
    """A channel's ring buffer figures, read together (``ReadRingFigures``)."""

    head: int
    """Sequence of the oldest element held (``tail + 1`` when empty)."""
    tail: int
    """Sequence of the newest element (``head - 1`` when empty)."""
    size: int
    """Elements held now."""
    capacity: int
    """Most elements held at once."""
    remaining: int
    """``capacity - size``."""
