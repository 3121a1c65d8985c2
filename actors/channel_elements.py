"""The channel's requests for its elements: publishes into the log, the ring buffer
API (Hazelcast's reads by sequence), latest values, and an operator's purge. No Ray.

Each handler is a few lines handed to the part whose job it is:
:class:`~raytopic.actors.appends.Appends` (publishers' batches),
:class:`~raytopic.actors.ring_api.RingbufferApi` (reads by sequence) and
:class:`~raytopic.actors.latest_values.LatestValues` (a key's newest value). The
channel serves them as it serves every request (see
``raytopic.actors.channel_dispatch``).
"""

from __future__ import annotations

from typing import Any

from raytopic.actors.appends import Appends
from raytopic.actors.channel_dispatch import Admit, serves
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.latest_values import LatestValues
from raytopic.actors.segment_ring import Run
from raytopic.core.payloads import Payload
from raytopic.core.protocol import (
    AddAll,
    Append,
    AppendAck,
    AppendOnce,
    AppendPieces,
    AppendUnless,
    Chunk,
    FirstAfter,
    Purge,
    RawReadResult,
    ReadLatest,
    ReadMany,
    ReadNewest,
    ReadOne,
    ReadRange,
    ReadRingFigures,
    RingFigures,
    StatusBatch,
)

__all__ = ["ElementRequests"]


class ElementRequests:
    """What goes into one channel's log and comes out of it by position.

    Args:
        parts: The channel's parts.
    """

    def __init__(self, parts: ChannelParts) -> None:
        context = parts.context
        self._context, self._log, self._readers = context, parts.log, parts.readers
        self._ring_api = parts.ring_api
        self._appends = Appends(context, parts.log, parts.publishers, parts.state.checkpoint)
        self._latest = LatestValues(parts.log, compacted=context.config.compaction is not None)

    # -- ring buffer (the Hazelcast API) --------------------------------------------

    @serves(ReadRingFigures, Admit.NOW)
    async def ring_figures(self, _: ReadRingFigures) -> RingFigures:
        return self._log.figures()

    @serves(FirstAfter, Admit.NOW)
    async def first_after(self, request: FirstAfter) -> int:
        """Sequence of the first element stamped strictly after ``stamp`` (tail + 1 if none)."""
        return self._log.first_after(request.stamp)

    @serves(AddAll)
    async def add_all(self, request: AddAll, payload: Payload) -> int:
        """Append items; return the LAST sequence, or -1 (see :meth:`RingbufferApi.add_all`)."""
        return await self._ring_api.add_all(payload, request.overflow, request.timeout)

    @serves(ReadOne)
    async def read_one(self, request: ReadOne) -> Run:
        """The element at ``sequence`` (see :meth:`RingbufferApi.read_one`)."""
        return await self._ring_api.read_one(request.sequence)

    @serves(ReadMany)
    async def read_many(self, request: ReadMany) -> RawReadResult:
        """Hazelcast ``readManyAsync`` (see :meth:`RingbufferApi.read_many`)."""
        return await self._ring_api.read_many(
            request.start, request.min_count, request.max_count, request.filter_bytes
        )

    @serves(ReadRange, Admit.NOW)
    async def read_range(self, request: ReadRange) -> tuple[Chunk, ...]:
        """Bulk read for ``raytopic.data``, ``raytopic.spark`` (``RingbufferApi.read_range``)."""
        return self._ring_api.read_range(request.start, request.stop, request.max_count)

    @serves(ReadNewest, Admit.NOW)
    async def read_newest(self, _: ReadNewest) -> Chunk | None:
        """The newest element, even if removed (see :meth:`RingbufferApi.newest`)."""
        return self._ring_api.newest()

    # -- publishing (see ``raytopic.actors.appends``) ------------------------------

    @serves(Append)
    async def append(self, request: Append, payload: Payload) -> AppendAck | StatusBatch:
        return await self._appends.append(request, payload)

    @serves(AppendPieces)
    async def append_pieces(
        self, request: AppendPieces, payloads: tuple[Payload, ...]
    ) -> tuple[AppendAck, ...]:
        return await self._appends.append_pieces(request, payloads)

    @serves(AppendOnce)
    async def append_once(self, request: AppendOnce, payload: Payload) -> AppendAck:
        return await self._appends.append_once(request, payload)

    @serves(AppendUnless)
    async def append_unless(self, request: AppendUnless, payload: Payload) -> tuple[Any, ...]:
        return await self._latest.append_unless(request, payload)

    @serves(ReadLatest)
    async def read_latest(self, request: ReadLatest) -> tuple[Any, ...]:
        return await self._latest.read(request)

    @serves(Purge)
    async def purge(self, _: Purge) -> int:
        """Remove every element (an operator's ``Topic.purge``); groups and readers
        continue after them, and shared groups forget what they held or waited
        for. Returns how many elements were removed."""
        removed = self._log.evict_all()
        self._readers.skip_to_head()
        self._log.release()
        self._context.notify()
        return removed
