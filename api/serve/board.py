"""A task's statuses and record on the task log, and the order finished tasks are
forgotten in (pure; ``raytopic.serve.board_actor`` runs the forgetting).

A task's status lives on the queue's task log (a compacted topic keyed by task id),
and every change of it is a conditional write decided at the log's channel
(``ControlLog.write_unless``): a replica starts a task unless it is finished (or
cancelled), records an outcome unless one is recorded, and a producer cancels a
task unless it has started.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

__all__ = [
    "CANCEL_REFUSED",
    "FAILURE",
    "FINISHED",
    "PENDING",
    "REJECTED",
    "RETRY",
    "REVOKED",
    "STARTED",
    "SUCCESS",
    "FinishedTasks",
    "State",
    "state_of",
    "task_record",
]

# Celery's names, which Serve's TaskResult.status carries.
PENDING, STARTED, RETRY = "PENDING", "STARTED", "RETRY"
SUCCESS, FAILURE, REJECTED, REVOKED = "SUCCESS", "FAILURE", "REJECTED", "REVOKED"
FINISHED = frozenset({SUCCESS, FAILURE, REJECTED, REVOKED})
"""Statuses a task keeps: a replica that receives it again does not run it, and no
later outcome replaces it."""
CANCEL_REFUSED = FINISHED | {STARTED}
"""Statuses under which a cancel is refused: the task has started or finished."""

State = tuple[str, Any, float | None]
"""A task's (status, result, created_at)."""


def task_record(status: str, result: Any, created_at: float | None) -> dict[str, Any]:
    """What the task log keeps of a task (plain data, the result as it is); ``at``
    (wall clock: it orders records across restarts) tells a restarted board which
    finished tasks are the oldest."""
    return {"status": status, "result": result, "created_at": created_at, "at": time.time()}


def state_of(record: dict[str, Any] | None) -> State:
    """(status, result, created_at) of a task's record; PENDING for none (an id not
    seen, as Celery answers)."""
    if record is None:
        return PENDING, None, None
    return record["status"], record["result"], record["created_at"]


class FinishedTasks:
    """The finished tasks of a queue, oldest first, kept at most ``kept``: the rest are
    to be forgotten (their records deleted from the task log).

    Args:
        kept: Finished tasks kept at most.
    """

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._tasks: OrderedDict[str, None] = OrderedDict()

    def restore(self, records: dict[str, dict[str, Any]]) -> None:
        """Take what the task log holds (the finished tasks, oldest change first).

        Cancelled tasks are left out: one may still wait in the queue, and forgotten
        it would run; a replica that passes it over tells it again. (One passed over
        before this restart and not yet forgotten stays on the log.)"""
        finished = [
            item
            for item in records.items()
            if item[1]["status"] in FINISHED and item[1]["status"] != REVOKED
        ]
        for task_id, _ in sorted(finished, key=lambda item: item[1]["at"]):
            self._tasks[task_id] = None

    def finished(self, tasks: list[str]) -> list[str]:
        """Count these tasks finished (a task told twice counts once); return the
        oldest to forget beyond ``kept``."""
        for task_id in tasks:
            self._tasks.setdefault(task_id, None)
        over = max(0, len(self._tasks) - self._kept)
        return [self._tasks.popitem(last=False)[0] for _ in range(over)]
