"""raytopic.client.cluster: addresses, tokens, and the probe, against real sockets and real
``ray start --head`` clusters with and without token authentication.

The programs asked here (the probe, the ``raytopic`` command, an example) run as
a user's would: in a process without the test session's Ray settings
(RAY_AUTH_MODE=token above all, which users do not have). The token cluster is
the session's own (``ray start --head`` with token authentication, which takes
this session's token and nothing else); the cluster without authentication is
this module's own (own port, own temp dir, stopped by pid).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray

import raytopic as rt
from raytopic.client.cluster import (
    Answer,
    ClusterAuthError,
    ClusterUnreachableError,
    GcsReply,
    enable_token_for_ray_address,
    parse_address,
    probe_gcs,
    resolve_address,
    sends_token,
    token_source,
)
from raytopic.core.errors import InvalidArgumentError

from tests.conftest import RAY_CLI, _free_port, _stop_cluster

# Under pytest -n (xdist), every test of this module runs in one worker, which makes
# its module-scoped `ray start` heads once.
pytestmark = pytest.mark.xdist_group("test_cluster")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# -- addresses ---------------------------------------------------------------


@pytest.mark.parametrize("text", ["127.0.0.1:6379", "head-node:1", "[::1]:65535"])
def test_a_host_and_port_is_an_address(text: str) -> None:
    assert parse_address(text) == text


@pytest.mark.parametrize(
    "text",
    ["garbage", "127.0.0.1", ":6379", "127.0.0.1:", "h:0", "h:65536", "h:x1", "h:1 ", "h:²", ""],
)
def test_anything_else_is_refused_naming_the_expected_form(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="RAY_ADDRESS: expected HOST:PORT"):
        parse_address(text, source="RAY_ADDRESS")


def test_auto_is_ray_address_else_the_cluster_ray_start_left(tmp_path: Path) -> None:
    assert resolve_address("10.0.0.1:6379", {}) == "10.0.0.1:6379"
    assert resolve_address("auto", {"RAY_ADDRESS": "h:1"}) == "h:1"
    with pytest.raises(InvalidArgumentError, match="RAY_ADDRESS"):
        resolve_address("auto", {"RAY_ADDRESS": "garbage"})
    with pytest.raises(ClusterUnreachableError, match="ray start --head"):
        resolve_address("auto", {"RAY_TMPDIR": str(tmp_path)})
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("127.0.0.1:7000\n")
    assert resolve_address("auto", {"RAY_TMPDIR": str(tmp_path)}) == "127.0.0.1:7000"
    assert resolve_address("auto", {"RAY_TMPDIR": str(tmp_path), "RAY_ADDRESS": "auto"}) == (
        "127.0.0.1:7000"
    )


# -- tokens ------------------------------------------------------------------


def test_the_token_source_follows_rays_precedence(tmp_path: Path) -> None:
    home = tmp_path
    assert token_source({}, home) is None
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text("t")
    assert token_source({}, home) == str(home / ".ray" / "auth_token")
    path_env = {"RAY_AUTH_TOKEN_PATH": "/x/token"}
    assert token_source(path_env, home) == "RAY_AUTH_TOKEN_PATH (/x/token)"
    assert token_source({**path_env, "RAY_AUTH_TOKEN": "t"}, home) == "RAY_AUTH_TOKEN"
    assert token_source({"RAY_AUTH_TOKEN": ""}, home) == str(home / ".ray" / "auth_token")


ACCEPTED = GcsReply(Answer.ACCEPTED)
REFUSED = GcsReply(Answer.UNAUTHENTICATED, "InvalidAuthToken")


def _decide(mode: str | None, without: GcsReply, with_token: GcsReply | None) -> bool:
    source = None if with_token is None else "RAY_AUTH_TOKEN"
    return sends_token("h:1", mode=mode, without=without, with_token=with_token, source=source)


def test_the_token_is_sent_only_to_a_cluster_that_asks_for_it_and_takes_it() -> None:
    assert _decide(None, REFUSED, ACCEPTED) is True
    assert _decide("token", REFUSED, ACCEPTED) is True
    # A cluster without token authentication: never token mode (its actors would die).
    assert _decide(None, ACCEPTED, None) is False
    assert _decide("disabled", ACCEPTED, None) is False


@pytest.mark.parametrize(
    ("mode", "without", "with_token", "words"),
    [
        (None, REFUSED, REFUSED, "refused the token from RAY_AUTH_TOKEN"),
        ("token", REFUSED, REFUSED, "refused the token"),
        (None, REFUSED, None, "this machine has none"),
        ("disabled", REFUSED, ACCEPTED, "RAY_AUTH_MODE=disabled is set here"),
        ("token", ACCEPTED, None, "does not use token authentication"),
    ],
)
def test_a_refusal_says_what_failed_and_how_to_fix_it(
    mode: str | None, without: GcsReply, with_token: GcsReply | None, words: str
) -> None:
    with pytest.raises(ClusterAuthError, match=words) as raised:
        _decide(mode, without, with_token)
    message = str(raised.value)
    assert "\n" not in message
    assert "ray get-auth-token" in message or "unset RAY_AUTH_MODE" in message


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (Answer.SILENT, "nothing answered within 5 s"),
        (Answer.UNREACHABLE, "no Ray cluster answers at h:1: Connection refused"),
        (Answer.NOT_RAY, "something else does"),
    ],
)
def test_no_answer_is_no_cluster(answer: Answer, words: str) -> None:
    with pytest.raises(ClusterUnreachableError, match=words):
        _decide(None, GcsReply(answer, "Connection refused"), None)


# -- the probe on loopback ---------------------------------------------------


def test_a_closed_port_is_unreachable_at_once() -> None:
    port = _free_port()  # bound and closed again: nothing listens there
    started = time.monotonic()
    reply = probe_gcs(f"127.0.0.1:{port}", timeout=5)
    assert reply.answer is Answer.UNREACHABLE
    assert time.monotonic() - started < 2


def test_a_host_that_never_answers_is_silent_after_the_timeout() -> None:
    # A listening socket that never accepts stands in for a silent host: the
    # kernel completes the handshake, and nothing ever speaks.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        started = time.monotonic()
        reply = probe_gcs(f"127.0.0.1:{silent.getsockname()[1]}", timeout=0.5)
    assert reply.answer is Answer.SILENT
    assert 0.4 < time.monotonic() - started < 3


def _probes_made(silent: socket.socket) -> int:
    """Connections the listening socket has taken since the last look."""
    silent.setblocking(False)
    made = 0
    with suppress(BlockingIOError):
        while True:
            silent.accept()[0].close()
            made += 1
    return made


@ray.remote(num_cpus=0)
def _enable_token_in_a_worker(address: str) -> str | None:
    """``import raytopic``'s token step in a Ray worker, with RAY_ADDRESS naming
    ``address`` and RAY_AUTH_MODE unset (what a driver needs to probe); the
    worker's own settings are restored afterwards."""
    saved = {name: os.environ.get(name) for name in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    os.environ["RAY_ADDRESS"] = address
    os.environ.pop("RAY_AUTH_MODE", None)
    try:
        assert token_source() is not None  # the worker has the session's token
        enable_token_for_ray_address()
        return os.environ.get("RAY_AUTH_MODE")
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def test_import_raytopic_in_a_ray_worker_leaves_rays_settings_and_the_network_alone(
    ray_session: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The channels and the coordinator are Ray workers that import raytopic: its
    # token step must neither probe RAY_ADDRESS from there nor switch Ray's mode.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        assert ray.get(_enable_token_in_a_worker.remote(address)) is None
        assert _probes_made(silent) == 0
        # A driver (this process) with the same settings probes (and the silent
        # cluster is left for ray.init to report).
        monkeypatch.setenv("RAY_ADDRESS", address)
        monkeypatch.delenv("RAY_AUTH_MODE")
        enable_token_for_ray_address()
        assert _probes_made(silent) >= 1
        assert "RAY_AUTH_MODE" not in os.environ


# -- real clusters started with `ray start --head` ------------------------------


@dataclass(frozen=True)
class Head:
    """A cluster of this module's own."""

    address: str
    token: str
    """Its token ("" when it has no token authentication)."""


def _user_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: none of the test session's Ray settings
    (RAY_AUTH_MODE above all), loopback only."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY")}
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray here stays on loopback
    return {**env, **extra}


