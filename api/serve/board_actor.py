"""A queue's task board as a detached Ray actor whose state survives it: every change
is written to the queue's task log (a compacted topic keyed by task id,
``raytopic.client.control_log``) before the call that made it answers and before any
reader sees it (a status a client saw is never taken back), and a board that
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
from raytopic.serve.board import CHANGES_KEPT, Changes, TaskBoard, Writes

__all__ = ["READ_WAIT", "TaskBoardActor", "task_log_name"]


READ_WAIT = 1.0
"""Seconds a status read waits for its task's outcome on its way to the task log (it
answers the outcome once held, not the status before it a poll too early; a stalled
log costs that read this long, then it answers what the log holds)."""


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
        self._writing: dict[str, set[asyncio.Future[Any]]] = {}  # each task's writes on their way

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

    async def _keep(self, writes: Writes) -> None:
        """Write the changed tasks' records and delete the forgotten; return once the
        log holds them, and only then show them to readers (a write that failed takes
        its change back). ``at`` (wall clock: it orders records across restarts) tells
        a restarted board which finished tasks are the oldest."""
        if not writes.tasks:
            return
        log = self._log  # loaded by the caller (no await between decision and write)
        assert log is not None
        now = time.time()
        records = {
            task_id: {**self._board.record(task_id), "at": now} for task_id in writes.changed
        }
        pending: list[Awaitable[Any]] = [
            asyncio.wrap_future(log.delete(task_id)) for task_id in writes.forgotten
        ]
        if records:
            pending.append(log.write_all(records))
        written = asyncio.ensure_future(asyncio.gather(*pending))
        for task_id in writes.tasks:
            self._writing.setdefault(task_id, set()).add(written)
        try:
            await written
        except BaseException:
            self._board.undo(writes)
            raise
        else:
            self._board.held(writes)
        finally:
            for task_id in writes.tasks:
                on_way = self._writing.get(task_id, set())
                on_way.discard(written)
                if not on_way:
                    self._writing.pop(task_id, None)

    async def _until_logged(self, tasks: list[str]) -> None:
        """Wait until no change of these tasks is on its way to the log: a decision
        about them then rests on what the log holds."""
        while self._board.unheld(tasks):
            waits = set().union(*(self._writing.get(task_id, ()) for task_id in tasks))
            await asyncio.gather(*waits, return_exceptions=True)

    async def start(self, tasks: list[tuple[str, float | None]]) -> list[str]:
        """See :meth:`TaskBoard.start`; the STARTED statuses are held when it returns."""
        await self._loaded()
        await self._until_logged([task_id for task_id, _ in tasks])
        skip, writes = self._board.start(tasks)
        await self._keep(writes)
        return skip

    async def finish(self, outcomes: list[tuple[str, str, Any, float | None]]) -> None:
        """See :meth:`TaskBoard.finish`; the outcomes are held when it returns."""
        await self._loaded()
        await self._until_logged([outcome[0] for outcome in outcomes])
        await self._keep(self._board.finish(outcomes))

    async def cancel(self, task_id: str) -> bool:
        """See :meth:`TaskBoard.cancel`; REVOKED is held when it returns True."""
        await self._loaded()
        await self._until_logged([task_id])
        cancelled, writes = self._board.cancel(task_id)
        await self._keep(writes)
        return cancelled

    async def read(
        self, task_id: str, board: str | None, mark: int
    ) -> tuple[tuple[str, Any, float | None], Changes]:
        """:meth:`TaskBoard.get` and the changes since the reader's mark (one call). A
        task whose outcome is on its way to the log is answered once the log holds it
        (up to ``READ_WAIT``)."""
        await self._loaded()
        writing = self._writing.get(task_id) if self._board.finishing(task_id) else None
        if writing:
            await asyncio.wait(set(writing), timeout=READ_WAIT)
        return self._board.get(task_id), self._board.changes(board, mark, CHANGES_KEPT)

    async def ready(self) -> None:
        """Answer once the task log is read back (made, for a new queue)."""
        await self._loaded()

    async def counts(self) -> dict[str, int]:
        """See :meth:`TaskBoard.counts`."""
        await self._loaded()
        return self._board.counts()

    async def destroy(self) -> None:
        """Destroy the task log (the queue is being deleted)."""
        log = await self._loaded()
        log.close()
        await asyncio.to_thread(log.topic.destroy)
