"""Table views (``Topic.table()``, docs/guides/compacted-topics.md) against a real Ray:
whole when made, ``refresh()`` that waits for what it promises, listeners in order per
key, views made in tasks and actors and passed to them, bad input, and
``raytopic.data.read_table``."""

from __future__ import annotations

import gc
import logging
import os
import pickle
import signal
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ray

import raytopic as rt
import raytopic.data as rd
from raytopic.client.bulk import ChannelRange, ChannelReader

from tests.topic_helpers import TIMEOUT, get, module_topic

# The bad-timeout cases and the tests of a view's own life (closing, collected, a listener
# that refreshes) share one topic (each topic starts an actor per channel and a
# coordinator): each opens a view of it, closes it, and checks no reader is left; only the
# listener's test publishes (one key), and a listener hears only what comes after it.
one_channel = module_topic(channels=1)

KEYS, VERSIONS = 200, 5
"""The shared keyed table's keys, and the versions of each (``keyed_table``)."""


def _publish_versions(topic: rt.Topic, keys: int, versions: int, *, prefix: str = "k") -> None:
    """Every key's versions 0..versions-1, in order, acknowledged on return."""
    with topic.publisher() as publisher:
        futures = [
            publisher.publish({"id": f"{prefix}{k}", "v": v}, key=f"{prefix}{k}")
            for v in range(versions)
            for k in range(keys)
        ]
    for future in futures:
        future.result(timeout=TIMEOUT)


def _latest(keys: int, versions: int, prefix: str = "k") -> dict[str, dict[str, Any]]:
    return {f"{prefix}{k}": {"id": f"{prefix}{k}", "v": versions - 1} for k in range(keys)}


@ray.remote(num_cpus=0)  # waits on raytopic, not on a CPU slot another test holds
def _publish_in_a_task(topic: rt.Topic, keys: int, versions: int, prefix: str) -> int:
    _publish_versions(topic, keys, versions, prefix=prefix)
    return keys * versions


def _reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("raytopic-table-")]


keyed_topic = module_topic(channels=3, retain=True)


@pytest.fixture(scope="module")
def keyed_table(keyed_topic: rt.Topic) -> rt.Topic:
    """Three channels holding KEYS keys' VERSIONS versions each and a value without a
    key; nobody publishes to it after. Two tests only read it (a view of it, and
    read_table of it), so they share it, made and fed once (a topic is an actor per
    channel and a coordinator)."""
    _publish_versions(keyed_topic, keys=KEYS, versions=VERSIONS)
    with keyed_topic.publisher() as publisher:
        publisher.publish("no key: not a table's")
    return keyed_topic


# -- whole when made -----------------------------------------------------------------------


def test_a_view_holds_every_keys_latest_value_when_it_returns(keyed_table: rt.Topic) -> None:
    topic = keyed_table  # 200 keys' versions 0..4 and a value without a key
    with topic.table() as view:
        assert dict(view.items()) == _latest(200, 5)
        assert len(view) == 200 and sorted(view.keys()) == sorted(_latest(200, 5))
        assert sorted(view, key=str) == sorted(view.keys(), key=str)
        assert view.get("k7") == view["k7"] == {"id": "k7", "v": 4} and "k7" in view
        assert view.get("nope") is None and view.get("nope", 0) == 0 and "nope" not in view
        with pytest.raises(KeyError):
            view["nope"]
        assert {v["v"] for v in view.values()} == {4}
        assert repr(view) == f"TableView({topic.name!r}, 200 keys, active)"


