"""A shared group's dead-letter topic is made by the control plane alone: the group's
coordinator makes it when the group is made (by any caller, not only a handle), when
the topic starts, and again after the coordinator restarts; a channel only appends to
it (and asks its coordinator for it when it is gone: test_shared_groups)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import pytest
import ray

import raytopic as rt
from raytopic.core.protocol import DeclareGroup

from tests.topic_helpers import get


def _exists(name: str, namespace: str) -> bool:
    try:
        rt.get_topic(name, namespace=namespace)
    except rt.TopicNotFoundError:
        return False
    return True


@pytest.fixture
def dead_name(unique_name, ray_session) -> Iterator[str]:
    """A dead-letter topic's name; the topic is destroyed afterwards."""
    name = unique_name("dead")
    yield name
    with contextlib.suppress(rt.TopicNotFoundError):
        rt.get_topic(name).destroy()  # the namespace of make_topic's topics


def test_the_coordinator_makes_the_dead_letter_topic_with_the_group(make_topic, dead_name):
    topic = make_topic(channels=1)
    spec = rt.SharedGroup("g", max_deliveries=2, dead_letter=dead_name)
    # The coordinator's own call, no handle around it.
    get(topic._coordinator.request.remote(DeclareGroup("g", mode="shared", spec=spec)))
    assert _exists(dead_name, topic.namespace)


@pytest.mark.slow
def test_a_restarted_coordinator_makes_a_missing_dead_letter_topic_again(
    make_topic, dead_name, wait_until
):
    group = rt.SharedGroup("g", max_deliveries=2, dead_letter=dead_name)
    topic = make_topic(channels=1, groups=[group])
    assert _exists(dead_name, topic.namespace)  # made as the topic started
    rt.get_topic(dead_name, namespace=topic.namespace).destroy()
    killed = _pid(topic._coordinator)
    os.kill(killed, signal.SIGKILL)
    wait_until(lambda: _pid(topic._coordinator) != killed, timeout=30)
    assert topic.groups() == ["g"]  # the first call: it recovers from the channels
    wait_until(lambda: _exists(dead_name, topic.namespace), timeout=30)


def _pid(actor: object) -> int | None:
    """The actor's process id (None while it restarts)."""
    try:
        return get(actor.__ray_call__.remote(lambda _: os.getpid()))  # type: ignore[attr-defined]
    except ray.exceptions.RayActorError:
        return None
