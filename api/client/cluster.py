"""Reaching a running Ray cluster: its address, and the token it may ask for.

Ray 2.60 sends the cluster's token only from a process in token mode
(``RAY_AUTH_MODE=token``), and turns that mode on by itself only when it finds
the cluster on its own (``ray.init()`` or ``address="auto"``), never for an
explicit ``host:port``. Yet ``ray start`` turns token authentication on as soon
as this machine has a token (``~/.ray/auth_token`` is written by the first local
``ray.init()``), so ``ray.init(address="127.0.0.1:6379")`` is refused, retried
for 20 s, and reported as no cluster at all.

The mode cannot simply be turned on whenever a token exists: a driver in token
mode on a cluster without token authentication loses its actors (checked with
Ray 2.60). So one gRPC call to the cluster's GCS, ``GetClusterId`` (the first
call every Ray driver makes), sent without and then with the token, tells in
milliseconds whether anything answers there, whether it asks for a token and
whether it takes this one; token mode is turned on only for a cluster that
asks for it, and every other outcome is one clear error instead of Ray's
minute of retries.

Example:
    >>> from raytopic.client.cluster import prepare, resolve_address
    >>> address = resolve_address("auto")  # RAY_ADDRESS, else the `ray start` cluster
    >>> prepare(address)  # raises ClusterUnreachableError / ClusterAuthError
    >>> ray.init(address=address)
"""

from __future__ import annotations

import enum
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from raytopic.core.errors import InvalidArgumentError, TopicError

__all__ = [
    "AUTH_MODE",
    "PROBE_TIMEOUT",
    "Answer",
    "ClusterAuthError",
    "ClusterUnreachableError",
    "GcsReply",
    "enable_token_for_ray_address",
    "parse_address",
    "prepare",
    "probe_gcs",
    "resolve_address",
    "sends_token",
    "token_source",
]

logger = logging.getLogger(__name__)

AUTH_MODE = "RAY_AUTH_MODE"
"""Ray's switch: ``token`` sends (and demands) the token, ``disabled`` does not."""

PROBE_TIMEOUT = 5.0
"""Seconds a cluster has to answer the probe before it counts as silent."""

_IMPORT_PROBE_TIMEOUT = 1.0
"""The probe's bound when ``import raytopic`` makes it: a GCS answers in
milliseconds, and a silent one is left to ``ray.init`` to report."""

_GET_CLUSTER_ID = "/ray.rpc.NodeInfoGcsService/GetClusterId"
"""The probe's call. Its request message is empty, i.e. zero bytes on the wire,
so no generated stub is needed; the GCS checks the token before answering it."""

_HOW_TO_GET_THE_TOKEN = (
    "put the cluster's token (`ray get-auth-token` on its head) in ~/.ray/auth_token, "
    "or in RAY_AUTH_TOKEN or a file named by RAY_AUTH_TOKEN_PATH"
)


class ClusterUnreachableError(TopicError, ConnectionError):
    """No Ray cluster answers at the address (or none was found to ask)."""


class ClusterAuthError(TopicError, ConnectionError):
    """The cluster asks for a token this process lacks or sent wrong; the message
    says how to fix it."""


class Answer(enum.Enum):
    """How a cluster's GCS answered the probe."""

    ACCEPTED = "accepted"
    """It answered the call as sent (with the token, or without when it needs none)."""
    UNAUTHENTICATED = "unauthenticated"
    """It refused the call for a missing or wrong token."""
    UNREACHABLE = "unreachable"
    """Nothing takes connections there, the name does not resolve, or it is no gRPC server."""
    SILENT = "silent"
    """Nothing answered within the timeout (a host that drops packets, a hung process)."""
    NOT_RAY = "not ray"
    """A gRPC server answered, but not as a Ray GCS."""


@dataclass(frozen=True, slots=True)
class GcsReply:
    """The outcome of one probe."""

    answer: Answer
    """What came back."""
    detail: str = ""
    """gRPC's own words for a failed call (empty when accepted)."""


def parse_address(text: str, *, source: str = "--address") -> str:
    """Check that ``text`` is ``HOST:PORT`` (``[v6]:PORT`` too) and return it.

    Args:
        text: The address as given.
        source: Where it was given, named in the error.

    Returns:
        ``text`` unchanged.

    Raises:
        InvalidArgumentError: Not of that form, or the port is not 1-65535.
    """
    host, _colon, port = text.rpartition(":")
    port_ok = port.isascii() and port.isdigit() and 0 < int(port) < 65536
    if port_ok and host.strip("[]") and text.isprintable() and " " not in text:
        return text
    raise InvalidArgumentError(f"{source}: expected HOST:PORT (e.g. 127.0.0.1:6379), got {text!r}")


