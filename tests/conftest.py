"""Shared fixtures: one real Ray for the whole session, uniquely named topics."""

from __future__ import annotations

import os

# Ray reads this when it is imported: keep every Ray the tests start on loopback.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import ray


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A local Ray (or the cluster in RAY_ADDRESS) shared by every test."""
    if ray.is_initialized():
        yield
        return
    address = os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, namespace="raytopic-tests", log_to_driver=False)
    else:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            namespace="raytopic-tests",
            log_to_driver=False,
        )
    yield
    ray.shutdown()


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """Make names no other test uses: ``unique_name("orders")`` -> ``orders-1a2b3c4d``."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    return make


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
