"""Unit tests of the embedded segment-log store (no Ray): appends, reopening, recovery of
torn and damaged records, segment rolling, truncation and retention, the state file."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from raytopic.actors.stores.base import StoredBatch
from raytopic.actors.stores.frames import PREFIX, encode_record
from raytopic.actors.stores.segment_log import SegmentLogStore
from raytopic.core.config import check_sync
from raytopic.core.errors import InvalidArgumentError, StoreError
from raytopic.core.payloads import ArrowRows, PickledValues

from tests.segment_stores import reopen

STAMP = 1_700_000_000.25


def values(first: int, count: int) -> list[bytes]:
    """Distinct values of one size (so every record of ``count`` values is as long)."""
    return [b"value-%06d" % sequence for sequence in range(first, first + count)]


def batch(first: int, count: int = 2, **fields: Any) -> StoredBatch:
    fields.setdefault("stamp", STAMP + first)
    return StoredBatch(first, payload=PickledValues.from_values(values(first, count)), **fields)


def segments(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("*.log"))


def loaded(store: SegmentLogStore, first: int, last: int) -> list[Any]:
    return [store.load(sequence) for sequence in range(first, last + 1)]


def flip_bit(path: Path, offset: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


# -- appends and reads ---------------------------------------------------------------------


def test_an_empty_store(opened, tmp_path: Path) -> None:
    store = opened()
    assert store.largest_sequence() == -1
    assert store.first_sequence() == 0
    assert store.load(0) is None
    assert list(store.load_batches(0)) == []
    assert store.damaged() == []
    assert segments(tmp_path) == []  # opening writes nothing: the first write starts one
    store = reopen(store, opened)
    assert (store.largest_sequence(), store.first_sequence()) == (-1, 0)
    store.store_batch(batch(0))
    assert segments(tmp_path) == ["00000000000000000000.log"]


def test_stored_batches_load_by_sequence_and_as_batches(opened) -> None:
    store = opened()
    store.store_batch(batch(0, 3))
    store.store_batch(batch(3, 3))
    store.store_batch(batch(6, 2))
    assert (store.first_sequence(), store.largest_sequence()) == (0, 7)
    assert loaded(store, 0, 7) == values(0, 8)
    assert store.load(8) is None
    assert store.load(-1) is None
    assert [(b.first, b.last) for b in store.load_batches(0)] == [(0, 2), (3, 5), (6, 7)]
    # a start inside a batch yields that whole batch
    assert [(b.first, b.last) for b in store.load_batches(4)] == [(3, 5), (6, 7)]
    assert [(b.first, b.last) for b in store.load_batches(6)] == [(6, 7)]
    assert list(store.load_batches(8)) == []
    assert [b.payload.decode() for b in store.load_batches(5)] == [values(3, 3), values(6, 2)]


def test_arrow_rows_are_stored_and_loaded_as_dicts(opened) -> None:
    store = opened()
    store.store_batch(
        StoredBatch(0, STAMP, ArrowRows(pa.record_batch({"a": [1, 2], "b": ["x", "y"]})))
    )
    assert store.load(1) == {"a": 2, "b": "y"}
    store = reopen(store, opened)
    assert loaded(store, 0, 1) == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]


def test_store_of_one_value_the_seed_shape(opened) -> None:
    store = opened()
    store.store(0, {"k": [1, 2]})
    store.store(1, "two")
    assert (store.load(0), store.load(1), store.largest_sequence()) == ({"k": [1, 2]}, "two", 1)
    store = reopen(store, opened)
    assert (store.load(0), store.load(1), store.largest_sequence()) == ({"k": [1, 2]}, "two", 1)
    assert [len(b.payload) for b in store.load_batches(0)] == [1, 1]


def test_reopening_recovers_values_stamps_epochs_publishers_and_batch_numbers(opened) -> None:
    store = opened()
    store.store_batch(batch(0, 3, stamp=10.5, epoch=1, publisher_id="pub-é", batch=0))
    store.store_batch(batch(3, 1, stamp=11.75, epoch=1))
    store.store_batch(batch(4, 2, stamp=12.0, epoch=2, publisher_id="other", batch=41))
    store = reopen(store, opened)
    got = [
        (b.first, b.last, b.stamp, b.epoch, b.publisher_id, b.batch, b.payload.decode())
        for b in store.load_batches(0)
    ]
    assert got == [
        (0, 2, 10.5, 1, "pub-é", 0, values(0, 3)),
        (3, 3, 11.75, 1, "", -1, values(3, 1)),
        (4, 5, 12.0, 2, "other", 41, values(4, 2)),
    ]
    assert (store.first_sequence(), store.largest_sequence(), store.damaged()) == (0, 5, [])
    # appends after a reopen go on, and survive the next one
    store.store_batch(batch(6, 2))
    store = reopen(store, opened)
    assert loaded(store, 0, 7) == values(0, 8)


# -- segments --------------------------------------------------------------------------------


def test_segments_roll_past_segment_bytes_and_are_named_by_their_first_sequence(
    opened, tmp_path: Path
) -> None:
    store = opened(segment_bytes=1)  # every record fills its segment
    for first in (0, 3, 5, 12):
        store.store_batch(batch(first, 3 if first == 0 else 2))
    assert segments(tmp_path) == [
        "00000000000000000000.log",
        "00000000000000000003.log",
        "00000000000000000005.log",
        "00000000000000000012.log",
    ]
    assert all(len(name) == 24 for name in segments(tmp_path))
    assert store.load(4) == values(3, 2)[1]
    store = reopen(store, opened, segment_bytes=1)
    assert [b.first for b in store.load_batches(0)] == [0, 3, 5, 12]
    assert (store.first_sequence(), store.largest_sequence()) == (0, 13)
    assert store.load(13) == values(12, 2)[1]


def test_a_segment_holds_records_until_it_reaches_segment_bytes(opened, tmp_path: Path) -> None:
    store = opened()
    store.store_batch(batch(0))
    size = (tmp_path / "00000000000000000000.log").stat().st_size
    store = reopen(store, opened, segment_bytes=2 * size)
    store.store_batch(batch(2))  # the segment reaches 2 records' size: sealed after this one
    store.store_batch(batch(4))
    store.store_batch(batch(6))
    assert segments(tmp_path) == ["00000000000000000000.log", "00000000000000000004.log"]
    assert (tmp_path / "00000000000000000000.log").stat().st_size == 2 * size
    assert (tmp_path / "00000000000000000004.log").stat().st_size == 2 * size
    store = reopen(store, opened, segment_bytes=2 * size)
    assert loaded(store, 0, 7) == values(0, 8)
    store.store_batch(batch(8))  # the reopened active segment is full: a new one
    assert segments(tmp_path)[-1] == "00000000000000000008.log"
    assert loaded(store, 0, 9) == values(0, 10)


# -- torn writes ---------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 3, "all-but-5"])
def test_a_torn_tail_is_cut_off_and_appends_go_on(opened, tmp_path: Path, cut) -> None:
    store = opened()
    store.store_batch(batch(0))
    path = tmp_path / "00000000000000000000.log"
    one = path.stat().st_size
    store.store_batch(batch(2))
    store.store_batch(batch(4))
    store.close()
    cut = one - 5 if cut == "all-but-5" else cut  # 5 bytes left: less than a prefix
    os.truncate(path, 3 * one - cut)

    store = opened()
    assert path.stat().st_size == 2 * one  # the torn bytes are gone from the file
    assert store.damaged() == []
    assert store.largest_sequence() == 3
    assert loaded(store, 0, 5) == [*values(0, 4), None, None]
    assert [b.first for b in store.load_batches(0)] == [0, 2]

    store.store_batch(batch(4, 3))
    assert loaded(store, 4, 6) == values(4, 3)
    store = reopen(store, opened)
    assert store.damaged() == []
    assert store.largest_sequence() == 6
    assert loaded(store, 0, 6) == values(0, 7)
    assert [b.first for b in store.load_batches(0)] == [0, 2, 4]


def test_a_damaged_last_record_of_the_last_segment_is_a_torn_write(opened, tmp_path: Path) -> None:
    store = opened()
    for first in (0, 2, 4):
        store.store_batch(batch(first))
    store.close()
    path = tmp_path / "00000000000000000000.log"
    size = path.stat().st_size
    flip_bit(path, size - 1)  # the last record's last payload byte

    store = opened()
    assert store.damaged() == []
    assert store.largest_sequence() == 3
    assert path.stat().st_size == size * 2 // 3
    assert loaded(store, 0, 5) == [*values(0, 4), None, None]
    store.store_batch(batch(4))
    store = reopen(store, opened)
    assert loaded(store, 0, 5) == values(0, 6)


def test_an_empty_torn_active_segment_keeps_its_sequences_unused(opened, tmp_path: Path) -> None:
    store = opened(segment_bytes=1)
    for first in (0, 2, 4, 6):
        store.store_batch(batch(first))
    store.close()
    last = tmp_path / "00000000000000000006.log"
    os.truncate(last, last.stat().st_size // 2)  # the active segment's only record is torn

    store = opened(segment_bytes=1)
    assert last.stat().st_size == 0
    assert store.largest_sequence() == 5
    assert store.load(6) is None
    store.truncate(6)  # every sealed segment goes
    assert segments(tmp_path) == ["00000000000000000006.log"]
    assert (store.first_sequence(), store.largest_sequence()) == (6, 5)
    store = reopen(store, opened, segment_bytes=1)
    assert (store.first_sequence(), store.largest_sequence()) == (6, 5)
    store.store_batch(batch(6))
    store = reopen(store, opened, segment_bytes=1)
    assert (store.first_sequence(), store.largest_sequence()) == (6, 7)
    assert loaded(store, 6, 7) == values(6, 2)


# -- damaged records -----------------------------------------------------------------------


DAMAGE_SPOTS = {
    "magic": lambda size: 0,
    "checksum": lambda size: 9,
    "header": lambda size: PREFIX.size + 10,
    "payload": lambda size: size - 3,
}


@pytest.mark.parametrize("spot", DAMAGE_SPOTS)
def test_a_damaged_middle_record_is_skipped_and_reported(opened, tmp_path: Path, spot) -> None:
    store = opened()
    store.store_batch(batch(0, 3))
    path = tmp_path / "00000000000000000000.log"
    one = path.stat().st_size
    store.store_batch(batch(3, 3))
    store.store_batch(batch(6, 3))
    store.close()
    flip_bit(path, one + DAMAGE_SPOTS[spot](one), 1)
    original = path.read_bytes()

    store = opened()
    assert store.damaged() == [(3, 5)]
    assert loaded(store, 0, 8) == [*values(0, 3), None, None, None, *values(6, 3)]
    assert [b.first for b in store.load_batches(0)] == [0, 6]
    assert [b.first for b in store.load_batches(4)] == [6]
    assert (store.first_sequence(), store.largest_sequence()) == (0, 8)
    assert path.read_bytes() == original  # damage in the middle is not cut away
    store.store_batch(batch(9))
    store = reopen(store, opened)
    assert store.damaged() == [(3, 5)]
    assert loaded(store, 6, 10) == values(6, 5)


def test_no_altered_payload_is_ever_returned(opened, tmp_path: Path) -> None:
    """Flip each bit of one record's payload in turn: the altered value never comes back."""
    store = opened()
    store.store_batch(batch(0, 1))
    path = tmp_path / "00000000000000000000.log"
    one = path.stat().st_size
    store.store_batch(batch(1, 1))
    store.store_batch(batch(2, 1))
    store.close()
    original = path.read_bytes()
    expected = set(values(0, 3))
    for offset in range(2 * one - 8, 2 * one):  # the middle record's last payload bytes
        for bit in (0, 3, 6):
            data = bytearray(original)
            data[offset] ^= 1 << bit
            path.write_bytes(bytes(data))
            store = opened()
            got = [store.load(sequence) for sequence in range(3)]
            got += [v for b in store.load_batches(0) for v in b.payload.decode()]
            assert set(got) - {None} <= expected, (offset, bit)
            assert got[1] is None
            assert store.damaged() == [(1, 1)]
            store.close()


