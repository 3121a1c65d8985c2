"""Bulk appends and range reads of Arrow rows: what ``raytopic.data`` and
``raytopic.spark`` share.

A :class:`BulkWriter` appends Arrow tables to a topic's channel actors as
Arrow record batches (no per-row Python objects): rows are routed
(``raytopic.client.arrow_tables``), gathered per channel into appends of
``APPEND_ROWS`` rows, and sent with the writer's id and a batch number per
channel, several in flight. Batch numbers make a retried task safe: a writer
with the same id (a Ray or Spark task run again on the same input) has its
batches answered from the channel's record instead of appended twice.

A read is planned once (:func:`plan_ranges`: one :class:`ChannelRange` per
channel, cut into pieces of at most ``READ_TASK_ROWS``), then each range is
read where it is needed (:func:`read_range`, in a Ray Data read task or a
Spark worker), straight from the channel actor.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import ray

from raytopic.actors.damage import DamageMap
from raytopic.client.arrow_tables import (
    as_batch,
    elements_table,
    key_channels,
    payload_table,
    round_robin,
    split_by_channel,
    to_utc,
    unify,
)
from raytopic.core.config import check_bool, check_name, check_nonnegative_int, check_timeout
from raytopic.core.destroyed import topic_calls
from raytopic.core.errors import (
    DataLossError,
    GroupNotFoundError,
    InvalidArgumentError,
    InvalidTypeError,
    PoisonElementError,
    StaleSequenceError,
)
from raytopic.core.payloads import ArrowRows, decode_checked
from raytopic.core.protocol import (
    Append,
    AppendAck,
    AppendOnce,
    Chunk,
    FirstAfter,
    ReadGroupCursors,
    ReadIdentity,
    ReadNewest,
    ReadRange,
    ReadRingFigures,
    RingFigures,
    pack_request,
)
from raytopic.core.records import Position
from raytopic.core.steps import Get, Steps, run_blocking

if TYPE_CHECKING:
    from raytopic.client.topic import Topic

logger = logging.getLogger(__name__)

__all__ = [
    "APPEND_ROWS",
    "BulkWriter",
    "ChannelRange",
    "ChannelReader",
    "RangeReader",
    "check_key_column",
    "chunk_stop",
    "chunk_table",
    "cut_ranges",
    "empty_read_schema",
    "plan_ranges",
    "read_range",
    "route",
]

APPEND_ROWS = 65_536
"""Rows a writer gathers per channel before it appends them: large enough that
an actor call and a store record are a small part of the cost, small enough
that a block of a few channels' rows stays a few MiB."""

IN_FLIGHT = 8
"""Appends a writer has outstanding at once (its memory bound)."""

READ_CALL_ROWS = 65_536
"""Rows one ``read_range`` call to a channel returns at most."""

READ_TASK_ROWS = 262_144
"""Rows of one planned range at most (one Ray Data read task, one Spark row of the
plan): a long channel is read by several tasks."""


# -- writing ---------------------------------------------------------------------------


def route(
    table: pa.Table, key: str | None, channel_count: int, start: int
) -> tuple[np.ndarray, int]:
    """The channel of each row: by the ``key`` column (``publish(key=...)``'s rule),
    round robin row by row from ``start`` where the key is null or there is none.
    Returns the channels and where the round robin goes on.

    Raises:
        InvalidArgumentError: ``key`` is not a column of ``table``.
        InvalidTypeError: the key column's type cannot be a key.
    """
    if key is None:
        channels = np.full(table.num_rows, -1, dtype=np.int64)
    else:
        if key not in table.column_names:
            raise InvalidArgumentError(f"key {key!r} is not a column: {table.column_names}")
        channels = key_channels(table.column(key), channel_count)
    return round_robin(channels, start, channel_count)


