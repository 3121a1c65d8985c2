"""The offset logs of the streams that read a channel: one record per group. No Ray.

A part of the channel actor (see ``raytopic.core.stream_log`` for what a record
holds and why). It checks each request's claim and keeps the records; the
channel moves the group's cursor when a commit says so and writes the record
with the cursor in one state write, so a record is exactly as durable as the
group's commits.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from raytopic.core.errors import InvalidArgumentError, NotOwnerError
from raytopic.core.stream_log import (
    ClaimStream,
    CommitMicroBatch,
    MicroBatchRecord,
    RecordMicroBatch,
    StreamClaim,
    StreamRecord,
)

__all__ = ["STREAMS_FORMAT", "StreamLogs"]

STREAMS_FORMAT = 1
"""The format of the streams section (see :meth:`StreamLogs.state_of`)."""


class StreamLogs:
    """Per group, what this channel keeps of its stream.

    Args:
        channel: The channel's number (for messages).
    """

    def __init__(self, channel: int) -> None:
        self._channel = channel
        self.records: dict[str, StreamRecord] = {}

    def record_of(self, group: str) -> StreamRecord:
        """The group's record here (an empty one if no stream ever read it)."""
        return self.records.get(group) or StreamRecord()

    def claim(self, request: ClaimStream) -> StreamRecord:
        """Hold the group for ``request``'s stream; returns the record.

        Raises:
            NotOwnerError: a newer stream claimed the group here.
        """
        record = self.record_of(request.group)
        if record.claim is not None and record.claim > request.claim:
            raise NotOwnerError(
                f"channel {self._channel}: group {request.group!r} is held by a newer stream"
            )
        record = StreamRecord(request.claim, record.batch, record.committed)
        self.records[request.group] = record
        return record

    def record(self, request: RecordMicroBatch) -> None:
        """Keep ``request``'s batch as the group's batch in flight.

        Raises:
            NotOwnerError: the stream no longer holds the group here.
            InvalidArgumentError: the batch is older than the last one recorded or
                committed here, or its id was recorded with other ranges.
        """
        record = self._held(request.group, request.claim)
        batch, last = request.batch, record.batch
        where = f"channel {self._channel}: batch {batch.batch_id} of group {request.group!r}"
        if batch.batch_id <= record.committed or (last and batch.batch_id < last.batch_id):
            raise InvalidArgumentError(f"{where} is older than the last one recorded here")
        if last and last.batch_id == batch.batch_id and last != batch:
            raise InvalidArgumentError(f"{where} was recorded with other ranges")
        self.records[request.group] = StreamRecord(record.claim, batch, record.committed)

    def commit(self, request: CommitMicroBatch) -> int | None:
        """Mark ``request``'s batch committed; returns the last position of this
        channel's range (the group's commit moves there), None when there is nothing
        to move (the batch was committed before, or its range here is empty).

        Raises:
            NotOwnerError: the stream no longer holds the group here.
        """
        record = self._held(request.group, request.claim)
        batch: MicroBatchRecord = request.batch
        if batch.batch_id <= record.committed:
            return None
        # The batch itself becomes the last recorded (a channel that lost its record,
        # restarted without a store, learns it here).
        self.records[request.group] = StreamRecord(record.claim, batch, batch.batch_id)
        start, end = batch.range_of(self._channel)
        return end - 1 if end > start else None

    def forget(self, group: str) -> bool:
        """The group is gone: so is its record. Returns whether there was one."""
        return self.records.pop(group, None) is not None

    def _held(self, group: str, claim: StreamClaim) -> StreamRecord:
        record = self.record_of(group)
        if record.claim is None:
            # Never adopted here: an older stream would take the group back.
            raise NotOwnerError(
                f"channel {self._channel} keeps no stream of group {group!r} (it restarted "
                "without a store, losing its elements and the offset log): open a stream again"
            )
        if record.claim != claim:
            raise NotOwnerError(
                f"channel {self._channel}: group {group!r} is held by another stream "
                "(a newer stream on the group fenced this one)"
            )
        return record

    def state_keys(self) -> Iterator[str]:
        """The groups whose offset logs the state keeps (the section ``streams``)."""
        return iter(self.records)

    def state_of(self, group: str) -> dict[str, Any] | None:
        """The group's record as the state keeps it (None: none)."""
        record = self.records.get(group)
        return None if record is None else record.to_state()

    def restore_state(self, saved: dict[str, Any]) -> None:
        """The records a restarted channel's state kept."""
        self.records.clear()  # in place: the channel's state lists its keys
        self.records.update(
            (group, StreamRecord.from_state(state)) for group, state in saved.items()
        )
