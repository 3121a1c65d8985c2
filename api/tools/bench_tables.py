"""``raytopic bench --compaction``: compacted topics and table views, each against a
baseline measured in the same run (see ``raytopic.tools.bench`` for the report format).

The updates are ``keys`` keys x ``versions`` versions of a small dict, version after
version (every key's versions spread over the whole log).

Cases:
    bootstrap   ``topic.table()`` until it returns (whole), on a topic holding the
                updates, not compacted (the baseline; also as elements read per
                second), and on a compacted topic after its compaction (target <=
                0.1x); the median of ``repeat`` views each.
    publish     ``publish()`` of the updates (a task, one key per value) into a
                compacted topic with a store while its compactor runs (``max_lag_s``
                of a second), against the same into a plain topic with a store
                (target >= 0.8x); the medians of ``repeat`` runs each, in turns.
    store       the compacted topic's bytes on disk once compacted, against the
                pickled bytes of its live values (target <= 1.5x).
    listener    one value in flight, on 1 channel: publish -> a table view's
                listener called (it notes the time), p50, against publish -> an
                anonymous ``receive()`` already waiting returning (target <= 1.2x);
                in interleaved rounds as the latency case
                (``raytopic.tools.bench_latency``), the median of ``repeat`` runs.

A compacted topic that has not compacted within ``compacted_within`` seconds is said
to be not measured, on a line of its own, instead of its figures.
"""

from __future__ import annotations

import pickle
import queue
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from raytopic.client.topic import Topic, create_topic
from raytopic.core.compaction import Compaction
from raytopic.tools.bench_common import Figure, _message, _name, _percentile, at_least, at_most
from raytopic.tools.bench_latency import (
    PAUSE,
    RECEIVE_TIMEOUT,
    WARMUP,
    _Waiter,
    interleaved_rounds,
)
from raytopic.tools.bench_throughput import _pipelined

__all__ = [
    "BOOTSTRAP_TARGET",
    "LISTENER_TARGET",
    "PUBLISH_TARGET",
    "QUICK_TABLES",
    "STORE_TARGET",
    "TableSettings",
    "run_table_benchmarks",
]

BOOTSTRAP_TARGET = at_most(0.1)
"""A new view of the compacted topic against one of the same updates not compacted."""
PUBLISH_TARGET = at_least(0.8)
"""``publish()`` while the compactor runs against a plain stored topic."""
STORE_TARGET = at_most(1.5)
"""Bytes on disk after compaction against the pickled bytes of the live values."""
LISTENER_TARGET = at_most(1.2)
"""publish -> a view's listener against publish -> a waiting anonymous receive, p50."""

COMPACTED_WITHIN = 60.0
"""Seconds a compacted topic (``max_lag_s`` of 1 s) may take to compact before its
cases are not measured."""


@dataclass(frozen=True, slots=True)
class TableSettings:
    """The counts of the cases (``QUICK_TABLES`` for ``--quick``)."""

    keys: int = 10_000
    """Keys of the updates."""
    versions: int = 50
    """Versions of each key."""
    channels: int = 8
    """Channels of the bootstrap, publish and store cases' topics."""
    latency_samples: int = 300
    """Values each side of the listener case times per run."""


QUICK_TABLES = TableSettings(keys=1_000, versions=20, latency_samples=50)
"""The same cases with smaller counts."""


def _value(index: int, keys: int) -> tuple[dict[str, Any], str]:
    """The ``index``-th update and its key (version ``index // keys`` of key
    ``index % keys``)."""
    return _message(index), f"key-{index % keys}"


def _updates(count: int, keys: int, batch: int = 1000) -> Iterator[tuple[list[Any], list[str]]]:
    for start in range(0, count, batch):
        pairs = [_value(index, keys) for index in range(start, min(count, start + batch))]
        yield [value for value, _ in pairs], [key for _, key in pairs]


@ray.remote(num_cpus=0)
def _fill(topic: Topic, keys: int, versions: int) -> None:
    """Publish the updates with ``publish_batch`` (the cases time what comes after)."""
    with topic.publisher() as publisher:
        _pipelined(
            publisher.publish_batch(values, keys=names)
            for values, names in _updates(keys * versions, keys)
        )


@ray.remote(num_cpus=0)
def _publish_each(topic: Topic, keys: int, versions: int) -> float:
    """``publish()`` the updates one by one, each with its key; the seconds taken."""
    started = time.perf_counter()
    with topic.publisher(max_in_flight=4) as publisher:
        for index in range(keys * versions):
            value, key = _value(index, keys)
            publisher.publish(value, key=key)
    return time.perf_counter() - started


