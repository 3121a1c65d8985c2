"""``raytopic bench``: throughput, latency and memory, against baselines of the same run.

Machines here are shared and noisy, so every figure is reported next to the
baseline measured minutes apart in the same process: ``ray.util.queue.Queue``
in batch mode and Ray's floor (a plain actor, see the cases) for throughput,
and Queue's put -> a waiting get for latency. Each throughput case (and the
latency case) runs ``repeat`` times and reports the median.
Every consumer reads each element's ``value``, so the figures include
decoding, as a real consumer pays it.

Cases (``run_benchmarks`` runs them all; the module named beside a case holds
it, this one the rest):
    throughput  1,000,000 small dicts: a publisher task calling ``publish()``
                in a loop -> a consumer task iterating a subscriber, on 8
                channels and on 1 (and the 8-channel figure as a ratio to the
                1-channel one: more channels should cost little; the 1-channel
                one also as a ratio to the floor). Queue: a producer task
                ``put_nowait_batch(1000)`` -> a consumer task
                ``get_nowait_batch(1000)`` (``raytopic.tools.bench_throughput``).
    ray floor   the least Ray does to move the batch API's batches: lists of
                1000 through one plain actor holding a deque, a producer task
                putting them pipelined (a few calls in flight) -> a consumer
                task taking them one call at a time
                (``raytopic.tools.bench_throughput``).
    batch API   the same messages on 1 channel: a producer task calling
                ``publish_batch()`` with lists of 1000 (a few calls in flight)
                -> a consumer task calling ``receive_batch(1000)`` (against
                Queue), and -> a consumer task iterating ``iter_batches(1000)``
                (against the floor), the latter on 8 channels as well
                (``raytopic.tools.bench_throughput``).
    scale       K producers -> a topic of K channels -> a group of K members
                (one channel each, iterating ``iter_batches(1000)``), with
                ``publish()`` and with ``publish_batch(1000)``, at K = 1 and
                K = 8, against K Queues and K floor pairs side by side; one
                publisher's ``publish_batch(1000)`` over K channels (8 calls in
                flight, acknowledgements only); each K = 8 figure as a ratio to
                K = 1, and the CPU of each (``raytopic.tools.bench_scale``;
                ``raytopic bench --scale`` runs it alone).
    cpu         for each throughput case (and the store's and the scale
                case's), CPU microseconds per message in the producer's
                process, the actors' (channels, Queue's actor, the floor's
                actor) and the consumer's, and their total, each against the
                floor's figure of the same role
                (measured by ``raytopic.tools.bench_cpu``, made figures by
                ``raytopic.tools.bench_throughput``).
    latency     one value in flight: publish -> a receive already waiting (a
                member of a group owning every channel), on 1 channel and on 8;
                Queue: put -> a get already waiting; in interleaved rounds, the
                median of ``repeat`` runs (``raytopic.tools.bench_latency``;
                ``raytopic bench --latency`` runs it alone).
    memory      RSS of one channel actor holding 1,000,000 small elements (here).
    group       two members of one group, a commit per received batch; and
                the time from a member's close to the full reassignment
                (``raytopic.tools.bench_groups``).
    shared      four members of a shared group against two of a channel-owned
                group on 2 channels, with no work and with a 10 ms task per
                element (``raytopic.tools.bench_shared``).
    transactions
                a group member -> transform -> a topic on 1 channel, one
                transaction per batch of 100 (its outputs and its consumed
                positions) on a tenth of the messages, against the same stage
                publishing and committing without one
                (``raytopic.tools.bench_transactions``).
    store       the throughput case on a topic with the embedded store, with
                ``sync="always"`` and ``sync="write"``, as a ratio to the
                in-memory topic of the same run (``raytopic.tools.bench_throughput``);
                the time a channel holding 1,000,000 elements on disk takes
                from SIGKILL to serving again (here); and a durable commit's
                p50 on a channel that has seen 3,000 publishers against one
                that has seen 1 (``raytopic.tools.bench_commit``).
    streams     a stream's catch-up over 1,000,000 rows in batches of 100,000, each
                written with ``write_parquet``, against one bounded ``read_topic``
                of the same rows written alike; publish -> batch in hand at 5,000
                rows/s with ``trigger=1.0``, beside a plain ``iter_batches`` member
                (``raytopic.tools.bench_streams``; ``raytopic bench --streams``
                runs it alone).
    autoscale   idle -> a burst of 6,000 elements of 10 ms work -> idle, consumed by
                ``Topic.autoscale`` from 0 (max 8) against fixed pools of 8 and
                1; and Serve's ``@task_consumer`` on ``TopicTaskAdapter`` against
                Celery on redis (``raytopic.tools.bench_autoscale``;
                ``raytopic bench --autoscale`` runs it alone).
    tables      a new ``table()`` view on a compacted topic against one of the same
                updates not compacted, ``publish()`` while the compactor runs, the
                store once compacted, and publish -> a view's listener against a
                waiting receive (``raytopic.tools.bench_tables``; ``raytopic bench
                --compaction`` runs it alone).
    idle        CPU of idle channels and coordinators (3 topics, one member
                each, 20 s) and the time to create a topic, against bare Ray
                actors (``raytopic.tools.bench_idle``).

``Figure`` and ``Target`` live in ``raytopic.tools.bench_common``, which every case
module builds on; they are importable from here as well.

A figure with a ``Target`` (a bound on its ratio, kept beside its case) is
reported as met or short, and ``format_verdict`` sums a run up in one line.

``QUICK`` holds smaller counts for a quicker check (``raytopic bench --quick``).
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

import ray

from raytopic.client.topic import create_topic
from raytopic.tools.bench_autoscale import AutoscaleSettings, run_autoscale_benchmarks
from raytopic.tools.bench_commit import run_commit_benchmarks
from raytopic.tools.bench_common import (
    BATCH,
    Figure,
    Target,
    _median,
    _message,
    _name,
    at_least,
    at_most,
)
from raytopic.tools.bench_cpu import Throughput, median_throughput
from raytopic.tools.bench_groups import GROUP_TARGET, group_throughput, reassignment_time
from raytopic.tools.bench_idle import QUIET, run_idle_benchmarks
from raytopic.tools.bench_latency import run_latency_benchmarks
from raytopic.tools.bench_scale import run_scale_benchmarks
from raytopic.tools.bench_shared import run_shared_benchmarks
from raytopic.tools.bench_streams import StreamSettings, run_stream_benchmarks
from raytopic.tools.bench_tables import TableSettings, run_table_benchmarks
from raytopic.tools.bench_throughput import (
    FLOOR_ONE_CHANNEL_TARGET,
    FLOOR_ROLES,
    ITER_BATCHES_TARGET,
    ONE_CHANNEL_CPU_TARGET,
    ONE_CHANNEL_TARGET,
    SCALING_TARGET,
    _publish_batches,
    batch_throughput,
    cpu_figures,
    floor_throughput,
    iter_batches_throughput,
    queue_throughput,
    topic_throughput,
)
from raytopic.tools.bench_transactions import run_transaction_benchmarks
from raytopic.tools.quiet_kills import worker_death_reports_off

__all__ = [
    "DEFAULT",
    "QUICK",
    "BenchSettings",
    "Figure",
    "Target",
    "at_least",
    "at_most",
    "format_verdict",
    "run_benchmarks",
]


@dataclass(frozen=True, slots=True)
class BenchSettings:
    """How much each case measures."""

    messages: int = 1_000_000
    """Messages per throughput and group run."""
    channels: int = 8
    """Channels of the multi-channel cases (the 1-channel cases run as well)."""
    latency_samples: int = 300
    """Values each side of the latency case times per run (after 10 for warming up)."""
    repeat: int = 3
    """Runs per throughput case; the median is reported."""
    memory_elements: int = 1_000_000
    """Elements the memory case fills one channel with (0 skips the case)."""
    restart_elements: int = 1_000_000
    """Elements on disk in the restart case (0 skips the store cases)."""
    idle_topics: int = 3
    """Topics of the idle case, each next to ``channels + 1`` bare actors; also
    the creations timed (the median is reported). 0 skips the case."""
    idle_seconds: float = 20.0
    """Seconds the idle case measures CPU over."""


DEFAULT = BenchSettings()
"""The counts behind the benchmark tables of docs/benchmarks.md."""
QUICK = BenchSettings(
    messages=100_000,
    latency_samples=50,
    repeat=1,
    memory_elements=100_000,
    restart_elements=100_000,
    idle_topics=1,
    idle_seconds=5.0,
)
"""The same cases with smaller counts, for a quicker check."""


# -- memory ------------------------------------------------------------------------


def channel_memory(count: int) -> tuple[float, float]:
    """(RSS before, RSS after) in bytes of one channel actor filled with ``count`` elements."""
    import psutil

    topic = create_topic(_name("mem"), channels=1, capacity=count)
    try:
        process = psutil.Process(topic.describe().channels[0].pid)
        before = process.memory_info().rss
        with topic.publisher(batch_size=5000) as publisher:
            for index in range(count):
                publisher.publish(_message(index))
        after = process.memory_info().rss
        return float(before), float(after)
    finally:
        topic.destroy()


# -- store -------------------------------------------------------------------------

STORE_TARGET = at_least(0.5)
"""The throughput case on a topic with the embedded store, against the in-memory
topic: durability should not halve the rate."""


def restart_time(count: int) -> float:
    """Seconds from SIGKILL of a channel holding ``count`` elements on disk to its
    answering again (the elements reloaded, under a new epoch)."""
    with tempfile.TemporaryDirectory(prefix="raytopic-bench-") as directory:
        topic = create_topic(_name("rst"), channels=1, capacity=count, store=directory)
        try:
            ray.get(_publish_batches.remote(topic, count))
            before = topic.describe().channels[0]
            ring = topic.ringbuffer(0)
            # Ray's report of the killed worker would read as a crash of the bench.
            with worker_death_reports_off():
                start = time.perf_counter()
                os.kill(before.pid, signal.SIGKILL)
                while True:
                    size = ring.size()  # waits while the channel restarts (retried by Ray)
                    stats = topic.describe().channels[0]
                    if stats.epoch > before.epoch and stats.state == "serving":
                        break
                    time.sleep(0.01)
                elapsed = time.perf_counter() - start
            if size != count:
                raise RuntimeError(f"restarted with {size} of {count} elements")
            return elapsed
        finally:
            topic.destroy()


# -- the run -----------------------------------------------------------------------


def run_benchmarks(
    *,
    messages: int = DEFAULT.messages,
    channels: int = DEFAULT.channels,
    latency_samples: int = DEFAULT.latency_samples,
    repeat: int = DEFAULT.repeat,
    memory_elements: int = DEFAULT.memory_elements,
    restart_elements: int = DEFAULT.restart_elements,
    idle_topics: int = DEFAULT.idle_topics,
    idle_seconds: float = DEFAULT.idle_seconds,
    commit_publishers: int | None = None,
    shared_task_elements: int | None = None,
    idle_quiet: float = QUIET,
    scale: bool = True,
    streams: StreamSettings | None = StreamSettings(),  # noqa: B008 (frozen)
    autoscale: AutoscaleSettings | None = AutoscaleSettings(),  # noqa: B008 (frozen)
    tables: TableSettings | None = TableSettings(),  # noqa: B008 (frozen)
    report: Callable[[Figure], None] = lambda figure: None,
) -> list[Figure]:
    """Run every case; ``report`` hears of each figure as it is measured.

    Args:
        messages: messages per throughput and group run.
        channels: channels of the multi-channel cases.
        latency_samples: values each side of the latency case times per run
            (``repeat`` runs, the median reported).
        repeat: runs per throughput case (the median is reported).
        memory_elements: elements for the memory case; 0 skips it.
        restart_elements: elements on disk in the restart case; 0 skips the
            store cases. The commit case measures ``latency_samples`` commits.
        idle_topics: topics of the idle case (and creations timed); 0 skips it.
        idle_seconds: seconds the idle case measures CPU over.
        commit_publishers: publishers seen by the commit case's second channel
            (None: the case's own count, 3,000).
        shared_task_elements: elements of the shared group's 10 ms task case
            (None: the case's own count, from ``messages``).
        idle_quiet: seconds the idle case lets its members quiet down before its
            window (at most ``idle_seconds``).
        scale: whether to run the scale case (``raytopic.tools.bench_scale``).
        streams: the counts of the streams case (``raytopic.tools.bench_streams``);
            None skips it.
        autoscale: the counts of the autoscale and Serve cases
            (``raytopic.tools.bench_autoscale``); None skips them.
        tables: the counts of the table view and compaction cases
            (``raytopic.tools.bench_tables``); None skips them.
        report: called with each figure as soon as it is measured.

    Returns:
        Every figure, in the order measured.

    Raises:
        RuntimeError: a case received other messages than were published.
    """
    figures: list[Figure] = []

    def add(figure: Figure) -> None:
        figures.append(figure)
        report(figure)

    def add_all(more: Iterable[Figure]) -> None:
        for figure in more:
            add(figure)

    queue = median_throughput(repeat, lambda: queue_throughput(messages))
    queue_rate = queue.rate
    add(Figure(f"queue: batch put/get ({BATCH}), task -> task", queue_rate, "msgs/s"))
    floor = median_throughput(repeat, lambda: floor_throughput(messages))
    add(
        Figure(
            f"ray floor: one plain actor, put pipelined / take sequential ({BATCH})",
            floor.rate,
            "msgs/s",
            "queue batch",
            queue_rate,
        )
    )
    add_all(cpu_figures("ray floor", floor, None, FLOOR_ROLES))
    add_all(cpu_figures("queue batch", queue, floor, FLOOR_ROLES))
    runs: dict[int, Throughput] = {}
    for count in sorted({channels, 1}, reverse=True):
        runs[count] = median_throughput(repeat, partial(topic_throughput, messages, count))
        add(
            Figure(
                f"topic: publish() -> iterate, {count} channel(s)",
                runs[count].rate,
                "msgs/s",
                "queue batch",
                queue_rate,
                target=ONE_CHANNEL_TARGET if count == 1 else None,
            )
        )
        add_all(
            cpu_figures(
                f"publish() -> iterate, {count} ch",
                runs[count],
                floor,
                total_target=ONE_CHANNEL_CPU_TARGET if count == 1 else None,
            )
        )
    rates = {count: run.rate for count, run in runs.items()}
    add(
        Figure(
            "topic: publish() -> iterate, 1 channel / ray floor",
            rates[1],
            "msgs/s",
            "ray floor",
            floor.rate,
            target=FLOOR_ONE_CHANNEL_TARGET,
        )
    )
    if channels != 1:
        # Channels exist to scale out; on one machine they should at least
        # cost little against a single channel measured minutes apart.
        add(
            Figure(
                f"topic: {channels} channels / 1 channel, publish() -> iterate",
                rates[channels],
                "msgs/s",
                "1 channel",
                rates[1],
                target=SCALING_TARGET,
            )
        )
    batch = median_throughput(repeat, lambda: batch_throughput(messages))
    add(
        Figure(
            f"topic: publish_batch -> receive_batch({BATCH}), 1 channel",
            batch.rate,
            "msgs/s",
            "queue batch",
            queue_rate,
        )
    )
    add_all(cpu_figures(f"publish_batch -> receive_batch({BATCH}), 1 ch", batch, floor))
    for count in sorted({1, channels}):
        iterated = median_throughput(repeat, partial(iter_batches_throughput, messages, count))
        add(
            Figure(
                f"topic: publish_batch -> iter_batches({BATCH}), "
                + ("1 channel" if count == 1 else f"{count} channels"),
                iterated.rate,
                "msgs/s",
                "ray floor",
                floor.rate,
                target=ITER_BATCHES_TARGET,
            )
        )
        add_all(cpu_figures(f"publish_batch -> iter_batches({BATCH}), {count} ch", iterated, floor))
    if scale:
        figures += run_scale_benchmarks(
            messages=messages, channels=channels, repeat=repeat, report=report
        )

    figures += run_latency_benchmarks(
        samples=latency_samples, channels=channels, repeat=repeat, report=report
    )

    if memory_elements:
        before, after = channel_memory(memory_elements)
        add(Figure(f"channel RSS holding {memory_elements:,} elements", after / 2**20, "MiB"))
        add(Figure("channel RSS before publishing", before / 2**20, "MiB"))

    group_rate = _median(repeat, lambda: group_throughput(messages, channels))
    add(
        Figure(
            f"group: 2 members, commit per batch, {channels} channels",
            group_rate,
            "msgs/s",
            "queue batch",
            queue_rate,
            target=GROUP_TARGET,
        )
    )
    add(Figure("group: close -> full reassignment", reassignment_time(channels) * 1e3, "ms"))

    figures += run_shared_benchmarks(
        messages=messages, repeat=repeat, report=report, task_elements=shared_task_elements
    )
    figures += run_transaction_benchmarks(messages=messages, repeat=repeat, report=report)

    if restart_elements:
        for sync in ("always", "write"):
            stored = median_throughput(repeat, partial(topic_throughput, messages, channels, sync))
            add(
                Figure(
                    f'store sync="{sync}": publish() -> iterate, {channels} channel(s)',
                    stored.rate,
                    "msgs/s",
                    "in memory",
                    rates[channels],
                    target=STORE_TARGET,
                )
            )
            add_all(cpu_figures(f'store sync="{sync}", {channels} ch', stored, floor))
        seconds = restart_time(restart_elements)
        add(Figure(f"store: restart serving {restart_elements:,} elements", seconds, "s"))

        publishers = {} if commit_publishers is None else {"publishers": commit_publishers}
        figures += run_commit_benchmarks(commits=latency_samples, report=report, **publishers)

    if streams is not None:
        figures += run_stream_benchmarks(streams, repeat=repeat, report=report)

    if autoscale is not None:
        figures += run_autoscale_benchmarks(autoscale, report=report)

    if tables is not None:
        figures += run_table_benchmarks(tables, repeat=repeat, report=report)

    if idle_topics:
        figures += run_idle_benchmarks(
            topics=idle_topics,
            channels=channels,
            seconds=idle_seconds,
            report=report,
            quiet=idle_quiet,
        )
    return figures


CASE_WIDTH = 66


def format_header() -> str:
    """The header line of the report table."""
    return f"{'case':<{CASE_WIDTH}} {'value':>12} {'unit':<7} ratio to baseline (same run)"


def format_figure(figure: Figure) -> str:
    """One line of the report table; a target is shown with its verdict, met or short."""
    ratio = ""
    if figure.ratio is not None:
        ratio = f"{figure.ratio:6.{_ratio_digits(figure)}f}x {figure.baseline}"
    elif figure.baseline is not None:  # a baseline measured as 0: no ratio to take
        ratio = f"{'n/a':>6} x {figure.baseline} (it measured 0)"
    if figure.target is not None:
        ratio += f"  (target {figure.target}: {'met' if figure.met else 'short'})"
    return f"{figure.case:<{CASE_WIDTH}} {figure.value:>12,.2f} {figure.unit:<7} {ratio}".rstrip()


def _ratio_digits(figure: Figure) -> int:
    """Decimals that print a ratio as its verdict reads it: 2, more next to the bound
    (0.7996 is "0.7996x", short of >= 0.8x, not "0.80x")."""
    digits = 2
    target, ratio = figure.target, figure.ratio
    if target is not None and ratio is not None:
        while digits < 6 and target.met(round(ratio, digits)) != target.met(ratio):
            digits += 1
    return digits


def format_verdict(figures: Iterable[Figure]) -> str:
    """The run in one line: how many targets were met, and the cases that fell short."""
    judged = [figure for figure in figures if figure.target is not None]
    short = [figure.case for figure in judged if not figure.met]
    verdict = f"verdict: {len(judged) - len(short)} of {len(judged)} targets met"
    return verdict + (f"; short: {'; '.join(short)}" if short else "")


def local_ray(num_cpus: int | None = None) -> None:
    """Start an embedded Ray on loopback if none is running (for bench and demo),
    without the lines Ray prints as it starts one: "Started a local Ray instance"
    and that token authentication is on by default, which a tool's first run shows
    above its own first line. Ray's warnings afterwards are printed as ever."""
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray.init(
        # "local": always a new embedded Ray; without it ray.init() would join
        # any cluster a `ray start` left running on this machine.
        address="local",
        num_cpus=num_cpus or os.cpu_count() or 2,
        include_dashboard=False,
        log_to_driver=False,
        namespace="raytopic-bench",
        logging_level=logging.ERROR,  # the "ray" logger, while it starts
    )
    logging.getLogger("ray").setLevel(logging.WARNING)