def test_a_view_made_while_publishing_holds_everything_before_it_and_misses_nothing_after(
    make_topic: Callable[..., rt.Topic],
) -> None:
    topic = make_topic(channels=2)  # channels read while others are published to: two do
    acknowledged: dict[str, int] = {}
    version = [0]

    def publish(stop: threading.Event) -> None:
        with topic.publisher(linger=0.001) as publisher:
            while not stop.is_set():
                futures = [
                    (k, publisher.publish({"v": version[0]}, key=f"k{k}")) for k in range(50)
                ]
                for k, future in futures:
                    future.result(timeout=TIMEOUT)
                    acknowledged[f"k{k}"] = version[0]
                version[0] += 1

    for _ in range(3):
        stop = threading.Event()
        publisher = threading.Thread(target=publish, args=(stop,))
        publisher.start()
        try:
            floor = version[0] + 3
            while version[0] < floor:
                stop.wait(0.01)
            before = dict(acknowledged)
            view = topic.table()  # publishing goes on while it is made ...
        finally:
            stop.set()  # ... and stops at once: its last values came while it was made
            publisher.join(timeout=TIMEOUT)
        with view:
            held = {key: value["v"] for key, value in view.items()}
            behind = {key: (held.get(key), v) for key, v in before.items() if held.get(key, -1) < v}
            assert behind == {}, f"acknowledged before table() but not in it: {behind}"
            view.refresh()
            assert dict(view.items()) == {key: {"v": v} for key, v in acknowledged.items()}


def test_a_view_of_an_empty_topic_is_empty_and_goes_live(
    make_topic: Callable[..., rt.Topic],
) -> None:
    topic = make_topic(channels=1)  # empty, then live: no second channel needed
    with topic.table() as view:
        assert len(view) == 0 and view.items() == []
        view.refresh()
        _publish_versions(topic, keys=3, versions=1)
        view.refresh()
        assert dict(view.items()) == _latest(3, 1)


def test_a_bulk_read_passes_over_what_the_ring_dropped_meanwhile(
    make_topic: Callable[..., rt.Topic],
) -> None:
    # Planned from 0, read after the ring of 10 overwrote 0..19: a view's bootstrap
    # on a ring that moves on under it reads what is there, as a reader starting now.
    topic = make_topic(channels=1, capacity=10, overflow="overwrite")
    _publish_versions(topic, keys=30, versions=1)
    reader = ChannelReader(topic, [ChannelRange(0, 0, 25), ChannelRange(0, 25, 30)])
    read = []
    while (chunks := reader.next_chunks(TIMEOUT)) is not None:
        read += [position for chunk in chunks for position in chunk.sequence_list()]
    assert read == list(range(20, 30))
    gone = ChannelReader(topic, [ChannelRange(0, 0, 15)])  # all of it overwritten
    assert gone.next_chunks(TIMEOUT) is None
    with topic.table() as view:
        assert dict(view.items()) == {f"k{k}": {"id": f"k{k}", "v": 0} for k in range(20, 30)}


# -- deletes ----------------------------------------------------------------------------------


def test_deleted_keys_are_never_entries_and_listeners_hear_none(
    make_topic: Callable[..., rt.Topic],
) -> None:
    topic = make_topic(channels=2, compaction=rt.Compaction())
    _publish_versions(topic, keys=30, versions=2)
    with topic.publisher() as publisher:
        for k in range(10):  # deleted before the view: never seen by it
            publisher.delete(f"k{k}")
        publisher.delete("never-published")
        publisher.publish({"id": "k0", "v": 7}, key="k0")  # back after its delete
    heard: list[tuple[str, Any]] = []
    with topic.table() as view:
        expected = {**_latest(30, 2), "k0": {"id": "k0", "v": 7}}
        for k in range(1, 10):
            del expected[f"k{k}"]
        assert dict(view.items()) == expected and len(view) == 21
        assert "k1" not in view and view.get("k1") is None and "k1" not in list(view)
        assert None not in view.values()
        view.listen(lambda key, value: heard.append((key, value)))
        with topic.publisher() as publisher:
            publisher.delete("k20")
            publisher.delete("k1")  # not held: no change
            publisher.publish({"id": "k1", "v": 8}, key="k1")
            publisher.delete("k1")
        view.refresh()
        assert "k20" not in view and "k1" not in view and len(view) == 20
        assert None not in view.values()
    # In order per key (the contract); k20 and k1 may live on different channels.
    assert sorted(heard, key=lambda change: change[0] != "k20") == [
        ("k20", None),
        ("k1", {"id": "k1", "v": 8}),
        ("k1", None),
    ]
    rows = rd.read_table(topic).to_pandas()
    assert sorted(rows["key"]) == sorted(k for k in expected if k != "k20")


