"""The Hazelcast Ringbuffer API of a channel (``raytopic.client.ringbuffer``): adds and reads
by sequence over the channel's log. No Ray.

Reads below the ring's head come from the store, like every other read
(:meth:`ChannelLog.read`); a damaged record reads as one DataLossError that
names its range.
"""

from __future__ import annotations

from typing import Any

from raytopic.actors.channel_context import POLL_INTERVAL, ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.reader_parts import pick
from raytopic.actors.segment_ring import Run
from raytopic.core.config import Overflow, check_nonnegative_int
from raytopic.core.errors import DataLossError, InvalidArgumentError, StoreError
from raytopic.core.payloads import DamagedElements, Payload
from raytopic.core.protocol import Chunk, RawReadResult, poison_error
from raytopic.core.user_functions import load_pickled

__all__ = ["MAX_READ_MANY", "RingbufferApi", "check_payload"]

MAX_READ_MANY = 1000
"""Most items one ``read_many`` returns (Hazelcast's limit against overload)."""


class RingbufferApi:
    """Adds and reads of the ring buffer API, over one channel's log.

    Args:
        context: The channel's identity and wake-up signal.
        log: The channel's log.
    """

    def __init__(self, context: ChannelContext, log: ChannelLog) -> None:
        self._context = context
        self._log = log

    async def add_all(self, payload: Payload, overflow: str, timeout: float | None = None) -> int:
        """Append items; return the LAST sequence (the tail for an empty batch), or -1.

        ``"fail"`` refuses a batch that does not fit whole; ``"block"`` waits
        for room up to ``timeout`` seconds and then returns -1.
        """
        policy = Overflow.parse(overflow)
        payload = check_payload(payload)
        capacity = self._log.ring.capacity
        if not len(payload):
            return self._log.ring.tail
        if policy is Overflow.BLOCK and len(payload) > capacity:
            raise InvalidArgumentError(
                f"{len(payload)} items can never fit a capacity of {capacity}"
            )
        ack, change = await self._log.append(payload, policy, timeout, whole=True)
        await self._log.durable(change)
        if isinstance(ack.error, (StoreError, InvalidArgumentError)):
            raise ack.error  # not a full ring: -1 would say it is
        return ack.first + ack.accepted - 1 if ack.accepted == len(payload) else -1

    async def read_one(self, sequence: int) -> Run:
        """The element at ``sequence`` (a run of one); waits while ``sequence == tail + 1``.
        Below the ring's head it is read from the store, if it still has it.

        Raises:
            DataLossError: ``sequence``'s stored record is damaged.
            StaleSequenceError: ``sequence`` is gone (below the head, not stored).
        """
        check_nonnegative_int(sequence, "sequence")
        while True:
            tail = self._log.ring.tail
            if sequence > tail + 1:
                raise InvalidArgumentError(
                    f"sequence {sequence} is beyond the tail + 1 ({tail + 1})"
                )
            if sequence <= tail:
                return self._log.read_readable(sequence, 1)[0]
            await self._context.wait_change(POLL_INTERVAL)

    @property
    def _source(self) -> tuple[str, int]:
        return self._context.config.topic_id, self._context.channel

    async def read_many(
        self, start: int, min_count: int, max_count: int, filter_bytes: bytes | None
    ) -> RawReadResult:
        """Hazelcast ``readManyAsync``: a ReadResultSet once it reaches the reader.

        Blocks until ``min_count`` matching items are read; ``read_count``
        counts every item read, matching or not.
        """
        ring = self._log.ring
        check_nonnegative_int(start, "start_sequence")
        check_nonnegative_int(min_count, "min_count")
        check_nonnegative_int(max_count, "max_count")
        if min_count > max_count:
            raise InvalidArgumentError(f"min_count {min_count} > max_count {max_count}")
        if max_count > MAX_READ_MANY:
            raise InvalidArgumentError(f"max_count {max_count} > {MAX_READ_MANY}")
        if max_count > ring.capacity:
            raise InvalidArgumentError(f"max_count {max_count} > capacity {ring.capacity}")
        if start > ring.tail + 1:
            raise InvalidArgumentError(
                f"start_sequence {start} is beyond the tail + 1 ({ring.tail + 1})"
            )
        predicate = load_pickled(filter_bytes, "filter") if filter_bytes else None
        chunks: list[Chunk] = []
        found = 0
        sequence = start
        while True:
            while sequence <= self._log.ring.tail and found < max_count:
                try:
                    runs = self._log.read_readable(sequence, max_count - found)
                except DataLossError:
                    if sequence > start:  # what was read before the damage first
                        return RawReadResult(start, sequence - start, chunks, self._source)
                    raise
                picked = pick(runs, predicate, None, max_count - found)
                chunks.extend(picked.chunks)
                found += sum(len(chunk.payload) for chunk in picked.chunks)
                sequence = picked.next_sequence
                if picked.poison is not None:
                    # The filter raised on it, or it does not decode here: what
                    # came before it, and a read from it raises.
                    if sequence > start:
                        return RawReadResult(start, sequence - start, chunks, self._source)
                    raise poison_error(*self._source, picked.poison, ring=True)
            if found >= min_count:
                return RawReadResult(start, sequence - start, chunks, self._source)
            await self._context.wait_change(POLL_INTERVAL)

    def read_range(self, start: int, stop: int, max_count: int) -> tuple[Chunk, ...]:
        """Bulk read (``raytopic.data`` and ``raytopic.spark``): the elements from
        ``start`` up to ``stop`` (exclusive) or the tail, at most ``max_count``,
        as they are held (Arrow rows stay Arrow). Never waits; an empty tuple
        when ``start`` is past the tail. Below the ring's head it reads the store.

        Raises:
            DataLossError: ``start`` is in a damaged range.
            StaleSequenceError: ``start`` is gone (below the head and not stored).
        """
        check_nonnegative_int(start, "start")
        check_nonnegative_int(stop, "stop")
        check_nonnegative_int(max_count, "max_count")
        runs = self._log.read_span(start, stop, max_count)
        return tuple(run.chunk() for run in runs)

    def newest(self) -> Chunk | None:
        """The last element appended since this channel started, even if it was
        removed since: a bulk read with nothing in range learns its columns from it
        (a topic that does not retain, whose groups committed everything). None
        before the first append, or for a damaged record's placeholder."""
        newest = self._log.ring.newest_element()
        if newest is None or isinstance(newest[2], DamagedElements):
            return None
        sequence, stamp, payload = newest
        return Chunk(sequence, stamp, payload)


def check_payload(payload: Any) -> Payload:
    """A payload of this process's own (see ``Payload.owned``).

    Raises:
        InvalidArgumentError: not a payload.
    """
    if isinstance(payload, Payload):
        return payload.owned()
    raise InvalidArgumentError(f"not a payload: {type(payload).__name__}")