def test_a_damaged_record_ending_a_sealed_segment_spans_to_the_next_segment(
    opened, tmp_path: Path
) -> None:
    store = opened()
    store.store_batch(batch(0, 2))
    size = (tmp_path / "00000000000000000000.log").stat().st_size
    store = reopen(store, opened, segment_bytes=2 * size)
    store.store_batch(batch(2, 3))  # seals segment 0
    store.store_batch(batch(5, 2))
    store.store_batch(batch(7, 2))
    store.close()
    sealed = tmp_path / "00000000000000000000.log"
    assert segments(tmp_path) == ["00000000000000000000.log", "00000000000000000005.log"]
    flip_bit(sealed, sealed.stat().st_size - 1)

    store = opened(segment_bytes=2 * size)
    assert store.damaged() == [(2, 4)]
    assert loaded(store, 0, 8) == [*values(0, 2), None, None, None, *values(5, 4)]
    assert store.largest_sequence() == 8


@pytest.mark.parametrize("sealed", [False, True], ids=["last-segment", "sealed-segment"])
def test_a_damaged_length_field_in_the_middle_is_not_taken_for_a_torn_tail(
    opened, tmp_path: Path, sealed: bool
) -> None:
    one = sum(len(part) for part in encode_record(batch(0, 3)))
    store = opened(segment_bytes=3 * one)
    for first in (0, 3, 6, 9):
        store.store_batch(batch(first, 3))
    store.close()
    path = tmp_path / "00000000000000000000.log"
    if not sealed:
        (tmp_path / "00000000000000000009.log").unlink()
    flip_bit(path, one + 6, 4)  # the length field's third byte: 1 MiB more, past the file's end

    store = opened(segment_bytes=3 * one)
    assert path.stat().st_size == 3 * one
    assert store.damaged() == [(3, 5)]
    assert loaded(store, 6, 8) == values(6, 3)  # a whole, valid record follows the damage


