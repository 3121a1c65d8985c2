"""The test cluster's log folder is kept short: the files of processes that are gone,
once untouched for a while, go to ``logs/old`` (``tests/session_logs.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.session_logs import UNTOUCHED_FOR, tidy_logs


def _waited() -> int:
    """The pid of a process that has ended."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _file(folder: Path, name: str, age: float) -> Path:
    path = folder / name
    path.write_text("a line\n")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_only_the_untouched_files_of_processes_that_are_gone_move_to_old(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    gone, alive = _waited(), os.getpid()
    untouched = UNTOUCHED_FOR + 5
    moved = [
        _file(tmp_path, f"python-core-worker-0a1b_{gone}.log", untouched),
        _file(tmp_path, f"python-core-driver-0a1b_{gone}.log", untouched),
        _file(tmp_path, f"worker-0a1b-01000000-{gone}.out", untouched),
        _file(tmp_path, f"worker-0a1b-ffffffff-{gone}.err", untouched),
    ]
    kept = [
        _file(tmp_path, f"python-core-worker-0a1b_{alive}.log", untouched),  # still running
        _file(tmp_path, f"worker-0a1b-01000000-{alive}.out", untouched),
        _file(tmp_path, f"worker-0a1b-01000000-{gone}.err", 1.0),  # its last lines may be unread
        _file(tmp_path, "raylet.err", untouched),  # not a worker's or a driver's
        _file(tmp_path, "gcs_server.out", untouched),
    ]

    assert tidy_logs(tmp_path, time.time()) == len(moved)

    assert sorted(path.name for path in (tmp_path / "old").iterdir()) == sorted(
        path.name for path in moved
    )
    assert all(path.exists() for path in kept)


def test_a_folder_without_old_is_left_as_it_is(tmp_path: Path) -> None:
    path = _file(tmp_path, f"python-core-worker-0a1b_{_waited()}.log", UNTOUCHED_FOR + 5)

    assert tidy_logs(tmp_path, time.time()) == 0
    assert path.exists()
