"""Compaction's file work in the embedded store: read what sealed segments hold, rewrite
them without the elements a pass removes, and swap the new files in as one atomic
step. No Ray; no rules (what survives is :mod:`raytopic.actors.compaction_rules`'s).

A pass only ever rewrites *sealed* segments (the store seals its active one
first), so the channel appends on while the files are written. Files, in the
store's directory::

    compacting/<first>.log   the rewritten segments (same names as the ones they replace)
    swap.json                the commit point: {"add": [names]}

The steps, and what a crash at each leaves (the store's open redoes or undoes
them, :func:`recover`):

1. Each rewritten segment is written to ``compacting/``, then every file and
   the folder are synced. A crash: ``compacting/`` is deleted on open; the old
   set stands.
2. ``swap.tmp`` is written, synced and renamed to ``swap.json``, and the
   directory synced: **the commit point**. From here the new set stands.
3. Each new file is renamed over its old namesake (one atomic step each; a
   reader never sees a half-written segment), and the directory synced. A
   crash: the open renames the rest.
4. ``swap.json`` and ``compacting/`` are deleted (a rewritten segment keeps
   at least one record, covering its positions: none vanishes). A crash: the
   open deletes them.

So a channel killed mid-compaction recovers the old set or the new one, never
a mix: a tombstone removed in the new set never meets, after a restart, an
older value of its key that the old set kept (nats-server#8505).

A rewritten segment keeps every record whose elements all survive byte for
byte; the survivors of the others are merged into compacted records (format 2,
flag GAPPED: each element's position and time stamp listed), whose covered
positions join up with their neighbours' so that only a damaged record's
positions stay a hole (and are reported again on open).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from raytopic.actors.stores.base import StoredBatch
from raytopic.actors.stores.frames import decode_record, encode_record, read_frame
from raytopic.core.payloads import Payload, PickledValues, join_payloads, mergeable

logger = logging.getLogger(__name__)

__all__ = [
    "COMPACTING",
    "MERGED_RECORD_BYTES",
    "MERGED_RECORD_ELEMENTS",
    "SWAP",
    "NewSegment",
    "RecordSpan",
    "abandon",
    "commit",
    "finish",
    "move_into_place",
    "read_batches",
    "recover",
    "rewrite_segment",
]

COMPACTING = "compacting"
"""The folder a pass writes its segments into."""
SWAP = "swap.json"
"""The file whose presence commits a pass."""
_SWAP_TEMPORARY = "swap.tmp"

MERGED_RECORD_ELEMENTS = 10_000
"""Most elements of one compacted record (the survivors of several appends)."""
MERGED_RECORD_BYTES = 4 * 1024 * 1024
"""...and most bytes of their values."""


@dataclass(frozen=True, slots=True)
class RecordSpan:
    """Where a record lies in its segment file, and what it covers."""

    first: int
    span: int
    stamp: float
    offset: int
    size: int
    count: int


@dataclass(slots=True)
class NewSegment:
    """A rewritten segment: its name, size and records (the store's index of it)."""

    first: int
    name: str
    size: int = 0
    records: list[RecordSpan] = field(default_factory=list)
    last_stamp: float = 0.0


def read_batches(path: Path, records: Sequence[RecordSpan]) -> Iterator[StoredBatch]:
    """The batches of ``records`` in the (sealed) segment file at ``path``, in order.

    Raises:
        OSError: the file cannot be read.
        CorruptRecord: a record no longer checks (the file changed under the pass).
    """
    data = memoryview(path.read_bytes())
    for record in records:
        yield decode_record(read_frame(data, record.offset))


def rewrite_segment(
    path: Path,
    records: Sequence[RecordSpan],
    removed: np.ndarray,
    folder: Path,
) -> NewSegment | None:
    """Write the segment at ``path`` without the elements at the sequences in
    ``removed`` (ascending) into ``folder`` (same name), synced; None (nothing
    written) when it holds none of them.

    Raises:
        OSError: a file could not be read or written.
    """
    data = memoryview(path.read_bytes())
    batches = [decode_record(read_frame(data, record.offset)) for record in records]
    masks = [_kept(batch, removed) for batch in batches]
    if all(mask is None for mask in masks):
        return None
    first = int(path.stem)
    out = NewSegment(first, path.name)
    folder.mkdir(exist_ok=True)
    with open(folder / path.name, "wb") as file:
        writer = _Writer(file, out)
        for record, batch, mask in zip(records, batches, masks, strict=True):
            if writer.cover_end is not None and record.first > writer.cover_end:
                writer.flush()  # a damaged record lay between: its hole stays a hole
            if mask is None:
                writer.flush()
                writer.write_raw(data[record.offset : record.offset + record.size], record)
            else:
                writer.add(batch, mask)
        writer.flush()
        file.flush()
        os.fsync(file.fileno())
    return out


class _Writer:
    """Writes a rewritten segment's records: raw copies, and merged survivors."""

    def __init__(self, file: object, out: NewSegment) -> None:
        self._file = file
        self._out = out
        self._parts: list[tuple[Payload, np.ndarray, np.ndarray]] = []
        self._epoch = 0
        self._latest = 0.0  # the newest append time of the records buffered
        self.cover_start: int | None = None
        self.cover_end: int | None = None  # the first position after what is buffered

    def write_raw(self, frame: memoryview, record: RecordSpan) -> None:
        self._append(bytes(frame), record.first, record.span, record.stamp, record.count)
        self._out.last_stamp = max(self._out.last_stamp, record.stamp)
        self.cover_start = self.cover_end = record.first + record.span

    def add(self, batch: StoredBatch, keep: np.ndarray) -> None:
        """Buffer the survivors of ``batch`` (their positions joining the buffer's)."""
        chosen = np.flatnonzero(keep)
        sequences = _sequences(batch)[chosen]
        stamps = _stamps(batch)[chosen]
        payload = batch.payload.take(chosen.tolist()) if len(chosen) else None
        if payload is not None and self._parts:
            held = sum(len(part[0]) for part in self._parts)
            size = sum(part[0].nbytes for part in self._parts)
            if (
                not mergeable(self._parts[-1][0], payload)
                or held + len(payload) > MERGED_RECORD_ELEMENTS
                or size + payload.nbytes > MERGED_RECORD_BYTES
            ):
                self.flush()
        if self.cover_start is None:
            self.cover_start = batch.first
            self._epoch = batch.epoch
        self.cover_end = batch.first + batch.covered
        self._latest = max(self._latest, float(_stamps(batch).max(initial=batch.stamp)))
        if payload is not None:
            self._parts.append((payload, sequences, stamps))

    def flush(self) -> None:
        """Write what is buffered as one compacted record (an empty one if nothing
        survived: its positions still join up)."""
        if self.cover_start is None or self.cover_end is None:
            return
        start, end = self.cover_start, self.cover_end
        if end > start:
            if self._parts:
                payload = join_payloads([part[0] for part in self._parts])
                sequences = np.concatenate([part[1] for part in self._parts])
                stamps = np.concatenate([part[2] for part in self._parts])
            else:
                payload = PickledValues(b"", np.empty(0, dtype=np.int64))
                sequences = np.empty(0, dtype=np.int64)
                stamps = np.empty(0, dtype=np.float64)
            # An empty record's stamp is its positions' latest append: what retention
            # measures its segment's age by.
            stamp = float(stamps[0]) if len(stamps) else self._latest
            batch = StoredBatch(
                start, stamp, payload, self._epoch, "", -1, end - start, sequences, stamps
            )
            frame = b"".join(bytes(part) for part in encode_record(batch))
            self._append(frame, start, end - start, stamp, len(payload))
            self._out.last_stamp = max(self._out.last_stamp, self._latest)
        self._parts = []
        self._latest = 0.0
        self.cover_start = self.cover_end = None

    def _append(self, frame: bytes, first: int, span: int, stamp: float, count: int) -> None:
        out = self._out
        self._file.write(frame)  # type: ignore[attr-defined]
        out.records.append(RecordSpan(first, span, stamp, out.size, len(frame), count))
        out.size += len(frame)


def _sequences(batch: StoredBatch) -> np.ndarray:
    if batch.sequences is not None:
        return batch.sequences
    return np.arange(batch.first, batch.first + len(batch.payload), dtype=np.int64)


def _stamps(batch: StoredBatch) -> np.ndarray:
    if batch.stamps is not None:
        return batch.stamps
    return np.full(len(batch.payload), batch.stamp, dtype=np.float64)


def _kept(batch: StoredBatch, removed: np.ndarray) -> np.ndarray | None:
    """Which elements of ``batch`` survive, or None when all of them do."""
    if not len(removed) or not len(batch.payload):
        return None
    sequences = _sequences(batch)
    low = np.searchsorted(removed, sequences[0])
    high = np.searchsorted(removed, sequences[-1], side="right")
    if low == high:
        return None
    return ~np.isin(sequences, removed[low:high], assume_unique=True)


def sync_directory(directory: Path) -> None:
    """fsync a directory, so the names made or renamed in it outlive a crash."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(directory: Path, add: Sequence[str]) -> None:
    """Step 2: the commit point (after the new files are written and synced).

    Raises:
        OSError: it could not be written (the pass did not commit).
    """
    folder = directory / COMPACTING
    if folder.exists():
        sync_directory(folder)
    temporary = directory / _SWAP_TEMPORARY
    with open(temporary, "w") as file:
        json.dump({"add": list(add)}, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, directory / SWAP)
    sync_directory(directory)


def move_into_place(directory: Path, names: Sequence[str]) -> None:
    """Step 3: each new file over its namesake (those moved already are skipped)."""
    folder = directory / COMPACTING
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.replace(folder / name, directory / name)


def finish(directory: Path) -> None:
    """Step 4 (and the end of step 3): sync the renames, then delete the commit and
    the folder."""
    sync_directory(directory)
    with contextlib.suppress(FileNotFoundError):
        (directory / SWAP).unlink()
    abandon(directory)


def abandon(directory: Path) -> None:
    """Forget a pass's folder (one that did not commit, or whose files are in place)."""
    shutil.rmtree(directory / COMPACTING, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        (directory / _SWAP_TEMPORARY).unlink()


def recover(directory: Path) -> None:
    """On open: finish a committed pass (steps 3 and 4), or forget one that did not
    commit (its folder and temporary file).

    Raises:
        OSError: the files could not be moved or deleted.
        ValueError: ``swap.json`` is unreadable (it is synced before it is renamed
            into place, so this is damage).
    """
    swap = directory / SWAP
    if swap.exists():
        plan = json.loads(swap.read_text())
        logger.info("%s: finishing a compaction cut short (%s)", directory, plan)
        move_into_place(directory, plan["add"])
        finish(directory)
        return
    if (directory / COMPACTING).exists():
        logger.info("%s: a compaction that did not commit is forgotten", directory)
    abandon(directory)
