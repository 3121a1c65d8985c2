"""Ray Data without console chatter where raytopic runs it or hands it out.

Ray Data prints, for every Dataset it executes, an execution plan, a progress
report (bars at a terminal, ~8 INFO lines elsewhere) and a "finished" line: a
stream's every micro-batch, and every ``read_topic``, would fill a console.
What raytopic makes is quiet instead, and Ray Data's log file keeps it all:

- :func:`quiet_dataset` marks a Dataset raytopic returns (a ``read_topic``, a
  micro-batch's): its own ``DataContext`` (shared with the Datasets derived
  from it, not with the process's) turns the progress and the plan off, and an
  execution callback names each of its runs to the console filter, which keeps
  that run's INFO lines off the console.
- :func:`quiet_write` is a ``write_topic``: its progress off, its INFO lines and
  the warnings the write provokes off the console while it runs.

Warnings and errors of a quiet run still reach the console.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ray.data import DataContext, Dataset
from ray.data._internal.execution.execution_callback import ExecutionCallback
from ray.util.debug import log_once, reset_log_once

if TYPE_CHECKING:
    from ray.data._internal.execution.streaming_executor import StreamingExecutor

__all__ = ["quiet_dataset", "quiet_write"]

_QUIET_RUNS: set[str] = set()
"""Ids of the quiet Datasets' runs executing now (Ray Data names a run in its lines)."""

_PROVOKED_WARNINGS = {
    # Ray Data reads the cluster's free CPUs once before a write and again when
    # its tasks are done (materialize() runs its result through the same check)
    # and warns of a hang when the read says 0. The read is an instant of a
    # lagging view: just after the write tasks give their CPUs back, or with
    # Spark's executors holding the others, it says 0 while the write runs or
    # has finished. A write that really waits for CPUs still gets the raylet's
    # own warning about work that cannot be scheduled.
    "cpu_warning": "does not have any available CPUs",
    # Said once because the write turns the progress bars off.
    "ray_data_progress_manager_disabled": "Progress bars disabled",
}
"""Ray Data's warnings a write provokes that ask nothing of the user, by the
``log_once`` key each is said under and a piece of its text."""


def quiet_dataset(dataset: Dataset) -> Dataset:
    """``dataset`` (and what is derived from it), executed without console output
    but its warnings and errors; returns it."""
    context = dataset.context  # the dataset's own copy, which derived ones share
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    if _QuietRuns not in context.custom_execution_callback_classes:
        context.custom_execution_callback_classes = [
            *context.custom_execution_callback_classes,
            _QuietRuns,
        ]
    # Ray Data says once that the progress is off, as if the user had asked:
    # this run asked it, so it says nothing.
    log_once("ray_data_progress_manager_disabled")
    for handler in _console_handlers():
        if not any(isinstance(f, _QuietRunsFilter) for f in handler.filters):
            handler.addFilter(_QuietRunsFilter())
    return dataset


class _QuietRuns(ExecutionCallback):
    """Names a quiet Dataset's run to the console filter while it executes (Ray
    Data makes one of these per run, from the Dataset's context)."""

    def before_execution_starts(self, executor: StreamingExecutor) -> None:
        _QUIET_RUNS.add(executor._dataset_id)

    def after_execution_succeeds(self, executor: StreamingExecutor) -> None:
        _QUIET_RUNS.discard(executor._dataset_id)  # after its "finished" line

    def after_execution_fails(self, executor: StreamingExecutor, error: Exception) -> None:
        _QUIET_RUNS.discard(executor._dataset_id)


class _QuietRunsFilter(logging.Filter):
    """Keeps a quiet run's INFO lines (they name its id) off the console."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING or not _QUIET_RUNS:
            return True
        message = record.getMessage()
        return not any(run in message for run in tuple(_QUIET_RUNS))


@contextlib.contextmanager
def quiet_write(context: DataContext) -> Iterator[None]:
    """Ray Data without console chatter while a write runs, as it was afterwards.

    The write's progress bars are off (``context`` is the dataset's, restored
    after), and Ray Data's console handlers drop its INFO lines and the
    warnings in ``_PROVOKED_WARNINGS`` (its log file keeps them; other Ray
    Data work of this process running meanwhile is quiet too). A hidden
    warning's ``log_once`` key is reset, so Ray Data can still say it later.
    """
    console = _QuietConsole(_PROVOKED_WARNINGS)
    handlers = _console_handlers()
    progress_bars = context.enable_progress_bars
    context.enable_progress_bars = False
    for handler in handlers:
        handler.addFilter(console)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(console)
        context.enable_progress_bars = progress_bars
        for key in console.hidden:
            reset_log_once(key)


def _console_handlers() -> list[Any]:
    """Ray Data's handlers that print (its file handlers keep everything)."""
    return [
        handler
        for handler in logging.getLogger("ray.data").handlers
        if isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
    ]


class _QuietConsole(logging.Filter):
    """Lets through Ray Data's warnings and errors, except the ones given (by
    ``log_once`` key and text); remembers the keys of those it kept back."""

    def __init__(self, provoked: dict[str, str]) -> None:
        super().__init__()
        self._provoked = provoked
        self.hidden: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return False
        message = record.getMessage()
        for key, text in self._provoked.items():
            if text in message:
                self.hidden.add(key)
                return False
        return True
