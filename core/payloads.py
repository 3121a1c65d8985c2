"""Payloads: the values of one append, as a channel stores, slices, ships and decodes them.

A channel never needs a published value as a Python object (unless a filter
or converter runs), so an append stays in the form it arrived in, and a read
hands out slices of it. Two kinds share one interface (:class:`Payload`):

- :class:`PickledValues`: values pickled one by one when they were published
  (so a later change to the caller's object does not change what was
  published), laid back to back in ONE buffer, with the end offset of each.
  A million elements are a thousand buffers, not a million objects.
- :class:`PickledList`: the values of one ``publish_batch`` part pickled
  together as ONE list (:func:`encode_values` picks it where that preserves
  what a reader sees): a third of the bytes and of the work per value, as
  dicts share their keys' strings. A slice shares the buffer; only a slice
  shipped alone is re-encoded (from a decoded copy kept for the last run).
- :class:`ArrowRows`: an Arrow record batch (a DataFrame's rows, from the
  Spark bridge or Ray Data); each row is a value, decoded as a dict.

A third kind holds no values: :class:`DamagedElements` keeps the positions
of a stored record whose checksum failed in the ring, so every reader that
reaches them learns of the loss (``raytopic.actors.damage``); it is never
decoded, shipped or delivered.

On the wire (a Ray call, or a reply) a payload travels as a buffer wrapped
in :class:`pickle.PickleBuffer`, so pickle protocol 5 (Ray's) moves it out of
band instead of copying it into the message; a slice travels as just its own
bytes. ``Payload.decode`` is the one decoder: in the subscriber's process
for received elements, and in the channel for what a filter or converter
sees.
"""

from __future__ import annotations

import io
import pickle
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import cloudpickle
import numpy as np

from raytopic.core.errors import InvalidTypeError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "KEY_COLUMN",
    "TOMBSTONE",
    "ArrowRows",
    "DamagedElements",
    "Payload",
    "PickledList",
    "PickledValues",
    "UNDECODABLE",
    "decode_checked",
    "dumps_value",
    "encode_values",
    "fast_dumps",
    "join_payloads",
    "mergeable",
]

OUT_OF_BAND_MIN = 100 * 1024
"""Bytes from which a payload's buffer travels out of band under pickle 5. Ray
inlines smaller objects into its messages, where an out-of-band buffer only
adds work (about 0.3 ms per reply here); larger ones go to the object store,
where out of band means zero-copy."""

TOMBSTONE = pickle.dumps(None, 5)
"""The pickle of a delete's value (``Publisher.delete``: a compacted topic's
tombstone). ``None`` is refused as a published value everywhere else."""

_REF_MARKER = b"ObjectRef"
_MAIN_MARKER = b"__main__"


# -- one value ---------------------------------------------------------------------


def dumps_value(value: Any) -> bytes:
    """Pickle one published value, refusing what cannot be stored as a value.

    Plain pickle first (fast); cloudpickle when plain pickle cannot, or when
    the value refers to ``__main__`` (which a consumer process could not
    import). ObjectRefs, bare or nested, are refused: a ref stored in a topic
    would die with the publisher.

    Raises:
        InvalidTypeError: ``value`` is None, an ObjectRef (or holds one), or
            cannot be pickled.
    """
    if value is None:
        raise InvalidTypeError("None is not a value: publish something else")
    try:
        data = pickle.dumps(value, protocol=5)
        if _MAIN_MARKER in data:
            data = cloudpickle.dumps(value, protocol=5)
    except BaseException:  # SystemExit too: a value's __reduce__ is user code
        try:
            data = cloudpickle.dumps(value, protocol=5)
        except BaseException as error:
            raise InvalidTypeError(
                f"value of type {type(value).__name__} cannot be pickled: {error}"
            ) from error
    if _REF_MARKER in data and _holds_object_ref(value):
        raise InvalidTypeError(
            "an ObjectRef cannot be published: it would die with its owner; "
            "publish the value (ray.get it first)"
        )
    return data


