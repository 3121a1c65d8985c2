"""Keys kept with every element (docs/guides/publish.md), against a real Ray: ``Element.key`` on
every way in (publish, publish_batch, a transaction, Arrow rows) and out (receive,
iteration, a group, a ring buffer read back through a store restart, read_topic)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import ray

import raytopic as rt
import raytopic.data as rd

from tests.topic_helpers import (
    TIMEOUT,
    drain_group,
    get,
    kill_channel,
    module_topic,
    next_sequences,
    serving_again,
)

# Tests that read only what they publish (through a subscriber made first, at the latest
# position) or publish nothing share these (each topic starts an actor per channel and a
# coordinator); the others read the whole topic or restart it, and make their own.
one_channel = module_topic(channels=1)
two_channels = module_topic(channels=2)


def _all(subscriber: rt.Subscriber) -> list[rt.Element]:
    got: list[rt.Element] = []
    while batch := get(subscriber.receive_batch(100)):
        got.extend(batch)
    return got


def test_every_element_keeps_the_key_it_was_published_with(
    make_topic: Callable[..., rt.Topic],
) -> None:
    topic = make_topic(channels=3, groups=["g"])
    with topic.publisher() as publisher:
        publisher.publish({"n": 0}, key="a")
        publisher.publish({"n": 1})  # no key: round robin, keyed None
        publisher.publish({"n": 2}, key=b"\x00b")
        publisher.publish({"n": 3}, key=np.int64(7))  # kept as the int 7
        publisher.publish({"n": 4}, key=bytearray(b"c"))  # kept as bytes
        publisher.publish({"n": 5}, key=True)
        get(publisher.publish_batch([{"n": 6}, {"n": 7}, {"n": 8}], keys=["x", None, 9]))
    expected = {0: "a", 1: None, 2: b"\x00b", 3: 7, 4: b"c", 5: True, 6: "x", 7: None, 8: 9}
    with topic.subscriber(start="earliest", complete_on_empty=True) as anonymous:
        received = _all(anonymous)
    assert {e.value["n"]: e.key for e in received} == expected
    assert type(next(e for e in received if e.value["n"] == 3).key) is int
    members = drain_group(topic, "g", len(expected))  # a group's member
    assert {e.value["n"]: e.key for e in members} == expected
    with topic.subscriber(start="earliest", complete_on_empty=True) as iterating:
        assert {e.value["n"]: e.key for e in iterating} == expected
    single = get(topic.subscriber(start="earliest").receive())  # a receive of one
    assert single.key == expected[single.value["n"]]


def test_a_converter_and_a_filter_keep_the_keys(one_channel: rt.Topic) -> None:
    topic = one_channel
    with topic.subscriber(
        start="latest",
        complete_on_empty=True,
        filter=lambda v: v % 2 == 0,
        converter=lambda v: v * 10,
    ) as subscriber:
        with topic.publisher() as publisher:
            for n in range(6):
                publisher.publish(n, key=f"k{n}")
        got = _all(subscriber)
    assert [(e.value, e.key) for e in got] == [(0, "k0"), (20, "k2"), (40, "k4")]


def test_a_transactions_elements_keep_their_keys(two_channels: rt.Topic) -> None:
    topic = two_channels
    with topic.subscriber(start="latest", complete_on_empty=True) as subscriber:
        with rt.transactions(f"keys-{topic.topic_id}") as txs, txs.begin() as tx:
            tx.publish(topic, "one", key="k1")
            tx.publish_batch(topic, ["two", "three"], keys=["k2", None])
        got = {e.value: e.key for e in _all(subscriber)}
    assert got == {"one": "k1", "two": "k2", "three": None}


def test_keys_survive_a_channel_restart_from_its_store(
    make_topic: Callable[..., rt.Topic], tmp_path: Path
) -> None:
    topic = make_topic(
        channels=1,
        store=str(tmp_path),
        capacity=4,
        overflow="overwrite",
        store_retention={"seconds": 3600},  # what the ring dropped is read from the store
        groups=["g"],  # from the first element: the group reads what the ring dropped
    )
    with topic.publisher() as publisher:
        for n in range(10):  # more than the ring holds: the first six are read from the store
            publisher.publish(n, key=None if n % 3 == 0 else f"k{n}")
        get(publisher.publish_batch([10, 11], keys=[b"b", 12]))
    old_epoch = kill_channel(topic, 0)
    serving_again(topic, 0, old_epoch, 30.0)
    got = [(e.value, e.key) for e in drain_group(topic, "g", 12)]
    expected = [(n, None if n % 3 == 0 else f"k{n}") for n in range(10)]
    assert got == [*expected, (10, b"b"), (11, 12)]


def test_read_topic_has_a_key_column_and_arrow_rows_keep_their_key_column(
    make_topic: Callable[..., rt.Topic],
) -> None:
    topic = make_topic(channels=2, groups=["g"])
    rows = pa.table({"sku": ["a1", "b2", None], "eur": [1.5, 2.5, 3.5]})
    assert rd.write_topic(ray.data.from_arrow(rows), topic, key="sku").rows == 3
    with topic.publisher() as publisher:
        publisher.publish({"sku": "c3", "eur": 4.5}, key="c3").result(timeout=TIMEOUT)
        publisher.publish({"sku": "d4", "eur": 5.5}).result(timeout=TIMEOUT)
    table = pa.concat_tables(
        [ray.get(ref) for ref in rd.read_topic(topic).to_arrow_refs()],
        promote_options="permissive",
    )
    assert table.column_names[-4:] == ["key", "channel", "position", "timestamp"]
    assert {row["eur"]: row["key"] for row in table.to_pylist()} == {
        1.5: "a1",
        2.5: "b2",
        3.5: None,  # a null key routes round robin and keys nothing
        4.5: "c3",
        5.5: None,
    }
    elements = drain_group(topic, "g", 5)
    assert {e.value["eur"]: e.key for e in elements} == {
        1.5: "a1",
        2.5: "b2",
        3.5: None,
        4.5: "c3",
        5.5: None,
    }


def test_a_key_of_a_refused_type_sends_nothing(one_channel: rt.Topic) -> None:
    topic = one_channel
    before = next_sequences(topic)
    with topic.publisher() as publisher:
        with pytest.raises(rt.InvalidTypeError):
            publisher.publish(1, key=1.5)
        with pytest.raises(rt.InvalidTypeError):
            publisher.publish_batch([1, 2], keys=["a", object()])
    assert next_sequences(topic) == before  # nothing appended


def test_an_int_key_past_64_bits_sends_nothing_and_the_bounds_read_back(
    make_topic: Callable[..., rt.Topic],
) -> None:
    # 2**200 went in and failed read_topic later (Arrow's OverflowError from a Ray
    # Data task); 10**5000 raised a raw ValueError (Python writes no text for it).
    topic = make_topic(channels=2)
    with topic.publisher() as publisher:
        for key in (2**63, -(2**63) - 1, 2**200, 10**5000, np.uint64(2**64 - 1)):
            with pytest.raises(rt.InvalidArgumentError, match="signed 64-bit"):
                publisher.publish(1, key=key)
            with pytest.raises(rt.InvalidArgumentError, match="signed 64-bit"):
                publisher.publish_batch([1, 2], keys=["a", key])
        get(publisher.publish_batch([1, 2], keys=[2**63 - 1, -(2**63)]))
    table = pa.concat_tables([ray.get(ref) for ref in rd.read_topic(topic).to_arrow_refs()])
    assert sorted(table.column("key").to_pylist()) == [-(2**63), 2**63 - 1]
