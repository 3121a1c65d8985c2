"""The embedded store: an append-only segment log per channel, plus a small state file.

Files in the store's directory::

    00000000000000000000.log   segments, named by the first sequence they hold
    00000000000001048576.log   (the last one is written to; older ones are sealed)
    state.json                 the channel's whole state (epoch, group positions,
                               publisher tracks, readers) as of one generation
    state-0000000003.changes   the changes to it since (generation 3's state log)

Each append is one record (:mod:`raytopic.actors.stores.frames`), written
with one ``writev``; :meth:`SegmentLogStore.sync` makes what was written
durable. When the channel calls it follows the topic's ``sync``:

- ``"always"`` (default): the channel acknowledges an append only after an
  ``fdatasync`` covering its record (one sync serves every append waiting on
  it: see :class:`raytopic.actors.stores.group_sync.GroupSync`).
- ``"write"``: acknowledged once written to the file: survives a process kill,
  not an OS crash.
- a number of seconds: synced in the background at that interval; a crash of
  the OS loses at most that much.

Opening a directory recovers it: every record's checksum is checked, a record
cut short at the end (a torn write) is truncated away, and a damaged record
in the middle is skipped and reported (:meth:`damaged`); its payload is never
decoded.

The state: ``state.json`` is ``{"log_generation": g, "state": {...}}``; each
:meth:`SegmentLogStore.append_state` appends one record
(:mod:`raytopic.actors.stores.state_log`) to generation g's log and syncs it,
so a commit writes in proportion to what it changed. When the log outgrows
the state file a new state file (generation g + 1) replaces both (see
:class:`_StateFiles` for the order of the steps and why a crash at any point
recovers).
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from raytopic.actors.stores import segment_compaction
from raytopic.actors.stores.base import RingbufferStore, StoredBatch
from raytopic.actors.stores.frames import (
    CorruptRecord,
    TornRecord,
    decode_record,
    encode_record,
    find_frame,
    peek_range,
    read_frame,
)
from raytopic.actors.stores.segment_compaction import NewSegment, RecordSpan, sync_directory
from raytopic.actors.stores.state_log import StateChange, apply_changes, decode_log, encode_changes
from raytopic.core.errors import StoreError

logger = logging.getLogger(__name__)

__all__ = ["SegmentLogStore"]

SEGMENT_BYTES = 64 * 1024 * 1024
"""A segment is sealed and a new one started past this size."""

STATE_LOG_BYTES = 256 * 1024
"""The state log is compacted into a new state file past this size (or past
twice the state file's, if that is larger)."""

_STATE = "state.json"
_STATE_TEMPORARY = "state.tmp"
_STATE_LOG = "state-{:010d}.changes"
_STATE_LOG_GLOB = "state-*.changes"
_SUFFIX = ".log"


@dataclass(slots=True)
class _Record:
    first: int
    span: int  # positions it covers (see raytopic.actors.stores.frames)
    stamp: float
    segment: int  # first sequence of its segment (the file name)
    offset: int
    size: int
    count: int  # elements it holds (fewer than span once compacted)


@dataclass(slots=True)
class _Segment:
    first: int
    path: Path
    size: int
    last_stamp: float = 0.0


class SegmentLogStore(RingbufferStore):
    """Append-only segment log of one channel.

    Args:
        directory: The channel's own directory (made by the first write if missing).
        retention_bytes: Keep up to this many bytes of segments below the ring's
            head readable through ``load`` (Kafka's retention.bytes); None: 0.
        retention_seconds: Keep segments below the ring's head this long after
            their last append (Kafka's retention.ms); None: 0.
        segment_bytes: Size at which a segment is sealed.
        must_exist: Refuse to start an empty store (a restarted channel's
            directory must hold its state file).
        state_log_bytes: The state log is compacted past this size (or twice
            the state file's, if larger).

    Raises:
        StoreError: ``must_exist`` and the directory holds no store.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        retention_bytes: int | None = None,
        retention_seconds: float | None = None,
        segment_bytes: int = SEGMENT_BYTES,
        must_exist: bool = False,
        state_log_bytes: int = STATE_LOG_BYTES,
    ) -> None:
        self.directory = Path(directory)
        self._retention_bytes = retention_bytes or 0
        self._retention_seconds = retention_seconds or 0.0
        self._segment_bytes = segment_bytes
        self._segments: list[_Segment] = []
        self._records: list[_Record] = []
        self._firsts: list[int] = []  # parallel to _records, for bisect
        self._damaged: list[tuple[int, int]] = []
        self._cache: dict[int, memoryview] = {}  # segment -> bytes read at open
        self._lock = threading.Lock()  # the fds a sync thread may be using
        self._fd = -1
        self._unsynced_fds: list[int] = []  # sealed segments not yet synced, then closed
        self._dir_dirty = False
        self._closed = False
        self._compacting = False  # a pass holds the sealed segments (see sealed())
        if must_exist and not (self.directory / _STATE).exists():
            raise StoreError(
                f"{self.directory} holds no store: is the shared directory mounted here?"
            )
        self._state = _StateFiles(self.directory, state_log_bytes)
        self._open()

    # -- opening and recovery ----------------------------------------------------------

    def _open(self) -> None:
        """Index what the directory holds. Opening writes nothing but the repairs of a
        crash (a torn tail cut off, a compaction pass cut short finished or
        forgotten): a directory is made, and a segment started, by the first write."""
        try:
            segment_compaction.recover(self.directory)
        except (OSError, ValueError) as error:
            raise StoreError(
                f"{self.directory}: a compaction cannot be finished: {error}"
            ) from error
        paths = sorted(self.directory.glob("*" + _SUFFIX))
        for index, path in enumerate(paths):
            first = int(path.stem)
            data = memoryview(path.read_bytes())
            end = self._scan(first, data, last=index == len(paths) - 1)
            if end < len(data):
                logger.warning(
                    "%s: torn tail: %d bytes after the last whole record cut off",
                    path,
                    len(data) - end,
                )
                os.truncate(path, end)
                data = data[:end]
            stamp = (
                self._records[-1].stamp
                if self._records and self._records[-1].segment == first
                else 0.0
            )
            self._segments.append(_Segment(first, path, end, stamp))
            self._cache[first] = data
        if self._segments:
            active = self._segments[-1]
            self._fd = os.open(active.path, os.O_WRONLY | os.O_APPEND)

    def _scan(self, segment: int, data: memoryview, *, last: bool) -> int:
        """Index the records of one segment; return where its valid bytes end."""
        offset = 0
        while offset < len(data):
            try:
                frame = read_frame(data, offset)
            except (TornRecord, CorruptRecord) as error:
                # A damaged length field looks like a torn record: it is a torn
                # tail only if it is short and no whole record follows. A whole
                # record with a bad checksum was written, maybe acknowledged:
                # damage, reported, never silently cut.
                resume = find_frame(data, offset + 1)
                if resume is None:
                    if last and isinstance(error, TornRecord):
                        return offset  # a write cut short by a crash
                    self._damage(segment, data, offset, len(data))
                    return offset if last else len(data)
                offset = self._damage(segment, data, offset, resume)
                continue
            first, span, stamp, count = peek_range(frame)
            self._add_record(_Record(first, span, stamp, segment, offset, frame.size, count))
            offset += frame.size
        return offset

    def _damage(self, segment: int, data: memoryview, start: int, end: int) -> int:
        """Record the sequences between the good records around ``[start, end)`` as damaged."""
        before = self._records[-1].first + self._records[-1].span if self._records else segment
        after = None
        if end < len(data):
            after = peek_range(read_frame(data, end)).first
        last = (after - 1) if after is not None else max(before, self._next_after(segment)) - 1
        if last >= before:
            self._damaged.append((before, last))
        logger.error(
            "%s: damaged bytes %d..%d (sequences %d..%d): skipped, never delivered",
            self.directory,
            start,
            end,
            before,
            last,
        )
        return end

    def _next_after(self, segment: int) -> int:
        later = [int(p.stem) for p in self.directory.glob("*" + _SUFFIX) if int(p.stem) > segment]
        return min(later) if later else segment

    def _add_record(self, record: _Record) -> None:
        self._records.append(record)
        self._firsts.append(record.first)

    # -- writing --------------------------------------------------------------------------

    def store_batch(self, batch: StoredBatch) -> None:
        """Append one record (the file is cut back if the write fails)."""
        if self._closed:
            raise StoreError("the store is closed")
        if not self._segments:  # the first write: the directory and its first segment
            self._new_segment(batch.first)
        active = self._segments[-1]
        if active.size >= self._segment_bytes:
            self._roll(batch.first)
            active = self._segments[-1]
        parts = encode_record(batch)
        size = sum(len(part) for part in parts)
        try:
            written = os.writev(self._fd, parts)
            if written != size:
                raise OSError(f"short write: {written} of {size} bytes")
        except OSError as error:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, active.size)
            raise StoreError(f"store write failed: {error}") from error
        count = len(batch.payload)
        self._add_record(
            _Record(batch.first, count, batch.stamp, active.first, active.size, size, count)
        )
        active.size += size
        active.last_stamp = batch.stamp

    def store(self, sequence: int, item: Any) -> None:
        """Keep one value (a batch of one)."""
        from raytopic.core.payloads import PickledValues

        self.store_batch(StoredBatch(sequence, time.time(), PickledValues.from_values([item])))

    def _roll(self, first: int) -> None:
        """Seal the active segment (synced and closed by the next ``sync``); start another."""
        self._new_segment(first)

    def _new_segment(self, first: int) -> None:
        """Open the segment starting at ``first`` and make it the active one (the
        old one, if any, is synced and closed by the next ``sync``)."""
        path = self.directory / f"{first:020d}{_SUFFIX}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as error:
            raise StoreError(f"cannot start segment {path}: {error}") from error
        with self._lock:
            if self._fd >= 0:
                self._unsynced_fds.append(self._fd)
            self._fd = fd
            self._dir_dirty = True
        self._segments.append(_Segment(first, path, 0))
        self._cache[first] = memoryview(b"")

    def sync(self) -> None:
        """``fdatasync`` what was written (and the directory, after a new segment).

        Raises:
            StoreError: the sync failed: what was written may not be on disk.
        """
        with self._lock:
            fds = [*self._unsynced_fds, self._fd]
            self._unsynced_fds = []
            dir_dirty, self._dir_dirty = self._dir_dirty, False
        try:
            for fd in fds:
                if fd >= 0:
                    os.fdatasync(fd)
            if dir_dirty:
                sync_directory(self.directory)
        except OSError as error:
            raise StoreError(f"fdatasync failed: {error}") from error
        finally:
            for fd in fds[:-1]:
                with contextlib.suppress(OSError):
                    os.close(fd)

    # -- reading ----------------------------------------------------------------------------

    def largest_sequence(self) -> int:
        """The newest stored sequence; an empty active segment's name says where the
        next starts (so sequences are never reused after a truncation)."""
        if not self._segments:  # nothing ever written
            return self._damaged[-1][1] if self._damaged else -1
        if self._records and self._records[-1].segment == self._segments[-1].first:
            record = self._records[-1]
            return record.first + record.span - 1
        newest = self._segments[-1].first - 1
        if self._records:
            newest = max(newest, self._records[-1].first + self._records[-1].span - 1)
        return max(newest, self._damaged[-1][1] if self._damaged else -1)

    def first_of_newest(self, count: int) -> int:
        """Where the newest records holding ``count`` elements begin (the oldest stored
        sequence if all of them hold fewer): a compacted log holds fewer elements
        than positions."""
        held = 0
        for record in reversed(self._records):
            held += record.count
            if held >= count:
                return record.first
        return self.first_sequence()

    def first_sequence(self) -> int:
        """The oldest stored sequence (``largest_sequence() + 1`` when nothing is stored)."""
        if self._records:
            return self._records[0].first
        return self.largest_sequence() + 1

    def load(self, sequence: int) -> Any:
        """The value at ``sequence``, or None when not stored (or damaged)."""
        index = bisect.bisect_right(self._firsts, sequence) - 1
        if index < 0:
            return None
        record = self._records[index]
        if not record.first <= sequence < record.first + record.span:
            return None
        batch = self._read(record)
        index = sequence - record.first
        if batch.sequences is not None:  # a compacted record: the position may be empty
            index = int(np.searchsorted(batch.sequences, sequence))
            if index >= len(batch.sequences) or batch.sequences[index] != sequence:
                return None
        return batch.payload.slice(index, index + 1).decode()[0]

    def load_batches(self, start: int) -> Iterator[StoredBatch]:
        """Stored batches holding ``start`` or later, in order (a damaged range is a gap)."""
        index = max(0, bisect.bisect_right(self._firsts, start) - 1)
        records = self._records
        while index < len(records):
            record = records[index]
            if record.first + record.span > start:
                yield self._read(record)
            index += 1

    def _read(self, record: _Record) -> StoredBatch:
        data = self._cache.get(record.segment)
        if data is None or record.offset + record.size > len(data):
            path = self.directory / f"{record.segment:020d}{_SUFFIX}"
            with open(path, "rb") as file:
                file.seek(record.offset)
                chunk = memoryview(file.read(record.size))
            frame = read_frame(chunk, 0)
        else:
            frame = read_frame(data, record.offset)
        return decode_record(frame)

    def damaged(self) -> list[tuple[int, int]]:
        """Sequence ranges found damaged when the store was opened."""
        return list(self._damaged)

    def release_cache(self) -> None:
        """Forget the bytes read at open (the channel's ring holds what it needs)."""
        self._cache = {segment.first: memoryview(b"") for segment in self._segments}

    # -- truncation -----------------------------------------------------------------------

    def truncate(self, below: int) -> None:
        """Delete sealed segments wholly below ``below`` and past the retention (not
        while a compaction pass rewrites them: a later release truncates)."""
        if self._compacting:
            return
        now = time.time()
        kept_bytes = 0
        removable: list[_Segment] = []
        for index, segment in enumerate(self._segments[:-1]):
            end = self._segments[index + 1].first
            if end > below:
                break
            removable.append(segment)
        for segment in reversed(removable):  # newest first: retention keeps the newest
            kept_bytes += segment.size
            fresh = now - segment.last_stamp < self._retention_seconds
            if kept_bytes <= self._retention_bytes or fresh:
                removable.remove(segment)
        if not removable:
            return
        gone = {segment.first for segment in removable}
        for segment in removable:
            with contextlib.suppress(FileNotFoundError):
                segment.path.unlink()
            self._cache.pop(segment.first, None)
        self._segments = [s for s in self._segments if s.first not in gone]
        keep = [r for r in self._records if r.segment not in gone]
        self._records = keep
        self._firsts = [r.first for r in keep]
        with self._lock:
            self._dir_dirty = True

    # -- compaction (the file work: raytopic.actors.stores.segment_compaction) ------------

    def sealed(self) -> list[tuple[Path, list[RecordSpan]]]:
        """Start a compaction pass: seal the active segment if it holds records (the
        channel appends to a new one meanwhile) and return every sealed segment with
        its records. Those files do not change until :meth:`install` or
        :meth:`compaction_ended`; truncation waits until then."""
        if (
            self._segments
            and self._records
            and self._records[-1].segment == self._segments[-1].first
        ):
            self._roll(self.largest_sequence() + 1)
        self._compacting = True
        spans: dict[int, list[RecordSpan]] = {}
        for record in self._records:
            spans.setdefault(record.segment, []).append(
                RecordSpan(
                    record.first,
                    record.span,
                    record.stamp,
                    record.offset,
                    record.size,
                    record.count,
                )
            )
        return [
            (segment.path, spans[segment.first])
            for segment in self._segments[:-1]
            if segment.first in spans
        ]

    def install(self, rewritten: Sequence[NewSegment]) -> None:
        """A committed pass's rewritten segments take their namesakes' places (step 3
        of the swap), and the index follows; what reads the store next reads them."""
        segment_compaction.move_into_place(self.directory, [new.name for new in rewritten])
        replaced = {new.first: new for new in rewritten}
        for segment in self._segments:
            new = replaced.get(segment.first)
            if new is not None:
                segment.size = new.size
                segment.last_stamp = new.last_stamp
                self._cache[segment.first] = memoryview(b"")
        kept = [record for record in self._records if record.segment not in replaced]
        for new in rewritten:
            kept.extend(
                _Record(s.first, s.span, s.stamp, new.first, s.offset, s.size, s.count)
                for s in new.records
            )
        kept.sort(key=lambda record: record.first)
        self._records = kept
        self._firsts = [record.first for record in kept]

    def compaction_ended(self) -> None:
        """The pass is over (installed and finished, or abandoned): truncation may
        delete sealed segments again."""
        self._compacting = False

    # -- state ----------------------------------------------------------------------------

    def save_state(self, state: dict[str, Any]) -> None:
        """Replace the whole state: a new state file (a new generation, by atomic
        rename), the state log of the last one deleted.

        Raises:
            StoreError: the state could not be written (if the failure came after
                the new file was in place, every later state call fails too).
        """
        if self._closed:
            raise StoreError("the store is closed")
        self._state.save(state)

    def append_state(self, changes: Sequence[StateChange]) -> None:
        """Append ``changes`` to the state log as one record and ``fdatasync`` it;
        now and then rewrite the whole state instead (compaction). Blocks.

        Raises:
            StoreError: the record could not be written (the log is cut back:
                nothing changed) or synced (then every later state call fails
                too: whether it is on disk is unknown).
        """
        if self._closed:
            raise StoreError("the store is closed")
        self._state.append(changes)

    def load_state(self) -> dict[str, Any] | None:
        """The state saved last with the changes appended since, or None (a copy)."""
        return self._state.load()

    def close(self) -> None:
        """Sync and close the files."""
        if self._closed:
            return
        with contextlib.suppress(StoreError):
            self.sync()
        self._closed = True
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
            self._fd = -1
        self._state.close()

    def destroy(self) -> None:
        """Remove the directory and everything in it (its topic was destroyed); the
        store is closed for good (a new topic of the name opens a new one). All or
        nothing for a crash: the directory is first renamed aside (one atomic step),
        then deleted; what a crash left aside is deleted by the next ``destroy``. The
        topic's directory goes too once its last channel's has.

        Raises:
            StoreError: the directory could not be renamed or deleted.
        """
        self.close()
        aside = self.directory.with_name(f".{self.directory.name}.destroyed")
        try:
            if self.directory.exists():
                shutil.rmtree(aside, ignore_errors=True)
                os.replace(self.directory, aside)
                sync_directory(self.directory.parent)
            if aside.exists():
                shutil.rmtree(aside)
        except OSError as error:
            raise StoreError(f"{self.directory} could not be removed: {error}") from error
        with contextlib.suppress(OSError):  # not empty: another channel's is still there
            self.directory.parent.rmdir()


class _StateFiles:
    """The state file and its state log, with the state they hold in memory.

    Compaction (and ``save``), in this order:

    1. The new state, generation g + 1, is written to ``state.tmp`` and
       synced. A crash now leaves ``state.json`` (g) and log g as they were:
       recovery is the same; the temporary file is deleted on open.
    2. ``state.tmp`` is renamed over ``state.json`` and the directory synced:
       the commit point. Until the directory sync returns, a crash may
       recover either file; log g is still there, so either recovers the
       same state (the old one with its log, or the new one, which holds it).
    3. Log g is closed and deleted. A crash before the deletion reaches the
       disk leaves log g beside a generation g + 1 state file: it is never
       replayed onto it (the generations differ) and is deleted on open.
    4. Log g + 1 is created by the next append, and the directory synced
       before that append's record is: a record synced in a file whose
       directory entry is not durable could vanish with the file. A crash
       before the first record leaves an empty or missing log: nothing to
       replay.

    A record cut short at the end of a log (a crash during an append, never
    acknowledged) is cut off when the log is opened, so later records do not
    follow it.

    Args:
        directory: The store's directory.
        log_bytes: Compaction threshold (see ``STATE_LOG_BYTES``).

    Raises:
        StoreError: the state file or the log is unreadable, or the log is
            damaged before its end.
    """

    def __init__(self, directory: Path, log_bytes: int) -> None:
        self._directory = directory
        self._path = directory / _STATE
        self._log_bytes = log_bytes
        self._lock = threading.Lock()  # appends and saves come from worker threads
        self._state: dict[str, Any] | None = None  # None: nothing saved or appended yet
        self._generation = 0
        self._state_size = 0  # bytes of the state file
        self._log_fd = -1  # the log of this generation, opened at its first append
        self._log_size = 0
        self._failure: str | None = None  # set when the files' state became unknown
        self._recover()

    @property
    def _log_path(self) -> Path:
        return self._directory / _STATE_LOG.format(self._generation)

    def _recover(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self._directory / _STATE_TEMPORARY).unlink()  # a compaction cut short (step 1)
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            data = None
        if data is not None:
            try:
                document = json.loads(data)
            except ValueError as error:
                raise StoreError(f"{self._path} is unreadable: {error}") from error
            try:
                self._generation = int(document["log_generation"])
                self._state = document["state"]
            except (KeyError, TypeError, ValueError) as error:
                raise StoreError(f"{self._path} is not a state file: {error!r}") from error
            self._state_size = len(data)
        for path in self._directory.glob(_STATE_LOG_GLOB):
            if path != self._log_path:
                logger.info("%s: stale state log %s deleted", self._directory, path.name)
                path.unlink()  # another generation's (step 3 cut short)
        try:
            log = self._log_path.read_bytes()
        except FileNotFoundError:
            return
        decoded = decode_log(log)
        if decoded.batches and self._state is None:
            self._state = {}
        for changes in decoded.batches:
            apply_changes(self._state, changes)  # type: ignore[arg-type]
        if decoded.end < len(log):
            logger.warning(
                "%s: torn tail: %d bytes after the last whole record cut off",
                self._log_path,
                len(log) - decoded.end,
            )
            try:
                fd = os.open(self._log_path, os.O_WRONLY)
                try:
                    os.ftruncate(fd, decoded.end)
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
            except OSError as error:
                raise StoreError(f"cannot cut the torn state log back: {error}") from error
        self._log_size = decoded.end

    def load(self) -> dict[str, Any] | None:
        with self._lock:
            return copy.deepcopy(self._state)

    def append(self, changes: Sequence[StateChange]) -> None:
        record = encode_changes(changes)
        # What the state gets is what a replay of the record will give (tuples
        # become lists, ...), and no object of the caller's is kept.
        (replayed,) = decode_log(record).batches
        with self._lock:
            self._check()
            fd = self._open_log()
            try:
                written = os.write(fd, record)
                if written != len(record):
                    raise OSError(f"short write: {written} of {len(record)} bytes")
            except OSError as error:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._log_size)
                raise StoreError(f"state log write failed: {error}") from error
            try:
                os.fdatasync(fd)
            except OSError as error:
                self._failure = f"the state log could not be synced: {error}"
                raise StoreError(self._failure) from error
            self._log_size += len(record)
            if self._state is None:
                self._state = {}
            apply_changes(self._state, replayed)
            if self._log_size > max(self._log_bytes, 2 * self._state_size):
                self._compact()

    def save(self, state: dict[str, Any]) -> None:
        body = json.dumps(state, separators=(",", ":"))
        with self._lock:
            self._check()
            self._write_snapshot(body)

    def close(self) -> None:
        with self._lock:
            self._close_log()

    def _check(self) -> None:
        if self._failure is not None:
            raise StoreError(f"the store's state is unknown: {self._failure}")

    def _open_log(self) -> int:
        if self._log_fd < 0:
            try:
                self._directory.mkdir(parents=True, exist_ok=True)
                self._log_fd = os.open(
                    self._log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
                )
                sync_directory(self._directory)  # step 4: the file outlives a crash
            except OSError as error:
                raise StoreError(f"cannot open the state log: {error}") from error
        return self._log_fd

    def _close_log(self) -> None:
        if self._log_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._log_fd)
            self._log_fd = -1

    def _compact(self) -> None:
        """Rewrite the whole state; the record just appended is durable already,
        so a failure before the commit point is logged, not raised (the next
        append tries again)."""
        body = json.dumps(self._state, separators=(",", ":"))
        try:
            self._write_snapshot(body)
        except StoreError as error:
            if self._failure is not None:
                raise
            logger.error("%s: state compaction failed (tried again later): %s", self._path, error)

    def _write_snapshot(self, body: str) -> None:
        """Steps 1 to 3 of a compaction (see the class docstring); the state held
        becomes ``body``'s."""
        generation = self._generation + 1
        data = f'{{"log_generation":{generation},"state":{body}}}'.encode()
        temporary = self._directory / _STATE_TEMPORARY
        try:
            self._directory.mkdir(parents=True, exist_ok=True)
            with open(temporary, "wb") as file:
                file.write(data)
                file.flush()
                os.fdatasync(file.fileno())
            os.replace(temporary, self._path)
        except OSError as error:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise StoreError(f"state write failed: {error}") from error
        try:
            sync_directory(self._directory)
        except OSError as error:
            # Whether the new file or the old one survives a crash is unknown;
            # appending to either log could lose changes: stop here.
            self._failure = f"the state file's rename could not be synced: {error}"
            raise StoreError(self._failure) from error
        old_log = self._log_path
        self._close_log()
        with contextlib.suppress(FileNotFoundError):
            old_log.unlink()
        self._generation = generation
        self._state = json.loads(body)
        self._state_size = len(data)
        self._log_size = 0
