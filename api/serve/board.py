"""A task's statuses and record on the task log, and the order finished tasks are
forgotten in (pure; ``raytopic.serve.board_actor`` runs the forgetting).

A task's status lives on the queue's task log (a compacted topic keyed by task id),
and every change of it is a conditional write decided at the log's channel
(``ControlLog.write_unless``): a replica starts a task unless it is finished (or
cancelled), records an outcome unless one is recorded, and a producer cancels a
task unless it has started.

The board learns of finished tasks from the log itself (whoever wrote them: a replica
SIGKILLed right after its ack too), never from a replica's word alone. A finished task
may still come back: its outcome was written and its replica died (or stalled) before
its ack. A replica passes it over by its record, so a record is forgotten only once
the task cannot come back: the outcome names the queue element it is of (its
``element``: channel and sequence in the queue), and the board holds the task back
until the queue's group acknowledged that element (:class:`TaskBook`).
"""

from __future__ import annotations

import heapq
import time
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
    "State",
    "TaskBook",
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


class TaskBook:
    """What the task log says of a queue's finished tasks, and which to forget: at most
    ``kept`` counted, the oldest (by their record's ``at``) forgotten first.

    The board feeds it each task log change it reads (:meth:`seen`; the whole log after
    a restart, :meth:`reloaded`): a finished record names the queue element it is the
    outcome of, and the task is *held back* until that element is acknowledged (the
    queue group's floor passed it, :meth:`floors`, or a replica's ack of it was
    answered, :meth:`acked`): before, the element may be delivered again, and a replica
    finding no record would run the task again. Then it counts. A cancelled task's
    REVOKED record names no element until a replica passes its element over (it may
    still wait in the queue): not counted till then.

    Idempotent: a record seen again (a reread, a late change) counts once, and a task
    forgotten is never counted again unless the log shows it finished anew.

    Args:
        kept: Finished tasks kept at most.
    """

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._held: dict[str, tuple[tuple[int, int], float]] = {}  # task: (element, at)
        self._counted: dict[str, float] = {}  # task: its record's "at"
        self._order: list[tuple[float, str]] = []  # heap of (at, task); stale ones skipped
        # Forgotten, the delete not seen on the log yet: the "at" of the record forgotten
        # (a record of another "at" is a new run under the id: the delete went through).
        self._forgetting: dict[str, float] = {}

    def seen(self, changed: list[tuple[str, dict[str, Any] | None]]) -> None:
        """Take these (task, latest record or None: deleted) from the task log."""
        for task_id, record in changed:
            if record is None:
                self._forgetting.pop(task_id, None)
                self._drop(task_id)
            elif self._forgetting.get(task_id) != record["at"]:
                # A read brings a key's latest record only: a task given again under a
                # forgotten id hides the delete, which is then done (never sent again,
                # or it would delete the new run's record).
                self._forgetting.pop(task_id, None)
                self._take(task_id, record)

    def reloaded(self, records: dict[str, dict[str, Any]]) -> None:
        """Take the whole task log (after a restart, or a reader too far behind): a task
        it no longer holds is dropped."""
        for task_id in [*self._held, *self._counted, *self._forgetting]:
            if task_id not in records:
                self._forgetting.pop(task_id, None)
                self._drop(task_id)
        self.seen(list(records.items()))

    @property
    def held_back(self) -> dict[int, int]:
        """Per queue channel, the highest element held back there (its floor is asked)."""
        highest: dict[int, int] = {}
        for (channel, sequence), _ in self._held.values():
            highest[channel] = max(sequence, highest.get(channel, sequence))
        return highest

    def floors(self, floors: dict[int, int]) -> None:
        """Count the held-back tasks at or below their channel's group floor (every
        element at or below it acknowledged)."""
        self._release(
            [
                task_id
                for task_id, ((channel, sequence), _) in self._held.items()
                if channel in floors and sequence <= floors[channel]
            ]
        )

    def acked(self, elements: set[tuple[int, int]]) -> None:
        """Count the held-back tasks of these elements (their acks were answered ACKED)."""
        self._release([task for task, (element, _) in self._held.items() if element in elements])

    def forget(self) -> list[str]:
        """The oldest counted tasks past ``kept``, now being forgotten (their deletes to
        send; sent again until the log shows them deleted)."""
        while len(self._counted) > self._kept:
            at, task_id = heapq.heappop(self._order)
            if self._counted.get(task_id) == at:
                del self._counted[task_id]
                self._forgetting[task_id] = at
        return sorted(self._forgetting)

    def _take(self, task_id: str, record: dict[str, Any]) -> None:
        status, at, element = record["status"], record["at"], record.get("element")
        if status not in FINISHED or (status == REVOKED and element is None):
            self._drop(task_id)  # not finished (again: a new run under its id)
        elif task_id in self._counted or task_id in self._held:
            return  # a finished record does not change
        elif element is None:  # written before records named their element: as acked
            self._count(task_id, at)
        else:
            self._held[task_id] = ((int(element[0]), int(element[1])), at)

    def _release(self, task_ids: list[str]) -> None:
        for task_id in task_ids:
            _, at = self._held.pop(task_id)
            self._count(task_id, at)

    def _count(self, task_id: str, at: float) -> None:
        self._counted[task_id] = at
        heapq.heappush(self._order, (at, task_id))

    def _drop(self, task_id: str) -> None:
        self._held.pop(task_id, None)
        self._counted.pop(task_id, None)  # its heap entry goes stale
