"""Anonymous subscribers against real channel actors: start, receive, ordering, filters,
iteration, seeking, positions, closing and stale reads."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import ray

import raytopic as rt
from raytopic.core.naming import channel_actor_name

from tests.topic_helpers import key_for, module_topic, next_sequences, publish_all

NOT_YET = 0.3
"""Seconds a test gives a waiting receive to (wrongly) complete before it publishes."""


# Topics for tests that read only what they themselves publish, from the latest
# position, and count sequences from next_sequences: shared to save actors. Tests about
# where a subscriber starts, heads and tails, "earliest" reads, capacity, expiry or a
# channel's death keep a topic of their own.
shared_topic = module_topic(channels=1)
shared_four = module_topic(channels=4)


def _even(value: int) -> bool:
    return value % 2 == 0


def _with_pid(value: int) -> tuple[int, int]:
    return value, os.getpid()


def _publish_at_once(topic: rt.Topic, values: list[Any], key: Any) -> list[rt.PublishStatus]:
    """Publish ``values`` to ``key``'s channel in ONE append (a receive sees all or none)."""
    with topic.publisher() as publisher:
        return ray.get(publisher.publish_batch(values, keys=[key] * len(values)), timeout=30)


def _is_dead(actor: Any) -> bool:
    try:
        ray.get(actor.__ray_ready__.remote(), timeout=30)
    except ray.exceptions.RayActorError:
        return True
    return False


def _drain(subscriber: rt.Subscriber) -> list[rt.Element]:
    """Everything a complete_on_empty subscriber can receive now."""
    received: list[rt.Element] = []
    while batch := ray.get(subscriber.receive_batch(100), timeout=30):
        received.extend(batch)
    return received


# -- where a subscriber starts -------------------------------------------------------------


def test_latest_by_default_earliest_sees_retained_elements(make_topic) -> None:
    topic = make_topic(channels=1, capacity=100)
    publish_all(topic, ["old-0", "old-1"])
    latest = topic.subscriber(complete_on_empty=True)
    earliest = topic.subscriber(start="earliest", complete_on_empty=True)
    assert ray.get(latest.receive(), timeout=30) is None  # empty: None at once
    assert ray.get(latest.receive_batch(5), timeout=30) == []
    statuses = publish_all(topic, ["new"])
    ref = latest.receive()
    assert isinstance(ref, ray.ObjectRef)
    element = ray.get(ref, timeout=30)
    assert isinstance(element, rt.Element)
    assert (element.value, element.channel, element.position, element.timestamp) == (
        "new",
        statuses[0].channel,
        statuses[0].position,
        statuses[0].timestamp,
    )
    assert ray.get(latest.receive(), timeout=30) is None
    assert sorted(e.value for e in _drain(earliest)) == ["new", "old-0", "old-1"]
    latest.close()
    earliest.close()


