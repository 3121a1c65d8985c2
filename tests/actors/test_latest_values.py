"""A compacted channel's conditional append and read by key without Ray: the real log
over a real segment store, what a restart (a new log over the same store) decides on,
deletes and purges, and a channel that is not compacted."""

from __future__ import annotations

import asyncio
import pickle
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from raytopic.actors.channel import ChannelActor
from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.latest_values import LatestValues
from raytopic.actors.stores.base import ChannelStore
from raytopic.actors.stores.segment_log import SegmentLogStore
from raytopic.core.compaction import Compaction
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import InvalidArgumentError
from raytopic.core.payloads import TOMBSTONE, PickledValues
from raytopic.core.protocol import (
    AppendUnless,
    ReadLatest,
    pack_request,
    pack_small,
    unpack_small,
)

FINISHED = ("SUCCESS", "REVOKED")
START = AppendUnless("status", FINISHED, 1.0)


def _latest(directory: Path | None, capacity: int = 100, compacted: bool = True) -> tuple:
    """(parts, LatestValues) of one channel, over a store in ``directory`` if given."""
    config = TopicConfig(
        "t", "ns", "t0pic1d", 1, capacity, True, None, Overflow.BLOCK, (),
        compaction=Compaction(max_lag_s=60.0) if compacted else None,
    )  # fmt: skip
    context = ChannelContext(config, 0, ChannelMetrics(config.name, 0))
    parts = ChannelParts.build(context, restarted=False)
    if directory is not None:
        store = SegmentLogStore(directory, segment_bytes=1)
        parts.recover(
            ChannelStore(store), restarted=directory.exists() and any(directory.iterdir())
        )
    return parts, LatestValues(parts.log, compacted=compacted)


def _keyed(rows: list[tuple[str, Any]]) -> PickledValues:
    """(key, value) per element; a None value is a delete."""
    return PickledValues.from_pickles(
        [TOMBSTONE if value is None else pickle.dumps(value, 5) for _, value in rows],
        [key for key, _ in rows],
    )


def _status(status: str) -> dict[str, Any]:
    return {"status": status, "result": None}


def test_a_conditional_append_is_refused_by_the_latest_value_and_names_it(tmp_path: Path) -> None:
    async def main() -> None:
        _, latest = _latest(tmp_path / "log")
        started = await latest.append_unless(START, _keyed([("a", _status("STARTED"))]))
        assert started == (None,)
        finish = AppendUnless("status", FINISHED, 1.0)
        assert await latest.append_unless(finish, _keyed([("a", _status("SUCCESS"))])) == (None,)
        # A second writer of the key (a task delivered again) is refused, told why.
        again = await latest.append_unless(
            START, _keyed([("a", _status("STARTED")), ("b", _status("STARTED"))])
        )
        assert again == (_status("SUCCESS"), None)
        # One request's values of one key: the second sees the first.
        both = await latest.append_unless(
            finish, _keyed([("c", _status("REVOKED")), ("c", _status("SUCCESS"))])
        )
        assert both == (None, _status("REVOKED"))
        read, _, _, _ = await latest.read(ReadLatest(("a", "b", "c", "none")))
        assert read == (_status("SUCCESS"), _status("STARTED"), _status("REVOKED"), None)

    asyncio.run(main())


def test_a_restarted_log_decides_on_what_its_store_holds(tmp_path: Path) -> None:
    async def main() -> None:
        directory = tmp_path / "log"
        parts, latest = _latest(directory)
        for n in range(10):
            await latest.append_unless(START, _keyed([(f"t{n}", _status("SUCCESS"))]))
        # Written by a plain append (not through this part): a delete and a new key.
        ack, change = await parts.log.append(
            _keyed([("t3", None), ("x", _status("REVOKED"))]), Overflow.BLOCK, 1.0, whole=True
        )
        assert ack.error is None
        await parts.log.durable(change)
        _, restarted = _latest(directory)  # the channel's next incarnation
        replies = await restarted.append_unless(
            START, _keyed([(f"t{n}", _status("STARTED")) for n in range(10)] + [("x", {})])
        )
        finished = [None if n == 3 else _status("SUCCESS") for n in range(10)]
        assert replies == (*finished, _status("REVOKED"))
        assert (await restarted.read(ReadLatest(("t3", "t4"))))[0] == (
            _status("STARTED"),
            _status("SUCCESS"),
        )

    asyncio.run(main())


