"""How a receive session reaches a channel: the link that calls a channel's reader
methods, in-process for the session's host channel and by actor call for a
sibling. No Ray (the caller is given).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

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

__all__ = ["WATCH_TIMEOUT", "ChannelLink"]

WATCH_TIMEOUT = 10.0
"""Seconds a watch or fetch waits at a channel before it reports back."""


class ChannelLink:
    """Calls one channel's reader methods: in-process for the home's own channel,
    by actor call for a sibling. Both have the same shape."""

    __slots__ = ("_call", "channel", "local", "state")

    def __init__(
        self,
        channel: int,
        call: Callable[[ChannelRequest], Awaitable[Any]],
        *,
        local: bool,
        state: Callable[[str, Any], CursorState] | None = None,
    ) -> None:
        self.channel = channel
        self.local = local
        self._call = call
        self.state = state
        """For the home's own channel: its cursor state, read in-process."""

    def take(
        self, reader_id: str, fence: Any, max_count: int, token: str | None = None
    ) -> Awaitable[Delivery]:
        """Deliver up to ``max_count`` elements from the reader's cursor (may be none);
        with ``token``, what it takes is lent until settled (see ``settle``)."""
        return self._call(Take(reader_id=reader_id, fence=fence, max_count=max_count, token=token))

    def fetch(self, reader_id: str, fence: Any, max_count: int, token: str) -> Awaitable[Any]:
        """A take that first waits (up to WATCH_TIMEOUT) for data; ``stop_take(token)``
        ends the wait early."""
        return self._call(
            Take(
                reader_id=reader_id,
                fence=fence,
                max_count=max_count,
                wait=WATCH_TIMEOUT,
                token=token,
            )
        )

    def stop_take(self, token: str) -> Awaitable[Any]:
        """End the wait of the fetch ``token``: it takes nothing."""
        return self._call(StopTake(token=token))

    def settle(
        self, reader_id: str, fence: Any, token: str, give_back_from: int | None
    ) -> Awaitable[Any]:
        """Tell the channel what of fetch ``token``'s take was used; the rest from
        ``give_back_from`` (None: nothing) is read again."""
        return self._call(
            SettleTake(reader_id=reader_id, fence=fence, token=token, give_back_from=give_back_from)
        )

    def watch(self, reader_id: str, fence: Any, known: CursorState | None) -> Awaitable[Any]:
        """Wait until the cursor differs from ``known`` (data, commit, seek) or a timeout."""
        return self._call(
            Watch(reader_id=reader_id, fence=fence, known=known, timeout=WATCH_TIMEOUT)
        )

    def give_back(self, reader_id: str, fence: Any, delivery: Delivery) -> Awaitable[Any]:
        """Undo a take whose elements never reached the subscriber (a shared group's
        member names each element it gives back)."""
        entries = delivery.entries() if delivery.origin.shared else ()
        return self._call(
            GiveBack(
                reader_id=reader_id,
                fence=fence,
                first=delivery.first,
                expected_next=delivery.next,
                jumps=delivery.jumps,
                entries=entries,
            )
        )