def test_heads_tails_and_remaining_messages(make_topic) -> None:
    topic = make_topic(channels=2, capacity=10)
    subscriber = topic.subscriber(complete_on_empty=True)
    assert subscriber.channels == (0, 1) and subscriber.channel_count == 2
    assert subscriber.heads() == {0: topic.position(0, 0), 1: topic.position(1, 0)}
    assert subscriber.tails() == {0: topic.position(0, -1), 1: topic.position(1, -1)}
    assert subscriber.remaining_messages() == 0
    publish_all(topic, ["a", "b", "c"], key=key_for(0, 2))
    publish_all(topic, ["d", "e"], key=key_for(1, 2))
    assert subscriber.tails() == {0: topic.position(0, 2), 1: topic.position(1, 1)}
    assert subscriber.remaining_messages() == 5
    assert (subscriber.remaining_messages(0), subscriber.remaining_messages(1)) == (3, 2)
    taken = ray.get(subscriber.receive_batch(10))
    channel = taken[0].channel
    assert [e.value for e in taken] == [["a", "b", "c"], ["d", "e"]][channel]
    assert subscriber.heads()[channel] == topic.position(channel, len(taken))
    assert subscriber.heads()[1 - channel] == topic.position(1 - channel, 0)
    assert subscriber.remaining_messages(channel) == 0
    assert subscriber.remaining_messages() == 5 - len(taken)
    with pytest.raises(rt.InvalidArgumentError):
        subscriber.remaining_messages(2)
    # Seeking moves heads, never tails; a foreign Position changes nothing.
    before = subscriber.heads()
    with pytest.raises(rt.PositionMismatchError):
        subscriber.seek(0, topic.position(1, 1))  # another channel
    with pytest.raises(rt.PositionMismatchError):
        subscriber.seek(0, rt.Position("0123456789abcdef", 0, 1))  # another topic
    with pytest.raises(ValueError):
        subscriber.seek(0, rt.Position("0123456789abcdef", 0, 1))
    with pytest.raises(rt.InvalidArgumentError):
        subscriber.seek(2, topic.position(0, 1))  # no such channel
    with pytest.raises(rt.InvalidTypeError):
        subscriber.seek(0, 1)  # type: ignore[arg-type]
    with pytest.raises(rt.InvalidArgumentError):
        subscriber.seek_to_tail(5)
    assert subscriber.heads() == before
    assert subscriber.seek(0, topic.position(0, 0)) == topic.position(0, 0)
    assert subscriber.heads()[0] == topic.position(0, 1)
    assert subscriber.tails() == {0: topic.position(0, 2), 1: topic.position(1, 1)}
    subscriber.close()


def test_a_received_ref_stays_readable_after_the_channel_actor_dies(make_topic, wait_until) -> None:
    topic = make_topic(channels=1, capacity=10)
    big = os.urandom(300_000)  # beyond Ray's inline limit: it lives in the object store
    subscriber = topic.subscriber()
    single, batch = subscriber.receive(), subscriber.receive_batch(10)
    publish_all(topic, [big, b"small"])
    ready, _ = ray.wait([single, batch], num_returns=2, timeout=30)
    assert len(ready) == 2
    actor = ray.get_actor(channel_actor_name(topic.name, 0), namespace=topic.namespace)
    ray.kill(actor)
    wait_until(lambda: _is_dead(actor), timeout=30)
    assert ray.get(single).value == big
    assert [e.value for e in ray.get(batch)] == [b"small"]


# -- waiting and ordering ------------------------------------------------------------------


def test_a_waiting_receive_completes_when_any_channel_gets_an_element(shared_four) -> None:
    topic = shared_four  # shared: it reads from the latest position, counts from base
    base = next_sequences(topic)
    with topic.subscriber() as subscriber:
        home = subscriber._receives.host_channel  # the channel actor serving its receives
        other = (home + 1) % 4
        single, batch = subscriber.receive(), subscriber.receive_batch(5)
        ready, _ = ray.wait([single], timeout=NOT_YET)
        assert not ready  # without complete_on_empty a receive waits
        publish_all(topic, ["there"], key=key_for(other, 4))
        element = ray.get(single, timeout=30)
        assert (element.value, element.channel, element.sequence) == ("there", other, base[other])
        _publish_at_once(topic, ["here", "too"], key=key_for(home, 4))
        assert [e.value for e in ray.get(batch, timeout=30)] == ["here", "too"]

        # Pipelined receives complete in order, on a sibling channel of the home.
        refs = [subscriber.receive() for _ in range(10)]
        statuses = publish_all(topic, [f"v{i}" for i in range(10)], key=key_for(other, 4))
        elements = ray.get(refs, timeout=30)
    assert [e.value for e in elements] == [f"v{i}" for i in range(10)]
    assert [e.sequence for e in elements] == list(range(base[other] + 1, base[other] + 11))
    assert [e.position for e in elements] == [s.position for s in statuses]


# -- filters and converters -----------------------------------------------------------------


