"""What a receive session knows of its reader's channels: the channels it owns (with
their leases) and the cursor state it last saw at each. No Ray, no asyncio.

What is known may be stale: it only says where a take may find data (a channel
known empty is not taken from until it changes) and how much of the window is
used. A take or a watch brings it up to date; a new view forgets what it knew of
the channels that changed hands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from raytopic.actors.receive.planner import in_scope, window_room
from raytopic.core.protocol import CursorState, Delivery

if TYPE_CHECKING:
    from raytopic.core.protocol import ReaderLease

__all__ = ["OwnedView"]

_NOT_OWNED = object()


class OwnedView:
    """The owned channels and their known cursor states.

    Args:
        owned: channel -> the reader's lease there (None: an anonymous reader).
        host: The session's host channel (read first).
        window: Most received-but-uncommitted elements, or None.
    """

    def __init__(self, owned: Mapping[int, ReaderLease], host: int, window: int | None) -> None:
        self.leases: dict[int, ReaderLease] = dict(owned)
        """channel -> the reader's lease there (None: anonymous)."""
        self.known: dict[int, CursorState] = {}
        """channel -> the cursor state last seen there."""
        self.host = host
        self._window = window
        self._version = -1

    # -- ownership ---------------------------------------------------------------------

    def update(self, version: int, owned: Mapping[int, ReaderLease]) -> bool:
        """Adopt a newer view (older ones are ignored); returns whether it was adopted.
        What was known of a channel lost, or granted anew, is forgotten (its cursor moved)."""
        if version <= self._version:
            return False
        self._version = version
        before, self.leases = self.leases, dict(owned)
        for channel in list(self.known):
            if self.leases.get(channel, _NOT_OWNED) != before.get(channel, _NOT_OWNED):
                del self.known[channel]
        return True

    def owns(self, channel: int) -> bool:
        return channel in self.leases

    def lease_of(self, channel: int) -> ReaderLease:
        """The reader's lease at ``channel`` (None: anonymous, or not owned)."""
        return self.leases.get(channel)

    def holds(self, channel: int, lease: ReaderLease) -> bool:
        """Whether ``channel`` is still read under ``lease`` (a call made under an
        older lease reports on a cursor that has moved on)."""
        return self.leases.get(channel) == lease

    def drop(self, channel: int) -> None:
        """The channel is no longer ours (lost, or the reader is closed there)."""
        self.leases.pop(channel, None)
        self.known.pop(channel, None)

    # -- what is known -----------------------------------------------------------------

    def learn(self, delivery: Delivery) -> None:
        """Remember the cursor state a delivery reports."""
        self.known[delivery.channel] = CursorState(
            delivery.next,
            delivery.committed,
            delivery.tail,
            delivery.jumps,
            unacked=delivery.unacked,
            stopped=delivery.stopped,
        )

    def forget(self, channel: int) -> None:
        """Nothing is known of ``channel`` now (look at it again)."""
        self.known.pop(channel, None)

    def scope(self, here_only: bool) -> list[int]:
        """The owned channels a receive may read, the host channel first."""
        return in_scope(self.leases, self.host, here_only)

    def room(self) -> int:
        """Elements a receive may take now (see ``window_room``)."""
        known = self.known
        return window_room(self._window, (known[c].unacked for c in self.leases if c in known))

    def maybe_available(self, channel: int) -> bool:
        """Whether a take at ``channel`` may find data (unknown: it may)."""
        known = self.known.get(channel)
        return known is None or known.available

    def known_available(self, here_only: bool) -> bool:
        """Whether a channel in scope is known to have data."""
        known = self.known
        return any(c in known and known[c].available for c in self.scope(here_only))

    def any_maybe_available(self, here_only: bool) -> bool:
        """Whether a channel in scope may have data."""
        return any(self.maybe_available(c) for c in self.scope(here_only))