def test_a_view_of_a_compacted_topic_reads_the_survivors_across_the_gaps(
    make_topic: Callable[..., rt.Topic], tmp_path: Path, wait_until
) -> None:
    topic = make_topic(channels=2, store=str(tmp_path), compaction=rt.Compaction(max_lag_s=0.3))
    _publish_versions(topic, keys=40, versions=10)
    with topic.publisher() as publisher:
        for k in range(5):
            publisher.delete(f"k{k}")
    deleted = {f"k{k}" for k in range(5)}
    expected = {key: value for key, value in _latest(40, 10).items() if key not in deleted}

    def compacted() -> bool:  # every channel's pass covered everything published
        return all(
            c.compaction is not None and c.compaction["point"] > c.tail
            for c in topic.describe().channels
        )

    wait_until(compacted, timeout=TIMEOUT)
    stats = topic.describe().channels
    assert sum(c.size for c in stats) < 400  # gaps: far fewer elements than positions
    with topic.table() as view:
        assert dict(view.items()) == expected
        _publish_versions(topic, keys=3, versions=11)  # live after the gaps
        view.refresh()
        assert [view[f"k{k}"] for k in range(3)] == [{"id": f"k{k}", "v": 10} for k in range(3)]
    rows = rd.read_table(topic).to_pandas()
    assert len(rows) == 38 and sorted(rows["key"]) == sorted({*expected, "k0", "k1", "k2"})
    # Each row where its value is: the survivor's own position and time.
    with topic.subscriber(start="earliest", complete_on_empty=True) as reader:
        last = {e.key: (e.channel, e.sequence, e.timestamp) for e in reader}
    assert {
        row.key: (row.channel, row.position, row.timestamp.to_pydatetime())
        for row in rows.itertuples()
    } == {key: last[key] for key in rows["key"]}


# -- refresh ---------------------------------------------------------------------------------


def test_refresh_returns_only_once_everything_published_before_it_is_applied(
    make_topic: Callable[..., rt.Topic],
) -> None:
    topic = make_topic(channels=2)  # a refresh waits for every channel: two are several
    with topic.table() as view:
        for round_ in range(3):
            # Published by another process: the view learns of it only through its reader.
            prefix = f"r{round_}-"
            get(_publish_in_a_task.remote(topic, 500, 8, prefix))
            view.refresh()
            held = {k: v for k, v in view.items() if k.startswith(prefix)}
            assert held == _latest(500, 8, prefix), f"round {round_}: {len(held)} of 500 keys"


def test_refresh_names_the_channels_behind_when_it_times_out(
    make_topic: Callable[..., rt.Topic],
) -> None:
    topic = make_topic(channels=1)  # its one key is on one channel: the one behind
    with topic.table() as view:
        blocked = threading.Event()
        view.listen(lambda key, value: blocked.wait(TIMEOUT))  # the view's thread stops here
        with topic.publisher() as publisher:
            publisher.publish({"v": 1}, key="k").result(timeout=TIMEOUT)
        with pytest.raises(TimeoutError, match=r"not refreshed within 2.0 s \(channel: \(applied"):
            view.refresh(timeout=2.0)
        blocked.set()
        view.refresh()
        assert view["k"] == {"v": 1}


# -- listeners -------------------------------------------------------------------------------