def test_filter_and_converter_run_in_the_channel_actor(shared_four) -> None:
    topic = shared_four  # shared: it reads only what it publishes, from the latest position
    subscriber = topic.subscriber(
        start="latest", filter=_even, converter=_with_pid, complete_on_empty=True
    )
    publish_all(topic, list(range(12)))
    assert subscriber.remaining_messages() == 12  # counted before filters
    elements = _drain(subscriber)
    pids = [channel.pid for channel in topic.describe().channels]
    assert sorted(e.value[0] for e in elements) == [0, 2, 4, 6, 8, 10]
    for element in elements:
        assert element.value[1] == pids[element.channel] != os.getpid()
    assert subscriber.remaining_messages() == 0
    subscriber.close()


# -- iteration ------------------------------------------------------------------------------


def test_iteration_yields_every_element_once_in_order_per_channel(make_topic) -> None:
    topic = make_topic(channels=2, capacity=100)
    statuses = publish_all(topic, list(range(40)))
    by_position = {s.position: v for v, s in enumerate(statuses)}
    # Breaking out of an iteration leaves prefetched receives behind, sometimes
    # still running; whatever they took comes next. Repeated: it is a race.
    for _ in range(12):
        subscriber = topic.subscriber(start="earliest", complete_on_empty=True)
        first = []
        for element in subscriber:
            first.append(element)
            if len(first) == 5:
                break
        after_break = ray.get(subscriber.receive(), timeout=30)  # what iteration prefetched
        rest = list(subscriber)
        seen = [*first, after_break, *rest]
        assert sorted(e.value for e in seen) == list(range(40))
        for channel in (0, 1):
            sequences = [e.sequence for e in seen if e.channel == channel]
            assert sequences == list(range(20))
        assert all(by_position[e.position] == e.value for e in seen)
        assert list(subscriber) == []
        subscriber.close()

    # An iteration abandoned while its prefetched receives wait loses nothing.
    waiting_kind = topic.subscriber()
    publish_all(topic, ["a", "b", "c"], key="abandoned")
    seen = []
    for element in waiting_kind:
        seen.append(element.value)
        if len(seen) == 3:
            break
    assert seen == ["a", "b", "c"]
    waiting = waiting_kind.receive()  # stops what the iteration left waiting
    publish_all(topic, ["d", "e"], key="abandoned")
    assert ray.get(waiting, timeout=30).value == "d"
    assert [e.value for e in ray.get(waiting_kind.receive_batch(5), timeout=30)] == ["e"]
    waiting_kind.close()


# -- seeking --------------------------------------------------------------------------------


def test_seek_to_positions_clamps_to_head_and_tail(make_topic) -> None:
    topic = make_topic(channels=2, capacity=5, overflow="overwrite")
    key = key_for(1, 2)
    publish_all(topic, list(range(8)), key=key)  # channel 1: head 3, tail 7
    subscriber = topic.subscriber(complete_on_empty=True)

    assert subscriber.seek(1, topic.position(1, 4)) == topic.position(1, 4)
    assert ray.get(subscriber.receive()).sequence == 5  # the first after the position
    assert subscriber.heads() == {0: topic.position(0, 0), 1: topic.position(1, 6)}

    assert subscriber.seek(1, topic.position(1, 0)) == topic.position(1, 2)  # head - 1
    assert [e.sequence for e in _drain(subscriber)] == [3, 4, 5, 6, 7]

    assert subscriber.seek(1, topic.position(1, 100)) == topic.position(1, 7)  # the tail
    assert ray.get(subscriber.receive()) is None
    publish_all(topic, ["next"], key=key)
    assert ray.get(subscriber.receive()).sequence == 8

    assert subscriber.seek_to_head() == {0: topic.position(0, -1), 1: topic.position(1, 3)}
    assert [e.sequence for e in _drain(subscriber)] == [4, 5, 6, 7, 8]
    assert subscriber.seek_to_head(1) == {1: topic.position(1, 3)}
    assert subscriber.seek_to_tail() == {0: topic.position(0, -1), 1: topic.position(1, 8)}
    assert subscriber.remaining_messages() == 0
    assert ray.get(subscriber.receive()) is None

    # Receives sent before a seek complete before it takes effect; the next
    # one sees the new position. Repeated: it is a race.
    for _ in range(10):
        subscriber.seek_to_head(1)
        refs = [subscriber.receive() for _ in range(3)]
        assert subscriber.seek(1, topic.position(1, 4)) == topic.position(1, 4)
        after = subscriber.receive()
        assert [e.sequence for e in ray.get(refs, timeout=30)] == [4, 5, 6]
        assert ray.get(after, timeout=30).sequence == 5
    subscriber.close()

    # A receive waiting for data does not hold a seek up: it sees the new position.
    waiting_kind = topic.subscriber()
    waiting = waiting_kind.receive()
    ready, _ = ray.wait([waiting], timeout=NOT_YET)
    assert not ready
    assert waiting_kind.seek(1, topic.position(1, 6)) == topic.position(1, 6)
    assert ray.get(waiting, timeout=30).sequence == 7
    waiting_kind.close()


