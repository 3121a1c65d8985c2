"""PublishStatuses: what ``Publisher.publish_batch`` resolves to, kept compact.

A batch of a million values has a million statuses, but each channel appended
its share in a few runs of consecutive sequences that share a time stamp. A
:class:`PublishStatuses` holds only those runs (and, for a batch spread over
several channels, which channel each value went to), travels as them, and
builds a :class:`PublishStatus` only when one is read.
"""

from __future__ import annotations

import gc
import operator
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, overload

from raytopic.core.errors import InvalidArgumentError
from raytopic.core.records import Position, PublishStatus, _unfrozen, stamp_to_datetime

if TYPE_CHECKING:
    import numpy as np

# numpy is imported in the functions that use it: a coordinator imports this module
# (through the wire records) and never needs numpy, which was half its import time,
# paid at every topic's start.

__all__ = ["PublishStatuses", "StatusRuns", "combine_statuses"]


class StatusRuns(NamedTuple):
    """One channel's share of a ``publish_batch``: the runs it appended, in order."""

    topic_id: str
    """Id of the topic."""
    channel: int
    """The channel the values went to."""
    runs: tuple[tuple[int, int, float], ...]
    """Each piece appended as ``(first sequence, count, stamp)``, in publish order."""


class PublishStatuses(Sequence[PublishStatus]):
    """The statuses of a ``publish_batch``, one per value, built when read.

    A sequence like the ``list[PublishStatus]`` it stands for: ``len``,
    indexing (a slice is a plain list), iteration, ``count``/``index``, and
    ``==`` with a list or tuple of statuses (or another PublishStatuses),
    element by element. Unhashable, like a list. It pickles as its runs.

    **Ordering**: status ``i`` is that of value ``i`` of the batch.

    Example:
        >>> statuses = ray.get(publisher.publish_batch(["a", "b"]))
        >>> statuses[-1].position.sequence - statuses[0].position.sequence
        1
    """

    __slots__ = ("_layout", "_length", "_parts", "_ranks", "_starts", "_times")

    __hash__ = None  # type: ignore[assignment]  # mutable-sequence semantics: == is by content

    def __init__(self, parts: Sequence[StatusRuns] = (), layout: np.ndarray | None = None) -> None:
        """Statuses of values spread over ``parts``.

        Args:
            parts: Each channel's runs.
            layout: For several parts, ``layout[i]`` is the index in ``parts``
                of the part holding value ``i``; None for at most one part.

        Raises:
            InvalidArgumentError: several parts without a layout, or a layout
                of another length than the parts' values.
        """
        self._parts = tuple(StatusRuns(*part) for part in parts)
        self._length = sum(count for part in self._parts for _, count, _ in part.runs)
        if layout is None and len(self._parts) > 1:
            raise InvalidArgumentError("statuses of several channels need a layout")
        if layout is not None and len(layout) != self._length:
            raise InvalidArgumentError(
                f"layout has {len(layout)} entries for {self._length} statuses"
            )
        self._layout = layout
        self._ranks: np.ndarray | None = None
        self._starts: tuple[list[int], ...] | None = None
        self._times: tuple[tuple[datetime, ...], ...] = ()

    @classmethod
    def of_channel(
        cls, topic_id: str, channel: int, runs: Sequence[tuple[int, int, float]]
    ) -> PublishStatuses:
        """The statuses of values one channel appended.

        Args:
            topic_id: Id of the topic.
            channel: The channel.
            runs: ``(first sequence, count, stamp)`` per piece appended, in order.

        Returns:
            The statuses.
        """
        return cls((StatusRuns(topic_id, channel, tuple(runs)),))

    def __reduce__(self) -> tuple[Any, ...]:
        # The runs and the layout only: the receiver builds what it reads.
        return (PublishStatuses, (self._parts, self._layout))

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> PublishStatus: ...

    @overload
    def __getitem__(self, index: slice) -> list[PublishStatus]: ...

    def __getitem__(self, index: int | slice) -> PublishStatus | list[PublishStatus]:
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(self._length))]
        index = operator.index(index)
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("PublishStatuses index out of range")
        return self._at(index)

    def __iter__(self) -> Iterator[PublishStatus]:
        if self._layout is None:
            if self._parts:
                yield from self._part_statuses(0)
            return
        pulls = [self._part_statuses(part).__next__ for part in range(len(self._parts))]
        for part in self._layout.tolist():
            yield pulls[part]()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PublishStatuses):
            if other is self:
                return True
            if len(other) != self._length:
                return False
            if other._parts == self._parts and _same_layout(other._layout, self._layout):
                return True
        elif not isinstance(other, (list, tuple)):
            return NotImplemented
        elif len(other) != self._length:
            return False
        return all(map(operator.eq, self, other))

    def __repr__(self) -> str:
        channels = sorted({part.channel for part in self._parts})
        return f"PublishStatuses({self._length} statuses, channels {channels})"

    # -- building one status --------------------------------------------------------------

    def _at(self, index: int) -> PublishStatus:
        """Status ``index`` (``0 <= index < len``)."""
        if self._layout is None:
            return self._in_part(0, index)
        if self._ranks is None:
            self._ranks = _ranks(self._layout, len(self._parts))
        return self._in_part(int(self._layout[index]), int(self._ranks[index]))

    def _in_part(self, part: int, index: int) -> PublishStatus:
        """Status of the ``index``-th value of part ``part``."""
        if self._starts is None:
            self._prepare()
        topic_id, channel, runs = self._parts[part]
        starts = self._starts[part]  # type: ignore[index]
        run = 0 if len(starts) == 1 else bisect_right(starts, index) - 1
        sequence = runs[run][0] + index - starts[run]
        return _status(topic_id, channel, sequence, self._times[part][run])

    def _part_statuses(self, part: int) -> Iterator[PublishStatus]:
        """Every status of part ``part``, in order."""
        if self._starts is None:
            self._prepare()
        topic_id, channel, runs = self._parts[part]
        for (first, count, _), timestamp in zip(runs, self._times[part], strict=True):
            end = first + count
            for start in range(first, end, _BLOCK):
                yield from _statuses(topic_id, channel, start, min(start + _BLOCK, end), timestamp)

    def _prepare(self) -> None:
        """Each run's first index in its part and its datetime: once, O(runs)."""
        starts = []
        for part in self._parts:
            offsets = [0]
            for _, count, _ in part.runs[:-1]:
                offsets.append(offsets[-1] + count)
            starts.append(offsets)
        # One datetime per run, shared by its statuses (as the eager list did).
        self._times = tuple(
            tuple(stamp_to_datetime(stamp) for _, _, stamp in part.runs) for part in self._parts
        )
        self._starts = tuple(starts)


