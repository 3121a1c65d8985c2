"""The task board: status and result of a queue's tasks by id (pure; the adapter runs it
as a small detached Ray actor per queue)."""

from __future__ import annotations

import uuid
from collections import Counter, OrderedDict, deque
from itertools import islice
from typing import Any

__all__ = [
    "FAILURE",
    "FINISHED",
    "PENDING",
    "REJECTED",
    "RETRY",
    "REVOKED",
    "STARTED",
    "SUCCESS",
    "Changes",
    "TaskBoard",
]

# Celery's names, which Serve's TaskResult.status carries.
PENDING, STARTED, RETRY = "PENDING", "STARTED", "RETRY"
SUCCESS, FAILURE, REJECTED, REVOKED = "SUCCESS", "FAILURE", "REJECTED", "REVOKED"
FINISHED = frozenset({SUCCESS, FAILURE, REJECTED, REVOKED})
"""Statuses a task keeps: a replica that receives it again does not run it."""

CHANGES_KEPT = 10_000
"""Finishes and forgettings a board remembers for readers catching up."""

Changes = tuple[str, int, bool, list[tuple[str, tuple[str, Any, float | None] | None]]]
"""What changed since a reader's mark: (board id, the mark now, whether the reader
must drop what it knows first, [(task id, (status, result, created_at) of a finished
task, or None: forgotten)])."""


class TaskBoard:
    """Status, result and creation time of a queue's tasks by id.

    A replica tells the board which tasks it is about to run (``start``: it
    learns which of them not to run, finished or cancelled already) and how they
    ended (``finish``); producers read it (``get``) and cancel through it.

    Args:
        kept: Finished tasks kept at most (the oldest finished go first).
    """

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._tasks: OrderedDict[str, tuple[str, Any, float | None]] = OrderedDict()
        self._finished = 0
        self._id = uuid.uuid4().hex  # a reader's marks hold for this board only
        self._changed: deque[str] = deque(maxlen=CHANGES_KEPT)  # ids finished or forgotten
        self._changes = 0  # ever appended to _changed

    def start(self, tasks: list[tuple[str, float | None]]) -> list[str]:
        """Mark (id, created_at) tasks STARTED; return the ids not to run: those
        finished already (a task delivered again after its replica died between
        recording its outcome and acknowledging it) or cancelled."""
        skip = []
        for task_id, created in tasks:
            known = self._tasks.get(task_id)
            if known is not None and known[0] in FINISHED:
                skip.append(task_id)
            else:
                self._tasks[task_id] = (STARTED, None, created)
        return skip

    def finish(self, outcomes: list[tuple[str, str, Any, float | None]]) -> list[str]:
        """Record (id, status, result, created_at) outcomes; a finished status stays.
        Returns the ids forgotten to keep ``kept``."""
        for task_id, status, result, created in outcomes:
            known = self._tasks.get(task_id)
            if known is not None and known[0] in FINISHED:
                continue  # a task delivered again after a crash may report twice
            self._finished += status in FINISHED
            self._tasks[task_id] = (status, result, created)
            self._tasks.move_to_end(task_id)
            if status in FINISHED:
                self._change(task_id)
        return self._forget_oldest()

    def cancel(self, task_id: str) -> tuple[bool, list[str]]:
        """Cancel a task not yet started (no replica runs it: REVOKED); False if it
        has started or finished (True again for one cancelled). Also returns the ids
        forgotten to keep ``kept``."""
        known = self._tasks.get(task_id)
        if known is not None and known[0] == REVOKED:
            return True, []  # cancelled already (a call Ray retried after a restart)
        if known is not None and (known[0] == STARTED or known[0] in FINISHED):
            return False, []
        self._tasks[task_id] = (REVOKED, None, known[2] if known else None)
        self._tasks.move_to_end(task_id)
        self._finished += 1
        self._change(task_id)
        return True, self._forget_oldest()

    def record(self, task_id: str) -> dict[str, Any]:
        """What the queue's task log keeps of a task (plain data, the result as it is)."""
        status, result, created = self._tasks[task_id]
        return {"status": status, "result": result, "created_at": created}

    def restore(self, records: list[tuple[str, dict[str, Any]]]) -> None:
        """Take back what the task log kept, oldest change first."""
        for task_id, record in records:
            status = record["status"]
            self._finished += status in FINISHED
            self._tasks[task_id] = (status, record["result"], record["created_at"])

    def get(self, task_id: str) -> tuple[str, Any, float | None]:
        """(status, result, created_at); PENDING for an id not seen (as Celery answers)."""
        return self._tasks.get(task_id, (PENDING, None, None))

    def changes(self, board: str | None, mark: int, most: int) -> Changes:
        """The tasks finished or forgotten since ``mark`` of board ``board`` (a reader's
        last :meth:`changes`; None: never), at most ``most`` (the newest). A finished
        status stays until forgotten, so a reader may answer for these tasks itself
        until it asks again. It must drop what it knows first when its mark is of
        another board (this one restarted) or older than what the board remembers."""
        oldest = self._changes - len(self._changed)
        reset = board != self._id or not oldest <= mark <= self._changes
        since = max(oldest if reset else mark, self._changes - most)
        reset = reset or since > mark
        ids = list(dict.fromkeys(islice(self._changed, since - oldest, None)))
        finished = [(task_id, self._tasks.get(task_id)) for task_id in ids]
        return (
            self._id,
            self._changes,
            reset,
            [
                (task_id, known if known is not None and known[0] in FINISHED else None)
                for task_id, known in finished
            ],
        )

    def counts(self) -> dict[str, int]:
        """Tasks by status (those kept)."""
        return dict(Counter(status for status, _, _ in self._tasks.values()))

    def _forget_oldest(self) -> list[str]:
        forgotten = []
        for task_id in list(self._tasks):
            if self._finished <= self._kept:
                break
            if self._tasks[task_id][0] in FINISHED:
                del self._tasks[task_id]
                self._finished -= 1
                forgotten.append(task_id)
                self._change(task_id)
        return forgotten

    def _change(self, task_id: str) -> None:
        self._changed.append(task_id)
        self._changes += 1
