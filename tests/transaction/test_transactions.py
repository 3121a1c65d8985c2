"""Transactions against a real Ray: invisible until commit, atomic across topics and
input commits, aborts, fencing, lost leases, readers that never wait, orphans,
bad input."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import ray

import raytopic as rt
from raytopic.transaction.registry import TRANSACTION_STATE, registry_actor

from tests.topic_helpers import (
    get,
    group_at_latest,
    module_topic,
    next_sequences,
    publish_all,
    read_values,
    receive_exactly,
)

# Topics for tests that read only what they publish after they begin (sinks from the
# sequences they recorded, sources through groups of their own from the tail), with
# transactional ids of their own: shared to save actors. Every test ends its
# transactions before it returns, so an open one a test finds there is its own.
shared_source = module_topic(channels=1)
shared_sink = module_topic(channels=1)
shared_two_channel_sink = module_topic(channels=2)


def test_outputs_are_invisible_until_commit_then_all_visible(
    shared_two_channel_sink, unique_name
) -> None:
    sink = shared_two_channel_sink  # shared: its transaction is the only one open there
    base = next_sequences(sink)
    txs = rt.transactions(unique_name("tx"))
    tx = txs.begin()
    tx.publish_batch(sink, list(range(10)))
    tx.publish(sink, 10, key="k")
    assert read_values(sink, since=base) == []
    stats = sink.describe()
    staged = [t for channel in stats.channels for t in channel.transactions]
    assert sum(t["staged"] for t in staged) == 11
    assert {t["id"] for t in staged} == {txs.transactional_id}
    result = tx.commit()
    assert sorted(read_values(sink, since=base)) == list(range(11))
    assert result.published_count == 11
    for channel, positions in result.published[sink.name].items():
        assert {(p.topic_id, p.channel) for p in positions} == {(sink.topic_id, channel)}
        sequences = [p.sequence for p in positions]  # Positions, consecutive
        assert sequences == list(range(base[channel], base[channel] + len(positions)))
    assert not [t for channel in sink.describe().channels for t in channel.transactions]
    txs.close()


def test_outputs_to_two_topics_and_consumed_commits_take_effect_together(
    make_topic, shared_sink, shared_two_channel_sink, unique_name, wait_until
) -> None:
    # The outputs are shared (read from where this test began); the 2-channel source
    # is its own, as it cannot be the 2-channel output too.
    source, left, right = make_topic(channels=2), shared_sink, shared_two_channel_sink
    left_base, right_base = next_sequences(left), next_sequences(right)
    group = unique_name("g")
    source.create_group(group)
    publish_all(source, list(range(20)))
    with rt.transactions(unique_name("tx")) as txs, source.subscriber(group=group) as member:
        batch = receive_exactly(member, 20)
        with txs.begin() as tx:
            tx.publish_batch(left, [e.value for e in batch])
            tx.publish_batch(right, [-e.value for e in batch])
            tx.commit_consumed(batch)
    assert sorted(read_values(left, since=left_base)) == list(range(20))
    assert sorted(read_values(right, since=right_base)) == sorted(-v for v in range(20))
    # The outputs are visible when commit() returns; the input commits follow at once.
    wait_until(lambda: source.describe().groups[group].lag == 0)


def test_one_transaction_commits_what_two_groups_of_one_topic_consumed(
    make_topic, shared_sink, unique_name, wait_until
) -> None:
    # Before: its consumed commits were kept by channel only, so the second group's
    # replaced the first's: one group's positions never moved (lag 10), and a restart
    # would have written its elements again.
    source, sink = make_topic(channels=1), shared_sink
    base = next_sequences(sink)
    first, second = unique_name("g"), unique_name("g")
    for group in (first, second):
        source.create_group(group)
    publish_all(source, list(range(10)))
    with (
        rt.transactions(unique_name("tx")) as txs,
        source.subscriber(group=first) as one,
        source.subscriber(group=second) as other,
    ):
        batches = [receive_exactly(one, 10), receive_exactly(other, 10)]
        tx = txs.begin()
        for batch in batches:
            tx.publish_batch(sink, [e.value for e in batch])
            tx.commit_consumed(batch)
        result = tx.commit()
    assert sorted(read_values(sink, since=base)) == sorted(list(range(10)) * 2)
    assert len(result.committed) == 2
    wait_until(lambda: [source.describe().groups[g].lag for g in (first, second)] == [0, 0])


def test_an_exception_in_the_block_aborts_everything_and_inputs_come_again(
    shared_source, shared_sink, unique_name
) -> None:
    source, sink = shared_source, shared_sink  # shared: a group of its own from the tail
    group = unique_name("g")
    base = next_sequences(sink)
    group_at_latest(source, group)
    publish_all(source, list(range(5)))
    txs = rt.transactions(unique_name("tx"))
    with source.subscriber(group=group) as member:
        batch = receive_exactly(member, 5)
        with pytest.raises(RuntimeError), txs.begin() as tx:
            tx.publish_batch(sink, [e.value for e in batch])
            tx.commit_consumed(batch)
            raise RuntimeError("transform failed")
    assert read_values(sink, since=base) == []
    with source.subscriber(group=group) as member:
        again = receive_exactly(member, 5)
    assert [e.value for e in again] == list(range(5))
    assert not sink.describe().channels[0].transactions
    txs.close()


def test_an_aborted_transactions_inputs_come_again_to_the_same_member(
    shared_source, shared_sink, unique_name
) -> None:
    source, sink = shared_source, shared_sink  # shared: a group of its own from the tail
    group = unique_name("g")
    base = next_sequences(sink)
    group_at_latest(source, group)
    publish_all(source, list(range(10)))
    txs = rt.transactions(unique_name("tx"))
    with source.subscriber(group=group) as member:
        batches = member.iter_batches(5)
        first = next(batches)
        with pytest.raises(RuntimeError), txs.begin() as tx:
            tx.publish_batch(sink, [e.value for e in first])
            tx.commit_consumed(first)
            raise RuntimeError("transform failed")
        seen: list = []
        while len(seen) < 10:
            batch = next(batches)
            seen.extend(e.value for e in batch)
            with txs.begin() as tx:
                tx.publish_batch(sink, [e.value for e in batch])
                tx.commit_consumed(batch)
    assert seen == list(range(10))
    assert read_values(sink, since=base) == list(range(10))
    txs.close()


def test_abort_drops_staged_and_frees_their_room(make_topic, unique_name) -> None:
    sink = make_topic(channels=1, capacity=10, overflow="fail")
    txs = rt.transactions(unique_name("tx"))
    tx = txs.begin()
    tx.publish_batch(sink, list(range(10)))
    with pytest.raises(rt.TopicFullError):
        publish_all(sink, [1])  # staged elements hold room
    tx.abort()
    publish_all(sink, [1, 2, 3])
    assert read_values(sink) == [1, 2, 3]
    txs.close()


def test_a_newer_incarnation_fences_the_older(shared_sink, unique_name) -> None:
    sink = shared_sink  # shared: the fenced transactional id is its own
    base = next_sequences(sink)
    name = unique_name("tx")
    old = rt.transactions(name)
    tx = old.begin()
    tx.publish_batch(sink, [1, 2])
    new = rt.transactions(name)
    with pytest.raises(rt.TransactionFencedError):
        tx.publish(sink, 3)
    with pytest.raises(rt.TransactionFencedError):
        tx.commit()
    with pytest.raises(rt.TransactionFencedError):
        old.begin()
    assert isinstance(rt.TransactionFencedError("x"), rt.TransactionAbortedError)
    with new.begin() as fresh:
        fresh.publish(sink, 9)
    assert read_values(sink, since=base) == [9]
    assert not [t for c in sink.describe().channels for t in c.transactions]
    new.close()


def test_a_fenced_incarnation_that_was_committing_cannot_commit(
    shared_source, shared_sink, unique_name
) -> None:
    source, sink = shared_source, shared_sink  # shared: a group of its own from the tail
    group = unique_name("g")
    base = next_sequences(sink)
    group_at_latest(source, group)
    publish_all(source, [1])
    name = unique_name("tx")
    old = rt.transactions(name)
    with source.subscriber(group=group) as member:
        batch = receive_exactly(member, 1)
        tx = old.begin()
        tx.publish_batch(sink, [10])
        tx.commit_consumed(batch)
        rt.transactions(name)
        with pytest.raises(rt.TransactionFencedError):
            tx.commit()
    assert read_values(sink, since=base) == []


def test_a_member_that_lost_its_channel_cannot_commit_through_a_transaction(
    shared_source, shared_sink, unique_name
) -> None:
    source, sink = shared_source, shared_sink  # shared: a group of its own from the tail
    group = unique_name("g")
    base, start = next_sequences(sink), next_sequences(source)
    group_at_latest(source, group)
    publish_all(source, [1, 2, 3])
    txs = rt.transactions(unique_name("tx"))
    with source.subscriber(group=group) as member:
        batch = receive_exactly(member, 3)
        tx = txs.begin()
        tx.publish_batch(sink, [e.value for e in batch])
        tx.commit_consumed(batch)
        # Back to where the group began (its "earliest"): the member's lease is void now.
        source.reset_group(group, to={0: source.position(0, start[0] - 1)})
        with pytest.raises(rt.TransactionAbortedError) as caught:
            tx.commit()
        assert "no longer owns" in caught.value.reason
    assert read_values(sink, since=base) == []
    assert source.describe().groups[group].lag == 3
    txs.close()


def test_an_open_transaction_holds_no_reader_or_publisher_back(shared_sink, unique_name) -> None:
    sink = shared_sink  # shared: it reads from where it began
    base = next_sequences(sink)
    txs = rt.transactions(unique_name("tx"))
    tx = txs.begin()
    tx.publish_batch(sink, ["staged"])
    # From the latest: from base, as staged elements are not appended (the last
    # check fails if they were).
    with sink.subscriber() as reader:
        publish_all(sink, ["plain"])
        started = time.monotonic()
        element = get(reader.receive())
        assert element is not None and element.value == "plain"
        assert time.monotonic() - started < 5.0
    tx.commit()
    assert read_values(sink, since=base) == ["plain", "staged"]
    txs.close()


def test_a_dead_holders_transaction_is_aborted_after_its_timeout(make_topic, unique_name) -> None:
    sink = make_topic(channels=1, capacity=5, overflow="fail")
    name = unique_name("tx")

    @ray.remote(num_cpus=0)
    def hold(topic: rt.Topic) -> None:
        txs = rt.transactions(name, timeout=2.0)
        txs.begin().publish_batch(topic, [1, 2, 3, 4])
        import os

        os._exit(1)  # dies with the transaction open

    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(hold.options(max_retries=0).remote(sink), timeout=60)
    assert sum(len(c.transactions) for c in sink.describe().channels) == 1
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(c.transactions for c in sink.describe().channels):
        time.sleep(0.2)
    assert not any(c.transactions for c in sink.describe().channels)
    publish_all(sink, [1, 2, 3, 4, 5])  # the room is free again
    assert read_values(sink) == [1, 2, 3, 4, 5]


def test_bad_input_is_typed_and_changes_nothing(
    make_topic, shared_source, shared_sink, unique_name
) -> None:
    source, sink = shared_source, shared_sink  # shared: it reads what it publishes from then on
    base = next_sequences(sink)
    gone = make_topic(channels=1)
    gone.destroy()
    txs = rt.transactions(unique_name("tx"))
    tx = txs.begin()
    with pytest.raises(rt.TopicNotFoundError):
        tx.publish(gone, 1)
    with pytest.raises(rt.InvalidTypeError):
        tx.publish(sink, None)
    with pytest.raises(rt.InvalidTypeError):
        tx.publish("not a topic", 1)  # type: ignore[arg-type]
    with pytest.raises(rt.InvalidArgumentError):
        tx.publish_batch(sink, [1, 2], keys=["a"])
    with source.subscriber() as anonymous:  # from the latest: receives the 1 published here
        publish_all(source, [1])
        element = get(anonymous.receive())
    with pytest.raises(rt.GroupModeError):
        tx.commit_consumed([element])
    with pytest.raises(rt.InvalidTypeError):
        tx.commit_consumed([1])  # type: ignore[list-item]
    tx.publish(sink, "kept")
    assert tx.commit().published_count == 1
    assert read_values(sink, since=base) == ["kept"]
    txs.close()
    with pytest.raises(rt.ClosedError):
        txs.begin()
    with pytest.raises(rt.InvalidTypeError):
        rt.transactions("")
    with pytest.raises(rt.InvalidArgumentError):
        rt.transactions("x", timeout=0)
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(txs)


def test_another_store_than_the_namespace_s_registry_s_is_refused_and_changes_nothing(
    ray_session, unique_name, tmp_path: Path
) -> None:
    # A namespace of its own: its registry is made with this test's store.
    namespace, name = unique_name("ns"), unique_name("tx")
    kept, other = tmp_path / "state", tmp_path / "other"
    sink = rt.create_topic(unique_name("sink"), channels=1, namespace=namespace)
    try:
        holder = rt.transactions(name, namespace=namespace, store=kept)
        assert (kept / namespace / TRANSACTION_STATE).is_dir()  # its state is there
        tx = holder.begin()
        tx.publish(sink, 1)
        with pytest.raises(rt.TopicSettingsError) as refused:
            rt.transactions(name, namespace=namespace, store=other)
        assert refused.value.differences == {"store": (str(kept), str(other))}
        assert repr(str(kept)) in str(refused.value)
        with pytest.raises(rt.InvalidTypeError):
            rt.transactions(name, namespace=namespace, store=42)
        assert tx.commit().published_count == 1  # nothing fenced the holder
        assert not (other / namespace).exists()
        newer = rt.transactions(name, namespace=namespace, store=str(kept))  # the same store
        with pytest.raises(rt.TransactionFencedError):
            holder.begin().publish(sink, 2)
        with newer.begin() as fresh:
            fresh.publish(sink, 3)
        newer.close()
        adopting = rt.transactions(name, namespace=namespace)  # none named: the registry's
        with adopting.begin() as fresh:
            fresh.publish(sink, 4)
        adopting.close()
        assert read_values(sink) == [1, 3, 4]
        assert not (other / namespace).exists()
    finally:
        ray.kill(registry_actor(namespace))
        rt.get_topic(TRANSACTION_STATE, namespace=namespace).destroy()
        sink.destroy()
