"""The task board: status and result of a queue's tasks by id (pure; the adapter runs it
as a small detached Ray actor per queue)."""

from __future__ import annotations

import uuid
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
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
    "State",
    "TaskBoard",
    "Writes",
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


State = tuple[str, Any, float | None]
"""A task's (status, result, created_at)."""


@dataclass(frozen=True, slots=True)
class Writes:
    """What a change of the board must write to the task log before it shows: the
    tasks whose record changed, and those forgotten (their records deleted)."""

    changed: list[str]
    forgotten: list[str]

    @property
    def tasks(self) -> list[str]:
        """Every task the writes are about."""
        return [*self.changed, *self.forgotten]


class TaskBoard:
    """Status, result and creation time of a queue's tasks by id.

    A replica tells the board which tasks it is about to run (``start``: it
    learns which of them not to run, finished or cancelled already) and how they
    ended (``finish``); producers read it (``get``) and cancel through it.

    A change decides at once (the next change sees it) but shows to readers (``get``,
    ``changes``) only once :meth:`held`: its writes are on the task log, so no reader
    sees a status that a restart could take back. A change whose writes failed is
    taken back (:meth:`undo`).

    Args:
        kept: Finished tasks kept at most (the oldest finished go first).
    """

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._tasks: OrderedDict[str, State] = OrderedDict()
        self._finished = 0
        self._unheld: dict[str, tuple[int, State | None]] = {}  # writes on their way, shown
        self._id = uuid.uuid4().hex  # a reader's marks hold for this board only
        self._changed: deque[str] = deque(maxlen=CHANGES_KEPT)  # ids finished or forgotten
        self._changes = 0  # ever appended to _changed

    def start(self, tasks: list[tuple[str, float | None]]) -> tuple[list[str], Writes]:
        """Mark (id, created_at) tasks STARTED; return the ids not to run: those
        finished already (a task delivered again after its replica died between
        recording its outcome and acknowledging it) or cancelled, and the writes."""
        skip, changed = [], []
        for task_id, created in tasks:
            known = self._tasks.get(task_id)
            if known is not None and known[0] in FINISHED:
                skip.append(task_id)
            else:
                self._put(task_id, (STARTED, None, created))
                changed.append(task_id)
        return skip, self._writing(Writes(changed, []))

    def finish(self, outcomes: list[tuple[str, str, Any, float | None]]) -> Writes:
        """Record (id, status, result, created_at) outcomes; a finished status stays.
        The writes delete the ids forgotten to keep ``kept``."""
        changed = []
        for task_id, status, result, created in outcomes:
            known = self._tasks.get(task_id)
            if known is not None and known[0] in FINISHED:
                continue  # a task delivered again after a crash may report twice
            self._put(task_id, (status, result, created))
            changed.append(task_id)
        return self._forget_oldest(changed)

    def cancel(self, task_id: str) -> tuple[bool, Writes]:
        """Cancel a task not yet started (no replica runs it: REVOKED); False if it
        has started or finished (True again for one cancelled); and the writes."""
        known = self._tasks.get(task_id)
        if known is not None and known[0] == REVOKED:
            return True, Writes([], [])  # cancelled already (a call Ray retried)
        if known is not None and (known[0] == STARTED or known[0] in FINISHED):
            return False, Writes([], [])
        self._put(task_id, (REVOKED, None, known[2] if known else None))
        return True, self._forget_oldest([task_id])

    def held(self, writes: Writes) -> None:
        """The writes are on the task log: their changes show."""
        for task_id in self._count_held(writes):
            known = self._tasks.get(task_id)
            if known is None or known[0] in FINISHED:
                self._changed.append(task_id)  # finished or forgotten: readers hear of it
                self._changes += 1

    def undo(self, writes: Writes) -> None:
        """The writes failed: take their changes back (to what readers were shown)."""
        shown = {task_id: self._shown(task_id) for task_id in writes.tasks}
        for task_id in self._count_held(writes):
            self._set(task_id, shown[task_id])

    def finishing(self, task_id: str) -> bool:
        """Whether the task's outcome is decided but not yet held (on its way to the log)."""
        known = self._tasks.get(task_id)
        return task_id in self._unheld and known is not None and known[0] in FINISHED

    def unheld(self, tasks: list[str]) -> bool:
        """Whether a change of any of these tasks is not yet held."""
        return any(task_id in self._unheld for task_id in tasks)

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

    def get(self, task_id: str) -> State:
        """(status, result, created_at) as held; PENDING for an id not seen (as Celery
        answers)."""
        return self._shown(task_id) or (PENDING, None, None)

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
        finished = [(task_id, self._shown(task_id)) for task_id in ids]
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

    def _forget_oldest(self, changed: list[str]) -> Writes:
        # The oldest finished first, found lazily: not a walk over every task kept per call.
        finished = (task_id for task_id, state in self._tasks.items() if state[0] in FINISHED)
        forgotten = list(islice(finished, max(0, self._finished - self._kept)))
        for task_id in forgotten:
            self._put(task_id, None)
        return self._writing(
            Writes([task_id for task_id in changed if task_id in self._tasks], forgotten)
        )

    def _put(self, task_id: str, state: State | None) -> None:
        """Decide the task's state (None: forget it); readers see it once held."""
        if task_id not in self._unheld:
            self._unheld[task_id] = (0, self._tasks.get(task_id))
        self._set(task_id, state)

    def _writing(self, writes: Writes) -> Writes:
        """Count ``writes`` on their way (each task once), and return them."""
        for task_id in dict.fromkeys(writes.tasks):
            count, shown = self._unheld[task_id]
            self._unheld[task_id] = (count + 1, shown)
        return writes

    def _set(self, task_id: str, state: State | None) -> None:
        known = self._tasks.pop(task_id, None)
        self._finished -= known is not None and known[0] in FINISHED
        if state is not None:
            self._tasks[task_id] = state  # the newest change last: forgotten last
            self._finished += state[0] in FINISHED

    def _shown(self, task_id: str) -> State | None:
        """What readers see of the task: its state as last held."""
        unheld = self._unheld.get(task_id)
        return unheld[1] if unheld is not None else self._tasks.get(task_id)

    def _count_held(self, writes: Writes) -> list[str]:
        """Count the writes as done; return the tasks with none left on their way."""
        done = []
        for task_id in dict.fromkeys(writes.tasks):
            count, shown = self._unheld[task_id]
            if count > 1:
                self._unheld[task_id] = (count - 1, shown)
            else:
                del self._unheld[task_id]
                done.append(task_id)
        return done
