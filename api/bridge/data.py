"""Ray Data in and out of topics: ``write_topic`` (a Datasink) and ``read_topic``
(a Datasource).

Both move Arrow blocks, never rows as Python objects, and run as Ray Data
tasks, so Ray Data's parallelism and back-pressure apply. Both are quiet (see
``raytopic.bridge.quiet_data``): a write, and the execution of a read's (or a
micro-batch's) dataset, put no progress bars and no Ray Data INFO lines on the
console (they still go to Ray Data's log file).

Example:
    >>> import ray, raytopic.data
    >>> summary = raytopic.data.write_topic(ray.data.range(1000), topic, key="id")
    >>> raytopic.data.read_topic(topic).count()
    1000
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import ray
from ray.data import DataContext, Dataset
from ray.data._internal.logical.interfaces import LogicalPlan
from ray.data._internal.logical.operators import FromArrow
from ray.data._internal.stats import DatasetStats
from ray.data.block import BlockAccessor, BlockMetadata, BlockMetadataWithSchema
from ray.data.dataset import MaterializedDataset
from ray.data.datasource import Datasink, Datasource, ReadTask
from ray.exceptions import UserCodeException

from raytopic.bridge.quiet_data import quiet_dataset, quiet_write
from raytopic.bridge.streams import AVAILABLE_NOW, MicroBatch, Stream, open_stream
from raytopic.client.arrow_tables import combine, empty_table
from raytopic.client.bulk import (
    BulkWriter,
    ChannelRange,
    check_key_column,
    empty_read_schema,
    plan_ranges,
    read_range,
)
from raytopic.client.topic import Topic
from raytopic.core.config import (
    OnPoison,
    OnPoisonName,
    Start,
    StartName,
    check_bool,
    check_instance,
    check_timeout,
)
from raytopic.core.errors import InvalidArgumentError, PoisonElementError, unwrap_ray_error
from raytopic.core.records import PublishSummary

if TYPE_CHECKING:
    from ray.data._internal.execution.interfaces import TaskContext

logger = logging.getLogger(__name__)

__all__ = [
    "MicroBatch",
    "Stream",
    "TopicDatasink",
    "TopicDatasource",
    "read_topic",
    "stream",
    "write_topic",
]


def write_topic(
    dataset: Dataset, topic: Topic, *, key: str | None = None, block_timeout: float = 60.0
) -> PublishSummary:
    """Publish every row of ``dataset`` into ``topic``, block by block as Arrow.

    Each row becomes one element (read back as a dict of its columns) at
    its own position. Rows route like ``publish(row, key=row[key])``; rows
    with a null key, or all rows without ``key``, go round robin, row by row.
    A write task that Ray runs again appends nothing twice. Nothing is
    printed: Ray Data's progress and INFO lines go to its log file only.

    Args:
        dataset: Any Ray Dataset (its blocks are read as Arrow).
        topic: The topic.
        key: A column to route by (text, bytes, integer or boolean).
        block_timeout: With overflow "block", seconds an append waits for room
            (> 0, at most a year; None: no limit).

    Returns:
        What was appended.

    Raises:
        InvalidTypeError: ``key`` names a column of a type that cannot be a key;
            ``dataset``, ``topic`` or ``key`` is not what it should be (checked
            before any write task runs).
        InvalidArgumentError: a bad ``block_timeout``, or ``key`` is not a
            column (before any task runs when the dataset's columns are known
            without running it); the topic is compacted and ``key`` is None
            (before any task runs), or a row's key is null (its block is not
            appended; blocks before it may be).
        TopicFullError: a channel had no room (overflow "fail", or "block" too long).
    """
    check_instance(dataset, Dataset, "dataset")
    sink = TopicDatasink(topic, key=key, block_timeout=block_timeout)
    check_key_column(topic, key)
    if key is not None:
        _check_key_column(dataset, key)
    started = time.perf_counter()
    with quiet_write(dataset.context), unwrap_ray_error():  # a write task's typed error as itself
        dataset.write_datasink(sink)
    return PublishSummary.total(sink.results, time.perf_counter() - started)


def _check_key_column(dataset: Dataset, key: str) -> None:
    """A ``key`` that is not a column fails here, before any write task runs, when
    the dataset's columns are known without running it (else its tasks report it)."""
    schema = dataset.schema(fetch_if_missing=False)
    if schema is not None and key not in schema.names:
        raise InvalidArgumentError(f"key {key!r} is not a column: {list(schema.names)}")


