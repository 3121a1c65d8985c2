"""A stored topic's life, as users live it (issue 51, items 3 and 4): destroyed, its
stored data goes with it (a new topic of the name starts empty, with no groups, even
after a destroy stopped midway); reopened from its store after every actor is gone,
everything comes back under its own id, and other fixed settings are refused, naming
them, with nothing created or written. Real actors, real files, second drivers."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import ray

import raytopic as rt
from raytopic.core.naming import channel_actor_name, coordinator_actor_name
from raytopic.core.protocol import MarkDestroyed, RemoveStore

from tests.topic_helpers import TIMEOUT, get, key_for, publish_all, stop_every_actor

ANOTHER_JOB = """
import json, sys
import ray
import raytopic as rt
ray.init(address=sys.argv[1])
topic = rt.get_topic(sys.argv[2])
published = []
with topic.publisher() as publisher:
    for value in json.loads(sys.argv[3]):
        status = publisher.publish(value, key=value).result(timeout=30)
        published.append([value, status.channel, status.position.sequence])
received = []
if sys.argv[4]:
    with topic.subscriber(group=sys.argv[4], complete_on_empty=True) as member:
        while batch := ray.get(member.receive_batch(100), timeout=30):
            received.extend(element.value for element in batch)
            batch[-1].commit()
print(json.dumps({"topic_id": topic.topic_id, "published": published, "received": received}))
"""


def _another_job(
    ray_cluster: str, tmp_path: Path, name: str, publish: list[Any], group: str = ""
) -> dict[str, Any]:
    """Run a job of its own on the cluster: it publishes ``publish`` to topic ``name``,
    then (with ``group``) drains the group as a member; returns its report."""
    script = tmp_path / "another_job.py"
    script.write_text(ANOTHER_JOB)
    done = subprocess.run(
        [sys.executable, str(script), ray_cluster, name, json.dumps(publish), group],
        env=dict(os.environ, RAY_ADDRESS=ray_cluster),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _files(root: Path) -> dict[str, str]:
    """Every file under ``root`` and a digest of its bytes."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _no_actor_named(name: str, channels: int) -> bool:
    names = [coordinator_actor_name(name), *(channel_actor_name(name, c) for c in range(channels))]
    for actor in names:
        try:
            ray.get_actor(actor, namespace="raytopic")
        except ValueError:
            continue
        return False
    return True


def _everything(topic: rt.Topic) -> list[Any]:
    with topic.subscriber(start="earliest", complete_on_empty=True) as reader:
        return sorted(element.value for element in reader)


def _fed(topic: rt.Topic) -> None:
    """30 keyed values, group "g" committed on part of them, a shared group's acks."""
    publish_all(topic, list(range(30)))
    with topic.subscriber(group="g", complete_on_empty=True) as member:
        batch = get(member.receive_batch(10))
        assert batch[-1].commit().status is rt.CommitStatus.COMMITTED


# -- destroy ---------------------------------------------------------------------------------


