"""Streams under real faults (docs/guides/streams.md): a driver SIGKILLed mid-batch and
started again, channels and the coordinator SIGKILLed during a stream on a stored
topic, a lead channel SIGKILLed as it commits a batch, and a damaged stored record.
Each checks, with a sink that overwrites by batch id, that the output is exactly the
published set: nothing lost, nothing twice. And who consumes the group: a stream's
claim survives its coordinator's SIGKILL, and ends after its timeout when its
driver is SIGKILLed (checked on the driver SIGKILLed mid-batch: a driver process
and a topic fewer)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import raytopic as rt
import raytopic.data as rd

from tests.topic_helpers import (
    TIMEOUT,
    damage_a_middle_record,
    get,
    kill_channel,
    kill_coordinator,
    publish_all,
    receive_until_empty,
    serving_again,
)

pytestmark = pytest.mark.slow

# A driver that streams a group into parquet, one directory per batch id, replaced
# whole when a batch comes again (an idempotent sink); with a marker path, it stops
# for good after writing batch 2 (before advancing: batch 2 is not committed), so
# the test can SIGKILL it there. Its claim's timeout is 3 s: the test waits it out.
DRIVER = """
import json, os, shutil, sys, time
import ray
import raytopic as rt
import raytopic.data
address, namespace, name, group, out, marker = sys.argv[1:7]
ray.init(address=address, namespace=namespace, logging_level="ERROR", log_to_driver=False)
topic = rt.get_topic(name, namespace=namespace)
for batch in raytopic.data.stream(topic, group=group, max_rows_per_batch=100, timeout=3.0):
    target = os.path.join(out, f"batch={batch.batch_id}")
    shutil.rmtree(target, ignore_errors=True)
    batch.dataset.write_parquet(target)
    # Prefixed: Ray may print its own warnings on this process's stdout too.
    done = [batch.batch_id, sorted(batch.ranges.items()), batch.rows]
    print("batch", json.dumps(done), flush=True)
    if marker and batch.batch_id == 2:
        open(marker, "w").close()
        time.sleep(600)