def fast_dumps(value: Any) -> bytes:
    """:func:`dumps_value` with the common case inline (``publish()`` calls it per value)."""
    try:
        data = pickle.dumps(value, 5)
    except BaseException:  # dumps_value says why (SystemExit too)
        return dumps_value(value)
    if _MAIN_MARKER in data or _REF_MARKER in data or value is None:
        return dumps_value(value)
    return data


def _holds_object_ref(value: Any) -> bool:
    """Exact check behind the fast byte test in :func:`dumps_value`."""
    import ray

    found = False

    class _Finder(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            nonlocal found
            if isinstance(obj, ray.ObjectRef):
                found = True
                return (str, ("",))
            return super().reducer_override(obj)

    _Finder(io.BytesIO(), protocol=5).dump(value)
    return found


# -- runs of values ------------------------------------------------------------------

UNDECODABLE: Any = object()
"""Stands for a value :func:`decode_checked` could not decode."""


def decode_checked(payload: Payload) -> tuple[list[Any], dict[int, BaseException]]:
    """Every value of ``payload``, and the failures of those that cannot be decoded.

    The common case costs what ``decode()`` costs. When a value cannot be
    decoded here (its class is missing or changed: a consumer's version skew),
    the payload is decoded value by value where its kind allows, so one such
    value costs only itself.

    Returns:
        The values (``UNDECODABLE`` at each index that failed), and each failed
        index's exception.
    """
    try:
        return payload.decode(), {}
    except BaseException:  # SystemExit too: a value's loading runs its own code
        return payload.decode_each()


class Payload:
    """The values of one append (or a slice of them): the interface of both kinds."""

    __slots__ = ()

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def keys(self) -> list[Any] | None:
        """Each value's key, as published (None for one published without), or None
        when no value has a key."""
        return None

    @property
    def nbytes(self) -> int:
        """Bytes the values take (what a store writes, what the wire carries)."""
        raise NotImplementedError

    def slice(self, start: int, stop: int) -> Payload:
        """Values ``start`` to ``stop - 1``, without copying them."""
        raise NotImplementedError

    def take(self, indices: Sequence[int]) -> Payload:
        """The values at ``indices`` (ascending), as a payload of the same kind."""
        raise NotImplementedError

    def decode(self) -> list[Any]:
        """Every value as a Python object."""
        raise NotImplementedError

    def tombstones(self) -> np.ndarray:
        """Whether each value is a delete's (``TOMBSTONE``: a compacted topic's None),
        without decoding the others. Only values pickled one by one can be."""
        return np.zeros(len(self), dtype=bool)

    def decode_each(self) -> tuple[list[Any], dict[int, BaseException]]:
        """Like ``decode``, a value's failure costing only itself where the kind
        allows (see :func:`decode_checked`). By default the values are decoded
        together, so a failure is every value's."""
        try:
            return self.decode(), {}
        except BaseException as error:  # SystemExit too
            return [UNDECODABLE] * len(self), dict.fromkeys(range(len(self)), error)

    def owned(self) -> Payload:
        """The same values in memory of this process's own: a channel keeps what it
        stores, where a view into Ray's object store would stay pinned there."""
        raise NotImplementedError


class PickledValues(Payload):
    """Values pickled one by one, back to back in one buffer.

    Value ``i`` is ``buffer[begin:ends[0]]`` for ``i == 0``, else
    ``buffer[ends[i - 1]:ends[i]]``. A slice shares the buffer. Values
    published with a key keep it in ``keys``.
    """

    __slots__ = ("_keys", "begin", "buffer", "ends")

    def __init__(
        self,
        buffer: bytes | memoryview,
        ends: np.ndarray,
        begin: int = 0,
        keys: list[Any] | None = None,
    ) -> None:
        self.buffer = buffer
        self.ends = ends
        self.begin = begin
        self._keys = keys

    @property
    def keys(self) -> list[Any] | None:
        """Each value's key (None: published without), or None when no value has one."""
        return self._keys

    @classmethod
    def from_pickles(cls, pickles: Sequence[bytes], keys: list[Any] | None = None) -> PickledValues:
        """Join values pickled one by one (by :func:`dumps_value`), with their keys
        if any has a key."""
        ends = np.fromiter(map(len, pickles), dtype=np.int64, count=len(pickles)).cumsum()
        return cls(b"".join(pickles), ends, 0, keys)

    @classmethod
    def from_values(cls, values: Iterable[Any]) -> PickledValues:
        """Pickle values one by one (refusing None, ObjectRefs and the unpicklable)."""
        return cls.from_pickles([dumps_value(value) for value in values])

    def __len__(self) -> int:
        return len(self.ends)

    @property
    def nbytes(self) -> int:
        """Bytes of the pickles."""
        return int(self.ends[-1]) - self.begin if len(self.ends) else 0

    def slice(self, start: int, stop: int) -> PickledValues:
        """Values ``start`` to ``stop - 1`` over the same buffer."""
        if start == 0 and stop >= len(self.ends):
            return self
        begin = self.begin if start == 0 else int(self.ends[start - 1])
        keys = None if self._keys is None else self._keys[start:stop]
        return PickledValues(self.buffer, self.ends[start:stop], begin, keys)

    def take(self, indices: Sequence[int]) -> PickledValues:
        """The values at ``indices``, copied into a new buffer."""
        view = memoryview(self.buffer)
        ends = self.ends
        return PickledValues.from_pickles(
            [
                bytes(view[self.begin if i == 0 else int(ends[i - 1]) : int(ends[i])])
                for i in indices
            ],
            None if self._keys is None else [self._keys[i] for i in indices],
        )

    def decode(self) -> list[Any]:
        """Unpickle every value."""
        view = memoryview(self.buffer)
        loads = pickle.loads
        values: list[Any] = []
        append = values.append
        start = self.begin
        for end in self.ends.tolist():
            append(loads(view[start:end]))
            start = end
        return values

    def tombstones(self) -> np.ndarray:
        """Whether each value is ``TOMBSTONE`` (compared where the length matches)."""
        count = len(self.ends)
        found = np.zeros(count, dtype=bool)
        if not count:
            return found
        starts = np.empty(count, dtype=np.int64)
        starts[0] = self.begin
        starts[1:] = self.ends[:-1]
        view = memoryview(self.buffer)
        for index in np.flatnonzero(self.ends - starts == len(TOMBSTONE)).tolist():
            found[index] = view[int(starts[index]) : int(self.ends[index])] == TOMBSTONE
        return found

    def decode_each(self) -> tuple[list[Any], dict[int, BaseException]]:
        """Unpickle every value on its own: one that fails costs only itself."""
        view = memoryview(self.buffer)
        values: list[Any] = []
        failures: dict[int, BaseException] = {}
        start = self.begin
        for index, end in enumerate(self.ends.tolist()):
            try:
                values.append(pickle.loads(view[start:end]))
            except BaseException as error:  # SystemExit too: it costs only its value
                values.append(UNDECODABLE)
                failures[index] = error
            start = end
        return values, failures

    def owned(self) -> PickledValues:
        """The same values in a buffer of this process's own (not a view into Ray's
        object store, which a long-lived reference would keep pinned)."""
        if type(self.buffer) is bytes:
            return self
        return PickledValues(bytes(self.buffer), np.array(self.ends), self.begin, self._keys)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        # Only this slice's bytes travel, re-based to start at 0.
        end = int(self.ends[-1]) if len(self.ends) else self.begin
        data = memoryview(self.buffer)[self.begin : end]
        ends = self.ends - self.begin if self.begin else self.ends
        keys = self._keys
        if isinstance(protocol, int) and protocol >= 5 and len(data) >= OUT_OF_BAND_MIN:
            return (_pickled_values, (pickle.PickleBuffer(data), ends.tobytes(), keys))
        return (_pickled_values, (bytes(data), ends.tobytes(), keys))

    def __repr__(self) -> str:
        return f"PickledValues({len(self)} values, {self.nbytes} bytes)"


def _pickled_values(buffer: Any, ends: bytes, keys: list[Any] | None = None) -> PickledValues:
    return PickledValues(buffer, np.frombuffer(ends, dtype=np.int64), 0, keys)


_ATOMS = frozenset({str, int, float, bool, bytes, complex})
"""Immutable types whose sharing between values nobody can see."""


def encode_values(values: list[Any], keys: list[Any] | None = None) -> Payload:
    """Pickle the values of one append, once as a list where that preserves what a
    reader sees, else one by one; refusing what :func:`dumps_value` refuses.

    A list pickle is taken when every value is a distinct object (``[d, d]``
    would decode to one dict twice) and none needs cloudpickle or holds an
    ObjectRef. Parts shared BETWEEN values (one list inside two dicts) stay
    shared after decoding, as in ``ray.put`` of the list; values are still
    snapshots: a later change to a published object never reaches readers.

    Args:
        values: The values, in order.
        keys: Each value's key (None: none), or None when no value has one.

    Raises:
        InvalidTypeError: a value is None, an ObjectRef (or holds one), or
            cannot be pickled (nothing is encoded).
    """
    if len(values) > 1:
        kinds = set(map(type, values))
        if type(None) not in kinds and (
            kinds <= _ATOMS or len(set(map(id, values))) == len(values)
        ):
            try:
                data = pickle.dumps(values, 5)
            except BaseException:  # SystemExit too
                data = None  # dumps_value says why, value by value
            if data is not None and _MAIN_MARKER not in data and _REF_MARKER not in data:
                return PickledList(data, len(values), keys=keys)
    return PickledValues.from_pickles([dumps_value(value) for value in values], keys)


class PickledList(Payload):
    """Values pickled together as one list: elements ``start`` to ``stop - 1`` of it.

    Slices share the buffer (a channel stores and slices runs as they came).
    A slice that travels or is stored alone is re-encoded, so a reader never
    receives (nor decodes) values it did not ask for: from a decoded copy of
    the last run re-encoded here, so a channel handing a run out piece by
    piece decodes it once.
    """

    __slots__ = ("_keys", "buffer", "start", "stop", "total")

    def __init__(
        self,
        buffer: bytes | memoryview,
        total: int,
        start: int = 0,
        stop: int | None = None,
        keys: list[Any] | None = None,
    ) -> None:
        self.buffer = buffer
        self.total = total
        self.start = start
        self.stop = total if stop is None else stop
        self._keys = keys
        """Keys of the WHOLE list (``keys`` slices them)."""

    @property
    def whole(self) -> bool:
        """Whether this is every value of the buffer."""
        return self.start == 0 and self.stop == self.total

    @property
    def keys(self) -> list[Any] | None:
        """Each value's key (None: published without), or None when no value has one."""
        if self._keys is None or self.whole:
            return self._keys
        return self._keys[self.start : self.stop]

    def __len__(self) -> int:
        return self.stop - self.start

    @property
    def nbytes(self) -> int:
        """Bytes of the list pickle, prorated to this slice."""
        size = len(self.buffer)
        return size if self.whole else size * len(self) // max(1, self.total)

    def slice(self, start: int, stop: int) -> PickledList:
        """Values ``start`` to ``stop - 1`` over the same buffer."""
        stop = min(stop, len(self))
        if start == 0 and stop == len(self):
            return self
        return PickledList(
            self.buffer, self.total, self.start + start, self.start + stop, self._keys
        )

    def take(self, indices: Sequence[int]) -> PickledList:
        """The values at ``indices``, re-encoded as a list of their own."""
        values = _decoded_run(self)
        chosen = [values[self.start + index] for index in indices]
        keys = None if self._keys is None else [self._keys[self.start + i] for i in indices]
        return PickledList(pickle.dumps(chosen, 5), len(chosen), keys=keys)

    def decode(self) -> list[Any]:
        """Unpickle the values: objects of their own, which the caller may change."""
        values = pickle.loads(self.buffer)
        return values if self.whole else values[self.start : self.stop]

    def compact(self) -> PickledList:
        """This slice as a list of its own (itself when it is the whole list)."""
        if self.whole:
            return self
        values = _decoded_run(self)[self.start : self.stop]
        return PickledList(pickle.dumps(values, 5), len(self), keys=self.keys)

    def owned(self) -> PickledList:
        """The same values in a buffer of this process's own (see ``PickledValues.owned``)."""
        if type(self.buffer) is bytes:
            return self
        return PickledList(bytes(self.buffer), self.total, self.start, self.stop, self._keys)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        whole = self.compact()
        keys = whole._keys
        data: bytes | memoryview | pickle.PickleBuffer = whole.buffer
        if isinstance(protocol, int) and protocol >= 5 and len(whole.buffer) >= OUT_OF_BAND_MIN:
            data = pickle.PickleBuffer(data)
        elif type(data) is not bytes:
            data = bytes(data)
        return (_pickled_list, (data, whole.total, keys))

    def __repr__(self) -> str:
        return f"PickledList({len(self)} of {self.total} values, {self.nbytes} bytes)"


def _pickled_list(buffer: Any, total: int, keys: list[Any] | None) -> PickledList:
    return PickledList(buffer, total, keys=keys)


_last_run: tuple[Any, list[Any]] | None = None
"""(buffer, its decoded values) of the last run a slice was decoded from."""
_last_run_lock = threading.Lock()


def _decoded_run(payload: PickledList) -> list[Any]:
    """Every value of ``payload``'s buffer, decoded once per run in a row.

    Only for re-encoding (the values never reach user code, which might
    change them), so one copy serves every slice; only the last run is kept
    (readers go through runs in order)."""
    global _last_run
    buffer = payload.buffer
    with _last_run_lock:
        last = _last_run
    if last is not None and last[0] is buffer:
        return last[1]
    values = pickle.loads(buffer)
    with _last_run_lock:
        _last_run = (buffer, values)
    return values


KEY_COLUMN = b"raytopic.key"
"""The schema metadata entry of Arrow rows appended with a key column: its name
(the rows' keys are that column's values; it travels and is stored with the
schema, so the rows need nothing else)."""


class ArrowRows(Payload):
    """An Arrow record batch: each row is a value, decoded as a ``dict``; rows
    appended with a key column (:meth:`keyed`) have its values as their keys."""

    __slots__ = ("batch", "borrowed")

    def __init__(self, batch: pa.RecordBatch, borrowed: bool = False) -> None:
        self.batch = batch
        self.borrowed = borrowed
        """Whether the batch's buffers are a view into a buffer not of this
        process's own (Ray's object store, after an out-of-band transfer)."""

    @classmethod
    def keyed(cls, batch: pa.RecordBatch, key: str | None) -> ArrowRows:
        """Rows whose keys are the values of column ``key`` (None: rows without keys)."""
        if key is not None:
            metadata = dict(batch.schema.metadata or {})
            metadata[KEY_COLUMN] = key.encode()
            batch = batch.replace_schema_metadata(metadata)
        return cls(batch)

    @property
    def key_column(self) -> str | None:
        """The name of the column whose values are the rows' keys, or None."""
        metadata = self.batch.schema.metadata
        name = None if metadata is None else metadata.get(KEY_COLUMN)
        return None if name is None else name.decode()

    @property
    def keys(self) -> list[Any] | None:
        """The key column's values (None for a null), or None without a key column."""
        name = self.key_column
        return None if name is None else self.batch.column(name).to_pylist()

    @classmethod
    def from_ipc(cls, data: Any) -> ArrowRows:
        """Read back :meth:`to_ipc` bytes (zero-copy over ``data``)."""
        import pyarrow as pa

        with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
            batch = reader.read_next_batch()  # to_ipc writes exactly one batch
        return cls(batch, borrowed=not isinstance(data, bytes))

    def owned(self) -> ArrowRows:
        """The same rows in buffers of this process's own (see ``PickledValues.owned``)."""
        if not self.borrowed:
            return self
        return ArrowRows.from_ipc(self.to_ipc().to_pybytes())

    def to_ipc(self) -> Any:
        """The batch as an Arrow IPC stream in a pyarrow Buffer (only this slice's rows:
        IPC truncates a sliced batch's buffers, where pickling a slice would carry all of
        them)."""
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.batch.schema) as writer:
            writer.write_batch(self.batch)
        return sink.getvalue()

    def __len__(self) -> int:
        return self.batch.num_rows

    @property
    def nbytes(self) -> int:
        """Bytes of the batch's buffers (of this slice)."""
        return self.batch.nbytes

    def slice(self, start: int, stop: int) -> ArrowRows:
        """Rows ``start`` to ``stop - 1`` (zero-copy)."""
        if start == 0 and stop >= self.batch.num_rows:
            return self
        return ArrowRows(self.batch.slice(start, stop - start))

    def take(self, indices: Sequence[int]) -> ArrowRows:
        """The rows at ``indices``."""
        import pyarrow as pa

        return ArrowRows(self.batch.take(pa.array(indices, type=pa.int64())))

    def decode(self) -> list[dict[str, Any]]:
        """Every row as a dict of column name -> Python value."""
        return self.batch.to_pylist()

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        data = self.to_ipc()
        if isinstance(protocol, int) and protocol >= 5 and data.size >= OUT_OF_BAND_MIN:
            return (ArrowRows.from_ipc, (pickle.PickleBuffer(data),))
        return (ArrowRows.from_ipc, (data.to_pybytes(),))

    def __repr__(self) -> str:
        return f"ArrowRows({len(self)} rows, {self.batch.schema.names})"


