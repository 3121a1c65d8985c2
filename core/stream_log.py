"""A stream's offset log: what each channel keeps of the micro-batches of a group, and
the rule that reads it back after a failure. No Ray.

A stream (``raytopic.data.stream``) is its group's only consumer: its coordinator
grants it the group (a lease that owns every channel of the group, as a member's
lease owns its channels; a newer stream's lease fences an older one). Before it
hands out a micro-batch it records the batch (its id and the position range of
every channel) at every channel of the topic, durably with a store; when the
batch is done it commits it at every channel, which moves the group's positions
there to the batch's ends. Each step is one request to a lead channel, which
serves every channel's part (``raytopic.actors.stream_steps``). Each channel keeps,
per group, one :class:`~raytopic.core.protocol.streams.StreamRecord`:

- ``holder``: the lease of the last stream granted the group here (what a
  restarted coordinator learns the group's stream from);
- ``batch``: the last batch recorded (the whole batch: every channel's range, so
  any one channel can tell a new stream what to replay);
- ``committed``: the id of the last batch committed here.

Only one batch is ever in flight: the next is recorded at a channel only once the
last one is committed there (in the same write, when the stream moves from one
batch to the next in one step), and only once the stream is done with the last
one. So the records of all channels tell a new stream exactly where the last one
stopped (:func:`recover`): a batch recorded and committed nowhere was perhaps
handed out, and is handed out again, with the same id and ranges; a batch
committed somewhere, or followed by a newer one recorded somewhere, was done (its
stream moved past it), and is committed where it is not yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from raytopic.core.protocol.streams import MicroBatchRecord, StreamRecord

__all__ = ["Recovery", "recover"]


@dataclass(frozen=True, slots=True)
class Recovery:
    """Where a stream that opens on a group starts (see :func:`recover`)."""

    replay: MicroBatchRecord | None
    """A batch recorded and committed nowhere: handed out first, as it was."""
    finish: MicroBatchRecord | None
    """A batch committed at some channels only (or only followed, with ``replay``, by
    the next one's record): committed at the others first."""
    next_batch_id: int
    """The id of the first batch to plan."""


def recover(records: Sequence[StreamRecord]) -> Recovery:
    """Where the stream of a group stands, from every channel's record of it.

    The latest batch recorded anywhere is the one in flight (batches are recorded
    one at a time, each once the stream is done with the one before). Committed
    nowhere, it may have been handed out: it is replayed. Committed somewhere,
    its stream had moved past it: it is committed at the other channels. A channel
    whose last record is the batch before, uncommitted, missed the step that
    committed it and recorded the latest (elsewhere): it is committed there first.
    """
    batches = [record.batch for record in records if record.batch is not None]
    if not batches:
        return Recovery(None, None, 0)
    latest = max(batches, key=lambda batch: batch.batch_id)
    committed = max(record.committed for record in records)
    if committed >= latest.batch_id:
        unfinished = any(record.committed < latest.batch_id for record in records)
        return Recovery(None, latest if unfinished else None, latest.batch_id + 1)
    pending = [record.pending for record in records]
    behind = [batch for batch in pending if batch is not None and batch.batch_id < latest.batch_id]
    return Recovery(
        latest, max(behind, key=lambda batch: batch.batch_id, default=None), latest.batch_id + 1
    )