COMPACTION = Compaction(min_lag_s=0.0, max_lag_s=1.0)
"""The compacted topics' settings: everything is compacted within a second."""


def _compacted(topic: Topic, within: float) -> bool:
    """Wait until every channel of ``topic`` ran a compaction pass over everything it
    holds (its compaction point past its tail); False if that took longer than
    ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        channels = topic.describe().channels
        if all(c.compaction is not None and c.compaction["point"] > c.tail for c in channels):
            return True
        time.sleep(0.2)
    return False


def _bootstrap_seconds(topic: Topic, repeat: int) -> float:
    """The median time of ``repeat`` new views of ``topic`` until each is whole."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        view = topic.table()
        times.append(time.perf_counter() - started)
        view.close()
    return statistics.median(times)


def _store_bytes(directory: str) -> int:
    return sum(path.stat().st_size for path in Path(directory).rglob("*") if path.is_file())


def _live_bytes(keys: int, versions: int) -> int:
    """Pickled bytes of every key's latest value."""
    first = keys * (versions - 1)
    return sum(len(pickle.dumps(_value(i, keys)[0], 5)) for i in range(first, first + keys))


# -- the listener case -----------------------------------------------------------------------


class _ReceiveSide:
    """publish() -> a thread blocked in ray.get(receive()) of an anonymous subscriber."""

    label = "receive"

    def __init__(self) -> None:
        self.topic = create_topic(_name("tbl-rcv"), channels=1, compaction=COMPACTION)
        self._subscriber = self.topic.subscriber()
        self._publisher = self.topic.publisher()
        self._waiter = _Waiter("bench-table-receive", self._receive)
        self._sent = 0

    def _receive(self) -> Any:
        element = ray.get(self._subscriber.receive())
        return None if element is None else element.value

    def time_one(self) -> float:
        self._sent += 1
        value, key = _value(self._sent, 100)
        return self._waiter.time_to_return(lambda: self._publisher.publish(value, key=key))

    def close(self) -> None:
        try:
            self._subscriber.close()  # completes the waiting receive with None
            self._waiter.join()
            self._publisher.close()
        finally:
            self.topic.destroy()


class _ListenerSide:
    """publish() -> a table view's listener, which notes the time it is called (on the
    view's thread) and hands it to the driver."""

    label = "listener"

    def __init__(self) -> None:
        self.topic = create_topic(_name("tbl-lsn"), channels=1, compaction=COMPACTION)
        self._called: queue.SimpleQueue[float] = queue.SimpleQueue()
        self._view = self.topic.table()
        self._view.listen(lambda key, value: self._called.put(time.perf_counter()))
        self._publisher = self.topic.publisher()
        self._sent = 0

    def time_one(self) -> float:
        self._sent += 1
        value, key = _value(self._sent, 100)
        time.sleep(PAUSE)
        start = time.perf_counter()
        self._publisher.publish(value, key=key)
        return self._called.get(timeout=RECEIVE_TIMEOUT) - start

    def close(self) -> None:
        try:
            self._view.close()
            self._publisher.close()
        finally:
            self.topic.destroy()


def listener_runs(samples: int, repeat: int) -> list[dict[str, float]]:
    """``repeat`` runs, each each side's p50 (seconds) over ``samples`` values timed in
    interleaved rounds."""
    sides: list[Any] = []
    try:
        sides = [_ReceiveSide(), _ListenerSide()]
        for side in sides:
            for _ in range(WARMUP):
                side.time_one()
        runs = []
        for _ in range(repeat):
            waits: list[list[float]] = [[] for _ in sides]
            for index, values in interleaved_rounds(len(sides), samples):
                waits[index] += [sides[index].time_one() for _ in range(values)]
            runs.append(
                {
                    side.label: _percentile(taken, 50)
                    for side, taken in zip(sides, waits, strict=True)
                }
            )
        return runs
    finally:
        for side in sides:
            side.close()


# -- the run ---------------------------------------------------------------------------------


