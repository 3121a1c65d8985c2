"""Spark's driver JVM's standard error, without the INFO lines of Ray's core.

RayDP's Spark driver JVM (started by this process, its child) joins Ray as a Java
driver. Before Ray's logging is set up in it, Ray's core prints INFO lines
("GcsClient has no Cluster ID set") straight to the standard error the JVM
inherited: log4j, which quiets Spark's own lines, does not see them. While the JVM
starts, this process's standard error is a pipe; a thread copies what comes
through it to the real standard error, leaving out Ray core's INFO lines only
(its warnings and errors, and every other line, pass). The JVM keeps the pipe for
its life; this process gets its own standard error back as soon as the JVM runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator

__all__ = ["RAY_CORE_INFO", "ray_core_info_left_out"]

RAY_CORE_INFO = re.compile(rb"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} I \d+ \d+\] ")
"""A line Ray's core logs at INFO: ``[2026-11-29 04:22:18,317 I 17322 17515] ...``."""


@contextlib.contextmanager
def ray_core_info_left_out() -> Iterator[None]:
    """While the block runs, standard error (file descriptor 2) goes through a
    filter that leaves out Ray core's INFO lines; a process started in the block
    keeps writing through that filter after it ends."""
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    target = os.dup(2)  # the real standard error, for the copier (closed at the pipe's end)
    copier = threading.Thread(
        target=_copy_lines, args=(read_end, target), name="raytopic-jvm-stderr", daemon=True
    )
    copier.start()
    os.dup2(write_end, 2)
    os.close(write_end)  # the pipe ends once every process that holds fd 2 of the block has
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(target, 2)


def _copy_lines(read_end: int, target: int) -> None:
    """Copy lines from ``read_end`` to ``target`` until the pipe ends, but Ray core's
    INFO lines."""
    with os.fdopen(read_end, "rb") as pipe:
        for line in pipe:
            if not RAY_CORE_INFO.match(line):
                os.write(target, line)
    os.close(target)
