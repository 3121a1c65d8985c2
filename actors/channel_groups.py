"""The channel's requests for groups: the coordinator's (make, forget, grant, reset,
read back) and a stream's, which holds a group through its offset log. No Ray (the
stream's peers are given to its steps).

Each handler is a few lines handed to the part whose job it is:
:class:`~raytopic.actors.readers.Readers` (the groups' cursors),
:class:`~raytopic.actors.session_host.SessionHost` (the groups' views) and
:class:`~raytopic.actors.stream_steps.StreamSteps` (a stream's steps here).
"""

from __future__ import annotations

from typing import Any

from raytopic.actors.channel_dispatch import Admit, serves
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.readers import loaded_functions
from raytopic.actors.stream_steps import StreamSteps
from raytopic.core.protocol import (
    CommitMicroBatch,
    CursorState,
    DestroyGroup,
    EnsureGroup,
    Grant,
    GrantStream,
    ReadGroupCursors,
    ReadGroupLag,
    RecordMicroBatch,
    ResetGroup,
    RestoreGroup,
    StreamLogState,
    StreamPart,
    StreamRequest,
)

__all__ = ["GroupRequests"]


class GroupRequests:
    """One channel's groups, as its coordinator and the streams holding them ask.

    Args:
        parts: The channel's parts.
        stream_steps: The streams' steps at this channel.
    """

    def __init__(self, parts: ChannelParts, stream_steps: StreamSteps) -> None:
        self._log, self._readers, self._host = parts.log, parts.readers, parts.host
        self._state, self._streams = parts.state, parts.streams
        self._stream_steps = stream_steps

    @serves(EnsureGroup)
    async def ensure(self, request: EnsureGroup) -> CursorState:
        """Create the group's cursor here if it does not exist yet (``shared``: a
        shared group's, with its definition). ``reader``: the spec of the member
        the group is made for, checked first: a group is not made for a reader
        that cannot open here (InvalidArgumentError)."""
        if request.reader is not None:
            loaded_functions(request.reader)
        state, _ = self._readers.ensure_group(request.group, request.start_latest, request.shared)
        return state

    @serves(DestroyGroup)
    async def destroy(self, request: DestroyGroup) -> None:
        """Forget a group: its positions and the retention it held."""
        group = request.group
        self._readers.destroy_group(group)
        self._host.forget_group(group)
        self._state.touch("marks", group)
        if self._streams.forget(group):
            self._state.touch("streams", group)

    @serves(Grant)
    async def grant(self, request: Grant) -> None:
        """Give the group's channel to a member (None: to nobody); it resumes after the commit."""
        self._readers.grant(request.group, request.lease)

    @serves(GrantStream)
    async def grant_stream(self, request: GrantStream) -> StreamLogState:
        """Give the group's channel to a stream; where its offset log stands here."""
        return self._stream_steps.grant(request)

    @serves(ResetGroup)
    async def reset(self, request: ResetGroup) -> tuple[int, dict[str, Any]]:
        """Move the group's read and commit positions; return (position, previous state)
        (see :meth:`Readers.reset_group`); refused while a stream's batch is pending."""
        self._streams.check_resettable(request.group)
        return self._readers.reset_group(request.group, request.target)

    @serves(RestoreGroup)
    async def restore(self, request: RestoreGroup) -> None:
        """Undo a reset (a reset of several channels is all or nothing)."""
        self._readers.restore_group(request.group, request.previous)

    @serves(ReadGroupCursors, Admit.ALWAYS)
    async def cursors(self, _: ReadGroupCursors) -> dict[str, dict[str, Any]]:
        """Every group's cursor here, saying which is a stream's (a restarted
        coordinator, and bulk reads, ask)."""
        return self._stream_steps.mark_streams(self._readers.describe_groups())

    @serves(ReadGroupLag, Admit.ALWAYS)
    async def lag(self, request: ReadGroupLag) -> int | None:
        """The group's lag here, None without the group (what scaling polls: one
        figure, not ``describe``'s every cursor and transaction)."""
        figures = self._log.figures()
        lags = self._readers.lag(figures.head, figures.tail)
        return next((lag for group, lag, _ in lags if group == request.group), None)

    # -- streams (see ``raytopic.actors.stream_steps``) -------------------------------

    @serves(RecordMicroBatch)
    @serves(CommitMicroBatch)
    async def lead_stream_step(self, request: StreamRequest) -> None:
        """Lead a stream's step: this channel's part and every other's, answered once
        each is durable.

        Raises:
            NotOwnerError: the stream no longer holds the group (a newer stream took
                it, or its claim ended).
            GroupNotFoundError, GroupModeError: no such owned group.
        """
        await self._stream_steps.lead(request)

    @serves(StreamPart)
    async def stream_part(self, request: StreamPart) -> None:
        """This channel's part of a stream's step (its lead asks), in one state write
        with the group's cursor."""
        self._stream_steps.serve(request.step)
