"""Unit tests of the store record format (no Ray, no I/O): round trips, torn and bad records."""

from __future__ import annotations

import pickle
import struct

import google_crc32c
import pyarrow as pa
import pytest

from raytopic.actors.stores.base import StoredBatch
from raytopic.actors.stores.frames import (
    MAGIC,
    PREFIX,
    CorruptRecord,
    TornRecord,
    decode_record,
    encode_record,
    peek_range,
    read_frame,
)
from raytopic.core.payloads import ArrowRows, PickledValues

HEADER_SIZE = struct.calcsize("<QQQIdqBBHI")
KIND_OFFSET = struct.calcsize("<QQQIdq")
"""Where the payload kind byte lies in a record body."""


def record_bytes(batch: StoredBatch) -> bytes:
    """The record of ``batch`` as one buffer (as it lies in a segment file)."""
    return b"".join(bytes(part) for part in encode_record(batch))


def flipped(data: bytes, index: int, bit: int = 0) -> bytes:
    """``data`` with one bit flipped."""
    changed = bytearray(data)
    changed[index] ^= 1 << bit
    return bytes(changed)


def pickled_batch() -> StoredBatch:
    return StoredBatch(
        first=17,
        stamp=1234.5,
        payload=PickledValues.from_values(["zero", 1, {"two": [2]}, b"three", 4.5]),
        epoch=3,
        publisher_id="pub-é",
        batch=9,
    )


def arrow_batch() -> StoredBatch:
    rows = pa.record_batch({"a": [1, 2, 3], "b": ["x", "y", None]})
    return StoredBatch(5, 99.25, ArrowRows(rows), 1, "spark", 0)


# -- round trips ----------------------------------------------------------------------


def test_pickled_values_round_trip_with_every_field() -> None:
    batch = pickled_batch()
    data = record_bytes(batch)
    frame = read_frame(memoryview(data), 0)
    assert (frame.offset, frame.size) == (0, len(data))
    got = decode_record(frame)
    assert (got.first, got.stamp, got.epoch, got.publisher_id, got.batch) == (
        17,
        1234.5,
        3,
        "pub-é",
        9,
    )
    assert isinstance(got.payload, PickledValues)
    assert got.payload.decode() == ["zero", 1, {"two": [2]}, b"three", 4.5]
    assert got.last == 21


def test_a_slice_with_begin_writes_only_its_own_bytes_and_round_trips() -> None:
    whole = PickledValues.from_values(list(range(100, 110)))
    part = whole.slice(3, 7)
    assert part.begin > 0
    batch = StoredBatch(3, 1.0, part, publisher_id="p", batch=2)
    data = record_bytes(batch)
    # prefix, header, id, then 4 end offsets and the 4 pickles: nothing of the others
    assert len(data) == PREFIX.size + HEADER_SIZE + 1 + 8 * 4 + part.nbytes
    got = decode_record(read_frame(memoryview(data), 0))
    assert got.payload.decode() == [103, 104, 105, 106]
    assert len(got.payload) == 4
    assert got.payload.slice(1, 3).decode() == [104, 105]


def test_a_payload_over_a_memoryview_round_trips() -> None:
    source = PickledValues.from_values(["a", "bb", "ccc"])
    view = PickledValues(memoryview(bytearray(source.buffer)), source.ends)
    got = decode_record(read_frame(memoryview(record_bytes(StoredBatch(0, 0.0, view))), 0))
    assert got.payload.decode() == ["a", "bb", "ccc"]
    assert (got.publisher_id, got.batch, got.epoch) == ("", -1, 0)


def test_arrow_rows_round_trip() -> None:
    batch = arrow_batch()
    got = decode_record(read_frame(memoryview(record_bytes(batch)), 0))
    assert isinstance(got.payload, ArrowRows)
    assert got.payload.decode() == [
        {"a": 1, "b": "x"},
        {"a": 2, "b": "y"},
        {"a": 3, "b": None},
    ]
    assert (got.first, got.stamp, got.epoch, got.publisher_id, got.batch) == (
        5,
        99.25,
        1,
        "spark",
        0,
    )


def test_a_sliced_arrow_batch_round_trips_only_its_rows() -> None:
    rows = ArrowRows(pa.record_batch({"a": list(range(10))})).slice(4, 7)
    got = decode_record(read_frame(memoryview(record_bytes(StoredBatch(4, 0.0, rows))), 0))
    assert got.payload.decode() == [{"a": 4}, {"a": 5}, {"a": 6}]


def test_records_back_to_back_are_read_at_their_offsets() -> None:
    first, second = record_bytes(pickled_batch()), record_bytes(arrow_batch())
    data = memoryview(first + second)
    frame = read_frame(data, len(first))
    assert (frame.offset, frame.size) == (len(first), len(second))
    assert decode_record(frame).first == 5
    assert decode_record(read_frame(data, 0)).first == 17


