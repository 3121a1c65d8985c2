"""``raytopic bench``'s transactions case: a pipeline stage (group -> transform ->
topic) committing each batch's outputs and consumed positions as one transaction,
against the same stage publishing and committing without one, in the same run.

Case (each run on a fresh 1-channel source topic, pre-filled with a tenth of the
bench's messages (100,000; quick 10,000) as small dicts held for one group, and a
fresh 1-channel sink topic; the plain and transactional runs alternate):
    transactions  one group member in a task iterates ``iter_batches(100)``;
                  for each batch it publishes the transformed values (each
                  dict with its amount doubled) to the sink and commits the
                  batch's positions, in one transaction per batch
                  (``with txs.begin() as tx: tx.publish_batch(sink, values);
                  tx.commit_consumed(batch)``). The baseline does the same
                  without a transaction: ``publish_batch(values)`` on a
                  Publisher, waiting for its ObjectRef, then ``batch.commit()``.
                  Rates in msgs/s from the first batch received to the last
                  batch committed (the transactional one as a ratio to the
                  plain one); and each batch's p50 from its publish to its
                  commit's return. A run counts only if the sink holds every
                  source id exactly once and the group has nothing left.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import ray

import raytopic
from raytopic.client.topic import Topic, create_topic
from raytopic.core.records import CommitStatus
from raytopic.tools.bench_common import (
    Figure,
    _check_ids,
    _name,
    _percentile,
    at_least,
)
from raytopic.tools.bench_throughput import _publish_loop

__all__ = ["TRANSACTION_BATCH", "TRANSACTION_TARGET", "run_transaction_benchmarks"]

TRANSACTION_TARGET = at_least(0.5)
"""A transaction per batch of ``TRANSACTION_BATCH``, against publishing and committing
the batch without one: atomicity should not halve the stage's rate."""
TRANSACTION_BATCH = 100
"""Elements per batch, and so per transaction."""
SHARE = 10
"""The case moves ``messages // SHARE`` elements (a transaction per 100 is slower
than the throughput cases' batches of 1000)."""
LEAST = 1000
"""Elements the case moves at least."""
GROUP = "etl"


def _transform(value: dict[str, Any]) -> dict[str, Any]:
    return {**value, "amount": 2 * value["amount"]}


@ray.remote(num_cpus=0)
def _stage(source: Topic, sink: Topic, count: int, transactional: bool) -> tuple[float, float]:
    """Move ``count`` elements from the source's group to the sink, a batch at a time.

    Returns (seconds from the first batch received to the last committed, p50
    seconds of a batch from its publish to its commit's return).
    """
    txs = raytopic.transactions(_name("tx"), namespace=sink.namespace) if transactional else None
    publisher = None if transactional else sink.publisher()
    waits: list[float] = []
    seen, first = 0, 0.0
    member = source.subscriber(group=GROUP, timeout=10.0)
    try:
        for batch in member.iter_batches(TRANSACTION_BATCH):
            first = first or time.perf_counter()
            values = [_transform(element.value) for element in batch]
            start = time.perf_counter()
            if txs is not None:
                with txs.begin() as tx:
                    tx.publish_batch(sink, values)
                    tx.commit_consumed(batch)
            else:
                assert publisher is not None
                ray.get(publisher.publish_batch(values))
                results = batch.commit()
                if any(r.status is not CommitStatus.COMMITTED for r in results.values()):
                    raise RuntimeError("a commit of the plain stage did not commit")
            waits.append(time.perf_counter() - start)
            seen += len(batch)
            if seen >= count:
                break
        elapsed = time.perf_counter() - first
    finally:
        member.close()
        if txs is not None:
            txs.close()
        if publisher is not None:
            publisher.close()
    if seen != count:
        raise RuntimeError(f"the stage received {seen} of {count} elements")
    return elapsed, _percentile(waits, 50)


def _check_sink(what: str, source: Topic, sink: Topic, count: int) -> None:
    """The sink holds every id once (with its amount doubled); the group has no lag."""
    seen = id_sum = 0
    with sink.subscriber(start="earliest", complete_on_empty=True) as reader:
        for batch in reader.iter_batches(1000):
            for element in batch:
                value = element.value
                if value["amount"] != value["id"]:  # 2 * (id * 0.5)
                    raise RuntimeError(f"{what}: the sink holds an untransformed value")
                id_sum += value["id"]
                seen += 1
    if seen != count:
        raise RuntimeError(f"{what}: the sink holds {seen} of {count} values")
    _check_ids(what, count, id_sum)
    lag = source.describe().groups[GROUP].lag
    if lag:
        raise RuntimeError(f"{what}: the group has {lag} elements left uncommitted")


def stage_run(count: int, transactional: bool) -> tuple[float, float]:
    """(msgs/s, p50 seconds per batch) of one run of the stage on fresh topics."""
    what = "transactional stage" if transactional else "plain stage"
    source = create_topic(_name("txs"), channels=1, capacity=count, groups=[GROUP])
    try:
        sink = create_topic(_name("txk"), channels=1, capacity=count)
        try:
            ray.get(_publish_loop.remote(source, count))
            elapsed, p50 = ray.get(_stage.remote(source, sink, count, transactional))
            _check_sink(what, source, sink, count)
            return count / elapsed, p50
        finally:
            sink.destroy()
    finally:
        source.destroy()


def run_transaction_benchmarks(
    *, messages: int, repeat: int, report: Callable[[Figure], None]
) -> list[Figure]:
    """The stage without and with transactions, on ``max(LEAST, messages // SHARE)``
    elements; each the median of ``repeat`` runs.

    Args:
        messages: the bench's messages per throughput run.
        repeat: runs per figure (the median is reported).
        report: called with each figure as soon as it is measured.

    Returns:
        The figures, in the order reported.

    Raises:
        RuntimeError: a run lost, duplicated or left uncommitted an element.
    """
    count = max(LEAST, messages // SHARE)
    plain: list[tuple[float, float]] = []
    transacted: list[tuple[float, float]] = []
    for _ in range(repeat):  # interleaved: a noisy machine slows both alike
        plain.append(stage_run(count, False))
        transacted.append(stage_run(count, True))
    plain_rate, plain_p50 = _medians(plain)
    rate, p50 = _medians(transacted)
    label = "transactions: group -> x2 -> topic, 1 ch"
    batch = f"transactions: a batch of {TRANSACTION_BATCH}, publish -> commit"
    figures = [
        Figure(f"{label}, plain, {TRANSACTION_BATCH}/batch", plain_rate, "msgs/s"),
        Figure(
            f"{label}, a transaction per {TRANSACTION_BATCH}",
            rate,
            "msgs/s",
            "plain",
            plain_rate,
            target=TRANSACTION_TARGET,
        ),
        Figure(f"{batch}, plain, p50", plain_p50 * 1e3, "ms"),
        Figure(
            f"{batch}, transaction, p50",
            p50 * 1e3,
            "ms",
            "plain p50",
            plain_p50 * 1e3,
        ),
    ]
    for figure in figures:
        report(figure)
    return figures


def _medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    """The median rate and the median p50, each taken on its own."""
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
