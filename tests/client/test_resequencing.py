"""A subscriber's ``resequence=`` option over a multi-channel topic (real Ray)."""

from __future__ import annotations

import random
import time
from collections import defaultdict

import pytest
import ray

import raytopic as rt
from raytopic.core.release_record import RELEASES_KEPT

from tests.topic_helpers import (
    group_at_latest,
    key_for,
    module_topic,
    next_sequences,
    publish_all,
    read_values,
    receive_until_empty,
)

# One 2-channel topic for the module (each topic starts an actor per channel and a
# coordinator): no test kills anything, and each reads only what it publishes, through
# anonymous subscribers made before it publishes (they start at the latest position).
# Values are published without a key, so they spread over both channels.
shared = module_topic(channels=2)
sink = module_topic(channels=1)  # a transaction loop's outputs (read from where it began)


def _publish_shuffled(topic: rt.Topic, orders: list[str], steps: int, seed: int) -> None:
    """Every order's steps, shuffled, published without a key: they spread over channels."""
    values = [{"order": order, "step": step} for order in orders for step in range(steps)]
    random.Random(seed).shuffle(values)
    with topic.publisher() as publisher:
        for value in values:
            publisher.publish(value)


def test_iteration_releases_each_order_in_step_order(shared) -> None:
    topic = shared
    option = rt.Resequence(
        seq=lambda v: v["step"], correlation=lambda v: v["order"], timeout_ms=60_000, start=0
    )
    subscriber = topic.subscriber(start="latest", resequence=option, complete_on_empty=True)
    # Made before the publishes too: it reads the same elements, not resequenced.
    plain = topic.subscriber(start="latest", complete_on_empty=True)
    orders, steps = ["A", "B", "C"], 40
    _publish_shuffled(topic, orders, steps, seed=3)

    received = [(e.value["order"], e.value["step"]) for e in subscriber]

    per_order = defaultdict(list)
    for order, step in received:
        per_order[order].append(step)
    assert dict(per_order) == {order: list(range(steps)) for order in orders}
    # The channels really did scramble them: without resequencing the
    # arrival order differs from the step order.
    arrival = [e.value["step"] for e in plain if e.value["order"] == "A"]
    assert sorted(arrival) == list(range(steps))
    assert arrival != list(range(steps))
    subscriber.close()
    plain.close()


def test_a_missing_step_is_skipped_after_the_hold_window(shared) -> None:
    topic = shared
    option = rt.Resequence(seq=lambda v: v["step"], timeout_ms=300, start=0)
    subscriber = topic.subscriber(start="latest", resequence=option)
    with topic.publisher() as publisher:
        for step in (4, 1, 0, 3):  # 2 never comes
            publisher.publish({"step": step})

    steps = [ray.get(subscriber.receive()).value["step"] for _ in range(4)]

    assert steps == [0, 1, 3, 4]
    stats = subscriber.resequencer_stats
    assert (stats.released, stats.gaps, stats.late, stats.held) == (4, 1, 0, 0)
    subscriber.close()


def test_receive_batch_returns_released_elements_in_order(shared) -> None:
    topic = shared
    option = rt.Resequence(seq=lambda v: v["n"], timeout_ms=60_000, start=0)
    subscriber = topic.subscriber(start="latest", resequence=option, complete_on_empty=True)
    with topic.publisher() as publisher:
        for n in (2, 5, 0, 1, 4, 3):
            publisher.publish({"n": n})
    publisher.flush()

    got = []
    while True:
        batch = ray.get(subscriber.receive_batch(10))
        if not batch:
            break
        got.extend(e.value["n"] for e in batch)

    assert got == [0, 1, 2, 3, 4, 5]
    subscriber.close()


def test_resequence_must_be_a_resequence_option(shared) -> None:
    topic = shared
    with pytest.raises(rt.InvalidTypeError, match="resequence"):
        topic.subscriber(resequence=lambda v: v)  # type: ignore[arg-type]


def test_a_resequencing_receive_returns_its_ref_at_once(shared) -> None:
    topic = shared
    option = rt.Resequence(seq=lambda v: v["n"], timeout_ms=60_000, start=0)
    subscriber = topic.subscriber(start="latest", resequence=option)
    with topic.publisher() as publisher:
        publisher.publish({"n": 1})  # 0 is missing: nothing can be released yet
    start = time.monotonic()
    ref = subscriber.receive()
    assert time.monotonic() - start < 5.0  # not waiting for the 60 s hold window
    assert isinstance(ref, ray.ObjectRef)
    ready, _ = ray.wait([ref], timeout=1.0)
    assert ready == []
    with topic.publisher() as publisher:
        publisher.publish({"n": 0})
    assert ray.get(ref, timeout=30).value == {"n": 0}
    assert ray.get(subscriber.receive(), timeout=30).value == {"n": 1}
    subscriber.close()


