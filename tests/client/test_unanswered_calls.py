"""An actor that does not answer (a process SIGSTOPped, as a loaded machine can hold
one), or dies, while a topic is made: the blocking calls raise a typed raytopic
error, never Ray's raw exception, and a topic is made whole or leaves nothing
behind (DESIGN 4)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import ray

import raytopic as rt
from raytopic.actors.stores.segment_log import SegmentLogStore
from raytopic.core.config import DEFAULT_NAMESPACE
from raytopic.core.naming import coordinator_actor_name

from tests.topic_helpers import receive_each


def _stopping_store(root: str, pids: str) -> Any:
    """A store factory whose channel 1 stops its own process as it starts (its pid
    written to ``pids`` first): that channel never answers its coordinator."""

    def factory(topic_name: str, channel: int) -> SegmentLogStore:
        if channel == 1:
            with open(pids, "a") as file:
                file.write(f"{os.getpid()}\n")
            os.kill(os.getpid(), signal.SIGSTOP)
        return SegmentLogStore(os.path.join(root, topic_name, str(channel)))

    return factory


@pytest.mark.slow  # the coordinator waits 30 s for its channels to start
def test_a_channel_that_does_not_start_fails_create_topic_typed_and_leaves_nothing(
    ray_session, unique_name, tmp_path: Path
):
    name, pids = unique_name("unstarted"), tmp_path / "pids"
    groups = ["g", rt.SharedGroup("sg")]
    found: list[object] = []  # what a get_topic made while the topic starts ends with
    finder = threading.Thread(target=_get_once_stopped, args=(name, pids, found))
    finder.start()
    try:
        # On main: ray.exceptions.RayTaskError(TimeoutError), the coordinator's traceback.
        with pytest.raises(rt.ChannelUnavailableError) as raised:
            rt.create_topic(
                name,
                channels=2,
                capacity=100,
                store=_stopping_store(str(tmp_path / "store"), str(pids)),
                groups=groups,
            )
    finally:
        _resume(pids)
        finder.join(60)
    # It waited for the start, and heard why it failed (or, later, that nothing is left).
    assert len(found) == 1 and isinstance(
        found[0], rt.ChannelUnavailableError | rt.TopicNotFoundError
    ), found
    assert not isinstance(found[0], ray.exceptions.RayError), found
    assert not isinstance(raised.value, ray.exceptions.RayError)
    assert str(raised.value) == (
        f"topic {name!r} was not made: channel 1 did not answer within 30 s "
        "(its actor did not start)"
    )
    with pytest.raises(rt.TopicNotFoundError):
        rt.get_topic(name)
    named = [actor for actor in ray.util.list_named_actors(all_namespaces=True)]
    assert not [actor for actor in named if name in actor["name"]], named
    # A retry makes the topic, whole.
    topic = rt.create_topic(name, channels=2, capacity=100, groups=groups, exist_ok=True)
    try:
        assert sorted(topic.groups()) == ["g", "sg"]
        with topic.publisher() as publisher:
            publisher.publish("after").result(timeout=30)
    finally:
        topic.destroy()


def _get_once_stopped(name: str, pids: Path, found: list[object]) -> None:
    """``rt.get_topic(name)`` once a channel of it stopped; what it ended with into
    ``found``."""
    deadline = time.monotonic() + 60
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        found.append(rt.get_topic(name))
    except BaseException as error:
        found.append(error)


def _resume(pids: Path) -> None:
    """SIGCONT the processes ``_stopping_store`` stopped."""
    for pid in pids.read_text().split() if pids.exists() else ():
        with contextlib.suppress(ProcessLookupError):  # killed with its topic
            os.kill(int(pid), signal.SIGCONT)


@pytest.mark.slow  # a coordinator's restart, and its topic's start, under way
def test_a_coordinator_killed_while_it_starts_its_topic_still_makes_the_groups(
    ray_session, unique_name, tmp_path: Path
):
    name, pids = unique_name("restarted"), tmp_path / "pids"
    killer = threading.Thread(target=_kill_coordinator_once_stopped, args=(name, pids))
    killer.start()
    try:
        topic = rt.create_topic(
            name,
            channels=2,
            capacity=100,
            store=_stopping_store(str(tmp_path / "store"), str(pids)),
            groups=["g", rt.SharedGroup("sg")],
        )
    finally:
        killer.join(60)
        _resume(pids)
    try:
        # On main: [] (the restarted coordinator served Ray's retry of the start
        # with what its channels held: no group yet).
        assert sorted(topic.groups()) == ["g", "sg"]
        with topic.publisher() as publisher:
            publisher.publish("kept").result(timeout=30)
        with topic.subscriber(group="g") as member:
            assert [element.value for element in receive_each(member, 1)] == ["kept"]
    finally:
        topic.destroy()


def _kill_coordinator_once_stopped(name: str, pids: Path) -> None:
    """Kill ``name``'s coordinator (Ray restarts it) while channel 1 is stopped in its
    start, then resume the channel."""
    deadline = time.monotonic() + 60
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the coordinator waits for its channels
    coordinator = ray.get_actor(coordinator_actor_name(name), namespace=DEFAULT_NAMESPACE)
    ray.kill(coordinator, no_restart=False)
    time.sleep(2.0)
    _resume(pids)
