"""Transactions under real SIGKILLs: a committed transaction survives its channels,
the coordinator, the registry and its holder dying; one caught between prepare
and decision ends whole on recovery; a pipeline worker killed again and again
(and an output channel once) publishes every output exactly once (DESIGN 8's
checker, plus no duplicate payloads in the output)."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
import ray

import raytopic as rt
from raytopic.actors.transactions import send
from raytopic.core.protocol import (
    DecideTransaction,
    DescribeIncarnations,
    Outcome,
    PrepareTransaction,
)
from raytopic.transaction.registry import TRANSACTION_STATE, registry_actor

from tests.loss_checker import LossChecker
from tests.own_ray import run_own_ray
from tests.topic_helpers import (
    get,
    key_for,
    kill_channel,
    kill_coordinator,
    publish_all,
    read_values,
    receive_exactly,
    receive_until_empty,
    serving_again,
    slow_filter,
    source_and_sink,
)

RESTART_BOUND = 20.0


def _kill_registry() -> None:
    registry = registry_actor("raytopic")
    os.kill(get(registry.__ray_call__.remote(lambda _: os.getpid())), signal.SIGKILL)


def _kill_the_control_plane() -> None:
    """SIGKILL every actor of the namespace's transaction control plane: the registry,
    its state topic's channels and coordinator; return once they answer again."""
    state = rt.get_topic(TRANSACTION_STATE)
    epochs = [kill_channel(state, channel) for channel in range(state.channel_count)]
    kill_coordinator(state)
    _kill_registry()
    for channel, epoch in enumerate(epochs):
        serving_again(state, channel, epoch, RESTART_BOUND)


@pytest.mark.slow
def test_a_restarted_registry_still_fences_every_older_incarnation(
    make_topic, unique_name, tmp_path
) -> None:
    # Issue 47 item 4: a restarted registry took the first incarnation it heard of as
    # the newest: the older holder staged at a channel it never used and committed.
    sink = make_topic(channels=2, store=tmp_path / "k")
    name = unique_name("tx")
    old = rt.transactions(name)
    with old.begin() as tx:
        tx.publish(sink, 1, key=key_for(0, 2))  # it stages at channel 0 only
    new = rt.transactions(name)
    _kill_the_control_plane()
    with pytest.raises(rt.TransactionFencedError):
        stale = old.begin()
        stale.publish(sink, 2, key=key_for(1, 2))  # a channel it never used before
        stale.commit()
    with pytest.raises(rt.TransactionFencedError):
        old.begin()
    with new.begin() as fresh:
        fresh.publish(sink, 9, key=key_for(1, 2))
    _kill_the_control_plane()
    with new.begin() as fresh:  # the newest is still the newest
        fresh.publish(sink, 10, key=key_for(0, 2))
    assert sorted(read_values(sink)) == [1, 9, 10]
    new.close()


def _lag(topic: rt.Topic, group: str) -> int:
    return topic.describe().groups[group].lag


def test_a_committed_transaction_survives_its_channels_coordinator_registry_and_holder(
    make_topic, unique_name, tmp_path, wait_until
) -> None:
    group = unique_name("g")
    source, sink = source_and_sink(
        make_topic, group, list(range(10)), source_store=tmp_path / "s", sink_store=tmp_path / "k"
    )
    txs = rt.transactions(unique_name("tx"))
    with source.subscriber(group=group) as member:
        batch = receive_exactly(member, 10)
        with txs.begin() as tx:
            tx.publish_batch(sink, [10 * e.value for e in batch])
            tx.commit_consumed(batch)
    del txs  # the holder is gone too
    epochs = (kill_channel(source, 0), kill_channel(sink, 0))
    kill_coordinator(source)
    kill_coordinator(sink)
    _kill_registry()
    serving_again(source, 0, epochs[0], RESTART_BOUND)
    serving_again(sink, 0, epochs[1], RESTART_BOUND)
    assert read_values(sink) == [10 * v for v in range(10)]
    # An input commit in flight at the kill: it asks the lead.
    wait_until(lambda: _lag(source, group) == 0, timeout=30)


def _staged_and_prepared(make_topic, unique_name, tmp_path, timeout):
    """Stored source and sink topics and a transaction whose non-lead participant
    (the sink) prepared, and whose lead (the source, where its commit is) has not
    decided: the holder 'dies' here. The lead is named by hand, as the holder
    would if the transaction had no outputs there."""
    group = unique_name("g")
    source, sink = source_and_sink(
        make_topic, group, list(range(5)), source_store=tmp_path / "s", sink_store=tmp_path / "k"
    )
    txs = rt.transactions(unique_name("tx"), timeout=timeout)
    member = source.subscriber(group=group, timeout=3.0)
    batch = receive_exactly(member, 5)
    tx = txs.begin()
    tx.publish_batch(sink, [-e.value for e in batch])
    tx.commit_consumed(batch)
    lead = min(at for at, _ in tx._commits)  # (keyed by channel and reader)
    sink_at = next(iter(tx._staged))
    prepare = PrepareTransaction(
        tx.key, txs.transactional_id, tx.deadline, lead, tx._staged[sink_at], ()
    )
    get(send(sink_at, prepare))
    return source, sink, group, txs, member, tx, lead


