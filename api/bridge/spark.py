"""Spark DataFrames in and out of topics (PySpark on Ray through RayDP).

- :func:`publish_dataframe`: Spark computes each row's channel in its JVM
  (``pmod(crc32(cast(key AS STRING)), channels)``, the Publisher's rule),
  then each Spark task hands its partition's Arrow batches straight to the
  channel actors (``mapInArrow``): no row passes through the driver or
  becomes a Python object.
- :func:`read_topic`: a topic's elements as a DataFrame, read by Spark tasks
  from the channel actors, one task per channel range.
- :func:`sink`: ``df.writeStream.foreachBatch(sink(topic))`` publishes each
  micro-batch exactly once.
- :func:`stream`: a group of a topic as micro-batches, each a DataFrame over
  fixed ranges (``raytopic.data.stream``'s stream): with :func:`sink`, a topic
  -> Spark -> topic pipeline is exactly once end to end.

Spark's Python workers are not Ray workers: the functions Spark runs join the
driver's Ray cluster themselves (once per worker process).

Example:
    >>> spark = raytopic.spark.init_spark("orders", num_executors=1, executor_cores=1)
    >>> summary = raytopic.spark.publish_dataframe(topic, orders_df, key="customer")
    >>> raytopic.spark.read_topic(spark, topic).groupBy("channel").count().show()
"""

from __future__ import annotations

import base64
import logging
import pickle
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import ray

from raytopic.bridge.spark_session import (
    JAVA_OPTIONS,
    JavaNotFoundError,
    init_spark,
    prepare_java,
    stop_spark,
)
from raytopic.bridge.streams import AVAILABLE_NOW, Stream, open_stream
from raytopic.client.arrow_tables import conform, empty_table, unify
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
    Start,
    StartName,
    check_instance,
    check_nonnegative_int,
    check_timeout,
)
from raytopic.core.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    TopicError,
    TopicNotFoundError,
)
from raytopic.core.records import PublishSummary

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from ray.data import Dataset

logger = logging.getLogger(__name__)

__all__ = [
    "JAVA_OPTIONS",
    "JavaNotFoundError",
    "StreamingSink",
    "init_spark",
    "prepare_java",
    "publish_dataframe",
    "read_topic",
    "sink",
    "stop_spark",
    "stream",
]

_CHANNEL = "__raytopic_channel"
_ROW = "__raytopic_row"
"""The sink's column of each row's place in its micro-batch (see ``BulkWriter``'s
``order``)."""
_SUMMARY_SCHEMA = "channel int, rows long, bytes long, error string"
_QUERY_ID_PROPERTY = "sql.streaming.queryId"  # set by Spark while a micro-batch runs
_SAMPLE_ROWS = 100
"""Rows read from the start of each range to learn the columns (Spark needs a
DataFrame's schema before any task runs)."""


# -- publishing --------------------------------------------------------------------------


def publish_dataframe(
    topic: Topic, df: DataFrame, *, key: str | None = None, block_timeout: float = 60.0
) -> PublishSummary:
    """Publish every row of ``df`` into ``topic`` as Arrow, from Spark's own tasks.

    Each row becomes one element at its own position; subscribers read it
    as a dict of exactly the row's fields (a struct as a dict, an array as a
    list, a timestamp as an aware UTC datetime). Rows route like
    ``publish(row, key=row[key])``; rows with a null key, and all rows
    without ``key``, go round robin, row by row. A Spark task that runs again
    appends nothing twice. The topic holds the rows themselves: they stay
    readable after ``stop_spark()``.

    Args:
        topic: The topic.
        df: The rows.
        key: The column to route by (string, binary, integer or boolean).
        block_timeout: With overflow "block", seconds an append waits for room
            (> 0, at most a year; None: no limit).

    Returns:
        What was appended.

    Raises:
        InvalidArgumentError: ``key`` is not a column, or a bad ``block_timeout``;
            the topic is compacted and ``key`` is None (before Spark runs
            anything), or a row's key is null (its partition's rows from that
            Arrow batch on are not appended).
        InvalidTypeError: ``key``'s type cannot be a key (floats, decimals, ...),
            or ``topic`` is not a Topic (checked before Spark runs anything).
        TopicFullError: a channel had no room (rows before it are appended).
    """
    check_instance(topic, Topic, "topic")
    check_timeout(block_timeout, "block_timeout")
    _check_dataframe(df)
    check_key_column(topic, key)
    started = time.perf_counter()
    routed = df.withColumn(_CHANNEL, channel_column(df, key, topic.channel_count))
    job = _AppendPartition(_TopicAddress.of(topic), uuid.uuid4().hex, key, None, block_timeout)
    rows = routed.mapInArrow(job, _SUMMARY_SCHEMA).collect()
    return _summary(rows, time.perf_counter() - started)