def test_seek_to_a_time(make_topic) -> None:
    topic = make_topic(channels=1, capacity=10)
    statuses = [publish_all(topic, [f"v{i}"])[0] for i in range(5)]  # one append each
    assert [s.timestamp for s in statuses] == sorted({s.timestamp for s in statuses})
    subscriber = topic.subscriber(complete_on_empty=True)
    # The next is the first published strictly after the time: after the element
    # whose own timestamp it is.
    for i, status in enumerate(statuses):
        assert subscriber.seek(0, status.timestamp) == topic.position(0, i)
        assert [e.value for e in _drain(subscriber)] == [f"v{j}" for j in range(i + 1, 5)]
    between = statuses[0].timestamp + (statuses[1].timestamp - statuses[0].timestamp) / 2
    assert subscriber.seek(0, between) == topic.position(0, 0)
    assert ray.get(subscriber.receive()).value == "v1"
    # A naive datetime is local time.
    naive = statuses[3].timestamp.astimezone().replace(tzinfo=None)
    assert subscriber.seek(0, naive) == topic.position(0, 3)
    assert ray.get(subscriber.receive()).value == "v4"
    # Before everything: just before the head; after everything: the tail.
    assert subscriber.seek(0, datetime(2000, 1, 1, tzinfo=UTC)) == topic.position(0, -1)
    assert ray.get(subscriber.receive()).value == "v0"
    future = datetime.now(UTC) + timedelta(days=1)
    assert subscriber.seek(0, future) == topic.position(0, 4)
    assert ray.get(subscriber.receive()) is None
    subscriber.close()


# -- closing --------------------------------------------------------------------------------


def test_close_completes_waiting_receives_and_runs_every_callback(shared_topic) -> None:
    topic = shared_topic  # shared: it publishes nothing and reads from the latest position
    subscriber = topic.subscriber()
    calls: list[str] = []

    def failing() -> None:
        calls.append("failing")
        raise RuntimeError("on_close failed")

    subscriber.on_close(lambda: calls.append("first"))
    subscriber.on_close(failing)
    subscriber.on_close(lambda: calls.append("last"))
    iterated: list[Any] = []
    iteration = threading.Thread(target=lambda: iterated.extend(subscriber))
    iteration.start()
    waiting = subscriber.receive()
    ready, _ = ray.wait([waiting], timeout=NOT_YET)
    assert not ready
    assert subscriber.is_active
    subscriber.close()
    assert ray.get(waiting, timeout=30) is None
    iteration.join(timeout=30)
    assert not iteration.is_alive() and iterated == []
    assert calls == ["first", "failing", "last"]
    assert not subscriber.is_active
    subscriber.close()  # idempotent: the callbacks do not run again
    assert calls == ["first", "failing", "last"]
    for use in (
        subscriber.receive,
        lambda: subscriber.receive_batch(1),
        subscriber.heads,
        subscriber.tails,
        subscriber.remaining_messages,
        lambda: subscriber.seek(0, topic.position(0, 0)),
        subscriber.seek_to_tail,
    ):
        with pytest.raises(rt.SubscriberClosedError):
            use()
    with topic.subscriber() as scoped:
        assert scoped.is_active
    assert not scoped.is_active
    with pytest.raises(rt.ClosedError):
        scoped.receive()


