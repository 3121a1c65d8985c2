"""A stream's offset log: what each channel keeps of the micro-batches of a group, the
requests that change it, and the rule that reads it back after a failure. No Ray.

A stream (``raytopic.data.stream``) is its group's only consumer. Before it hands
out a micro-batch it records the batch (its id and the position range of every
channel) at every channel of the topic, durably with a store; when the batch is
done it commits it at every channel, which moves the group's positions there to
the batch's ends. Each channel keeps, per group, one :class:`StreamRecord`:

- ``claim``: the newest stream that claimed the group here. A stream claims every
  channel when it opens, with a :class:`StreamClaim` above every claim it found;
  a channel refuses the records and commits of any other claim, so an older
  stream is fenced as soon as a newer one opened.
- ``batch``: the last batch recorded (the whole batch: every channel's range, so
  any one channel can tell a new stream what to replay).
- ``committed``: the id of the last batch committed here.

Only one batch is ever in flight: the next is recorded only once the last one is
committed everywhere. So the records of all channels tell a new stream exactly
where the last one stopped (:func:`recover`): a batch recorded and committed
nowhere was perhaps handed out, and is handed out again, with the same id and
ranges; a batch committed somewhere was done (its stream moved past it), and is
committed where it is not yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "MicroBatchRecord",
    "ClaimStream",
    "CommitMicroBatch",
    "ReadStreamLog",
    "RecordMicroBatch",
    "Recovery",
    "StreamClaim",
    "StreamLogState",
    "StreamRecord",
    "StreamRequest",
    "next_claim",
    "recover",
]


class StreamClaim(NamedTuple):
    """A stream's hold on a group: claims order by ``number``, then by ``stream_id``
    (two streams that opened at once with the same number: one wins everywhere)."""

    number: int
    """One more than the highest claim the stream found when it opened."""
    stream_id: str
    """The stream's own id."""


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

    claim: StreamClaim | None = None
    """The newest stream that claimed the group here (None: none ever did)."""
    batch: MicroBatchRecord | None = None
    """The last batch recorded here."""
    committed: int = -1
    """The id of the last batch committed here (-1: none)."""

    def to_state(self) -> dict[str, Any]:
        """The record as a store keeps it (JSON-ready)."""
        return {
            "claim": None if self.claim is None else list(self.claim),
            "batch": None if self.batch is None else self.batch.to_state(),
            "committed": self.committed,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> StreamRecord:
        """The record :meth:`to_state` wrote."""
        claim, batch = state.get("claim"), state.get("batch")
        return cls(
            None if claim is None else StreamClaim(int(claim[0]), str(claim[1])),
            None if batch is None else MicroBatchRecord.from_state(batch),
            int(state.get("committed", -1)),
        )


# -- requests (a stream -> each channel) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadStreamLog:
    """What the channel keeps of ``group``'s stream (answered with a StreamLogState)."""

    group: str


@dataclass(frozen=True, slots=True)
class ClaimStream:
    """Hold ``group`` for the stream of ``claim`` (answered with a StreamLogState).

    Refused (NotOwnerError) when the channel holds a higher claim."""

    group: str
    claim: StreamClaim


@dataclass(frozen=True, slots=True)
class RecordMicroBatch:
    """Record ``batch`` as ``group``'s batch in flight, durably (answered with None).

    Refused (NotOwnerError) unless ``claim`` holds the group here."""

    group: str
    claim: StreamClaim
    batch: MicroBatchRecord


@dataclass(frozen=True, slots=True)
class CommitMicroBatch:
    """Commit ``batch``: the group's positions move to its end here, and it is the
    last batch committed (answered with None; a batch committed before changes
    nothing). Refused (NotOwnerError) unless ``claim`` holds the group here."""

    group: str
    claim: StreamClaim
    batch: MicroBatchRecord


StreamRequest = ReadStreamLog | ClaimStream | RecordMicroBatch | CommitMicroBatch
"""What a stream asks a channel."""


@dataclass(frozen=True, slots=True)
class StreamLogState:
    """A channel's answer to ReadStreamLog and ClaimStream."""

    record: StreamRecord
    """What it keeps of the group's stream."""
    committed: int
    """The group's committed position here (``head - 1``: none yet)."""


# -- the rules ----------------------------------------------------------------------------


def next_claim(records: Sequence[StreamRecord], stream_id: str) -> StreamClaim:
    """A claim above every claim in ``records`` (the channels' records of a group)."""
    numbers = [record.claim.number for record in records if record.claim is not None]
    return StreamClaim(max(numbers, default=0) + 1, stream_id)


@dataclass(frozen=True, slots=True)
class Recovery:
    """Where a stream that opens on a group starts (see :func:`recover`)."""

    replay: MicroBatchRecord | None
    """A batch recorded and committed nowhere: handed out first, as it was."""
    finish: MicroBatchRecord | None
    """A batch committed at some channels only: committed at the others first."""
    next_batch_id: int
    """The id of the first batch to plan."""


def recover(records: Sequence[StreamRecord]) -> Recovery:
    """Where the stream of a group stands, from every channel's record of it.

    The latest batch recorded anywhere is the one in flight (batches are recorded
    one at a time, each once the one before is committed everywhere). Committed
    nowhere, it may have been handed out: it is replayed. Committed somewhere,
    its stream had moved past it: it is committed at the other channels.
    """
    batches = [record.batch for record in records if record.batch is not None]
    if not batches:
        return Recovery(None, None, 0)
    latest = max(batches, key=lambda batch: batch.batch_id)
    committed = max(record.committed for record in records)
    if committed >= latest.batch_id:
        unfinished = any(record.committed < latest.batch_id for record in records)
        return Recovery(None, latest if unfinished else None, latest.batch_id + 1)
    return Recovery(latest, None, latest.batch_id + 1)
