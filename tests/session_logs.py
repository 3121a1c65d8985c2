"""The test cluster's log folder: kept short while the run goes on, and read for what
raytopic's actors logged during a test that failed (:func:`raytopic_log_lines`).

Ray's log monitor (one per node) globs the session's ``logs`` folder ten times a
second and looks at the size of every worker output file it tracks. Every worker
process leaves files there: its core worker log (``python-core-worker-*.log``,
which the monitor never reads and never moves) and its ``worker-*.out``/``.err``
(which the monitor moves to ``logs/old`` only if it happens to close them after the
worker died). A run starts thousands of worker processes (a topic is an actor per
channel and a coordinator), so the folder grows through the run and so does the
monitor's work: 3,000 files left there cost it 8% of a core (0.5% with the folder
fresh), for the rest of the run. :class:`LogTidier` moves the files of processes
that are gone into ``logs/old``, as the monitor itself does with the files it
closes; it leaves a file alone until it has been untouched for a while, so that
the monitor has forwarded its last lines to the drivers first.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import psutil

__all__ = [
    "LogTidier",
    "Logged",
    "ActorsOf",
    "raytopic_log_lines",
    "tidy_logs",
    "worker_output_lines",
]

TIDY_INTERVAL = 5.0
"""Seconds between two tidyings of the folder."""

UNTOUCHED_FOR = 10.0
"""Seconds a dead process's file stays untouched before it is moved: the log monitor
reads a file within 0.1 s of its growing, so by then it has forwarded every line."""

_PROCESS_LOG = re.compile(
    r"python-core-(?:worker|driver)-\w+_(?P<core>\d+)\.log"
    r"|worker-\w+-\w+-(?P<output>\d+)\.(?:out|err)"
)
"""A process's own log file in the session's ``logs`` folder, and its pid."""


def tidy_logs(logs: Path, now: float) -> int:
    """Move into ``logs/old`` the files of processes that are gone and that nobody
    wrote to for :data:`UNTOUCHED_FOR` seconds before ``now`` (``time.time()``);
    returns how many were moved."""
    old = logs / "old"
    if not old.is_dir():
        return 0
    moved = 0
    for path in logs.iterdir():
        named = _PROCESS_LOG.fullmatch(path.name)
        if named is None or psutil.pid_exists(int(named["core"] or named["output"])):
            continue
        with contextlib.suppress(FileNotFoundError):  # moved meanwhile by the monitor
            if now - path.stat().st_mtime > UNTOUCHED_FOR:
                path.rename(old / path.name)
                moved += 1
    return moved


class LogTidier:
    """Tidies the cluster's ``logs`` folder every :data:`TIDY_INTERVAL` seconds in a
    thread of its own, from :meth:`start` until :meth:`stop`.

    Args:
        logs: The cluster's ``logs`` folder (it may not exist yet).
    """

    def __init__(self, logs: Path) -> None:
        self._logs = logs
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tidy-ray-logs", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(TIDY_INTERVAL):
            with contextlib.suppress(OSError):  # the folder not made yet, or going
                tidy_logs(self._logs, time.time())


RAYTOPIC_LOG_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) raytopic\."
)
"""A log line of raytopic's own loggers, as its actors write them (local time)."""


def worker_output_lines(logs: Path, pattern: str = "worker-*") -> Iterator[tuple[Path, str]]:
    """Each line of the worker output files matching ``pattern`` in the ``logs`` folder
    and its ``old`` (where :class:`LogTidier` and the monitor move ended workers'
    files: a file may move, or go, between the listing and the reading), with its file."""
    for path in [*logs.glob(pattern), *logs.glob(f"old/{pattern}")]:
        with contextlib.suppress(OSError), path.open(errors="replace") as lines:
            for line in lines:
                yield path, line


_ACTOR_TOPIC = re.compile(r"\btopic=(?P<topic>'[^']*')")
"""The topic an actor's name (its repr) names:
``ChannelActor(topic='orders-1a2b3c4d', channel=0)``."""


@dataclass(frozen=True)
class ActorsOf:
    """Which actors' lines a failed test's report shows: those of the topics named by
    the test's names (``unique_name``'s, or a name made from one), and the others its
    own driver (Ray job) made; not those of the tests the other xdist worker runs
    meanwhile, which misled readers of a failure into another test's lost channel.

    Args:
        names: The names the test made.
        job: Its driver's Ray job id (hex), None if it has none (then every actor).
    """

    names: tuple[str, ...] = ()
    job: str | None = None

    def own(self, actor: str, job: str | None) -> bool:
        """Whether the lines of ``actor`` (its name), of Ray job ``job``, are the test's."""
        topic = _ACTOR_TOPIC.search(actor)
        if topic is not None and any(name in topic["topic"] for name in self.names):
            return True
        return self.job is None or job == self.job


class Logged(NamedTuple):
    """What :func:`raytopic_log_lines` found."""

    lines: list[str]
    """The test's actors' lines, each after its actor's name, in time order."""
    left_out: int
    """Lines in the window of actors that are not the test's."""


def raytopic_log_lines(
    logs: Path, start: float, stop: float, most: int = 200, of: ActorsOf = ActorsOf()
) -> Logged:
    """raytopic's log lines in the actors' stderr files of the ``logs`` folder (and of
    its ``old``, where ended workers' files go) stamped between ``start`` and ``stop``
    (epoch seconds) by the actors ``of`` a test, each after its actor's name, in time
    order; the last ``most``."""
    found: list[tuple[str, str]] = []
    left_out = 0
    actors: dict[Path, str] = {}
    jobs: dict[Path, str] = {}
    for path, line in worker_output_lines(logs, "worker-*.err"):
        if line.startswith(":actor_name:"):
            actors[path] = line.removeprefix(":actor_name:").strip()
        elif line.startswith(":job_id:"):
            jobs[path] = line.removeprefix(":job_id:").strip()
        elif (match := RAYTOPIC_LOG_LINE.match(line)) is not None:
            stamp = time.mktime(time.strptime(match[1][:19], "%Y-%m-%d %H:%M:%S"))
            if not start <= stamp + int(match[1][20:]) / 1000 <= stop:
                continue
            actor = actors.get(path, "?")
            if of.own(actor, jobs.get(path)):
                found.append((match[1], f"{actor}: {line.rstrip()}"))
            else:
                left_out += 1
    return Logged([line for _, line in sorted(found)[-most:]], left_out)