_new = object.__new__
_UnfrozenPosition = _unfrozen(Position)
_UnfrozenStatus = _unfrozen(PublishStatus)


def _status(topic_id: str, channel: int, sequence: int, timestamp: datetime) -> PublishStatus:
    """One status (a status read by index)."""
    return _statuses(topic_id, channel, sequence, sequence + 1, timestamp)[0]


_BLOCK = 4096
"""Statuses an iteration builds at a time (with the garbage collector paused)."""


def _statuses(
    topic_id: str, channel: int, start: int, stop: int, timestamp: datetime
) -> list[PublishStatus]:
    """The statuses of sequences ``start..stop-1``, built with the collector paused.

    Building them makes two objects a status: with the collector on, each few
    hundred trigger a collection that walks every status built before (four
    times the cost of building them). Paused for one block only, so what the
    caller does between blocks runs as usual.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        built: list[PublishStatus] = []
        append = built.append
        # Built like received elements (see _unfrozen): reading every status of
        # a large batch would otherwise cost more than publishing it.
        for sequence in range(start, stop):
            position = _new(_UnfrozenPosition)
            position.topic_id = topic_id
            position.channel = channel
            position.sequence = sequence
            position.__class__ = Position
            status = _new(_UnfrozenStatus)
            status.channel = channel
            status.position = position
            status.timestamp = timestamp
            status.__class__ = PublishStatus
            append(status)
        return built
    finally:
        if collecting:
            gc.enable()


def _ranks(layout: np.ndarray, parts: int) -> np.ndarray:
    """Each value's index among the values of its part, vectorised.

    A stable sort groups the values part by part, each part's in input order;
    a value's rank is then its place in the sorted order less its part's start.
    """
    import numpy as np

    counts = np.bincount(layout, minlength=parts)
    order = np.argsort(layout, kind="stable")
    starts = np.cumsum(counts) - counts
    ranks = np.empty(len(layout), dtype=np.int64)
    ranks[order] = np.arange(len(layout)) - np.repeat(starts, counts)
    return ranks


def _same_layout(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    import numpy as np

    if a is None or b is None:
        return a is b
    return bool(np.array_equal(a, b))


def _layout_dtype(parts: int) -> type[np.unsignedinteger]:
    """The smallest unsigned type that numbers ``parts`` parts."""
    import numpy as np

    if parts <= 1 << 8:
        return np.uint8
    if parts <= 1 << 16:
        return np.uint16
    return np.uint32


# -- several channels ------------------------------------------------------------------


def combine_statuses(layout: bytes | np.ndarray, *parts: PublishStatuses) -> PublishStatuses:
    """The statuses of several channels' parts of one batch, in the batch's order.

    Nothing is built: the result holds the parts' runs and the layout.

    Args:
        layout: ``layout[i]`` is the index among ``parts`` of the part holding
            value ``i``; the values of one part are in that part's order. An
            integer array (any integer dtype), or ``bytes`` of one byte per
            value (fewer than 256 parts).
        *parts: Each part's statuses (a channel's reply to its share).

    Returns:
        One PublishStatuses of ``len(layout)`` statuses.

    Raises:
        InvalidArgumentError: the layout does not name each part's values
            exactly as many times as the part has statuses.
    """
    import numpy as np

    if isinstance(layout, (bytes, bytearray, memoryview)):
        layout = np.frombuffer(layout, dtype=np.uint8)
    layout = np.asarray(layout)
    if layout.ndim != 1 or (layout.size and layout.dtype.kind not in "iu"):
        raise InvalidArgumentError("layout must be a flat array of part indices")
    if layout.size and (int(layout.min()) < 0 or int(layout.max()) >= len(parts)):
        raise InvalidArgumentError(f"layout names a part outside 0..{len(parts) - 1}")
    layout = layout.astype(np.intp, copy=False)  # an empty one may have come as floats
    counts = np.bincount(layout, minlength=len(parts)).tolist()
    sizes = [len(part) for part in parts]
    if counts != sizes:
        raise InvalidArgumentError(f"layout holds {counts} values per part, the parts {sizes}")
    runs: list[StatusRuns] = []
    offsets: list[int] = []
    for part in parts:
        offsets.append(len(runs))
        runs.extend(part._parts)
    if len(runs) <= 1:
        return PublishStatuses(runs)
    dtype = _layout_dtype(len(runs))
    combined = np.asarray(offsets, dtype=dtype)[layout]
    for index, part in enumerate(parts):
        if part._layout is not None:  # a combined part: its own parts follow its offset
            combined[layout == index] += part._layout.astype(dtype)
    return PublishStatuses(runs, combined)