def check_key_column(topic: Topic, key: str | None) -> None:
    """A compacted topic's rows need a key column (before anything is sent).

    Raises:
        InvalidArgumentError: ``topic`` is compacted and ``key`` is None.
    """
    if key is None and topic.config.compaction is not None:
        raise InvalidArgumentError(
            f"topic {topic.name!r} is compacted: every row needs a key; name the key column "
            "(key=...)"
        )


class BulkWriter:
    """Appends Arrow tables to a topic's channels under one writer id.

    **Ordering**: the rows of one writer keep their order within each channel
    (with ``order``, each key's rows are in ``order``'s order).
    **Delivery**: every row is appended once, or :meth:`close` raises; a writer
    made again with the same id and fed the same tables (a retried task)
    appends nothing twice. With ``version`` set (exactly-once sinks) each
    channel gets all of the writer's rows as ONE append at :meth:`close`,
    which the channel skips if it already has that version of the writer whole
    (of one that ended short, it appends the rest: the rows after the ones it
    stored, counted by position). So a version's part for a channel must come
    in the same order every time the version runs: with ``order`` it does,
    whatever order the rows were fed in.
    """

    def __init__(
        self,
        topic: Topic,
        writer_id: str,
        *,
        key: str | None = None,
        version: int | None = None,
        block_timeout: float | None = 60.0,
        append_rows: int = APPEND_ROWS,
        order: str | None = None,
    ) -> None:
        """Args:
        topic: Where the rows go.
        writer_id: The writer's id (the channels' dedup key).
        key: The column whose values are the rows' keys (and route them), or None.
        version: For ``append_once``: the version these rows are (a micro-batch id).
        block_timeout: With overflow "block", seconds an append waits for room.
        append_rows: Rows gathered per channel before an append.
        order: A column of unique integers giving the rows' input order (the
            same for the same rows on every run, as Spark's
            ``monotonically_increasing_id`` taken before a shuffle is): each append
            (with ``version``, a channel's whole part) is sorted by (key,
            ``order``), and the column itself is not appended.
        """
        check_timeout(block_timeout, "block_timeout")
        self._topic = topic
        self._actors = topic._channel_actors
        self._writer_id = writer_id
        self._key = key
        self._version = version
        self._overflow = topic.config.overflow
        self._block_timeout = block_timeout
        self._append_rows = append_rows
        self._order = order
        self._pending: dict[int, list[pa.Table]] = {}
        self._pending_rows: dict[int, int] = {}
        self._next_batch: dict[int, int] = {}
        self._in_flight: list[tuple[int, int, int, Any]] = []  # (channel, rows, bytes, ref)
        self._rows: dict[int, int] = {}
        self._bytes = 0
        self._round_robin = 0

    def write(self, table: pa.Table) -> None:
        """Route ``table``'s rows (by the writer's key column, or round robin) and queue them.

        Raises:
            InvalidArgumentError: the key is not a column of ``table``.
            InvalidTypeError: the key column's type cannot be a key.
        """
        channels, self._round_robin = route(
            table, self._key, self._topic.channel_count, self._round_robin
        )
        self.write_routed(table, channels)

    def write_routed(self, table: pa.Table, channels: np.ndarray) -> None:
        """Queue ``table``'s rows for the given channels (one per row, routed by the
        writer's key column where it has one).

        Raises:
            InvalidArgumentError: the topic is compacted and a row's key is null
                (nothing of ``table`` is queued).
        """
        if not table.num_rows:
            return
        if self._topic.config.compaction is not None:
            check_key_column(self._topic, self._key)
            if table.column(self._key).null_count:
                raise InvalidArgumentError(
                    f"topic {self._topic.name!r} is compacted: every row needs a key, and "
                    f"{table.column(self._key).null_count} rows have a null {self._key!r}"
                )
        for channel, rows in split_by_channel(to_utc(table), channels).items():
            self._pending.setdefault(channel, []).append(rows)
            self._pending_rows[channel] = self._pending_rows.get(channel, 0) + rows.num_rows
            if self._version is None and self._pending_rows[channel] >= self._append_rows:
                self._send(channel)

    def close(self) -> tuple[dict[int, int], int]:
        """Append what is queued and wait for every append; return the rows per
        channel and the bytes appended.

        Raises:
            TopicFullError: a channel had no room (overflow "fail", or "block"
                past ``block_timeout``); the rows before it are appended.
            TopicError: any other failure of an append, as its typed error.
        """
        for channel in list(self._pending):
            self._send(channel)
        while self._in_flight:
            self._await_oldest()
        return dict(self._rows), self._bytes

    def _send(self, channel: int) -> None:
        tables = self._pending.pop(channel)
        self._pending_rows.pop(channel)
        batch = as_batch(self._in_run_order(pa.concat_tables(tables)))
        if batch is None:
            return
        actor = self._actors[channel]
        if self._version is None:
            number = self._next_batch.get(channel, 0)
            self._next_batch[channel] = number + 1
            request = pack_request(
                Append(
                    publisher_id=self._writer_id,
                    batch=number,
                    overflow=self._overflow,
                    timeout=self._block_timeout,
                )
            )
        else:
            request = pack_request(
                AppendOnce(
                    writer_id=self._writer_id,
                    version=self._version,
                    overflow=self._overflow,
                    timeout=self._block_timeout,
                )
            )
        while len(self._in_flight) >= IN_FLIGHT:
            self._await_oldest()
        ref = actor.request.remote(request, ArrowRows.keyed(batch, self._key))
        self._in_flight.append((channel, batch.num_rows, batch.nbytes, ref))

    def _in_run_order(self, part: pa.Table) -> pa.Table:
        """A part in the order every run of the version gives it, without the order
        column.

        A version that ended short at a channel gets ``part[stored:]`` when it runs
        again: the rest is counted by position. Spark's shuffle (the sink's
        ``repartition``) hands a task its rows in the order the map outputs were
        fetched, which a re-run may change: a rest counted in the new order would
        append some rows twice and never others. Sorted by a column fixed before
        the shuffle, the re-run's part is the first run's row for row. The key
        comes first and the input order second so that one key's rows keep the
        order they had in the input (a key's values reach its channel in publish
        order, as a Publisher's do); a unique order column leaves no ties, so the
        sort's result depends on the rows alone."""
        if self._order is None:
            return part
        sort_keys = [(self._order, "ascending")]
        if self._key is not None:
            sort_keys.insert(0, (self._key, "ascending"))
        return part.sort_by(sort_keys).drop_columns([self._order])

    def _await_oldest(self) -> None:
        channel, rows, nbytes, ref = self._in_flight.pop(0)
        with topic_calls(self._topic.topic_id, self._topic.name):
            ack: AppendAck = ray.get(ref)
        if ack.error is not None:
            self._in_flight.clear()  # the rest are the channels' own business now
            raise ack.error
        if ack.accepted:
            self._rows[channel] = self._rows.get(channel, 0) + ack.accepted
            self._bytes += nbytes if ack.accepted == rows else nbytes * ack.accepted // rows


