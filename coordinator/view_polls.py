"""Members' long polls on their group's view, and the wait for them to catch up. No Ray.

Each group member keeps one ``Heartbeat`` request waiting at the coordinator;
it returns as soon as the group's view changes, and the member polls again
at once, carrying the version it now knows. That next poll is the member's
acknowledgement: a membership change waits (briefly) until every member
that polls has polled again since, so when ``join`` or ``leave`` returns,
the live members have heard of it; ``channels`` read on any of them answers
the new view without a call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

__all__ = ["ViewPolls"]


class ViewPolls:
    """Long polls per group: who waits, what version each member knows."""

    def __init__(self) -> None:
        self._changed: dict[str, asyncio.Event] = {}
        self._known: dict[str, dict[str, int]] = {}
        self._pending: dict[str, Counter[str]] = {}
        self._caught_up = asyncio.Event()  # set (and replaced) whenever a member reports

    async def wait(self, group: str, member: str, known: int, current: int, timeout: float) -> None:
        """A member's poll: record the version it knows; if that is ``current``,
        wait up to ``timeout`` seconds for the view to change."""
        members = self._known.setdefault(group, {})
        members[member] = max(known, members.get(member, known))
        self._caught_up.set()
        self._caught_up = asyncio.Event()
        if known != current:
            return
        pending = self._pending.setdefault(group, Counter())
        pending[member] += 1
        changed = self._changed.setdefault(group, asyncio.Event())
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout)
        finally:
            pending[member] -= 1
            if not pending[member]:
                del pending[member]

    def changed(self, group: str) -> set[str]:
        """The group's view changed: answer its polls; return the members that poll
        (one waiting now, or one on its way: every member that ever polled)."""
        event = self._changed.pop(group, None)
        if event is not None:
            event.set()
        return set(self._known.get(group, ()))

    async def caught_up(self, group: str, members: set[str], version: int, timeout: float) -> None:
        """Wait until each of ``members`` knows ``version`` (polled again), at most
        ``timeout`` seconds (a member that died never will)."""
        known = self._known.setdefault(group, {})
        deadline = asyncio.get_running_loop().time() + timeout
        while any(known.get(member, -1) < version for member in members):
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._caught_up.wait(), left)

    def forget(self, group: str, member: str | None = None) -> None:
        """Drop what is known of a member that left (or of a whole group)."""
        if member is None:
            self._known.pop(group, None)
        else:
            self._known.get(group, {}).pop(member, None)