def resolve_address(address: str, environ: Mapping[str, str] | None = None) -> str:
    """``HOST:PORT`` of the cluster: ``address`` itself, or for ``"auto"`` RAY_ADDRESS,
    else the cluster ``ray start`` last started on this machine.

    Args:
        address: ``HOST:PORT`` or ``"auto"``.
        environ: The environment to read (default ``os.environ``).

    Returns:
        The checked address.

    Raises:
        InvalidArgumentError: The address found is not ``HOST:PORT``.
        ClusterUnreachableError: ``"auto"`` and no cluster was found.
    """
    environ = os.environ if environ is None else environ
    if address != "auto":
        return parse_address(address)
    if environ.get("RAY_ADDRESS", "auto") != "auto":
        return parse_address(environ["RAY_ADDRESS"], source="RAY_ADDRESS")
    # Where `ray start` writes it (Ray's ray._common.utils.get_ray_address_file).
    current = Path(environ.get("RAY_TMPDIR", "/tmp")) / "ray" / "ray_current_cluster"
    try:
        text = current.read_text().strip()
    except OSError:
        text = ""
    if not text:
        raise ClusterUnreachableError(
            "no running Ray cluster found (start one with `ray start --head`, "
            "or give --address or RAY_ADDRESS)"
        )
    return parse_address(text, source=str(current))


def token_source(environ: Mapping[str, str] | None = None, home: Path | None = None) -> str | None:
    """Where Ray would take this process's token from, in Ray's order of precedence
    (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ``~/.ray/auth_token``); None: nowhere.

    Args:
        environ: The environment to read (default ``os.environ``).
        home: The home directory (default ``Path.home()``).

    Returns:
        A description of the source, for messages.
    """
    environ = os.environ if environ is None else environ
    if environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    if environ.get("RAY_AUTH_TOKEN_PATH"):
        return f"RAY_AUTH_TOKEN_PATH ({environ['RAY_AUTH_TOKEN_PATH']})"
    default = (Path.home() if home is None else home) / ".ray" / "auth_token"
    return str(default) if default.is_file() else None


def probe_gcs(
    address: str, *, token_header: Mapping[str, str] | None = None, timeout: float = PROBE_TIMEOUT
) -> GcsReply:
    """Make the probe call to the GCS at ``address``, with or without a token.

    Args:
        address: ``HOST:PORT`` of the GCS.
        token_header: gRPC metadata carrying the token (None: send none).
        timeout: Seconds to wait for an answer.

    Returns:
        How it answered; never raises for a network failure.
    """
    import grpc

    metadata = tuple(token_header.items()) if token_header else None
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(_GET_CLUSTER_ID)  # bytes in, bytes out
        try:
            call(b"", timeout=timeout, metadata=metadata)
        except grpc.RpcError as error:
            code = error.code()
            answer = {
                grpc.StatusCode.UNAUTHENTICATED: Answer.UNAUTHENTICATED,
                grpc.StatusCode.UNAVAILABLE: Answer.UNREACHABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED: Answer.SILENT,
            }.get(code, Answer.NOT_RAY)
            return GcsReply(answer, error.details() or code.name)
    return GcsReply(Answer.ACCEPTED)


def sends_token(
    address: str,
    *,
    mode: str | None,
    without: GcsReply,
    with_token: GcsReply | None,
    source: str | None,
    timeout: float = PROBE_TIMEOUT,
) -> bool:
    """Whether this process must send its token to the cluster, from the GCS's
    answers to the probe without and with it.

    Args:
        address: The cluster, named in errors.
        mode: RAY_AUTH_MODE in this process (None: unset).
        without: The answer to the probe without a token.
        with_token: The answer with the token (None: not asked, no token here).
        source: Where the token comes from (:func:`token_source`).
        timeout: The probe's timeout, named in errors.

    Returns:
        True for a cluster that asks for the token and takes it; False for one
        without token authentication.

    Raises:
        ClusterUnreachableError: No Ray cluster answered.
        ClusterAuthError: The cluster asks for a token and has none from here, or a
            wrong one; or RAY_AUTH_MODE here contradicts the cluster.
    """
    _check_answered(address, without, timeout)
    token_mode = mode is not None and mode.lower() == "token"
    if without.answer is Answer.ACCEPTED:
        if token_mode:
            raise ClusterAuthError(
                f"the Ray cluster at {address} does not use token authentication, but "
                f"{AUTH_MODE}=token is set here (a driver in token mode loses its actors "
                f"there): unset {AUTH_MODE}"
            )
        return False
    if mode is not None and not token_mode:
        raise ClusterAuthError(
            f"authentication failed: the Ray cluster at {address} asks for a token, but "
            f"{AUTH_MODE}={mode} is set here: unset it, and {_HOW_TO_GET_THE_TOKEN}"
        )
    if with_token is None or source is None:
        raise ClusterAuthError(
            f"authentication failed: the Ray cluster at {address} asks for a token and "
            f"this machine has none: {_HOW_TO_GET_THE_TOKEN}"
        )
    _check_answered(address, with_token, timeout)
    if with_token.answer is not Answer.ACCEPTED:
        raise ClusterAuthError(
            f"authentication failed: the Ray cluster at {address} refused the token from "
            f"{source}: {_HOW_TO_GET_THE_TOKEN}"
        )
    return True