def mergeable(first: Payload, second: Payload) -> bool:
    """Whether :func:`join_payloads` can make one payload of the two (one kind; Arrow
    rows of one schema, its metadata included)."""
    kind = type(first)
    if kind is not type(second) or kind is DamagedElements:
        return False
    if kind is ArrowRows:
        return first.batch.schema.equals(second.batch.schema, check_metadata=True)  # type: ignore[attr-defined]
    return True


def join_payloads(parts: Sequence[Payload]) -> Payload:
    """The values of ``parts`` (pairwise :func:`mergeable`) as one payload, in order,
    with their keys (a compaction's survivors of several appends)."""
    first = parts[0]
    if len(parts) == 1:
        return first
    keys: list[Any] | None = None
    if any(part.keys is not None for part in parts):
        keys = []
        for part in parts:
            part_keys = part.keys
            keys.extend([None] * len(part) if part_keys is None else part_keys)
    if isinstance(first, PickledValues):
        buffers: list[memoryview] = []
        ends: list[np.ndarray] = []
        offset = 0
        for part in parts:
            assert isinstance(part, PickledValues)
            end = int(part.ends[-1]) if len(part.ends) else part.begin
            buffers.append(memoryview(part.buffer)[part.begin : end])
            ends.append(part.ends - part.begin + offset)
            offset += end - part.begin
        return PickledValues(b"".join(buffers), np.concatenate(ends), 0, keys)
    if isinstance(first, PickledList):
        values = [value for part in parts for value in part.decode()]
        return PickledList(pickle.dumps(values, 5), len(values), keys=keys)
    if isinstance(first, ArrowRows):
        import pyarrow as pa

        table = pa.Table.from_batches([part.batch for part in parts])  # type: ignore[attr-defined]
        return ArrowRows(table.combine_chunks().to_batches()[0])
    raise TypeError(f"cannot join {type(first).__name__} payloads")


class DamagedElements(Payload):
    """Positions whose stored record was damaged (a checksum mismatch): they keep
    their place in the ring, and their values are lost. Never decoded."""

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    @property
    def nbytes(self) -> int:
        """None: nothing of the values is kept."""
        return 0

    def slice(self, start: int, stop: int) -> DamagedElements:
        """Positions ``start`` to ``stop - 1`` of the range."""
        return DamagedElements(max(0, min(stop, self.count) - start))

    def take(self, indices: Sequence[int]) -> DamagedElements:
        """As many damaged positions."""
        return DamagedElements(len(indices))

    def decode(self) -> list[Any]:
        """Refused: a damaged record's values are never handed out."""
        raise ValueError("damaged elements have no values")

    def owned(self) -> DamagedElements:
        """Itself (it holds no buffer)."""
        return self

    def __repr__(self) -> str:
        return f"DamagedElements({self.count})"
