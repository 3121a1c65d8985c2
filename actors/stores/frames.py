"""The record format of the embedded store: one framed, checksummed record per append. No I/O.

Version 2 (written)::

    magic    4 bytes  b"RTB2"
    length   u32      bytes after the checksum (header, publisher id, keys, payload)
    crc32c   u32      CRC32C of those bytes
    header   epoch u64, first u64, span u64, count u32, stamp f64, batch i64,
             kind u8, flags u8, id length u16, keys length u32
    publisher id (UTF-8)
    placed   (flag GAPPED only) u32 length, then that many bytes: zlib of count u32
             positions (each element's, less ``first``) and count f64 time stamps
    keys     keys length bytes: each element's key (str, bytes, int, bool, or
             None for one without), as ONE pickle (protocol 5) of a list of
             them; empty when no element has a key
    payload  kind 0, pickled values: count int64 end offsets, then the pickles
             kind 1, Arrow rows: one Arrow IPC stream (Arrow IPC has no checksum
             of its own; the record's CRC covers it; the key column, if any, is
             named in its schema's metadata: ``raytopic.core.payloads.KEY_COLUMN``)
             kind 3, values pickled as one list: the list's pickle

A record *covers* positions ``first`` to ``first + span - 1``. A record as
appended holds an element at each of them (``span == count``, one time stamp
for all). With the flag GAPPED (a record written by compaction) it holds
``count`` elements at the positions listed, each with its own time stamp; the
other positions it covers were compacted away.

Version 1 (read: stores written before elements kept their keys), magic
b"RTB1", header epoch u64, first u64, count u32, stamp f64, batch i64, kind u8,
id length u16, then the publisher id and the payload: kinds 0, 1 and 3 as
above; kind 2 as 0 with count int64 key hashes between the end offsets and
the pickles; kind 4 as 3 with count int64 key hashes before the pickle. Its
elements have no key (``keys`` None); the hashes are skipped.

Little-endian throughout. A record whose checksum does not match is never
decoded: its payload may be altered.

The prefix (magic, length, crc32c) frames other records too: the state log's
(:mod:`raytopic.actors.stores.state_log`) has its own magic, so neither kind is
ever taken for the other (:func:`encode_frame`, and ``magic=`` of
:func:`read_frame` and :func:`find_frame`).
"""

from __future__ import annotations

import pickle
import struct
import zlib
from dataclasses import dataclass
from typing import NamedTuple

import google_crc32c
import numpy as np

from raytopic.actors.stores.base import StoredBatch
from raytopic.core.payloads import ArrowRows, Payload, PickledList, PickledValues

__all__ = [
    "MAGIC",
    "PREFIX",
    "RECORD_MAGICS",
    "CorruptRecord",
    "Frame",
    "RecordRange",
    "TornRecord",
    "decode_record",
    "encode_frame",
    "encode_record",
    "find_frame",
    "peek_range",
    "read_frame",
]

MAGIC = b"RTB2"
"""The magic of the records written (version 2)."""
MAGIC_V1 = b"RTB1"
"""The magic of version 1 records (read, never written)."""
RECORD_MAGICS = (MAGIC, MAGIC_V1)
"""Every segment record magic a store reads."""
PREFIX = struct.Struct("<4sII")  # magic, length, crc32c
_HEADER = struct.Struct("<QQQIdqBBHI")
# epoch, first, span, count, stamp, batch, kind, flags, id length, keys length
_HEADER_V1 = struct.Struct("<QQIdqBH")  # epoch, first, count, stamp, batch, kind, id length
_LENGTH = struct.Struct("<I")
_PICKLED, _ARROW, _LISTED = 0, 1, 3
_PICKLED_HASHED_V1, _LISTED_HASHED_V1 = 2, 4
GAPPED = 1
"""Flag: the record lists each element's position and time stamp (compaction wrote it)."""
_MAX_LENGTH = 1 << 31
"""Largest record accepted when reading back (a larger length field is damage)."""


class TornRecord(Exception):
    """The bytes end inside a record (a write cut short by a crash)."""


class CorruptRecord(Exception):
    """A record is complete but its checksum (or magic) does not match."""


@dataclass(frozen=True, slots=True)
class Frame:
    """Where one record lies in a file, its checksum checked."""

    offset: int
    size: int
    body: memoryview
    """The checked bytes after the prefix (header, id, payload)."""
    magic: bytes = MAGIC
    """Its magic: which record kind (and version) the body is."""


class RecordRange(NamedTuple):
    """The positions a record covers and its time stamp, read from its header alone."""

    first: int
    """The first position it covers."""
    span: int
    """Positions it covers (its elements' count, unless compaction removed some)."""
    stamp: float
    """Its (first element's) time stamp."""
    elements: int
    """Elements it holds (not ``count``: a tuple's method has that name)."""