def test_destroy_removes_the_stored_data_and_the_name_starts_over_empty(
    ray_session: None, ray_cluster: str, unique_name, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    name = unique_name("destroyed")
    groups = ["g", rt.SharedGroup("s")]
    topic = rt.create_topic(name, channels=3, store=str(store), groups=groups)
    _fed(topic)
    old_id = topic.topic_id
    topic.destroy()
    assert not (store / "raytopic" / name).exists()  # nothing of it is left on disk

    # Made again by this job, with a group, and fed by another job: only the new
    # topic's elements, and only its group.
    again = rt.create_topic(name, channels=3, store=str(store), groups=["g"])
    try:
        assert again.topic_id != old_id
        stats = again.describe()
        assert [channel.size for channel in stats.channels] == [0, 0, 0]
        assert sorted(stats.groups) == ["g"] and stats.groups["g"].committed == {}
        report = _another_job(ray_cluster, tmp_path, name, ["new-0", "new-1", "new-2"], "g")
        assert report["topic_id"] == again.topic_id
        assert sorted(report["received"]) == ["new-0", "new-1", "new-2"]
    finally:
        again.destroy()
    assert not (store / "raytopic" / name).exists()


class _JsonStore:
    """A user's store: elements and the channel's state in two files, with ``destroy``
    (``destroys=False``: the same store without it)."""

    def __init__(self, root: str, channel: int) -> None:
        self._elements = os.path.join(root, f"{channel}.elements.json")
        self._state = os.path.join(root, f"{channel}.state.json")
        self.items: dict[int, Any] = {}
        if os.path.exists(self._elements):
            with open(self._elements) as file:
                self.items = {int(k): v for k, v in json.load(file).items()}

    def store(self, sequence: int, item: Any) -> None:
        self.store_all(sequence, [item])

    def store_all(self, first_sequence: int, items: list[Any]) -> None:
        for offset, item in enumerate(items):
            self.items[first_sequence + offset] = item
        with open(self._elements, "w") as file:
            json.dump(self.items, file)

    def load(self, sequence: int) -> Any:
        return self.items.get(sequence)

    def largest_sequence(self) -> int:
        return max(self.items, default=-1)

    def save_state(self, state: dict[str, Any]) -> None:
        with open(self._state, "w") as file:
            json.dump(state, file)

    def load_state(self) -> dict[str, Any] | None:
        if not os.path.exists(self._state):
            return None
        with open(self._state) as file:
            return json.load(file)


class _RemovableJsonStore(_JsonStore):
    def destroy(self) -> None:
        for path in (self._elements, self._state):
            if os.path.exists(path):
                os.remove(path)
        self.items = {}


def _factory(root: str, removable: bool) -> Any:
    kind = _RemovableJsonStore if removable else _JsonStore

    def factory(topic_name: str, channel: int) -> Any:
        return kind(root, channel)

    return factory


@pytest.mark.parametrize("removable", [True, False], ids=["with-destroy", "without"])
def test_a_users_store_is_destroyed_with_its_topic_if_it_can_be(
    ray_session: None, unique_name, tmp_path: Path, removable: bool
) -> None:
    """With ``destroy`` the store is emptied. Without it, its elements stay and its
    state says the topic was destroyed: a topic made again over it starts after them,
    with no groups, and a reader from the earliest gets only the new topic's."""
    root = str(tmp_path)
    name = unique_name("users")
    topic = rt.create_topic(name, channels=1, store=_factory(root, removable), groups=["g"])
    publish_all(topic, ["old-0", "old-1"])
    topic.destroy()
    assert sorted(os.listdir(root)) == ([] if removable else ["0.elements.json", "0.state.json"])

    again = rt.create_topic(name, channels=1, store=_factory(root, removable))
    try:
        channel = again.describe().channels[0]
        assert (channel.size, again.groups()) == (0, [])
        assert channel.tail == (-1 if removable else 1)  # after what the store could not remove
        publish_all(again, ["new"])
        assert _everything(again) == ["new"]
    finally:
        again.destroy()


def _control(topic: rt.Topic, channel: int, request: Any) -> Any:
    return get(topic._channel_actors[channel].control.remote(request))


@pytest.mark.parametrize("reached", ["one store marked", "every store marked, one removed"])
def test_a_destroy_stopped_midway_is_finished_by_the_next_topic_of_the_name(
    ray_session: None, unique_name, tmp_path: Path, reached: str
) -> None:
    """The coordinator marks every channel's store destroyed, then has them removed.
    Every actor gone between two of those steps (a whole-cluster restart, played here
    by running the steps the coordinator runs, then stopping every actor): the next
    topic of the name over the store removes what is left, and starts empty; half of
    the old topic never comes back."""
    store = tmp_path / "store"
    name = unique_name("midway")
    topic = rt.create_topic(name, channels=2, store=str(store), groups=["g"])
    _fed(topic)
    if reached == "one store marked":
        _control(topic, 0, MarkDestroyed())
    else:
        for channel in range(2):
            _control(topic, channel, MarkDestroyed())
        _control(topic, 0, RemoveStore())
        assert sorted(path.name for path in (store / "raytopic" / name).iterdir()) == ["1"]
    stop_every_actor(topic)

    again = rt.create_topic(name, channels=2, store=str(store))
    try:
        assert again.topic_id != topic.topic_id
        assert [channel.size for channel in again.describe().channels] == [0, 0]
        assert again.groups() == []
        publish_all(again, ["new"])
        assert _everything(again) == ["new"]
    finally:
        again.destroy()


def test_an_append_that_comes_after_the_store_is_removed_is_refused_as_topic_not_found(
    ray_session: None, unique_name, tmp_path: Path
) -> None:
    """The coordinator marks every channel's store destroyed, has them removed, then
    the channels are killed. An append from a process that has not heard of the
    destroy (a batch in flight, a publisher's retry) that comes in between is refused
    with TopicNotFoundError, as every call on a destroyed topic is: not StoreError
    ("the store is closed"), and nothing is written where the store was."""
    store = tmp_path / "store"
    name = unique_name("late")
    topic = rt.create_topic(name, channels=1, store=str(store), groups=["g"])
    publish_all(topic, ["old"])
    _control(topic, 0, MarkDestroyed())
    _control(topic, 0, RemoveStore())
    publisher = topic.publisher()
    try:
        with pytest.raises(rt.TopicNotFoundError):
            publisher.publish("late").result(timeout=TIMEOUT)
        with pytest.raises(rt.TopicNotFoundError):
            get(publisher.publish_batch(["late", "later"]))
        with pytest.raises(rt.TopicNotFoundError):
            topic.ringbuffer(0).add("late")
    finally:
        publisher.close()
        topic.destroy()
    assert not (store / "raytopic" / name).exists()


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.02, 0.1])
def test_a_channel_killed_while_its_topic_is_destroyed_leaves_nothing_to_come_back(
    ray_session: None, unique_name, tmp_path: Path, delay: float
) -> None:
    """SIGKILL of a channel while ``destroy()`` runs (at once, or a moment in): it
    restarts, the coordinator's call reaches it again, and the destroy finishes;
    nothing of the topic is left, and a topic made again of the name starts empty."""
    store = tmp_path / "store"
    name = unique_name("killed")
    topic = rt.create_topic(name, channels=2, store=str(store), groups=["g"])
    _fed(topic)
    pid = topic.describe().channels[1].pid
    errors: list[BaseException] = []

    def destroy() -> None:
        try:
            topic.destroy()
        except BaseException as error:  # reported below
            errors.append(error)

    destroying = threading.Thread(target=destroy)
    destroying.start()
    time.sleep(delay)
    with contextlib.suppress(ProcessLookupError):  # the destroy had killed it already
        os.kill(pid, signal.SIGKILL)
    destroying.join(TIMEOUT * 2)
    assert not destroying.is_alive() and errors == []
    assert _no_actor_named(name, 2)
    assert not (store / "raytopic" / name).exists()
    again = rt.create_topic(name, channels=2, store=str(store))
    try:
        assert [channel.size for channel in again.describe().channels] == [0, 0]
        assert again.groups() == []
    finally:
        again.destroy()


