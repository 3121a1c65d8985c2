"""A queue's task board: a small detached Ray actor off the tasks' path, which makes
the queue's task log (a compacted topic keyed by task id,
``raytopic.client.control_log``), forgets the oldest finished tasks past
``results_kept`` (deletes their records), counts tasks by status and destroys the
log with the queue.

A task's start, outcome and cancel are conditional writes decided at the log's
channel, and a status read is answered there (``raytopic.serve.board``): no call
of a task's walk goes through this actor. Replicas tell it which tasks finished
(a call not waited for, at most every half second: ``TELL_EVERY``); a board that
(re)starts reads the log back first, so what it was told while down (Ray retries
the calls) or before is counted once. A tell that comes while the queue is deleted
answers without forgetting (the log goes whole). What a restarted board reads back
it forgets only once the queue's group acknowledged the task's element (asked of the
queue's channels at a tell, while some are held back): a task whose ack was lost
comes back, and finds its record to be passed over by.

A tell is never lost to a failure here: what it told is kept until the log is read
back, and a forget until its delete is held; while the log cannot be read or
written (its channel restarts, the read back takes longer than ``LOAD_TIMEOUT``),
the board tries again every ``RETRY_EVERY`` seconds by itself (a tell that failed
so was not told again, and the records it would have forgotten stayed on the log).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import ray

from raytopic.client.control_log import ControlLogLoader
from raytopic.client.topic import getting
from raytopic.core.errors import TopicError
from raytopic.core.protocol import ReadGroupCursors
from raytopic.core.steps import run_awaiting
from raytopic.serve.board import CONSUMER_GROUP, FinishedTasks

logger = logging.getLogger(__name__)

__all__ = ["RETRY_EVERY", "TaskBoardActor", "task_log_name"]

RETRY_EVERY = 2.0
"""Seconds between a board's tries at what a failure left undone (reading the task
log back, counting what it was told, deleting what it forgot)."""

_UNDONE = (TopicError, TimeoutError, ray.exceptions.RayError)
"""What a failed read or write of the task log raises (tried again later)."""


def task_log_name(queue: str) -> str:
    """The compacted topic that keeps a queue's task statuses and results."""
    return f"{queue}.tasks"


class TaskBoardActor:
    """The board of one queue (a Ray actor; see the module docstring).

    Args:
        queue: The queue's name.
        namespace: The queue's Ray namespace.
        store: The task log's store (the queue's; None: the Ray session's directory).
        kept: Finished tasks kept at most (the oldest finished go first).
    """

    def __init__(self, queue: str, namespace: str, store: Any, kept: int) -> None:
        self._queue, self._namespace = queue, namespace
        self._finished = FinishedTasks(kept)
        self._control = ControlLogLoader(
            task_log_name(queue), namespace, store, self._finished.restore
        )
        self._deleting = False  # destroy() began: the log goes whole, nothing to forget
        self._told: list[str] = []  # told finished, not counted yet (the log not read back)
        self._forgetting: dict[str, None] = {}  # forgotten, the delete not held yet
        self._sweeping = asyncio.Lock()  # one sweep at a time: each takes what is told
        self._retrying: asyncio.Task[None] | None = None  # tries again after a failure

    async def finished(self, tasks: list[str]) -> None:
        """These tasks' outcomes are on the log and their acks answered: count them, and
        forget (delete) the oldest finished past ``kept``; answered once the deletes are
        held (at once while the queue is deleted). A failure to read the log back or to
        delete is logged and tried again every ``RETRY_EVERY`` seconds: what was told
        is kept."""
        if self._deleting:
            return
        self._told += tasks
        try:
            await self._sweep()
        except _UNDONE as error:
            if self._deleting:  # the log closed under the deletes by destroy() only
                return
            logger.warning(
                "task queue %s: finished tasks not forgotten yet (tried again in %.0f s): %r",
                self._queue,
                RETRY_EVERY,
                error,
            )
            self._retry_later()

    async def _sweep(self) -> None:
        """Count what was told and delete what is forgotten (once the log is read back);
        what fails stays to be tried again."""
        async with self._sweeping:
            log = await self._control.loaded()
            await self._count_acknowledged()
            told, self._told = self._told, []
            self._forgetting.update(dict.fromkeys(self._finished.finished(told)))
            forgetting = list(self._forgetting)
            deletes = await asyncio.gather(
                *(asyncio.wrap_future(log.delete(task)) for task in forgetting),
                return_exceptions=True,
            )
            failed = None
            for task, deleted in zip(forgetting, deletes, strict=True):
                if isinstance(deleted, BaseException):
                    failed = deleted
                else:
                    self._forgetting.pop(task, None)
            if failed is not None:
                raise failed

    def _retry_later(self) -> None:
        """Start the routine that tries again (unless it runs)."""
        if self._retrying is None or self._retrying.done():
            self._retrying = asyncio.get_running_loop().create_task(self._retry())

    async def _retry(self) -> None:
        """Every ``RETRY_EVERY`` seconds, sweep while something is left undone."""
        while not self._deleting and (self._told or self._forgetting):
            await asyncio.sleep(RETRY_EVERY)
            try:
                await self._sweep()
            except _UNDONE as error:
                logger.info("task queue %s: tried again, not yet: %r", self._queue, error)

    async def _count_acknowledged(self) -> None:
        """Count the tasks held back since the restart whose element the queue's group
        acknowledged (one call per queue channel they are in; none once all are)."""
        channels = sorted(self._finished.held_back_channels)
        if not channels:
            return
        try:
            queue = await run_awaiting(getting(self._queue, self._namespace))
            cursors = await asyncio.gather(
                *(queue._channel_actors[c].control.remote(ReadGroupCursors()) for c in channels)
            )
        except (TopicError, ray.exceptions.RayActorError) as error:  # until a later tell
            logger.warning("task queue %s: acknowledged tasks not read: %s", self._queue, error)
            return
        self._finished.acknowledged(
            {
                channel: cursor[CONSUMER_GROUP]["committed"]
                for channel, cursor in zip(channels, cursors, strict=True)
                if CONSUMER_GROUP in cursor
            }
        )

    async def ready(self) -> None:
        """Answer once the task log is made (and read back)."""
        await self._control.loaded()

    async def counts(self) -> dict[str, int]:
        """Tasks by status, as the task log holds them."""
        log = await self._control.loaded()
        records = await run_awaiting(log.loading())
        return dict(Counter(record["status"] for record in records.values()))

    async def destroy(self) -> None:
        """Destroy the task log (the queue is being deleted)."""
        log = await self._control.loaded()
        self._deleting = True
        if self._retrying is not None:
            self._retrying.cancel()
        log.close()
        await run_awaiting(log.topic.destroying())