def _check_answered(address: str, reply: GcsReply, timeout: float) -> None:
    if reply.answer is Answer.SILENT:
        raise ClusterUnreachableError(
            f"no Ray cluster answers at {address}: nothing answered within {timeout:g} s"
        )
    if reply.answer is Answer.UNREACHABLE:
        raise ClusterUnreachableError(f"no Ray cluster answers at {address}: {reply.detail}")
    if reply.answer is Answer.NOT_RAY:
        raise ClusterUnreachableError(
            f"no Ray cluster answers at {address}: something else does ({reply.detail})"
        )


def prepare(address: str, *, timeout: float = PROBE_TIMEOUT) -> None:
    """Make sure a cluster answers at ``address`` and that this process can join it:
    turn Ray's token mode on here when the cluster asks for the token this
    machine has and RAY_AUTH_MODE is unset. Call it before ``ray.init(address)``.

    Args:
        address: ``HOST:PORT`` of the cluster's GCS.
        timeout: Seconds each probe waits for an answer.

    Raises:
        ClusterUnreachableError: No Ray cluster answered within ``timeout``.
        ClusterAuthError: The cluster refuses this process (see :func:`sends_token`).
    """
    mode = os.environ.get(AUTH_MODE)
    source = token_source()
    without = probe_gcs(address, timeout=timeout)
    with_token = None
    if without.answer is Answer.UNAUTHENTICATED and source is not None:
        with_token = probe_gcs(address, token_header=_token_header(source), timeout=timeout)
    needed = sends_token(
        address, mode=mode, without=without, with_token=with_token, source=source, timeout=timeout
    )
    if needed and mode is None:
        # What Ray's own _enable_token_auth does (authentication_token_setup.py): Ray
        # read RAY_AUTH_MODE into its config when it was imported, so read it again.
        from ray._raylet import Config  # type: ignore[attr-defined]  # (not in Ray's stub)

        os.environ[AUTH_MODE] = "token"
        Config.initialize("")


def _token_header(source: str) -> dict[str, str]:
    """The gRPC metadata Ray itself will send: its own loader reads the token, so the
    probe tests exactly the token ``ray.init`` will use."""
    from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]  # (as above)
    from ray.exceptions import AuthenticationError

    try:
        header = AuthenticationTokenLoader.instance().get_token_for_http_header(
            ignore_auth_mode=True
        )
    except AuthenticationError:
        header = {}
    if not header:
        raise ClusterAuthError(f"authentication failed: no token could be read from {source}")
    return dict(header)


def enable_token_for_ray_address() -> None:
    """Turn Ray's token mode on in this process when RAY_ADDRESS names a cluster that
    asks for the token this machine has (and RAY_AUTH_MODE is unset), so that a
    script's ``ray.init(address=os.environ["RAY_ADDRESS"])`` is let in.

    ``import raytopic`` calls this. It costs nothing unless RAY_ADDRESS is a
    ``HOST:PORT``, a token exists and RAY_AUTH_MODE is unset; then one probe of
    a second at most. It never raises: a cluster that does not answer, or
    refuses the token, is left for ``ray.init`` to report. In a Ray worker
    process (a topic's channels and coordinator import ``raytopic`` too) it does
    nothing: that process is in the cluster already, with the cluster's settings.
    """
    if _in_ray_worker() or AUTH_MODE in os.environ or token_source() is None:
        return
    try:
        address = parse_address(os.environ.get("RAY_ADDRESS", ""), source="RAY_ADDRESS")
    except InvalidArgumentError:
        return  # unset, "auto", "local" or ray://: Ray's own rules apply
    try:
        prepare(address, timeout=_IMPORT_PROBE_TIMEOUT)
    except ClusterAuthError as error:
        logger.warning("raytopic: %s", error)
    except ClusterUnreachableError as error:
        logger.debug("%s", error)


def _in_ray_worker() -> bool:
    """Whether this process is a Ray worker (it runs tasks and actors), not a driver.

    A worker imports Ray and connects (``ray._private.worker.connect`` sets its
    mode) before it imports any code it runs; a process that has not imported Ray
    is no worker, and asking costs it nothing.
    """
    worker = sys.modules.get("ray._private.worker")
    return worker is not None and worker.global_worker.mode == worker.WORKER_MODE