# -- truncation and retention ------------------------------------------------------------


def four_segments(opened, **options: Any) -> SegmentLogStore:
    """Segments 0, 2, 4 (sealed) and 6 (active), of one 2-value record each."""
    store = opened(segment_bytes=1, **options)
    for first in (0, 2, 4, 6):
        store.store_batch(batch(first))
    return store


@pytest.mark.parametrize(
    ("below", "left"),
    [(0, [0, 2, 4, 6]), (3, [2, 4, 6]), (4, [4, 6]), (5, [4, 6]), (6, [6]), (100, [6])],
)
def test_truncate_deletes_only_sealed_segments_wholly_below(
    opened, tmp_path: Path, below: int, left: list[int]
) -> None:
    store = four_segments(opened)
    store.truncate(below)
    assert segments(tmp_path) == [f"{first:020d}.log" for first in left]
    assert store.first_sequence() == left[0]
    assert store.largest_sequence() == 7
    assert loaded(store, 0, 7) == [None] * left[0] + values(left[0], 8 - left[0])
    assert [b.first for b in store.load_batches(0)] == left
    store = reopen(store, opened, segment_bytes=1)
    assert (store.first_sequence(), store.largest_sequence()) == (left[0], 7)
    assert loaded(store, 0, 7) == [None] * left[0] + values(left[0], 8 - left[0])


