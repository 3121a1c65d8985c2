"""Group commit: one blocking flush, off the event loop, serves every waiter it covers. No Ray.

An append with ``sync="always"`` must not be acknowledged before an
``fdatasync`` covers its record, and a commit not before the state file
holding it is on disk. One flush at a time runs in a thread; whoever waits
while it runs is served by the next one, which covers everything written up
to its start. At most two flushes per waiter, however many wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["GroupSync"]


class GroupSync:
    """Serialises a blocking ``flush`` and shares each run among its waiters.

    Args:
        flush: Makes durable everything marked before it started (runs in a
            thread; an exception reaches every waiter, and every later one:
            the sync is broken for good). It gets what ``prepare`` returned.
        prepare: Runs on the event loop just before each flush (a consistent
            snapshot of what to write); default: nothing.
    """

    def __init__(
        self, flush: Callable[[Any], None], prepare: Callable[[], Any] = lambda: None
    ) -> None:
        self._flush = flush
        self._prepare = prepare
        self._marked = 0  # changes made so far
        self._covered = 0  # changes a finished flush covers
        self._lock = asyncio.Lock()
        self._failed: BaseException | None = None
        self._running: asyncio.Future[None] | None = None

    @property
    def covered(self) -> int:
        """The latest change a finished flush covers."""
        return self._covered

    def mark(self) -> int:
        """Note a change (a write made, a state changed); returns its number."""
        self._marked += 1
        return self._marked

    async def wait(self, change: int | None = None) -> None:
        """Return once a flush that started after ``change`` (default: the latest) finished."""
        target = self._marked if change is None else change
        async with self._lock:
            while True:
                if self._failed is not None:
                    raise self._failed
                if self._covered >= target:
                    return
                if self._running is None or self._running.done():
                    self._running = asyncio.ensure_future(self._flush_covering(self._marked))
                # Shielded: a waiter cancelled meanwhile (``ray.cancel`` of a
                # publish) must not cut the flush short for the others; the
                # flush records its own outcome.
                await asyncio.shield(self._running)

    async def _flush_covering(self, covering: int) -> None:
        try:
            await asyncio.to_thread(self._flush, self._prepare())
        except Exception as error:
            # After a failed fdatasync nothing written before it can be trusted
            # (a second one may "succeed" with the data lost): every waiter,
            # now and later, gets this error.
            self._failed = error
            return
        self._covered = max(self._covered, covering)
