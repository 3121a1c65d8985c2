"""What a producer knows of a queue's finished tasks (pure): the statuses and results a
task board's ``changes`` brought, so a status read of a finished task is answered
without a call (a finished status stays until ``results_kept`` forgets it, and each
read that asks the board brings the forgettings since the last one)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from raytopic.serve.board import CHANGES_KEPT, Changes

__all__ = ["KnownStatuses"]


class KnownStatuses:
    """The newest finished tasks a reader heard of (at most ``CHANGES_KEPT`` or
    ``kept``), and its mark in the board's changes. Thread-safe.

    Args:
        kept: The queue's ``results_kept``.
    """

    def __init__(self, kept: int) -> None:
        self._most = min(kept, CHANGES_KEPT)
        self._known: OrderedDict[str, tuple[str, Any, float | None]] = OrderedDict()
        self._board: str | None = None
        self._mark = 0
        self._lock = threading.Lock()

    @property
    def mark(self) -> tuple[str | None, int]:
        """(board id, mark) to ask the board's changes since."""
        with self._lock:
            return self._board, self._mark

    def get(self, task_id: str) -> tuple[str, Any, float | None] | None:
        """The task's (status, result, created_at) if it is known finished, else None."""
        with self._lock:
            return self._known.get(task_id)

    def learn(self, changes: Changes) -> None:
        """Take what the board's ``changes`` brought (older replies change nothing)."""
        board, mark, reset, changed = changes
        with self._lock:
            if board == self._board and mark <= self._mark:
                return  # a reply overtaken by a newer one
            if reset:
                self._known.clear()
            self._board, self._mark = board, mark
            for task_id, record in changed:
                self._known.pop(task_id, None)
                if record is not None:
                    self._known[task_id] = record
            while len(self._known) > self._most:
                self._known.popitem(last=False)
