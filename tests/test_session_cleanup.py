"""The test session leaves the machine as it found it: after its Ray is stopped, a
user's next ``ray.init()`` starts a local Ray at once instead of trying to join
the dead session cluster (``ray start`` leaves a ``ray_current_cluster`` pointer
in Ray's temp dir), and no file of its own is left in the machine's temp dir (its
control logs are removed with its cluster)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_FRESH_INIT = """
import time
started = time.monotonic()
import ray
ray.init(include_dashboard=False, num_cpus=1)
print("STARTED", ray.get_runtime_context().gcs_address, round(time.monotonic() - started, 1))
ray.shutdown()
"""


def _orphaned_ray_processes(under: Path) -> set[tuple[int, str]]:
    """Ray processes whose parent is gone (adopted by init) and that hold a file under
    ``under`` (their session's logs): ``(pid, title)``. Their command line cannot
    tell whose they are (a retitled process overwrites it), and an orphan of another
    Ray on the machine, ending as this check runs, is not this session's."""
    import psutil

    orphans = set()
    for process in psutil.process_iter(["pid", "ppid", "name", "cmdline"]):
        if process.info["ppid"] != 1:
            continue
        if not " ".join(process.info["cmdline"] or ()).startswith("ray::"):
            continue
        if _holds_a_file_under(process.info["pid"], under):
            orphans.add((process.info["pid"], process.info["name"]))
    return orphans


def _holds_a_file_under(pid: int, under: Path) -> bool:
    """Whether ``pid`` has a file under ``under`` open, deleted since or not (psutil's
    ``open_files`` leaves deleted ones out, and the session removes its dir)."""
    fds = Path(f"/proc/{pid}/fd")
    with contextlib.suppress(OSError):
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd).startswith(f"{under}/"):
                    return True
    return False


def _orphans_left(under: Path, grace: float) -> set[tuple[int, str]]:
    """Orphaned Ray processes of the Ray under ``under`` still alive ``grace`` seconds
    on: a worker that was starting when its raylet was killed exits by itself soon
    after; a missed agent lived on for minutes."""
    deadline = time.monotonic() + grace
    while (left := _orphaned_ray_processes(under)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def _bytecode_caches(temp_dir: Path) -> set[Path]:
    """The bytecode caches of test sessions in ``temp_dir`` (``tests/conftest.py``)."""
    return set(temp_dir.glob("raytopic-pyc-*"))


@pytest.fixture
def ray_tmpdir() -> Iterator[Path]:
    """A short temp dir for Ray's files (its socket paths must fit 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="rt-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# One xdist work unit with the other tests that start a Ray of their own
# (test_multinode, test_spark_session's demo, test_session_cleanup): one such
# cluster at a time, none stopping (its workers orphaned for a moment) while
# test_session_cleanup counts orphaned Ray processes; and, as xdist hands out
# groups first (the larger first), among the run's first units, not at its end,
# where a long single test kept one worker busy while the other had nothing left.
@pytest.mark.xdist_group("own_ray")
@pytest.mark.slow
@pytest.mark.timeout(900)  # a nested session: minutes under a full run's load (see below)
def test_after_a_session_a_fresh_ray_init_starts_a_local_ray_at_once(ray_tmpdir: Path) -> None:
    # A whole (one-test) session, in Ray's temp dir of its own.
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("RAY_ADDRESS", "PYTEST_CURRENT_TEST")
    }
    env["RAY_TMPDIR"] = str(ray_tmpdir)
    # Its temp files there too: the machine's temp dir also holds the caches of other
    # sessions, which may start meanwhile (one did, and failed the check below).
    env["TMPDIR"] = str(ray_tmpdir)
    # As on CI: Python writes no bytecode, so the session keeps a cache of its own.
    env.pop("PYTHONPYCACHEPREFIX", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # One xdist worker: the suite's own path (the controller starts the cluster and
    # stops it at the end), without a second worker (a process importing Ray,
    # Hypothesis and raytopic) that a run of one test leaves idle.
    session = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "1",
            # A transaction: its registry keeps its state in a control log, stored in
            # the machine's temp dir (here ray_tmpdir) under the session's name.
            "tests/transaction/test_transactions.py::test_abort_drops_staged_and_frees_their_room",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a nested session compiles Ray's modules afresh (see conftest)
        check=False,
    )
    assert session.returncode == 0, session.stdout[-3000:] + session.stderr[-3000:]
    assert not (ray_tmpdir / "ray" / "ray_current_cluster").exists()
    # The session's control logs are removed with it (the folder that held them stays).
    assert (ray_tmpdir / "raytopic-control").is_dir()
    assert list((ray_tmpdir / "raytopic-control").iterdir()) == []
    # Its bytecode cache is removed.
    assert _bytecode_caches(ray_tmpdir) == set()
    # No process of its head is left (the agents retitle themselves "ray::...": one
    # missed outlived the run by minutes, at a tenth of a core).
    assert _orphans_left(ray_tmpdir, grace=10.0) == set()

    fresh = subprocess.run(
        [sys.executable, "-c", _FRESH_INIT],
        env={**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert fresh.returncode == 0, fresh.stdout[-3000:] + fresh.stderr[-3000:]
    started = next(line for line in fresh.stdout.splitlines() if line.startswith("STARTED"))
    seconds = float(started.split()[-1])
    # A dead pointer makes it join instead and fail (checked: ValueError "num_cpus
    # ... must not be provided" in 2 s), which the returncode catches; the bound
    # catches a start kept waiting. A fresh start took 3 s quiet, 33 s beside a
    # full run's load.
    assert seconds < 60, started