# -- reading ---------------------------------------------------------------------------


class ChannelRange(NamedTuple):
    """Positions ``first`` to ``stop - 1`` of one channel: one read task."""

    channel: int
    first: int
    stop: int

    @property
    def rows(self) -> int:
        """How many positions."""
        return self.stop - self.first


def plan_ranges(
    topic: Topic,
    *,
    channels: Iterable[int] | None = None,
    start: Any = "earliest",
    end: Any = "latest",
    group: str | None = None,
    task_rows: int = READ_TASK_ROWS,
    fail_on_data_loss: bool = True,
) -> list[ChannelRange]:
    """The ranges a bulk read covers, fixed now (what is published later is not read).

    A stored record found damaged (docs/guides/durability.md) inside the ranges fails the read
    here, before any task runs, with one ``DataLossError`` naming it (as Spark's
    Kafka source does with ``failOnDataLoss``); with ``fail_on_data_loss=False``
    the ranges go around it (logged), and every intact element is read.

    Args:
        topic: The topic.
        channels: Channels to read (default all).
        start: "earliest" (the oldest retained), "latest" (nothing before now),
            a datetime (the first element appended at or after it), or a map
            channel -> sequence (an int or a Position, included), as Spark's
            Kafka source takes ``startingOffsets``.
        end: "latest" (up to the newest now), "earliest", a datetime (elements
            appended up to it), or a map channel -> sequence (excluded).
        group: Read what this group has not committed yet (its ``start`` is
            the group's commits; nothing is committed by reading).
        task_rows: Rows of one range at most.
        fail_on_data_loss: Raise when the ranges cross a damaged record (else
            read around it).

    Raises:
        DataLossError: the ranges cross a damaged stored record (named, with
            any others, in the message; ``lost`` and ``head_sequence`` are the
            first one's).
        GroupNotFoundError: no such group.
        InvalidArgumentError, InvalidTypeError: a bad argument.
    """
    check_bool(fail_on_data_loss, "fail_on_data_loss")
    if group is not None:
        check_name(group, "group")
    picked = _channels(topic, channels)
    for bound in (start, end):  # a map naming a channel the topic lacks is refused
        if isinstance(bound, Mapping):
            for channel in bound:
                topic._check_channel(channel)
    if group is not None:
        if start != "earliest":
            raise InvalidArgumentError(
                "give start or group, not both: a group reads from its commits"
            )
        if group not in topic.groups():
            raise GroupNotFoundError.of(topic.name, group)
    with topic_calls(topic.topic_id, topic.name):
        figures = ray.get([ring_figures(topic._channel_actors[c]) for c in picked])
        identities = ray.get(
            [topic._channel_actors[c].control.remote(ReadIdentity()) for c in picked]
        )
        cursors = (
            ray.get([topic._channel_actors[c].control.remote(ReadGroupCursors()) for c in picked])
            if group is not None
            else None
        )
    wholes: list[ChannelRange] = []
    for index, channel in enumerate(picked):
        head, tail = figures[index].head, figures[index].tail
        if cursors is not None:
            cursor = cursors[index].get(group)
            first = head if cursor is None else max(head, cursor["committed"] + 1)
        else:
            first = _bound(topic, channel, start, head, tail, "start")
        stop = min(_bound(topic, channel, end, head, tail, "end"), tail + 1)
        wholes.append(ChannelRange(channel, first, stop))
    return cut_ranges(
        wholes,
        dict(zip(picked, identities, strict=True)),
        task_rows=task_rows,
        fail_on_data_loss=fail_on_data_loss,
    )


