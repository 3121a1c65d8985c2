"""How a receive session reads a channel: one interface, :class:`ReaderPort`, with two
implementations. No Ray (the caller that serves a request is given).

- :class:`LocalPort`: the session's host channel, in process (its requests are
  served by the host actor's own handlers, and its cursor state is read in place;
  the host channel pokes its sessions on every change, so it is never watched).
- :class:`RemotePort`: a sibling channel, by actor call. What a take there takes
  is *lent* until the session settles it (see :mod:`.lending`): if the host dies
  with the elements in no reply, the sibling reads them again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from raytopic.core.protocol import (
    ChannelRequest,
    CursorState,
    Delivery,
    GiveBack,
    SettleTake,
    StopTake,
    Take,
    Watch,
)

if TYPE_CHECKING:
    from raytopic.actors.receive.lending import LentTakes
    from raytopic.core.protocol import ReaderLease

__all__ = ["WATCH_TIMEOUT", "Caller", "LocalPort", "ReaderPort", "RemotePort"]

WATCH_TIMEOUT = 10.0
"""Seconds a watch or fetch waits at a channel before it reports back."""

Caller = Callable[[ChannelRequest], Awaitable[Any]]
"""Serves a data-path request at a channel: ``await call(request)``."""


class ReaderPort(Protocol):
    """A reader's calls at one channel, as a receive session makes them."""

    channel: int

    def state_in_place(self, reader_id: str, lease: ReaderLease) -> CursorState | None:
        """The reader's cursor state read without a call, or None where it takes one
        (a sibling: watch it instead).

        Raises:
            NotOwnerError: ``lease`` is no longer the reader's lease here.
            SubscriberClosedError: the reader is closed here.
        """
        ...

    def take(
        self, reader_id: str, lease: ReaderLease, max_count: int, lent: LentTakes
    ) -> Awaitable[Delivery]:
        """Deliver up to ``max_count`` elements from the reader's cursor (may be none),
        settled: if the caller is cancelled meanwhile, what it took is given back."""
        ...

    def fetch(
        self, reader_id: str, lease: ReaderLease, max_count: int, token: str, lent: LentTakes
    ) -> Awaitable[Delivery]:
        """A take that first waits (up to WATCH_TIMEOUT) for data; what it takes is
        lent under ``token`` until settled; ``stop_fetch(token)`` ends the wait. It
        carries the settle of ``lent``'s take before it at this channel."""
        ...

    def stop_fetch(self, token: str) -> Awaitable[None]:
        """End the wait of the fetch ``token``: it takes nothing."""
        ...

    def settle(
        self, reader_id: str, lease: ReaderLease, token: str, give_back_from: int | None
    ) -> Awaitable[bool]:
        """What of the take lent under ``token`` was used: the rest from ``give_back_from``
        (None: nothing) is read again."""
        ...

    def watch(
        self, reader_id: str, lease: ReaderLease, known: CursorState | None
    ) -> Awaitable[CursorState]:
        """The cursor state once it differs from ``known`` (data, commit, seek), or after
        WATCH_TIMEOUT."""
        ...

    def give_back(self, reader_id: str, lease: ReaderLease, delivery: Delivery) -> Awaitable[bool]:
        """Undo a take whose elements never reached the subscriber (refused, False, if
        the cursor moved on since)."""
        ...


class _Requests:
    """The requests both ports send; only how they are served differs."""

    __slots__ = ("_call", "channel")

    def __init__(self, channel: int, call: Caller) -> None:
        self.channel = channel
        self._call = call

    def fetch(
        self, reader_id: str, lease: ReaderLease, max_count: int, token: str, lent: LentTakes
    ) -> Awaitable[Delivery]:
        take = Take(
            reader_id=reader_id,
            lease=lease,
            max_count=max_count,
            wait=WATCH_TIMEOUT,
            token=token,
            settles=lent.riding(self.channel),
        )
        return self._call(take)

    def stop_fetch(self, token: str) -> Awaitable[None]:
        return self._call(StopTake(token=token))

    def settle(
        self, reader_id: str, lease: ReaderLease, token: str, give_back_from: int | None
    ) -> Awaitable[bool]:
        return self._call(
            SettleTake(reader_id=reader_id, lease=lease, token=token, give_back_from=give_back_from)
        )

    def watch(
        self, reader_id: str, lease: ReaderLease, known: CursorState | None
    ) -> Awaitable[CursorState]:
        return self._call(
            Watch(reader_id=reader_id, lease=lease, known=known, timeout=WATCH_TIMEOUT)
        )

    def give_back(self, reader_id: str, lease: ReaderLease, delivery: Delivery) -> Awaitable[bool]:
        # A shared group's member names each element it gives back.
        entries = delivery.entries() if delivery.origin.shared else ()
        return self._call(
            GiveBack(
                reader_id=reader_id,
                lease=lease,
                first=delivery.first,
                expected_next=delivery.next,
                jumps=delivery.jumps,
                entries=entries,
            )
        )


class LocalPort(_Requests):
    """The host channel, in process.

    Args:
        channel: The host channel.
        call: Serves a request with the host actor's own handler.
        state: The reader's cursor state at the host channel, read in place.
    """

    __slots__ = ("_state",)

    def __init__(
        self, channel: int, call: Caller, state: Callable[[str, Any], CursorState]
    ) -> None:
        super().__init__(channel, call)
        self._state = state

    def state_in_place(self, reader_id: str, lease: ReaderLease) -> CursorState:
        return self._state(reader_id, lease)

    def take(
        self, reader_id: str, lease: ReaderLease, max_count: int, lent: LentTakes
    ) -> Awaitable[Delivery]:
        # Served in this process: nothing is lent, and nothing is in a reply that
        # could be lost.
        return self._call(Take(reader_id=reader_id, lease=lease, max_count=max_count))


class RemotePort(_Requests):
    """A sibling channel, by actor call.

    Args:
        channel: The sibling channel.
        call: Sends a request to the sibling and awaits its reply.
    """

    __slots__ = ()

    def state_in_place(self, reader_id: str, lease: ReaderLease) -> None:
        return None

    async def take(
        self, reader_id: str, lease: ReaderLease, max_count: int, lent: LentTakes
    ) -> Delivery:
        # Lent until settled, which is done as soon as it is back here: if the host
        # dies in between (the elements in no reply), the sibling reads them again.
        token = lent.token()
        take = Take(
            reader_id=reader_id,
            lease=lease,
            max_count=max_count,
            token=token,
            settles=lent.riding(self.channel),
        )
        call = asyncio.ensure_future(self._call(take))
        try:
            delivery = await asyncio.shield(call)
        except asyncio.CancelledError:
            # The sibling may still complete the take: hand its elements back.
            lent.give_back_when_done(call, token)
            raise
        lent.settle_used(delivery, token)
        return delivery