def read_topic(
    topic: Topic,
    *,
    channels: Iterable[int] | None = None,
    start: Any = "earliest",
    end: Any = "latest",
    group: str | None = None,
    fail_on_data_loss: bool = True,
    quiet: bool = True,
    on_poison: OnPoison | OnPoisonName = "raise",
) -> Dataset:
    """A topic's elements as a Ray Dataset of Arrow blocks, one read task and one
    block (at least) per channel range (see ``raytopic.client.bulk.plan_ranges`` for
    ``start``, ``end``, ``group`` and ``fail_on_data_loss``).

    Columns: a row's own fields (rows published from DataFrames or as dicts),
    or ``value`` for other values; then ``channel``, ``position`` and
    ``timestamp``. The ranges are fixed when this is called; reading commits
    nothing. An empty topic gives an empty dataset.

    Executing the dataset (or one derived from it) prints nothing but Ray Data's
    warnings and errors: its plan, progress and "finished" lines go to its log
    file only. ``quiet=False`` prints them as for any Dataset.

    ``on_poison``: ``"raise"`` (the default): an element that cannot be decoded
    in the read task (its class is missing or changed there) fails the read with
    PoisonElementError naming its position; ``"skip"``: the read leaves it out
    (logged) and reads around it.

    Raises:
        DataLossError: the ranges cross a damaged stored record (named), unless
            ``fail_on_data_loss=False`` reads every intact element around it.
        GroupNotFoundError: no such group.
        InvalidArgumentError, InvalidTypeError: a bad argument.
        PoisonElementError: (from the dataset's read) as said, with ``"raise"``.
    """
    skip_poison = OnPoison.parse(on_poison) is OnPoison.SKIP
    check_instance(topic, Topic, "topic")
    ranges = plan_ranges(
        topic,
        channels=channels,
        start=start,
        end=end,
        group=group,
        fail_on_data_loss=fail_on_data_loss,
    )
    check_bool(quiet, "quiet")
    if not ranges:  # nothing to read: the columns still are the values'
        empty = empty_table(empty_read_schema(topic, channels))
        dataset = ray.data.from_arrow(empty)
        return quiet_dataset(dataset) if quiet else dataset
    return ranges_dataset(topic, ranges, quiet=quiet, skip_poison=skip_poison)


def ranges_dataset(
    topic: Topic,
    ranges: list[ChannelRange],
    *,
    task_rows: int | None = None,
    quiet: bool = True,
    skip_poison: bool = False,
) -> Dataset:
    """The elements of planned ``ranges`` as a Dataset (see :func:`read_topic`, which
    plans them; a stream's micro-batch has its own), one read task per range or
    per ``task_rows`` (see :class:`TopicDatasource`); ``quiet``: executed without
    console output (see ``raytopic.bridge.quiet_data``)."""
    if not ranges:
        dataset = ray.data.from_arrow(empty_table())
    else:
        source = TopicDatasource(topic, ranges, task_rows=task_rows, skip_poison=skip_poison)
        # One block per read task: Ray Data would otherwise split a small read into
        # ~200 blocks (and a write of them back into as many tasks).
        dataset = ray.data.read_datasource(source, override_num_blocks=source.task_count)
    return quiet_dataset(dataset) if quiet else dataset


