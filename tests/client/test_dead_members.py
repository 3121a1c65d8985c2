"""A member whose process is gone leaves its group at once (issue 52 item 5): the
coordinator asks Ray whether each member's job (a driver's) or actor is gone,
instead of letting a killed driver's members hold their channels for their whole
``timeout``."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import ray

import raytopic as rt

pytestmark = pytest.mark.slow  # a second driver process

LONG = 600.0  # a member timeout no test waits out: leaving must come from Ray's word

DRIVER = """
import sys, time
import ray
import raytopic as rt
address, namespace, name = sys.argv[1:4]
ray.init(address=address, namespace=namespace, logging_level="ERROR", log_to_driver=False)
member = rt.get_topic(name, namespace=namespace).subscriber(group="g", timeout=float(sys.argv[4]))
print("joined", flush=True)
time.sleep(600)
"""


def _members(topic: rt.Topic) -> int:
    return len(topic.describe().groups["g"].members)


def test_a_killed_drivers_member_leaves_at_once(
    ray_cluster: str, make_topic: Callable[..., rt.Topic], wait_until: Any
) -> None:
    topic = make_topic(channels=2, groups=["g"])
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, ray_cluster, topic.namespace, topic.name, str(LONG)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert driver.stdout is not None
        assert driver.stdout.readline() == "joined\n", driver.stderr.read() if driver.stderr else ""
        with topic.subscriber(group="g", timeout=LONG) as member:
            assert len(member.channels) == 1  # the driver's member owns the other
            driver.send_signal(signal.SIGKILL)
            driver.wait(timeout=30)
            # Before: the killed driver's member kept its channel for its timeout.
            wait_until(lambda: _members(topic) == 1, timeout=60.0)
            wait_until(lambda: member.channels == (0, 1), timeout=30.0)
    finally:
        driver.kill()


@ray.remote
class _Member:
    def __init__(self, topic: rt.Topic) -> None:
        self.member = topic.subscriber(group="g", timeout=LONG)

    def ready(self) -> bool:
        return True


def test_a_killed_actors_member_leaves_at_once(
    make_topic: Callable[..., rt.Topic], wait_until: Any
) -> None:
    topic = make_topic(channels=2, groups=["g"])
    actor = _Member.remote(topic)
    assert ray.get(actor.ready.remote(), timeout=60)
    with topic.subscriber(group="g", timeout=LONG) as member:
        assert len(member.channels) == 1
        ray.kill(actor)
        wait_until(lambda: _members(topic) == 1, timeout=60.0)  # before: 2 for 600 s
        wait_until(lambda: member.channels == (0, 1), timeout=30.0)
