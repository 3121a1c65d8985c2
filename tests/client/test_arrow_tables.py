"""Routing, splitting and read tables of Arrow rows (no Ray)."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from raytopic.client.arrow_tables import (
    conform,
    key_channels,
    payload_table,
    round_robin,
    split_by_channel,
    to_utc,
    unify,
)
from raytopic.client.routing import channel_for_key
from raytopic.core.errors import InvalidTypeError
from raytopic.core.payloads import ArrowRows, PickledValues
from raytopic.core.protocol import Chunk


@given(st.lists(st.text(max_size=12), min_size=1, max_size=50), st.integers(1, 16))
def test_text_keys_route_as_the_publisher_routes(keys: list[str], channels: int) -> None:
    got = key_channels(pa.array(keys), channels).tolist()
    assert got == [channel_for_key(key, channels) for key in keys]


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=50), st.integers(1, 16))
def test_integer_keys_route_as_the_publisher_routes(keys: list[int], channels: int) -> None:
    got = key_channels(pa.array(keys, pa.int64()), channels).tolist()
    assert got == [channel_for_key(key, channels) for key in keys]


def test_small_integer_boolean_and_binary_keys_route_as_the_publisher_routes() -> None:
    assert key_channels(pa.array([0, 1, 2], pa.int8()), 7).tolist() == [
        channel_for_key(k, 7) for k in (0, 1, 2)
    ]
    assert key_channels(pa.array([True, False]), 5).tolist() == [
        channel_for_key(True, 5),
        channel_for_key(False, 5),
    ]
    raw = [b"\x00\xff", b"abc"]
    assert key_channels(pa.array(raw, pa.binary()), 3).tolist() == [
        channel_for_key(k, 3) for k in raw
    ]


def test_null_keys_are_unrouted_and_chunked_columns_route_row_by_row() -> None:
    column = pa.chunked_array([["a", None], [None, "b", "a"]])
    assert key_channels(column, 4).tolist() == [
        channel_for_key("a", 4),
        -1,
        -1,
        channel_for_key("b", 4),
        channel_for_key("a", 4),
    ]


@pytest.mark.parametrize("column", [pa.array([1.5]), pa.array([1], pa.decimal128(5, 0))])
def test_keys_the_publisher_refuses_are_refused(column: pa.Array) -> None:
    with pytest.raises(InvalidTypeError, match="key column"):
        key_channels(column, 4)


def test_round_robin_gives_unrouted_rows_the_channels_in_turn() -> None:
    channels, after = round_robin(np.array([-1, 2, -1, -1, 0, -1]), 3, 4)
    assert channels.tolist() == [3, 2, 0, 1, 0, 2]
    assert after == 3
    unchanged, same = round_robin(np.array([1, 1]), 2, 4)
    assert (unchanged.tolist(), same) == ([1, 1], 2)


def test_split_by_channel_keeps_each_channels_rows_in_order() -> None:
    table = pa.table({"i": list(range(8))})
    parts = split_by_channel(table, np.array([2, 0, 2, 1, 0, 2, 1, 0]))
    assert {c: t.column("i").to_pylist() for c, t in parts.items()} == {
        0: [1, 4, 7],
        1: [3, 6],
        2: [0, 2, 5],
    }
    assert split_by_channel(table.slice(0, 0), np.array([], dtype=np.int64)) == {}


def test_to_utc_moves_zoned_timestamps_to_utc_and_leaves_naive_ones() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    table = pa.table(
        {
            "zoned": pa.array([moment]).cast(pa.timestamp("us", tz="Europe/Paris")),
            "naive": pa.array([datetime(2026, 1, 1)]),
        }
    )
    moved = to_utc(table)
    assert moved.schema.field("zoned").type == pa.timestamp("us", tz="UTC")
    assert moved.column("zoned")[0].as_py() == moment
    assert moved.schema.field("naive").type.tz is None


def test_payload_tables_put_fields_first_then_key_channel_position_and_timestamp() -> None:
    rows = ArrowRows(pa.record_batch({"id": [1, 2], "name": ["a", "b"]}))
    table = payload_table(3, Chunk(10, 1_700_000_000.5, rows))
    assert table.column_names == ["id", "name", "key", "channel", "position", "timestamp"]
    assert table.column("key").to_pylist() == [None, None]
    assert table.column("channel").to_pylist() == [3, 3]
    assert table.column("position").to_pylist() == [10, 11]
    assert table.column("timestamp")[0].as_py() == datetime.fromtimestamp(1_700_000_000.5, UTC)
    dicts = payload_table(
        0, Chunk(0, 1.0, PickledValues.from_values([{"a": 1}, {"a": 2, "b": "x"}]))
    )
    assert dicts.column_names[:2] == ["a", "b"]
    assert dicts.column("b").to_pylist() == [None, "x"]
    plain = payload_table(0, Chunk(0, 1.0, PickledValues.from_values([1, 2])))
    assert plain.column_names[0] == "value"
    assert plain.column("value").to_pylist() == [1, 2]


def test_a_field_named_like_a_metadata_column_keeps_its_name() -> None:
    rows = ArrowRows(pa.record_batch({"channel": ["tv"], "position": ["left"], "key": [1]}))
    table = payload_table(1, Chunk(0, 1.0, rows))
    assert table.column_names == [
        "channel",
        "position",
        "key",
        "_key",
        "_channel",
        "_position",
        "timestamp",
    ]
    assert table.column("channel").to_pylist() == ["tv"]
    assert table.column("_channel").to_pylist() == [1]


def test_unify_and_conform_give_every_table_one_schema() -> None:
    first = pa.table({"a": [1], "b": ["x"]})
    second = pa.table({"a": [2.5], "c": [True]})
    schema = unify([first, second])
    assert schema.names == ["a", "b", "c"]
    assert schema.field("a").type == pa.float64()
    conformed = conform(second, schema)
    assert conformed.schema == schema
    assert conformed.to_pylist() == [{"a": 2.5, "b": None, "c": True}]
    narrow = conform(first, pa.schema([("a", pa.int64())]))
    assert narrow.column_names == ["a"]


def test_values_no_arrow_type_holds_together_are_read_as_text() -> None:
    mixed = payload_table(0, Chunk(0, 1.0, PickledValues.from_values([1, "a", {"k": 1}])))
    assert mixed.column("value").to_pylist() == ["1", "a", "{'k': 1}"]
    clashing = payload_table(0, Chunk(0, 1.0, PickledValues.from_values([{"k": 1}, {"k": "x"}])))
    assert clashing.column("value").to_pylist() == ["{'k': 1}", "{'k': 'x'}"]


def test_the_key_column_holds_each_elements_key() -> None:
    keyed = PickledValues.from_pickles([pickle.dumps(v) for v in (1, 2, 3)], ["a", None, "c"])
    assert payload_table(0, Chunk(0, 1.0, keyed)).column("key").to_pylist() == ["a", None, "c"]
    mixed = PickledValues.from_pickles([pickle.dumps(v) for v in (1, 2)], [7, "x"])
    assert payload_table(0, Chunk(0, 1.0, mixed)).column("key").to_pylist() == ["7", "x"]
    rows = ArrowRows.keyed(pa.record_batch({"sku": ["a1", None], "eur": [1.5, 2.0]}), "sku")
    table = payload_table(0, Chunk(0, 1.0, rows))
    assert table.column("key").to_pylist() == ["a1", None]
    assert table.column("sku").to_pylist() == ["a1", None]  # the row keeps its column
    assert table.schema.metadata is None  # the key column's name is the store's business


def test_a_compacted_chunk_gives_each_row_its_own_position_and_time() -> None:
    values = PickledValues.from_pickles([pickle.dumps(v) for v in (1, 2)], ["a", "b"])
    chunk = Chunk(3, 10.0, values, np.array([3, 9]), None, np.array([10.0, 12.5]))
    table = payload_table(0, chunk)
    assert table.column("position").to_pylist() == [3, 9]
    assert [t.timestamp() for t in table.column("timestamp").to_pylist()] == [10.0, 12.5]
