"""Bulk writes against real channel actors: a streaming sink's ``append_once`` of a
version (``BulkWriter(..., version=)``, what ``raytopic.spark.sink`` runs per
micro-batch) across faults."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

import raytopic as rt
from raytopic.client.bulk import BulkWriter

from tests.topic_helpers import blocked_topic, draining_member, kill_channel, serving_again


def _write_version(topic: rt.Topic, writer_id: str, version: int, rows: pa.Table) -> dict:
    """What a sink's task does: ``rows`` as ``version`` of ``writer_id``; rows per channel."""
    writer = BulkWriter(topic, writer_id, version=version)
    writer.write(rows)
    appended, _ = writer.close()
    return appended


def test_a_version_larger_than_the_capacity_goes_in_once_across_two_restarts_of_its_channel(
    make_topic, tmp_path, unique_name: Callable[[str], str]
) -> None:
    """A sink's version of 250 rows into a stored "block" channel of 50 goes in pieces
    as a member frees room; the channel is SIGKILLed twice meanwhile. Before 9844019,
    Ray's retry found the version's first piece in the restarted channel's store and
    answered "had it" (an empty ack): the write succeeded having appended 0 rows by its
    answer, and the rows still waiting for room were never appended."""
    topic = blocked_topic(make_topic, tmp_path)
    rows = pa.table({"id": list(range(250))})
    writer_id = f"once:{unique_name('query')}"  # as raytopic.spark.sink names its writer
    with draining_member(topic, 0.3) as received, ThreadPoolExecutor(1) as pool:
        write = pool.submit(_write_version, topic, writer_id, 7, rows)
        for pause in (1.0, 1.5):
            time.sleep(pause)
            # Still waiting for room (if not, the message shows how it ended: before
            # 9844019, ({}, 0) after the first restart).
            assert not write.done(), write.result()
            serving_again(topic, 0, kill_channel(topic, 0), 60)
        assert write.result(timeout=120) == {0: 250}  # raises if any row failed
        # Spark running the micro-batch again appends nothing twice.
        assert _write_version(topic, writer_id, 7, rows) == {}
    assert [received[s]["id"] for s in sorted(received)] == list(range(250))  # once, in order


def test_a_version_run_again_while_its_first_run_waits_for_room_goes_in_once(
    make_topic, tmp_path, unique_name: Callable[[str], str]
) -> None:
    """Spark runs a sink's task again while the first run's append of the version still
    waits for room at its channel (the first task's executor died; its call goes on):
    the re-run gets the first run's answer once the version is in, and appends nothing
    twice. Before, it got InvalidArgumentError "call 7 of 'once:...' already ran"."""
    topic = blocked_topic(make_topic, tmp_path)
    rows = pa.table({"id": list(range(250))})
    writer_id = f"once:{unique_name('query')}"
    with draining_member(topic, 0.3) as received, ThreadPoolExecutor(2) as pool:
        first = pool.submit(_write_version, topic, writer_id, 7, rows)
        time.sleep(1.0)
        assert not first.done(), first.result()
        again = pool.submit(_write_version, topic, writer_id, 7, rows)
        assert first.result(timeout=120) == {0: 250}
        assert again.result(timeout=120) == {0: 250}
    assert [received[s]["id"] for s in sorted(received)] == list(range(250))
