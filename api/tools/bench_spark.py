"""``raytopic bench --spark``: the Spark bridge against RayDP's own conversions,
measured in the same run (see ``raytopic.tools.bench`` for the report format).

Cases (``rows`` rows x 3 columns: id, customer, amount; cached in Spark first):
    baseline   RayDP's bare ``ray.data.from_spark`` + fetching every Arrow block
               in the driver (the conversion alone, nothing stored).
    publish    ``publish_dataframe`` by customer, two routes: Spark's tasks
               appending from ``mapInArrow`` (the route ``publish_dataframe``
               takes), and RayDP's blocks (``from_spark`` -> Ray Data tasks
               appending through ``raytopic.data.write_topic``); each as a
               ratio to the baseline. Also the driver's RSS growth over a
               publish (no rows pass through the driver: it should stay flat).
    read       ``read_topic`` back to Spark, against
               ``ray.data.from_arrow(blocks).to_spark(spark)`` of the same rows;
               each timed to a Spark aggregate over every column.
    stream     the streams case's catch-up through ``raytopic.spark.stream`` (ten
               batches, each DataFrame written with ``write.parquet``) against
               ``read_topic(spark, topic).write.parquet`` of the same rows
               (``raytopic.tools.bench_streams.spark_stream_figures``; target
               >= 0.4x; ``raytopic bench --spark --streams`` runs it alone).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import ray

from raytopic.client.topic import Topic, create_topic
from raytopic.tools.bench_common import Figure, at_least
from raytopic.tools.bench_streams import spark_stream_figures

__all__ = ["run_spark_benchmarks", "run_spark_stream_benchmarks"]

CHANNELS = 8
PUBLISH_TARGET = at_least(0.5)
"""Each publish route against RayDP's bare conversion, which stores nothing: at
least half its rate."""
READ_TARGET = at_least(0.5)
"""``read_topic`` against ``from_arrow(...).to_spark`` of the same rows."""


def _orders(spark: Any, rows: int) -> Any:
    from pyspark.sql import functions as F

    orders = spark.range(rows, numPartitions=4).select(
        F.col("id"),
        F.pmod(F.xxhash64("id"), F.lit(1000)).alias("customer"),
        (F.col("id") * 0.5).alias("amount"),
    )
    orders = orders.cache()
    orders.count()
    return orders


def _topic(rows: int, channels: int, *, retain: bool = False) -> Topic:
    per_channel = rows // channels + 1
    return create_topic(
        f"bench-spark-{uuid.uuid4().hex[:6]}",
        channels=channels,
        capacity=2 * per_channel,
        retain=retain,
    )


def _timed(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def raydp_conversion(orders: Any) -> float:
    """Seconds of ``ray.data.from_spark`` + fetching every block."""
    from raydp.spark.dataset import from_spark_recoverable, release_spark_recoverable

    def convert() -> None:
        dataset = from_spark_recoverable(orders)
        fetched = sum(ray.get(ref).num_rows for ref in dataset.to_arrow_refs())
        release_spark_recoverable(orders)
        if fetched != orders.count():
            raise RuntimeError(f"RayDP gave {fetched} rows")

    return _timed(convert)


def publish_from_tasks(orders: Any, rows: int, channels: int = CHANNELS) -> tuple[float, int]:
    """Seconds of ``publish_dataframe`` (Spark tasks append from ``mapInArrow``), and
    the bytes the driver's RSS grew by over it (no rows pass through the driver)."""
    from raytopic.bridge.spark import publish_dataframe

    topic = _topic(rows, channels)
    try:
        process = psutil.Process(os.getpid())
        before = process.memory_info().rss
        seconds = _checked(topic, rows, lambda: publish_dataframe(topic, orders, key="customer"))
        return seconds, max(0, process.memory_info().rss - before)
    finally:
        topic.destroy()


def publish_through_blocks(orders: Any, rows: int, channels: int = CHANNELS) -> float:
    """Seconds of RayDP's blocks -> Ray Data tasks appending (``write_topic``)."""
    from raydp.spark.dataset import from_spark_recoverable, release_spark_recoverable

    from raytopic.bridge.data import write_topic

    topic = _topic(rows, channels)

    def publish() -> Any:
        summary = write_topic(from_spark_recoverable(orders), topic, key="customer")
        release_spark_recoverable(orders)
        return summary

    try:
        return _checked(topic, rows, publish)
    finally:
        topic.destroy()


def _checked(topic: Topic, rows: int, publish: Callable[[], Any]) -> float:
    started = time.perf_counter()
    summary = publish()
    seconds = time.perf_counter() - started
    if summary.rows != rows:
        raise RuntimeError(f"{topic.name}: {summary.rows} of {rows} rows published")
    return seconds


def _publish_figure(case: str, rows: int, baseline: float, seconds: list[float]) -> Figure:
    """A publish route's rate (the median run's) against RayDP's bare conversion."""
    rate = rows / statistics.median(seconds)
    return Figure(case, rate, "rows/s", "RayDP from_spark", baseline, target=PUBLISH_TARGET)