def test_values_without_a_usable_sequence_number_are_counted_not_each_logged(shared) -> None:
    # Before: the channel logged "released unordered" once per value. Now once per
    # subscriber (see test_resequencer), and resequencer_stats counts them.
    topic = shared
    option = rt.Resequence(seq=lambda v: v["step"], timeout_ms=60_000, start=0)
    subscriber = topic.subscriber(start="latest", resequence=option, complete_on_empty=True)
    with topic.publisher() as publisher:
        for n in range(50):
            publisher.publish({"n": n})  # no "step": the key raises KeyError
    got = []
    while len(got) < 50:
        got += ray.get(subscriber.receive_batch(50), timeout=30)
    assert sorted(e.value["n"] for e in got) == list(range(50))
    assert subscriber.resequencer_stats.unsequenced == 50
    subscriber.close()


def test_what_a_member_is_sent_back_to_comes_again_in_order(shared, unique_name) -> None:
    # A resequencing member sent back to its commit (seek_to_committed; an aborted
    # transaction does it) received nothing again: its resequencer had released those
    # numbers and dropped each one read again as late. A transaction loop with aborts
    # put 50 of 200 in its sink and ended, lag 195, late=195.
    topic, group = shared, unique_name("g")
    topic.subscriber(group=group, start="latest").close()  # the group starts here
    option = rt.Resequence(seq=lambda v: v["n"], timeout_ms=60_000, start=0)
    member = topic.subscriber(group=group, resequence=option, complete_on_empty=True)
    with topic.publisher() as publisher:
        for n in (3, 1, 0, 2, 5, 4):
            publisher.publish({"n": n})
    assert [e.value["n"] for e in receive_until_empty(member)] == [0, 1, 2, 3, 4, 5]
    member.seek_to_committed()  # nothing committed: all six come again
    again = receive_until_empty(member)
    assert [e.value["n"] for e in again] == [0, 1, 2, 3, 4, 5]
    assert member.resequencer_stats.late == 0
    for element in again:
        element.commit()
    assert topic.describe().groups[group].lag == 0
    member.close()


def _publish_across(topic: rt.Topic, orders: list[str], steps: int) -> None:
    """Every order's steps, step by step, an order's next step on the other channel:
    each channel holds each order's steps in ascending order (as its producers sent
    them), and an order's steps reach the member out of order when it reads one
    channel before the other. (Its commits reach every element then: a resequencing
    member commits no further than what it handed over before, see Element.commit.)"""
    with topic.publisher() as publisher:
        for step in range(steps):
            for index, order in enumerate(orders):
                channel = (step + index) % 2
                publisher.publish({"order": order, "step": step}, key=key_for(channel, 2))


def _steps_by_order(elements: list[rt.Element]) -> dict[str, list[int]]:
    by_order: dict[str, list[int]] = defaultdict(list)
    for element in elements:
        by_order[element.value["order"]].append(element.value["step"])
    return dict(by_order)


ORDERS = rt.Resequence(
    seq=lambda v: v["step"], correlation=lambda v: v["order"], timeout_ms=60_000, start=0
)


def test_keys_of_two_channels_sent_back_come_again_in_order(shared, unique_name) -> None:
    # Each order's steps spread over both channels. Sending back one channel gives
    # its steps again, in order, stepping over the other channel's (released once);
    # sending back both gives every step again.
    topic, group = shared, unique_name("g")
    group_at_latest(topic, group)
    member = topic.subscriber(group=group, resequence=ORDERS, complete_on_empty=True)
    orders, steps = ["A", "B", "C"], 12
    _publish_across(topic, orders, steps)
    first = receive_until_empty(member)
    assert _steps_by_order(first) == {order: list(range(steps)) for order in orders}
    member.seek_to_committed(0)
    from_zero = receive_until_empty(member)
    assert {e.channel for e in from_zero} == {0}
    # Each order's steps of channel 0, ascending (those of channel 1 are stepped over).
    assert _steps_by_order(from_zero) == _steps_by_order([e for e in first if e.channel == 0])
    member.seek_to_committed()
    again = receive_until_empty(member)
    assert _steps_by_order(again) == {order: list(range(steps)) for order in orders}
    assert member.resequencer_stats.late == 0
    for element in again:
        element.commit()
    assert topic.describe().groups[group].lag == 0
    member.close()


