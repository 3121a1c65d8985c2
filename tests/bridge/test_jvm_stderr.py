"""Spark's driver JVM's standard error without Ray core's INFO lines: a process
started inside ``ray_core_info_left_out`` writes through the filter after the
block, and only Ray core's INFO lines are left out. Checked on what a real child
process writes to the standard error it inherited, as Spark's JVM does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from raytopic.bridge.jvm_stderr import RAY_CORE_INFO

CHILD_WRITES_LATER = r"""
import subprocess, sys
from raytopic.bridge.jvm_stderr import ray_core_info_left_out

lines = [
    "[2026-11-29 04:22:18,317 I 17322 17515] gcs_client.cc:96: GcsClient has no Cluster ID set.",
    "[2026-11-29 04:22:18,318 W 17322 17515] core_worker.cc:1: a warning stays",
    "WARN SparkContext: a JVM line stays",
]
script = "import sys, time; time.sleep(0.5); sys.stderr.write(%r); sys.stderr.flush()" % (
    "\n".join(lines) + "\n"
)
with ray_core_info_left_out():
    child = subprocess.Popen([sys.executable, "-c", script])
print("this process's own line", file=sys.stderr, flush=True)  # after the block: direct
child.wait()
"""


def test_a_child_started_in_the_block_loses_only_ray_cores_info_lines() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD_WRITES_LATER],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "this process's own line" in lines
    assert [line for line in lines if "stays" in line] == [
        "[2026-11-29 04:22:18,318 W 17322 17515] core_worker.cc:1: a warning stays",
        "WARN SparkContext: a JVM line stays",
    ]
    assert "gcs_client" not in done.stderr


def test_the_pattern_matches_ray_cores_info_lines_only() -> None:
    assert RAY_CORE_INFO.match(b"[2026-11-29 04:25:47,481 I 3104 3298] gcs_client.cc:96: x\n")
    assert not RAY_CORE_INFO.match(b"[2026-11-29 04:25:47,481 W 3104 3298] gcs_client.cc:96: x\n")
    assert not RAY_CORE_INFO.match(b"[2026-11-29 04:25:47,481 E 3104 3298] x\n")
    assert not RAY_CORE_INFO.match(b"a line [2026-11-29 04:25:47,481 I 3104 3298] x\n")


CHILD_WRITES_BEFORE_AND_AFTER_SILENCE = r"""
import pathlib, subprocess, sys, time
from raytopic.bridge.jvm_stderr import ray_core_info_left_out

seen, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
script = (
    "import pathlib, sys, time\n"
    "print('ERROR a line before the stop', file=sys.stderr, flush=True)\n"
    "while not pathlib.Path(%r).exists(): time.sleep(0.01)\n"
    "print('ERROR a line of the stop', file=sys.stderr, flush=True)\n"
) % str(go)
with ray_core_info_left_out() as stderr:
    child = subprocess.Popen([sys.executable, "-c", script])
while "a line before the stop" not in seen.read_text():  # copied to the real stderr
    time.sleep(0.01)
stderr.silence()
go.touch()
child.wait()
print("this process's own line", file=sys.stderr, flush=True)
"""


def test_a_silenced_filter_leaves_out_every_line_the_child_writes_after(tmp_path: Path) -> None:
    # What a quiet Spark session's stop relies on (spark_session._silence_the_stop):
    # the driver JVM, a child started in the block, is heard until the filter is
    # silenced and not after; the process's own standard error is untouched.
    seen = tmp_path / "stderr.txt"
    with seen.open("w") as real_stderr:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                CHILD_WRITES_BEFORE_AND_AFTER_SILENCE,
                str(seen),
                str(tmp_path / "go"),
            ],
            stderr=real_stderr,
            timeout=60,
            check=False,
        )
    lines = seen.read_text().splitlines()
    assert done.returncode == 0, lines
    assert lines == ["ERROR a line before the stop", "this process's own line"]