def cut_ranges(
    wholes: Iterable[ChannelRange],
    identities: Mapping[int, Mapping[str, Any]],
    *,
    task_rows: int = READ_TASK_ROWS,
    fail_on_data_loss: bool = True,
) -> list[ChannelRange]:
    """Whole channel ranges cut into the pieces a read runs (at most ``task_rows``
    positions each), around the damaged stored records the channels reported.

    Args:
        wholes: The ranges to read, at most one per channel.
        identities: Each channel's identity (its ``damaged`` ranges, its epoch).
        task_rows: Positions of one piece at most.
        fail_on_data_loss: Raise when a range crosses a damaged record (else the
            pieces go around it, logged).

    Raises:
        DataLossError: a range crosses a damaged record (see :func:`plan_ranges`).
    """
    spans: list[_Span] = []
    for whole in wholes:
        identity = identities[whole.channel]
        damage = DamageMap(tuple(r) for r in identity["damaged"])
        spans.extend(_around_damage(whole, damage, identity))
    crossed = [span for span in spans if span.damaged]
    if crossed and fail_on_data_loss:
        raise _crossed_damage(crossed)
    for span in crossed:
        logger.warning(
            "channel %d: stored elements %d..%d are damaged: the read goes around them",
            span.channel,
            span.first,
            span.stop - 1,
        )
    return [
        ChannelRange(span.channel, piece, min(piece + task_rows, span.stop))
        for span in spans
        if not span.damaged
        for piece in range(span.first, span.stop, task_rows)
    ]