# -- stale reads and errors ----------------------------------------------------------------


def test_an_overwritten_next_element_raises_stale_sequence_once(make_topic) -> None:
    topic = make_topic(channels=2, capacity=3, overflow="overwrite")
    receiving = topic.subscriber(start="earliest", complete_on_empty=True)
    iterating = topic.subscriber(start="earliest", complete_on_empty=True)
    # On the channel that is NOT the receiving subscriber's home: the error
    # crosses two actors on its way.
    channel = 1 - receiving._receives.host_channel
    publish_all(topic, list(range(5)), key=key_for(channel, 2))  # 0 and 1 overwritten unread
    # What is left to read is what is still stored.
    assert receiving.remaining_messages() == 3
    assert receiving.heads()[channel] == topic.position(channel, 2)
    with pytest.raises(rt.StaleSequenceError) as caught:
        ray.get(receiving.receive(), timeout=30)
    assert (caught.value.head_sequence, caught.value.skipped) == (2, 2)
    assert [(e.value, e.sequence) for e in _drain(receiving)] == [(2, 2), (3, 3), (4, 4)]
    assert ray.get(receiving.receive()) is None

    iteration = iter(iterating)
    with pytest.raises(rt.StaleSequenceError) as caught:
        next(iteration)
    assert (caught.value.head_sequence, caught.value.skipped) == (2, 2)
    assert [e.value for e in iteration] == [2, 3, 4]
    receiving.close()
    iterating.close()


def test_an_expired_next_element_raises_stale_sequence_once(make_topic, wait_until) -> None:
    topic = make_topic(channels=1, capacity=10, ttl=0.3)
    subscriber = topic.subscriber(complete_on_empty=True)
    publish_all(topic, ["a", "b", "c"])
    wait_until(lambda: topic.ringbuffer(0).size() == 0)
    with pytest.raises(rt.StaleSequenceError) as caught:
        ray.get(subscriber.receive_batch(10), timeout=30)
    assert (caught.value.head_sequence, caught.value.skipped) == (3, 3)
    assert ray.get(subscriber.receive_batch(10)) == []
    publish_all(topic, ["d"])
    assert [(e.value, e.sequence) for e in ray.get(subscriber.receive_batch(10))] == [("d", 3)]
    subscriber.close()


def test_bad_arguments_raise_typed_errors_and_change_nothing(shared_topic) -> None:
    topic = shared_topic  # shared: it reads only what it publishes, from the latest position
    pid = topic.describe().channels[0].pid
    # Opened before the refused calls: it would receive anything they appended.
    subscriber = topic.subscriber(start="latest", complete_on_empty=True)
    for kwargs, error in (
        ({"start": "middle"}, rt.InvalidArgumentError),
        ({"filter": "not callable"}, rt.InvalidTypeError),
        ({"converter": 3}, rt.InvalidTypeError),
        ({"complete_on_empty": "yes"}, rt.InvalidTypeError),
        ({"timeout": 0}, rt.InvalidArgumentError),
        ({"window": 0}, rt.InvalidArgumentError),
    ):
        with pytest.raises(error):
            topic.subscriber(**kwargs)
    for bad, error in (
        (lambda: subscriber.receive_batch(0), rt.InvalidArgumentError),
        (lambda: subscriber.receive_batch("2"), rt.InvalidTypeError),
        (lambda: subscriber.on_close("nope"), rt.InvalidTypeError),
    ):
        with pytest.raises(error):
            bad()
    publish_all(topic, ["still", "works"])
    assert [e.value for e in _drain(subscriber)] == ["still", "works"]
    assert topic.describe().channels[0].pid == pid
    subscriber.close()