@pytest.mark.slow
def test_a_channel_killed_after_a_users_store_was_removed_never_serves_its_topic_again(
    ray_session: None, unique_name, tmp_path: Path
) -> None:
    """A user's store (a factory's, with ``destroy``): the coordinator marks it
    destroyed and has it removed; the channel is SIGKILLed before it is killed. It
    restarts over an empty store, which cannot say the topic was destroyed (a channel
    that crashed before its first write sees the same): it serves nothing and writes
    nothing, and a topic made of the name over the store, after every actor went (the
    destroy never finished), is a new one. Before, the channel served under the old
    topic's id and wrote its record into the empty store, and that topic was reopened."""
    root = str(tmp_path)
    name = unique_name("users-killed")
    topic = rt.create_topic(name, channels=1, store=_factory(root, True), groups=["g"])
    publish_all(topic, ["old-0", "old-1"])
    _control(topic, 0, MarkDestroyed())
    _control(topic, 0, RemoveStore())
    assert os.listdir(root) == []
    old = topic.describe().channels[0]
    os.kill(old.pid, signal.SIGKILL)
    deadline = time.monotonic() + TIMEOUT * 2
    while (now := topic.describe().channels[0]).pid == old.pid:  # until it restarted
        assert time.monotonic() < deadline, now
        time.sleep(0.2)
    with topic.publisher() as publisher, pytest.raises(rt.TopicNotFoundError):
        publisher.publish("late").result(timeout=TIMEOUT)
    assert os.listdir(root) == []  # nothing written over the removed store
    stop_every_actor(topic)
    again = rt.create_topic(name, channels=1, store=_factory(root, True))
    try:
        assert again.topic_id != topic.topic_id
        assert (again.describe().channels[0].tail, again.groups()) == (-1, [])
    finally:
        again.destroy()


