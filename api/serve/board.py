"""A task's statuses and record on the task log, and the order finished tasks are
forgotten in (pure; ``raytopic.serve.board_actor`` runs the forgetting).

A task's status lives on the queue's task log (a compacted topic keyed by task id),
and every change of it is a conditional write decided at the log's channel
(``ControlLog.write_unless``): a replica starts a task unless it is finished (or
cancelled), records an outcome unless one is recorded, and a producer cancels a
task unless it has started.

A finished task may still come back: its outcome was written and its replica died
(or stalled) before its ack. A replica passes it over by its record, so a record is
forgotten only once the task cannot come back: a replica tells the board after the
ack, and a board that restarts holds back what it reads from the log until the
queue's group has acknowledged the task's element (its ``element``: channel and
sequence in the queue).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

__all__ = [
    "CANCEL_REFUSED",
    "CONSUMER_GROUP",
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

CONSUMER_GROUP = "serve-consumers"
"""The shared group the replicas of a queue read it as."""

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


def task_record(
    status: str, result: Any, created_at: float | None, element: Any = None
) -> dict[str, Any]:
    """What the task log keeps of a task (plain data, the result as it is); ``at``
    (wall clock: it orders records across restarts) tells a restarted board which
    finished tasks are the oldest, and ``element`` (the queue's element the outcome is
    of, as ``[channel, sequence]``; None: none) when the task can no longer come back.
    """
    return {
        "status": status,
        "result": result,
        "created_at": created_at,
        "at": time.time(),
        "element": None if element is None else [element.channel, element.sequence],
    }


def state_of(record: dict[str, Any] | None) -> State:
    """(status, result, created_at) of a task's record; PENDING for none (an id not
    seen, as Celery answers)."""
    if record is None:
        return PENDING, None, None
    return record["status"], record["result"], record["created_at"]


class FinishedTasks:
    """The finished tasks of a queue, oldest first, kept at most ``kept``: the rest are
    to be forgotten (their records deleted from the task log).

    A task counts once it cannot come back to a replica: told (a replica's ack of it
    was answered), or, read back from the log by a restarted board, once the queue's
    group acknowledged its element (:meth:`acknowledged`). Until then it is held back, never
    forgotten: its element may be delivered again (its replica died or stalled before
    the ack), and a replica finding no record would run it again.

    Args:
        kept: Finished tasks kept at most.
    """

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._tasks: OrderedDict[str, None] = OrderedDict()
        self._held_back: dict[str, tuple[int, int]] = {}
        self._restored: dict[str, float] = {}  # what the log held at the restart: its "at"

    def restore(self, records: dict[str, dict[str, Any]]) -> None:
        """Take what the task log holds (the finished tasks, oldest change first),
        those whose element may still come back held back (see :meth:`acknowledged`).

        Cancelled tasks are left out: one may still wait in the queue, and forgotten
        it would run; a replica that passes it over tells it again. (One passed over
        before this restart and not yet forgotten stays on the log.)"""
        finished = [
            item
            for item in records.items()
            if item[1]["status"] in FINISHED and item[1]["status"] != REVOKED
        ]
        for task_id, record in sorted(finished, key=lambda item: item[1]["at"]):
            self._restored[task_id] = record["at"]
            element = record.get("element")  # none in records written before it was kept
            if element is None:
                self._tasks[task_id] = None
            else:
                self._held_back[task_id] = (int(element[0]), int(element[1]))

    @property
    def held_back_channels(self) -> frozenset[int]:
        """The queue channels whose group floor :meth:`acknowledged` needs."""
        return frozenset(channel for channel, _ in self._held_back.values())

    def acknowledged(self, floors: dict[int, int]) -> None:
        """Count the held-back tasks whose element the queue's group acknowledged:
        ``floors`` maps a queue channel to the group's floor there (every element at
        or below it acknowledged). They take their place among the tasks read back, which
        are older than any told since."""
        self._count_restored(
            [
                task_id
                for task_id, (channel, sequence) in self._held_back.items()
                if channel in floors and sequence <= floors[channel]
            ]
        )

    def _count_restored(self, acked: list[str]) -> None:
        """Count these held-back tasks, in their place among those read back."""
        if not acked:
            return
        for task_id in acked:
            del self._held_back[task_id]
        restored = sorted(
            [*acked, *(task for task in self._tasks if task in self._restored)],
            key=self._restored.__getitem__,
        )
        told = [task for task in self._tasks if task not in self._restored]
        self._tasks = OrderedDict.fromkeys([*restored, *told])

    def finished(self, tasks: list[str]) -> list[str]:
        """Count these tasks finished (a task told twice counts once); return the
        oldest to forget beyond ``kept`` (held-back tasks are kept besides: newer
        results are not forgotten for older ones that cannot be yet)."""
        self._count_restored([task for task in dict.fromkeys(tasks) if task in self._held_back])
        for task_id in tasks:
            self._tasks.setdefault(task_id, None)
        over = max(0, len(self._tasks) - self._kept)
        forgotten = [self._tasks.popitem(last=False)[0] for _ in range(over)]
        for task_id in forgotten:
            self._restored.pop(task_id, None)
        return forgotten
