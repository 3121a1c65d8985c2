"""A compacted channel's passes without Ray: the real parts over a real segment log (and
over the ring alone), the state written before the swap, what a restart recovers, reads
below the ring's head across the gaps, and when the next pass is due."""

from __future__ import annotations

import asyncio
import pickle
import time
from pathlib import Path
from typing import Any

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.compactor import Compactor, NoCompaction
from raytopic.actors.stores.base import ChannelStore
from raytopic.actors.stores.segment_log import SegmentLogStore
from raytopic.core.compaction import Compaction
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.payloads import TOMBSTONE, PickledValues

SETTINGS = Compaction(min_lag_s=0.0, max_lag_s=60.0, tombstone_retention_s=0.0)


def _config(
    capacity: int = 100,
    compaction: Compaction | None = SETTINGS,
    overflow: Overflow = Overflow.FAIL,
    **options: Any,
) -> TopicConfig:
    return TopicConfig(
        "t",
        "ns",
        "t0pic1d",
        1,
        capacity,
        True,
        None,
        overflow,
        (),
        compaction=compaction,
        **options,
    )


def _parts(
    directory: Path | None, capacity: int = 100, segment_bytes: int = 1, **options: Any
) -> ChannelParts:
    config = _config(capacity, **options)
    context = ChannelContext(config, 0, ChannelMetrics(config.name, 0))
    parts = ChannelParts.build(context, restarted=False)
    if directory is not None:
        store = SegmentLogStore(
            directory, segment_bytes=segment_bytes, retention_seconds=config.retention_seconds
        )
        parts.recover(ChannelStore(store), restarted=False)
    return parts


def _keyed(rows: list[tuple[str, Any]]) -> PickledValues:
    """(key, value) per element; a None value is a delete."""
    return PickledValues.from_pickles(
        [TOMBSTONE if value is None else pickle.dumps(value, 5) for _, value in rows],
        [key for key, _ in rows],
    )


async def _append(
    parts: ChannelParts, rows: list[tuple[str, Any]], policy: Overflow = Overflow.FAIL
) -> None:
    ack, change = await parts.log.append(_keyed(rows), policy, None, whole=True)
    assert ack.error is None
    await parts.log.durable(change)


def _held(parts: ChannelParts, start: int = 0) -> list[tuple[int, Any, Any]]:
    """(sequence, key, value) of every element readable from ``start`` (below the ring's
    head from the store)."""
    out = []
    log = parts.log
    sequence = start
    while sequence <= log.ring.tail:
        runs = log.read(sequence, 1000)
        if not runs:
            break
        for run in runs:
            keys = run.payload.keys or [None] * len(run.payload)
            out.extend(zip(run.sequence_list(), keys, run.payload.decode(), strict=True))
        sequence = runs[-1].last + 1
    return out


HISTORY = [("a", 1), ("b", 1), ("a", 2), ("c", 1), ("b", None), ("d", 1), ("a", 3), ("e", 1)]
"""Positions 0..7: a's 3 values, b's value then delete, c, d and e once."""
SURVIVORS = [(3, "c", 1), (5, "d", 1), (6, "a", 3), (7, "e", 1)]


def test_a_plain_topic_has_no_compaction() -> None:
    config = _config(compaction=None)
    context = ChannelContext(config, 0, ChannelMetrics(config.name, 0))
    parts = ChannelParts.build(context, restarted=False)
    assert isinstance(parts.compactor, NoCompaction) and not parts.compactor.needs_tending


def test_a_pass_over_the_ring_alone() -> None:
    async def main() -> None:
        parts = _parts(None)
        for row in HISTORY:
            await _append(parts, [row])  # one segment each: the survivors merge
        compactor = parts.compactor
        assert isinstance(compactor, Compactor) and compactor.needs_tending
        run = await compactor.run()
        assert (run.point, run.removed, run.live_keys) == (8, 4, 4)
        assert run.bytes_after < run.bytes_before
        assert _held(parts) == SURVIVORS
        assert parts.log.figures().size == 4 and parts.log.room() == 96
        assert not compactor.needs_tending  # nothing new since
        assert compactor.describe(time.time())["dirty_ratio"] == 0.0

    asyncio.run(main())


def test_a_pass_over_the_store_survives_a_restart(tmp_path: Path) -> None:
    async def main() -> None:
        parts = _parts(tmp_path)
        for row in HISTORY:
            await _append(parts, [row])  # one segment each (segment_bytes=1)
        run = await parts.compactor.run()  # type: ignore[union-attr]
        assert run.removed == 4 and run.bytes_after < run.bytes_before
        assert _held(parts) == SURVIVORS
        await _append(parts, [("b", 2)])  # appends go on after a pass
        parts.log.store.close()  # type: ignore[union-attr]
        restarted = _parts(tmp_path)
        assert _held(restarted) == [*SURVIVORS, (8, "b", 2)]
        assert restarted.log.ring.tail == 8 and restarted.log.figures().size == 5

    asyncio.run(main())


def test_reads_below_the_ring_head_step_over_the_gaps(tmp_path: Path) -> None:
    async def main() -> None:
        # "overwrite" drops the oldest from the ring; the store's retention keeps them.
        options = {"capacity": 3, "overflow": Overflow.OVERWRITE, "retention_seconds": 3600.0}
        parts = _parts(tmp_path, **options)
        for row in HISTORY[:3]:
            await _append(parts, [row], Overflow.OVERWRITE)  # a1 b1 a2
        await parts.compactor.run()  # type: ignore[union-attr]  # a1 goes
        for row in HISTORY[3:5]:
            await _append(parts, [row], Overflow.OVERWRITE)  # c1, then b's delete drops b1
        assert parts.log.ring.head == 2
        everything = [(1, "b", 1), (2, "a", 2), (3, "c", 1), (4, "b", None)]
        assert _held(parts) == everything  # 0 compacted away: no loss told
        assert _held(parts, 1) == everything[:]  # from the store, then the ring
        parts.log.store.close()  # type: ignore[union-attr]
        restarted = _parts(tmp_path, **options)
        assert restarted.log.ring.size == 3
        assert _held(restarted) == everything

    asyncio.run(main())


def test_the_state_is_written_before_the_swap(tmp_path: Path) -> None:
    async def main() -> None:
        parts = _parts(tmp_path)
        for row in HISTORY:
            await _append(parts, [row])
        parts.state.touch("publishers", "p")  # a change not written yet
        saved: list[bool] = []
        original = parts.state.save

        async def save() -> None:
            await original()
            saved.append(not (tmp_path / "swap.json").exists())

        parts.state.save = save  # type: ignore[method-assign]
        await parts.compactor.run()  # type: ignore[union-attr]
        assert saved == [True]  # before the commit point

    asyncio.run(main())
