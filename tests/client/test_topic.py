"""Topic lifecycle against a real Ray cluster: create, find, list, describe, destroy,
validation, namespaces, and a second driver process attaching to a topic."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import ray

import raytopic as rt
from raytopic.core.naming import channel_actor_name, coordinator_actor_name
from raytopic.core.protocol import ReadIdentity

from tests.topic_helpers import publish_all

SECOND_DRIVER = """
import json
import sys

import ray

import raytopic as rt

address, name, own = sys.argv[1], sys.argv[2], sys.argv[3]
ray.init(address=address, namespace="second-driver", log_to_driver=False)
topic = rt.get_topic(name)
with topic.subscriber(start="earliest", complete_on_empty=True) as subscriber:
    seen = sorted(
        (element.value, element.channel, element.sequence) for element in subscriber
    )
with topic.publisher() as publisher:
    futures = [publisher.publish(f"child-{i}", key="child") for i in range(3)]
statuses = [future.result() for future in futures]
# A topic this driver creates outlives it.
mine = rt.create_topic(own, channels=1, capacity=10)
with mine.publisher() as publisher:
    publisher.publish("left-behind").result()
print(json.dumps({
    "own_topic_id": mine.topic_id,
    "topic_id": topic.topic_id,
    "channels": topic.channel_count,
    "seen": seen,
    "published": [[s.channel, s.position.sequence] for s in statuses],
}))
ray.shutdown()
"""


def _drain(topic: rt.Topic) -> list[Any]:
    with topic.subscriber(start="earliest", complete_on_empty=True) as subscriber:
        return [element.value for element in subscriber]


# -- create, get, list, describe ------------------------------------------------------------


def test_create_then_get_and_list_find_the_same_topic(make_topic: Callable[..., rt.Topic]) -> None:
    topic = make_topic(channels=2, capacity=5, ttl=60.0, overflow="fail", retain=True)
    assert (topic.channel_count, topic.namespace) == (2, "raytopic")
    assert (topic.config.capacity, topic.config.ttl, topic.config.retain) == (5, 60.0, True)
    assert topic.config.overflow is rt.Overflow.FAIL

    found = rt.get_topic(topic.name)
    assert found.topic_id == topic.topic_id
    assert found.channel_count == 2
    assert topic.name in rt.list_topics()

    statuses = publish_all(found, ["x", "y", "z"], key="one")  # through one handle ...
    assert sorted(_drain(topic)) == ["x", "y", "z"]  # ... read through the other

    channel = statuses[0].channel
    stats = topic.describe()
    assert [c.channel for c in stats.channels] == [0, 1]
    busy, idle = stats.channels[channel], stats.channels[1 - channel]
    assert (busy.head, busy.tail, busy.size, busy.capacity) == (0, 2, 3, 5)
    assert (idle.head, idle.tail, idle.size, idle.capacity) == (0, -1, 0, 5)
    actors = [
        ray.get_actor(channel_actor_name(topic.name, c), namespace=topic.namespace)
        for c in range(2)
    ]
    identities = ray.get([actor.control.remote(ReadIdentity()) for actor in actors])
    assert [s.pid for s in stats.channels] == [i["pid"] for i in identities]
    assert all(s.pid != os.getpid() and s.node_id and s.epoch >= 1 for s in stats.channels)

    with pytest.raises(rt.InvalidArgumentError):
        topic.ringbuffer(2)
    with pytest.raises(rt.InvalidArgumentError):
        topic.ringbuffer(-1)
    with pytest.raises(rt.InvalidTypeError):
        topic.ringbuffer("0")  # type: ignore[arg-type]
    assert topic.ringbuffer(1 - channel).tail_sequence() == -1


def test_get_topic_of_unknown_name_raises_topic_not_found(ray_session: None, unique_name) -> None:
    with pytest.raises(rt.TopicNotFoundError):
        rt.get_topic(unique_name("missing"))
    with pytest.raises(LookupError):  # the stdlib class users already catch
        rt.get_topic(unique_name("missing"), namespace="raytopic-nowhere")


def test_create_twice_raises_and_exist_ok_returns_the_existing_topic(
    ray_session: None, unique_name
) -> None:
    name = unique_name("longest.name_").ljust(128, "x")  # the longest safe name
    topic = rt.create_topic(name, channels=1, capacity=10)
    try:
        publish_all(topic, [1, 2, 3])
        with pytest.raises(rt.TopicExistsError):
            rt.create_topic(name, channels=1, capacity=10)
        again = rt.create_topic(name, channels=5, capacity=99, exist_ok=True)
        assert again.topic_id == topic.topic_id
        assert (again.channel_count, again.config.capacity) == (1, 10)  # the existing settings
        assert _drain(again) == [1, 2, 3]  # nothing was reset
    finally:
        topic.destroy()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"channels": 0}, rt.InvalidArgumentError),
        ({"channels": -2}, rt.InvalidArgumentError),
        ({"channels": 1.5}, rt.InvalidTypeError),
        ({"channels": True}, rt.InvalidTypeError),
        ({"capacity": 0}, rt.InvalidArgumentError),
        ({"capacity": "10"}, rt.InvalidTypeError),
        ({"ttl": 0}, rt.InvalidArgumentError),
        ({"ttl": -1.0}, rt.InvalidArgumentError),
        ({"ttl": "1"}, rt.InvalidTypeError),
        ({"overflow": "drop"}, rt.InvalidArgumentError),
        ({"overflow": None}, rt.InvalidArgumentError),
        ({"retain": "yes"}, rt.InvalidTypeError),
        ({"groups": "g"}, rt.InvalidTypeError),
        ({"groups": ["g", "g"]}, rt.InvalidArgumentError),
        ({"groups": ["bad name"]}, rt.InvalidArgumentError),
        ({"namespace": ""}, rt.InvalidArgumentError),
        ({"namespace": "a/b"}, rt.InvalidArgumentError),
    ],
)
def test_bad_config_raises_a_typed_error_and_creates_nothing(
    ray_session: None, unique_name, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    name = unique_name("bad")
    with pytest.raises(error):
        rt.create_topic(name, **kwargs)
    stdlib = ValueError if issubclass(error, rt.InvalidArgumentError) else TypeError
    assert issubclass(error, stdlib) and issubclass(error, rt.TopicError)
    assert name not in rt.list_topics()
    with pytest.raises(rt.TopicNotFoundError):
        rt.get_topic(name)


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("", rt.InvalidArgumentError),
        ("a b", rt.InvalidArgumentError),
        ("a/b", rt.InvalidArgumentError),
        ("a:b", rt.InvalidArgumentError),
        ("-dash-first", rt.InvalidArgumentError),
        ("x" * 129, rt.InvalidArgumentError),
        (None, rt.InvalidTypeError),
        (7, rt.InvalidTypeError),
    ],
)
def test_unsafe_topic_names_are_refused(
    ray_session: None, unique_name: Callable[[str], str], name: Any, error: type
) -> None:
    # In a namespace of its own: the other xdist worker makes and destroys topics in the
    # default one meanwhile (a comparison there failed once, a topic of its gone).
    namespace = unique_name("refused")
    with pytest.raises(error):
        rt.create_topic(name, namespace=namespace)
    with pytest.raises(error):
        rt.get_topic(name, namespace=namespace)
    assert rt.list_topics(namespace=namespace) == []


# -- namespaces -------------------------------------------------------------------------


def test_same_name_in_two_namespaces_is_two_topics(ray_session: None, unique_name) -> None:
    name = unique_name("shared")
    first_ns, second_ns = unique_name("ns-a"), unique_name("ns-b")
    first = rt.create_topic(name, channels=1, capacity=10, namespace=first_ns)
    try:
        second = rt.create_topic(name, channels=1, capacity=20, namespace=second_ns)
        try:
            assert first.topic_id != second.topic_id
            assert rt.list_topics(namespace=first_ns) == [name]
            assert rt.list_topics(namespace=second_ns) == [name]
            assert name not in rt.list_topics()  # not in the default namespace
            with pytest.raises(rt.TopicNotFoundError):
                rt.get_topic(name)
            publish_all(first, ["only-in-first"])
            assert _drain(rt.get_topic(name, namespace=first_ns)) == ["only-in-first"]
            assert _drain(rt.get_topic(name, namespace=second_ns)) == []
            assert rt.get_topic(name, namespace=second_ns).config.capacity == 20
        finally:
            second.destroy()
        assert rt.list_topics(namespace=second_ns) == []
        assert _drain(rt.get_topic(name, namespace=first_ns)) == ["only-in-first"]
    finally:
        first.destroy()


# -- a second driver ----------------------------------------------------------------------


def test_a_second_driver_finds_the_topic_and_reads_what_the_first_published(
    make_topic: Callable[..., rt.Topic], ray_cluster: str, tmp_path, unique_name
) -> None:
    topic = make_topic(channels=2, capacity=100)
    statuses = publish_all(topic, ["a", "b", "c", "d"])
    watcher = topic.subscriber()  # latest: sees only what the child publishes
    script = tmp_path / "second_driver.py"
    script.write_text(SECOND_DRIVER)
    own = unique_name("child-made")
    env = dict(os.environ, RAY_ADDRESS=ray_cluster)
    child = subprocess.run(
        [sys.executable, str(script), ray_cluster, topic.name, own],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert child.returncode == 0, child.stderr[-3000:]
        report = json.loads(child.stdout.strip().splitlines()[-1])
        assert report["topic_id"] == topic.topic_id
        assert report["channels"] == 2
        assert report["seen"] == sorted(
            [v, s.channel, s.position.sequence] for v, s in zip("abcd", statuses, strict=True)
        )
        # What the child published (and acknowledged) is here for the first driver.
        received = ray.get(watcher.receive_batch(10), timeout=30)
        assert [e.value for e in received] == ["child-0", "child-1", "child-2"]
        assert [[e.channel, e.sequence] for e in received] == report["published"]
        watcher.close()
        # The child's driver has exited; the topic it created lives on (detached).
        left = rt.get_topic(own)
        assert left.topic_id == report["own_topic_id"]
        assert _drain(left) == ["left-behind"]
    finally:
        with contextlib.suppress(rt.TopicNotFoundError):
            rt.get_topic(own).destroy()


# -- destroy --------------------------------------------------------------------------------


def test_destroy_kills_the_actors_and_frees_the_name(ray_session: None, unique_name) -> None:
    name = unique_name("doomed")
    topic = rt.create_topic(name, channels=1, capacity=10)
    old_status = publish_all(topic, ["old-1", "old-2"])[1]
    channel = ray.get_actor(channel_actor_name(name, 0), namespace="raytopic")
    coordinator = ray.get_actor(coordinator_actor_name(name), namespace="raytopic")
    publisher = topic.publisher()

    topic.destroy()
    for actor in (channel, coordinator):
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.__ray_ready__.remote(), timeout=30)
    assert name not in rt.list_topics()
    with pytest.raises(rt.TopicNotFoundError):
        rt.get_topic(name)
    topic.destroy()  # idempotent
    # Handles of the destroyed topic say so (every call: tests/client/test_destroyed.py).
    with pytest.raises(rt.TopicNotFoundError):
        publisher.publish("late").result(timeout=30)
    with pytest.raises(rt.TopicNotFoundError):
        topic.ringbuffer(0).size()

    again = rt.create_topic(name, channels=1, capacity=10)  # at once: the name is free
    try:
        assert again.topic_id != topic.topic_id
        assert rt.get_topic(name).topic_id == again.topic_id
        assert _drain(again) == []  # nothing of the old topic survived
        assert again.ringbuffer(0).tail_sequence() == -1
        # A Position of the old topic names the old topic.
        old = old_status.position
        with again.subscriber() as subscriber, pytest.raises(rt.PositionMismatchError):
            subscriber.seek(0, old)
        new = publish_all(again, ["new-1", "new-2"])[1]
        assert (new.channel, new.position.sequence) == (old.channel, old.sequence)
        assert new.position != old  # same channel and sequence, another topic
        assert new.position.topic_id == again.topic_id
    finally:
        again.destroy()


def test_a_bad_packed_request_gets_a_typed_error_and_the_channel_lives_on(
    make_topic: Callable[..., rt.Topic],
) -> None:
    import pickle

    topic = make_topic(channels=1)
    publish_all(topic, ["kept"])
    channel = ray.get_actor(channel_actor_name(topic.name, 0), namespace=topic.namespace)
    not_a_request = pickle.dumps(("destroy_group", ("g",)))  # a method the data path refuses
    for packed in (not_a_request, b"garbage"):
        with pytest.raises(rt.InvalidArgumentError):
            ray.get(channel.request.remote(packed), timeout=30)
    assert _drain(topic) == ["kept"]


_DESTROY_WHILE_RECEIVING = """
import sys, time, ray, raytopic as rt
ray.init(address=sys.argv[1])  # with the actors' logs, as a user's driver has them
topic = rt.create_topic(sys.argv[2], channels=2, groups=["g"])
member, watcher = topic.subscriber(group="g"), topic.subscriber()
waiting = [member.receive(), watcher.receive_batch(10)]
time.sleep(1.0)
topic.destroy()
idle = rt.create_topic(f"{sys.argv[2]}-idle", channels=2, groups=["g"])
time.sleep(1.5)  # an idle topic, alive a while, then destroyed: nothing logged either
idle.destroy()
for ref in waiting:
    try:
        ray.get(ref, timeout=30)
        print("ANSWERED")
    except rt.TopicNotFoundError as error:  # Ray's wrapper is an instance of it too
        print("TYPED", getattr(error, "cause", error))