def test_listeners_hear_every_later_change_in_order_per_key(
    make_topic: Callable[..., rt.Topic],
) -> None:
    topic = make_topic(channels=2)  # keys on several channels; the order is per key
    _publish_versions(topic, keys=20, versions=2)  # before: not a change a listener hears
    heard: dict[str, list[int]] = defaultdict(list)
    with topic.table() as view:
        view.listen(lambda key, value: heard[key].append(value["v"]))
        # Two processes at once, each its own keys, many versions each.
        get(
            [
                _publish_in_a_task.remote(topic, 20, 30, "k"),
                _publish_in_a_task.remote(topic, 20, 30, "j"),
            ]
        )
        view.refresh()
    assert set(heard) == {f"{p}{k}" for p in "kj" for k in range(20)}
    for key, versions in heard.items():
        assert versions == list(range(30)), key


@pytest.mark.parametrize("raised", [RuntimeError, SystemExit])
def test_a_listener_that_raises_costs_only_itself(
    make_topic: Callable[..., rt.Topic],
    caplog: pytest.LogCaptureFixture,
    raised: type[BaseException],
) -> None:
    # SystemExit on a thread ends it without a word (Python's threading): caught too.
    topic = make_topic(channels=1)  # what is checked is the listeners, not the channels
    heard: list[tuple[str, Any]] = []

    def broken(key: str, value: Any) -> None:
        raise raised(f"broken listener on {key}")

    with topic.table() as view, caplog.at_level(logging.ERROR, logger="raytopic.client.table"):
        view.listen(broken)
        view.listen(lambda key, value: heard.append((key, value)))
        _publish_versions(topic, keys=5, versions=2)
        view.refresh()
        assert sorted((key, value["v"]) for key, value in heard) == [
            (f"k{k}", v) for k in range(5) for v in range(2)
        ]
        assert dict(view.items()) == _latest(5, 2) and view.is_active
    failures = [r for r in caplog.records if "listener" in r.getMessage()]
    assert len(failures) == 10 and "broken listener on" in str(failures[0].exc_info[1])


def test_a_listener_that_refreshes_is_told_it_would_wait_for_itself(one_channel: rt.Topic) -> None:
    topic = one_channel  # shared: a listener hears only what comes after it (one publish here)
    errors: list[Exception] = []
    with topic.table() as view:

        def refreshing(key: str, value: Any) -> None:
            try:
                view.refresh()
            except rt.InvalidArgumentError as error:
                errors.append(error)

        view.listen(refreshing)
        _publish_versions(topic, keys=1, versions=1)
        view.refresh()
    assert len(errors) == 1 and "wait for itself" in str(errors[0])


# -- handles elsewhere -----------------------------------------------------------------------


@ray.remote(num_cpus=0)
def _items_of(view: rt.TableView) -> dict[str, Any]:
    with view:  # unpickled here: a view of this process
        return dict(view.items())


@ray.remote(num_cpus=0)
def _made_in_a_task(topic: rt.Topic, key: str) -> tuple[Any, Any]:
    with topic.table() as view:
        before = view.get(key)
        _publish_versions(topic, 1, 1, prefix="task-made-")
        view.refresh()
        return before, view.get("task-made-0")


@ray.remote
class _Holder:
    """An actor keeping a view of its own, and what its listener heard."""

    def __init__(self, topic: rt.Topic) -> None:
        self.view = topic.table()
        self.heard: list[tuple[str, Any]] = []
        self.view.listen(lambda key, value: self.heard.append((key, value)))

    def latest(self) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
        self.view.refresh()
        return dict(self.view.items()), list(self.heard)

    def close(self) -> None:
        self.view.close()


def test_a_view_passed_to_a_task_is_a_whole_working_view_there(
    make_topic: Callable[..., rt.Topic],
) -> None:
    topic = make_topic(channels=1)  # what is checked is the view in another process
    _publish_versions(topic, keys=30, versions=3)
    with topic.table() as view:
        _publish_versions(topic, keys=30, versions=4)  # after the view: the copy has them too
        assert get(_items_of.remote(view)) == _latest(30, 4)
        assert get(_made_in_a_task.remote(topic, "k3")) == (
            {"id": "k3", "v": 3},
            {"id": "task-made-0", "v": 0},
        )
        view.refresh()
        assert view.get("task-made-0") == {"id": "task-made-0", "v": 0}


