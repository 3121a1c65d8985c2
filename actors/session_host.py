"""The receive sessions a channel hosts, the ports they read through, and the group
views they follow. No Ray (the callers of sibling channels are given to it).

Any channel can host a subscriber's receive session (its *host*, see
``raytopic.actors.receive_session``): the session reads its own channel
in process and the siblings by actor call, each through a ``ReaderPort``. The
coordinator pushes each group's member views here; a session opened later
starts from the latest one even if its handle lags behind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.reader_parts import Reader
from raytopic.actors.receive.ports import Caller, LocalPort, ReaderPort, RemotePort
from raytopic.actors.receive_session import ReceiveSession
from raytopic.core.errors import SubscriberClosedError, TopicNotFoundError
from raytopic.core.protocol import (
    ChannelRequest,
    CursorState,
    Delivery,
    Lease,
    ReceivedBatch,
    Take,
    pack_request,
)

if TYPE_CHECKING:
    from raytopic.actors.direct_offers import OfferInbox

__all__ = ["SessionHost"]


class SessionHost:
    """The receive sessions hosted at one channel.

    Args:
        context: The channel's identity and wake-up signal (sessions hear of
            their host channel's changes directly).
        lookup: The open reader of an id (raises SubscriberClosedError).
        local_take: This channel's take, served in process (the host port).
        local_state: This channel's cursor state of a reader (read in-process).
        local_take_now: This channel's take served at once if it needs no wait, else
            None (what a receive waiting here takes when an append pokes it).
        restarted: This channel's process restarted (sessions wait briefly for
            receive numbers under way).
        find_siblings: Every channel actor of the topic (index = channel), found
            by name: a restarted channel links them when it opens its first
            session (the coordinator's ``AttachChannels`` came to an earlier
            incarnation).
        offers: Where siblings on this node write their replies to fetches
            straight to this process (see ``raytopic.actors.direct_offers``); None:
            Ray's replies alone.
    """

    def __init__(
        self,
        context: ChannelContext,
        lookup: Callable[[str], Reader],
        local_take: Callable[[Take], Awaitable[Delivery]],
        local_state: Callable[[str, Any], CursorState],
        local_take_now: Callable[[Take], Delivery | None] = lambda take: None,
        *,
        restarted: bool,
        find_siblings: Callable[[], list[Any]] = list,
        offers: OfferInbox | None = None,
    ) -> None:
        self._context = context
        self._offers = offers
        self._lookup = lookup
        self._local_take = local_take
        self._local_state = local_state
        self._local_take_now = local_take_now
        self._restarted = restarted
        self._find_siblings = find_siblings
        self.ports: dict[int, ReaderPort] = {}
        self.sessions: dict[str, ReceiveSession] = {}
        # Readers whose session here ended while they stay open (their group timed
        # them out): the next session meets their receive numbering mid-stream.
        self._ended: set[str] = set()
        # Readers opened in this process: a restart lost no session of theirs, so
        # theirs starts afresh (read again after the commit, it would repeat what
        # their takes at other channels already handed out).
        self._opened_here: set[str] = set()
        # group -> member -> (version, leases): the latest view pushed here.
        self.views: dict[str, dict[str, tuple[int, dict[int, Lease]]]] = {}
        self.marks: dict[str, tuple[int, int]] = {}  # group -> (view version, generation)
        self.sibling_calls: set[Any] = set()  # calls to sibling channels not yet answered
        # The topic is being destroyed (end_receives): what comes after raises this.
        self._destroyed: TopicNotFoundError | None = None
        context.listen(self._poke_all)
        context.before_answering(self._take_for_waiting)

    def _poke_all(self) -> bool:
        """Tell every session of a change here; whether one had a receive waiting."""
        channel = self._context.channel
        return any([session.poke(channel) for session in self.sessions.values()])

    def _take_for_waiting(self) -> None:
        """A request that changed this channel is done: each session takes for its
        receive waiting here (see :meth:`ReceiveSession.take_for_waiting`)."""
        for session in self.sessions.values():
            session.take_for_waiting()

    # -- ports --------------------------------------------------------------------------

    def link(
        self, siblings: list[Any], remote_caller: Callable[[Any, set[Any]], Caller] | None = None
    ) -> None:
        """A port to every channel of the topic (index = channel): this one in process,
        the others through ``remote_caller(handle, in_flight)`` (by default, Ray's)."""
        channel = self._context.channel
        make_caller = remote_caller or _remote_caller
        for other, handle in enumerate(siblings):
            if other == channel:
                self.ports[other] = LocalPort(
                    other, self._local_take, self._local_state, self._local_take_now
                )
            else:
                self.ports[other] = RemotePort(
                    other, make_caller(handle, self.sibling_calls), self._offers
                )

    @property
    def linked(self) -> bool:
        """Whether every channel of the topic has a port."""
        return len(self.ports) == self._context.config.channels

    # -- sessions -----------------------------------------------------------------------

    def session(self, reader_id: str, view: tuple[int, dict[int, Any]] | None) -> ReceiveSession:
        """The reader's receive session here (opened on its first receive here),
        brought up to the newer of ``view`` (its handle's) and the last one pushed.

        Raises:
            SubscriberClosedError: the reader is closed.
            TopicNotFoundError: the topic is being destroyed (a receive that came after
                ``end_receives`` would wait until the actor is killed under it).
        """
        if self._destroyed is not None:
            raise self._destroyed
        session = self.sessions.get(reader_id)
        reader = self._lookup(reader_id)
        if session is None:
            if not self.linked:
                self.link(self._find_siblings())
            group = reader.group
            channels = self._context.config.channels
            owned: dict[int, Any] = dict.fromkeys(range(channels)) if group is None else {}
            session = ReceiveSession(
                reader.session_spec,
                self.ports,
                owned,
                self._context.channel,
                mid_stream=(self._restarted and reader_id not in self._opened_here)
                or reader_id in self._ended,
            )
            self._ended.discard(reader_id)
            self.sessions[reader_id] = session
            if group is not None:
                pushed = self.views.get(group, {}).get(reader_id)
                if pushed is not None:
                    session.update_view(*pushed)
        if view is not None:
            session.update_view(*view)
        return session

    def end_session(self, reader_id: str) -> None:
        """The reader's session here ends (it closed, or left its group)."""
        session = self.sessions.pop(reader_id, None)
        if session is not None:
            session.close()

    def reader_closed(self, reader: Reader) -> None:
        """A reader closed: its session and its pushed view go."""
        if reader.group is not None:
            self.views.get(reader.group, {}).pop(reader.reader_id, None)
        self.end_session(reader.reader_id)
        self._ended.discard(reader.reader_id)
        self._opened_here.discard(reader.reader_id)

    def reader_opened(self, reader_id: str) -> None:
        """A reader opened in this process (not one a restart brought back)."""
        self._opened_here.add(reader_id)

    async def receive(
        self,
        reader_id: str,
        stream: str,
        number: int,
        max_count: int,
        single: bool,
        spread: bool,
        here_only: bool,
        view: tuple[int, dict[int, Any]] | None,
    ) -> ReceivedBatch:
        """Serve a subscriber's receive (see ReceiveSession)."""
        session = self.session(reader_id, view)
        return await session.receive(stream, number, max_count, single, spread, here_only)

    def interrupt(self, reader_id: str, stream: str, upto: int) -> None:
        """A handle abandons its receives of ``stream`` up to ``upto`` (see
        :meth:`ReceiveSession.interrupt`); nothing for a closed reader."""
        with contextlib.suppress(SubscriberClosedError):
            self.session(reader_id, None).interrupt(stream, upto)

    async def lost(self, reader_id: str, stream: str, numbers: tuple[int, ...]) -> None:
        """Ray reported these receives of the reader cancelled after they were sent:
        its session here reads again what they handed over (none here: a restarted
        channel's new session reads again after the commit anyway). Answered once the
        channels' read positions moved back, so that a commit the handle sends next
        stops below what the lost replies carried (``Take.unseen``)."""
        session = self.sessions.get(reader_id)
        if session is not None:
            moves = session.handed.lost(stream, numbers)
            if moves:  # (a move that failed leaves the position where it stands)
                await asyncio.gather(*moves, return_exceptions=True)

    async def pause(self, reader_id: str, stream: str, upto: int, receives_out: bool) -> None:
        """Wait until a handle's receives up to ``upto`` finished (a seek goes after
        them). With receives still out (``receives_out``), a restarted channel opens
        the reader's session for them: they may still be on their way here, retried."""
        session = self.sessions.get(reader_id)
        if session is None and receives_out:
            with contextlib.suppress(SubscriberClosedError):
                session = self.session(reader_id, None)
        if session is not None:
            await session.pause(stream, upto)

    def resume(self, reader_id: str) -> None:
        """The seek a pause announced landed: the reader's waits may take again."""
        session = self.sessions.get(reader_id)
        if session is not None:
            session.resume()

    def hand_over_mark(self, reader_id: str, channel: int, sequence: int) -> int | None:
        """The hand-over mark of a resequenced element the reader's session here
        handed over (None: no session, or it does not know the element)."""
        session = self.sessions.get(reader_id)
        return None if session is None else session.handover.mark_of(channel, sequence)

    def commit_floors(self, reader_id: str) -> dict[int, int]:
        """Per channel, how far a commit of the reader may go while its session here
        waits to hand over again what a dropped reply carried (empty: no session)."""
        session = self.sessions.get(reader_id)
        return {} if session is None else session.handover.floors()

    def resequencer_stats(self, reader_id: str) -> Any:
        """The resequencer counts of the reader's session here (None: none)."""
        session = self.sessions.get(reader_id)
        return None if session is None else session.resequencer_stats

    def end_receives(self, reason: str) -> None:
        """The topic is being destroyed: every waiting receive raises
        TopicNotFoundError(``reason``), and so does every later one at once (the
        channel then waits for them, and for :attr:`sibling_calls`, to answer)."""
        error = self._destroyed = TopicNotFoundError(reason)
        for session in self.sessions.values():
            session.close(error)

    # -- group views --------------------------------------------------------------------

    def update_views(
        self,
        group: str,
        version: int,
        generation: int,
        views: dict[str, dict[int, Lease] | None],
        left: Callable[[str], None],
        back: Callable[[str], None],
    ) -> bool:
        """Members' channels changed: sessions here read these from now on. A member
        that left or timed out (None) owns nothing: its session here ends and
        ``left(member)`` is told; ``back(member)`` of one in the view again.
        Returns whether the group's marks (version, generation) rose."""
        mark = self.marks.get(group, (0, 0))
        rose = version > mark[0] or generation > mark[1]
        if rose:
            self.marks[group] = (max(version, mark[0]), max(generation, mark[1]))
        known = self.views.setdefault(group, {})
        for reader_id, leases in views.items():
            if reader_id in known and known[reader_id][0] >= version:
                continue
            if leases is None:
                known.pop(reader_id, None)
                if reader_id in self.sessions:
                    self._ended.add(reader_id)
                self.end_session(reader_id)
                left(reader_id)
                continue
            back(reader_id)
            known[reader_id] = (version, leases)
            session = self.sessions.get(reader_id)
            if session is not None:
                session.update_view(version, leases)
        return rose

    def forget_group(self, group: str) -> None:
        """The group was destroyed."""
        self.views.pop(group, None)
        self.marks.pop(group, None)


def _remote_caller(handle: Any, in_flight: set[Any]) -> Caller:
    """A sibling's caller; each call is in ``in_flight`` until it is answered.

    A fetch that names a direct line runs once (no Ray retry on a restarted
    sibling): its offer may have been heard from the sibling that died, and the
    session read on past it; run again, it would place the reader's read position
    back where that offer began (``Take.from_sequence``), and the session's next
    take there would read those elements again. Failed instead, the fetch is
    looked at again by the session, as any failed fetch."""
    once: list[Any] = []  # the method that runs once, made at the first such fetch

    async def call(request: ChannelRequest) -> Any:
        method = handle.request
        if isinstance(request, Take) and request.direct is not None:
            if not once:
                once.append(method.options(max_task_retries=0))
            method = once[0]
        ref = method.remote(pack_request(request))
        in_flight.add(ref)
        try:
            return await ref
        finally:
            in_flight.discard(ref)

    return call
