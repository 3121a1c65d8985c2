"""Compaction's file work in the embedded store (no Ray): compacted records, rewritten
segments, and the swap, cut short at every step: the store reopens with the old set or
the new one, never a mix."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from raytopic.actors.stores import segment_compaction
from raytopic.actors.stores.base import StoredBatch
from raytopic.actors.stores.frames import decode_record, encode_record, peek_range, read_frame
from raytopic.actors.stores.segment_log import SegmentLogStore
from raytopic.core.payloads import TOMBSTONE, PickledValues, encode_values

STAMP = 1_800_000_000.0


def keyed(first: int, keys: list[str], epoch: int = 1) -> StoredBatch:
    """A publisher's batch: values ``"<key>@<sequence>"`` under ``keys``."""
    values = [f"{key}@{first + i}" for i, key in enumerate(keys)]
    return StoredBatch(first, STAMP + first, encode_values(values, list(keys)), epoch, "p", first)


def contents(store: SegmentLogStore) -> list[tuple[int, object, object, float]]:
    """(sequence, key, value, stamp) of every element the store holds, in order."""
    out = []
    for batch in store.load_batches(0):
        sequences = (
            range(batch.first, batch.first + len(batch.payload))
            if batch.sequences is None
            else batch.sequences.tolist()
        )
        stamps = (
            [batch.stamp] * len(batch.payload) if batch.stamps is None else batch.stamps.tolist()
        )
        keys = batch.payload.keys or [None] * len(batch.payload)
        out.extend(zip(sequences, keys, batch.payload.decode(), stamps, strict=True))
    return out


def test_a_compacted_record_round_trips_its_positions_stamps_and_span() -> None:
    payload = PickledValues.from_pickles([pickle.dumps("a"), TOMBSTONE], ["a", "b"])
    batch = StoredBatch(10, 5.0, payload, 2, "", -1, 20, np.array([12, 27]), np.array([5.0, 7.5]))
    record = b"".join(bytes(part) for part in encode_record(batch))
    frame = read_frame(memoryview(record), 0)
    assert peek_range(frame) == (10, 20, 5.0, 2)
    back = decode_record(frame)
    assert (back.first, back.span, back.covered, back.last) == (10, 20, 20, 29)
    assert back.sequences.tolist() == [12, 27] and back.stamps.tolist() == [5.0, 7.5]
    assert back.payload.decode() == ["a", None] and back.payload.keys == ["a", "b"]
    assert back.payload.tombstones().tolist() == [False, True]
    empty = StoredBatch(
        3,
        0.0,
        PickledValues(b"", np.empty(0, np.int64)),
        1,
        "",
        -1,
        4,
        np.empty(0, np.int64),
        np.empty(0),
    )
    frame = read_frame(memoryview(b"".join(bytes(p) for p in encode_record(empty))), 0)
    assert peek_range(frame) == (3, 4, 0.0, 0) and len(decode_record(frame).payload) == 0


def filled(directory: Path) -> SegmentLogStore:
    """A store of two sealed segments and an active one (segments of 3 records)."""
    store = SegmentLogStore(directory, segment_bytes=1)  # every record seals its segment
    store.store_batch(keyed(0, ["a", "b", "a"]))
    store.store_batch(keyed(3, ["c", "b"]))
    store.store_batch(keyed(5, ["a", "d"]))
    store.sync()
    return store


def rewrite(store: SegmentLogStore, removed: list[int]) -> list[segment_compaction.NewSegment]:
    sealed = store.sealed()
    folder = store.directory / segment_compaction.COMPACTING
    out = []
    for path, records in sealed:
        new = segment_compaction.rewrite_segment(path, records, np.array(removed), folder)
        if new is not None:
            out.append(new)
    return out


def test_a_pass_rewrites_only_the_segments_that_lose_elements(tmp_path: Path) -> None:
    store = filled(tmp_path / "c")
    before = contents(store)
    new = rewrite(store, [0, 4])  # a@0 and b@4 go; the segment of 5..6 keeps all
    assert [segment.name for segment in new] == [
        "00000000000000000000.log",
        "00000000000000000003.log",
    ]
    segment_compaction.commit(store.directory, [segment.name for segment in new])
    store.install(new)
    segment_compaction.finish(store.directory)
    store.compaction_ended()
    expected = [row for row in before if row[0] not in (0, 4)]
    assert contents(store) == expected
    assert store.load(0) is None and store.load(1) == "b@1" and store.load(4) is None
    assert (store.first_sequence(), store.largest_sequence()) == (0, 6)
    assert not (store.directory / segment_compaction.SWAP).exists()
    store.store_batch(keyed(7, ["e"]))  # appends go on after a pass
    store.close()
    reopened = SegmentLogStore(tmp_path / "c")
    assert contents(reopened) == [*expected, (7, "e", "e@7", STAMP + 7)]
    assert reopened.damaged() == []
    assert reopened.first_of_newest(3) == 5  # the newest 3 elements: 5, 6, 7
    assert reopened.first_of_newest(10) == 0


def test_a_record_that_loses_everything_still_covers_its_positions(tmp_path: Path) -> None:
    store = filled(tmp_path / "c")
    new = rewrite(store, [3, 4])  # all of the record 3..4
    segment_compaction.commit(store.directory, [segment.name for segment in new])
    store.install(new)
    segment_compaction.finish(store.directory)
    store.close()
    reopened = SegmentLogStore(tmp_path / "c")
    assert [row[0] for row in contents(reopened)] == [0, 1, 2, 5, 6]
    assert reopened.damaged() == []  # an empty record, not a hole


STEPS = ["written", "committed", "moved", "finished"]


@pytest.mark.parametrize("cut", STEPS)
def test_a_pass_cut_short_at_any_step_reopens_old_or_new_never_a_mix(
    tmp_path: Path, cut: str
) -> None:
    directory = tmp_path / "c"
    store = filled(directory)
    old = contents(store)
    new = rewrite(store, [0, 1])
    names = [segment.name for segment in new]
    if cut != "written":
        segment_compaction.commit(directory, names)
    if cut in ("moved", "finished"):
        segment_compaction.move_into_place(directory, names[:1])  # cut inside step 3
    if cut == "finished":
        segment_compaction.move_into_place(directory, names)
        segment_compaction.finish(directory)
    # The process dies here: nothing more of this store object runs.
    crashed = tmp_path / "crashed"
    shutil.copytree(directory, crashed)
    reopened = SegmentLogStore(crashed)
    got = contents(reopened)
    if cut == "written":
        assert got == old  # not committed: the old set
    else:
        assert got == [row for row in old if row[0] not in (0, 1)]  # the new set, whole
    assert reopened.damaged() == []
    assert not (crashed / segment_compaction.COMPACTING).exists()
    assert not (crashed / segment_compaction.SWAP).exists()
