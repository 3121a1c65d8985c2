"""A topic's table as a Ray Dataset: ``raytopic.data.read_table``.

The table a ``Topic.table()`` view holds (the latest value of every key, deleted
keys left out), computed where the data is: one Ray Data read task per channel
(a key lives in one channel) reads its channel in bulk and keeps each key's
latest element (:class:`raytopic.client.table_state.Survivors`), so only the survivors
leave the task, as Arrow.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import ray
from ray.data import DataContext, Dataset
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from raytopic.client.arrow_tables import elements_table, empty_table, metadata_names
from raytopic.client.bulk import ChannelRange, ChannelReader, plan_ranges
from raytopic.client.table_state import Survivors
from raytopic.client.topic import Topic
from raytopic.core.config import check_instance
from raytopic.core.payloads import decode_checked

logger = logging.getLogger(__name__)

__all__ = ["TableDatasource", "read_table"]

_WHOLE = 1 << 62
"""Rows of a planned range at most: no limit (a channel is one read task)."""


def read_table(topic: Topic, *, fail_on_data_loss: bool = True) -> Dataset:
    """The latest value of every key of ``topic`` as a Ray Dataset: the table a
    ``topic.table()`` view holds, one row per live key (deleted keys are not rows;
    elements without a key are not a table's).

    Columns: ``key`` first, then the value's own fields (dicts and rows published
    from DataFrames) or ``value``, then where the value is: ``channel``,
    ``position``, ``timestamp`` (the columns of ``read_topic``). What the channels
    hold is fixed when this is called; each channel is read and reduced by a read
    task of its own.

    Args:
        topic: The topic (compacted or not: on a compacted topic each task reads
            little more than the survivors).
        fail_on_data_loss: Raise when a channel's stored records are damaged (else
            read around them, logged).

    Returns:
        The dataset (empty, with the metadata columns, if no key has a value).

    Raises:
        DataLossError: a damaged stored record (named), with ``fail_on_data_loss``.
        InvalidTypeError: ``topic`` is not a Topic.
        TopicNotFoundError: the topic was destroyed.

    Example:
        >>> raytopic.data.read_table(prices).to_pandas()  # key, sku, eur, channel, ...
    """
    check_instance(topic, Topic, "topic")
    pieces: dict[int, list[ChannelRange]] = {}
    for piece in plan_ranges(topic, task_rows=_WHOLE, fail_on_data_loss=fail_on_data_loss):
        pieces.setdefault(piece.channel, []).append(piece)
    if not pieces:
        return ray.data.from_arrow(empty_table())
    source = TableDatasource(topic, pieces)
    return ray.data.read_datasource(source, override_num_blocks=len(pieces))


class TableDatasource(Datasource):
    """One read task per channel: its planned ranges, reduced to each key's latest
    live element.

    Args:
        topic: The topic.
        pieces: Per channel, its planned ranges in position order.
    """

    def __init__(self, topic: Topic, pieces: dict[int, list[ChannelRange]]) -> None:
        super().__init__()
        self._topic = topic
        self._pieces = pieces

    def estimate_inmemory_data_size(self) -> int | None:
        """Unknown until read (how many keys survive)."""
        return None

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: DataContext | None = None,
    ) -> list[ReadTask]:
        """A task per channel."""
        metadata = BlockMetadata(num_rows=None, size_bytes=None, input_files=None, exec_stats=None)
        return [
            ReadTask(_reader(self._topic, channel, ranges), metadata)
            for channel, ranges in self._pieces.items()
        ]

    def get_name(self) -> str:
        """The read tasks' name in Ray Data's progress and stats."""
        return f"ReadTable({self._topic.name})"


def _reader(topic: Topic, channel: int, ranges: list[ChannelRange]) -> Any:
    def read() -> Iterator[pa.Table]:
        table = channel_table(topic, channel, ranges)
        if table.num_rows:
            yield table

    return read


def channel_table(topic: Topic, channel: int, ranges: list[ChannelRange]) -> pa.Table:
    """The latest live element of every key of one channel's ``ranges``, as a table
    (key first; in position order)."""
    survivors = Survivors()
    reader = ChannelReader(topic, ranges)
    while (chunks := reader.next_chunks()) is not None:
        for chunk in chunks:
            keys = chunk.payload.keys
            if keys is None:
                continue  # no element here has a key
            values, failures = decode_checked(chunk.payload)
            if failures:
                logger.warning(
                    "read_table(%r): channel %d: %d value(s) cannot be decoded here and are "
                    "left out: %s",
                    topic.name,
                    channel,
                    len(failures),
                    next(iter(failures.values())),
                )
            where = zip(chunk.sequence_list(), chunk.stamp_list(), strict=True)
            for index, (key, position_and_stamp) in enumerate(zip(keys, where, strict=True)):
                if index not in failures:
                    survivors.add(key, values[index], position_and_stamp)
    rows = survivors.rows()
    if not rows:
        return empty_table()
    table = elements_table(
        channel,
        [key for key, _, _ in rows],
        [value for _, value, _ in rows],
        [position for _, _, (position, _) in rows],
        [stamp for _, _, (_, stamp) in rows],
    )
    key_name = metadata_names(table.column_names[:-4])[0]
    return table.select([key_name, *(name for name in table.column_names if name != key_name)])
