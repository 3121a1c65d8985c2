"""How a receive session reads a channel: one interface, :class:`ReaderPort`, with two
implementations. No Ray (what serves a request is given).

- :class:`LocalPort`: the session's host channel, in process: its readers serve the
  take directly, and the cursor state is read in place (the host channel pokes its
  sessions on every change, so it is never watched).
- :class:`RemotePort`: a sibling channel, by actor call.

Both serve the same :class:`~raytopic.core.protocol.Take`, named by position (see
``raytopic.actors.receive.positions``): nothing a take hands out is lent, so a
port has nothing to undo.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from raytopic.core.protocol import (
    ChannelRequest,
    CursorState,
    Delivery,
    OfferSent,
    Take,
    Watch,
    unpack_small,
)

if TYPE_CHECKING:
    from raytopic.actors.direct_offers import OfferInbox
    from raytopic.core.protocol import ReaderLease

__all__ = ["WATCH_TIMEOUT", "Caller", "LocalPort", "ReaderPort", "RemotePort"]

WATCH_TIMEOUT = 10.0
"""Seconds a watch or fetch waits at a channel before it reports back."""

Caller = Callable[[ChannelRequest], Awaitable[Any]]
"""Serves a data-path request at a channel: ``await call(request)``."""


class ReaderPort(Protocol):
    """A reader's calls at one channel, as a receive session makes them."""

    channel: int
    in_process: bool
    """Its take runs in the session's own process: cancelled, it has changed nothing
    (a take moves the read position only after its last wait)."""

    def state_in_place(self, reader_id: str, lease: ReaderLease) -> CursorState | None:
        """The reader's cursor state read without a call, or None where it takes one
        (a sibling: watch it instead).

        Raises:
            NotOwnerError: ``lease`` is no longer the reader's lease here.
            SubscriberClosedError: the reader is closed here.
        """
        ...

    def take(self, take: Take) -> Awaitable[Delivery]:
        """Serve ``take`` (see ``Take``: a fetch with ``wait``)."""
        ...

    def take_now(self, take: Take) -> Delivery | None:
        """Serve ``take`` in process, now, if it needs no wait; else None (a sibling:
        always), having changed nothing."""
        ...

    def watch(
        self, reader_id: str, lease: ReaderLease, known: CursorState | None
    ) -> Awaitable[CursorState]:
        """The cursor state once it differs from ``known`` (data, commit, seek), or after
        WATCH_TIMEOUT."""
        ...


class LocalPort:
    """The host channel, in process.

    Args:
        channel: The host channel.
        take: Its readers' take.
        state: The reader's cursor state at the host channel, read in place.
        take_now: Its readers' take served at once if it needs no wait, else None
            (by default: never at once).
    """

    __slots__ = ("_state", "channel", "take", "take_now")

    in_process = True

    def __init__(
        self,
        channel: int,
        take: Callable[[Take], Awaitable[Delivery]],
        state: Callable[[str, Any], CursorState],
        take_now: Callable[[Take], Delivery | None] = lambda take: None,
    ) -> None:
        self.channel = channel
        self.take = take
        self._state = state
        self.take_now = take_now

    def state_in_place(self, reader_id: str, lease: ReaderLease) -> CursorState:
        return self._state(reader_id, lease)

    def watch(
        self, reader_id: str, lease: ReaderLease, known: CursorState | None
    ) -> Awaitable[CursorState]:
        raise TypeError("the host channel is read in place, never watched")


class RemotePort:
    """A sibling channel, by actor call (its replies come packed: ``SIBLING_REQUESTS``).

    A fetch's reply may come straight from the sibling's process too (``offers``: see
    ``raytopic.actors.direct_offers``); Ray's reply then carries either the same offer
    (the first heard is the fetch's reply, the other is dropped) or a note that the
    offer went whole on a line (the fetch waits for it there, and fails if that line
    breaks first).

    Args:
        channel: The sibling channel.
        call: Sends a request to the sibling and awaits its reply.
        offers: The host's end of the direct offers (None: Ray's replies alone).
    """

    __slots__ = ("_call", "_offers", "channel")

    in_process = False

    def __init__(self, channel: int, call: Caller, offers: OfferInbox | None = None) -> None:
        self.channel = channel
        self._call = call
        self._offers = offers

    def state_in_place(self, reader_id: str, lease: ReaderLease) -> None:
        return None

    async def take(self, take: Take) -> Delivery:
        offers = self._offers
        opened = offers.open() if take.wait and offers is not None else None
        if offers is None or opened is None:
            return unpack_small(await self._call(take))
        line, offered = opened
        call = asyncio.ensure_future(self._call(take._replace(direct=line)))
        try:
            await asyncio.wait((call, offered), return_when=asyncio.FIRST_COMPLETED)
            if offered.done():  # Ray's reply (or its error) is no longer heard
                call.add_done_callback(_unheard)
                return unpack_small(offered.result())
            reply = call.result()  # (a failed fetch raises here)
            if isinstance(reply, OfferSent):  # the offer is on its way on that line
                return unpack_small(await offers.sent(line, offered, reply))
            offered.cancel()
            return unpack_small(reply)
        except asyncio.CancelledError:
            call.cancel()
            raise
        finally:
            offers.close_line(line)

    def take_now(self, take: Take) -> None:
        return None

    async def watch(
        self, reader_id: str, lease: ReaderLease, known: CursorState | None
    ) -> CursorState:
        watch = Watch(reader_id=reader_id, lease=lease, known=known, timeout=WATCH_TIMEOUT)
        return unpack_small(await self._call(watch))


def _unheard(call: asyncio.Future[Any]) -> None:
    """Ray's reply to a fetch heard by its direct offer: read, so no error is logged
    as never retrieved (a cancel or a lost sibling after it answered)."""
    if not call.cancelled():
        call.exception()