class _Span(NamedTuple):
    """A part of a planned read: to read, or damaged (reported, never read)."""

    channel: int
    first: int
    stop: int
    damaged: bool
    epoch: int


def _around_damage(
    whole: ChannelRange, damage: DamageMap, identity: Mapping[str, Any]
) -> list[_Span]:
    """``whole`` cut into the spans to read and the damaged spans between them."""
    spans = []
    first = whole.first
    for lost_first, lost_last in damage.overlapping(whole.first, whole.stop - 1):
        if lost_first > first:
            spans.append(_Span(whole.channel, first, lost_first, False, identity["epoch"]))
        first = max(first, lost_first)
        spans.append(
            _Span(whole.channel, first, min(lost_last + 1, whole.stop), True, identity["epoch"])
        )
        first = min(lost_last + 1, whole.stop)
    if first < whole.stop:
        spans.append(_Span(whole.channel, first, whole.stop, False, identity["epoch"]))
    return spans


def _crossed_damage(crossed: list[_Span]) -> DataLossError:
    """The one error of a planned read that crosses damaged records: the first one
    as the error's range, every one in its message."""
    first = crossed[0]
    named = ", ".join(f"channel {s.channel}: {s.first}..{s.stop - 1}" for s in crossed)
    return DataLossError(
        f"the read crosses stored elements that were damaged on disk (checksum mismatch) "
        f"and are lost: {named}; read around them with fail_on_data_loss=False",
        head_sequence=first.stop,
        channel=first.channel,
        old_epoch=first.epoch,
        new_epoch=first.epoch,
        lost=(first.first, first.stop - 1),
    )


def _channels(topic: Topic, channels: Iterable[int] | None) -> list[int]:
    if channels is None:
        return list(range(topic.channel_count))
    if isinstance(channels, (str, bytes)) or not isinstance(channels, Iterable):
        raise InvalidTypeError(f"channels must be ints, got {type(channels).__name__}")
    picked = sorted({topic._check_channel(channel) for channel in channels})
    if not picked:
        raise InvalidArgumentError("channels is empty: nothing to read")
    return picked


def _bound(topic: Topic, channel: int, at: Any, head: int, tail: int, what: str) -> int:
    """A start (included) or end (excluded) sequence of ``channel``."""
    if isinstance(at, str):
        if at == "earliest":
            return head
        if at == "latest":
            return tail + 1
        raise InvalidArgumentError(f"{what} must be 'earliest', 'latest', ... got {at!r}")
    if isinstance(at, datetime):
        if at.tzinfo is None:
            raise InvalidArgumentError(f"{what} datetime must be time-zone aware, got {at}")
        stamp = at.timestamp()
        if what == "start":
            stamp = np.nextafter(stamp, -np.inf)  # at or after: strictly after a hair before
        with topic_calls(topic.topic_id, topic.name):
            first_after = pack_request(FirstAfter(stamp=float(stamp)))
            return ray.get(topic._channel_actors[channel].request.remote(first_after))
    if isinstance(at, Mapping):
        if channel not in at:
            return head if what == "start" else tail + 1
        sequence = at[channel]
        if isinstance(sequence, Position):
            sequence.check_belongs(topic.topic_id, channel)
            sequence = sequence.sequence
        return check_nonnegative_int(sequence, f"{what}[{channel}] (a sequence)")
    raise InvalidTypeError(
        f"{what} must be 'earliest', 'latest', a datetime or a map channel -> sequence, "
        f"got {type(at).__name__}"
    )


