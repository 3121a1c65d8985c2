"""``raytopic demo``: the main job, end to end on an embedded local Ray, with a verdict.

1. Spark (on Ray, through RayDP) makes an orders DataFrame (order id,
   customer, amount, time) and publishes it by customer into a topic with
   the embedded store, as Arrow, from its own tasks. Spark then stops: the
   topic holds the rows.
2. A group of three consumer actors totals the amounts per customer,
   storing each result with the positions it covers and committing per batch.
3. Midway one consumer is killed (the group gives its channels to the
   others) and one channel actor is killed (it comes back from its store).
4. The consumers' totals are checked against Spark's own ``groupBy``; the
   demo prints the verdict, throughput, rows per channel and the elements
   lost (0), and fails (exit 1) if anything differs.

``--no-spark`` publishes the same kind of orders from a Python Publisher.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import ray

from raytopic.client.topic import Topic, create_topic
from raytopic.core.records import PublishSummary
from raytopic.tools.demo_actors import Consumer, Ledger
from raytopic.tools.quiet_kills import worker_death_reports_off

__all__ = ["run_demo"]

CUSTOMERS = 1000
CHANNELS = 4
MEMBERS = 3
GROUP = "billing"
_FINISH_TIMEOUT = 300.0
"""Seconds the consumers may take to count everything before the demo fails."""
_RECOVERY_TIMEOUT = 60.0
"""Seconds a killed channel or consumer's channels may take to be served again."""


