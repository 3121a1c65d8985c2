"""A channel's background work: named jobs, started in one place, stopped in close(). No Ray.

Each job is a coroutine that runs while the channel needs it (tending shared
groups' holds, resolving transactions left undecided, reporting metrics). The
channel asks for the jobs its state needs after each request
(:meth:`ChannelJobs.start` keeps one task per job at a time) and stops them all
in ``close``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Callable, Coroutine
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["ChannelJobs"]


class ChannelJobs:
    """The background jobs of one channel, one task per job at a time."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._closed = False

    def start(self, job: str, work: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Run ``work()`` as background ``job`` unless it runs already (or the jobs
        were closed). It runs in a context of its own: it is no part of the
        request that started it (that request's unit of work does not wait for
        what the job changes)."""
        if self._closed:
            return
        task = self._tasks.get(job)
        if task is None or task.done():
            loop = asyncio.get_running_loop()
            task = loop.create_task(work(), name=job, context=contextvars.Context())
            task.add_done_callback(_log_failure)
            self._tasks[job] = task

    def running(self, job: str) -> bool:
        """Whether ``job`` runs now."""
        task = self._tasks.get(job)
        return task is not None and not task.done()

    async def close(self) -> None:
        """Stop every job and wait for them to end; no job starts again. Idempotent."""
        self._closed = True
        tasks = [task for task in self._tasks.values() if not task.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("background job %s ended: %r", task.get_name(), task.exception())