def test_a_purge_forgets_the_latest_values_and_a_plain_channel_refuses_typed() -> None:
    async def main() -> None:
        parts, latest = _latest(None)
        await latest.append_unless(START, _keyed([("a", _status("SUCCESS"))]))
        assert (await latest.read(ReadLatest(("a",))))[0] == (_status("SUCCESS"),)
        parts.log.evict_all()
        assert (await latest.read(ReadLatest(("a",))))[0] == (None,)
        _, plain = _latest(None, compacted=False)
        with pytest.raises(InvalidArgumentError, match="compacted"):
            await plain.read(ReadLatest(("a",)))
        with pytest.raises(InvalidArgumentError, match="key"):
            await latest.append_unless(START, PickledValues.from_values([_status("STARTED")]))

    asyncio.run(main())


def test_a_read_brings_the_keys_changed_since_the_readers_mark() -> None:
    async def main() -> None:
        parts, latest = _latest(None)
        await latest.append_unless(START, _keyed([("a", _status("STARTED"))]))
        values, mark, reset, changed = await latest.read(ReadLatest(("a",), None, 10))
        assert (values, reset, changed) == (
            (_status("STARTED"),),
            True,
            [("a", _status("STARTED"))],
        )
        await latest.append_unless(START, _keyed([("a", _status("SUCCESS")), ("b", {})]))
        await parts.log.append(_keyed([("b", None)]), Overflow.BLOCK, 1.0, whole=True)
        _, newer, reset, changed = await latest.read(ReadLatest((), mark, 10))
        assert not reset and changed == [("a", _status("SUCCESS")), ("b", None)]  # b deleted
        assert (await latest.read(ReadLatest((), newer, 10)))[2:] == (False, [])
        # Behind by more than it asks for, or a mark of another incarnation: start over.
        assert (await latest.read(ReadLatest((), mark, 1)))[2:] == (True, [("b", None)])
        _, other = _latest(None)
        assert (await other.read(ReadLatest((), newer, 10)))[2] is True

    asyncio.run(main())


def test_the_latest_values_are_kept_as_the_log_holds_them_not_decoded_again() -> None:
    # A task's result sat on the log's channel twice: pickled in the ring and decoded in
    # this part. The part now keeps each key's element as a view of the ring's payload
    # and decodes it when a request needs it.
    async def main() -> None:
        _, latest = _latest(None, capacity=1000)
        await latest.read(ReadLatest(()))  # the part in use (filled from every append)
        batches = [
            _keyed(
                [(f"t{b}-{n}", {"status": "SUCCESS", "result": bytes(10_240)}) for n in range(10)]
            )
            for b in range(50)
        ]  # 500 results of 10 KiB: 5 MiB pickled, held by the ring
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            for batch in batches:
                await latest.append_unless(START, batch)
            after, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert after - before < 1_000_000, f"the part kept {after - before} bytes more"
        read, _, _, _ = await latest.read(ReadLatest(("t7-3", "none")))
        assert read == ({"status": "SUCCESS", "result": bytes(10_240)}, None)
        refused = await latest.append_unless(START, _keyed([("t49-9", _status("STARTED"))]))
        assert refused == ({"status": "SUCCESS", "result": bytes(10_240)},)

    asyncio.run(main())


