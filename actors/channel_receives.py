"""The channel's requests for receive sessions: a subscriber's receives sent to this
channel, the views its coordinator pushes, and what a handle asks of its session
here (interrupt, pause, resume, figures). No Ray.

Each handler is a few lines handed to
:class:`~raytopic.actors.session_host.SessionHost` (the sessions, the ports to
sibling channels, the groups' views).
"""

from __future__ import annotations

from typing import Any

from raytopic.actors.channel_dispatch import Admit, serves
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.channel_state import Keep
from raytopic.core.protocol import (
    InterruptReceives,
    PauseReceives,
    ReadCommitFloors,
    ReadGroupMarks,
    ReadHandOverMark,
    ReadResequencerStats,
    Receive,
    ReceivedBatch,
    ReceivesLost,
    ResumeReceives,
    UpdateViews,
)

__all__ = ["ReceiveRequests"]


class ReceiveRequests:
    """The receive sessions one channel hosts.

    Args:
        parts: The channel's parts.
    """

    def __init__(self, parts: ChannelParts) -> None:
        self._readers, self._host, self._state = parts.readers, parts.host, parts.state

    @serves(UpdateViews)
    async def update_views(self, request: UpdateViews) -> None:
        """Members' channels changed: sessions here read these from now on. A member
        that left or timed out (None) owns nothing: its session here ends (a
        member that comes back opens a new one on its next receive).

        The group's version and generation are kept (with a store, durably): a
        restarted coordinator continues above them."""
        group = request.group
        shared, readers = self._readers.shared, self._readers.by_id

        def left(member: str) -> None:
            if group in shared and member in readers:
                shared.member_left(group, member)

        if self._host.update_views(
            group,
            request.version,
            request.generation,
            request.views,
            left,
            lambda m: shared.member_back(group, m),
        ):
            self._state.touch("marks", group, Keep.SOON)

    @serves(ReadGroupMarks, Admit.ALWAYS)
    async def group_marks(self, _: ReadGroupMarks) -> dict[str, tuple[int, int]]:
        """Per group, the highest (view version, generation) pushed here."""
        return dict(self._host.marks)

    @serves(ReadHandOverMark, Admit.NOW)
    async def hand_over_mark(self, request: ReadHandOverMark) -> int | None:
        """See :meth:`SessionHost.hand_over_mark`."""
        return self._host.hand_over_mark(request.reader_id, request.channel, request.sequence)

    @serves(ReadCommitFloors, Admit.NOW)
    async def commit_floors(self, request: ReadCommitFloors) -> dict[int, int]:
        """See :meth:`SessionHost.commit_floors`."""
        return self._host.commit_floors(request.reader_id)

    @serves(ReadResequencerStats, Admit.NOW)
    async def resequencer_stats(self, request: ReadResequencerStats) -> Any:
        """The resequencer counts of the reader's session here (None: none)."""
        return self._host.resequencer_stats(request.reader_id)

    @serves(InterruptReceives, Admit.NOW)
    async def interrupt(self, request: InterruptReceives) -> None:
        """A handle abandons its receives of ``stream`` up to ``upto`` (see ReceiveSession)."""
        self._host.interrupt(request.reader_id, request.stream, request.upto)

    @serves(ReceivesLost, Admit.NOW)
    async def lost(self, request: ReceivesLost) -> None:
        """A handle never got these receives' replies (see SessionHost.lost)."""
        await self._host.lost(request.reader_id, request.stream, request.numbers)

    @serves(PauseReceives)
    async def pause(self, request: PauseReceives) -> None:
        """Wait until a handle's receives up to ``upto`` finished (see SessionHost)."""
        reader_id, receives_out = request.reader_id, request.receives_out
        await self._host.pause(reader_id, request.stream, request.upto, receives_out)

    @serves(ResumeReceives, Admit.NOW)
    async def resume(self, request: ResumeReceives) -> None:
        """The seek announced by ``PauseReceives`` landed: waits may take again."""
        self._host.resume(request.reader_id)

    @serves(Receive)
    async def receive(self, request: Receive) -> ReceivedBatch:
        """Serve a subscriber's receive at its session here (see ReceiveSession)."""
        return await self._host.receive(*request)  # its fields are the host's arguments
