"""``Topic.ringbuffer(c)``: one channel with Hazelcast Ringbuffer semantics.

Sequences: empty means ``tail == head - 1`` (``head 0, tail -1`` when fresh);
``read_one`` waits while ``sequence == tail + 1``; a sequence below the head
raises ``StaleSequenceError(head_sequence)``; beyond ``tail + 1``, negative
values, ``min_count > max_count`` or ``max_count > 1000`` raise ValueError
(InvalidArgumentError). ``add(item)`` without a policy overwrites, as in
Hazelcast. Items are stored as values (pickled); None and ObjectRefs are
refused with InvalidTypeError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import cloudpickle
import ray

from raytopic.actors.payloads import PickledValues
from raytopic.config import Overflow, check_timeout
from raytopic.errors import InvalidTypeError, unwrap_ray_error

if TYPE_CHECKING:
    from raytopic.topic import Topic

__all__ = ["ReadResultSet", "Ringbuffer"]


class ReadResultSet(Sequence[Any]):
    """The items one ``read_many`` read: a sequence of values.

    Attributes:
        read_count: Items read, matching the filter or not.
        next_sequence_to_read_from: Where a following read should start.
    """

    __slots__ = ("_items", "_sequences", "next_sequence_to_read_from", "read_count")

    def __init__(self, start: int, read_count: int, items: list[Any], sequences: list[int]) -> None:
        self.read_count = read_count
        self.next_sequence_to_read_from = start + read_count
        self._items = items
        self._sequences = sequences

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def get_sequence(self, index: int) -> int:
        """The sequence of the ``index``-th item returned."""
        return self._sequences[index]

    def __repr__(self) -> str:
        return (
            f"ReadResultSet(read_count={self.read_count}, items={len(self)}, "
            f"next={self.next_sequence_to_read_from})"
        )


class Ringbuffer:
    """One channel of a topic as a Hazelcast-style ring buffer.

    Writes here are plain appends to the channel (subscribers receive them
    too). ``*_async`` methods return ObjectRefs.
    """

    def __init__(self, topic: Topic, channel: int) -> None:
        self._topic = topic
        self._channel = channel
        self._actor = topic._channel_actors[channel]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Ringbuffer, (self._topic, self._channel))

    @property
    def channel(self) -> int:
        """The channel this ring buffer is."""
        return self._channel

    def _get(self, ref: Any) -> Any:
        with unwrap_ray_error():
            return ray.get(ref)

    # -- sizes -----------------------------------------------------------------

    def head_sequence(self) -> int:
        """Sequence of the oldest item (tail + 1 when empty)."""
        return self._get(self._actor.head_sequence.remote())

    def tail_sequence(self) -> int:
        """Sequence of the newest item (-1 when nothing was ever added)."""
        return self._get(self._actor.tail_sequence.remote())

    def capacity(self) -> int:
        """Most items held."""
        return self._get(self._actor.capacity.remote())

    def size(self) -> int:
        """Items held now."""
        return self._get(self._actor.size.remote())

    def remaining_capacity(self) -> int:
        """``capacity() - size()`` (with or without a TTL)."""
        return self._get(self._actor.remaining_capacity.remote())

    # -- adding ------------------------------------------------------------------

    def add(self, item: Any, overflow: str = "overwrite", timeout: float = 60.0) -> int:
        """Add one item; return its sequence (-1 if ``"fail"`` found no room)."""
        return self._get(self.add_async(item, overflow, timeout))

    def add_async(self, item: Any, overflow: str = "overwrite", timeout: float = 60.0) -> Any:
        """Add one item; ``ObjectRef[int]`` of its sequence (or -1)."""
        return self.add_all_async([item], overflow, timeout)

    def add_all(
        self, items: Iterable[Any], overflow: str = "overwrite", timeout: float = 60.0
    ) -> int:
        """Add items in order; return the LAST sequence (-1: refused whole)."""
        return self._get(self.add_all_async(items, overflow, timeout))

    def add_all_async(
        self, items: Iterable[Any], overflow: str = "overwrite", timeout: float = 60.0
    ) -> Any:
        """Add items in order; ``ObjectRef[int]`` of the last sequence, or -1 if
        ``"fail"`` refused the batch (never part of it). An empty batch changes
        nothing and returns the tail. ``"block"`` (a topic's policy) waits up
        to ``timeout`` seconds for room, then gives -1."""
        policy = Overflow.parse(overflow)
        check_timeout(timeout, "timeout", allow_none=False)
        return self._actor.add_all.remote(PickledValues.from_values(items), policy.value, timeout)

    # -- reading -----------------------------------------------------------------

    def read_one(self, sequence: int) -> Any:
        """The item at ``sequence``; waits while ``sequence == tail + 1``.

        Raises:
            StaleSequenceError: ``sequence`` is below the head.
            InvalidArgumentError: negative, or beyond ``tail + 1``.
        """
        (value,) = self._get(self._actor.read_one.remote(sequence)).payload.decode()
        return value

    def read_many(
        self,
        start_sequence: int,
        min_count: int,
        max_count: int,
        filter: Callable[[Any], bool] | None = None,
    ) -> ReadResultSet:
        """``read_many_async`` and wait for it."""
        return self._get(self.read_many_async(start_sequence, min_count, max_count, filter))

    def read_many_async(
        self,
        start_sequence: int,
        min_count: int,
        max_count: int,
        filter: Callable[[Any], bool] | None = None,
    ) -> Any:
        """Read a batch: ``ObjectRef[ReadResultSet]``; waits until ``min_count`` items match.

        The filter runs inside the channel actor; ``read_count`` counts every
        item read, matching or not, while ``min_count``/``max_count`` (<= 1000)
        count matching items.
        """
        if filter is not None and not callable(filter):
            raise InvalidTypeError("filter must be a callable item -> bool, or None")
        filter_bytes = cloudpickle.dumps(filter) if filter is not None else None
        return self._actor.read_many.remote(start_sequence, min_count, max_count, filter_bytes)