def stream(
    topic: Topic,
    *,
    group: str,
    trigger: str | float = AVAILABLE_NOW,
    max_rows_per_batch: int = 100_000,
    start: Start | StartName = "earliest",
    fail_on_data_loss: bool = True,
    timeout: float = 30.0,
    quiet: bool = True,
    on_poison: OnPoison | OnPoisonName = "raise",
) -> Stream:
    """A group of ``topic`` as an unbounded source of micro-batches, each a Ray Dataset
    over fixed position ranges (docs/guides/streams.md): Spark Structured Streaming's
    guarantees for Ray Data.

    Example:
        >>> with raytopic.data.stream(topic, group="etl", trigger=1.0) as batches:
        ...     for mb in batches:  # MicroBatch(batch_id, ranges, rows, dataset)
        ...         mb.dataset.write_parquet(f"{out}/batch={mb.batch_id}")
        ...         # advancing the iterator commits the batch

    Before a batch is handed out, its id and ranges are recorded with the group at
    every channel (durably with a store); a batch is committed when the iterator
    advances past it (reaching the end of an ``"available_now"`` stream counts)
    or by ``MicroBatch.commit()``. Leaving the loop by ``break`` or an exception
    commits nothing: the next stream on the group hands that batch out first,
    with the same id, ranges and rows. The stream is its group's only consumer
    and reads every channel, as the topic's coordinator decides: a member joining
    the group meanwhile is refused (``GroupBusyError``) until the stream ends, is
    stopped, or its process stops heartbeating for ``timeout``; a newer stream on
    the group takes it over and fences this one (its next commit raises
    NotOwnerError and ends its iteration).

    While it catches up (``"available_now"`` from the start, or once a batch is
    full), the stream plans the next batch and, if it holds 50,000 rows or more,
    reads it into Ray's object store while the loop works on the one in hand (one
    batch ahead, in a thread of the stream): its ``dataset`` is read when ``next()``
    records it and hands it out (a smaller one is read by the loop's own job on it).
    A stream that caught up hands each batch out unread, as soon as it is planned.

    Args:
        topic: The topic.
        group: The group (made if new, at ``start``); an owned group without members.
        trigger: ``"available_now"``: what the channels hold when the stream opens,
            in batches, then the end; or seconds > 0: a batch every that many
            seconds (at once when the last one took longer) until ``stop()``.
            Empty intervals make no batch.
        max_rows_per_batch: Positions of one batch at most, over all channels.
        start: Where a new group starts: "earliest" or "latest".
        fail_on_data_loss: Raise DataLossError when a batch crosses lost elements
            (a damaged stored record, a channel restarted without a store), else
            read around them (logged), as ``read_topic`` does.
        timeout: Seconds the stream's claim on its group outlives its process's
            last heartbeat (it heartbeats from a thread while it lives).
        quiet: A micro-batch's dataset prints nothing when executed but Ray
            Data's warnings and errors (as ``read_topic``'s); False: Ray Data's
            plan, progress and "finished" lines too.
        on_poison: What a batch's read does with an element that cannot be decoded
            in its task, as ``read_topic``'s: ``"raise"`` (a batch whose read
            raised is not committed unless the loop goes on) or ``"skip"``.

    Returns:
        The stream (iterate it; a context manager too).

    Raises:
        InvalidArgumentError, InvalidTypeError: a bad argument (nothing is made
            or consumed).
        GroupModeError: the group is shared.
        GroupBusyError: the group has members (until they leave).
    """
    check_bool(quiet, "quiet")
    skip_poison = OnPoison.parse(on_poison) is OnPoison.SKIP
    return open_stream(
        topic,
        group,
        trigger=trigger,
        max_rows_per_batch=max_rows_per_batch,
        start=start,
        fail_on_data_loss=fail_on_data_loss,
        reader=lambda pieces: (
            ranges_dataset(
                topic,
                pieces,
                task_rows=STREAM_TASK_ROWS,
                quiet=quiet,
                skip_poison=skip_poison,
            ),
            None,
        ),
        read_ahead=lambda pieces: start_read(topic, pieces, quiet=quiet, skip_poison=skip_poison),
        timeout=timeout,
    )


STREAM_TASK_ROWS = 50_000
"""Rows a micro-batch's read task reads at most (a task per channel would cost
more than a small batch's rows): a batch of 100,000 is read by two tasks."""


