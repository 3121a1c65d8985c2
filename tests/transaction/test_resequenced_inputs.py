"""A transaction loop over a resequencing member whose channels hold each key's numbers
out of order (real Ray, real processes; docs/guides/ring-buffer-and-resequencing.md).

The member hands elements over in their numbers' order, not in position order, so a
transaction's consumed commit stops below an element of its channel still held back;
what the transaction consumed above it is done at the channel (never delivered to the
group again), so an abort, or a channel's restart, sends the member back to its commit
without giving it those elements again. Before: 60 transactions wrote 204 values,
14 distinct, lag 57.
"""

from __future__ import annotations

import contextlib
import random
from collections import defaultdict
from typing import Any

import pytest
import ray

import raytopic as rt

from tests.topic_helpers import (
    kill_channel,
    next_sequences,
    read_values,
    serving_again,
)

KEYS, STEPS, BATCH = ["A", "B", "C"], 20, 7
STEPS_OF_KEYS = rt.Resequence(
    seq=lambda v: v["step"], correlation=lambda v: v["key"], timeout_ms=60_000, start=0
)


def _publish_shuffled(topic: rt.Topic, seed: int) -> None:
    """Every key's steps, shuffled, published without a key: each channel holds each
    key's steps out of order."""
    values = [{"key": key, "step": step} for key in KEYS for step in range(STEPS)]
    random.Random(seed).shuffle(values)
    with topic.publisher() as publisher:
        for value in values:
            publisher.publish(value)


def _run_loop(
    member: rt.Subscriber, txs: Any, sink: rt.Topic, after: Any = None
) -> tuple[int, int]:
    """Read batches of ``BATCH``, write them to ``sink``, commit them with the write;
    every third transaction aborts (and any the cluster aborts). ``after(committed)``
    runs after each commit. Returns (transactions, aborted)."""
    attempts = aborted = committed = 0
    while batch := ray.get(member.receive_batch(BATCH), timeout=30):
        attempts += 1
        assert attempts < 20, f"{attempts} transactions and not done"
        if attempts % 3 == 0:
            with pytest.raises(RuntimeError), txs.begin() as tx:
                tx.publish_batch(sink, [e.value for e in batch])
                tx.commit_consumed(batch)
                raise RuntimeError("every third one aborts")
            aborted += 1
            continue
        try:
            with txs.begin() as tx:
                tx.publish_batch(sink, [e.value for e in batch])
                tx.commit_consumed(batch)
        except rt.TransactionAbortedError:
            # Read before a channel's restart: the member's commit there is refused
            # (its lease's read was voided), and its inputs go back to it.
            aborted += 1
            continue
        committed += 1
        if after is not None:
            after(committed)
    return attempts, aborted


def _check_written_once_in_order(written: list[dict[str, Any]]) -> None:
    by_key: dict[str, list[int]] = defaultdict(list)
    for value in written:
        by_key[value["key"]].append(value["step"])
    assert dict(by_key) == {key: list(range(STEPS)) for key in KEYS}, f"{len(written)} written"


def test_a_loop_with_aborts_writes_each_value_once_in_order(
    make_topic, unique_name, wait_until
) -> None:
    source = make_topic(channels=2, groups=["g"])
    sink = make_topic(channels=1)
    _publish_shuffled(source, seed=7)
    txs = rt.transactions(unique_name("tx"))
    member = source.subscriber(group="g", resequence=STEPS_OF_KEYS, complete_on_empty=True)

    _, aborted = _run_loop(member, txs, sink)

    assert aborted
    _check_written_once_in_order(read_values(sink))
    assert member.resequencer_stats.late == 0
    wait_until(lambda: source.describe().groups["g"].lag == 0)
    member.close()
    txs.close()


