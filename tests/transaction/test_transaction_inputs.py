"""An abort loses nothing, whatever the order of the calls (docs/guides/transactions.md),
against a real Ray: the docs' consume-transform-produce loop in each way of receiving
(iter_batches, receive_batch, receive), with each way a transaction aborts (an exception
before or after ``commit_consumed``, ``tx.abort()``, a failed commit), in one thread and
in two members' threads; commits of what an abort gave back; a member in another
process."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import ray

import raytopic as rt

from tests.topic_helpers import (
    get,
    group_at_latest,
    key_for,
    module_topic,
    next_sequences,
    publish_all,
    read_values,
    receive_exactly,
)

STYLES = ("iter_batches", "receive_batch", "receive")
FAILURES = ("raise_before_consumed", "raise_after_consumed", "abort", "failed_commit")

# Shared to save actors: each test reads its source through a group of its own from the
# tail, and its sink from the sequences it recorded when it began.
shared_source = module_topic(channels=1)
shared_sink = module_topic(channels=1)
four_channel_source = module_topic(channels=4)
two_channel_sink = module_topic(channels=2)


class TransformFailed(Exception):
    """What a failing block raises."""


def batches(member: rt.Subscriber, style: str, size: int) -> Iterator[rt.ElementBatch]:
    """The member's elements in batches of up to ``size``, received as ``style`` says,
    until it has none (its subscriber completes on empty)."""
    if style == "iter_batches":
        yield from member.iter_batches(size)
    elif style == "receive_batch":
        while batch := get(member.receive_batch(size)):
            yield batch
    else:
        while True:
            batch = rt.ElementBatch()
            while len(batch) < size and (element := get(member.receive())) is not None:
                batch.append(element)
            if not batch:
                return
            yield batch


def run_pipeline(
    member: rt.Subscriber,
    sink: rt.Topic,
    transactional_id: str,
    style: str,
    failure: str,
    failing: set[int],
    size: int = 10,
) -> int:
    """The loop of docs/guides/transactions.md: each batch doubled into ``sink`` in a
    transaction that commits the batch; the blocks numbered in ``failing`` (from 1) fail
    as ``failure`` says.
    Returns how many blocks ran."""
    txs = rt.transactions(transactional_id)
    block = 0
    for batch in batches(member, style, size):
        block += 1
        fail = block in failing
        try:
            with txs.begin() as tx:
                tx.publish_batch(sink, [2 * element.value for element in batch])
                if fail and failure == "raise_before_consumed":
                    raise TransformFailed(block)  # the natural place: before commit_consumed
                if fail and failure == "abort":
                    tx.abort()  # commit_consumed never called
                    continue
                tx.commit_consumed(batch)
                if fail and failure == "raise_after_consumed":
                    raise TransformFailed(block)
                if fail and failure == "failed_commit":
                    newer = rt.transactions(transactional_id)  # fences this holder
        except TransformFailed:
            assert fail
        except rt.TransactionFencedError:
            assert fail and failure == "failed_commit"
            txs = newer  # the worker goes on as the newer holder
        except rt.TransactionAbortedError:
            pass  # a rebalance moved a consumed channel: nothing took effect, all comes again
    txs.close()
    return block


def halves(sink: rt.Topic, since: dict[int, int]) -> Counter[int]:
    """How many times each input value reached ``sink`` (doubled) since ``since``."""
    return Counter(value // 2 for value in read_values(sink, since=since))


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("style", STYLES)
def test_the_readme_loop_with_a_block_that_fails_loses_nothing(
    shared_source, shared_sink, unique_name, style, failure
) -> None:
    # 50 values in blocks of 10: the first block fails (nothing was consumed yet: only
    # its thread tells which member to send back), a middle one, and the last one (an
    # iteration that had heard "empty" goes on). Before, a block that failed before
    # commit_consumed was lost: the next block's cumulative commit passed over it (the
    # sink held 40 of 50, the lag read 0, no error).
    source, sink, group = shared_source, shared_sink, unique_name("g")
    group_at_latest(source, group)
    since = next_sequences(sink)
    publish_all(source, list(range(50)))
    with source.subscriber(group=group, complete_on_empty=True) as member:
        blocks = run_pipeline(member, sink, unique_name("tx"), style, failure, {1, 3, 7})
    assert blocks >= 8  # (blocks of ten: five that committed, and the three that failed)
    assert halves(sink, since) == Counter(range(50))
    assert source.describe().groups[group].lag == 0


@pytest.mark.parametrize("style", ["iter_batches", "receive_batch"])
def test_two_members_in_threads_each_with_failing_blocks_lose_nothing(
    four_channel_source, two_channel_sink, unique_name, style
) -> None:
    # Two pipelines in one process, a member and a holder each, over four channels:
    # an abort sends back the members its own thread received from (and those it
    # consumed from), so each pipeline's failures are given back to its own member.
    source, sink, group = four_channel_source, two_channel_sink, unique_name("etl")
    group_at_latest(source, group)
    since = next_sequences(sink)
    publish_all(source, list(range(400)))
    members = [source.subscriber(group=group, complete_on_empty=True) for _ in range(2)]
    assert sorted(len(member.channels) for member in members) == [2, 2]
    failures: list[BaseException] = []

    def worker(member: rt.Subscriber, failure: str) -> None:
        try:
            run_pipeline(member, sink, unique_name("tx"), style, failure, {1, 4, 9})
        except BaseException as error:  # the test thread reports it
            failures.append(error)

    threads = [
        threading.Thread(target=worker, args=(member, failure))
        for member, failure in zip(members, ("raise_before_consumed", "abort"), strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures
    assert halves(sink, since) == Counter(range(400))
    assert source.describe().groups[group].lag == 0
    for member in members:
        member.close()


def test_a_windowed_loop_whose_blocks_fail_loses_nothing(
    four_channel_source, two_channel_sink, unique_name
) -> None:
    # window=50, blocks of 30, every third block failing, over two channels: an abort
    # sends the member back, but its receive session still counted the window full
    # at the other channel (its count there comes from its takes), and with
    # complete_on_empty the loop heard "empty" and ended: the sink held 350 of 400,
    # lag 50, no error.
    source, sink, group = four_channel_source, two_channel_sink, unique_name("etl")
    group_at_latest(source, group)
    since = next_sequences(sink)
    for channel in range(2):
        publish_all(source, list(range(channel, 400, 2)), key=key_for(channel, 4))
    with source.subscriber(group=group, complete_on_empty=True, window=50) as member:
        failing = set(range(3, 100, 3))
        run_pipeline(
            member, sink, unique_name("tx"), "iter_batches", "raise_before_consumed", failing, 30
        )
    assert halves(sink, since) == Counter(range(400))
    assert source.describe().groups[group].lag == 0


def test_a_member_joining_a_running_pipeline_with_aborts_duplicates_and_loses_nothing(
    four_channel_source, two_channel_sink, unique_name, wait_until
) -> None:
    # A rebalance under a running pipeline: the first member's open transaction may
    # consume a channel it just lost (its commit fails: an abort, which sends it back
    # on what it keeps), and what it had fetched of the lost channels goes to the
    # newcomer after the last commit there.
    source, sink, group = four_channel_source, two_channel_sink, unique_name("etl")
    group_at_latest(source, group)
    since = next_sequences(sink)
    publish_all(source, list(range(400)))
    failures: list[BaseException] = []

    def worker(member: rt.Subscriber, style: str, failing: set[int]) -> None:
        try:
            run_pipeline(member, sink, unique_name("tx"), style, "raise_before_consumed", failing)
        except BaseException as error:  # the test thread reports it
            failures.append(error)

    first = source.subscriber(group=group, complete_on_empty=True)
    threads = [threading.Thread(target=worker, args=(first, "iter_batches", {1, 4, 9, 14}))]
    threads[0].start()

    def written() -> int:  # to the sink since the test began
        return sum(c.tail + 1 - since[c.channel] for c in sink.describe().channels)

    wait_until(lambda: written() >= 60, timeout=60)
    second = source.subscriber(group=group, complete_on_empty=True)
    threads.append(threading.Thread(target=worker, args=(second, "receive_batch", {1, 5})))
    threads[1].start()
    for thread in threads:
        thread.join(120)
    assert not failures
    assert halves(sink, since) == Counter(range(400))
    assert source.describe().groups[group].lag == 0
    first.close()
    second.close()


@pytest.mark.slow
def test_an_abort_gives_back_what_came_under_a_lease_the_members_view_has_not_learnt(
    four_channel_source, two_channel_sink, unique_name, wait_until
) -> None:
    # trial70 (b): a pool of members joining and leaving under load lost 1,375 of 6,000
    # (lag 0, no error). A channel goes from a member to another and back under a new
    # lease; the channels hear of it (their receive sessions read under it at once)
    # before the member's heartbeats bring it to its view. Its loop received W under
    # that lease and the block failed: the abort sent the member back only at the
    # channels of its view (not that one; or under its old lease: "could not send
    # member X back to its commit ... not owned by Lease(X, G)"), so nothing went
    # back, and the next batch (same lease, same jump count) committed over W. Here
    # the member's listener is slow: its heartbeat thread waits in it, so the view
    # stops, as a starved process's does. Before: W missing from the sink, lag 0.
    source, sink, group = four_channel_source, two_channel_sink, unique_name("etl")
    group_at_latest(source, group)
    since = next_sequences(sink)
    told_revoke, release, aborted = threading.Event(), threading.Event(), threading.Event()
    given_back, after = list(range(1000, 1010)), list(range(2000, 2010))

    def slow_listener(change: rt.OwnershipChange) -> None:
        if change.revoked and not told_revoke.is_set():
            told_revoke.set()
            release.wait(300)  # the view stops here until the abort is over

    # Its heartbeats stop in the listener: a timeout far past the test's length.
    member = source.subscriber(group=group, timeout=600.0, on_ownership_change=slow_listener)
    views_at_failure: list[tuple[int, ...]] = []
    failures: list[BaseException] = []

    def loop(txs: rt.Transactions) -> None:
        try:
            for batch in member.iter_batches(10):
                fail = not aborted.is_set() and batch.values[0] in given_back
                if fail:
                    views_at_failure.append(member.channels)
                try:
                    with txs.begin() as tx:
                        tx.publish_batch(sink, [2 * value for value in batch.values])
                        if fail:
                            raise TransformFailed
                        tx.commit_consumed(batch)
                except TransformFailed:
                    aborted.set()
                    release.set()  # the view may move on now
                except rt.TransactionAbortedError:
                    pass  # a rebalance moved a consumed channel: all comes again
        except BaseException as error:  # the test thread reports it
            failures.append(error)

    txs = rt.transactions(unique_name("tx"))
    thread = threading.Thread(target=loop, args=(txs,))
    thread.start()
    try:
        for channel in range(4):  # the loop runs: receives wait at every channel
            publish_all(source, [channel], key=key_for(channel, 4))
        wait_until(lambda: halves(sink, since) == Counter(range(4)), timeout=120)
        newcomer = source.subscriber(group=group)
        moved = newcomer.channels[0]
        assert told_revoke.wait(120)
        newcomer.close()  # its channels go back to the member, under new leases
        publish_all(source, given_back, key=key_for(moved, 4))
        assert aborted.wait(120)
        publish_all(source, after, key=key_for(moved, 4))
        wait_until(lambda: source.describe().groups[group].lag == 0, timeout=120)
    finally:
        release.set()
        member.close()
        thread.join(120)
        txs.close()
    assert not failures
    assert moved not in views_at_failure[0]  # W came under a lease the view had not learnt
    assert halves(sink, since) == Counter([*range(4), *given_back, *after])


def test_what_an_abort_gave_back_cannot_be_committed_until_received_again(
    shared_source, shared_sink, unique_name
) -> None:
    source, sink, group = shared_source, shared_sink, unique_name("g")
    group_at_latest(source, group)
    publish_all(source, list(range(10)))
    txs = rt.transactions(unique_name("tx"))
    with source.subscriber(group=group) as member:
        batch = receive_exactly(member, 10)
        with pytest.raises(TransformFailed), txs.begin() as tx:
            tx.publish_batch(sink, batch.values)
            raise TransformFailed  # before commit_consumed
        # A cumulative commit of an element received before the abort never passes
        # over what the abort gave back: not by itself, nor in a transaction.
        assert batch[4].commit().status is rt.CommitStatus.REJECTED
        assert batch.commit()[0].status is rt.CommitStatus.REJECTED
        with pytest.raises(rt.TransactionAbortedError), txs.begin() as tx:
            tx.publish_batch(sink, batch.values)
            tx.commit_consumed(batch)
        again = receive_exactly(member, 10)
        assert again.values == list(range(10))
        assert again[4].commit().status is rt.CommitStatus.COMMITTED
        assert member.last_committed() == {0: again[4].position}
    txs.close()


@ray.remote
class _Reader:
    """A group member in its own process, handing its batches out."""

    def __init__(self, source: rt.Topic, group: str) -> None:
        self.member = source.subscriber(group=group, complete_on_empty=True)

    def take(self, count: int) -> rt.ElementBatch:
        return receive_exactly(self.member, count)

    def close(self) -> None:
        self.member.close()


def test_elements_of_a_member_in_another_process_come_again_after_an_abort(
    shared_source, shared_sink, unique_name
) -> None:
    # The holder cannot reach that member's handle: it sends its channel back to the
    # commit directly (the member reads again from there; its commits of what it
    # had received before are REJECTED).
    source, sink, group = shared_source, shared_sink, unique_name("g")
    group_at_latest(source, group)
    publish_all(source, list(range(20)))
    reader = _Reader.remote(source, group)
    txs = rt.transactions(unique_name("tx"))
    batch = get(reader.take.remote(10))
    with pytest.raises(TransformFailed), txs.begin() as tx:
        tx.publish_batch(sink, batch.values)
        tx.commit_consumed(batch)
        raise TransformFailed
    assert get(reader.take.remote(10)).values == list(range(10))
    txs.close()
    get(reader.close.remote())


def test_an_abort_passes_over_a_member_whose_topic_was_destroyed(
    make_topic: Callable[..., rt.Topic], shared_sink, unique_name: Callable[[str], str]
) -> None:
    # An abort sends back every member that received on its thread: one whose topic
    # was destroyed since (left open), silent past its timeout, asks the coordinator
    # for its channels, and made the next aborted commit raise TopicNotFoundError
    # instead of its own error (seen in a full run).
    gone = make_topic(channels=1, groups=["g"])
    publish_all(gone, ["x"])
    member = gone.subscriber(group="g", timeout=1.0)
    assert get(member.receive()).value == "x"
    gone.destroy()
    time.sleep(1.5)
    sink = shared_sink  # it reads back only what it wrote since it began: nothing
    since = next_sequences(sink)
    name = unique_name("tx")
    txs = rt.transactions(name)
    with txs.begin() as tx:
        tx.publish(sink, "dropped")
        rt.transactions(name)  # fences the first incarnation, aborting this one
        with pytest.raises(rt.TransactionFencedError):
            tx.commit()
    with rt.transactions(unique_name("tx")).begin() as tx:
        tx.publish(sink, "dropped too")
        tx.abort()
    assert read_values(sink, since=since) == []


def _refuse_to_load(number: int) -> None:
    raise ValueError(f"poison {number}")


class _Poison:
    """A value that pickles, and raises where it is loaded (a poison element)."""

    def __init__(self, number: int) -> None:
        self.number = number

    def __reduce__(self) -> tuple:
        return (_refuse_to_load, (self.number,))


def test_a_transaction_loop_over_elements_before_a_poison_commits_them(make_topic) -> None:
    # trial67: a member's take read past a poison element; the channel stopped its
    # cursor before the poison with a jump, so the elements received before it
    # carried the older jump and their commit_consumed aborted ("no longer owns
    # channel ... reset since it read"). The abort sent the member back, it read
    # them again past the poison, another jump: every transaction aborted, for ever
    # (a script, 300 values with 6 poison over 2 channels: 1,073 of 1,435
    # transactions aborted so in 120 s, sink 60 of 294, lag 240, and the
    # PoisonElementError never raised to the loop).
    source = make_topic(channels=1)
    sink = make_topic(channels=1)
    publish_all(source, [*range(10), _Poison(10), *range(11, 20)])
    txs = rt.transactions(f"poison-{source.name}")
    member = source.subscriber(group="g", start="earliest", complete_on_empty=True)
    outcomes: list[str] = []
    try:
        for _ in range(10):
            try:
                with txs.begin() as tx:
                    batch = get(member.receive_batch(20))
                    if not batch:
                        break
                    tx.publish_batch(sink, [element.value for element in batch])
                    tx.commit_consumed(batch)
                outcomes.append("committed")
            except rt.PoisonElementError as error:
                outcomes.append("poison")
                member.seek(error.channel, error.position)  # the next is the first after it
            except rt.TransactionAbortedError as error:
                outcomes.append(f"aborted: {error}")
        assert sorted(read_values(sink)) == [*range(10), *range(11, 20)], outcomes
        assert source.describe().groups["g"].lag == 0
    finally:
        member.close()
        txs.close()
    assert outcomes[:3] == ["committed", "poison", "committed"]