def test_a_read_of_waiting_keys_answers_when_one_changes() -> None:
    # A poller of a started task learnt of its outcome only at its next read (a sleep and
    # a call after the log held it): a read with a wait, of keys whose field is one of
    # ``waiting``, waits at the channel until one of them changes or the wait ends.
    async def main() -> None:
        _, latest = _latest(None)
        await latest.append_unless(START, _keyed([("a", _status("STARTED")), ("b", {})]))
        loop = asyncio.get_running_loop()
        until = ReadLatest(("a",), field="status", waiting=("STARTED",), wait=30.0)
        begun = loop.time()
        reading = asyncio.ensure_future(latest.read(until))
        await asyncio.sleep(0.05)
        await latest.append_unless(START, _keyed([("b", _status("STARTED"))]))  # another key
        await asyncio.sleep(0.05)
        assert not reading.done()  # still waiting: its key did not change
        finish = AppendUnless("status", FINISHED, 1.0)
        await latest.append_unless(finish, _keyed([("a", _status("SUCCESS"))]))
        values, _, _, _ = await asyncio.wait_for(reading, 5.0)
        assert values == (_status("SUCCESS"),)
        assert loop.time() - begun < 10.0  # answered at the change, not after the 30 s
        # Keys not waiting (finished, or none yet: a task not started) answer at once, and
        # so does a waiting key whose wait ends (its value as held).
        other = ReadLatest(("a", "none"), field="status", waiting=("STARTED",), wait=30.0)
        assert (await asyncio.wait_for(latest.read(other), 1.0))[0] == (_status("SUCCESS"), None)
        short = ReadLatest(("b",), field="status", waiting=("STARTED",), wait=0.05)
        assert (await asyncio.wait_for(latest.read(short), 5.0))[0] == (_status("STARTED"),)

    asyncio.run(main())


def test_a_read_with_a_bad_wait_is_refused_typed() -> None:
    async def main() -> None:
        _, latest = _latest(None)
        for wait in (-1.0, "1", float("nan"), 61.0):
            bad = ReadLatest(("a",), field="status", waiting=("STARTED",), wait=wait)
            with pytest.raises(InvalidArgumentError, match="wait"):
                await latest.read(bad)

    asyncio.run(main())


def test_a_channels_answers_to_a_conditional_append_and_a_read_are_packed_bytes() -> None:
    # A control log's calls are a Serve task's start, outcome and status read: any reply
    # but bytes takes Ray's pickle path, 0.1-0.2 ms a hop here (core.protocol.codec).
    async def main() -> None:
        config = TopicConfig(
            "t", "ns", "t0pic1d", 1, 100, True, None, Overflow.BLOCK, (),
            compaction=Compaction(max_lag_s=60.0),
        )  # fmt: skip
        channel = ChannelActor(config, 0)
        start = pack_request(START)
        appended = await channel.request(start, pack_small(_keyed([("a", _status("STARTED"))])))
        assert type(appended) is bytes and unpack_small(appended) == (None,)
        refused = await channel.request(start, _keyed([("a", _status("STARTED"))]))
        assert type(refused) is bytes and unpack_small(refused) == (None,)  # STARTED: not refused
        read = await channel.request(pack_request(ReadLatest(("a", "none"))))
        assert type(read) is bytes
        assert unpack_small(read)[0] == (_status("STARTED"), None)

    asyncio.run(main())


def test_a_waiting_read_answers_before_the_append_that_woke_it() -> None:
    # A task's poller waits at the log for its outcome; the replica that appended it
    # does not wait for its own answer. The woken read answered turns after the
    # appender (an Event's wait_for task between the two): its reply now leaves first.
    async def main() -> None:
        _, latest = _latest(None)
        until = ReadLatest(("a",), field="status", waiting=(None, "STARTED"), wait=30.0)
        reading = asyncio.ensure_future(latest.read(until))
        await asyncio.sleep(0.01)
        await latest.append_unless(START, _keyed([("a", _status("STARTED"))]))
        assert not reading.done()  # started: still waiting for its outcome
        finish = AppendUnless("status", FINISHED, 1.0)
        await latest.append_unless(finish, _keyed([("a", _status("SUCCESS"))]))
        assert reading.done()  # answered by the time the append is
        assert reading.result()[0] == (_status("SUCCESS"),)
        # A delete of a waited-for key leaves it pending (None): the read waits on.
        reading = asyncio.ensure_future(latest.read(until._replace(keys=("b",), wait=0.2)))
        await asyncio.sleep(0.01)
        await latest.append_unless(START, _keyed([("b", None)]))
        assert not reading.done()
        assert (await asyncio.wait_for(reading, 5.0))[0] == (None,)

    asyncio.run(main())