def read_times(spark: Any, orders: Any, rows: int, channels: int = CHANNELS) -> tuple[float, float]:
    """Seconds of ``read_topic`` and of ``from_arrow(...).to_spark``, each to an
    aggregate over every column."""
    from pyspark.sql import functions as F
    from raydp.spark.dataset import from_spark_recoverable, release_spark_recoverable

    from raytopic.bridge.spark import publish_dataframe, read_topic

    def aggregate(df: Any) -> None:
        df.agg(F.sum("id"), F.sum("customer"), F.sum("amount")).collect()

    topic = _topic(rows, channels)
    try:
        publish_dataframe(topic, orders, key="customer")
        ours = _timed(lambda: aggregate(read_topic(spark, topic)))
    finally:
        topic.destroy()
    blocks = [ray.get(ref) for ref in from_spark_recoverable(orders).to_arrow_refs()]
    release_spark_recoverable(orders)
    refs: list[Any] = [ray.put(block) for block in blocks]
    theirs = _timed(lambda: aggregate(ray.data.from_arrow_refs(refs).to_spark(spark)))
    return ours, theirs


def stream_figures(
    spark: Any, orders: Any, rows: int, channels: int, batch_rows: int, repeat: int
) -> list[Figure]:
    """The streams case's catch-up through Spark, on a topic holding ``orders``
    (retained: each stream reads it through a group of its own)."""
    from raytopic.bridge.spark import publish_dataframe

    topic = _topic(rows, channels, retain=True)
    try:
        publish_dataframe(topic, orders, key="customer")
        return spark_stream_figures(spark, topic, rows, batch_rows=batch_rows, repeat=repeat)
    finally:
        topic.destroy()


def run_spark_benchmarks(
    *,
    rows: int = 1_000_000,
    repeat: int = 3,
    report: Callable[[Figure], None] = print,
    spark: Any = None,
    channels: int = CHANNELS,
    warm_up: bool = True,
    stream_batch_rows: int | None = None,
) -> list[Figure]:
    """Run every case; ``report`` hears each figure.

    Args:
        rows: Rows per run.
        repeat: Runs per case (the median is reported).
        report: Called with each figure as it is measured.
        spark: A running SparkSession to measure with; None starts Spark on Ray
            for the run and stops it after.
        channels: Channels of each topic a case publishes into (a new topic per run).
        warm_up: Run RayDP's conversion and a publish once, untimed, before the
            timed runs; False leaves first-run costs in the first figures.
        stream_batch_rows: ``max_rows_per_batch`` of the stream case (None: a
            tenth of ``rows``, as the streams case's 1,000,000 in batches of 100,000).
    """
    figures: list[Figure] = []

    def add(figure: Figure) -> None:
        figures.append(figure)
        report(figure)

    with _session(spark) as spark:
        orders = _orders(spark, rows)
        if warm_up:
            raydp_conversion(orders)
            publish_from_tasks(orders, rows, channels)
        baseline = rows / statistics.median(raydp_conversion(orders) for _ in range(repeat))
        add(Figure(f"RayDP from_spark + fetch blocks, {rows:,} rows", baseline, "rows/s"))
        publishes = [publish_from_tasks(orders, rows, channels) for _ in range(repeat)]
        add(
            _publish_figure(
                "publish_dataframe (Spark tasks append, mapInArrow)",
                rows,
                baseline,
                [seconds for seconds, _ in publishes],
            )
        )
        blocks = [publish_through_blocks(orders, rows, channels) for _ in range(repeat)]
        add(
            _publish_figure(
                "publish via RayDP blocks + Ray Data write_topic", rows, baseline, blocks
            )
        )
        # The last timed publish's growth: after the runs before it, as in a job that
        # publishes again and again (a publish of its own cost the run as much again).
        growth = publishes[-1][1]
        add(Figure("driver RSS growth over publish_dataframe", growth / 2**20, "MiB"))
        timings = [read_times(spark, orders, rows, channels) for _ in range(repeat)]
        ours = statistics.median(t[0] for t in timings)
        theirs = statistics.median(t[1] for t in timings)
        add(Figure("ray.data.from_arrow(...).to_spark -> aggregate", rows / theirs, "rows/s"))
        add(
            Figure(
                "read_topic(spark) -> aggregate",
                rows / ours,
                "rows/s",
                "from_arrow.to_spark",
                rows / theirs,
                target=READ_TARGET,
            )
        )
        batch_rows = stream_batch_rows or -(-rows // 10)
        for figure in stream_figures(spark, orders, rows, channels, batch_rows, repeat):
            add(figure)
        orders.unpersist()
    return figures


def run_spark_stream_benchmarks(
    *, rows: int = 1_000_000, repeat: int = 3, report: Callable[[Figure], None] = print
) -> list[Figure]:
    """Only the stream case (``raytopic bench --spark --streams``), on Spark on Ray
    started for the run: ``rows`` rows in batches of a tenth, 8 channels."""
    with _session(None) as spark:
        orders = _orders(spark, rows)
        figures = stream_figures(spark, orders, rows, CHANNELS, -(-rows // 10), repeat)
        orders.unpersist()
    for figure in figures:
        report(figure)
    return figures


@contextlib.contextmanager
def _session(spark: Any) -> Iterator[Any]:
    """``spark``, or Spark on Ray started for the run (and stopped after) if None."""
    from raytopic.bridge.spark_session import init_quiet_spark, stop_spark

    if spark is not None:
        yield spark
        return
    try:
        yield init_quiet_spark("raytopic-bench")
    finally:
        stop_spark()