def run_table_benchmarks(
    settings: TableSettings,
    *,
    repeat: int,
    report: Callable[[Figure], None] = lambda figure: None,
    compacted_within: float = COMPACTED_WITHIN,
) -> list[Figure]:
    """The table views' and compacted topics' figures (see the module's docstring).

    Args:
        settings: The counts.
        repeat: Views timed per bootstrap figure, runs of the publish case (plain
            and compacted in turns) and of the listener case (the median is reported).
        report: Called with each figure as soon as it is measured.
        compacted_within: Seconds a compacted topic may take to compact.

    Raises:
        RuntimeError: a view did not hold the updates' latest values.
    """
    figures: list[Figure] = []

    def add(figure: Figure) -> None:
        figures.append(figure)
        report(figure)

    keys, versions, channels = settings.keys, settings.versions, settings.channels
    updates = keys * versions
    what = f"{keys:,} keys x {versions} versions"

    plain = create_topic(_name("tbl"), channels=channels, capacity=updates, retain=True)
    try:
        ray.get(_fill.remote(plain, keys, versions))
        with plain.table() as view:
            _check_latest(view, keys, versions)
        baseline = _bootstrap_seconds(plain, repeat)
    finally:
        plain.destroy()
    add(Figure(f"table(): {what}, not compacted", baseline * 1e3, "ms"))
    add(Figure("table(): bootstrap read rate, not compacted", updates / baseline, "msgs/s"))

    _compaction_figures(settings, repeat, baseline, compacted_within, add)

    runs = listener_runs(settings.latency_samples, repeat)
    receive = statistics.median(run["receive"] for run in runs) * 1e3
    listener = statistics.median(run["listener"] for run in runs) * 1e3
    add(Figure("table: publish -> waiting anonymous receive, 1 ch, p50", receive, "ms"))
    add(
        Figure(
            "table: publish -> view listener, 1 ch, p50",
            listener,
            "ms",
            "receive p50",
            receive,
            target=LISTENER_TARGET,
        )
    )
    return figures


def _compaction_figures(
    settings: TableSettings,
    repeat: int,
    baseline: float,
    within: float,
    add: Callable[[Figure], None],
) -> None:
    """The cases on compacted topics: publishing while the compactor runs, the store
    once compacted, and a new view of it."""
    keys, versions, channels = settings.keys, settings.versions, settings.channels
    what = f"{keys:,} keys x {versions} versions"
    rates: dict[str, list[float]] = {"plain": [], "compacted": []}
    with tempfile.TemporaryDirectory(prefix="raytopic-bench-") as directory:
        # Plain and compacted in turns, ``repeat`` times each (a machine's load moves
        # both alike); the last compacted topic is the one compacted and measured.
        for run in range(repeat):
            for kind, compaction in (("plain", None), ("compacted", COMPACTION)):
                store = f"{directory}/{kind}-{run}"
                topic = create_topic(
                    _name(f"tbl-{kind}"),
                    channels=channels,
                    capacity=keys * versions,
                    retain=True,
                    store=store,
                    compaction=compaction,
                )
                try:
                    seconds = ray.get(_publish_each.remote(topic, keys, versions))
                    rates[kind].append(keys * versions / seconds)
                    if kind == "plain" or run < repeat - 1:
                        continue
                    if not _compacted(topic, within):
                        add(
                            Figure(
                                f"compaction: not measured (not compacted within {within:g} s)",
                                0,
                                "",
                            )
                        )
                        return
                    with topic.table() as view:
                        _check_latest(view, keys, versions)
                    compacted = _bootstrap_seconds(topic, repeat)
                    stored = _store_bytes(store)
                finally:
                    topic.destroy()
    plain = statistics.median(rates["plain"])
    add(Figure(f"publish() into a stored topic, {what}", plain, "msgs/s"))
    add(
        Figure(
            "publish() while the compactor runs",
            statistics.median(rates["compacted"]),
            "msgs/s",
            "plain stored",
            plain,
            target=PUBLISH_TARGET,
        )
    )
    add(
        Figure(
            f"table(): {what}, compacted",
            compacted * 1e3,
            "ms",
            "not compacted",
            baseline * 1e3,
            target=BOOTSTRAP_TARGET,
        )
    )
    live = _live_bytes(keys, versions)
    add(Figure("compaction: pickled bytes of the live values", live / 2**20, "MiB"))
    add(
        Figure(
            "compaction: store bytes once compacted",
            stored / 2**20,
            "MiB",
            "live values",
            live / 2**20,
            target=STORE_TARGET,
        )
    )


def _check_latest(view: Any, keys: int, versions: int) -> None:
    """A figure is only worth printing if the view held what was published."""
    first = keys * (versions - 1)
    for index in (first, first + keys // 2, first + keys - 1):
        value, key = _value(index, keys)
        if view.get(key) != value:
            raise RuntimeError(f"table view: {key} is {view.get(key)!r}, not {value!r}")
    if len(view) != keys:
        raise RuntimeError(f"table view: {len(view)} keys, not {keys}")