def test_after_truncating_everything_sequences_are_never_reused(opened, tmp_path: Path) -> None:
    store = four_segments(opened)
    store.truncate(1 << 40)
    assert segments(tmp_path) == ["00000000000000000006.log"]  # never the active one
    assert store.largest_sequence() == 7
    store = reopen(store, opened, segment_bytes=1)
    assert (store.first_sequence(), store.largest_sequence()) == (6, 7)
    store.store_batch(batch(8))
    store.truncate(1 << 40)
    assert segments(tmp_path) == ["00000000000000000008.log"]
    store = reopen(store, opened, segment_bytes=1)
    assert (store.first_sequence(), store.largest_sequence()) == (8, 9)
    assert loaded(store, 6, 9) == [None, None, *values(8, 2)]


def test_retention_bytes_keeps_the_newest_sealed_segments(opened, tmp_path: Path) -> None:
    size = sum(len(part) for part in encode_record(batch(0)))  # each segment's size
    store = four_segments(opened, retention_bytes=2 * size)
    store.truncate(100)
    assert segments(tmp_path) == [f"{first:020d}.log" for first in (2, 4, 6)]
    assert loaded(store, 2, 5) == values(2, 4)
    assert store.load(1) is None


def test_retention_bytes_below_one_segment_keeps_none(opened, tmp_path: Path) -> None:
    store = four_segments(opened, retention_bytes=1)
    store.truncate(100)
    assert segments(tmp_path) == ["00000000000000000006.log"]


def test_retention_seconds_keeps_recent_segments(opened, tmp_path: Path) -> None:
    now = time.time()
    store = opened(segment_bytes=1, retention_seconds=60)
    store.store_batch(batch(0, stamp=now - 600))
    store.store_batch(batch(2, stamp=now - 120))
    store.store_batch(batch(4, stamp=now - 5))
    store.store_batch(batch(6, stamp=now))
    store.truncate(100)
    assert segments(tmp_path) == [f"{first:020d}.log" for first in (4, 6)]
    store = reopen(store, opened, segment_bytes=1, retention_seconds=60)
    store.truncate(100)  # the stamps come back from the records
    assert segments(tmp_path) == [f"{first:020d}.log" for first in (4, 6)]
    store = reopen(store, opened, segment_bytes=1)
    store.truncate(100)
    assert segments(tmp_path) == ["00000000000000000006.log"]


# -- state -------------------------------------------------------------------------------------


def test_state_round_trips_and_is_replaced_atomically(opened, tmp_path: Path) -> None:
    store = opened()
    assert store.load_state() is None
    first = {"epoch": 3, "groups": {"g": [5, "x"]}, "publishers": {"p": 7}}
    store.save_state(first)
    assert store.load_state() == first
    inode = (tmp_path / "state.json").stat().st_ino
    second = {"epoch": 4, "groups": {}}
    store.save_state(second)
    assert store.load_state() == second
    assert (tmp_path / "state.json").stat().st_ino != inode  # a new file renamed over the old
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".log") == ["state.json"]
    store = reopen(store, opened)
    assert store.load_state() == second


