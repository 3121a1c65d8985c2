"""The channel's requests for its readers: open and close, takes by position,
commits, seeks, cursor reads, and per-element acknowledgement (a shared group's
member's holds, or an owned reader's elements one by one). No Ray.

Each handler is a few lines handed to :class:`~raytopic.actors.readers.Readers`
(which serves owned readers and shared groups alike) and, for a reader's session
here, to :class:`~raytopic.actors.session_host.SessionHost`.
"""

from __future__ import annotations

from raytopic.actors.channel_dispatch import Admit, serves
from raytopic.actors.channel_parts import ChannelParts
from raytopic.core.protocol import (
    Ack,
    CloseReader,
    Commit,
    CursorState,
    Delivery,
    ExtendHold,
    Nack,
    OpenReader,
    Poison,
    ReadActivity,
    ReadCursor,
    ReaderSpec,
    ReadReaderSpecs,
    ReportPoison,
    Seek,
    SeekToCommitted,
    Take,
    Watch,
)
from raytopic.core.records import AckStatus, CommitResult

__all__ = ["ReaderRequests"]


class ReaderRequests:
    """One channel's readers, as their handles (and sibling channels) ask.

    Args:
        parts: The channel's parts.
    """

    def __init__(self, parts: ChannelParts) -> None:
        self._readers, self._host = parts.readers, parts.host

    @serves(OpenReader)
    async def open_reader(self, request: OpenReader) -> CursorState:
        """Register a subscriber on this channel (its cursor, if anonymous)."""
        state, created = self._readers.open(request.reader_id, request.spec)
        if created:
            self._host.reader_opened(request.reader_id)
        return state

    @serves(CloseReader)
    async def close_reader(self, request: CloseReader) -> None:
        """Forget a subscriber; its session here (if any) ends."""
        self._readers.close(request.reader_id)

    @serves(ReadReaderSpecs, Admit.ALWAYS)
    async def reader_specs(self, _: ReadReaderSpecs) -> dict[str, ReaderSpec]:
        """Every open reader's spec (a restarted coordinator asks)."""
        return self._readers.specs()

    @serves(Take)
    async def take(self, request: Take) -> Delivery:
        """Hand the reader elements by position (``wait``: a fetch); see ``Take``."""
        return await self._readers.take(request)

    @serves(ReportPoison)
    async def report_poison(self, request: ReportPoison) -> bool:
        """A reader could not decode an element (see :meth:`Readers.report_poison`)."""
        poison = Poison(request.sequence, request.cause_type, request.cause_message)
        return self._readers.report_poison(
            request.reader_id, request.lease, request.jumps, poison, request.skipped
        )

    @serves(Watch)
    async def watch(self, request: Watch) -> CursorState:
        """The reader's cursor state once it differs from ``known`` (or after ``timeout``)."""
        return await self._readers.watch(
            request.reader_id, request.lease, request.known, request.timeout
        )

    @serves(ReadCursor, Admit.NOW)
    async def cursor(self, request: ReadCursor) -> CursorState:
        """The reader's cursor, as heads, tails, remaining messages and last commits
        report it (see :meth:`Readers.reported`)."""
        return self._readers.reported(request.reader_id, request.lease)

    @serves(Commit)
    async def commit(self, request: Commit) -> CommitResult:
        """Commit ``sequence`` (and every earlier one) for the reader or its group;
        with a store, answered once the commit is on disk."""
        return self._readers.commit(
            request.reader_id, request.sequence, request.lease, request.jumps, request.bound
        )

    @serves(Seek)
    async def seek(self, request: Seek) -> tuple[int, int]:
        """Move the reader's cursor; return (position set, new jump count)."""
        return self._readers.seek(
            request.reader_id, request.lease, request.target, request.by_time, request.commit
        )

    @serves(SeekToCommitted)
    async def seek_to_committed(self, request: SeekToCommitted) -> tuple[int, int]:
        """Move the reader's cursor back to its commit; return (the commit, new jump
        count)."""
        return await self._readers.seek_to_committed(request.reader_id, request.lease)

    # -- per-element acknowledgement ------------------------------------------------

    @serves(Ack)
    async def ack(self, request: Ack) -> AckStatus | list[AckStatus]:
        """Acknowledge elements: a shared group's member's holds, each named by its
        delivery id (sequence, delivery count, channel epoch), or an owned reader's
        elements done one by one (under its lease); with a store, answered once on
        disk."""
        statuses = self._readers.ack(
            request.reader_id, request.entries, request.lease, request.jumps
        )
        return statuses[0] if request.single else statuses

    @serves(Nack)
    async def nack(self, request: Nack) -> AckStatus | list[AckStatus]:
        """Give elements back to their shared group, to be delivered again after
        ``delay`` seconds (past ``max_deliveries``: to the dead-letter topic)."""
        statuses = self._readers.nack(request.reader_id, request.entries, request.delay)
        return statuses[0] if request.single else statuses

    @serves(ExtendHold)
    async def extend_hold(self, request: ExtendHold) -> AckStatus | list[AckStatus]:
        """Move the ack deadlines of elements the member holds: they end ``seconds``
        from now (None: the group's ``ack_timeout`` from now). Not written to the
        store: a restart delivers what was held again anyway."""
        statuses = self._readers.extend(request.reader_id, request.entries, request.seconds)
        return statuses[0] if request.single else statuses

    @serves(ReadActivity, Admit.ALWAYS)
    async def activity(self, request: ReadActivity) -> dict[str, float]:
        """Seconds since each reader asked about last acked, nacked or extended here."""
        return self._readers.quiet_for(request.readers)