def encode_record(batch: StoredBatch) -> list[bytes | memoryview]:
    """The record of ``batch`` as buffers to write back to back (the payload is not copied)."""
    payload = batch.payload
    publisher = batch.publisher_id.encode()
    if isinstance(payload, PickledValues):
        kind = _PICKLED
        begin = payload.begin
        end = int(payload.ends[-1]) if len(payload.ends) else begin
        ends = payload.ends - begin if begin else payload.ends
        buffer = payload.buffer
        whole = type(buffer) is bytes and begin == 0 and end == len(buffer)
        parts: list[bytes | memoryview] = [
            ends.astype("<i8", copy=False).tobytes(),
            buffer if whole else memoryview(buffer)[begin:end],
        ]
    elif isinstance(payload, PickledList):
        payload = payload.compact()  # a slice is stored as a list of its own
        kind = _LISTED
        parts = [payload.buffer]
    elif isinstance(payload, ArrowRows):
        kind = _ARROW
        parts = [payload.to_ipc().to_pybytes()]
    else:
        raise TypeError(f"cannot store a {type(payload).__name__}")
    keys = payload.keys
    # An Arrow batch's key column travels in its schema: no key list of its own.
    encoded_keys = b"" if keys is None or kind == _ARROW else pickle.dumps(keys, 5)
    count = len(payload)
    placed = b""
    if batch.sequences is not None:
        stamps = np.full(count, batch.stamp) if batch.stamps is None else batch.stamps
        offsets = (batch.sequences - batch.first).astype("<u4")
        packed = zlib.compress(offsets.tobytes() + stamps.astype("<f8").tobytes(), 1)
        placed = _LENGTH.pack(len(packed)) + packed
    header = _HEADER.pack(
        batch.epoch,
        batch.first,
        batch.covered,
        count,
        batch.stamp,
        batch.batch,
        kind,
        GAPPED if placed else 0,
        len(publisher),
        len(encoded_keys),
    )
    parts = [header, publisher, placed, encoded_keys, *parts]
    crc = 0
    length = 0
    for part in parts:
        crc = _extend(crc, part)
        length += len(part)
    return [PREFIX.pack(MAGIC, length, crc), *parts]


def encode_frame(body: bytes, *, magic: bytes) -> bytes:
    """``body`` framed as one record: the prefix (``magic``, length, CRC32C), then ``body``."""
    return PREFIX.pack(magic, len(body), _extend(0, body)) + body


def read_frame(
    data: memoryview,
    offset: int,
    *,
    magic: bytes | tuple[bytes, ...] = RECORD_MAGICS,
    min_length: int | None = None,
) -> Frame:
    """The record at ``offset`` of ``data``, checksum checked.

    Args:
        data: The bytes of a file.
        offset: Where the record starts.
        magic: The magic (or magics) of the records expected (default: a
            segment's, of either version).
        min_length: The shortest body such a record has (default: a segment
            record's header, of the version its magic names).

    Raises:
        TornRecord: ``data`` ends before the record does.
        CorruptRecord: bad magic, an impossible length, or a checksum mismatch.
    """
    if offset + PREFIX.size > len(data):
        raise TornRecord(f"{len(data) - offset} bytes at {offset}: less than a record prefix")
    found, length, crc = PREFIX.unpack_from(data, offset)
    expected = found == magic if isinstance(magic, bytes) else found in magic
    if min_length is None:
        min_length = _HEADER_V1.size if found == MAGIC_V1 else _HEADER.size
    if not expected or length < min_length or length > _MAX_LENGTH:
        raise CorruptRecord(f"no record at offset {offset}")
    start = offset + PREFIX.size
    if start + length > len(data):
        raise TornRecord(f"record at {offset} needs {length} bytes, {len(data) - start} left")
    body = data[start : start + length]
    if _extend(0, body) != crc:
        raise CorruptRecord(f"checksum mismatch in the record at offset {offset}")
    return Frame(offset, PREFIX.size + length, body, found)


def find_frame(
    data: memoryview,
    start: int,
    *,
    magic: bytes | tuple[bytes, ...] = RECORD_MAGICS,
    min_length: int | None = None,
) -> int | None:
    """Offset of the next whole, checksum-valid record at or after ``start``, or None
    (``magic`` and ``min_length`` as for :func:`read_frame`)."""
    raw = data.obj if isinstance(data.obj, bytes) and len(data) == len(data.obj) else bytes(data)
    magics = (magic,) if isinstance(magic, bytes) else magic
    at = start
    while True:
        found = [hit for hit in (raw.find(each, at) for each in magics) if hit >= 0]
        if not found:
            return None
        at = min(found)
        try:
            read_frame(data, at, magic=magic, min_length=min_length)
            return at
        except (TornRecord, CorruptRecord):
            at += 1


