"""Arrow tables in and out of a topic: routing rows to channels, splitting, and
building the tables a bulk read returns. No Ray.

Both bulk paths (``raytopic.data`` for Ray Data, ``raytopic.spark`` for
DataFrames) go through here, so a row lands exactly where
``publish(row, key=k)`` would put it (``raytopic.client.routing``), and a read gives
the same columns whichever path asks:

- rows published as Arrow rows or as dicts: their own fields as columns,
- any other value: one ``value`` column (values that no one Arrow type holds,
  such as ``1`` and ``"a"`` in one read, as their ``str``),
- plus ``key`` (the key each element was published with, null for none;
  as Kafka's ``key``), ``channel`` (int32), ``position`` (int64, the sequence
  in the channel, as Kafka's ``offset``) and ``timestamp`` (UTC). A row field
  with one of these names keeps it; the metadata column then takes a leading
  underscore.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raytopic.core.errors import InvalidTypeError
from raytopic.core.payloads import ArrowRows
from raytopic.core.protocol import Chunk

__all__ = [
    "METADATA_COLUMNS",
    "as_batch",
    "combine",
    "conform",
    "elements_table",
    "empty_table",
    "key_channels",
    "metadata_names",
    "payload_table",
    "round_robin",
    "split_by_channel",
    "to_utc",
    "unify",
]

METADATA_COLUMNS = ("key", "channel", "position", "timestamp")
"""What a bulk read adds to every row, after the row's own fields."""

_TIMESTAMP = pa.timestamp("us", tz="UTC")


# -- routing -------------------------------------------------------------------------


def key_channels(keys: pa.Array | pa.ChunkedArray, channel_count: int) -> np.ndarray:
    """The channel of every key (``raytopic.client.routing``'s rule, vectorised); -1 for nulls.

    Each distinct key is hashed once (a dictionary encoding), so a column of
    many rows and few keys costs about one pass over the rows.

    Raises:
        InvalidTypeError: keys of a type ``publish(key=...)`` refuses too (floats
            and anything not text, bytes, an integer or a boolean).
    """
    kind = keys.type
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        keys = pc.cast(keys, pa.string())  # "-7"; "true" / "false", as Spark writes them
    elif not (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    ):
        raise InvalidTypeError(
            f"a key column must be text, bytes, an integer or a boolean, got {kind} "
            "(floats are refused: Python and Spark write them as different text)"
        )
    encoded = pc.dictionary_encode(keys)
    chunks = encoded.chunks if isinstance(encoded, pa.ChunkedArray) else [encoded]
    out = np.empty(len(keys), dtype=np.int64)
    at = 0
    for chunk in chunks:
        hashes = np.fromiter(
            (zlib.crc32(key) % channel_count for key in _key_bytes(chunk.dictionary)),
            dtype=np.int64,
            count=len(chunk.dictionary),
        )
        indices = chunk.indices
        mapped = hashes[indices.fill_null(0).to_numpy(zero_copy_only=False)]
        if indices.null_count:
            mapped[indices.is_null().to_numpy(zero_copy_only=False)] = -1
        out[at : at + len(chunk)] = mapped
        at += len(chunk)
    return out


def _key_bytes(values: pa.Array) -> Iterable[bytes]:
    if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
        return values.to_pylist()
    return (text.encode("utf-8") for text in values.to_pylist())


def round_robin(channels: np.ndarray, start: int, channel_count: int) -> tuple[np.ndarray, int]:
    """Give the unrouted rows (-1: no key) channels in turn, row by row, from
    ``start``; return the channels and where the turn goes on."""
    unrouted = channels < 0
    count = int(unrouted.sum())
    if not count:
        return channels, start
    channels = channels.copy()
    channels[unrouted] = (np.arange(count, dtype=np.int64) + start) % channel_count
    return channels, (start + count) % channel_count


def split_by_channel(table: pa.Table, channels: np.ndarray) -> dict[int, pa.Table]:
    """The rows of each channel, in their order in ``table``."""
    if not len(channels):
        return {}
    order = np.argsort(channels, kind="stable")
    ordered = channels[order]
    present, starts = np.unique(ordered, return_index=True)
    sorted_table = table.take(pa.array(order))
    ends = [*starts[1:].tolist(), len(ordered)]
    return {
        int(channel): sorted_table.slice(begin, end - begin)
        for channel, begin, end in zip(present.tolist(), starts.tolist(), ends, strict=True)
    }


def to_utc(table: pa.Table) -> pa.Table:
    """Time-zoned timestamp columns in UTC (a row reads back with aware UTC datetimes);
    naive ones stay naive."""
    columns = []
    changed = False
    for column in table.columns:
        kind = column.type
        if pa.types.is_timestamp(kind) and kind.tz is not None and kind.tz != "UTC":
            column = column.cast(pa.timestamp(kind.unit, tz="UTC"))
            changed = True
        columns.append(column)
    if not changed:
        return table
    return pa.Table.from_arrays(columns, names=table.column_names)


# -- reading ---------------------------------------------------------------------------


