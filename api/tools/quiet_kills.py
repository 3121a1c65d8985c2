"""Keep Ray's report of a worker killed on purpose off a tool's console.

The raylet reports a worker that died while it ran a task to the driver of its
job, which prints it (even with ``log_to_driver=False``): a ~1,000 character
line naming the OOM killer among the likely causes, and a line for each call
that Ray retries on the restarted actor. Both read as a crash of the tool
(``raytopic demo``, ``raytopic bench``), which says in its own words what it
kills instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import ray

__all__ = ["driver_reports_off", "worker_death_reports_off"]


def driver_reports_off() -> None:
    """Keep every report the raylet sends this driver (a worker died, many worker
    processes started) off its console from now on: for a process of raytopic's
    own whose standard output is its result, such as the CLI's."""
    ray._private.worker._worker_logs_enabled = False


@contextlib.contextmanager
def worker_death_reports_off() -> Iterator[None]:
    """Keep Ray's reports of dead workers off this process's console while the
    block runs.

    Ray has no public switch for it; this is the one Ray's own debugger
    (``ray.util.rpdb``) turns off while it holds the console. Only this
    process's printing pauses: the raylet still logs the death.
    """
    worker = ray._private.worker
    before = getattr(worker, "_worker_logs_enabled", True)
    worker._worker_logs_enabled = False
    try:
        yield
    finally:
        worker._worker_logs_enabled = before
