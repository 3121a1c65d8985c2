"""Submit a publisher's calls in the order it numbered them. No Ray.

A publisher numbers its calls under its lock but submits them outside it (a
submission serializes the payload; ``publish()`` on other threads goes on
meanwhile). A channel appends one publisher's calls by number and waits for a
missing number only so long (``raytopic.actors.turns``): a thread held up
between numbering a call and submitting it (preempted, say) while later calls
went ahead would see its call skipped and failed. So whoever numbers calls takes
a ticket under the same lock, and submits when its ticket's turn comes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["SubmitOrder"]


class SubmitOrder:
    """Tickets taken in numbering order; one holder submits at a time, in ticket order."""

    def __init__(self) -> None:
        self._issued = 0
        self._serving = 0
        self._changed = threading.Condition()

    def ticket(self) -> int:
        """A ticket after every one issued before (take it under the lock that numbers
        the calls it submits)."""
        ticket = self._issued
        self._issued += 1
        return ticket

    @contextmanager
    def turn(self, ticket: int) -> Iterator[None]:
        """Wait until every earlier ticket has submitted, then hold the turn. The turn
        passes on however the body ends (a ticket never served would stall the rest)."""
        with self._changed:
            while self._serving != ticket:
                self._changed.wait()
        try:
            yield
        finally:
            with self._changed:
                self._serving += 1
                self._changed.notify_all()