def run_demo(
    rows: int = 1_000_000, *, spark: bool = True, say: Callable[[str], None] = print
) -> bool:
    """Run the demo; return True when every order was counted once and the totals
    per customer match the publisher's own."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    started = time.perf_counter()
    store = tempfile.mkdtemp(prefix="raytopic-demo-")
    name = f"demo-orders-{uuid.uuid4().hex[:6]}"
    topic = create_topic(name, channels=CHANNELS, store=store, groups=[GROUP])
    say(f"topic {name!r}: {CHANNELS} channels, stored under {store}, group {GROUP!r}")
    # Handles typed Any: Ray types an actor's methods as the plain functions.
    ledger: Any = ray.remote(Ledger).options(num_cpus=0).remote()
    consumer = ray.remote(Consumer).options(num_cpus=0, max_concurrency=2)
    members: list[Any] = [consumer.remote(topic, GROUP, ledger) for _ in range(MEMBERS)]
    try:
        ray.get([member.channels.remote() for member in members])  # all have joined
        runs = [member.run.remote() for member in members]
        source = _SparkOrders(rows, say) if spark else _PythonOrders(rows)
        summary, expected = source.publish(topic)
        size = f", {summary.bytes / 2**20:.1f} MiB of Arrow rows" if summary.bytes else ""
        say(
            f"published {summary.rows:,} orders in {summary.seconds:.2f} s "
            f"({summary.rows_per_second:,.0f} rows/s{size})"
        )
        say("rows per channel: " + _channel_list(summary.rows_per_channel))
        with Progress(
            TextColumn("consumed"), BarColumn(), MofNCompleteColumn(), transient=True
        ) as progress:
            bar = progress.add_task("consumed", total=rows)
            killed = _consume_with_faults(topic, members, ledger, rows, progress, bar, say)
        consumed_at = time.perf_counter()
        survivors = [member for index, member in enumerate(members) if index != killed]
        ray.get([member.stop.remote() for member in survivors])
        ray.get([runs[index] for index in range(MEMBERS) if index != killed])
        report = ray.get(ledger.report.remote())
        ray.get([member.close.remote() for member in survivors])
        return _verdict(topic, rows, summary, expected, report, consumed_at - started, say)
    finally:
        for member in members:
            ray.kill(member)
        topic.destroy()
        shutil.rmtree(store, ignore_errors=True)


def _consume_with_faults(
    topic: Topic,
    members: list[Any],
    ledger: Any,
    rows: int,
    progress: Any,
    bar: Any,
    say: Callable[[str], None],
) -> int:
    """Hold the consumers at a third and kill one, hold them at two thirds and kill
    a channel, then let them finish. Return the killed consumer's index."""
    victim = 0
    deadline = time.monotonic() + _FINISH_TIMEOUT

    def count_until(target: int) -> int:
        while True:
            counted = ray.get(ledger.counted.remote())
            progress.update(bar, completed=counted)
            if counted >= target or time.monotonic() > deadline:
                return counted
            time.sleep(0.05)

    ray.get(ledger.hold_at.remote(rows // 3))
    counted = count_until(rows // 3)
    owned = ray.get(members[victim].channels.remote())
    ray.kill(members[victim], no_restart=True)
    progress.console.print(
        f"killed consumer {victim} (it owned channels {list(owned)}) at {counted:,} orders"
    )
    ray.get(ledger.hold_at.remote(2 * rows // 3))
    counted = count_until(2 * rows // 3)
    _kill_channel(topic, 0, progress.console.print)
    ray.get(ledger.hold_at.remote(rows))
    count_until(rows)
    while len(members_now := topic.describe().groups[GROUP].members) >= len(members):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)  # the group times the killed member out (its timeout: 5 s)
    say("group members now own " + ", ".join(str(list(member.channels)) for member in members_now))
    return victim


def _kill_channel(topic: Topic, channel: int, say: Callable[[str], None]) -> None:
    """SIGKILL a channel's process, as a crash would, and wait until it answers
    again, from its store."""
    before = topic.describe().channels[channel]
    say(
        f"killing channel {channel} on purpose (pid {before.pid}, epoch {before.epoch}) "
        "with SIGKILL, as a crash would: it must come back from its store"
    )
    with worker_death_reports_off():
        os.kill(before.pid, signal.SIGKILL)
        killed_at = time.perf_counter()
        say(f"killed channel {channel} (pid {before.pid}, epoch {before.epoch})")
        deadline = time.monotonic() + _RECOVERY_TIMEOUT
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = topic.describe().channels[channel]
            if now.epoch > before.epoch and now.state == "serving":
                say(
                    f"channel {channel} is back at epoch {now.epoch} after "
                    f"{time.perf_counter() - killed_at:.1f} s, {now.size:,} elements "
                    "from its store"
                )
                return
    say(f"channel {channel} did not come back within {_RECOVERY_TIMEOUT:.0f} s")


def _verdict(
    topic: Topic,
    rows: int,
    summary: PublishSummary,
    expected: dict[int, float],
    report: dict[str, Any],
    seconds: float,
    say: Callable[[str], None],
) -> bool:
    totals = report["totals"]
    lost = rows - report["counted"]
    lag = topic.describe().groups[GROUP].lag
    matches = set(totals) == set(expected) and all(
        abs(totals[c] - expected[c]) <= 1e-6 * max(1.0, abs(expected[c])) for c in expected
    )
    say(
        f"consumed {report['counted']:,} orders end to end in {seconds:.1f} s "
        f"({report['counted'] / seconds:,.0f} orders/s); {report['repeated']:,} delivered "
        "again after the faults and counted once"
    )
    say(f"lost = {lost}; group lag = {lag}")
    ok = matches and lost == 0 and summary.rows == rows
    say(
        f"verdict: {'PASS' if ok else 'FAIL'}: totals of {len(expected)} customers "
        + ("match" if matches else "DIFFER")
        + " the publisher's own"
    )
    return ok


def _channel_list(per_channel: dict[int, int]) -> str:
    return ", ".join(f"{channel}: {count:,}" for channel, count in sorted(per_channel.items()))


class _SparkOrders:
    """Orders made and published by Spark; the expected totals from Spark's groupBy."""

    def __init__(self, rows: int, say: Callable[[str], None]) -> None:
        self._rows = rows
        self._say = say

    def publish(self, topic: Topic) -> tuple[PublishSummary, dict[int, float]]:
        from pyspark.sql import functions as F

        from raytopic.bridge.spark import publish_dataframe
        from raytopic.bridge.spark_session import init_quiet_spark, stop_spark

        started = time.perf_counter()
        session = init_quiet_spark("raytopic-demo")
        self._say(f"Spark on Ray started in {time.perf_counter() - started:.1f} s")
        try:
            orders = (
                session.range(self._rows, numPartitions=4)
                .select(
                    F.col("id").alias("order_id"),
                    F.pmod(F.xxhash64("id"), F.lit(CUSTOMERS)).alias("customer"),
                    F.round(F.rand(7) * 99 + 1, 2).alias("amount"),
                    F.timestamp_seconds(F.lit(1_767_225_600) + F.col("id") / 1000).alias("time"),
                )
                .cache()
            )
            orders.count()  # made once: what is published is what is totalled
            summary = publish_dataframe(topic, orders, key="customer")
            expected = {
                row["customer"]: row["total"]
                for row in orders.groupBy("customer").agg(F.sum("amount").alias("total")).collect()
            }
            orders.unpersist()
        finally:
            stop_spark()
        self._say("Spark stopped: the topic holds the orders")
        return summary, expected


class _PythonOrders:
    """Orders made in Python and published one by one through a Publisher."""

    def __init__(self, rows: int) -> None:
        self._rows = rows

    def publish(self, topic: Topic) -> tuple[PublishSummary, dict[int, float]]:
        rng = np.random.default_rng(7)
        customers = rng.integers(0, CUSTOMERS, self._rows)
        amounts = np.round(rng.uniform(1, 100, self._rows), 2)
        started = time.perf_counter()
        with topic.publisher() as publisher:
            futures = [
                publisher.publish(
                    {"order_id": order, "customer": customer, "amount": amount},
                    key=customer,
                )
                for order, customer, amount in zip(
                    range(self._rows), customers.tolist(), amounts.tolist(), strict=True
                )
            ]
        seconds = time.perf_counter() - started
        per_channel = np.bincount(
            [future.result().channel for future in futures], minlength=topic.channel_count
        )
        totals = np.bincount(customers, weights=amounts, minlength=CUSTOMERS)
        summary = PublishSummary.total(
            [({c: int(n) for c, n in enumerate(per_channel)}, 0)], seconds
        )
        expected = {c: float(totals[c]) for c in np.unique(customers).tolist()}
        return summary, expected
