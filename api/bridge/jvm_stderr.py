"""Spark's driver JVM's standard error, without the INFO lines of Ray's core.

RayDP's Spark driver JVM (started by this process, its child) joins Ray as a Java
driver. Before Ray's logging is set up in it, Ray's core prints INFO lines
("GcsClient has no Cluster ID set") straight to the standard error the JVM
inherited: log4j, which quiets Spark's own lines, does not see them. While the JVM
starts, this process's standard error is a pipe; a thread copies what comes
through it to the real standard error, leaving out Ray core's INFO lines only
(its warnings and errors, and every other line, pass). The JVM keeps the pipe for
its life; this process gets its own standard error back as soon as the JVM runs.
The filter can be told to leave out everything from then on (:meth:`JvmStderr.silence`),
for a JVM whose Spark raytopic stops itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator

__all__ = ["RAY_CORE_INFO", "JvmStderr", "ray_core_info_left_out"]

RAY_CORE_INFO = re.compile(rb"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} I \d+ \d+\] ")
"""A line Ray's core logs at INFO: ``[2026-11-29 04:22:18,317 I 17322 17515] ...``."""


class JvmStderr:
    """The filter the standard error of the processes started in a
    :func:`ray_core_info_left_out` block goes through."""

    def __init__(self) -> None:
        self._silenced = threading.Event()

    def silence(self) -> None:
        """Leave out every line read from now on, not only Ray core's INFO lines."""
        self._silenced.set()

    def passes(self, line: bytes) -> bool:
        """Whether ``line`` reaches the real standard error."""
        return not self._silenced.is_set() and not RAY_CORE_INFO.match(line)


@contextlib.contextmanager
def ray_core_info_left_out() -> Iterator[JvmStderr]:
    """While the block runs, standard error (file descriptor 2) goes through a
    filter that leaves out Ray core's INFO lines; a process started in the block
    keeps writing through that filter after it ends. Yields the filter."""
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    target = os.dup(2)  # the real standard error, for the copier (closed at the pipe's end)
    stderr = JvmStderr()
    copier = threading.Thread(
        target=_copy_lines,
        args=(read_end, target, stderr),
        name="raytopic-jvm-stderr",
        daemon=True,
    )
    copier.start()
    os.dup2(write_end, 2)
    os.close(write_end)  # the pipe ends once every process that holds fd 2 of the block has
    try:
        yield stderr
    finally:
        sys.stderr.flush()
        os.dup2(target, 2)


def _copy_lines(read_end: int, target: int, stderr: JvmStderr) -> None:
    """Copy the lines from ``read_end`` that pass ``stderr`` to ``target``, until the
    pipe ends."""
    with os.fdopen(read_end, "rb") as pipe:
        for line in pipe:
            if stderr.passes(line):
                os.write(target, line)
    os.close(target)