"""


def _driver(ray_cluster: str, topic: rt.Topic, out: Path, marker: str) -> subprocess.Popen[str]:
    arguments = [ray_cluster, topic.namespace, topic.name, "g", str(out), marker]
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _batches(output: str) -> list[Any]:
    """The batches a driver printed, in order (the lines Ray printed among them left out:
    its raylet's warning that many worker processes started, say)."""
    return [json.loads(line[6:]) for line in output.splitlines() if line.startswith("batch ")]


def _written(out: Path) -> dict[int, list[int]]:
    """What the sink holds: per batch id, the values of its directory."""
    return {
        int(batch.name.removeprefix("batch=")): pq.read_table(batch).column("n").to_pylist()
        for batch in out.iterdir()
    }


def test_a_driver_killed_mid_batch_and_started_again_writes_exactly_the_published_set(
    ray_cluster: str, make_topic: Callable[..., rt.Topic], tmp_path: Path, wait_until: Any
) -> None:
    topic = make_topic(channels=2, store=str(tmp_path / "store"))
    publish_all(topic, [{"n": n} for n in range(500)])
    out, marker = tmp_path / "out", tmp_path / "in-batch-2"
    first = _driver(ray_cluster, topic, out, str(marker))
    try:
        wait_until(lambda: marker.exists() or first.poll() is not None, timeout=240)
        assert first.poll() is None, first.stderr.read()[-3000:] if first.stderr else ""
        holder = topic.describe().groups["g"].stream
        assert holder is not None and f":{first.pid}:" in holder
    finally:
        first.send_signal(signal.SIGKILL)  # mid-batch: batch 2 written, not committed
    killed_at = time.monotonic()
    killed = _batches(first.communicate(timeout=TIMEOUT)[0])
    _the_claim_ends_after_its_timeout(topic, holder, killed_at, out, wait_until)
    second = _driver(ray_cluster, topic, out, "")
    lines, errors = second.communicate(timeout=240)
    assert second.returncode == 0, errors[-3000:]
    again = _batches(lines)
    assert [batch[0] for batch in killed] == [0, 1, 2]
    assert again[0] == killed[-1]  # batch 2 again first: same id, ranges and rows
    assert [batch[0] for batch in again] == [2, 3, 4]
    written = _written(out)
    assert sorted(written) == [0, 1, 2, 3, 4]
    assert sorted(n for values in written.values() for n in values) == list(range(500))


def _the_claim_ends_after_its_timeout(
    topic: rt.Topic, holder: str, killed_at: float, out: Path, wait_until: Any
) -> None:
    """The claim of a stream whose driver was SIGKILLed at ``killed_at`` holds until its
    timeout (3 s), then a member joins; it reads from the last commit (the batch in
    hand again, and the rest) and leaves, committing nothing."""
    # Dead, but not yet silent for its timeout: the claim holds.
    with pytest.raises(rt.GroupBusyError, match=f"consumed by stream {holder}"):
        topic.subscriber(group="g")
    joined: list[rt.Subscriber] = []

    def join() -> bool:
        try:
            joined.append(topic.subscriber(group="g", complete_on_empty=True))
        except rt.GroupBusyError:
            return False
        return True

    wait_until(join, timeout=30)
    assert time.monotonic() - killed_at > 2.0  # the timeout (3 s) ran, give or take a beat
    assert topic.describe().groups["g"].stream is None
    committed = {n for batch in (0, 1) for n in _written(out)[batch]}
    with joined[0] as member:
        values = [element.value["n"] for element in receive_until_empty(member)]
    assert sorted(values) == sorted(set(range(500)) - committed)


def _values(batch: rd.MicroBatch) -> list[int]:
    return [row["n"] for row in batch.dataset.take_all()]


def test_channels_and_the_coordinator_killed_during_a_stream_lose_and_duplicate_nothing(
    make_topic: Callable[..., rt.Topic], tmp_path: Path
) -> None:
    topic = make_topic(channels=2, store=str(tmp_path))
    publish_all(topic, [{"n": n} for n in range(600)])
    written: dict[int, list[int]] = {}  # the sink: per batch id, overwritten
    stream = rd.stream(topic, group="g", max_rows_per_batch=100)
    for channel in (0, 1):  # a channel dies while a batch is in hand: the stream goes on
        batch = next(stream)
        kill_channel(topic, channel)
        written[batch.batch_id] = _values(batch)  # read from the restarted channel
    in_hand = next(stream)  # commits batch 1 at a channel restarting meanwhile
    written[in_hand.batch_id] = _values(in_hand)
    # Now the coordinator and every channel die with batch 2 in hand, and so does the
    # driver (the stream is abandoned): the offset log is in the channels' stores.
    epochs = [kill_channel(topic, channel) for channel in (0, 1)]
    kill_coordinator(topic)
    for channel, epoch in enumerate(epochs):
        serving_again(topic, channel, epoch, TIMEOUT)
    resumed = rd.stream(topic, group="g", max_rows_per_batch=100)
    replayed = next(resumed)
    assert (replayed.batch_id, replayed.ranges, replayed.rows) == (2, in_hand.ranges, 100)
    with pytest.raises(rt.NotOwnerError):
        in_hand.commit()  # the old stream is fenced
    for batch in [replayed, *resumed]:
        written[batch.batch_id] = _values(batch)
    assert sorted(written) == [0, 1, 2, 3, 4, 5]
    assert sorted(n for values in written.values() for n in values) == list(range(600))
    assert sum(c.lag for c in topic.describe().groups["g"].channels) == 0


def test_a_damaged_record_fails_the_stream_or_is_read_around_as_fail_on_data_loss_says(
    make_topic: Callable[..., rt.Topic], tmp_path: Path
) -> None:
    topic = make_topic(channels=1, store=str(tmp_path))
    topic.create_group("g")
    first, last = damage_a_middle_record(topic, str(tmp_path))  # values 0..99 at 0..99
    good: list[rd.MicroBatch] = []
    with pytest.raises(rt.DataLossError) as lost:
        for batch in rd.stream(topic, group="g", max_rows_per_batch=40):
            good.append(batch)  # advancing commits it; the batch crossing the damage fails
    assert lost.value.lost == (first, last) and lost.value.channel == 0
    assert good and good[-1].ranges[0][1] <= first
    # Nothing of the failing batch is consumed: the commit is the last good batch's.
    done = good[-1].ranges[0][1]
    assert topic.describe().groups["g"].channels[0].committed.sequence == done - 1
    around = list(rd.stream(topic, group="g", max_rows_per_batch=40, fail_on_data_loss=False))
    assert around[0].batch_id == good[-1].batch_id + 1
    spans = [b.ranges[0] for b in around]
    assert spans[0][0] == done and spans[-1][1] == 100
    assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
    values = [row["value"] for b in [*good, *around] for row in b.dataset.take_all()]
    assert sorted(values) == [n for n in range(100) if not first <= n <= last]
    assert sum(b.rows for b in [*good, *around]) == len(values) == 100 - (last - first + 1)
    assert topic.describe().groups["g"].channels[0].committed.sequence == 99


# -- who consumes the group: the coordinator's claim (docs/architecture.md) ------------------------


def test_a_coordinator_killed_while_a_stream_holds_its_group_still_refuses_members(
    make_topic: Callable[..., rt.Topic], tmp_path: Path, wait_until: Any
) -> None:
    topic = make_topic(channels=2, store=str(tmp_path))
    publish_all(topic, [{"n": n} for n in range(300)])
    stream = rd.stream(topic, group="g", max_rows_per_batch=100, timeout=2.0)
    values = _values(next(stream))
    holder = topic.describe().groups["g"].stream
    kill_coordinator(topic)
    # The restarted coordinator rebuilt the claim from the channels (a member's call
    # waits for it): the member is refused, naming the stream.
    with pytest.raises(rt.GroupBusyError, match=f"consumed by stream {holder}"):
        topic.subscriber(group="g")
    assert topic.describe().groups["g"].stream == holder
    # Past the stream's own timeout, its heartbeats still hold the group.
    started = time.monotonic()
    wait_until(lambda: time.monotonic() - started > 3.0, timeout=10)
    with pytest.raises(rt.GroupBusyError):
        topic.subscriber(group="g")
    for batch in stream:  # it goes on, committing at the channels under its lease
        values += _values(batch)
    assert sorted(values) == list(range(300))
    assert topic.describe().groups["g"].stream is None  # it ended: the group is free
    with topic.subscriber(group="g", complete_on_empty=True) as member:
        assert get(member.receive()) is None  # everything was committed


def test_a_lead_channel_killed_during_a_micro_batchs_step_loses_and_repeats_nothing(
    make_topic: Callable[..., rt.Topic], tmp_path: Path
) -> None:
    topic = make_topic(channels=2, store=str(tmp_path))
    publish_all(topic, [{"n": n} for n in range(600)])
    written: dict[int, list[int]] = {}  # the sink: per batch id, overwritten
    ranges: dict[int, dict[int, tuple[int, int]]] = {}
    stream = rd.stream(topic, group="g", max_rows_per_batch=100)
    batch = next(stream)
    crossed = 0  # commits sent to a dead lead, served by its next incarnation
    while batch is not None:
        written[batch.batch_id] = _values(batch)
        ranges[batch.batch_id] = batch.ranges
        lead = batch.batch_id % 2  # the channel that leads this batch's commit
        pid = topic.describe().channels[lead].pid
        # Batches 0 and 3: the lead is dead when the commit is sent (it must wait for the
        # restart); the others: the SIGKILL lands in or just after the call.
        delay = (None, 0.0, 0.02)[batch.batch_id % 3]
        if delay is None:
            os.kill(pid, signal.SIGKILL)
            batch.commit()  # one call, to the lead: served by its next incarnation
            crossed += topic.describe().channels[lead].pid != pid
        else:
            killer = threading.Timer(delay, os.kill, (pid, signal.SIGKILL))
            killer.start()
            batch.commit()
            killer.join()
        batch = next(stream, None)
    assert crossed == 2  # batches 0 and 3: each commit waited for its lead to come back
    assert sorted(written) == [0, 1, 2, 3, 4, 5]
    assert sorted(n for values in written.values() for n in values) == list(range(600))
    for channel in (0, 1):  # every channel's ranges follow each other: none twice
        spans = [ranges[b][channel] for b in sorted(ranges)]
        assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
    group = topic.describe().groups["g"]
    assert group.lag == 0 and group.stream is None
    committed = {c: p.sequence for c, p in group.committed.items()}
    assert committed == {c: ranges[5][c][1] - 1 for c in (0, 1)}