def start_read(
    topic: Topic, pieces: list[ChannelRange], *, quiet: bool = True, skip_poison: bool = False
) -> Callable[[], tuple[Dataset, None]] | None:
    """A micro-batch read ahead: ``pieces`` read from now on by plain Ray tasks (a task
    per ``READ_AHEAD_TASK_ROWS``) into the object store (a Ray Data job per batch read
    ahead would cost a batch's worth of the driver's time). Returns what waits for
    the tasks and gives the batch's ``(dataset, None)``: a materialized Dataset of
    their blocks, or, if a task failed, the batch's lazy dataset (the caller's own
    read of it meets the failure, as without reading ahead). None, reading nothing,
    for a batch of fewer than ``READ_AHEAD_MIN_ROWS`` rows."""
    if sum(piece.rows for piece in pieces) < READ_AHEAD_MIN_ROWS:
        return None
    tasks = pack(pieces, READ_AHEAD_TASK_ROWS)
    # Each an ObjectRefGenerator (Ray types .remote() as one ObjectRef).
    reads: list[Any] = [_read_task.remote(topic, task, skip_poison) for task in tasks]

    def finish() -> tuple[Dataset, None]:
        blocks, described = [], []
        for read in reads:  # a task's yields: each block, then its metadata
            refs = list(read)  # once the task is done
            blocks += refs[0::2]
            # A task that failed yields its error last: where a block would stand.
            described += refs[1::2] + refs[len(refs) - len(refs) % 2 :]
        try:
            metadata = ray.get(described)
        except ray.exceptions.RayError as error:
            logger.warning(
                "a stream's batch could not be read ahead (%s): it is read when used", error
            )
        else:
            if blocks:
                dataset = _materialized(blocks, metadata)
                return quiet_dataset(dataset) if quiet else dataset, None
        # Failed, or nothing read: as a batch not read ahead is.
        lazy = ranges_dataset(
            topic, pieces, task_rows=STREAM_TASK_ROWS, quiet=quiet, skip_poison=skip_poison
        )
        return lazy, None

    return finish


def _materialized(blocks: list[Any], metadata: list[Any]) -> MaterializedDataset:
    """A Dataset of ``blocks`` (refs of tables read already), as
    ``ray.data.from_arrow_refs`` makes it, with ``metadata`` (each one's
    ``BlockMetadataWithSchema``) the read tasks gave: ``from_arrow_refs`` asks a
    task of a whole CPU per block for it, which waits while the caller's job on the
    batch in hand holds a CPU of a small machine."""
    context = DataContext.get_current().copy()
    plan = LogicalPlan(FromArrow(blocks, metadata), context)
    stats = DatasetStats(metadata={"FromArrow": metadata}, parent=None)
    return MaterializedDataset(plan, context, stats)


READ_AHEAD_MIN_ROWS = 50_000
"""Rows a micro-batch needs to be read ahead. A smaller one is read by the caller's
job on it (one read task of that job, ``STREAM_TASK_ROWS``), as a batch of a stream
that caught up is: its read costs that job little, and a task of its own would
compete on a small machine with the job on the batch in hand. Measured on 2 cores, 8
channels, 10 batches each: of 10,000 rows, 2.0-2.7 s read ahead against
1.7-2.2 s not; of 30,000, even; of 50,000, 1.7-2.4 s against 2.2-3.0 s; of 100,000,
2.2-2.6 s against 2.5-3.3 s."""

READ_AHEAD_TASK_ROWS = 200_000
"""Rows a read-ahead task reads at most, into one block (of one schema): the
caller's job on the batch runs a task per block, and on a small machine each task
it starts costs more than a larger block: a batch of 100,000 is one block."""

STREAM_READ_CPUS = 0.5
"""CPUs a read-ahead task holds: less than a whole one, so a batch read ahead leaves
the caller's job on the batch in hand a CPU on a small machine."""


@ray.remote(num_cpus=STREAM_READ_CPUS)
def _read_task(topic: Topic, pieces: list[ChannelRange], skip_poison: bool) -> Iterator[Any]:
    """A read-ahead task: the blocks of ``pieces``, one object each, each followed by
    its metadata (a small object)."""
    for table in _reader(topic, pieces, skip_poison)():
        yield table
        yield BlockMetadataWithSchema.from_block(table)


class TopicDatasink(Datasink[tuple[dict[int, int], int]]):
    """Appends each write task's blocks through one ``BulkWriter``; the task's
    index names the writer, so a task run again appends nothing twice.

    Raises:
        InvalidTypeError, InvalidArgumentError: a bad argument (a topic's name
            where its Topic is expected, say), before any write task runs.
    """

    def __init__(self, topic: Topic, *, key: str | None, block_timeout: float) -> None:
        check_instance(topic, Topic, "topic")
        if key is not None:
            check_instance(key, str, "key (a column name)")
        check_timeout(block_timeout, "block_timeout")
        self._topic = topic
        self._key = key
        self._block_timeout = block_timeout
        self._run = uuid.uuid4().hex
        self.results: list[tuple[dict[int, int], int]] = []
        """Each write task's (rows per channel, bytes), set when the write completes."""

    def write(self, blocks: Iterable[Any], ctx: TaskContext) -> tuple[dict[int, int], int]:
        """Append the task's blocks; return its rows per channel and bytes."""
        writer = BulkWriter(
            self._topic,
            f"data:{self._run}:{ctx.task_idx}",
            key=self._key,
            block_timeout=self._block_timeout,
        )
        for block in blocks:
            writer.write(BlockAccessor.for_block(block).to_arrow())
        return writer.close()

    def on_write_complete(self, write_result: Any) -> None:
        """Keep every task's result (this runs in the driver)."""
        self.results = list(write_result.write_returns)

    def get_name(self) -> str:
        """The write tasks' name in Ray Data's progress and stats."""
        return f"WriteTopic({self._topic.name})"