def test_a_group_reset_to_earliest_gives_its_living_member_everything_again_in_order(
    make_topic, unique_name, wait_until
) -> None:
    # Its own topic, retaining what was committed: "earliest" is all it ever held.
    topic, group = make_topic(channels=2, retain=True), unique_name("g")
    topic.create_group(group)
    member = topic.subscriber(group=group, resequence=ORDERS, complete_on_empty=True)
    _publish_across(topic, ["A", "B"], 10)
    first = receive_until_empty(member)
    assert _steps_by_order(first) == {"A": list(range(10)), "B": list(range(10))}
    for element in first:
        element.commit()
    wait_until(lambda: topic.describe().groups[group].lag == 0)
    topic.reset_group(group, "earliest")
    again: list[rt.Element] = []
    # The member hears of the reset with its next receives (empty ones may come first).
    wait_until(lambda: again.extend(receive_until_empty(member)) or len(again) >= 20)
    assert _steps_by_order(again) == {"A": list(range(10)), "B": list(range(10))}
    assert member.resequencer_stats.late == 0
    for element in again:
        element.commit()
    wait_until(lambda: topic.describe().groups[group].lag == 0)
    member.close()


def test_a_transaction_loop_with_aborts_puts_everything_in_its_sink_once_in_order(
    shared, sink, unique_name, wait_until
) -> None:
    # trial64's loop: every third transaction aborts, and its inputs go back to the
    # member. Before: 50 of 200 in the sink, lag 195, late=195, and the loop ended.
    topic, group = shared, unique_name("g")
    base = next_sequences(sink)
    group_at_latest(topic, group)
    orders, steps = ["A", "B", "C"], 30
    _publish_across(topic, orders, steps)
    txs = rt.transactions(unique_name("tx"))
    member = topic.subscriber(group=group, resequence=ORDERS, complete_on_empty=True)
    attempts = 0
    while batch := ray.get(member.receive_batch(7), timeout=60):
        attempts += 1
        assert attempts < 200
        if attempts % 3 == 0:
            with pytest.raises(RuntimeError), txs.begin() as tx:
                tx.publish_batch(sink, [e.value for e in batch])
                tx.commit_consumed(batch)
                raise RuntimeError("every third one aborts")
            continue
        with txs.begin() as tx:
            tx.publish_batch(sink, [e.value for e in batch])
            tx.commit_consumed(batch)
    written = read_values(sink, since=base)
    assert len(written) == len(orders) * steps
    by_order: dict[str, list[int]] = defaultdict(list)
    for value in written:
        by_order[value["order"]].append(value["step"])
    assert dict(by_order) == {order: list(range(steps)) for order in orders}
    assert member.resequencer_stats.late == 0
    wait_until(lambda: topic.describe().groups[group].lag == 0)
    member.close()
    txs.close()


def _receive_numbers(member: rt.Subscriber) -> tuple[list[int], dict[int, rt.Element]]:
    """Every ``n`` received until empty, and the last element received of each channel."""
    numbers: list[int] = []
    last: dict[int, rt.Element] = {}
    while batch := ray.get(member.receive_batch(2000), timeout=60):
        numbers.extend(e.value["n"] for e in batch)
        last.update((e.channel, e) for e in batch)
    return numbers, last


def test_a_member_sent_back_further_than_remembered_starts_afresh(shared, unique_name) -> None:
    # Past the latest RELEASES_KEPT releases the numbers to release again are not
    # known: the resequencer numbers afresh, as a restarted host's does.
    topic, group = shared, unique_name("g")
    group_at_latest(topic, group)
    count = RELEASES_KEPT + 1000
    option = rt.Resequence(seq=lambda v: v["n"], timeout_ms=60_000, start=0)
    member = topic.subscriber(group=group, resequence=option, complete_on_empty=True)
    publish_all(topic, [{"n": n} for n in range(count)])
    assert _receive_numbers(member)[0] == list(range(count))
    member.seek_to_committed()
    again, last = _receive_numbers(member)
    assert again == list(range(count))
    assert member.resequencer_stats.late == 0
    for element in last.values():  # (the numbers came in position order at each channel)
        element.commit()
    assert topic.describe().groups[group].lag == 0
    member.close()


