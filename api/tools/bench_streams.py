"""``raytopic bench --streams``: streams of micro-batches against a bounded read of the
same rows and against a plain consumer, measured in the same run (see
``raytopic.tools.bench`` for the report format).

Cases:
    catch-up  ``rows`` rows x 3 columns (id, customer, amount) published as Arrow on
              the bench's channels, then read twice each run: by a stream
              (``"available_now"``, batches of ``batch_rows``, each written with
              ``write_parquet`` into a directory of its batch id), and by one bounded
              ``read_topic(topic).write_parquet(...)`` (the baseline; target >=
              0.6x). Each stream reads through a new group; the two alternate.
    live      ``rate`` rows/s published for ``seconds`` s by a task (each row
              stamped when published) into a fresh topic; a stream with
              ``trigger`` reads them: publish -> batch in hand, p50 (target <=
              trigger + 2 s) and p99 (<= trigger + 5 s), beside a plain group
              member iterating ``iter_batches(1000)`` over the same rows at the same
              time (publish -> received, p50).
    spark     (``raytopic.tools.bench_spark``, with ``--spark``) the catch-up
              through ``raytopic.spark.stream``, each batch's DataFrame written
              with ``df.write.parquet``, against ``read_topic(spark, topic)
              .write.parquet`` of the same rows (target >= 0.4x).
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import ray

from raytopic.client.topic import Topic, create_topic
from raytopic.tools.bench_common import Figure, _name, _percentile, at_least, at_most

__all__ = [
    "CATCH_UP_TARGET",
    "LIVE_P50_SLACK",
    "LIVE_P99_SLACK",
    "QUICK_STREAMS",
    "SPARK_CATCH_UP_TARGET",
    "StreamSettings",
    "run_stream_benchmarks",
    "spark_stream_figures",
]

CATCH_UP_TARGET = at_least(0.6)
"""A stream's catch-up in batches against one bounded read of the same rows: the
offset log, the commits and a Ray Data (or Spark) job per batch should cost less
than 40 %."""
SPARK_CATCH_UP_TARGET = at_least(0.4)
"""The same through Spark, whose job per batch costs more to start than Ray Data's."""
LIVE_P50_SLACK = 2.0
"""Seconds a live row may wait for its batch at the median, beyond the trigger."""
LIVE_P99_SLACK = 5.0
"""The same at the 99th percentile."""
LIVE_TARGET = at_most(1.0)
"""A live latency against its bound (trigger + slack): at most the bound."""


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """The counts of the cases (``QUICK_STREAMS`` for ``--quick``)."""

    rows: int = 1_000_000
    """Rows of the catch-up case."""
    batch_rows: int = 100_000
    """``max_rows_per_batch`` of its stream."""
    channels: int = 8
    """Channels of its topic."""
    rate: float = 5_000
    """Rows a second of the live case."""
    seconds: float = 20.0
    """How long the live case publishes."""
    trigger: float = 1.0
    """The live stream's trigger, in seconds."""


QUICK_STREAMS = StreamSettings(rows=100_000, batch_rows=10_000, seconds=5.0)
"""The same cases with smaller counts (ten batches still, a shorter live case)."""


@contextlib.contextmanager
def _quiet_ray_data() -> Iterator[None]:
    """No Ray Data progress bars or INFO lines on the bench's console meanwhile."""
    from ray.data import DataContext

    context = DataContext.get_current()
    bars, context.enable_progress_bars = context.enable_progress_bars, False
    logger = logging.getLogger("ray.data")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
        context.enable_progress_bars = bars


def _orders(rows: int) -> pa.Table:
    ids = pa.array(range(rows), pa.int64())
    return pa.table({"id": ids, "customer": pc.bit_wise_and(ids, 1023), "amount": ids})


def filled_topic(rows: int, channels: int) -> Topic:
    """A new topic holding ``rows`` orders (3 columns), published as Arrow by Ray Data."""
    from raytopic.bridge.data import write_topic

    # Retained: each run reads the same rows through a group of its own.
    topic = create_topic(
        _name("streams"), channels=channels, capacity=rows // channels + 1, retain=True
    )
    summary = write_topic(ray.data.from_arrow(_orders(rows)), topic)
    if summary.rows != rows:
        topic.destroy()
        raise RuntimeError(f"{summary.rows} of {rows} rows published")
    return topic