@dataclass(frozen=True)
class _Starting:
    """A head that ``ray start --head --block`` is starting (or runs) in the background."""

    process: subprocess.Popen[bytes]
    head: Head
    temp: Path
    """Its temp dir (its files, its log)."""

    def ready(self) -> Head:
        """The head, once Ray says it started."""
        log = self.temp / "ray-start.log"
        deadline = time.monotonic() + 90
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed:\n{log.read_text(errors='replace')}")
            time.sleep(0.2)
        return self.head

    def stop(self) -> None:
        """Stop exactly its processes; remove its files."""
        _stop_cluster(self.process, self.head.address)
        shutil.rmtree(self.temp, ignore_errors=True)


def _start_head(*, auth: bool) -> _Starting:
    """Start a head with or without token authentication (not waiting for it)."""
    token = secrets.token_hex(32)
    port = _free_port()
    temp = Path(tempfile.mkdtemp(prefix="rt-auth-", dir="/tmp"))  # short: Ray's socket paths
    # With a token and RAY_AUTH_MODE unset, `ray start` turns token authentication on
    # by itself, as on a machine where ~/.ray/auth_token exists.
    env = _user_env(RAY_AUTH_TOKEN=token) if auth else _user_env(RAY_AUTH_MODE="disabled")
    process = subprocess.Popen(
        [
            *RAY_CLI,
            "start",
            "--head",
            "--block",
            f"--port={port}",
            f"--temp-dir={temp}",  # its ray_current_cluster goes there, not /tmp/ray
            "--num-cpus=1",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        env=env,
        stdout=(temp / "ray-start.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return _Starting(process, Head(f"127.0.0.1:{port}", token if auth else ""), temp)


@contextmanager
def _head(*, auth: bool) -> Iterator[Head]:
    """A head with or without token authentication, stopped afterwards."""
    starting = _start_head(auth=auth)
    try:
        yield starting.ready()
    finally:
        starting.stop()


@pytest.fixture(scope="module")
def open_head() -> Iterator[_Starting]:
    """A cluster without token authentication, starting: its start takes seconds,
    which the tests before the one that waits for it (``ready()``) run in."""
    starting = _start_head(auth=False)
    try:
        yield starting
    finally:
        starting.stop()


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _session_token() -> str | None:
    """The token this test process has, where Ray looks for it (in Ray's order)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"]
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token"
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


@pytest.fixture(scope="module")
def token_head(ray_cluster: str, open_head: _Starting) -> Iterator[Head]:
    """A cluster with token authentication, as `ray start --head` makes one: the
    session's (a cluster more costs seconds to start), or one of this module's own
    when the session's (given by RAY_ADDRESS) does not ask for this process's token.

    The cluster without authentication starts with it, so that it boots while the
    token tests run."""
    token = _session_token()
    if (
        token
        and probe_gcs(ray_cluster).answer is Answer.UNAUTHENTICATED
        and probe_gcs(ray_cluster, token_header=_bearer(token)).answer is Answer.ACCEPTED
    ):
        yield Head(ray_cluster, token)
        return
    with _head(auth=True) as head:
        yield head


def _run(*command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command), env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _start(*command: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        list(command), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish(process: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    try:
        stdout, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return _run(sys.executable, "-m", "raytopic.cli", *args, env=env)


@pytest.mark.slow
def test_the_probe_tells_a_token_cluster_which_token_it_takes(token_head: Head) -> None:
    right = _bearer(token_head.token)
    wrong = _bearer(secrets.token_hex(32))
    assert probe_gcs(token_head.address).answer is Answer.UNAUTHENTICATED
    assert probe_gcs(token_head.address, token_header=wrong).answer is Answer.UNAUTHENTICATED
    assert probe_gcs(token_head.address, token_header=right).answer is Answer.ACCEPTED


@pytest.mark.slow
def test_the_cli_sends_the_token_from_the_users_home(
    token_head: Head, tmp_path: Path, ray_cluster: str, ray_session: None
) -> None:
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text(token_head.token)
    env = _user_env(HOME=str(tmp_path))
    where = ["--address", token_head.address, "--namespace", f"auth-{uuid.uuid4().hex[:8]}"]

    try:
        created = _cli("create", "authed", "--channels", "1", *where, env=env)
        listed = _cli("list", *where, env=env)
    finally:
        if token_head.address == ray_cluster:  # the session's: leave nothing behind
            with suppress(rt.TopicNotFoundError):
                rt.get_topic("authed", namespace=where[-1]).destroy()

    assert created.returncode == 0, created.stderr
    assert "InvalidAuthToken" not in created.stderr
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["authed"]


@pytest.mark.slow
def test_a_refused_token_is_one_line_and_exit_1_at_once(token_head: Head) -> None:
    env = _user_env(RAY_AUTH_TOKEN=secrets.token_hex(32))
    started = time.monotonic()
    refused = _cli("list", "--address", token_head.address, env=env)
    took = time.monotonic() - started

    assert refused.returncode == 1
    lines = refused.stderr.splitlines()
    assert len(lines) == 1, refused.stderr
    for words in ("authentication failed", "refused the token from RAY_AUTH_TOKEN", "get-auth"):
        assert words in lines[0]
    assert took < 15  # Ray alone retries for 20 s; this is Python's start-up and one probe


@pytest.mark.slow
def test_an_example_reaches_a_token_cluster_through_ray_address(token_head: Head) -> None:
    # The examples call ray.init(address=RAY_ADDRESS), for which Ray sends no token
    # unless RAY_AUTH_MODE=token: `import raytopic` turns it on for this cluster.
    env = _user_env(RAY_ADDRESS=token_head.address, RAY_AUTH_TOKEN=token_head.token)
    done = _run(sys.executable, str(EXAMPLES / "ring_buffer.py"), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "read_many: ['item-3', 'item-4', 'item-5', 'item-6', 'item-7'] next 8" in done.stdout


@pytest.mark.slow
def test_a_token_on_this_machine_does_not_break_a_cluster_without_auth(
    open_head: _Starting,
) -> None:
    # Token mode here against a cluster without it would lose the example's actors:
    # a token available must leave such a cluster alone.
    head = open_head.ready()
    env = _user_env(RAY_ADDRESS=head.address, RAY_AUTH_TOKEN=secrets.token_hex(32))
    # The example and the command at once: each is a process of its own.
    example = _start(sys.executable, str(EXAMPLES / "ring_buffer.py"), env=env)
    command = _start(
        sys.executable, "-m", "raytopic.cli", "list", "--address", head.address, env=env
    )
    done, listed = _finish(example), _finish(command)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "next 8" in done.stdout
    assert listed.returncode == 0, listed.stderr