def test_a_loop_slow_to_receive_again_gets_a_number_stored_in_time(shared, unique_name) -> None:
    # The hold window ran between receives: 3 was read with 1 and held for 2, which was
    # stored at its channel at once; the loop took longer than timeout_ms to receive
    # again, the window passed 3 over the gap meanwhile, and 2, read after it, was
    # dropped as late and committed past: [0, 1, 3], late=1, with no fault at all.
    topic, group = shared, unique_name("g")
    group_at_latest(topic, group)
    option = rt.Resequence(seq=lambda v: v["n"], timeout_ms=400, start=0)
    member = topic.subscriber(group=group, resequence=option, complete_on_empty=True)
    got = _hand_over_0_and_1_then_store_2_while_3_is_held(topic, member)
    got.extend(receive_until_empty(member))
    _all_in_order_committed(topic, group, member, got)


def _numbers(elements: list[rt.Element]) -> list[int]:
    return [e.value["n"] for e in elements]


def _all_in_order_committed(
    topic: rt.Topic, group: str, member: rt.Subscriber, got: list[rt.Element]
) -> None:
    """0..3 came in order, none late, skipped or held; committed, the group has no lag."""
    assert _numbers(got) == [0, 1, 2, 3]
    stats = member.resequencer_stats
    assert (stats.late, stats.gaps, stats.held) == (0, 0, 0)
    for element in got:
        element.commit()
    assert topic.describe().groups[group].lag == 0
    member.close()


def _hand_over_0_and_1_then_store_2_while_3_is_held(
    topic: rt.Topic, member: rt.Subscriber
) -> list[rt.Element]:
    """0 and 1 received (not committed), 3 held for 2, and 2 stored at its channel well
    within a 400 ms hold window; then the loop's own work: five hold windows."""
    with topic.publisher() as publisher:
        publisher.publish({"n": 1}, key=key_for(1, 2))
        publisher.publish({"n": 3}, key=key_for(1, 2))
        publisher.publish({"n": 0}, key=key_for(0, 2))
    got: list[rt.Element] = []
    while len(got) < 2:  # 3 comes in the take that brings 1: it waits for 2 from here
        got.extend(ray.get(member.receive_batch(10), timeout=60))
    assert _numbers(got) == [0, 1]
    publish_all(topic, [{"n": 2}], key=key_for(0, 2))
    time.sleep(2.0)
    return got


def test_a_full_window_waits_for_commits_before_passing_a_number_stored_in_time(
    shared, unique_name
) -> None:
    # The member's window (3) is full: 0 and 1 handed over, not committed yet, and 3
    # held for 2, stored at its channel at once. The loop receives again before it
    # commits (a loop that commits a batch behind): the look its hold window began
    # ended at once, as nothing could be read, and passed 3 over the gap; 2, read once
    # the commits made room, was dropped as late and committed past: [0, 1, 3].
    topic, group = shared, unique_name("g")
    group_at_latest(topic, group)
    option = rt.Resequence(seq=lambda v: v["n"], timeout_ms=400, start=0)
    member = topic.subscriber(group=group, resequence=option, complete_on_empty=True, window=3)
    got = _hand_over_0_and_1_then_store_2_while_3_is_held(topic, member)
    waiting = member.receive_batch(10)  # the window is full: it waits for room
    ray.wait([waiting], timeout=5.0)  # (before, it answered [3] at once)
    for element in got:
        element.commit()
    got.extend(ray.get(waiting, timeout=60))
    got.extend(receive_until_empty(member))
    _all_in_order_committed(topic, group, member, got)


def test_a_window_full_of_what_the_resequencer_holds_passes_the_gap(shared, unique_name) -> None:
    # No commit can free this window (2): it holds 1 and 2, waiting for 0, and nothing
    # handed over. Waiting would wait forever: the window bounds what the resequencer
    # holds, as capacity does, and the heads go out past the gap once their hold
    # window ended.
    topic, group = shared, unique_name("g")
    group_at_latest(topic, group)
    option = rt.Resequence(seq=lambda v: v["n"], timeout_ms=300, start=0)
    member = topic.subscriber(group=group, resequence=option, complete_on_empty=True, window=2)
    publish_all(topic, [{"n": 1}, {"n": 2}], key=key_for(1, 2))
    got = ray.get(member.receive_batch(10), timeout=60)
    assert _numbers(got) == [1, 2]
    assert member.resequencer_stats.gaps == 1
    member.close()
