"""What a producer knows of a queue's finished tasks (pure): the records a status read
of the task log brought (the tasks changed since the last read), so a status read of
a finished task is answered without a call (a finished status stays until
``results_kept`` forgets it, and each read brings the forgettings since the last)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from raytopic.client.control_log import LatestRead
from raytopic.serve.board import FINISHED

__all__ = ["CHANGES_READ", "KnownStatuses"]

CHANGES_READ = 10_000
"""Changed tasks a status read brings at most."""


class KnownStatuses:
    """The newest finished tasks' records a reader heard of (at most ``CHANGES_READ``
    or ``kept``), and its marks in the task log's changes. Thread-safe.

    Args:
        kept: The queue's ``results_kept``.
    """

    def __init__(self, kept: int) -> None:
        self._most = min(kept, CHANGES_READ)
        self._known: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._marks: dict[int, tuple[str, int]] = {}
        self._lock = threading.Lock()

    @property
    def marks(self) -> dict[int, tuple[str, int]]:
        """Per channel of the log, the mark to read the changes since."""
        with self._lock:
            return dict(self._marks)

    def get(self, task_id: str) -> dict[str, Any] | None:
        """The task's record if it is known finished, else None."""
        with self._lock:
            return self._known.get(task_id)

    def learn(self, read: LatestRead) -> None:
        """Take what a read brought (a reply overtaken by a newer one changes nothing)."""
        with self._lock:
            if not read.reset and any(
                channel in self._marks
                and mark[0] == self._marks[channel][0]
                and mark[1] <= self._marks[channel][1]
                for channel, mark in read.marks.items()
            ):
                return
            if read.reset:
                self._known.clear()
            self._marks.update(read.marks)
            for task_id, record in read.changed:
                self._known.pop(task_id, None)
                if record is not None and record["status"] in FINISHED:
                    self._known[task_id] = record
            while len(self._known) > self._most:
                self._known.popitem(last=False)