class TopicDatasource(Datasource):
    """Read tasks over planned channel ranges; Arrow blocks out.

    Args:
        topic: The topic.
        ranges: The planned ranges.
        task_rows: None: one read task per range (a bounded read, whose plan cut
            long channels into pieces). Else ranges are packed, in order, into
            as few tasks as reading ``task_rows`` each needs (a micro-batch: a
            Ray Data task per channel would cost more than its rows).
        skip_poison: Leave out what a task cannot decode (see ``read_range``).
    """

    def __init__(
        self,
        topic: Topic,
        ranges: list[ChannelRange],
        *,
        task_rows: int | None = None,
        skip_poison: bool = False,
    ) -> None:
        super().__init__()
        self._topic = topic
        self._skip_poison = skip_poison
        self._tasks = (
            [[piece] for piece in ranges] if task_rows is None else pack(ranges, task_rows)
        )

    def estimate_inmemory_data_size(self) -> int | None:
        """Unknown until read (values differ in size)."""
        return None

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: DataContext | None = None,
    ) -> list[ReadTask]:
        """The tasks fixed when the source was made."""
        topic = self._topic
        compacted = topic.config.compaction is not None  # positions are not rows there
        tasks = []
        for pieces in self._tasks:
            metadata = BlockMetadata(
                num_rows=None if compacted else sum(piece.rows for piece in pieces),
                size_bytes=None,
                input_files=None,
                exec_stats=None,
            )
            tasks.append(
                ReadTask(
                    _reader(topic, pieces, self._skip_poison),
                    metadata,
                    per_task_row_limit=per_task_row_limit,
                )
            )
        return tasks

    @property
    def task_count(self) -> int:
        """How many read tasks it makes."""
        return len(self._tasks)

    def get_name(self) -> str:
        """The read tasks' name in Ray Data's progress and stats."""
        return f"ReadTopic({self._topic.name})"


def pack(ranges: list[ChannelRange], task_rows: int) -> list[list[ChannelRange]]:
    """``ranges``, in order, as the groups read tasks read: at most ``ceil(rows /
    task_rows)`` groups of about equal rows (a range longer than ``task_rows`` is
    cut into pieces of at most ``task_rows``; a group ends once it holds its share)."""
    pieces = [
        ChannelRange(whole.channel, first, min(first + task_rows, whole.stop))
        for whole in ranges
        for first in range(whole.first, whole.stop, task_rows)
    ]
    total = sum(piece.rows for piece in pieces)
    share = -(-total // max(1, -(-total // task_rows)))  # rows per task, rounded up
    groups: list[list[ChannelRange]] = []
    rows = 0
    for piece in pieces:
        if not groups or rows >= share:
            groups.append([])
            rows = 0
        groups[-1].append(piece)
        rows += piece.rows
    return groups


class ReadPoisonElementError(PoisonElementError, UserCodeException):
    """A read task's :class:`~raytopic.PoisonElementError`, said to be the user's (an
    element its process cannot decode): Ray Data then logs one line for it, where it
    logged a traceback and "an exception in Ray Data or Ray Core internal code" with
    the stack of its executor; the error reaching the caller is the same."""


def _reader(topic: Topic, pieces: list[ChannelRange], skip_poison: bool) -> Any:
    def read() -> Iterator[pa.Table]:
        try:
            yield from combine(
                table
                for piece in pieces
                for table in read_range(topic, piece, skip_poison=skip_poison)
            )
        except PoisonElementError as poison:
            raise ReadPoisonElementError(*poison.args) from None

    return read