def _parquet_rows(directory: str) -> int:
    files = Path(directory).rglob("*.parquet")
    return sum(pq.ParquetFile(path).metadata.num_rows for path in files)


def bounded_read(topic: Topic, rows: int) -> float:
    """Seconds of one ``read_topic(topic).write_parquet(...)`` of every row."""
    from raytopic.bridge.data import read_topic

    with tempfile.TemporaryDirectory(prefix="raytopic-bench-") as directory:
        started = time.perf_counter()
        read_topic(topic).write_parquet(directory)
        seconds = time.perf_counter() - started
        if _parquet_rows(directory) != rows:
            raise RuntimeError(f"read_topic wrote {_parquet_rows(directory)} of {rows} rows")
    return seconds


def stream_catch_up(topic: Topic, rows: int, batch_rows: int) -> float:
    """Seconds of a stream on a new group reading every row in batches of
    ``batch_rows``, each written with ``write_parquet`` under its batch id."""
    from raytopic.bridge.data import stream

    with tempfile.TemporaryDirectory(prefix="raytopic-bench-") as directory:
        started = time.perf_counter()
        for batch in stream(topic, group=_name("g"), max_rows_per_batch=batch_rows):
            batch.dataset.write_parquet(f"{directory}/batch={batch.batch_id}")
        seconds = time.perf_counter() - started
        if _parquet_rows(directory) != rows:
            raise RuntimeError(f"the stream wrote {_parquet_rows(directory)} of {rows} rows")
    return seconds


@ray.remote(num_cpus=0)
def _paced_publisher(topic: Topic, rate: float, seconds: float) -> int:
    """Publish ``rate`` rows a second for ``seconds`` s, each stamped as it goes."""
    total = int(rate * seconds)
    sent = 0
    with topic.publisher() as publisher:
        started = time.time()
        while sent < total:
            due = min(total, int((time.time() - started) * rate))
            if due > sent:
                now = time.time()
                publisher.publish_batch([{"id": i, "sent": now} for i in range(sent, due)])
                sent = due
            time.sleep(0.005)
    return sent


@ray.remote(num_cpus=0)
def _plain_consumer(topic: Topic, group: str, count: int) -> float:
    """A group member iterating ``iter_batches(1000)``: p50 seconds from publish to
    received, over ``count`` rows."""
    waits: list[float] = []
    with topic.subscriber(group=group) as member:
        for batch in member.iter_batches(1000):
            now = time.time()
            waits.extend(now - element.value["sent"] for element in batch)
            batch.commit()
            if len(waits) >= count:
                break
    return _percentile(waits, 50)


def live_latencies(rate: float, seconds: float, trigger: float) -> tuple[float, float, float]:
    """(stream p50, stream p99, plain consumer p50) seconds from publish to a row's
    batch in hand (received, for the plain consumer), on one fresh topic."""
    from raytopic.bridge.data import stream

    topic = create_topic(_name("live"), channels=2)
    try:
        count = int(rate * seconds)
        topic.create_group("plain")
        plain = _plain_consumer.remote(topic, "plain", count)
        waits: list[float] = []
        with stream(topic, group="stream", trigger=trigger) as batches:
            publisher = _paced_publisher.remote(topic, rate, seconds)
            for batch in batches:
                in_hand = time.time()
                sent = batch.dataset.select_columns(["sent"]).to_arrow_refs()
                for block in ray.get(sent):
                    waits.extend(in_hand - stamp for stamp in block.column("sent").to_pylist())
                if len(waits) >= count:
                    batches.stop()
        if ray.get(publisher) != count or len(waits) != count:
            raise RuntimeError(f"the stream saw {len(waits)} of {count} rows")
        return _percentile(waits, 50), _percentile(waits, 99), ray.get(plain)
    finally:
        topic.destroy()


