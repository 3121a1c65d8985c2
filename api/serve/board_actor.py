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
answers without forgetting (the log goes whole).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from raytopic.client.control_log import ControlLogLoader
from raytopic.core.errors import PublisherClosedError, TopicNotFoundError
from raytopic.core.steps import run_awaiting
from raytopic.serve.board import FinishedTasks

__all__ = ["TaskBoardActor", "task_log_name"]


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
        self._finished = FinishedTasks(kept)
        self._control = ControlLogLoader(
            task_log_name(queue), namespace, store, self._finished.restore
        )
        self._deleting = False  # destroy() began: the log goes whole, nothing to forget

    async def finished(self, tasks: list[str]) -> None:
        """These tasks' outcomes are on the log: forget (delete) the oldest finished
        past ``kept``, answered once the deletes are held (at once while the queue is
        deleted)."""
        if self._deleting:
            return
        log = await self._control.loaded()
        forgotten = self._finished.finished(tasks)
        try:
            await asyncio.gather(*(asyncio.wrap_future(log.delete(task)) for task in forgotten))
        except (PublisherClosedError, TopicNotFoundError):
            if not self._deleting:  # the log closed under the deletes by destroy() only
                raise

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
        log.close()
        await run_awaiting(log.topic.destroying())