# -- Arrow rows --------------------------------------------------------------------------


def test_arrow_rows_appended_to_a_channel_actor_are_received_as_dicts(
    shared_topic, unique_name
) -> None:
    import pyarrow as pa

    from raytopic.core.payloads import ArrowRows
    from raytopic.core.protocol import Append, pack_request

    topic = shared_topic  # shared: it reads only what it publishes, counts from base
    (base,) = next_sequences(topic).values()
    p = lambda n: topic.position(0, base + n)  # noqa: E731
    subscriber = topic.subscriber(start="latest", complete_on_empty=True)
    publish_all(topic, [{"id": -1, "user": "python"}])
    rows = pa.RecordBatch.from_pydict({"id": [0, 1, 2], "user": ["a", "b", "c"]})
    channel = ray.get_actor(channel_actor_name(topic.name, 0), namespace=topic.namespace)
    # The bulk path the Spark bridge takes: one append call carrying an Arrow batch.
    statuses = ray.get(
        channel.request.remote(
            pack_request(
                Append(
                    # A channel answers a publisher's batch number it has seen with the
                    # old ack: an id of this test's own, on the shared topic.
                    publisher_id=unique_name("bulk"),
                    batch=0,
                    overflow="block",
                    timeout=10.0,
                    statuses=True,
                )
            ),
            ArrowRows(rows),
        ),
        timeout=30,
    )
    assert [s.position for s in statuses] == [p(n) for n in (1, 2, 3)]
    elements = list(subscriber)
    assert [(e.value, e.position) for e in elements] == [
        ({"id": -1, "user": "python"}, p(0)),
        ({"id": 0, "user": "a"}, p(1)),
        ({"id": 1, "user": "b"}, p(2)),
        ({"id": 2, "user": "c"}, p(3)),
    ]
    assert {e.timestamp for e in elements[1:]} == {statuses[0].timestamp}
    assert topic.ringbuffer(0).read_one(base + 2) == {"id": 1, "user": "b"}
    subscriber.close()


# -- mixed receive styles ------------------------------------------------------------------


def test_mixed_receive_styles_keep_order_per_channel_and_lose_nothing(shared_four) -> None:
    """Single receives (home), batch receives (each to a channel in turn) and
    iterations (every channel at once) of one subscriber, while values trickle
    in: every value arrives once, and each channel's in position order."""
    topic = shared_four  # shared: it reads only what it publishes, from the latest position
    subscriber = topic.subscriber(start="latest", complete_on_empty=True)
    total = 240

    def trickle() -> None:
        with topic.publisher() as publisher:
            for index in range(total):
                publisher.publish(index)
                if index % 8 == 0:
                    publisher.flush()
                    time.sleep(0.005)

    producer = threading.Thread(target=trickle)
    producer.start()
    seen: list[rt.Element] = []
    deadline = time.monotonic() + 60
    style = 0
    while len(seen) < total and time.monotonic() < deadline:
        style += 1
        if style % 3 == 0:
            seen.extend(ray.get(subscriber.receive_batch(5), timeout=30))
        elif style % 3 == 1:
            element = ray.get(subscriber.receive(), timeout=30)
            seen.extend([element] if element is not None else [])
        else:
            for count, element in enumerate(subscriber, 1):
                seen.append(element)
                if count == 7:
                    break
    producer.join()
    seen.extend(_drain(subscriber))
    assert sorted(e.value for e in seen) == list(range(total))
    for channel in range(4):
        sequences = [e.sequence for e in seen if e.channel == channel]
        assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
    subscriber.close()