def test_a_view_kept_by_an_actor_stays_live_there(make_topic: Callable[..., rt.Topic]) -> None:
    topic = make_topic(channels=1)  # what is checked is the view in an actor
    _publish_versions(topic, keys=10, versions=2)
    holder = _Holder.remote(topic)
    try:
        assert get(holder.latest.remote()) == (_latest(10, 2), [])  # made, and bootstrapped
        _publish_versions(topic, keys=10, versions=3)
        items, heard = get(holder.latest.remote())
        assert items == _latest(10, 3)
        assert sorted((key, value["v"]) for key, value in heard) == [
            (f"k{k}", v) for k in range(10) for v in range(3)
        ]
    finally:
        get(holder.close.remote())
        ray.kill(holder)


def test_a_pickled_view_is_a_view_of_its_own(make_topic: Callable[..., rt.Topic]) -> None:
    topic = make_topic(channels=1)
    _publish_versions(topic, keys=4, versions=1)
    view = topic.table()
    copy = pickle.loads(pickle.dumps(view))
    copy.close()
    assert dict(view.items()) == _latest(4, 1) and view.is_active
    view.close()
    with pytest.raises(rt.ClosedError):
        copy.get("k1")


def test_a_view_nobody_refers_to_closes_itself(one_channel: rt.Topic, wait_until) -> None:
    topic = one_channel  # shared: it publishes nothing and checks only its view's thread
    before = set(_reader_threads())
    view = topic.table()
    (thread,) = set(_reader_threads()) - before
    del view
    gc.collect()
    wait_until(lambda: not thread.is_alive(), timeout=TIMEOUT)


# -- closing, destroying, bad input ----------------------------------------------------------


def test_a_closed_view_refuses_every_call_but_close(one_channel: rt.Topic) -> None:
    topic = one_channel  # shared: it publishes nothing; its view is the topic's only reader
    view = topic.table()
    (thread,) = [t for t in _reader_threads() if t.name == f"raytopic-table-{topic.name}"]
    view.close()
    view.close()  # idempotent
    assert not thread.is_alive() and not view.is_active
    for call in (
        lambda: view.get("k"),
        lambda: view["k"],
        lambda: "k" in view,
        lambda: len(view),
        view.keys,
        view.values,
        view.items,
        view.refresh,
        lambda: view.listen(print),
    ):
        with pytest.raises(rt.ClosedError, match="the table view is closed"):
            call()
    assert "closed" in repr(view)


def test_a_destroyed_topic_makes_every_call_raise_topic_not_found(
    make_topic: Callable[..., rt.Topic], wait_until
) -> None:
    topic = make_topic(channels=1)  # its reader hears of the destroy at its one channel
    _publish_versions(topic, keys=2, versions=1)
    view = topic.table()
    # Destroyed by another process: the view's reader hears of it.
    get(ray.remote(lambda t: t.destroy()).remote(topic))
    wait_until(lambda: not view.is_active, timeout=TIMEOUT)
    for call in (lambda: view.get("k0"), view.items, view.refresh, lambda: len(view)):
        with pytest.raises(rt.TopicNotFoundError, match="was destroyed"):
            call()
    view.close()  # quietly
    with pytest.raises(rt.TopicNotFoundError):
        topic.table()