def test_unknown_types_are_refused() -> None:
    with pytest.raises(TypeError):
        encode_record(StoredBatch(0, 0.0, [1, 2]))  # type: ignore[arg-type]


def test_peek_range_reads_first_span_and_stamp_without_decoding() -> None:
    frame = read_frame(memoryview(record_bytes(pickled_batch())), 0)
    assert peek_range(frame) == (17, 5, 1234.5, 5)
    frame = read_frame(memoryview(record_bytes(arrow_batch())), 0)
    assert peek_range(frame) == (5, 3, 99.25, 3)


# -- torn and corrupt records ---------------------------------------------------------------


@pytest.mark.parametrize("make", [pickled_batch, arrow_batch])
def test_every_cut_short_record_is_torn(make) -> None:
    data = record_bytes(make())
    for cut in range(len(data)):
        with pytest.raises(TornRecord):
            read_frame(memoryview(data[:cut]), 0)


def test_a_record_cut_after_a_whole_one_is_torn_at_its_offset() -> None:
    first = record_bytes(pickled_batch())
    data = memoryview(first + first[:-1])
    read_frame(data, 0)
    with pytest.raises(TornRecord):
        read_frame(data, len(first))


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(lambda n: 0, id="magic"),
        pytest.param(lambda n: 3, id="magic-last-byte"),
        pytest.param(lambda n: 8, id="checksum"),
        pytest.param(lambda n: PREFIX.size + 8, id="header-first"),
        pytest.param(lambda n: PREFIX.size + 16, id="header-count"),
        pytest.param(lambda n: PREFIX.size + HEADER_SIZE, id="publisher-id"),
        pytest.param(lambda n: n // 2 + 20, id="payload-middle"),
        pytest.param(lambda n: n - 1, id="payload-last-byte"),
    ],
)
@pytest.mark.parametrize("bit", [0, 7])
def test_a_flipped_bit_is_corrupt(where, bit: int) -> None:
    data = record_bytes(pickled_batch())
    damaged = flipped(data, where(len(data)), bit)
    with pytest.raises(CorruptRecord):
        read_frame(memoryview(damaged), 0)


def test_a_smaller_length_is_corrupt_not_a_shorter_record() -> None:
    data = record_bytes(pickled_batch())
    length = PREFIX.unpack_from(data)[1]
    bit = (length & -length).bit_length() - 1  # the length's lowest set bit: cleared
    damaged = flipped(data, 4, bit)
    assert PREFIX.unpack_from(damaged)[1] == length - (1 << bit) >= HEADER_SIZE
    with pytest.raises(CorruptRecord):
        read_frame(memoryview(damaged), 0)


def test_bad_magic_is_corrupt_even_with_a_valid_checksum() -> None:
    data = record_bytes(pickled_batch())
    assert data[:4] == MAGIC
    with pytest.raises(CorruptRecord):
        read_frame(memoryview(b"XXXX" + data[4:]), 0)


@pytest.mark.parametrize("length", [0, HEADER_SIZE - 1, (1 << 31) + 1])
def test_an_impossible_length_is_corrupt(length: int) -> None:
    data = PREFIX.pack(MAGIC, length, 0) + b"\0" * 64
    with pytest.raises(CorruptRecord):
        read_frame(memoryview(data), 0)


def test_an_unknown_payload_kind_with_a_valid_checksum_is_corrupt() -> None:
    data = bytearray(record_bytes(pickled_batch()))
    data[PREFIX.size + KIND_OFFSET] = 7
    body = bytes(data[PREFIX.size :])
    data[: PREFIX.size] = PREFIX.pack(MAGIC, len(body), google_crc32c.value(body))
    frame = read_frame(memoryview(bytes(data)), 0)  # the checksum matches again
    with pytest.raises(CorruptRecord):
        decode_record(frame)


def test_publish_keys_round_trip_with_their_values_and_slices() -> None:
    keyed = PickledValues.from_pickles(
        [pickle.dumps(v) for v in ("a", "b", "c", "d")], keys=["k", None, 7, b"\x00"]
    )
    for payload, keys in ((keyed, ["k", None, 7, b"\x00"]), (keyed.slice(1, 3), [None, 7])):
        data = record_bytes(StoredBatch(0, 1.0, payload, 1, "p", 0))
        got = decode_record(read_frame(memoryview(data), 0)).payload
        assert got.keys == keys
        assert got.decode() == payload.decode()
    plain = decode_record(read_frame(memoryview(record_bytes(pickled_batch())), 0))
    assert plain.payload.keys is None
