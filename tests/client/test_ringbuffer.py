"""``Topic.ringbuffer(c)`` against real channel actors: Hazelcast Ringbuffer semantics
(docs/guides/ring-buffer-and-resequencing.md, seed 002)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

import pytest
import ray

import raytopic as rt

from tests.topic_helpers import module_topic

NOT_YET = 0.3
"""Seconds a test gives a blocked call to (wrongly) complete before it unblocks it."""


def _even(value: int) -> bool:
    return value % 2 == 0


def _big(value: int) -> bool:
    return value >= 100


def _explode(value: Any) -> bool:
    raise ZeroDivisionError("filter failed")


@ray.remote(num_cpus=0)
def _add_and_read(ringbuffer: rt.Ringbuffer, item: Any) -> tuple[int, Any]:
    sequence = ringbuffer.add(item)
    return sequence, ringbuffer.read_one(sequence)


def _state(ringbuffer: rt.Ringbuffer) -> tuple[int, int, int, int]:
    return (
        ringbuffer.head_sequence(),
        ringbuffer.tail_sequence(),
        ringbuffer.size(),
        ringbuffer.remaining_capacity(),
    )


@pytest.fixture
def ringbuffer(make_topic: Callable[..., rt.Topic]) -> rt.Ringbuffer:
    """Channel 0 of a one-channel topic of capacity 5 (the topic's overflow is "fail",
    which the ring buffer's own ``add`` policy does not use)."""
    return make_topic(channels=1, capacity=5, overflow="fail").ringbuffer(0)


# One-channel topics for tests that count sequences from the tail they find (``base``)
# and whose reads and checks stay within what they add: shared to save actors. The
# smaller has the ``ringbuffer`` fixture's options.
shared_small_topic = module_topic(channels=1, capacity=5, overflow="fail")
shared_large_topic = module_topic(channels=1, capacity=20)


@pytest.fixture
def pool() -> Any:
    with ThreadPoolExecutor(max_workers=2) as executor:
        yield executor


# -- sizes and adding --------------------------------------------------------------------


def test_sizes_add_and_overwrite(ringbuffer: rt.Ringbuffer) -> None:
    assert ringbuffer.channel == 0
    assert ringbuffer.capacity() == 5
    assert _state(ringbuffer) == (0, -1, 0, 5)  # empty: head 0, tail -1
    assert ringbuffer.add("a") == 0
    assert ray.get(ringbuffer.add_async({"b": 1})) == 1
    assert ray.get(ringbuffer.add_all_async(["c", "d"])) == 3  # the LAST sequence
    assert _state(ringbuffer) == (0, 3, 4, 1)
    assert [ringbuffer.read_one(s) for s in range(4)] == ["a", {"b": 1}, "c", "d"]
    # Without a policy, add overwrites: the oldest go.
    assert [ringbuffer.add(i) for i in range(3)] == [4, 5, 6]
    assert _state(ringbuffer) == (2, 6, 5, 0)
    assert [ringbuffer.read_one(s) for s in range(2, 7)] == ["c", "d", 0, 1, 2]
    # A batch larger than the capacity keeps its last items (Hazelcast addAll).
    assert ringbuffer.add_all(list(range(10, 18)), "overwrite") == 14
    assert _state(ringbuffer) == (10, 14, 5, 0)
    assert list(ringbuffer.read_many(10, 5, 5)) == [13, 14, 15, 16, 17]


def test_fail_returns_minus_one_and_refuses_the_whole_batch(ringbuffer: rt.Ringbuffer) -> None:
    assert ringbuffer.add_all(list(range(6)), "fail") == -1  # larger than the capacity
    assert _state(ringbuffer) == (0, -1, 0, 5)
    assert ringbuffer.add_all(["a", "b", "c"], "fail") == 2
    assert ray.get(ringbuffer.add_all_async(["d", "e", "f"], "fail")) == -1  # 2 would fit
    assert _state(ringbuffer) == (0, 2, 3, 2)
    assert ringbuffer.add_all(["d", "e"], "fail") == 4  # exactly fits
    assert ringbuffer.add("f", "fail") == -1
    assert ray.get(ringbuffer.add_async("f", "fail")) == -1
    assert _state(ringbuffer) == (0, 4, 5, 0)
    assert list(ringbuffer.read_many(0, 5, 5)) == ["a", "b", "c", "d", "e"]


def test_an_empty_batch_changes_nothing_and_returns_the_tail(make_topic) -> None:
    topic = make_topic(channels=2, capacity=5)
    ringbuffer = topic.ringbuffer(1)
    assert ray.get(ringbuffer.add_all_async([])) == -1
    assert ray.get(ringbuffer.add_all_async([], "fail")) == -1
    ringbuffer.add_all(["a", "b"])
    assert ringbuffer.add_all([], "overwrite") == 1
    assert ringbuffer.add_all(iter(()), "fail") == 1
    assert _state(ringbuffer) == (0, 1, 2, 3)
    assert _state(topic.ringbuffer(0)) == (0, -1, 0, 5)  # another channel, untouched
    # Ring buffer writes are appends to the channel: subscribers receive them.
    with topic.subscriber(start="earliest", complete_on_empty=True) as subscriber:
        received = ray.get(subscriber.receive_batch(10))
    assert [(e.value, e.channel, e.sequence) for e in received] == [("a", 1, 0), ("b", 1, 1)]
    # A Ringbuffer pickles into a task.
    assert ray.get(_add_and_read.remote(topic.ringbuffer(0), "from-task")) == (0, "from-task")


# -- reading one ---------------------------------------------------------------------------


def test_read_one_blocks_at_tail_plus_one_until_an_add(shared_small_topic, pool) -> None:
    ringbuffer = shared_small_topic.ringbuffer(0)
    base = ringbuffer.tail_sequence() + 1  # shared: sequences count from here
    waiting = pool.submit(ringbuffer.read_one, base)  # base is tail + 1
    done, _ = wait_futures([waiting], timeout=NOT_YET)
    assert not done
    assert ringbuffer.add("first") == base
    assert waiting.result(timeout=30) == "first"
    later = pool.submit(ringbuffer.read_one, base + 1)
    ringbuffer.add_all(["second", "third"])
    assert later.result(timeout=30) == "second"
    # Out of range: negative, or beyond tail + 1 (the tail is base + 2).
    for sequence in (-1, base + 4, base + 100):
        with pytest.raises(rt.InvalidArgumentError):
            ringbuffer.read_one(sequence)
    with pytest.raises(ValueError):
        ringbuffer.read_one(base + 4)
    # Below the head: StaleSequenceError carrying the head.
    ringbuffer.add_all(list(range(5)))  # tail base + 7, head base + 3
    with pytest.raises(rt.StaleSequenceError) as caught:
        ringbuffer.read_one(base + 2)
    assert type(caught.value) is rt.StaleSequenceError  # the same class, not RayTaskError
    assert caught.value.head_sequence == base + 3
    assert [ringbuffer.read_one(base + s) for s in (3, 7)] == [0, 4]  # the channel goes on


# -- reading many --------------------------------------------------------------------------


def test_read_many_reads_between_min_and_max_count(shared_large_topic, pool) -> None:
    ringbuffer = shared_large_topic.ringbuffer(0)
    base = ringbuffer.tail_sequence() + 1  # shared: sequences count from here
    ringbuffer.add_all([f"v{i}" for i in range(10)])
    result = ray.get(ringbuffer.read_many_async(base + 2, 1, 5))
    assert isinstance(result, rt.ReadResultSet)
    assert list(result) == ["v2", "v3", "v4", "v5", "v6"]
    assert (len(result), result[0], result[-1]) == (5, "v2", "v6")
    assert result.read_count == 5
    assert result.next_sequence_to_read_from == base + 7
    assert [result.get_sequence(i) - base for i in range(5)] == [2, 3, 4, 5, 6]
    # Fewer than max_count available: what is there, at once.
    rest = ringbuffer.read_many(base + 7, 1, 20)
    assert (list(rest), rest.read_count, rest.next_sequence_to_read_from - base) == (
        ["v7", "v8", "v9"],
        3,
        10,
    )
    # min_count 0 at tail + 1: an empty result, at once.
    none = ringbuffer.read_many(base + 10, 0, 5)
    assert (list(none), none.read_count, none.next_sequence_to_read_from - base) == ([], 0, 10)
    # Fewer than min_count: it waits for them.
    ref = ringbuffer.read_many_async(base + 10, 3, 5)
    ringbuffer.add_all(["a", "b"])
    ready, _ = ray.wait([ref], timeout=NOT_YET)
    assert not ready
    ringbuffer.add("c")
    result = ray.get(ref, timeout=30)
    assert (list(result), result.read_count, result.next_sequence_to_read_from - base) == (
        ["a", "b", "c"],
        3,
        13,
    )


def test_read_many_filter_runs_in_the_channel_and_read_count_counts_every_item(
    shared_large_topic, pool
) -> None:
    ringbuffer = shared_large_topic.ringbuffer(0)
    base = ringbuffer.tail_sequence() + 1  # shared: sequences count from here
    ringbuffer.add_all(list(range(10)))  # value v at sequence base + v
    result = ringbuffer.read_many(base + 1, 2, 3, _even)
    assert list(result) == [2, 4, 6]  # max_count counts matching items
    assert [result.get_sequence(i) - base for i in range(3)] == [2, 4, 6]
    assert result.read_count == 6  # 1..6 were read
    assert result.next_sequence_to_read_from == base + 7
    result = ringbuffer.read_many(base + 7, 0, 5, _even)
    assert (list(result), result.read_count, result.next_sequence_to_read_from - base) == (
        [8],
        3,
        10,
    )
    # min_count counts matching items too: it waits for the second match.
    waiting = pool.submit(ringbuffer.read_many, base + 5, 2, 10, _big)
    ringbuffer.add(100)
    done, _ = wait_futures([waiting], timeout=NOT_YET)
    assert not done
    ringbuffer.add_all([7, 101])
    result = waiting.result(timeout=30)
    assert list(result) == [100, 101]
    assert [result.get_sequence(i) - base for i in range(2)] == [10, 12]
    assert result.read_count == 8  # 5..12
    assert result.next_sequence_to_read_from == base + 13
    # A filter that raises reaches the caller as its own class and harms nothing.
    with pytest.raises(rt.PoisonElementError) as poison:  # typed, naming the filter's error
        ringbuffer.read_many(base, 1, 2, _explode)
    assert poison.value.cause_type == "ZeroDivisionError"
    with pytest.raises(rt.InvalidTypeError):
        ringbuffer.read_many(base, 1, 2, "not callable")  # type: ignore[arg-type]
    assert list(ringbuffer.read_many(base + 11, 2, 2)) == [7, 101]


def test_read_many_errors(shared_small_topic) -> None:
    ringbuffer = shared_small_topic.ringbuffer(0)
    base = ringbuffer.tail_sequence() + 1  # shared: sequences count from here
    ringbuffer.add_all(list(range(9)))  # head base + 4, tail base + 8
    with pytest.raises(rt.StaleSequenceError) as caught:
        ringbuffer.read_many(base + 1, 1, 3)
    assert caught.value.head_sequence == base + 4
    with pytest.raises(rt.StaleSequenceError):
        ray.get(ringbuffer.read_many_async(base, 0, 3))
    bad = [
        (base + 10, 0, 1),  # beyond tail + 1
        (-1, 0, 1),
        (base + 4, -1, 1),
        (base + 4, 0, -1),
        (base + 4, 3, 2),  # min > max
        (base + 4, 1, 1001),  # more than 1000
        (base + 4, 1, 6),  # more than the capacity (Hazelcast refuses it too)
    ]
    for start, min_count, max_count in bad:
        with pytest.raises(rt.InvalidArgumentError):
            ringbuffer.read_many(start, min_count, max_count)
    with pytest.raises(ValueError):
        ray.get(ringbuffer.read_many_async(base + 4, 3, 2))
    assert list(ringbuffer.read_many(base + 4, 5, 5)) == [4, 5, 6, 7, 8]


# -- refused items --------------------------------------------------------------------------


def test_refused_items_and_bad_calls_change_nothing_and_kill_nothing(shared_small_topic) -> None:
    # Shared (no ring buffer call uses the topic's overflow, "fail" there): it checks
    # the ring is as its own add left it.
    topic = shared_small_topic
    ringbuffer = topic.ringbuffer(0)
    pid = topic.describe().channels[0].pid
    base = ringbuffer.tail_sequence() + 1
    assert ringbuffer.add("kept") == base
    kept = _state(ringbuffer)
    with pytest.raises(TypeError):
        ringbuffer.add(None)
    with pytest.raises(rt.InvalidTypeError):
        ringbuffer.add_all_async(["a", None, "b"])
    with pytest.raises(rt.InvalidTypeError):
        ringbuffer.add_async(ray.put(1))
    with pytest.raises(rt.InvalidTypeError):
        ringbuffer.add_all(["a", {"ref": ray.put(2)}])
    with pytest.raises(rt.InvalidTypeError):
        ringbuffer.add(threading.Lock())  # cannot be pickled
    with pytest.raises(rt.InvalidArgumentError):
        ringbuffer.add("x", "drop-newest")
    with pytest.raises(rt.InvalidArgumentError):
        ringbuffer.read_one(base + 5)
    with pytest.raises(rt.PoisonElementError, match="filter failed"):
        ringbuffer.read_many(base, 0, 1, _explode)
    assert _state(ringbuffer) == kept
    assert ringbuffer.add("after") == base + 1
    assert list(ringbuffer.read_many(base, 2, 2)) == ["kept", "after"]
    assert topic.describe().channels[0].pid == pid


# -- TTL ---------------------------------------------------------------------------------------


def test_ttl_expires_items_and_remaining_capacity_follows_size(make_topic, wait_until) -> None:
    ringbuffer = make_topic(channels=1, capacity=3, ttl=1.0).ringbuffer(0)
    assert ringbuffer.add_all(["a", "b", "c"], "fail") == 2
    # Full: "fail" fails even with a TTL (the Hazelcast quirk is not kept).
    assert ringbuffer.add("d", "fail") == -1
    assert ringbuffer.remaining_capacity() == ringbuffer.capacity() - ringbuffer.size() == 0
    wait_until(lambda: ringbuffer.size() == 0, timeout=10)
    assert _state(ringbuffer) == (3, 2, 0, 3)
    with pytest.raises(rt.StaleSequenceError) as caught:
        ringbuffer.read_one(0)
    assert caught.value.head_sequence == 3
    assert ringbuffer.add("e", "fail") == 3  # room again
    assert ringbuffer.read_one(3) == "e"
    assert ringbuffer.remaining_capacity() == ringbuffer.capacity() - ringbuffer.size() == 2


def test_block_waits_for_room_then_gives_minus_one_after_its_timeout(make_topic) -> None:
    topic = make_topic(channels=1, capacity=2, groups=["g"], retain=False)
    ring = topic.ringbuffer(0)
    assert ring.add_all(["a", "b"], "block") == 1
    assert ring.add("c", "block", timeout=0.3) == -1  # full, and nobody commits
    assert (ring.tail_sequence(), ring.size()) == (1, 2)
    with pytest.raises(rt.InvalidArgumentError, match="timeout"):
        ring.add("c", "block", timeout=0)