def read_range(
    topic: Topic, piece: ChannelRange, *, skip_poison: bool = False
) -> Iterator[pa.Table]:
    """The elements of ``piece`` as tables (see ``raytopic.client.arrow_tables``), read
    from the channel actor one call ahead of the caller.

    Args:
        topic: The topic.
        piece: The range.
        skip_poison: Leave out (logged) an element that cannot be decoded here,
            instead of raising PoisonElementError.

    Raises:
        DataLossError: the range reaches a damaged stored record (one found after
            the read was planned: :func:`plan_ranges` reports the others).
        StaleSequenceError: part of the range is gone (overwritten, expired)
            and not in the store.
        PoisonElementError: an element cannot be decoded here (its class is
            missing or changed in this process), unless ``skip_poison``.
    """
    reader = RangeReader(topic, piece)
    while (chunks := reader.next_chunks()) is not None:
        for chunk in chunks:
            yield chunk_table(topic.topic_id, piece.channel, chunk, skip_poison=skip_poison)


def chunk_table(
    topic_id: str, channel: int, chunk: Chunk, *, skip_poison: bool = False
) -> pa.Table:
    """One read chunk as a table (``payload_table``'s columns). An element that cannot
    be decoded here is poison: PoisonElementError names its position (the first such
    one), or with ``skip_poison`` the table leaves it out (logged), as a subscriber
    made with ``on_poison="skip"`` passes over it.

    Raises:
        PoisonElementError: as said, unless ``skip_poison``.
    """
    payload = chunk.payload
    if isinstance(payload, ArrowRows):  # Arrow rows decode as a whole, or not at all
        return payload_table(channel, chunk)
    values, failures = decode_checked(payload)
    if not failures:
        return payload_table(channel, chunk, decoded=values)
    sequences = chunk.sequence_list()  # a compacted topic's survivors have gaps between
    if not skip_poison:
        offset = min(failures)
        raise _poison_error(topic_id, channel, sequences[offset], failures[offset])
    for offset, error in sorted(failures.items()):
        logger.warning(
            "channel %d: element %d cannot be decoded here, left out (%s: %s)",
            channel,
            sequences[offset],
            type(error).__name__,
            error,
        )
    kept = [offset for offset in range(len(values)) if offset not in failures]
    keys, stamps = payload.keys, chunk.stamp_list()
    return elements_table(
        channel,
        [None] * len(kept) if keys is None else [keys[offset] for offset in kept],
        [values[offset] for offset in kept],
        [sequences[offset] for offset in kept],
        [stamps[offset] for offset in kept],
    )


def _poison_error(
    topic_id: str, channel: int, sequence: int, error: BaseException
) -> PoisonElementError:
    position = Position(topic_id, channel, sequence)
    return PoisonElementError(
        f"channel {channel}: the element at {position} cannot be decoded here "
        f"({type(error).__name__}: {error}); read with on_poison='skip' to read around it",
        channel,
        position,
        type(error).__name__,
        str(error),
    )


class RangeReader:
    """Reads one planned range from its channel actor, call by call, one call ahead of
    its caller: the first call goes out when the reader is made, so readers of
    several channels made together read them at once.
    """

    def __init__(self, topic: Topic, piece: ChannelRange) -> None:
        self._topic = topic
        self._actor = topic._channel_actors[piece.channel]
        self._stop = piece.stop
        self.asked = piece.first
        """Where the call out (or the last one made) starts."""
        self._pending: ray.ObjectRef[tuple[Chunk, ...]] | None = _read_range(
            self._actor, piece.first, piece.stop
        )

    def next_chunks(self, timeout: float | None = None) -> tuple[Chunk, ...] | None:
        """The next call's chunks (the one after it is sent first); None at the end.

        Args:
            timeout: Seconds to wait for them (None: no limit).

        Raises:
            TimeoutError: ``timeout`` passed first (the call stays out).
            DataLossError, StaleSequenceError: as :func:`read_range`.
        """
        return run_blocking(self.fetching(timeout))

    def fetching(self, timeout: float | None = None) -> Steps[tuple[Chunk, ...] | None]:
        """:meth:`next_chunks` as steps (an async actor awaits them)."""
        if self._pending is None:
            return None
        with topic_calls(self._topic.topic_id, self._topic.name):
            chunks = yield Get(self._pending, timeout)
        self._pending = None
        if chunks:
            sequence = chunk_stop(chunks[-1])
            if sequence < self._stop:
                self.asked = sequence
                self._pending = _read_range(self._actor, sequence, self._stop)
        return chunks