@pytest.mark.slow
@pytest.mark.parametrize("killed", ["host", "sibling"])
def test_a_loop_with_aborts_and_a_channel_killed_writes_each_value_once_in_order(
    make_topic, unique_name, wait_until, tmp_path, killed
) -> None:
    # What the transactions consumed above their commits stays done through the
    # restart (the store keeps it). The host's resequencer dies with it (its successor
    # numbers afresh: a short hold window); a sibling's restart sends the member back.
    source = make_topic(channels=2, groups=["g"], store=str(tmp_path / "source"))
    sink = make_topic(channels=1)
    _publish_shuffled(source, seed=11)
    txs = rt.transactions(unique_name("tx"))
    option = (
        STEPS_OF_KEYS
        if killed == "sibling"
        else rt.Resequence(
            seq=lambda v: v["step"], correlation=lambda v: v["key"], timeout_ms=2_000, start=0
        )
    )
    member = source.subscriber(group="g", resequence=option, complete_on_empty=True)
    base = next_sequences(sink)

    def kill_once(committed: int) -> None:
        if committed != 3:
            return
        host = member._receives.host_channel
        channel = host if killed == "host" else 1 - host
        epoch = kill_channel(source, channel)
        serving_again(source, channel, epoch, bound=30)

    _run_loop(member, txs, sink, after=kill_once)

    _check_written_once_in_order(read_values(sink, since=base))
    wait_until(lambda: source.describe().groups["g"].lag == 0)
    member.close()
    txs.close()


@pytest.mark.slow
def test_a_loop_past_the_bound_of_acks_done_runs_writes_each_value_once(
    make_topic, unique_name
) -> None:
    # Key "held"'s steps 1.. wait in the resequencer for step 0 (published once every
    # other element was handed over); every element between two of them is a key of
    # its own, handed over at once. So each transaction's commit stops below the first
    # held element, and each element it consumed is a run of done positions of its
    # own: past DONE_RANGES_KEPT (1,024) runs, which bounds acks' runs. On main b282e7f
    # the runs past it were forgotten, and the next abort gave their elements again:
    # written twice.
    from raytopic.actors.done_ranges import DONE_RANGES_KEPT

    source = make_topic(channels=1, groups=["g"])
    sink = make_topic(channels=1)
    held = DONE_RANGES_KEPT + 100
    values = []
    for step in range(1, held + 1):
        values += [{"key": "held", "step": step}, {"key": f"own{step}", "step": 0}]
    with source.publisher() as publisher:
        publisher.publish_batch(values)
    txs = rt.transactions(unique_name("tx"))
    member = source.subscriber(group="g", resequence=STEPS_OF_KEYS, complete_on_empty=True)
    handed_over: set[str] = set()
    attempts = 0
    step_0_sent = aborted_since = False
    while batch := ray.get(member.receive_batch(400), timeout=30):
        attempts += 1
        assert attempts < 60, f"{attempts} transactions and not done"
        handed_over.update(e.value["key"] for e in batch)
        abort = attempts % 4 == 0 or (step_0_sent and not aborted_since)
        with contextlib.suppress(RuntimeError), txs.begin() as tx:
            tx.publish_batch(sink, [e.value for e in batch])
            tx.commit_consumed(batch)
            if abort:
                aborted_since = step_0_sent
                raise RuntimeError("every fourth one aborts, and the first after step 0")
        if len(handed_over) == held and not step_0_sent:  # the member waits for it
            values.append({"key": "held", "step": 0})
            with source.publisher() as publisher:
                publisher.publish(values[-1])
            step_0_sent = True

    def order(value: dict[str, Any]) -> tuple[str, int]:
        return value["key"], value["step"]

    written = read_values(sink)
    assert sorted(written, key=order) == sorted(values, key=order), f"{len(written)} written"
    assert [v["step"] for v in written if v["key"] == "held"] == list(range(held + 1))
    member.close()
    txs.close()


# A short hold window: step 1 of key "A" comes after step 2 in its channel, stored
# after the member passed it (its publisher slower than the hold window), so the
# member hands step 2 over past it.
SHORT_HOLD = rt.Resequence(
    seq=lambda v: v["step"], correlation=lambda v: v["key"], timeout_ms=300, start=0
)


