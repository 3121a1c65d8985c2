"""The record format of the embedded store: one framed, checksummed record per append. No I/O.

::

    magic    4 bytes  b"RTB1"
    length   u32      bytes after the checksum (header + publisher id + payload)
    crc32c   u32      CRC32C of those bytes
    header   epoch u64, first u64, count u32, stamp f64, batch i64, kind u8, id length u16
    publisher id (UTF-8)
    payload  kind 0, pickled values: count int64 end offsets, then the pickles
             kind 2, pickled values with keys: count int64 end offsets, count
             int64 key ids (``raytopic.routing.key_id``), then the pickles
             kind 1, Arrow rows: one Arrow IPC stream (Arrow IPC has no checksum
             of its own; the record's CRC covers it)
             kind 3, values pickled as one list: the list's pickle
             kind 4, the same with keys: count int64 key ids, then the pickle

Little-endian throughout. A record whose checksum does not match is never
decoded: its payload may be altered.

The prefix (magic, length, crc32c) frames other records too: the state log's
(:mod:`raytopic.actors.stores.state_log`) has its own magic, so neither kind is
ever taken for the other (:func:`encode_frame`, and ``magic=`` of
:func:`read_frame` and :func:`find_frame`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import google_crc32c
import numpy as np

from raytopic.actors.stores.base import StoredBatch
from raytopic.core.payloads import ArrowRows, Payload, PickledList, PickledValues

__all__ = [
    "MAGIC",
    "PREFIX",
    "CorruptRecord",
    "Frame",
    "TornRecord",
    "decode_record",
    "encode_frame",
    "encode_record",
    "find_frame",
    "peek_range",
    "read_frame",
]

MAGIC = b"RTB1"
PREFIX = struct.Struct("<4sII")  # magic, length, crc32c
_HEADER = struct.Struct("<QQIdqBH")  # epoch, first, count, stamp, batch, kind, id length
_PICKLED, _ARROW, _PICKLED_KEYED, _LISTED, _LISTED_KEYED = 0, 1, 2, 3, 4
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


def encode_record(batch: StoredBatch) -> list[bytes | memoryview]:
    """The record of ``batch`` as buffers to write back to back (the payload is not copied)."""
    payload = batch.payload
    publisher = batch.publisher_id.encode()
    if isinstance(payload, PickledValues):
        kind = _PICKLED if payload.keys is None else _PICKLED_KEYED
        begin = payload.begin
        end = int(payload.ends[-1]) if len(payload.ends) else begin
        ends = payload.ends - begin if begin else payload.ends
        buffer = payload.buffer
        whole = type(buffer) is bytes and begin == 0 and end == len(buffer)
        parts: list[bytes | memoryview] = [ends.astype("<i8", copy=False).tobytes()]
        if payload.keys is not None:
            parts.append(payload.keys.astype("<i8", copy=False).tobytes())
        parts.append(buffer if whole else memoryview(buffer)[begin:end])
    elif isinstance(payload, PickledList):
        payload = payload.compact()  # a slice is stored as a list of its own
        kind = _LISTED if payload.keys is None else _LISTED_KEYED
        parts = [] if payload.keys is None else [payload.keys.astype("<i8", copy=False).tobytes()]
        parts.append(payload.buffer)
    elif isinstance(payload, ArrowRows):
        kind = _ARROW
        parts = [payload.to_ipc().to_pybytes()]
    else:
        raise TypeError(f"cannot store a {type(payload).__name__}")
    header = _HEADER.pack(
        batch.epoch, batch.first, len(payload), batch.stamp, batch.batch, kind, len(publisher)
    )
    crc = _extend(_extend(0, header), publisher)
    length = len(header) + len(publisher)
    for part in parts:
        crc = _extend(crc, part)
        length += len(part)
    return [PREFIX.pack(MAGIC, length, crc), header, publisher, *parts]


def encode_frame(body: bytes, *, magic: bytes) -> bytes:
    """``body`` framed as one record: the prefix (``magic``, length, CRC32C), then ``body``."""
    return PREFIX.pack(magic, len(body), _extend(0, body)) + body


def read_frame(
    data: memoryview, offset: int, *, magic: bytes = MAGIC, min_length: int = _HEADER.size
) -> Frame:
    """The record at ``offset`` of ``data``, checksum checked.

    Args:
        data: The bytes of a file.
        offset: Where the record starts.
        magic: The magic of the records expected (default: a segment's).
        min_length: The shortest body such a record has (default: a segment
            record's header).

    Raises:
        TornRecord: ``data`` ends before the record does.
        CorruptRecord: bad magic, an impossible length, or a checksum mismatch.
    """
    if offset + PREFIX.size > len(data):
        raise TornRecord(f"{len(data) - offset} bytes at {offset}: less than a record prefix")
    found, length, crc = PREFIX.unpack_from(data, offset)
    if found != magic or length < min_length or length > _MAX_LENGTH:
        raise CorruptRecord(f"no record at offset {offset}")
    start = offset + PREFIX.size
    if start + length > len(data):
        raise TornRecord(f"record at {offset} needs {length} bytes, {len(data) - start} left")
    body = data[start : start + length]
    if _extend(0, body) != crc:
        raise CorruptRecord(f"checksum mismatch in the record at offset {offset}")
    return Frame(offset, PREFIX.size + length, body)


def find_frame(
    data: memoryview, start: int, *, magic: bytes = MAGIC, min_length: int = _HEADER.size
) -> int | None:
    """Offset of the next whole, checksum-valid record at or after ``start``, or None
    (``magic`` and ``min_length`` as for :func:`read_frame`)."""
    raw = data.obj if isinstance(data.obj, bytes) and len(data) == len(data.obj) else bytes(data)
    at = start
    while True:
        at = raw.find(magic, at)
        if at < 0:
            return None
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


def decode_record(body: memoryview) -> StoredBatch:
    """The batch in a checked record body (zero-copy over ``body``)."""
    epoch, first, count, stamp, batch, kind, id_length = _HEADER.unpack_from(body, 0)
    at = _HEADER.size
    publisher = bytes(body[at : at + id_length]).decode()
    at += id_length
    payload: Payload
    if kind in (_PICKLED, _PICKLED_KEYED):
        ends = np.frombuffer(body, dtype="<i8", count=count, offset=at).astype(np.int64, copy=False)
        at += 8 * count
        keys = None
        if kind == _PICKLED_KEYED:
            keys = np.frombuffer(body, dtype="<i8", count=count, offset=at).astype(np.int64)
            at += 8 * count
        payload = PickledValues(body[at:], ends, 0, keys)
    elif kind in (_LISTED, _LISTED_KEYED):
        keys = None
        if kind == _LISTED_KEYED:
            keys = np.frombuffer(body, dtype="<i8", count=count, offset=at).astype(np.int64)
            at += 8 * count
        payload = PickledList(body[at:], count, keys=keys)
    elif kind == _ARROW:
        payload = ArrowRows.from_ipc(body[at:])
    else:
        raise CorruptRecord(f"unknown payload kind {kind}")
    return StoredBatch(first, stamp, payload, epoch, publisher, batch)


def peek_range(body: memoryview) -> tuple[int, int, float]:
    """(first sequence, count, stamp) of a checked record body, without decoding it."""
    _, first, count, stamp, *_ = _HEADER.unpack_from(body, 0)
    return first, count, stamp