# -- reopening -------------------------------------------------------------------------------


def test_a_topic_reopened_after_every_actor_is_gone_has_everything_under_its_own_id(
    ray_session: None, ray_cluster: str, unique_name, tmp_path: Path
) -> None:
    store = str(tmp_path / "store")
    name = unique_name("reopened")
    topic = rt.create_topic(name, channels=2, store=store, groups=["g"])
    key_0, key_1 = key_for(0, 2), key_for(1, 2)
    with topic.publisher() as publisher:
        statuses = [publisher.publish(i, key=key_0 if i < 5 else key_1) for i in range(10)]
        saved = str(statuses[7].result().position)  # a position kept by the user, as text
    with topic.subscriber(group="g", complete_on_empty=True) as member:
        elements = {element.value: element for element in member}
        assert elements[2].commit().status is rt.CommitStatus.COMMITTED  # 0..2 on channel 0
    committed = topic.describe().groups["g"].committed
    sizes = [channel.size for channel in topic.describe().channels]
    assert sizes == [2, 5]  # retain=False: 0..2, committed by the only group, are gone
    stop_every_actor(topic)

    # The cluster came back; the store did not move. Same settings, no groups named.
    again = rt.create_topic(name, channels=2, store=store)
    try:
        assert again.topic_id == topic.topic_id
        assert again.groups() == ["g"] and again.describe().groups["g"].committed == committed
        assert [channel.size for channel in again.describe().channels] == sizes
        # A position saved before names the topic still.
        with again.subscriber(start="earliest", complete_on_empty=True) as reader:
            reader.seek(1, rt.Position.parse(saved))
            read = {0: [], 1: []}  # receive_batch answers from whichever channel is ready
            for element in reader:
                read[element.channel].append(element.value)
            assert read == {0: [3, 4], 1: [8, 9]}
        # Another job joins the group: it resumes after the commits.
        report = _another_job(ray_cluster, tmp_path, name, [], "g")
        assert sorted(report["received"]) == [3, 4, 5, 6, 7, 8, 9]
    finally:
        again.destroy()


def test_reopening_with_other_settings_is_refused_naming_them_and_changes_nothing(
    ray_session: None, unique_name, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    name = unique_name("settings")
    made = {"channels": 2, "capacity": 100, "retain": True, "ttl": None, "overflow": "block"}
    topic = rt.create_topic(name, store=str(root), groups=["g"], **made)
    _fed(topic)
    stop_every_actor(topic)
    before = _files(root)
    # Every fixed setting differs in one of these, and each refusal must name exactly
    # the ones that differ: fewer channels, more (one without a record) with another
    # ttl, and the same channels with every other fixed setting changed. (Each refused
    # create starts and stops the topic's actors: one per setting cost 7 of them.)
    refused = [
        {"channels": 1},
        {"channels": 3, "ttl": 60.0},
        {"capacity": 50, "retain": False, "overflow": "fail"},
    ]
    for other in refused:
        asked = {**made, **other}
        with pytest.raises(rt.TopicSettingsError) as error:
            rt.create_topic(name, store=str(root), **asked)
        assert error.value.differences == {key: (made[key], asked[key]) for key in other}, other
        for key in other:
            assert f"{key}={made[key]!r}" in str(error.value)
        # Nothing was created: no actor, no name, not a byte of the store changed.
        assert name not in rt.list_topics() and _no_actor_named(name, 3)
        assert _files(root) == before, other
    # The settings it was made with (and ones that are not fixed) reopen it whole.
    again = rt.create_topic(name, store=str(root), sync="write", placement="pack", **made)
    try:
        assert again.topic_id == topic.topic_id and again.groups() == ["g"]
        assert _everything(again) == list(range(30))
    finally:
        again.destroy()