def _step_2_handed_over_past_step_1(
    make_topic: Any, txs: Any, sink: rt.Topic, **topic: Any
) -> tuple[rt.Topic, rt.Subscriber, int, rt.ElementBatch]:
    """A/0 on the member's host channel, A/2, A/1 and A/3 on the other one (the
    sibling): A/0 is written and committed; A/2 waits its hold window, the member reads
    every channel, and A/1 has not come: A/2 is handed over past it (a gap), not
    written yet; then A/1 and A/3 are stored. Returns the source, the member, the
    sibling channel and the batch of A/2."""
    source = make_topic(channels=2, groups=["g"], **topic)
    member = source.subscriber(group="g", resequence=SHORT_HOLD, complete_on_empty=True)
    sibling = 1 - member._receives.host_channel
    source.ringbuffer(sibling).add({"key": "A", "step": 2})
    source.ringbuffer(1 - sibling).add({"key": "A", "step": 0})
    batch = ray.get(member.receive_batch(BATCH), timeout=30)
    assert [e.value["step"] for e in batch] == [0]
    assert member.resequencer_stats.held == 1  # A/2 was read: it waits for A/1
    with txs.begin() as tx:
        tx.publish_batch(sink, [e.value for e in batch])
        tx.commit_consumed(batch)
    batch = ray.get(member.receive_batch(BATCH), timeout=30)
    assert [e.value["step"] for e in batch] == [2]  # released past A/1
    assert member.resequencer_stats.gaps == 1
    source.ringbuffer(sibling).add({"key": "A", "step": 1})
    source.ringbuffer(sibling).add({"key": "A", "step": 3})
    return source, member, sibling, batch


def _drain_then_check_every_step_written_in_order(
    source: rt.Topic, member: rt.Subscriber, txs: Any, sink: rt.Topic, wait_until: Any
) -> None:
    """Write and commit every batch the member still hands over (a batch read before
    a channel's restart is refused there: its inputs go back to the member); then
    the group is done and A/0..A/3 were written once, in order, none dropped."""
    while batch := ray.get(member.receive_batch(BATCH), timeout=30):
        with contextlib.suppress(rt.TransactionAbortedError), txs.begin() as tx:
            tx.publish_batch(sink, [e.value for e in batch])
            tx.commit_consumed(batch)
    wait_until(lambda: source.describe().groups["g"].lag == 0)
    assert [v["step"] for v in read_values(sink)] == [0, 1, 2, 3]
    assert member.resequencer_stats.late == 0
    member.close()
    txs.close()


def test_an_abort_gives_back_a_number_its_release_skipped(
    make_topic, unique_name, wait_until
) -> None:
    # A/2 is handed over (released past A/1 by the hold window) and its transaction
    # aborts: the member is sent back and reads A/2, A/1, A/3 again, all in the
    # channel, so it must give A/1, A/2, A/3. On main fb1728a the rewind released A/2
    # again at once and dropped A/1 as late, and the commit of A/3 passed it: the sink
    # held A/0, A/2, A/3 and the group's lag was 0 (A/1 lost, `late == 1`).
    sink = make_topic(channels=1)
    txs = rt.transactions(unique_name("tx"))
    source, member, _, batch = _step_2_handed_over_past_step_1(make_topic, txs, sink)
    with pytest.raises(RuntimeError), txs.begin() as tx:
        tx.publish_batch(sink, [e.value for e in batch])
        tx.commit_consumed(batch)
        raise RuntimeError("it aborts")

    _drain_then_check_every_step_written_in_order(source, member, txs, sink, wait_until)


@pytest.mark.slow
def test_a_sibling_killed_past_the_hold_window_gives_back_what_it_held_in_order(
    make_topic, unique_name, wait_until, tmp_path
) -> None:
    # The sibling is SIGKILLed with A/1 stored and not read yet, A/2 handed over past it
    # and not committed (the loop dropped it); the restart sends the member back there,
    # and it reads A/2, A/1, A/3 again. On main fb1728a (A/2 released past A/1 while
    # the sibling restarted) A/1 was dropped as late and committed past (the sink held
    # A/0, A/2, A/3, lag 0): the loss trial68 found (a loop over a resequencing member,
    # a channel killed).
    sink = make_topic(channels=1)
    txs = rt.transactions(unique_name("tx"))
    source, member, sibling, _ = _step_2_handed_over_past_step_1(
        make_topic, txs, sink, store=str(tmp_path / "source")
    )
    epoch = kill_channel(source, sibling)
    serving_again(source, sibling, epoch, bound=30)

    _drain_then_check_every_step_written_in_order(source, member, txs, sink, wait_until)
