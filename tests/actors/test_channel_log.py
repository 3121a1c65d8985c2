"""Unit tests of ChannelLog (no Ray): the overflow policies and their acks, room that
counts appends waiting for a sync, durability, a refusing store, reads below the
ring's head from a real segment log, and what a reader behind the head is told."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.segment_ring import Run
from raytopic.actors.stores.base import ChannelStore
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import (
    ChannelFailedError,
    DataLossError,
    StaleSequenceError,
    StoreError,
    TopicFullError,
)
from raytopic.core.payloads import DamagedElements, PickledValues

from tests.seed_store import SeedStore


def _config(capacity: int = 4, ttl: float | None = None, **options: Any) -> TopicConfig:
    return TopicConfig("t", "ns", "t0pic1d", 1, capacity, True, ttl, Overflow.BLOCK, (), **options)


def _log(
    config: TopicConfig, store: Any = None, context: ChannelContext | None = None
) -> ChannelLog:
    context = context or ChannelContext(config, 0, ChannelMetrics(config.name, 0))
    log = ChannelLog(context)
    if store is not None:
        adapted = store if isinstance(store, ChannelStore) else ChannelStore(store)
        start, last = log.open(adapted, 0)
        log.load(start, last, lambda batch: None)
    return log


def _values(count: int, start: int = 0) -> PickledValues:
    return PickledValues.from_values(range(start, start + count))


def _decoded(runs: list[Run]) -> list[Any]:
    return [value for run in runs for value in run.payload.decode()]


class _DamagedEndStore(SeedStore):
    """Holds 0..1 intact; 2..4 were written and found damaged: nothing intact after them."""

    def __init__(self) -> None:
        super().__init__()
        self.store_all(0, ["a", "b"])

    def damaged(self) -> list[tuple[int, int]]:
        return [(2, 4)]

    def largest_sequence(self) -> int:
        return 4


class _RefusingStore(SeedStore):
    def store_all(self, first_sequence: int, items: Sequence[Any]) -> None:
        raise OSError("disk full")


class _BrokenSyncStore(SeedStore):
    def sync(self) -> None:
        raise OSError("fdatasync: I/O error")


# -- overflow policies -----------------------------------------------------------------------------


def test_fail_appends_what_fits_and_says_how_many_were_refused() -> None:
    async def main() -> None:
        log = _log(_config(capacity=4))
        await log.append(_values(3), Overflow.FAIL, None, whole=False)
        ack, change = await log.append(_values(3, 10), Overflow.FAIL, None, whole=False)
        assert (ack.first, ack.accepted, change) == (3, 1, None)
        assert isinstance(ack.error, TopicFullError) and "2 of 3" in str(ack.error)
        assert _decoded(log.read(0, 10)) == [0, 1, 2, 10]

    asyncio.run(main())


def test_fail_with_whole_refuses_the_batch_unless_all_of_it_fits() -> None:
    async def main() -> None:
        log = _log(_config(capacity=4))
        await log.append(_values(3), Overflow.FAIL, None, whole=True)
        ack, _ = await log.append(_values(2, 10), Overflow.FAIL, None, whole=True)
        assert (ack.first, ack.accepted) == (-1, 0)
        assert isinstance(ack.error, TopicFullError) and "none of them" in str(ack.error)
        assert log.ring.tail == 2 and log.next_sequence == 3
        ack, _ = await log.append(_values(1, 10), Overflow.FAIL, None, whole=True)
        assert (ack.first, ack.accepted, ack.error) == (3, 1, None)

    asyncio.run(main())


def test_overwrite_drops_the_oldest_and_acknowledges_every_value() -> None:
    async def main() -> None:
        log = _log(_config(capacity=4))
        await log.append(_values(3), Overflow.OVERWRITE, None, whole=True)
        ack, _ = await log.append(_values(3, 10), Overflow.OVERWRITE, None, whole=True)
        assert (ack.first, ack.accepted, ack.error) == (3, 3, None)
        assert (log.ring.head, log.ring.tail) == (2, 5)
        assert _decoded(log.read(2, 10)) == [2, 10, 11, 12]

    asyncio.run(main())


def test_block_waits_for_room_and_a_batch_above_the_capacity_goes_in_pieces() -> None:
    async def main() -> None:
        log = _log(_config(capacity=4))
        appending = asyncio.ensure_future(log.append(_values(6), Overflow.BLOCK, 5.0, whole=True))
        await asyncio.sleep(0.05)
        assert not appending.done() and log.ring.tail == 3  # the first piece: the capacity
        log.evict_to(2)  # readers released two: room for the rest
        log._context.notify()
        ack, _ = await asyncio.wait_for(appending, 2.0)
        assert (ack.first, ack.accepted, ack.error) == (0, 6, None)
        assert [(first, count) for first, count, _ in ack.runs] == [(0, 4), (4, 2)]
        assert _decoded(log.read(2, 10)) == [2, 3, 4, 5]

    asyncio.run(main())


def test_block_gives_up_at_its_timeout_with_nothing_appended() -> None:
    async def main() -> None:
        log = _log(_config(capacity=2))
        await log.append(_values(2), Overflow.BLOCK, None, whole=True)
        ack, change = await log.append(_values(1), Overflow.BLOCK, 0.05, whole=True)
        assert (ack.first, ack.accepted, change) == (-1, 0, None)
        assert isinstance(ack.error, TopicFullError)
        assert log.ring.tail == 1

    asyncio.run(main())


def test_block_with_values_published_one_by_one_appends_what_fits_and_waits_for_the_rest() -> None:
    """A publisher's batch of values published one by one (``each``) is not a unit:
    what fits goes in at once, and only the rest waits for room."""

    async def main() -> None:
        log = _log(_config(capacity=4))
        await log.append(_values(3), Overflow.BLOCK, None, whole=False, each=True)
        appending = asyncio.ensure_future(
            log.append(_values(3, 10), Overflow.BLOCK, 5.0, whole=False, each=True)
        )
        await asyncio.sleep(0.05)
        assert not appending.done() and log.ring.tail == 3  # 10 is in; 11 and 12 wait
        log.evict_to(2)  # readers released two: room for the rest
        log._context.notify()
        ack, _ = await asyncio.wait_for(appending, 2.0)
        assert (ack.first, ack.accepted, ack.error) == (3, 3, None)
        assert [(first, count) for first, count, _ in ack.runs] == [(3, 1), (4, 2)]
        assert _decoded(log.read(2, 10)) == [2, 10, 11, 12]

    asyncio.run(main())


def test_block_with_values_published_one_by_one_refuses_only_what_found_no_room() -> None:
    async def main() -> None:
        log = _log(_config(capacity=4))
        await log.append(_values(2), Overflow.BLOCK, None, whole=False, each=True)
        ack, _ = await log.append(_values(5, 10), Overflow.BLOCK, 0.05, whole=False, each=True)
        assert (ack.first, ack.accepted) == (2, 2)
        assert isinstance(ack.error, TopicFullError)
        # Each refused value's future shows this error: it counts no batch of the wire.
        assert str(ack.error) == "channel 0 is full (4 elements): no room within 0.05 s"
        assert _decoded(log.read(0, 10)) == [0, 1, 10, 11]

    asyncio.run(main())


def test_fail_with_values_published_one_by_one_names_no_batch_count() -> None:
    async def main() -> None:
        log = _log(_config(capacity=4))
        await log.append(_values(3), Overflow.FAIL, None, whole=False, each=True)
        ack, _ = await log.append(_values(3, 10), Overflow.FAIL, None, whole=False, each=True)
        assert (ack.first, ack.accepted) == (3, 1)
        assert str(ack.error) == "channel 0 is full (4 elements)"

    asyncio.run(main())


def test_an_empty_append_changes_nothing_and_acks_the_tail() -> None:
    async def main() -> None:
        log = _log(_config())
        await log.append(_values(2), Overflow.FAIL, None, whole=False)
        ack, change = await log.append(_values(0), Overflow.FAIL, None, whole=False)
        assert (ack.first, ack.accepted, change) == (1, 0, None)
        assert log.next_sequence == 2

    asyncio.run(main())


# -- a store: room, durability, refusals -----------------------------------------------------------


async def _reader_committing_all_it_sees(log: ChannelLog) -> None:
    """Readers that free every element they can see, every 20 ms."""
    while True:
        await asyncio.sleep(0.02)
        log.evict_to(log.ring.tail + 1)
        log._context.notify()


def test_appends_waiting_for_their_sync_take_room_and_show_in_order_once_durable(
    opened,
) -> None:
    async def main() -> None:
        log = _log(_config(capacity=4, sync="always"), opened())
        first, change_a = await log.append(_values(2), Overflow.FAIL, None, whole=True)
        second, change_b = await log.append(_values(1, 10), Overflow.FAIL, None, whole=True)
        assert (first.first, second.first) == (0, 2)
        assert change_a is not None and change_b is not None and change_b > change_a
        # Not visible to readers yet, but the room is taken and positions are handed out.
        assert log.ring.tail == -1 and log.next_sequence == 3 and log.room() == 1
        refused, _ = await log.append(_values(2), Overflow.FAIL, None, whole=True)
        assert refused.accepted == 0 and isinstance(refused.error, TopicFullError)
        await log.durable(change_b)
        assert log.ring.tail == 2 and log.room() == 1
        assert _decoded(log.read(0, 10)) == [0, 1, 10]
        assert log.store is not None and log.store.largest_sequence() == 2

    asyncio.run(main())


def test_with_sync_write_an_append_is_visible_at_once(opened) -> None:
    async def main() -> None:
        log = _log(_config(sync="write"), opened())
        ack, change = await log.append(_values(2), Overflow.FAIL, None, whole=True)
        assert (ack.first, ack.accepted) == (0, 2)
        assert change is not None and log.ring.tail == 1 and log.room() == 2
        await log.durable(change)  # nothing to wait for
        assert _decoded(log.read(0, 10)) == [0, 1]

    asyncio.run(main())


def test_a_failed_sync_fails_the_channel_and_the_append_stays_invisible() -> None:
    async def main() -> None:
        config = _config(sync="always")
        context = ChannelContext(config, 0, ChannelMetrics(config.name, 0))
        log = _log(config, _BrokenSyncStore(), context)
        _, change = await log.append(_values(1), Overflow.FAIL, None, whole=True)
        with pytest.raises(ChannelFailedError, match="fdatasync failed"):
            await log.durable(change)
        assert context.failure is not None and "I/O error" in context.failure
        assert log.ring.tail == -1

    asyncio.run(main())


def test_a_block_batch_above_the_capacity_completes_with_sync_always_as_readers_free_room(
    opened,
) -> None:
    async def main() -> None:
        log = _log(_config(capacity=4, sync="always"), opened())

        reader = asyncio.ensure_future(_reader_committing_all_it_sees(log))
        try:
            ack, change = await log.append(_values(6), Overflow.BLOCK, 1.0, whole=True)
        finally:
            reader.cancel()
        await log.durable(change)
        assert (ack.accepted, ack.error) == (6, None)

    asyncio.run(main())


def test_a_block_append_behind_an_unsynced_one_completes_as_readers_free_room(opened) -> None:
    # One call of a publisher's pieces (AppendPieces: publish_batch(ref=False) parts
    # that coalesced) syncs once, after its last piece. A piece that waited for room
    # made only its own appends durable first, not the earlier pieces': those held the
    # room unseen by readers, who could free none. Every later piece waited its whole
    # block_timeout and failed (TopicFullError for 400 of 1,000 values with a member
    # draining, a store, 2 channels of capacity 200).
    async def main() -> None:
        log = _log(_config(capacity=4, sync="always"), opened())

        reader = asyncio.ensure_future(_reader_committing_all_it_sees(log))
        try:
            first, _ = await log.append(_values(3), Overflow.BLOCK, 1.0, whole=True)
            second, change = await log.append(_values(3, 10), Overflow.BLOCK, 1.0, whole=True)
        finally:
            reader.cancel()
        await log.durable(change)
        assert (first.accepted, second.accepted, second.error) == (3, 3, None)
        assert second.first == 3

    asyncio.run(main())


@pytest.mark.parametrize("policy", [Overflow.FAIL, Overflow.BLOCK, Overflow.OVERWRITE])
def test_a_store_that_refuses_the_write_gives_store_error_and_nothing_is_appended(
    policy: Overflow,
) -> None:
    async def main() -> None:
        store = _RefusingStore()
        log = _log(_config(), store)
        ack, change = await log.append(_values(2), policy, 1.0, whole=True)
        assert (ack.first, ack.accepted, change) == (-1, 0, None)
        assert isinstance(ack.error, StoreError) and "disk full" in str(ack.error)
        assert log.next_sequence == 0 and log.room() == 4 and log.ring.tail == -1
        assert store.items == {}

    asyncio.run(main())


# -- reading below the head ------------------------------------------------------------------------


def test_below_the_head_reads_come_from_the_store_up_to_the_head(opened) -> None:
    async def main() -> None:
        log = _log(_config(capacity=10, sync="write"), opened())
        for first in range(0, 10, 2):
            await log.append(_values(2, first), Overflow.FAIL, None, whole=True)
        assert log.evict_to(6) == 6  # every group committed 0..5
        runs = log.read(1, 10)
        assert _decoded(runs) == [1, 2, 3, 4, 5]  # stops at the head: the ring has the rest
        assert runs[0].first == 1 and runs[-1].last == 5
        assert _decoded(log.read(6, 10)) == [6, 7, 8, 9]
        assert log.kept_below_head(1)

    asyncio.run(main())


@pytest.mark.parametrize(("retention", "kept"), [(None, False), (60.0, True)])
def test_below_the_head_only_what_the_capacity_or_retention_keeps_is_readable(
    opened, retention: float | None, kept: bool
) -> None:
    async def main() -> None:
        config = _config(capacity=4, sync="write", retention_seconds=retention)
        log = _log(config, opened())
        await log.append(_values(4), Overflow.FAIL, None, whole=True)
        log.evict_to(4)
        await log.append(_values(4, 4), Overflow.FAIL, None, whole=True)  # tail 7
        # More than a capacity behind the tail: gone for readers unless retention keeps it.
        assert log.kept_below_head(0) is kept
        assert log.kept_below_head(4)  # the head itself
        assert not log.kept_below_head(8)  # never appended

    asyncio.run(main())


@pytest.mark.parametrize(("retention", "kept"), [(None, False), (60.0, True)])
def test_an_element_the_ttl_dropped_is_gone_for_readers_unless_retention_keeps_it(
    opened, retention: float | None, kept: bool
) -> None:
    async def main() -> None:
        config = _config(capacity=10, sync="write", ttl=0.05, retention_seconds=retention)
        log = _log(config, opened())
        await log.append(_values(3), Overflow.FAIL, None, whole=True)
        await asyncio.sleep(0.1)
        assert log.ring.head == 3  # expired, though within a capacity of the tail
        assert log.kept_below_head(0) is kept
        assert log.kept_below_head(2) is kept

    asyncio.run(main())


def test_below_the_head_without_a_store_is_stale_and_readers_resume_at_the_head() -> None:
    async def main() -> None:
        log = _log(_config(capacity=3))
        await log.append(_values(5), Overflow.OVERWRITE, None, whole=True)
        assert log.ring.head == 2
        with pytest.raises(StaleSequenceError) as stale:
            log.read(0, 5)
        assert stale.value.head_sequence == 2
        assert not log.kept_below_head(1)
        assert log.resume_point(0) == 2

    asyncio.run(main())


def test_a_reader_below_what_the_store_kept_resumes_at_the_oldest_stored(opened) -> None:
    async def main() -> None:
        # One record per segment: truncation drops whole records.
        log = _log(_config(capacity=10, sync="write"), opened(segment_bytes=1))
        for first in range(0, 10, 2):
            await log.append(_values(2, first), Overflow.FAIL, None, whole=True)
        log.evict_to(5)
        log.release()  # the store drops the segments wholly below the head: 0..3
        assert log.store_first() == 4
        assert log.resume_point(1) == 4  # the oldest the store still has
        assert log.resume_point(4) == 5  # read from the store: resume at the head
        with pytest.raises(StaleSequenceError):
            log.read(1, 3)
        assert _decoded(log.read(4, 3)) == [4]

    asyncio.run(main())


def test_records_the_state_knew_of_but_the_store_lost_are_damage_never_reused() -> None:
    async def main() -> None:
        store = SeedStore()
        store.store_all(0, ["a", "b"])
        log = _log(_config(capacity=10))
        start, last = log.open(ChannelStore(store), saved_next=5)  # 2..4 cut off on disk
        log.load(start, last, lambda batch: None)
        assert (start, last) == (0, 4) and log.damage.ranges == [(2, 4)]
        runs = log.read(0, 10)
        assert isinstance(runs[-1].payload, DamagedElements) and runs[-1].first == 2
        assert _decoded(log.read_readable(0, 10)) == ["a", "b"]
        with pytest.raises(DataLossError) as lost:
            log.read_readable(2, 10)
        assert lost.value.head_sequence == 5
        ack, _ = await log.append(_values(1), Overflow.FAIL, None, whole=True)
        assert ack.first == 5

    asyncio.run(main())


def test_a_damaged_range_in_the_ring_is_read_as_one_loss() -> None:
    log = _log(_config(capacity=10), _DamagedEndStore())
    assert (log.ring.head, log.ring.tail) == (0, 4)
    assert _decoded(log.read_span(0, 100, 100)) == ["a", "b"]
    with pytest.raises(DataLossError) as lost:
        log.read_span(3, 100, 100)
    assert lost.value.lost == (2, 4) and lost.value.head_sequence == 5


def test_a_damaged_range_ending_the_store_below_the_head_is_read_as_one_loss() -> None:
    log = _log(_config(capacity=10), _DamagedEndStore())
    log.evict_to(5)  # every reader is past it: below the head now
    assert log.kept_below_head(2)
    with pytest.raises(DataLossError) as lost:
        log.read_readable(2, 10)
    assert lost.value.lost == (2, 4)
