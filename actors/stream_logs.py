"""The offset logs of the streams that read a channel: one record per group. No Ray.

A part of the channel actor (see ``raytopic.core.stream_log`` for what a record
holds and why). It keeps the records and checks each step against the group's
owner here: a stream's record or commit is served only while its lease owns the
group's channel (the coordinator granted it, and no newer stream or member since).
The channel moves the group's cursor when a commit says so and writes the record
with the cursor in one state write, so a record is exactly as durable as the
group's commits.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from raytopic.core.errors import GroupBusyError, InvalidArgumentError, NotOwnerError
from raytopic.core.protocol import (
    CommitMicroBatch,
    Lease,
    MicroBatchRecord,
    RecordMicroBatch,
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

    def grant(self, group: str, lease: Lease) -> StreamRecord:
        """The coordinator gave the group to the stream of ``lease``; returns the record."""
        record = self.record_of(group)
        record = StreamRecord(lease, record.batch, record.committed)
        self.records[group] = record
        return record

    def stream_of(self, group: str, owner: Lease | None) -> Lease | None:
        """The stream consuming ``group`` here: its lease if the group's owner here
        (``owner``) is the stream last granted, else None (a member, or nobody)."""
        holder = self.record_of(group).holder
        return holder if holder is not None and holder == owner else None

    def record(self, request: RecordMicroBatch, owner: Lease | None) -> None:
        """Keep ``request``'s batch as the group's batch in flight.

        Args:
            request: The stream's request.
            owner: The lease that owns the group's channel here now.

        Raises:
            NotOwnerError: ``request``'s lease does not own the group here.
            InvalidArgumentError: the batch is older than the last one recorded or
                committed here, or its id was recorded with other ranges.
        """
        record = self._held(request.group, request.lease, owner)
        batch, last = request.batch, record.batch
        where = f"channel {self._channel}: batch {batch.batch_id} of group {request.group!r}"
        if batch.batch_id <= record.committed or (last and batch.batch_id < last.batch_id):
            raise InvalidArgumentError(f"{where} is older than the last one recorded here")
        if last and last.batch_id == batch.batch_id and last != batch:
            raise InvalidArgumentError(f"{where} was recorded with other ranges")
        self.records[request.group] = StreamRecord(record.holder, batch, record.committed)

    def commit(self, request: CommitMicroBatch, owner: Lease | None) -> int | None:
        """Mark ``request``'s batch committed, then record its ``next`` batch if it
        has one; returns the last position of this channel's range (the group's
        commit moves there), None when there is nothing to move (the batch was
        committed before, or its range here is empty).

        Args:
            request: The stream's request.
            owner: The lease that owns the group's channel here now.

        Raises:
            NotOwnerError: ``request``'s lease does not own the group here.
            InvalidArgumentError: as :meth:`record` says, for ``next``.
        """
        record = self._held(request.group, request.lease, owner)
        batch: MicroBatchRecord = request.batch
        through = None
        if batch.batch_id > record.committed:
            # The batch itself becomes the last recorded (a channel that lost its
            # record, restarted without a store, learns it here).
            self.records[request.group] = StreamRecord(record.holder, batch, batch.batch_id)
            start, end = batch.range_of(self._channel)
            through = end - 1 if end > start else None
        if request.next is not None:
            self.record(RecordMicroBatch(request.group, request.lease, request.next), owner)
        return through

    def check_resettable(self, group: str) -> None:
        """Refuse a reset of ``group`` while its stream left a batch recorded here and
        not committed: the group's next stream hands that batch out again and reads on
        from its end, which would undo the reset.

        Raises:
            GroupBusyError: such a batch is recorded here.
        """
        pending = self.record_of(group).pending
        if pending is not None:
            raise GroupBusyError(
                f"channel {self._channel}: group {group!r} has batch {pending.batch_id} "
                "of its stream recorded and not committed (the next stream on the group "
                "hands it out again and reads on from its end, undoing a reset): commit "
                "it with a stream on the group (MicroBatch.commit()) first"
            )

    def forget(self, group: str) -> bool:
        """The group is gone: so is its record. Returns whether there was one."""
        return self.records.pop(group, None) is not None

    def _held(self, group: str, lease: Lease, owner: Lease | None) -> StreamRecord:
        if lease != owner:
            raise NotOwnerError(
                f"channel {self._channel}: group {group!r} is no longer this stream's "
                "(a newer stream opened on it, or its claim ended: stopped, or silent "
                "past its timeout)"
            )
        record = self.record_of(group)
        # A channel restarted without a store had the lease seeded by its coordinator,
        # and learns the holder of its (lost) record here.
        return StreamRecord(lease, record.batch, record.committed)

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
