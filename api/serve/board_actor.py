"""A queue's task board as a detached Ray actor whose state survives it: every change
is written to the queue's task log (a compacted topic keyed by task id,
``raytopic.client.control_log``) before the call that made it answers, and a board that
(re)starts reads the log back before it answers anything (docs/architecture.md,
Control state).

So a task's status and result outlive the restart of the board and of the log's
channels (and, with a store on shared disk, the loss of a node); a task told
finished is never run again; a task told cancelled is never started; a task told
started cannot be cancelled. Forgotten tasks (past ``results_kept``) are deleted
from the log too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

from raytopic.client.control_log import ControlLog
from raytopic.serve.board import CHANGES_KEPT, Changes, TaskBoard

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
        self._queue = queue
        self._namespace = namespace
        self._store = store
        self._board = TaskBoard(kept)
        self._log: ControlLog | None = None
        self._loading = asyncio.Lock()

    async def _loaded(self) -> ControlLog:
        """The task log, read back whole before the first answer (in a call, not in
        ``__init__``: an ``__init__`` that raised during a restart would end the
        actor for good; a failed read is tried again by the next call)."""
        if self._log is not None:
            return self._log
        async with self._loading:
            if self._log is None:
                log = await asyncio.to_thread(
                    ControlLog, task_log_name(self._queue), self._namespace, store=self._store
                )
                records = await asyncio.to_thread(log.load)
                self._board.restore(sorted(records.items(), key=lambda item: item[1]["at"]))
                self._log = log
        return self._log

    async def _keep(self, changed: list[str], forgotten: list[str] | None = None) -> None:
        """Write the changed tasks' records and delete the forgotten; return once
        the log holds them. ``at`` (wall clock: it orders records across restarts)
        tells a restarted board which finished tasks are the oldest."""
        log = await self._loaded()
        now = time.time()
        records = {task_id: {**self._board.record(task_id), "at": now} for task_id in changed}
        writes: list[Awaitable[Any]] = [
            asyncio.wrap_future(log.delete(task_id)) for task_id in forgotten or ()
        ]
        if records:
            writes.append(log.write_all(records))
        await asyncio.gather(*writes)

    async def start(self, tasks: list[tuple[str, float | None]]) -> list[str]:
        """See :meth:`TaskBoard.start`; the STARTED statuses are held when it returns."""
        await self._loaded()
        skip = self._board.start(tasks)
        await self._keep([task_id for task_id, _ in tasks if task_id not in skip])
        return skip

    async def finish(self, outcomes: list[tuple[str, str, Any, float | None]]) -> None:
        """See :meth:`TaskBoard.finish`; the outcomes are held when it returns."""
        await self._loaded()
        forgotten = set(self._board.finish(outcomes))
        changed = list(dict.fromkeys(o[0] for o in outcomes if o[0] not in forgotten))
        await self._keep(changed, list(forgotten))

    async def cancel(self, task_id: str) -> bool:
        """See :meth:`TaskBoard.cancel`; REVOKED is held when it returns True."""
        await self._loaded()
        cancelled, forgotten = self._board.cancel(task_id)
        if cancelled:
            await self._keep([task_id] if task_id not in forgotten else [], forgotten)
        return cancelled

    async def read(
        self, task_id: str, board: str | None, mark: int
    ) -> tuple[tuple[str, Any, float | None], Changes]:
        """:meth:`TaskBoard.get` and the changes since the reader's mark (one call)."""
        await self._loaded()
        return self._board.get(task_id), self._board.changes(board, mark, CHANGES_KEPT)

    async def counts(self) -> dict[str, int]:
        """See :meth:`TaskBoard.counts`."""
        await self._loaded()
        return self._board.counts()

    async def destroy(self) -> None:
        """Destroy the task log (the queue is being deleted)."""
        log = await self._loaded()
        log.close()
        await asyncio.to_thread(log.topic.destroy)
