"""Ray Data in and out of topics: ``write_topic`` (a Datasink) and ``read_topic``
(a Datasource).

Both move Arrow blocks, never rows as Python objects, and run as Ray Data
tasks, so Ray Data's parallelism, back-pressure and progress bars apply.

Example:
    >>> import ray, raytopic.data
    >>> summary = raytopic.data.write_topic(ray.data.range(1000), topic, key="id")
    >>> raytopic.data.read_topic(topic).count()
    1000
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import ray
from ray.data import Dataset
from ray.data.block import BlockAccessor, BlockMetadata
from ray.data.datasource import Datasink, Datasource, ReadTask

from raytopic.arrow_tables import combine, empty_table
from raytopic.bulk import BulkWriter, ChannelRange, plan_ranges, read_range
from raytopic.errors import InvalidTypeError
from raytopic.records import PublishSummary

if TYPE_CHECKING:
    from ray.data._internal.execution.interfaces import TaskContext

    from raytopic.topic import Topic

__all__ = ["TopicDatasink", "TopicDatasource", "read_topic", "write_topic"]


def write_topic(
    dataset: Dataset, topic: Topic, *, key: str | None = None, block_timeout: float = 60.0
) -> PublishSummary:
    """Publish every row of ``dataset`` into ``topic``, block by block as Arrow.

    Each row becomes one element (read back as a dict of its columns) at
    its own position. Rows route like ``publish(row, key=row[key])``; rows
    with a null key, or all rows without ``key``, go round robin, row by row.
    A write task that Ray runs again appends nothing twice.

    Args:
        dataset: Any Ray Dataset (its blocks are read as Arrow).
        topic: The topic.
        key: A column to route by (text, bytes, integer or boolean).
        block_timeout: With overflow "block", seconds an append waits for room.

    Returns:
        What was appended.

    Raises:
        InvalidTypeError: ``key`` names a column of a type that cannot be a key.
        TopicFullError: a channel had no room (overflow "fail", or "block" too long).
    """
    if not isinstance(dataset, Dataset):
        raise InvalidTypeError(f"dataset must be a ray.data.Dataset, got {type(dataset).__name__}")
    sink = TopicDatasink(topic, key=key, block_timeout=block_timeout)
    started = time.perf_counter()
    dataset.write_datasink(sink)
    return PublishSummary.total(sink.results, time.perf_counter() - started)


def read_topic(
    topic: Topic,
    *,
    channels: Iterable[int] | None = None,
    start: Any = "earliest",
    end: Any = "latest",
    group: str | None = None,
) -> Dataset:
    """A topic's elements as a Ray Dataset of Arrow blocks, one read task per channel
    range (see ``raytopic.bulk.plan_ranges`` for ``start``, ``end``, ``group``).

    Columns: a row's own fields (rows published from DataFrames or as dicts),
    or ``value`` for other values; then ``channel``, ``position`` and
    ``timestamp``. The ranges are fixed when this is called; reading commits
    nothing. An empty topic gives an empty dataset.

    Raises:
        GroupNotFoundError: no such group.
        InvalidArgumentError, InvalidTypeError: a bad argument.
    """
    ranges = plan_ranges(topic, channels=channels, start=start, end=end, group=group)
    if not ranges:
        return ray.data.from_arrow(empty_table())
    return ray.data.read_datasource(TopicDatasource(topic, ranges))


class TopicDatasink(Datasink[tuple[dict[int, int], int]]):
    """Appends each write task's blocks through one ``BulkWriter``; the task's
    index names the writer, so a task run again appends nothing twice."""

    def __init__(self, topic: Topic, *, key: str | None, block_timeout: float) -> None:
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
            block_timeout=self._block_timeout,
        )
        for block in blocks:
            writer.write(BlockAccessor.for_block(block).to_arrow(), self._key)
        return writer.close()

    def on_write_complete(self, write_result: Any) -> None:
        """Keep every task's result (this runs in the driver)."""
        self.results = list(write_result.write_returns)

    def get_name(self) -> str:
        """The write tasks' name in Ray Data's progress and stats."""
        return f"WriteTopic({self._topic.name})"


class TopicDatasource(Datasource):
    """One read task per planned channel range; Arrow blocks out."""

    def __init__(self, topic: Topic, ranges: list[ChannelRange]) -> None:
        super().__init__()
        self._topic = topic
        self._ranges = ranges

    def estimate_inmemory_data_size(self) -> int | None:
        """Unknown until read (values differ in size)."""
        return None

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, **_: Any
    ) -> list[ReadTask]:
        """One task per range (the plan already cut long channels into pieces)."""
        topic = self._topic
        tasks = []
        for piece in self._ranges:
            metadata = BlockMetadata(
                num_rows=piece.rows, size_bytes=None, input_files=None, exec_stats=None
            )
            tasks.append(
                ReadTask(_reader(topic, piece), metadata, per_task_row_limit=per_task_row_limit)
            )
        return tasks

    def get_name(self) -> str:
        """The read tasks' name in Ray Data's progress and stats."""
        return f"ReadTopic({self._topic.name})"


def _reader(topic: Topic, piece: ChannelRange) -> Any:
    def read() -> Iterator[pa.Table]:
        yield from combine(read_range(topic, piece))

    return read