def run_stream_benchmarks(
    settings: StreamSettings = StreamSettings(),
    *,
    repeat: int = 3,
    report: Callable[[Figure], None] = print,
) -> list[Figure]:
    """Run the catch-up and live cases; ``report`` hears each figure.

    Args:
        settings: The cases' counts.
        repeat: Runs per case (the median is reported).
        report: Called with each figure as it is measured.

    Raises:
        RuntimeError: a run wrote or saw other rows than were published.
    """
    rows, batch_rows, channels = settings.rows, settings.batch_rows, settings.channels
    rate, seconds, trigger = settings.rate, settings.seconds, settings.trigger
    figures: list[Figure] = []

    def add(figure: Figure) -> None:
        figures.append(figure)
        report(figure)

    with _quiet_ray_data():
        topic = filled_topic(rows, channels)
        try:
            bounded, streamed = [], []
            for _ in range(repeat):  # alternating: a noisy machine slows both alike
                bounded.append(bounded_read(topic, rows))
                streamed.append(stream_catch_up(topic, rows, batch_rows))
        finally:
            topic.destroy()
        baseline = rows / statistics.median(bounded)
        shape = f"{rows:,} rows x 3 columns, {channels} ch"
        add(Figure(f"read_topic -> write_parquet, {shape}", baseline, "rows/s"))
        add(
            Figure(
                f"stream catch-up: batches of {batch_rows:,} -> write_parquet each",
                rows / statistics.median(streamed),
                "rows/s",
                "read_topic",
                baseline,
                target=CATCH_UP_TARGET,
            )
        )
        runs = [live_latencies(rate, seconds, trigger) for _ in range(repeat)]
    p50, p99, plain = (statistics.median(run[i] for run in runs) for i in range(3))
    live = f"stream live: {rate:,.0f} rows/s, trigger={trigger:g} s: publish -> batch in hand"
    add(Figure("plain iter_batches(1000) member, same rows: publish -> received, p50", plain, "s"))
    add(
        Figure(
            f"{live}, p50",
            p50,
            "s",
            f"trigger + {LIVE_P50_SLACK:g} s",
            trigger + LIVE_P50_SLACK,
            target=LIVE_TARGET,
        )
    )
    add(
        Figure(
            f"{live}, p99",
            p99,
            "s",
            f"trigger + {LIVE_P99_SLACK:g} s",
            trigger + LIVE_P99_SLACK,
            target=LIVE_TARGET,
        )
    )
    return figures


# -- Spark (raytopic.tools.bench_spark runs it) -------------------------------------------------


def spark_stream_figures(
    spark: Any, topic: Topic, rows: int, *, batch_rows: int = 100_000, repeat: int = 3
) -> list[Figure]:
    """The catch-up through ``raytopic.spark.stream`` (each batch's DataFrame written
    with ``write.parquet``) against ``read_topic(spark, topic).write.parquet``, on
    ``topic`` holding ``rows`` rows; the median of ``repeat`` runs of each."""
    from raytopic.bridge.spark import read_topic, stream

    def bounded() -> float:
        with tempfile.TemporaryDirectory(prefix="raytopic-bench-") as directory:
            started = time.perf_counter()
            read_topic(spark, topic).write.parquet(f"{directory}/all")
            seconds = time.perf_counter() - started
            if _parquet_rows(directory) != rows:
                raise RuntimeError(f"read_topic wrote {_parquet_rows(directory)} of {rows} rows")
        return seconds

    def streamed() -> float:
        with tempfile.TemporaryDirectory(prefix="raytopic-bench-") as directory:
            started = time.perf_counter()
            for batch in stream(spark, topic, group=_name("g"), max_rows_per_batch=batch_rows):
                batch.dataframe.write.parquet(f"{directory}/batch={batch.batch_id}")
            seconds = time.perf_counter() - started
            if _parquet_rows(directory) != rows:
                raise RuntimeError(f"the stream wrote {_parquet_rows(directory)} of {rows} rows")
        return seconds

    times = [(bounded(), streamed()) for _ in range(repeat)]
    baseline = rows / statistics.median(run[0] for run in times)
    return [
        Figure(f"read_topic(spark) -> write.parquet, {rows:,} rows", baseline, "rows/s"),
        Figure(
            f"spark stream catch-up: batches of {batch_rows:,} -> write.parquet each",
            rows / statistics.median(run[1] for run in times),
            "rows/s",
            "read_topic(spark)",
            baseline,
            target=SPARK_CATCH_UP_TARGET,
        ),
    ]
