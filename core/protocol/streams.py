"""A stream's offset log on the wire: the records each channel keeps of a group's
micro-batches, and the requests that change them. No Ray.

A stream (``raytopic.data.stream``) consumes its group under a lease its
coordinator grants (:class:`~raytopic.core.protocol.control.GrantStream`, the
owner of every channel of the group, as a member's lease is of its channels).
The stream sends each step of a micro-batch, its record and its commit (with the
next batch's record when it has one planned), as ONE request to a lead channel,
which serves its own part and every other channel's
(``raytopic.actors.stream_steps``); each part is refused unless the request's lease
owns the group's channel there, so a stream fenced by a newer one, or whose claim
ended, changes nothing. What the records mean after a failure:
``raytopic.core.stream_log``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raytopic.core.protocol.records import Lease

__all__ = [
    "CommitMicroBatch",
    "MicroBatchRecord",
    "RecordMicroBatch",
    "STREAM_REQUESTS",
    "StreamLogState",
    "StreamPart",
    "StreamRecord",
    "StreamRequest",
]


@dataclass(frozen=True, slots=True)
class MicroBatchRecord:
    """One micro-batch as the offset log keeps it."""

    batch_id: int
    """The batch's number in its group: 0, 1, 2, ..."""
    ranges: tuple[tuple[int, int, int], ...]
    """``(channel, start, end)`` for every channel of the topic, ``end`` excluded
    (``start == end``: nothing of that channel)."""

    def range_of(self, channel: int) -> tuple[int, int]:
        """``(start, end)`` of ``channel`` (``(0, 0)`` for a channel not listed)."""
        for listed, start, end in self.ranges:
            if listed == channel:
                return start, end
        return 0, 0

    @property
    def width(self) -> int:
        """Positions the ranges span together."""
        return sum(end - start for _, start, end in self.ranges)

    def to_state(self) -> dict[str, Any]:
        """The record as a store keeps it (JSON-ready)."""
        return {"id": self.batch_id, "ranges": [list(entry) for entry in self.ranges]}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> MicroBatchRecord:
        """The record :meth:`to_state` wrote."""
        return cls(
            int(state["id"]),
            tuple((int(c), int(s), int(e)) for c, s, e in state["ranges"]),
        )


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """What one channel keeps of one group's stream."""

    holder: Lease | None = None
    """The lease of the last stream the coordinator gave the group to here (None:
    none ever). The stream consumes the group while this lease owns the group's
    channel; once another owner (or none) is granted, it is only history."""
    batch: MicroBatchRecord | None = None
    """The last batch recorded here."""
    committed: int = -1
    """The id of the last batch committed here (-1: none)."""

    @property
    def pending(self) -> MicroBatchRecord | None:
        """The last batch recorded here if it is not committed here (None: none)."""
        batch = self.batch
        return batch if batch is not None and batch.batch_id > self.committed else None

    def to_state(self) -> dict[str, Any]:
        """The record as a store keeps it (JSON-ready)."""
        holder = self.holder
        return {
            "holder": None if holder is None else [holder.reader_id, holder.generation],
            "batch": None if self.batch is None else self.batch.to_state(),
            "committed": self.committed,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> StreamRecord:
        """The record :meth:`to_state` wrote. A record of a raytopic whose streams
        claimed their groups themselves (a ``claim`` in place of a ``holder``) has
        no holder: no coordinator ever granted it."""
        holder, batch = state.get("holder"), state.get("batch")
        return cls(
            None if holder is None else Lease(str(holder[0]), int(holder[1])),
            None if batch is None else MicroBatchRecord.from_state(batch),
            int(state.get("committed", -1)),
        )


@dataclass(frozen=True, slots=True)
class StreamLogState:
    """A channel's answer to ``GrantStream``: where the group's stream stands here."""

    record: StreamRecord
    """What it keeps of the group's stream."""
    committed: int
    """The group's committed position here (``head - 1``: none yet)."""


# -- a stream's requests (to its lead channel, which serves every channel's part) ---------


@dataclass(frozen=True, slots=True)
class RecordMicroBatch:
    """Record ``batch`` as ``group``'s batch in flight, durably (answered with None).

    Refused (NotOwnerError) unless ``lease`` owns the group's channel."""

    group: str
    lease: Lease
    batch: MicroBatchRecord


@dataclass(frozen=True, slots=True)
class CommitMicroBatch:
    """Commit ``batch``: the group's positions move to its end, and it is the last
    batch committed (answered with None; a batch committed before changes nothing);
    then, with ``next``, record ``next`` as the batch in flight, in the same write
    (a stream that catches up moves on to a batch it planned ahead in one step).
    Refused (NotOwnerError) unless ``lease`` owns the group's channel."""

    group: str
    lease: Lease
    batch: MicroBatchRecord
    next: MicroBatchRecord | None = None


StreamRequest = RecordMicroBatch | CommitMicroBatch
"""A step of a stream's micro-batch."""


@dataclass(frozen=True, slots=True)
class StreamPart:
    """One channel's part of a stream's ``step`` (its lead asks every other channel),
    in one state write with the group's cursor (answered with None)."""

    step: StreamRequest


STREAM_REQUESTS = (RecordMicroBatch, CommitMicroBatch, StreamPart)
"""The request records a channel serves through ``ChannelActor.request``: a step (as
its lead), and a step's part."""