@pytest.mark.slow
def test_a_lead_killed_between_prepare_and_decision_rolls_back_whole(
    make_topic, unique_name, tmp_path, wait_until
) -> None:
    # A short deadline: the sink asks the lead once it is past (and the sink's
    # in-doubt grace), which is about when the killed lead serves again.
    source, sink, group, _, member, _, _ = _staged_and_prepared(
        make_topic, unique_name, tmp_path, timeout=2.0
    )
    assert sink.describe().channels[0].transactions[0]["phase"] == "prepared"
    epoch = kill_channel(source, 0)  # the lead, before any decision
    kill_coordinator(source)
    serving_again(source, 0, epoch, RESTART_BOUND)
    # No decision ever comes: at its deadline the sink asks the lead, which aborts.
    wait_until(lambda: not sink.describe().channels[0].transactions, timeout=30)
    assert read_values(sink) == []
    assert _lag(source, group) == 5
    member.close()
    with source.subscriber(group=group) as again:
        assert [e.value for e in receive_exactly(again, 5)] == list(range(5))


@pytest.mark.slow
def test_a_participant_killed_after_the_decision_completes_the_commit(
    make_topic, unique_name, tmp_path, wait_until
) -> None:
    source, sink, group, txs, member, tx, lead = _staged_and_prepared(
        make_topic, unique_name, tmp_path, timeout=60.0
    )
    decide = DecideTransaction(
        tx.key, txs.transactional_id, tx.deadline, Outcome.COMMIT, "", 0, tx._commits_at(lead)
    )
    outcome, _, _ = get(send(lead, decide))
    assert outcome == Outcome.COMMIT
    # The holder never says "finish" to the sink; the sink is killed while prepared.
    epoch = kill_channel(sink, 0)
    _kill_registry()
    serving_again(sink, 0, epoch, RESTART_BOUND)
    wait_until(lambda: read_values(sink) == [-v for v in range(5)], timeout=30)
    assert not sink.describe().channels[0].transactions
    assert _lag(source, group) == 0
    member.close()


@pytest.mark.slow
def test_a_lead_killed_while_it_drives_the_commit_ends_it_whole_with_a_typed_error(
    make_topic, unique_name, tmp_path, wait_until
) -> None:
    group = unique_name("g")
    source, sink = source_and_sink(
        make_topic, group, list(range(5)), source_store=tmp_path / "s", sink_store=tmp_path / "k"
    )
    txs = rt.transactions(unique_name("tx"))
    member = source.subscriber(group=group)
    batch = receive_exactly(member, 5)
    tx = txs.begin()
    tx.publish_batch(sink, [-e.value for e in batch])  # the sink leads: it has the outputs
    tx.commit_consumed(batch)
    # The source (the other participant) is busy: the lead's prepare waits there.
    marker = tmp_path / "source-is-busy"
    busy = source.ringbuffer(0).read_many_async(0, 1, 1, slow_filter(str(marker), 3.0))
    wait_until(marker.exists, timeout=10)
    outcome: list[BaseException | object] = []
    committing = threading.Thread(target=lambda: outcome.append(_commit(tx)))
    committing.start()
    registry = registry_actor("raytopic")
    wait_until(
        lambda: (
            get(registry.request.remote(DescribeIncarnations()))[txs.transactional_id]["committing"]
            == tx.key
        ),
        timeout=10,
    )
    epoch = kill_channel(sink, 0)  # the lead, while it waits for the prepare
    committing.join(timeout=60)
    get(busy)
    serving_again(sink, 0, epoch, RESTART_BOUND)
    # Retried on the restarted lead: a typed outcome, and all or nothing. (The lead
    # lost its staged part, so it aborts, unless a slow machine let it decide
    # before the kill: then it answers the commit it recorded.)
    (result,) = outcome
    if isinstance(result, rt.TransactionResult):
        assert read_values(sink) == [-v for v in range(5)]
        wait_until(lambda: _lag(source, group) == 0, timeout=30)
    else:
        assert isinstance(result, rt.TransactionAbortedError), result
        assert read_values(sink) == []
        wait_until(lambda: not source.describe().channels[0].transactions, timeout=30)
        assert _lag(source, group) == 5
    member.close()
    txs.close()