# -- the sync setting (create_topic's, checked by raytopic.core.config) --------------------


@pytest.mark.parametrize(
    ("sync", "parsed"), [("always", "always"), ("write", "write"), (2, 2.0), (0.25, 0.25)]
)
def test_check_sync_accepts(sync: object, parsed: object) -> None:
    assert check_sync(sync) == parsed
    assert type(check_sync(sync)) is type(parsed)


@pytest.mark.parametrize("sync", [0, -1, 0.0, True, False, "never", "1", None, [1]])
def test_check_sync_rejects(sync: object) -> None:
    with pytest.raises(InvalidArgumentError, match="sync"):
        check_sync(sync)


# -- failed writes -------------------------------------------------------------------------


def test_a_failed_write_raises_store_error_and_leaves_the_file_as_it_was(
    opened, tmp_path: Path
) -> None:
    store = opened()
    store.store_batch(batch(0))
    path = tmp_path / "00000000000000000000.log"
    size = path.stat().st_size
    os.close(store._fd)
    try:
        with pytest.raises(StoreError):
            store.store_batch(batch(2))
    finally:
        store._fd = -1  # closed above: the number may belong to another file by now
    assert path.stat().st_size == size
    assert (store.largest_sequence(), store.load(2)) == (1, None)
    with pytest.raises(StoreError):
        store.store_batch(batch(2))  # no open segment
    store = reopen(store, opened)
    assert loaded(store, 0, 2) == [*values(0, 2), None]


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs RLIMIT_FSIZE")
def test_a_short_write_is_cut_back(opened, tmp_path: Path) -> None:
    """The file size limit lets a write through only in part: the store cuts it back."""
    import resource

    store = opened()
    store.store_batch(batch(0))
    path = tmp_path / "00000000000000000000.log"
    size = path.stat().st_size
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, limits[1]))
        with pytest.raises(StoreError):
            store.store_batch(batch(2))
        size_after = path.stat().st_size
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    assert size_after == size
    assert (store.largest_sequence(), store.load(2)) == (1, None)
    store.store_batch(batch(2))  # the store lives on
    store = reopen(store, opened)
    assert store.damaged() == []
    assert loaded(store, 0, 3) == values(0, 4)


# -- opening writes nothing; destroy --------------------------------------------------------


def test_opening_a_missing_directory_writes_nothing_until_the_first_write(tmp_path: Path) -> None:
    directory = tmp_path / "ns" / "topic" / "0"
    store = SegmentLogStore(directory)
    assert (store.largest_sequence(), store.load_state()) == (-1, None)
    store.sync()
    store.close()
    assert not (tmp_path / "ns").exists()  # a refused reopen leaves no trace
    store = SegmentLogStore(directory)
    store.save_state({"epoch": 1})
    store.store_batch(batch(0))
    store.close()
    assert SegmentLogStore(directory).load_state() == {"epoch": 1}
    assert segments(directory) == ["00000000000000000000.log"]


def test_destroy_removes_the_channel_and_then_the_topic_directory(tmp_path: Path) -> None:
    topic = tmp_path / "ns" / "topic"
    stores = [SegmentLogStore(topic / str(channel)) for channel in range(2)]
    for store in stores:
        store.save_state({"epoch": 1})
        store.store_batch(batch(0))
    stores[0].destroy()
    assert sorted(path.name for path in topic.iterdir()) == ["1"]  # the other channel's stays
    with pytest.raises(StoreError, match="closed"):
        stores[0].store_batch(batch(2))  # nothing written after: the directory stays gone
    with pytest.raises(StoreError, match="closed"):
        stores[0].save_state({"epoch": 2})
    stores[1].destroy()
    assert not topic.exists() and (tmp_path / "ns").exists()  # the namespace's is shared
    stores[1].destroy()  # again: nothing left, no error


def test_destroy_finishes_what_a_crash_left_aside(tmp_path: Path) -> None:
    directory = tmp_path / "topic" / "0"
    store = SegmentLogStore(directory)
    store.store_batch(batch(0))
    store.close()
    # A crash after the rename, before the deletion.
    aside = directory.with_name(".0.destroyed")
    directory.rename(aside)
    SegmentLogStore(directory).destroy()
    assert not aside.exists() and not (tmp_path / "topic").exists()