time.sleep(2.0)  # room for any late log line to arrive
"""


def test_destroy_ends_waiting_receives_with_a_typed_error_and_logs_nothing(
    ray_cluster: str, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("destroyed")
    done = subprocess.run(
        [sys.executable, "-c", _DESTROY_WHILE_RECEIVING, ray_cluster, name],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(f"TYPED topic {name!r} was destroyed") == 2, done.stdout
    output = done.stdout + done.stderr
    for noise in ("ActorDiedError", "died unexpectedly", "Traceback", "failed", "ERROR"):
        assert noise not in output, output


@pytest.mark.parametrize("stored", [False, True], ids=["memory", "store"])
def test_a_topic_made_again_under_its_name_commits_its_own_elements(
    ray_session: None, unique_name: Callable[[str], str], tmp_path, stored: bool
) -> None:
    name = unique_name("again")
    store = str(tmp_path) if stored else None
    old_element = None
    for round_ in range(2):
        # One channel: both rounds' elements are on channel 0, whose handle a cache by
        # name would mix up between the two topics.
        topic = rt.create_topic(name, channels=1, groups=["g"], store=store)
        try:
            publish_all(topic, [f"round-{round_}"])
            with topic.subscriber(group="g", complete_on_empty=True) as member:
                element = ray.get(member.receive(), timeout=30)
                assert element.value == f"round-{round_}"
                # Handles cached for the first round's topic are not the second's.
                assert element.commit().status is rt.CommitStatus.COMMITTED
                if old_element is not None:
                    # The first round's element names a topic that is gone.
                    with pytest.raises(rt.TopicError) as raised:
                        old_element.commit()
                    assert not isinstance(raised.value, ray.exceptions.RayError)
        finally:
            topic.destroy()
        old_element = element
    # Its topic destroyed and not made again: typed, not Ray's ActorDiedError.
    with pytest.raises(rt.TopicNotFoundError):
        old_element.commit()


def test_a_topic_whose_creator_died_before_starting_it_starts_itself(
    ray_session: None, unique_name
) -> None:
    # Found by trial65: a transaction registry SIGKILLed while it made its state topic
    # left that topic's coordinator made and never started (StartTopic never sent):
    # get_topic, describe, create_topic(exist_ok=True) of the name, and so every later
    # rt.transactions of the namespace, hung for ever.
    from raytopic.coordinator.launch import create_topic_actors
    from raytopic.core.config import TopicConfig
    from raytopic.core.steps import run_blocking

    name = unique_name("orphan")
    config = TopicConfig.create(name, channels=2)
    coordinator, channels = run_blocking(create_topic_actors(config))
    ray.kill(channels[1], no_restart=True)  # its creator died before making this one
    found: dict[str, Any] = {}

    def use() -> None:
        topic = rt.create_topic(name, channels=2, exist_ok=True)
        publish_all(topic, list(range(6)))
        with topic.subscriber(start="earliest", complete_on_empty=True) as reader:
            found["values"] = sorted(element.value for element in reader)
        found["states"] = [channel.state for channel in topic.describe().channels]

    user = threading.Thread(target=use, daemon=True)
    user.start()
    user.join(90)
    try:
        assert found == {"values": list(range(6)), "states": ["serving", "serving"]}
    finally:
        if user.is_alive():  # hung: leave no actor behind
            for actor in (coordinator, *channels):
                ray.kill(actor, no_restart=True)
        else:
            with contextlib.suppress(rt.TopicNotFoundError):
                rt.get_topic(name).destroy()
