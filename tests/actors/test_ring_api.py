"""Unit tests of RingbufferApi (no Ray): argument errors, add_all's answers, read_many's
min/max/filter, waits at the tail, and how reads meet a damaged stored record (a real
segment log with a flipped byte), in the ring and below its head."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.ring_api import MAX_READ_MANY, RingbufferApi
from raytopic.actors.stores.base import ChannelStore, StoredBatch
from raytopic.actors.stores.segment_log import SegmentLogStore
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import (
    DataLossError,
    InvalidArgumentError,
    InvalidTypeError,
    StaleSequenceError,
    StoreError,
)
from raytopic.core.payloads import PickledValues
from raytopic.core.protocol import Chunk, RawReadResult


def _config(capacity: int = 8) -> TopicConfig:
    return TopicConfig("t", "ns", "t0pic1d", 1, capacity, True, None, Overflow.BLOCK, ())


def _api(capacity: int = 8, store: ChannelStore | None = None) -> RingbufferApi:
    config = _config(capacity)
    context = ChannelContext(config, 0, ChannelMetrics(config.name, 0))
    log = ChannelLog(context)
    if store is not None:
        start, last = log.open(store, 0)
        log.load(start, last, lambda batch: None)
    return RingbufferApi(context, log)


def _values(values: Any) -> PickledValues:
    return PickledValues.from_values(values)


def _items(chunks: tuple[Chunk, ...] | list[Chunk]) -> list[Any]:
    return [value for chunk in chunks for value in chunk.payload.decode()]


def _sequences(result: RawReadResult) -> list[int]:
    return [sequence for chunk in result.chunks for sequence in chunk.sequence_list()]


class _RefusingStore:
    def store(self, sequence: int, item: Any) -> None:
        raise OSError("disk full")

    def store_all(self, first_sequence: int, items: Any) -> None:
        raise OSError("disk full")

    def load(self, sequence: int) -> Any:
        return None

    def largest_sequence(self) -> int:
        return -1


@pytest.fixture
def damaged_store(tmp_path: Path) -> Iterator[ChannelStore]:
    """A segment log of three records (0..2, 3..5, 6..8), the middle one damaged by a
    flipped byte, reopened (as a restarted channel opens it)."""
    store = SegmentLogStore(tmp_path)
    path = tmp_path / "00000000000000000000.log"
    sizes = []
    for first in (0, 3, 6):
        values = [f"v{sequence}" for sequence in range(first, first + 3)]
        store.store_batch(StoredBatch(first, 1.0 + first, _values(values)))
        sizes.append(path.stat().st_size)
    store.close()
    data = bytearray(path.read_bytes())
    data[(sizes[0] + sizes[1]) // 2] ^= 0x10  # a byte inside the second record
    path.write_bytes(bytes(data))
    reopened = SegmentLogStore(tmp_path)
    assert reopened.damaged() == [(3, 5)]
    yield ChannelStore(reopened)
    reopened.close()


# -- argument errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sequence", "error"),
    [
        (-1, InvalidArgumentError),
        (6, InvalidArgumentError),
        (2**63, InvalidArgumentError),
        # Not an int: the type error the client's Ringbuffer raises for it too.
        (1.5, InvalidTypeError),
        (True, InvalidTypeError),
        ("0", InvalidTypeError),
    ],
)
def test_read_one_refuses_a_bad_sequence(sequence: Any, error: type[Exception]) -> None:
    async def main() -> None:
        api = _api()
        await api.add_all(_values(range(5)), "fail")  # tail 4: 5 waits, 6 is beyond
        with pytest.raises(error):
            await api.read_one(sequence)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("start", "min_count", "max_count", "match"),
    [
        (-1, 0, 1, "start_sequence"),
        (0, -1, 1, "min_count"),
        (0, 3, 2, "min_count 3 > max_count 2"),
        (0, 0, MAX_READ_MANY + 1, "> 1000"),
        (0, 0, 9, "capacity 8"),
        (6, 0, 1, "beyond the tail"),
    ],
)
def test_read_many_refuses_bad_arguments(
    start: int, min_count: int, max_count: int, match: str
) -> None:
    async def main() -> None:
        api = _api(capacity=8)
        await api.add_all(_values(range(5)), "fail")
        with pytest.raises(InvalidArgumentError, match=match):
            await api.read_many(start, min_count, max_count, None)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("start", "stop", "max_count", "error"),
    [
        (-1, 5, 5, InvalidArgumentError),
        (0, -1, 5, InvalidArgumentError),
        (0, 5, 2**63, InvalidArgumentError),
        (0, 5, 1.0, InvalidTypeError),
    ],
)
def test_read_range_refuses_bad_arguments(
    start: Any, stop: Any, max_count: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        _api().read_range(start, stop, max_count)


# -- adds ------------------------------------------------------------------------------------------


def test_add_all_returns_the_last_sequence_or_minus_one_when_refused() -> None:
    async def main() -> None:
        api = _api(capacity=4)
        assert await api.add_all(_values("abc"), "fail") == 2
        assert await api.add_all(_values([]), "fail") == 2  # empty: the tail
        assert await api.add_all(_values("de"), "fail") == -1  # does not fit whole
        assert await api.add_all(_values("de"), "block", 0.05) == -1  # no room in time
        assert await api.add_all(_values("de"), "overwrite") == 4
        with pytest.raises(InvalidArgumentError, match="can never fit"):
            await api.add_all(_values("abcde"), "block")
        with pytest.raises(InvalidArgumentError, match="not a payload"):
            await api.add_all(["a"], "fail")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="overflow"):
            await api.add_all(_values("a"), "drop")

    asyncio.run(main())


def test_add_all_raises_the_store_error_of_a_refused_write() -> None:
    async def main() -> None:
        api = _api(store=ChannelStore(_RefusingStore()))
        with pytest.raises(StoreError, match="disk full"):
            await api.add_all(_values("a"), "fail")

    asyncio.run(main())


# -- reads -----------------------------------------------------------------------------------------


def test_read_one_waits_at_the_tail_plus_one_for_the_next_add() -> None:
    async def main() -> None:
        api = _api()
        await api.add_all(_values("ab"), "fail")
        assert (await api.read_one(1)).payload.decode() == ["b"]
        waiting = asyncio.ensure_future(api.read_one(2))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await api.add_all(_values("c"), "fail")
        run = await asyncio.wait_for(waiting, 1.0)
        assert (run.first, run.payload.decode()) == (2, ["c"])

    asyncio.run(main())


def test_read_many_returns_up_to_max_count_matches_and_counts_every_item_read() -> None:
    async def main() -> None:
        api = _api(capacity=16)
        await api.add_all(_values(range(10)), "fail")
        even = cloudpickle.dumps(lambda value: value % 2 == 0)
        result = await api.read_many(1, 1, 3, even)
        assert _items(result.chunks) == [2, 4, 6] and _sequences(result) == [2, 4, 6]
        assert (result.start, result.read_count) == (1, 6)  # 1..6 read, three matched
        plain = await api.read_many(8, 0, 5, None)
        assert _items(plain.chunks) == [8, 9] and plain.read_count == 2  # up to the tail

    asyncio.run(main())


def test_read_many_waits_until_min_count_items_match() -> None:
    async def main() -> None:
        api = _api(capacity=16)
        await api.add_all(_values([1, 2]), "fail")
        big = cloudpickle.dumps(lambda value: value >= 10)
        reading = asyncio.ensure_future(api.read_many(0, 2, 5, big))
        await api.add_all(_values([10, 3]), "fail")
        await asyncio.sleep(0.05)
        assert not reading.done()  # one match of two
        await api.add_all(_values([11, 12]), "fail")
        result = await asyncio.wait_for(reading, 2.0)
        assert _items(result.chunks) == [10, 11, 12] and result.read_count == 6

    asyncio.run(main())


def test_read_range_stops_at_stop_and_max_count_and_is_empty_past_the_tail() -> None:
    api = _api()
    asyncio.run(api.add_all(_values(range(6)), "fail"))
    assert _items(api.read_range(1, 4, 10)) == [1, 2, 3]
    assert _items(api.read_range(1, 100, 2)) == [1, 2]
    assert _items(api.read_range(4, 100, 10)) == [4, 5]
    assert api.read_range(6, 100, 10) == ()


def test_read_range_below_the_head_and_out_of_the_store_is_stale() -> None:
    api = _api(capacity=3)
    asyncio.run(api.add_all(_values(range(5)), "overwrite"))
    with pytest.raises(StaleSequenceError):
        api.read_range(0, 5, 5)
    assert _items(api.read_range(2, 5, 5)) == [2, 3, 4]


# -- damage ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["ring", "store below the head"])
def test_reads_stop_before_a_damaged_record_and_one_starting_there_raises(
    damaged_store: ChannelStore, where: str
) -> None:
    async def main() -> None:
        api = _api(capacity=16, store=damaged_store)
        if where != "ring":
            api._log.evict_to(9)  # all of it below the head: read from the store
        assert _items(api.read_range(0, 100, 100)) == ["v0", "v1", "v2"]
        with pytest.raises(DataLossError) as lost:
            api.read_range(3, 100, 100)
        assert lost.value.lost == (3, 5) and lost.value.head_sequence == 6
        with pytest.raises(DataLossError):
            api.read_range(4, 100, 100)
        assert _items(api.read_range(6, 100, 100)) == ["v6", "v7", "v8"]
        many = await api.read_many(1, 0, 10, None)
        assert _items(many.chunks) == ["v1", "v2"] and many.read_count == 2
        with pytest.raises(DataLossError):
            await api.read_many(3, 0, 10, None)
        with pytest.raises(DataLossError):
            await api.read_one(5)
        assert (await api.read_one(6)).payload.decode() == ["v6"]

    asyncio.run(main())
