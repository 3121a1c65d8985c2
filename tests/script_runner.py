"""One interpreter that runs scripts one after another, each as ``python script.py``
(or ``python -c code``) would, as a driver of the session's cluster: the docs' and
the README's blocks and the example scripts (``tests/markdown_blocks.py``,
``tests/test_examples.py``).

A fresh interpreter per script cost each one Python's start, Ray's and raytopic's
imports, a driver's connection and new worker processes for its tasks (a job's
workers serve that job only): 2 to 3 s of a 2-core machine each, more than many a
script's own work. Here the first script's ``ray.init()`` connects and the others
find Ray initialised (their ``ray.init()`` calls keep the connection, as
``ignore_reinit_error=True`` does). Each script still runs as its own
``__main__`` in its working directory, its output captured at the file
descriptors (Ray's lines too), and it fails as it would alone: an exception or a
non-zero exit gives its traceback and exit status, and a thread it leaves running
that is no daemon (which would keep its interpreter from exiting) fails it. A
script that starts a Ray of its own needs an interpreter of its own: its caller
runs it apart.

The test process's side is ``ScriptRunner``; ``python tests/script_runner.py`` is
the interpreter's side: it reads one JSON request a line on stdin and answers each
with one JSON line on its stdout (its file descriptor 1 as it started; the scripts'
output goes elsewhere).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

LEFT_THREAD_GRACE = 10.0
"""How long a script's threads that are no daemons may take to end after it returned."""


@dataclass(frozen=True)
class Run:
    """How a script ended, as ``subprocess.run`` would tell it."""

    returncode: int
    stdout: str
    stderr: str


class RunnerTimeout(Exception):
    """The script did not end in time (the interpreter running it was killed)."""

    def __init__(self, timeout: float, stderr: str) -> None:
        """``stderr``: what the script wrote there before it was killed."""
        super().__init__(f"still running after {timeout} s")
        self.timeout, self.stderr = timeout, stderr


class ScriptRunner:
    """The test process's handle on one script-running interpreter, started on the
    first ``run`` and again after one was killed or died."""

    def __init__(self, env: dict[str, str]) -> None:
        self._env = env
        self._process: subprocess.Popen[bytes] | None = None
        self._buffer = b""

    def run(self, *, cwd: Path, timeout: float, code: str = "", path: Path | None = None) -> Run:
        """Run ``path`` (as ``python path``) or ``code`` (as ``python -c code``) in
        ``cwd``; raise ``RunnerTimeout`` if it has not ended after ``timeout`` s."""
        process = self._started()
        with tempfile.TemporaryDirectory(prefix="raytopic-run-") as output:
            stdout, stderr = Path(output, "stdout"), Path(output, "stderr")
            request = {
                "code": code,
                "path": str(path) if path else None,
                "cwd": str(cwd),
                "stdout": str(stdout),
                "stderr": str(stderr),
            }
            assert process.stdin is not None
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
            returncode = self._answer(timeout)
            if returncode is None:
                raise RunnerTimeout(timeout, _text(stderr))
            if returncode != 0 and self._process is not None:
                self._kill()  # what a failed script left behind reaches no other script
            return Run(returncode, _text(stdout), _text(stderr))

    def close(self) -> None:
        """Stop the interpreter (it disconnects from Ray as any driver exits)."""
        process, self._process = self._process, None
        if process is not None:
            assert process.stdin is not None
            process.stdin.close()  # its loop ends at the end of its input
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self.close()
        self._buffer = b""
        self._process = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,  # the answers (its scripts' output goes to files)
            env=self._env,
            cwd=tempfile.gettempdir(),
        )
        return self._process

    def _answer(self, timeout: float) -> int | None:
        """The script's exit status (the interpreter's, if it died running it), or
        None if it did not end in time (the interpreter is killed)."""
        process = self._process
        assert process is not None and process.stdout is not None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    self._kill()
                    return None
                chunk = os.read(process.stdout.fileno(), 1 << 16)
                if not chunk:  # it died running the script (os._exit, a crash)
                    self._kill()
                    return process.returncode or 1
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return int(json.loads(line)["returncode"])

    def _kill(self) -> None:
        process = self._process
        assert process is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
        self.close()


def run_apart(
    code: str, ray_cluster: str, cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as ``python -c`` in a fresh interpreter of its own, a driver of the
    cluster at ``ray_cluster``, in ``cwd``: a script that starts a Ray or a Spark of its
    own, or whose output is the point (it must be a user's process, whole)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**os.environ, "RAY_ADDRESS": ray_cluster},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


# The interpreter's side.


def _serve() -> None:
    """Run each request's script, its output in the files the request names, and
    answer with its exit status."""
    import threading

    _keep_ray_initialised()  # (an import error here is told on its stderr, the test's)
    answers = os.fdopen(os.dup(1), "w")
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)  # between scripts, output reaches neither the answers nor a script's
    os.dup2(quiet, 2)
    home = os.getcwd()
    for line in sys.stdin:
        request = json.loads(line)
        threads_before = set(threading.enumerate())
        with open(request["stdout"], "wb") as out, open(request["stderr"], "wb") as err:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            try:
                returncode = _run_one(request)
                left = _threads_left(threads_before)
                if left and returncode == 0:
                    names = ", ".join(sorted(thread.name for thread in left))
                    print(f"a thread that is no daemon is still running: {names}", file=sys.stderr)
                    returncode = 1
            finally:
                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(Exception):
                        stream.flush()
                os.dup2(quiet, 1)
                os.dup2(quiet, 2)
                os.chdir(home)
        answers.write(json.dumps({"returncode": returncode}) + "\n")
        answers.flush()


def _keep_ray_initialised() -> None:
    """A script's ``ray.init()`` after the first keeps the first's connection."""
    import functools

    import ray

    first_init = ray.init

    @functools.wraps(first_init)
    def init(*args: object, **kwargs: object) -> object:
        if ray.is_initialized():
            kwargs["ignore_reinit_error"] = True
        return first_init(*args, **kwargs)

    ray.init = init


def _run_one(request: dict) -> int:
    """Run the script as ``python`` would, as ``__main__`` with its directory (or,
    for code, the working directory) first on ``sys.path``: its exit status."""
    import builtins
    import gc
    import linecache
    import runpy
    import traceback

    os.chdir(request["cwd"])
    path = request["path"]
    sys.argv = [path] if path else ["-c"]
    sys.path[0] = os.path.dirname(path) if path else ""
    try:
        if path:
            runpy.run_path(path, run_name="__main__")
        else:
            code, name = request["code"], "<string>"
            linecache.cache[name] = (len(code), None, code.splitlines(True), name)
            exec(compile(code, name, "exec"), {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit as ended:
        if ended.code is None or isinstance(ended.code, int):
            return ended.code or 0
        print(ended.code, file=sys.stderr)
        return 1
    except BaseException as error:  # told from the script's frames on, as python tells it
        traceback.print_exception(error, value=error, tb=error.__traceback__.tb_next)
        return 1
    finally:
        gc.collect()  # what the script's end frees is freed, and told, in its run
    return 0


def _threads_left(before: set) -> list:
    """The script's threads that are no daemons still running after a grace."""
    import threading

    deadline = time.monotonic() + LEFT_THREAD_GRACE
    left = [thread for thread in threading.enumerate() if thread not in before]
    left = [thread for thread in left if not thread.daemon]
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [thread for thread in left if thread.is_alive()]


if __name__ == "__main__":
    _serve()
