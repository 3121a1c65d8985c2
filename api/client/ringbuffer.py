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

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import ray

from raytopic.core.config import (
    Overflow,
    OverflowName,
    check_items,
    check_nonnegative_int,
    check_timeout,
)
from raytopic.core.destroyed import check_topic, topic_calls
from raytopic.core.errors import InvalidTypeError
from raytopic.core.payloads import PickledValues, decode_checked
from raytopic.core.protocol import (
    AddAll,
    Poison,
    ReadMany,
    ReadOne,
    ReadRingFigures,
    RingFigures,
    pack_request,
    poison_error,
)
from raytopic.core.records import ReadResultSet
from raytopic.core.user_functions import pickle_function

if TYPE_CHECKING:
    from raytopic.client.topic import Topic

__all__ = ["ReadResultSet", "Ringbuffer"]


class Ringbuffer:
    """One channel of a topic as a Hazelcast-style ring buffer.

    Writes here are plain appends to the channel (subscribers receive them
    too). ``*_async`` methods return ObjectRefs. Once the topic is destroyed,
    every call raises ``TopicNotFoundError``.
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
        with topic_calls(self._topic.topic_id, self._topic.name):
            return ray.get(ref)

    def _ask(self, request: Any, payload: Any = None) -> Any:
        """The channel's reply to a data-path request, as an ObjectRef."""
        return self._actor.request.remote(pack_request(request), payload)

    def _figures(self) -> RingFigures:
        return self._get(self._ask(ReadRingFigures()))

    def _check_topic(self) -> None:
        """Before a call whose ref is handed back: Ray would fail a dead actor's ref
        with its ActorDiedError."""
        check_topic(self._topic.topic_id, self._topic.name, self._actor)

    # -- sizes -----------------------------------------------------------------

    def head_sequence(self) -> int:
        """The sequence of the oldest item held.

        Returns:
            The head sequence (``tail + 1`` when empty).
        """
        return self._figures().head

    def tail_sequence(self) -> int:
        """The sequence of the newest item.

        Returns:
            The tail sequence (-1 when nothing was ever added).
        """
        return self._figures().tail

    def capacity(self) -> int:
        """How many items the ring buffer holds at most.

        Returns:
            The channel's capacity.
        """
        return self._figures().capacity

    def size(self) -> int:
        """How many items the ring buffer holds now.

        Returns:
            ``tail - head + 1``.
        """
        return self._figures().size

    def remaining_capacity(self) -> int:
        """Room left for items.

        Returns:
            ``capacity() - size()`` (with or without a TTL).
        """
        return self._figures().remaining

    # -- adding ------------------------------------------------------------------

    def add(
        self, item: Any, overflow: Overflow | OverflowName = "overwrite", timeout: float = 60.0
    ) -> int:
        """Add one item and wait for it.

        Args:
            item: Any picklable value except None and ObjectRefs.
            overflow: "overwrite" (drop the oldest), "fail" (refuse) or "block"
                (wait for room up to ``timeout``).
            timeout: Seconds "block" waits for room (> 0, at most a year).

        Returns:
            The item's sequence, or -1 if it found no room.

        Raises:
            InvalidTypeError: the item is None, an ObjectRef, or cannot be pickled.
            InvalidArgumentError: an unknown ``overflow`` or a bad ``timeout``.
        """
        return self._get(self.add_async(item, overflow, timeout))

    def add_async(
        self, item: Any, overflow: Overflow | OverflowName = "overwrite", timeout: float = 60.0
    ) -> ray.ObjectRef[int]:
        """``add`` without waiting.

        Args:
            item: As ``add``.
            overflow: As ``add``.
            timeout: As ``add``.

        Returns:
            ``ObjectRef[int]`` of the item's sequence (or -1).

        Raises:
            InvalidTypeError, InvalidArgumentError: as ``add`` (nothing is sent).
        """
        return self.add_all_async([item], overflow, timeout)

    def add_all(
        self,
        items: Iterable[Any],
        overflow: Overflow | OverflowName = "overwrite",
        timeout: float = 60.0,
    ) -> int:
        """Add items in order and wait for them.

        Args:
            items: Picklable values except None and ObjectRefs.
            overflow: As ``add``; "fail" refuses the whole batch, never part of it.
            timeout: Seconds "block" waits for room (> 0, at most a year).

        Returns:
            The LAST item's sequence (the tail if ``items`` is empty), or -1 if the
            batch was refused whole.

        Raises:
            InvalidTypeError, InvalidArgumentError: as ``add`` (nothing is added).
        """
        return self._get(self.add_all_async(items, overflow, timeout))

    def add_all_async(
        self,
        items: Iterable[Any],
        overflow: Overflow | OverflowName = "overwrite",
        timeout: float = 60.0,
    ) -> ray.ObjectRef[int]:
        """Add items in order without waiting. An empty batch changes nothing and
        returns the tail. ``"block"`` (a topic's policy) waits up to ``timeout``
        seconds for room, then gives -1.

        Args:
            items: As ``add_all``.
            overflow: As ``add_all``.
            timeout: As ``add_all``.

        Returns:
            ``ObjectRef[int]`` of the last sequence, or -1 if ``"fail"`` refused
            the batch (never part of it).

        Raises:
            InvalidTypeError, InvalidArgumentError: as ``add``, or ``items`` is not
                an iterable of items (None, a str, a dict); nothing is sent.
        """
        items = check_items(items, "items")
        policy = Overflow.parse(overflow)
        check_timeout(timeout, "timeout", allow_none=False)
        payload = PickledValues.from_values(items)
        self._check_topic()
        return self._ask(AddAll(overflow=policy.value, timeout=timeout), payload)

    # -- reading -----------------------------------------------------------------

    def read_one(self, sequence: int) -> Any:
        """The item at ``sequence``; waits while ``sequence == tail + 1``.

        Args:
            sequence: The item's sequence, ``head <= sequence <= tail + 1``.

        Returns:
            The item.

        Raises:
            StaleSequenceError: ``sequence`` is below the head.
            InvalidArgumentError: negative, or beyond ``tail + 1``.
            InvalidTypeError: ``sequence`` is not an int.
            PoisonElementError: the item cannot be decoded in this process.
        """
        check_nonnegative_int(sequence, "sequence")
        values, failures = decode_checked(self._get(self._ask(ReadOne(sequence=sequence))).payload)
        if failures:  # its class is missing or changed in this process
            poison = Poison.of(sequence, failures[0])
            raise poison_error(self._topic.topic_id, self._channel, poison, ring=True)
        return values[0]

    def read_many(
        self,
        start_sequence: int,
        min_count: int,
        max_count: int,
        filter: Callable[[Any], bool] | None = None,
    ) -> ReadResultSet:
        """Read a batch and wait for it (see ``read_many_async``).

        Args:
            start_sequence: Where to start reading.
            min_count: Matching items to wait for.
            max_count: Matching items to return at most (<= 1000).
            filter: ``item -> bool``, run in the channel actor, or None.

        Returns:
            The items read.

        Raises:
            StaleSequenceError: ``start_sequence`` is below the head.
            InvalidArgumentError: negative or beyond ``tail + 1``, or
                ``min_count > max_count``, or ``max_count > 1000``.
            InvalidTypeError: ``filter`` is not callable or cannot be pickled, or
                a count or sequence is not an int.
        """
        return self._get(self.read_many_async(start_sequence, min_count, max_count, filter))

    def read_many_async(
        self,
        start_sequence: int,
        min_count: int,
        max_count: int,
        filter: Callable[[Any], bool] | None = None,
    ) -> ray.ObjectRef[ReadResultSet]:
        """Read a batch: ``ObjectRef[ReadResultSet]``; waits until ``min_count`` items match.

        The filter runs inside the channel actor; ``read_count`` counts every
        item read, matching or not, while ``min_count``/``max_count`` (<= 1000)
        count matching items.

        Args:
            start_sequence: Where to start reading.
            min_count: Matching items to wait for.
            max_count: Matching items to return at most (<= 1000).
            filter: ``item -> bool``, run in the channel actor, or None.

        Returns:
            ``ObjectRef[ReadResultSet]``; it raises what ``read_many`` raises.

        Raises:
            InvalidTypeError: ``filter`` is not callable or cannot be pickled, or
                a count or sequence is not an int (nothing is sent).
            InvalidArgumentError: a negative count or sequence (nothing is sent).
        """
        for value, what in (
            (start_sequence, "start_sequence"),
            (min_count, "min_count"),
            (max_count, "max_count"),
        ):
            check_nonnegative_int(value, what)
        if filter is not None and not callable(filter):
            raise InvalidTypeError("filter must be a callable item -> bool, or None")
        filter_bytes = pickle_function(filter, "filter") if filter is not None else None
        self._check_topic()
        return self._ask(ReadMany(start_sequence, min_count, max_count, filter_bytes=filter_bytes))