def _extend(crc: int, data: bytes | memoryview) -> int:
    """CRC32C of ``data`` continuing ``crc`` (the C extension takes only ``bytes``:
    a view is copied, at memory speed)."""
    if type(data) is not bytes:
        data = bytes(data)
    return google_crc32c.extend(crc, data)


def decode_record(frame: Frame) -> StoredBatch:
    """The batch in a checked record (zero-copy over its body), of either version.

    Raises:
        CorruptRecord: the body is not a record of its version (it cannot be
            decoded although its checksum matched).
    """
    try:
        if frame.magic == MAGIC_V1:
            return _decode_v1(frame.body)
        return _decode_v2(frame.body)
    except (struct.error, ValueError, pickle.UnpicklingError, zlib.error) as error:
        raise CorruptRecord(f"a record that cannot be decoded: {error}") from error


def _decode_v2(body: memoryview) -> StoredBatch:
    epoch, first, span, count, stamp, batch, kind, flags, id_length, keys_length = (
        _HEADER.unpack_from(body, 0)
    )
    if flags & ~GAPPED:
        raise CorruptRecord(f"unknown record flags {flags}")
    at = _HEADER.size
    publisher = bytes(body[at : at + id_length]).decode()
    at += id_length
    sequences = stamps = None
    if flags & GAPPED:
        (length,) = _LENGTH.unpack_from(body, at)
        placed = zlib.decompress(body[at + _LENGTH.size : at + _LENGTH.size + length])
        at += _LENGTH.size + length
        if len(placed) != 12 * count:
            raise CorruptRecord("the record's positions do not match its elements")
        sequences = np.frombuffer(placed, dtype="<u4", count=count).astype(np.int64) + first
        stamps = np.frombuffer(placed, dtype="<f8", count=count, offset=4 * count).astype(
            np.float64
        )
    keys = None
    if keys_length:
        keys = pickle.loads(body[at : at + keys_length])
        if type(keys) is not list or len(keys) != count:
            raise CorruptRecord("the record's keys do not match its elements")
        at += keys_length
    payload: Payload
    if kind == _PICKLED:
        ends = np.frombuffer(body, dtype="<i8", count=count, offset=at).astype(np.int64, copy=False)
        payload = PickledValues(body[at + 8 * count :], ends, 0, keys)
    elif kind == _LISTED:
        payload = PickledList(body[at:], count, keys=keys)
    elif kind == _ARROW:
        payload = ArrowRows.from_ipc(body[at:])
    else:
        raise CorruptRecord(f"unknown payload kind {kind}")
    if len(payload) != count:
        raise CorruptRecord(f"the record holds {len(payload)} elements, its header {count}")
    if sequences is None:
        return StoredBatch(first, stamp, payload, epoch, publisher, batch)
    return StoredBatch(first, stamp, payload, epoch, publisher, batch, span, sequences, stamps)


def _decode_v1(body: memoryview) -> StoredBatch:
    """A version 1 record: no keys (its key hashes are skipped)."""
    epoch, first, count, stamp, batch, kind, id_length = _HEADER_V1.unpack_from(body, 0)
    at = _HEADER_V1.size
    publisher = bytes(body[at : at + id_length]).decode()
    at += id_length
    payload: Payload
    if kind in (_PICKLED, _PICKLED_HASHED_V1):
        ends = np.frombuffer(body, dtype="<i8", count=count, offset=at).astype(np.int64, copy=False)
        at += 8 * count
        if kind == _PICKLED_HASHED_V1:
            at += 8 * count
        payload = PickledValues(body[at:], ends)
    elif kind in (_LISTED, _LISTED_HASHED_V1):
        if kind == _LISTED_HASHED_V1:
            at += 8 * count
        payload = PickledList(body[at:], count)
    elif kind == _ARROW:
        payload = ArrowRows.from_ipc(body[at:])
    else:
        raise CorruptRecord(f"unknown payload kind {kind}")
    return StoredBatch(first, stamp, payload, epoch, publisher, batch)


def peek_range(frame: Frame) -> RecordRange:
    """The positions a checked record covers, its stamp and its count of elements,
    without decoding it."""
    if frame.magic == MAGIC_V1:
        _, first, count, stamp, *_ = _HEADER_V1.unpack_from(frame.body, 0)
        return RecordRange(first, count, stamp, count)
    _, first, span, count, stamp, *_ = _HEADER.unpack_from(frame.body, 0)
    return RecordRange(first, span, stamp, count)