def _commit(tx: rt.Transaction) -> BaseException | object:
    try:
        return tx.commit()
    except BaseException as error:
        return error


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class _Doubler:
    """A pipeline worker: one transaction per batch, group -> sink."""

    def __init__(self, source: rt.Topic, sink: rt.Topic, group: str, name: str) -> None:
        self._txs = rt.transactions(name, timeout=5.0)  # fences the killed incarnation
        # A short session: a killed incarnation's channels pass to the next one soon.
        self._member = source.subscriber(group=group, timeout=1.0, complete_on_empty=True)
        self._sink = sink

    def pid(self) -> int:
        return os.getpid()

    def step(self) -> int:
        batch = ray.get(self._member.receive_batch(20))
        if not batch:
            return 0
        try:
            with self._txs.begin() as tx:
                tx.publish_batch(self._sink, [("out", e.value) for e in batch])
                tx.commit_consumed(batch)
        except rt.TransactionAbortedError:
            return -1  # its inputs come again
        return len(batch)


@pytest.mark.slow
def test_a_pipeline_worker_killed_again_and_again_outputs_exactly_once(
    make_topic, unique_name, tmp_path
) -> None:
    total = 600
    source = make_topic(channels=2, store=str(tmp_path / "source"))
    sink = make_topic(channels=2, store=str(tmp_path / "sink"))
    group = unique_name("g")
    source.create_group(group)
    checker = LossChecker()
    for value in range(total):
        checker.published(("out", value), "acknowledged")
    publish_all(source, list(range(total)))
    worker = _Doubler.remote(source, sink, group, unique_name("tx"))
    kills = {"worker": 0, "sink": 0}
    stop = threading.Event()

    def kill_now_and_then() -> None:
        rng = random.Random(7)
        while not stop.wait(rng.uniform(0.4, 1.2)):
            # Two worker kills: the second kills an incarnation that itself replaced a
            # killed one, so fencing is exercised again after a restart (a third only
            # repeated that and cost one more actor start).
            if kills["worker"] >= 2:
                if kills["sink"] == 0:
                    epoch = kill_channel(sink, 1)
                    kills["sink"] += 1
                    serving_again(sink, 1, epoch, RESTART_BOUND)
                return
            try:
                os.kill(get(worker.pid.remote()), signal.SIGKILL)
                kills["worker"] += 1
            except (ray.exceptions.RayError, ProcessLookupError):
                pass  # restarting from the last kill: try again

    killer = threading.Thread(target=kill_now_and_then, daemon=True)
    killer.start()
    deadline = time.monotonic() + 240
    try:
        while _lag(source, group) > 0 or killer.is_alive():
            assert time.monotonic() < deadline, source.describe().groups[group]
            try:
                ray.get(worker.step.remote(), timeout=60)
            except ray.exceptions.RayActorError:
                time.sleep(0.1)  # killed mid-step: it restarts
    finally:
        stop.set()
        killer.join(timeout=30)
    assert kills == {"worker": 2, "sink": 1}
    with sink.subscriber(start="earliest", complete_on_empty=True) as reader:
        for element in receive_until_empty(reader):
            checker.delivered("reader", element.channel, element.sequence, element.value)
    report = checker.report(expect_all=True)
    report.assert_safe()
    assert report.duplicates_in_log == 0
    assert report.delivered == total
    ray.kill(worker)


# In the xdist group of the other tests that start a Ray of their own (see
# tests/client/test_multinode.py).
@pytest.mark.xdist_group("own_ray")
@pytest.mark.slow
@pytest.mark.parametrize(
    ("registry", "expected"),
    [
        # With rt.transactions(store=) on a disk every node mounts, the state topic's
        # channel restarts elsewhere and the registry reads it back: a newer holder
        # exists, the older is still fenced; the newest still commits.
        ("store", {"older": "TransactionFencedError", "newer": "committed", "fresh": ["newer"]}),
        # Without, the state is on one node's disk (docs/guides/transactions.md): its
        # loss is an outage, typed, never a double commit.
        ("none", {"older": "ChannelFailedError", "newer": "ChannelFailedError", "fresh": []}),
    ],
    ids=["stored-state", "session-state"],
)
def test_a_node_lost_with_the_registry_s_state_fences_with_a_store_and_is_typed_without(
    tmp_path: Path, registry: str, expected: dict[str, object]
) -> None:
    # Found by trial68: with the state topic in the session directory of one node
    # (the only choice then), every transaction of the namespace failed with
    # ChannelFailedError, for good.
    script = Path(__file__).resolve().parent / "registry_node_run.py"
    result = run_own_ray(script, str(tmp_path / "store"), registry, prefix="rt-rn-")
    assert result == expected
