"""A store written before elements kept their keys (record format 1) still opens: its
elements come back, keyed None, and new records (format 2) follow them in the same
segment (no Ray).

``data/segment_log_v1`` was written by the code of commit 009056d (format 1), as::

    store = SegmentLogStore(out)
    stamp = 1_767_225_600.0
    three = PickledValues.from_values(["a", "b", "c"])
    store.store_batch(StoredBatch(0, stamp, three, 1, "p1", 0))
    # 3..4: pickled one by one, [{"n": 3}, {"n": 4}], no keys (kind 0)
    # 5..6: pickled one by one, with key hashes [11, 0] (kind 2)
    # 7..9: one list pickle (kind 3); 10..11: one list pickle with key hashes (kind 4)
    # 12..13: Arrow rows {"sku": ["x", "y"], "eur": [1.5, 2.5]} (kind 1)
    store.save_state({"version": 1, "epoch": 1, "next_sequence": 14})
"""

from __future__ import annotations

import shutil
from pathlib import Path

from raytopic.actors.stores.base import StoredBatch
from raytopic.actors.stores.frames import MAGIC, MAGIC_V1
from raytopic.actors.stores.segment_log import SegmentLogStore
from raytopic.core.payloads import ArrowRows, PickledList, PickledValues, encode_values

FIXTURE = Path(__file__).parent / "data" / "segment_log_v1"
STAMP = 1_767_225_600.0

WRITTEN = [
    # (first, stamp offset, kind, values, publisher, batch)
    (0, 0, PickledValues, ["a", "b", "c"], "p1", 0),
    (3, 1, PickledValues, [{"n": 3}, {"n": 4}], "p1", 1),
    (5, 2, PickledValues, [{"n": 5}, {"n": 6}], "p1", 2),
    (7, 3, PickledList, [{"n": 7}, {"n": 8}, {"n": 9}], "p2", 0),
    (10, 4, PickledList, [{"n": 10}, {"n": 11}], "p2", 1),
    (12, 5, ArrowRows, [{"sku": "x", "eur": 1.5}, {"sku": "y", "eur": 2.5}], "w1", 0),
]


def copied(tmp_path: Path) -> Path:
    directory = tmp_path / "channel"
    shutil.copytree(FIXTURE, directory)
    return directory


def test_the_fixture_is_of_format_1() -> None:
    (segment,) = FIXTURE.glob("*.log")
    assert segment.read_bytes()[:4] == MAGIC_V1 != MAGIC


def test_a_format_1_store_opens_with_every_element_keyed_none(tmp_path: Path) -> None:
    store = SegmentLogStore(copied(tmp_path), must_exist=True)
    assert store.damaged() == []
    assert (store.first_sequence(), store.largest_sequence()) == (0, 13)
    batches = list(store.load_batches(0))
    assert len(batches) == len(WRITTEN)
    for got, (first, offset, kind, values, publisher, number) in zip(batches, WRITTEN, strict=True):
        assert (got.first, got.stamp, got.epoch) == (first, STAMP + offset, 1)
        assert (got.publisher_id, got.batch) == (publisher, number)
        assert isinstance(got.payload, kind)
        assert got.payload.decode() == values
        assert got.payload.keys is None  # its key hashes (kinds 2 and 4) are not keys
    assert store.load(6) == {"n": 6}
    assert store.load_state() == {"version": 1, "epoch": 1, "next_sequence": 14}
    store.close()


def test_format_2_records_follow_format_1_ones_and_both_read_back(tmp_path: Path) -> None:
    directory = copied(tmp_path)
    store = SegmentLogStore(directory, must_exist=True)
    keyed = encode_values(["p", "q"], ["k", None])
    store.store_batch(StoredBatch(14, STAMP + 6, keyed, 2, "p3", 0))
    store.close()
    (segment,) = directory.glob("*.log")
    assert segment.read_bytes().count(MAGIC) == 1  # one format 2 record, after the old ones
    reopened = SegmentLogStore(directory, must_exist=True)
    batches = list(reopened.load_batches(12))
    assert [b.first for b in batches] == [12, 14]
    assert batches[0].payload.keys is None
    assert batches[1].payload.decode() == ["p", "q"]
    assert batches[1].payload.keys == ["k", None]
    assert reopened.largest_sequence() == 15
    reopened.close()