class ChannelReader:
    """One channel's planned ranges, read in order (see :class:`RangeReader`); what
    retention removed meanwhile (below the head now) is passed over, as a reader
    starting now would not see it either."""

    def __init__(self, topic: Topic, ranges: list[ChannelRange]) -> None:
        """Args:
        topic: The topic.
        ranges: Ranges of one channel, in position order (the first call goes out now).
        """
        self._topic = topic
        self._range, *self._ranges = ranges
        self._reader = RangeReader(topic, self._range)

    def next_chunks(self, timeout: float | None = None) -> tuple[Chunk, ...] | None:
        """The next chunks of the channel, in position order; None at its end.

        Raises:
            TimeoutError: ``timeout`` passed first.
            DataLossError: a damaged stored record the plan did not know of.
        """
        return run_blocking(self.fetching(timeout))

    def fetching(self, timeout: float | None = None) -> Steps[tuple[Chunk, ...] | None]:
        """:meth:`next_chunks` as steps (an async actor awaits them)."""
        while True:
            try:
                chunks = yield from self._reader.fetching(timeout)
            except StaleSequenceError as gone:
                if isinstance(gone, DataLossError) or gone.head_sequence <= self._reader.asked:
                    raise  # lost, or nothing to pass over
                piece = ChannelRange(self._range.channel, gone.head_sequence, self._range.stop)
                if piece.rows <= 0:
                    chunks = None  # the whole rest of the range is gone
                else:
                    self._next_range(piece)
                    continue
            if chunks is not None:
                return chunks
            if not self._ranges:
                return None
            self._next_range(self._ranges.pop(0))

    def _next_range(self, piece: ChannelRange) -> None:
        self._range = piece
        self._reader = RangeReader(self._topic, piece)


def chunk_stop(chunk: Chunk) -> int:
    """The sequence after a chunk's last element (its elements may have gaps between them)."""
    if chunk.sequences is not None:
        return int(chunk.sequences[-1]) + 1
    return chunk.first + len(chunk.payload)


def _read_range(actor: Any, start: int, stop: int) -> ray.ObjectRef[tuple[Chunk, ...]]:
    """One bulk read call: up to ``READ_CALL_ROWS`` elements of ``[start, stop)``."""
    read = ReadRange(start=start, stop=stop, max_count=READ_CALL_ROWS)
    return actor.request.remote(pack_request(read))


def empty_read_schema(topic: Topic, channels: Iterable[int] | None = None) -> pa.Schema | None:
    """The columns of a read with nothing in its ranges, learned from each channel's
    newest element even if it was removed (a topic that does not retain, whose groups
    committed everything, still has its values' columns); None where no channel has
    appended since it started, or the columns do not fit one schema."""
    picked = range(topic.channel_count) if channels is None else sorted(set(channels))
    actors = topic._channel_actors
    with topic_calls(topic.topic_id, topic.name):
        newest = ray.get([actors[c].request.remote(pack_request(ReadNewest())) for c in picked])
    tables = [
        chunk_table(topic.topic_id, channel, chunk, skip_poison=True)
        for channel, chunk in zip(picked, newest, strict=True)
        if chunk is not None
    ]
    tables = [table for table in tables if table.num_rows]
    if not tables:
        return None
    try:
        return unify(tables)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None


def ring_figures(actor: Any) -> ray.ObjectRef[RingFigures]:
    """A channel's ring buffer figures (head, tail, size, ...), asked in one call."""
    return actor.request.remote(pack_request(ReadRingFigures()))