@pytest.mark.parametrize(
    ("timeout", "error"),
    [
        ("1", rt.InvalidTypeError),
        (0, rt.InvalidArgumentError),
        (-1.0, rt.InvalidArgumentError),
        (float("nan"), rt.InvalidArgumentError),
        (float("inf"), rt.InvalidArgumentError),
        (True, rt.InvalidTypeError),
    ],
)
def test_a_bad_timeout_is_refused_and_opens_nothing(
    one_channel: rt.Topic, timeout: Any, error: type[Exception]
) -> None:
    topic = one_channel
    before = set(_reader_threads())
    with pytest.raises(error, match="timeout"):
        topic.table(timeout=timeout)
    with topic.table() as view:
        with pytest.raises(error, match="timeout"):
            view.refresh(timeout=timeout)
        with pytest.raises(rt.InvalidTypeError, match="listen needs a callable"):
            view.listen("not a function")  # type: ignore[arg-type]
    assert set(_reader_threads()) == before


def test_a_bootstrap_past_its_timeout_raises_and_leaves_no_reader(
    make_topic: Callable[..., rt.Topic],
) -> None:
    # Channel 1 is stopped (SIGSTOP), so the bootstrap cannot be whole in time however
    # fast the machine answers (a timeout of 1e-9 s was met once: this process was
    # descheduled between its calls and their gets, and every reply was in by then).
    topic = make_topic(channels=2)
    _publish_versions(topic, keys=100, versions=10)
    stopped = topic.describe().channels[1].pid
    before = set(_reader_threads())
    os.kill(stopped, signal.SIGSTOP)
    try:
        with pytest.raises(TimeoutError, match=r"not whole within 0\.5 s"):
            topic.table(timeout=0.5)
    finally:
        os.kill(stopped, signal.SIGCONT)
    assert set(_reader_threads()) == before
    with topic.table(timeout=TIMEOUT) as view:  # the channel answers again
        assert len(view) == 100


# -- read_table ------------------------------------------------------------------------------


def test_read_table_is_the_views_table_as_a_dataset(keyed_table: rt.Topic) -> None:
    topic = keyed_table  # 200 keys' versions 0..4 and a value without a key
    rows = rd.read_table(topic).to_pandas()
    assert list(rows.columns) == ["key", "id", "v", "channel", "position", "timestamp"]
    assert len(rows) == KEYS and set(rows["v"]) == {VERSIONS - 1}
    with topic.table() as view:
        assert {row.key: {"id": row.id, "v": row.v} for row in rows.itertuples()} == dict(
            view.items()
        )
    # Where each value is: the position of the key's latest element.
    with topic.subscriber(start="earliest", complete_on_empty=True) as reader:
        last = {e.key: (e.channel, e.sequence) for e in reader if e.key is not None}
    assert {row.key: (row.channel, row.position) for row in rows.itertuples()} == last


def test_read_table_gives_other_values_as_a_value_column_and_keeps_a_field_named_key(
    make_topic: Callable[..., rt.Topic],
) -> None:
    numbers, named = make_topic(channels=1), make_topic(channels=1)
    with numbers.publisher() as publisher:
        for n in range(3):
            publisher.publish(n * 10, key=f"n{n}")
        publisher.publish(99, key="n0")
    rows = rd.read_table(numbers).to_pandas().sort_values("key")
    assert list(rows.columns) == ["key", "value", "channel", "position", "timestamp"]
    assert list(zip(rows.key, rows.value, strict=True)) == [("n0", 99), ("n1", 10), ("n2", 20)]
    with named.publisher() as publisher:
        publisher.publish({"key": "a field", "n": 1}, key="k")
    rows = rd.read_table(named).to_pandas()
    assert list(rows.columns) == ["_key", "key", "n", "channel", "position", "timestamp"]
    assert (rows["_key"][0], rows["key"][0]) == ("k", "a field")


def test_read_table_of_a_topic_without_keys_is_empty(make_topic: Callable[..., rt.Topic]) -> None:
    topic = make_topic(channels=1)
    assert rd.read_table(topic).count() == 0
    with topic.publisher() as publisher:
        publisher.publish("no key")
    dataset = rd.read_table(topic)
    assert dataset.count() == 0
    with pytest.raises(rt.InvalidTypeError, match="topic"):
        rd.read_table(topic.name)  # type: ignore[arg-type]
