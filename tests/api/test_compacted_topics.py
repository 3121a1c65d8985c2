"""Compacted topics against a real Ray (DESIGN 5.10): keys required, deletes as
tombstones, and Kafka's four guarantees of compaction."""

from __future__ import annotations

from collections.abc import Callable

import raytopic as rt
from raytopic.routing import channel_for_key

from tests.topic_helpers import TIMEOUT, get


def _all(subscriber: rt.Subscriber) -> list[rt.Element]:
    got: list[rt.Element] = []
    while batch := get(subscriber.receive_batch(1000)):
        got.extend(batch)
    return got


def test_a_delete_is_an_element_of_its_key_whose_value_is_none(
    make_topic: Callable[..., rt.Topic],
) -> None:
    topic = make_topic(channels=2, compaction=rt.Compaction())
    assert topic.config.retain and topic.config.compaction == rt.Compaction()
    with topic.publisher() as publisher:
        publisher.publish({"eur": 3.5}, key="a1")
        status = publisher.delete("a1").result(timeout=TIMEOUT)
        publisher.delete(b"b7")
    assert status.channel == channel_for_key("a1", 2)  # where the key's values go
    with topic.subscriber(start="earliest", complete_on_empty=True) as subscriber:
        got = {(e.key, repr(e.value)) for e in _all(subscriber)}
    assert got == {("a1", "{'eur': 3.5}"), ("a1", "None"), (b"b7", "None")}