def metadata_names(fields: Sequence[str]) -> tuple[str, str, str, str]:
    """The names of the metadata columns beside ``fields`` (underscored while taken)."""
    taken = set(fields)
    names = []
    for name in METADATA_COLUMNS:
        while name in taken:
            name = "_" + name
        names.append(name)
    return names[0], names[1], names[2], names[3]


def payload_table(channel: int, chunk: Chunk, decoded: list[Any] | None = None) -> pa.Table:
    """One read chunk as a table: the values' columns, then key, channel, position
    and timestamp (each row's own, where a compacted topic's survivors differ);
    ``decoded``: the payload's values, decoded already."""
    payload = chunk.payload
    if isinstance(payload, ArrowRows):
        values = pa.Table.from_batches([payload.batch]).replace_schema_metadata(None)
        key_column = payload.key_column
        keys = None if key_column is None else values.column(key_column).combine_chunks()
    else:
        values = _values_table(payload.decode() if decoded is None else decoded)
        keys = None
    rows = values.num_rows
    key_name, channel_name, position_name, timestamp_name = metadata_names(values.column_names)
    metadata = {
        key_name: _keys_column(payload.keys, rows) if keys is None else keys,
        channel_name: pa.array(np.full(rows, channel, dtype=np.int32)),
        position_name: pa.array(
            np.arange(chunk.first, chunk.first + rows, dtype=np.int64)
            if chunk.sequences is None
            else chunk.sequences
        ),
        timestamp_name: pa.array(_micros(chunk, rows)).cast(_TIMESTAMP),
    }
    for name, column in metadata.items():
        values = values.append_column(name, column)
    return values


def _micros(chunk: Chunk, rows: int) -> np.ndarray:
    """Each row's append time in microseconds since the epoch."""
    if chunk.stamps is None:
        return np.full(rows, int(chunk.stamp * 1_000_000), dtype=np.int64)
    return (chunk.stamps * 1_000_000).astype(np.int64)


def elements_table(
    channel: int, keys: list[Any], values: list[Any], positions: list[int], stamps: list[float]
) -> pa.Table:
    """Elements of one channel given one by one (decoded values, at any positions) as
    a table with the columns of :func:`payload_table`."""
    table = _values_table(values)
    key_name, channel_name, position_name, timestamp_name = metadata_names(table.column_names)
    rows = table.num_rows
    metadata = {
        key_name: _keys_column(keys, rows),
        channel_name: pa.array(np.full(rows, channel, dtype=np.int32)),
        position_name: pa.array(positions, pa.int64()),
        timestamp_name: pa.array(
            (np.asarray(stamps, dtype=np.float64) * 1_000_000).astype(np.int64)
        ).cast(_TIMESTAMP),
    }
    for name, column in metadata.items():
        table = table.append_column(name, column)
    return table


def _keys_column(keys: list[Any] | None, rows: int) -> pa.Array:
    """The elements' keys as a column: null without keys; keys no one Arrow type
    holds together (1 and "a") as their text, as values are."""
    if keys is None:
        return pa.nulls(rows)
    try:
        return pa.array(keys)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if key is None else str(key) for key in keys])


def _values_table(decoded: list[Any]) -> pa.Table:
    try:
        if decoded and all(type(value) is dict for value in decoded):
            # pa.array sees every dict's keys (from_pylist only the first dict's)
            return pa.Table.from_struct_array(pa.array(decoded))
        return pa.table({"value": pa.array(decoded)})
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # Values no Arrow type holds together (1 and "a"; a field that is a
        # number here and text there): read as their text.
        return pa.table({"value": pa.array([str(value) for value in decoded])})


def unify(tables: Sequence[pa.Table]) -> pa.Schema:
    """One schema for tables whose columns differ (missing columns become nullable;
    types are promoted where Arrow can, e.g. int64 with double)."""
    return pa.unify_schemas([table.schema for table in tables], promote_options="permissive")


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns, in its order: missing ones null,
    extra ones dropped, types cast (a reader that declared its schema up front,
    as Spark does, gets exactly that)."""
    if table.schema.equals(schema):
        return table
    columns = []
    for field in schema:
        if field.name in table.column_names:
            column = table.column(field.name)
            if not column.type.equals(field.type):
                column = column.cast(field.type)
        else:
            column = pa.nulls(table.num_rows, field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def empty_table(schema: pa.Schema | None = None) -> pa.Table:
    """No rows: of ``schema``, else with just the metadata columns."""
    if schema is None:
        schema = pa.schema(
            [
                ("key", pa.null()),
                ("channel", pa.int32()),
                ("position", pa.int64()),
                ("timestamp", _TIMESTAMP),
            ]
        )
    return schema.empty_table()


def combine(tables: Iterable[pa.Table]) -> list[pa.Table]:
    """Consecutive tables of one schema joined into one (fewer, larger blocks)."""
    out: list[pa.Table] = []
    run: list[pa.Table] = []
    for table in tables:
        if run and not table.schema.equals(run[0].schema):
            out.append(pa.concat_tables(run))
            run = []
        run.append(table)
    if run:
        out.append(pa.concat_tables(run))
    return out


def as_batch(table: pa.Table) -> Any:
    """``table`` as ONE record batch (the unit a channel appends)."""
    return table.combine_chunks().to_batches()[0] if table.num_rows else None
