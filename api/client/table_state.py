"""What a table view holds, and how elements change it. No Ray.

A table is the latest value of every key of a topic. A key lives in one
channel (routing), so its versions are ordered by their positions there, and
a table built channel by channel, each channel in position order, holds every
key's latest value whatever order the channels are read in.

- :class:`TableState`: the values by key. An element whose value is None is a
  delete (a tombstone): the key leaves the table and is never an entry. An
  element without a key is not a table's (as Kafka's tables skip null keys).
- :class:`AppliedMarks`: per channel, the last position applied: what a
  refresh waits for, and what tells an element seen again (a reader that
  resumed after a channel's restart) from a new one.
- :class:`Survivors`: the elements of a channel that a table keeps, with where
  they are (``raytopic.data.read_table`` reduces each channel with it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = ["AppliedMarks", "Change", "Survivors", "TableState"]

_MISSING: Any = object()


class Change(NamedTuple):
    """One change of a table, as listeners hear of it."""

    key: Any
    """The key that changed."""
    value: Any
    """Its new value; None: the key was deleted."""


class TableState:
    """The latest value of every key; deleted keys are never entries."""

    def __init__(self) -> None:
        self._values: dict[Any, Any] = {}

    def apply(self, key: Any, value: Any) -> Change | None:
        """Apply one element (in its channel's position order).

        Returns:
            The change it made: every value is one (the same value again too); a
            delete only when the key was there. None when nothing changed (no
            key, or a delete of a key not held).
        """
        if key is None:
            return None
        if value is None:
            if self._values.pop(key, _MISSING) is _MISSING:
                return None
            return Change(key, None)
        self._values[key] = value
        return Change(key, value)

    def apply_all(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        """Apply elements in order (a bulk read's), without reporting changes."""
        table = self._values
        for key, value in zip(keys, values, strict=True):
            if key is None:
                continue
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of ``key``, or ``default``."""
        return self._values.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def items(self) -> list[tuple[Any, Any]]:
        """Every (key, value), in the order keys first came."""
        return list(self._values.items())

    def keys(self) -> list[Any]:
        """Every key."""
        return list(self._values)

    def values(self) -> list[Any]:
        """Every value."""
        return list(self._values.values())


class AppliedMarks:
    """Per channel, the last position applied (-1: none); marks only rise."""

    def __init__(self, marks: Mapping[int, int]) -> None:
        self._marks = dict(marks)

    def is_new(self, channel: int, position: int) -> bool:
        """Whether the element at ``position`` comes after what was applied there."""
        return position > self._marks.get(channel, -1)

    def mark(self, channel: int) -> int:
        """The last position applied at ``channel`` (-1: none)."""
        return self._marks.get(channel, -1)

    def advance(self, channel: int, position: int) -> None:
        """Everything of ``channel`` up to ``position`` is applied."""
        if position > self._marks.get(channel, -1):
            self._marks[channel] = position

    def covers(self, tails: Mapping[int, int]) -> bool:
        """Whether every channel is applied up to its tail in ``tails``."""
        return all(self._marks.get(channel, -1) >= tail for channel, tail in tails.items())

    def behind(self, tails: Mapping[int, int]) -> dict[int, tuple[int, int]]:
        """The channels not applied up to their tails: (applied, tail) each."""
        return {
            channel: (self._marks.get(channel, -1), tail)
            for channel, tail in tails.items()
            if self._marks.get(channel, -1) < tail
        }

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self._marks.items())


class Survivors:
    """The elements a table keeps of one channel's elements, added in position order:
    each key's last one unless it is a delete, with where it is (``where``: anything,
    such as its position and time stamp)."""

    def __init__(self) -> None:
        self._latest: dict[Any, tuple[Any, Any]] = {}

    def add(self, key: Any, value: Any, where: Any) -> None:
        """The next element."""
        if key is None:
            return
        latest = self._latest
        latest.pop(key, None)  # re-inserted below: the dict keeps position order
        if value is not None:
            latest[key] = (value, where)

    def rows(self) -> list[tuple[Any, Any, Any]]:
        """Each survivor as (key, value, where), in position order.

        Example:
            >>> survivors = Survivors()
            >>> for n, (key, value) in enumerate([("a", 1), ("b", 2), ("a", 3), ("b", None)]):
            ...     survivors.add(key, value, n)
            >>> survivors.rows()
            [('a', 3, 2)]
        """
        return [(key, value, where) for key, (value, where) in self._latest.items()]