def channel_column(df: DataFrame, key: str | None, channel_count: int) -> Column:
    """Each row's channel as a Spark column, computed in the JVM exactly as the
    Publisher computes it; round robin, row by row, without a key.

    Raises:
        InvalidArgumentError: ``key`` is not a column of ``df``.
        InvalidTypeError: its type cannot be a key.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    _check_dataframe(df)
    if _CHANNEL in df.columns:  # it would be overwritten, then dropped from every row
        raise InvalidArgumentError(f"{_CHANNEL!r} is a column name raytopic needs")
    # Row by row within each Spark partition (the id counts rows in a partition).
    turn = F.pmod(F.monotonically_increasing_id(), F.lit(channel_count))
    if key is None:
        return turn.cast("int")
    if not isinstance(key, str) or key not in df.columns:
        raise InvalidArgumentError(f"key {key!r} is not a column: {df.columns}")
    kind = df.schema[key].dataType
    column = F.col(key)
    if isinstance(kind, (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.BooleanType)):
        text = column.cast("string")  # decimal digits; "true" / "false" (raytopic.client.routing)
    elif isinstance(kind, (T.StringType, T.BinaryType)):
        text = column
    else:
        raise InvalidTypeError(
            f"key column {key!r} is {kind.simpleString()}: a key must be a string, binary, "
            "integer or boolean column (floats are written differently by Python and Java)"
        )
    hashed = F.pmod(F.crc32(text), F.lit(channel_count))
    return F.when(column.isNull(), turn).otherwise(hashed).cast("int")


def _check_dataframe(df: Any) -> None:
    from pyspark.sql import DataFrame

    if not isinstance(df, DataFrame):
        raise InvalidTypeError(f"df must be a pyspark DataFrame, got {type(df).__name__}")


def _summary(rows: list[Any], seconds: float) -> PublishSummary:
    """The writers' summary rows as one summary; a writer's typed error raised."""
    for row in rows:
        if row.error is not None:
            raise pickle.loads(base64.b64decode(row.error))
    parts = [({} if row.channel is None else {row.channel: row.rows}, row.bytes) for row in rows]
    return PublishSummary.total(parts, seconds)


@dataclass(frozen=True, slots=True)
class _TopicAddress:
    """How a Spark worker (not a Ray worker) finds a topic: Ray's address, the names."""

    name: str
    namespace: str
    topic_id: str
    ray_address: str

    @classmethod
    def of(cls, topic: Topic) -> _TopicAddress:
        return cls(
            topic.name, topic.namespace, topic.topic_id, ray.get_runtime_context().gcs_address
        )

    def topic(self) -> Topic:
        """The topic, joining the Ray cluster first if this process is not in it."""
        from raytopic.client.topic import get_topic

        if not ray.is_initialized():
            ray.init(
                address=self.ray_address,
                namespace=self.namespace,
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
        topic = _topics.get(self)
        if topic is None:
            topic = get_topic(self.name, namespace=self.namespace)
            if topic.topic_id != self.topic_id:
                raise TopicNotFoundError(
                    f"topic {self.name!r} was destroyed (and made again) meanwhile"
                )
            _topics[self] = topic
        return topic


_topics: dict[_TopicAddress, Topic] = {}
"""Topics found in this (Spark worker) process: found once, used by every task."""


class _AppendPartition:
    """The ``mapInArrow`` function of a publish: one Spark partition's rows to the
    channels through one BulkWriter. The writer's id is the partition's, so a
    task Spark runs again appends nothing twice; with ``version`` the rows go
    as ``append_once`` (the streaming sink)."""

    def __init__(
        self,
        address: _TopicAddress,
        writer: str,
        key: str | None,
        version: int | None,
        block_timeout: float,
    ) -> None:
        self._address = address
        self._writer = writer
        self._key = key
        self._version = version
        self._block_timeout = block_timeout

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        writer_id = self._writer
        if self._version is None:  # one writer per partition; a sink's is the query's
            task = TaskContext.get()
            assert task is not None  # (this runs in a Spark task)
            writer_id = f"spark:{writer_id}:{task.partitionId()}"
        rows: dict[int, int] = {}
        nbytes = 0
        error: str | None = None
        try:
            writer = BulkWriter(
                self._address.topic(),
                writer_id,
                key=self._key,
                version=self._version,
                block_timeout=self._block_timeout,
                order=None if self._version is None else _ROW,
            )
            for batch in batches:
                table = pa.Table.from_batches([batch])
                channels = table.column(_CHANNEL).to_numpy().astype(np.int64)
                writer.write_routed(table.drop_columns([_CHANNEL]), channels)
            rows, nbytes = writer.close()
        except TopicError as failure:  # reaches the driver as itself, not as Spark's text
            error = base64.b64encode(pickle.dumps(failure)).decode("ascii")
        out = {
            "channel": [*rows, None],
            "rows": [*rows.values(), 0],
            "bytes": [0] * len(rows) + [nbytes],
            "error": [None] * len(rows) + [error],
        }
        yield pa.record_batch(
            out,
            schema=pa.schema(
                [
                    ("channel", pa.int32()),
                    ("rows", pa.int64()),
                    ("bytes", pa.int64()),
                    ("error", pa.string()),
                ]
            ),
        )


# -- the streaming sink -------------------------------------------------------------------


def sink(
    topic: Topic,
    *,
    key: str | None = None,
    query_id: str | None = None,
    block_timeout: float = 60.0,
) -> StreamingSink:
    """A ``foreachBatch`` function that publishes each micro-batch exactly once.

    Example:
        >>> query = (df.writeStream.foreachBatch(raytopic.spark.sink(topic, key="user"))
        ...          .option("checkpointLocation", path).start())

    Args:
        topic: The topic.
        key: The column to route by (as in :func:`publish_dataframe`).
        query_id: Names the stream in the channels' records; default: Spark's
            query id, which a query restarted from its checkpoint keeps.
        block_timeout: With overflow "block", seconds an append waits for room
            (> 0, at most a year; None: no limit).

    Raises:
        InvalidArgumentError, InvalidTypeError: a bad argument (``topic`` not a
            Topic, say), before any micro-batch runs.
    """
    return StreamingSink(topic, key=key, query_id=query_id, block_timeout=block_timeout)


class StreamingSink:
    """Publishes micro-batches exactly once (see :func:`sink`).

    **Delivery**: each channel gets a micro-batch's rows for it as ONE append
    that carries (query id, batch id), stored with the rows (with a store,
    it survives a restart of the channel). A batch Spark runs again, after a
    failure or a restart from the checkpoint (a new sink object included),
    is skipped by every channel that has it and appended by the others; a channel
    where it ended short (a "block" timeout failed the batch) appends the rest.
    Batch ids must grow (Spark's do). The rows of a batch must route the
    same way when it runs again: with a key column they do; round robin
    (null keys) follows the batch's row order, which a replayable source
    (files, Kafka, rate) keeps.

    **Ordering**: each channel's part goes in by key, then by the row's place in
    the micro-batch (taken before the sink's shuffle): one key's rows keep their
    order in the batch, and a re-run's part is the first run's row for row, so
    the rest of one that ended short is exactly the rows not stored.
    """

    def __init__(
        self, topic: Topic, *, key: str | None, query_id: str | None, block_timeout: float
    ) -> None:
        check_instance(topic, Topic, "topic")
        for value, what in ((key, "key"), (query_id, "query_id")):
            if value is not None:
                check_instance(value, str, what)
        check_timeout(block_timeout, "block_timeout")
        check_key_column(topic, key)
        self._address = _TopicAddress.of(topic)
        self._channel_count = topic.channel_count
        self._key = key
        self._query_id = query_id
        self._block_timeout = block_timeout
        self.last_summary: PublishSummary | None = None
        """What the last micro-batch appended (0 rows: it was published before)."""

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Publish micro-batch ``batch_id`` (Spark calls this in the driver)."""
        from pyspark.sql import functions as F

        _check_dataframe(batch)
        check_nonnegative_int(batch_id, "batch_id")
        query_id = self._query_id or batch.sparkSession.sparkContext.getLocalProperty(
            _QUERY_ID_PROPERTY
        )
        if not query_id:
            raise InvalidArgumentError(
                "not inside a streaming query: give sink(..., query_id=...) to name the stream"
            )
        if _ROW in batch.columns:
            raise InvalidArgumentError(f"{_ROW!r} is a column name raytopic needs")
        started = time.perf_counter()
        routed = batch.withColumn(_CHANNEL, channel_column(batch, self._key, self._channel_count))
        # The rows' place in the micro-batch, taken before the shuffle reorders them:
        # each channel's part is appended in (key, this) order, the same on a re-run.
        routed = routed.withColumn(_ROW, F.monotonically_increasing_id())
        # All of a channel's rows in one partition: one append per channel.
        routed = routed.repartition(self._channel_count, _CHANNEL)
        job = _AppendPartition(
            self._address, f"once:{query_id}", self._key, batch_id, self._block_timeout
        )
        rows = routed.mapInArrow(job, _SUMMARY_SCHEMA).collect()
        summary = self.last_summary = _summary(rows, time.perf_counter() - started)
        logger.info(
            "micro-batch %d of query %s into topic %r: %d rows appended",
            batch_id,
            query_id,
            self._address.name,
            summary.rows,
        )


# -- reading -------------------------------------------------------------------------------


def read_topic(
    spark: SparkSession,
    topic: Topic,
    *,
    channels: Iterable[int] | None = None,
    start: Any = "earliest",
    end: Any = "latest",
    group: str | None = None,
    fail_on_data_loss: bool = True,
) -> DataFrame:
    """A topic's elements as a Spark DataFrame, read by Spark tasks straight from the
    channel actors (nothing passes through the driver, nothing stays pinned).

    Columns as ``raytopic.data.read_topic``: a row's own fields (or ``value``),
    then ``channel``, ``position`` and ``timestamp`` (TimestampType). The
    columns are learned from the first elements of each channel range: a
    field that only later elements have is not read. ``start``, ``end``,
    ``group`` and ``fail_on_data_loss`` as in ``raytopic.client.bulk.plan_ranges``
    (reading commits nothing).
    An empty topic gives an empty DataFrame.

    Raises:
        DataLossError: the ranges cross a damaged stored record (named), unless
            ``fail_on_data_loss=False`` (Spark's Kafka source option of that
            name) reads every intact element around it.
        GroupNotFoundError: no such group.
        InvalidArgumentError, InvalidTypeError: a bad argument (``spark`` not a
            SparkSession, ``topic`` not a Topic, ...), or values whose types cannot
            share a column.
    """
    _check_session(spark)
    check_instance(topic, Topic, "topic")
    ranges = plan_ranges(
        topic,
        channels=channels,
        start=start,
        end=end,
        group=group,
        fail_on_data_loss=fail_on_data_loss,
    )
    if not ranges:  # nothing to read: the columns still are the values'
        from pyspark.sql.pandas.types import from_arrow_schema

        schema = empty_read_schema(topic, channels) or empty_table().schema
        return spark.createDataFrame([], from_arrow_schema(schema))
    return ranges_dataframe(spark, topic, ranges)


def _check_session(spark: Any) -> None:
    from pyspark.sql import SparkSession

    check_instance(spark, SparkSession, "spark")


def ranges_dataframe(spark: SparkSession, topic: Topic, ranges: list[ChannelRange]) -> DataFrame:
    """The elements of planned ``ranges`` as a DataFrame read by Spark tasks (see
    :func:`read_topic`, which plans them; a stream's micro-batch has its own).

    Raises:
        InvalidTypeError: values whose types cannot share a column.
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = _sample_schema(topic, ranges)
    spark_schema = from_arrow_schema(schema)
    if not ranges:
        return spark.createDataFrame([], spark_schema)
    # As many tasks as Spark runs at once (each reads several ranges in turn), and
    # no more than a task per SPARK_TASK_ROWS: a Spark task costs more to start
    # than a range costs to read (a micro-batch of 100,000 rows is one task).
    rows = sum(piece.rows for piece in ranges)
    tasks = min(
        len(ranges), max(1, spark.sparkContext.defaultParallelism), -(-rows // SPARK_TASK_ROWS)
    )
    plan = spark.sparkContext.parallelize([tuple(piece) for piece in ranges], numSlices=tasks).toDF(
        "channel int, first long, stop long"
    )
    job = _ReadRanges(_TopicAddress.of(topic), schema.serialize().to_pybytes())
    return plan.mapInArrow(job, spark_schema)


SPARK_TASK_ROWS = 200_000
"""Positions a Spark read task reads at least before the read takes another task (a
task and its Python worker cost more than reading 100,000 rows in it)."""


def _sample_schema(topic: Topic, ranges: list[ChannelRange]) -> pa.Schema:
    if not ranges:
        return empty_table().schema
    firsts = (
        next(
            read_range(topic, ChannelRange(piece.channel, piece.first, piece.first + _SAMPLE_ROWS)),
            None,
        )
        for piece in ranges
    )
    samples = [table for table in firsts if table is not None] or [empty_table()]
    try:
        return unify(samples)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise InvalidTypeError(
            f"the topic's values do not fit one schema ({error}); read them with "
            "raytopic.data.read_topic, whose blocks may differ"
        ) from None


class _ReadRanges:
    """The ``mapInArrow`` function of a read: each plan row's range, as ``schema``."""

    def __init__(self, address: _TopicAddress, schema: bytes) -> None:
        self._address = address
        self._schema = schema

    def __call__(self, plans: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = pa.ipc.read_schema(pa.py_buffer(self._schema))
        topic = self._address.topic()
        for plan in plans:
            for channel, first, stop in zip(*plan.to_pydict().values(), strict=True):
                for table in read_range(topic, ChannelRange(channel, first, stop)):
                    yield from conform(table, schema).to_batches()


# -- streaming out of a topic ----------------------------------------------------------------


def stream(
    spark: SparkSession,
    topic: Topic,
    *,
    group: str,
    trigger: str | float = AVAILABLE_NOW,
    max_rows_per_batch: int = 100_000,
    start: Start | StartName = "earliest",
    fail_on_data_loss: bool = True,
    timeout: float = 30.0,
) -> Stream:
    """A group of ``topic`` as micro-batches whose ``dataframe`` is a Spark DataFrame of
    the batch's ranges, read by Spark tasks as :func:`read_topic` reads (its
    ``dataset`` is the same rows as a Ray Dataset). The stream, its offset log,
    triggers, commits and replays are ``raytopic.data.stream``'s (see it for the
    arguments). PySpark 3.5 has no Python streaming source: this is the loop a
    ``foreachBatch`` would run, with the topic as a replayable source.

    Example:
        >>> publish = raytopic.spark.sink(out_topic, query_id="enrich")
        >>> for mb in raytopic.spark.stream(spark, topic, group="enrich"):
        ...     publish(mb.dataframe.withColumn("total", F.col("amount") * 2), mb.batch_id)

    With :func:`sink` (``query_id`` fixed, so a restarted driver keeps it) a
    replayed batch is appended by no channel twice: exactly once end to end.

    Raises:
        InvalidArgumentError, InvalidTypeError: a bad argument (``spark`` not a
            SparkSession, ...); nothing is made or consumed.
        GroupModeError: the group is shared.
        GroupBusyError: the group has members.
    """
    # Here, not at the top: Spark's Python workers import this module, and need no Ray Data.
    from raytopic.bridge.data import ranges_dataset

    _check_session(spark)

    def read(pieces: list[ChannelRange]) -> tuple[Dataset, DataFrame]:
        return ranges_dataset(topic, pieces), ranges_dataframe(spark, topic, pieces)

    def read_ahead(pieces: list[ChannelRange]) -> Callable[[], tuple[Dataset, DataFrame]]:
        # Planned in the stream's thread (its schema sampled, its plan made); Spark
        # reads the rows when the caller's job runs, as read_topic's.
        planned = read(pieces)
        return lambda: planned

    return open_stream(
        topic,
        group,
        trigger=trigger,
        max_rows_per_batch=max_rows_per_batch,
        start=start,
        fail_on_data_loss=fail_on_data_loss,
        reader=read,
        read_ahead=read_ahead,
        timeout=timeout,
    )
