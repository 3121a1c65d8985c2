"""The test cluster's log folder is kept short: the files of processes that are gone,
once untouched for a while, go to ``logs/old``; a failed test's report reads raytopic's
lines from it (``tests/session_logs.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.session_logs import UNTOUCHED_FOR, ActorsOf, raytopic_log_lines, tidy_logs


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


def _stamped(at: float) -> str:
    """A log line's time stamp (local time, milliseconds), as the actors write it."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) + f",{int(at % 1 * 1000):03d}"


def test_raytopic_lines_in_the_window_are_read_from_logs_and_old_after_their_actor(
    tmp_path: Path,
) -> None:
    (tmp_path / "old").mkdir()
    start = float(int(time.time()))
    coordinator = f"{_stamped(start + 1.5)} INFO raytopic.coordinator.group_service: moved"
    member = f"{_stamped(start + 1.25)} WARNING raytopic.autoscale.scaled_member: late"
    (tmp_path / "worker-0a-01000000-1.err").write_text(
        ":job_id:01000000\n:actor_name:CoordinatorActor\n"
        f"{coordinator}\n"
        f"{_stamped(start + 1.6)} INFO ray.serve: not raytopic's\n"
        f"{_stamped(start + 9)} INFO raytopic.coordinator.group_service: after the test\n"
    )
    (tmp_path / "old" / "worker-0b-01000000-2.err").write_text(
        f":actor_name:ScaledMemberActor\n{member}\n"
    )
    (tmp_path / "raylet.err").write_text(f"{_stamped(start + 1)} INFO raytopic.x: no worker\n")

    assert raytopic_log_lines(tmp_path, start + 1, start + 2).lines == [
        f"ScaledMemberActor: {member}",
        f"CoordinatorActor: {coordinator}",
    ]
    assert raytopic_log_lines(tmp_path, start + 1, start + 2, most=1).lines == [
        f"CoordinatorActor: {coordinator}"
    ]


def test_a_failed_test_reads_the_lines_of_its_topics_and_its_drivers_actors_only(
    tmp_path: Path,
) -> None:
    start = float(int(time.time()))
    lines = {}
    # Actors named after their topics (their repr), made by this driver (job 01) or by
    # the other worker's (02); the last one's name is its class's (it did not start).
    for index, (job, actor) in enumerate(
        [
            ("01000000", "ChannelActor(topic='orders-1a2b3c4d', channel=0)"),
            ("02000000", "CoordinatorActor(topic='orders-1a2b3c4d-dlq')"),
            ("02000000", "ChannelActor(topic='other-5e6f7a8b', channel=1)"),
            ("01000000", "ChannelActor(topic='kept-for-the-module', channel=0)"),
            ("02000000", "ScaledMemberActor"),
        ]
    ):
        lines[actor] = f"{_stamped(start + 1 + index / 10)} INFO raytopic.actors.x: {index}"
        (tmp_path / f"worker-{index}-{job}-{index}.err").write_text(
            f":job_id:{job}\n:actor_name:{actor.split('(')[0]}\n:actor_name:{actor}\n"
            f"{lines[actor]}\n"
        )
    mine = ActorsOf(("orders-1a2b3c4d",), "01000000")

    found = raytopic_log_lines(tmp_path, start + 1, start + 2, of=mine)

    # Its topics' (a name made from one too, whichever driver made it) and its driver's.
    kept = [actor for actor in lines if "other" not in actor and "Scaled" not in actor]
    assert found.lines == [f"{actor}: {lines[actor]}" for actor in kept]
    assert found.left_out == 2
    # A test with no driver of its own reads every actor's.
    assert len(raytopic_log_lines(tmp_path, start + 1, start + 2, of=ActorsOf()).lines) == 5
