"""Durability against a real Ray: channels and coordinators killed with SIGKILL
(their pids from ``describe()``), stores damaged on disk, a store that fails.
Every history is counted by the loss checker (DESIGN 8): lost, duplicates in
the log, inconsistent positions and stale commits accepted are 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import ray

import raytopic as rt
from raytopic.actors.stores.base import RingbufferStore
from raytopic.actors.stores.segment_log import SegmentLogStore
from raytopic.core.config import DEFAULT_NAMESPACE

from tests.loss_checker import LossChecker, publish_outcome
from tests.topic_helpers import (
    TIMEOUT,
    damage_a_middle_record,
    get,
    key_for,
    kill_channel,
    module_topic,
    next_sequences,
    publish_all,
    serving_again,
    stop_every_actor,
)

RESTART_BOUND = 10.0
"""Seconds a killed channel may take to serve again (the issue's bound)."""

HOLD_BOUND = 30.0
"""Seconds a member's filter holds "held" at most when no test releases it."""

# The store-less ring of 10 that two store tests compare with: never killed, it holds
# no store, and each test reads back only what it adds (sequences from
# next_sequences), so the tests share it (each topic starts an actor per channel and a
# coordinator). The tests with a store, or that kill, make their own.
plain_ring_of_ten = module_topic(channels=1, capacity=10, overflow="overwrite")


def _channel(topic: rt.Topic, channel: int) -> rt.ChannelStats:
    return topic.describe().channels[channel]


def _drain(subscriber: rt.Subscriber, checker: LossChecker, member: str) -> list[rt.Element]:
    """Receive until empty, recording deliveries; a DataLossError resets monotonicity."""
    got: list[rt.Element] = []
    while True:
        try:
            batch = get(subscriber.receive_batch(500))
        except rt.DataLossError:
            checker.ownership_changed(member)
            continue
        if not batch:
            return got
        for element in batch:
            checker.delivered(member, element.channel, element.sequence, element.value)
        got.extend(batch)


def test_a_killed_channel_with_a_store_comes_back_with_its_elements_and_commits(
    make_topic, tmp_path: Path
):
    # One channel: what is checked is the killed channel's own elements, head, tail and
    # commit (the tests below keep a second channel where one survives another's death).
    topic = make_topic(channels=1, store=str(tmp_path), groups=["g"])
    key = key_for(0, topic.channel_count)
    with topic.publisher() as publisher:
        for value in range(300):
            publisher.publish(value, key=key)
    member = topic.subscriber(group="g", complete_on_empty=True)
    first = get(member.receive_batch(100))
    assert [e.value for e in first] == list(range(100))
    assert first[-1].commit().status is rt.CommitStatus.COMMITTED
    before = _channel(topic, 0)
    assert before.durable and before.epoch == 1

    old_epoch = kill_channel(topic, 0)
    took = serving_again(topic, 0, old_epoch, RESTART_BOUND)
    after = _channel(topic, 0)
    assert after.epoch == old_epoch + 1 and after.pid != before.pid
    assert (after.head, after.tail) == (before.head, before.tail)
    assert took < RESTART_BOUND
    # The commit survived: the member resumes after it (what it had received
    # past the commit comes again: at least once).
    assert member.last_committed()[0].sequence == first[-1].sequence
    rest = [e.value for e in _drain(member, LossChecker(), "m") if e.channel == 0]
    assert rest == list(range(100, 300))
    # The handles made before the restart publish on.
    with topic.publisher() as publisher:
        publisher.publish(300, key=key).result(timeout=TIMEOUT)
    assert [e.value for e in _drain(member, LossChecker(), "m")] == [300]


@pytest.mark.slow
@pytest.mark.parametrize("overflow", ["overwrite", "block"])
def test_channels_killed_again_and_again_under_four_publishers_lose_nothing(
    make_topic, tmp_path: Path, overflow: str, wait_until
):
    # A small capacity with "block" and a group that keeps up slowly: the
    # publishers wait for room while channels die under them.
    capacity = 2_000 if overflow == "block" else 1_000_000
    topic = make_topic(
        channels=2, store=str(tmp_path), groups=["g"], overflow=overflow, capacity=capacity
    )
    checker = LossChecker()
    stop = threading.Event()
    sent = [0, 0, 0, 0]  # publishes made, per publisher

    def publish(number: int) -> None:
        publisher = topic.publisher(block_timeout=60.0, linger=0.002)
        futures = []
        while not stop.is_set():
            payload = f"p{number}-{sent[number]}"
            futures.append((payload, publisher.publish(payload)))
            sent[number] += 1
            if len(futures) >= 200:
                _settle(futures, checker)
            time.sleep(0.0005)
        publisher.close()
        _settle(futures, checker)

    member = topic.subscriber(group="g", complete_on_empty=True)
    consumed: list[rt.Element] = []
    consuming = threading.Event()

    def consume() -> None:  # the slow group: commits what it received
        while not consuming.is_set():
            try:
                batch = get(member.receive_batch(200))
            except rt.StaleSequenceError as error:  # counted: what it skipped is lost
                print("skipped:", type(error).__name__, error)
                checker.ownership_changed("m")
                continue
            for element in batch or ():
                checker.delivered("m", element.channel, element.sequence, element.value)
            if batch:
                consumed.extend(batch)
                batch[-1].commit()
            time.sleep(0.05)

    threads = [threading.Thread(target=publish, args=(n,)) for n in range(4)]
    reader = threading.Thread(target=consume)
    for thread in [*threads, reader]:
        thread.start()
    restarts = []
    try:
        # Three kills, each under load: channel 0, channel 1, then channel 0 again, a
        # channel killed again after its restart (a fourth, of channel 1 again, only
        # repeated that and cost one more actor start).
        for kill in range(3):
            floor = sum(sent) + 400
            wait_until(lambda floor=floor: sum(sent) >= floor, timeout=30, interval=0.02)
            channel = kill % 2
            old_epoch = kill_channel(topic, channel)
            restarts.append(serving_again(topic, channel, old_epoch, RESTART_BOUND))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
        consuming.set()
        reader.join(timeout=60)
    # Positions are what the channel holds: after a restart the member may get
    # a range again (at least once); monotonicity is per incarnation of the view.
    checker.ownership_changed("m")
    for element in _drain(member, checker, "m"):
        consumed.append(element)
    report = checker.report()
    print(report, "restarts (s):", [round(took, 2) for took in restarts])
    for payload in report.details.get("lost", []):
        print("lost:", payload, "acknowledged at (channel, sequence)", ACKED.get(payload))
    assert report.acknowledged > 1000, report
    report.assert_safe()
    assert report.unexpected == 0, report
    assert max(restarts) < RESTART_BOUND
    assert [c.epoch for c in topic.describe().channels] == [3, 2]  # killed twice, once


ACKED: dict[str, tuple[int, int]] = {}
"""Where each acknowledged payload went (printed for the lost ones)."""


def _settle(futures: list[tuple[str, Any]], checker: LossChecker) -> None:
    for payload, future in futures:
        try:
            status = future.result(timeout=120)
            ACKED[payload] = (status.channel, status.position.sequence)
            error = None
        except Exception as failure:
            error = failure
            print("publish failed:", type(failure).__name__, failure)
        checker.published(payload, publish_outcome(error))
    futures.clear()


def test_without_a_store_a_restart_is_reported_once_and_no_position_is_reused(make_topic):
    topic = make_topic(channels=1, groups=["g"], retain=True)
    member = topic.subscriber(group="g", complete_on_empty=True)
    anonymous = topic.subscriber(complete_on_empty=True)
    with topic.publisher() as publisher:
        for value in range(10):
            publisher.publish(value)
    received = get(member.receive_batch(5))
    assert received[-1].commit().committed
    assert len(get(anonymous.receive_batch(3))) == 3

    old_epoch = kill_channel(topic, 0)
    serving_again(topic, 0, old_epoch, RESTART_BOUND)
    for subscriber in (member, anonymous):
        with pytest.raises(rt.DataLossError) as lost:
            get(subscriber.receive_batch(10))
        assert (lost.value.old_epoch, lost.value.new_epoch) == (old_epoch, old_epoch + 1)
        assert lost.value.channel == 0
        assert lost.value.head_sequence > received[-1].sequence
        assert get(subscriber.receive_batch(10)) == []  # then it continues: empty now
    # A position of the old epoch moves nothing.
    assert received[-1].commit().status is not rt.CommitStatus.COMMITTED
    with topic.publisher() as publisher:
        status = publisher.publish("after").result(timeout=TIMEOUT)
    assert status.position.sequence > received[-1].sequence + 5
    for subscriber in (member, anonymous):
        assert [e.value for e in get(subscriber.receive_batch(10))] == ["after"]


def test_a_channel_that_restarts_while_its_coordinator_is_down_gets_its_groups_back(
    make_topic,
):
    # Nobody polls channels: a restarted one tells its coordinator, and a
    # restarted coordinator restores the channels that wait for it.
    topic = make_topic(channels=2, groups=["g"])
    member = topic.subscriber(group="g", complete_on_empty=True)
    coordinator_pid = get(topic._coordinator.__ray_call__.remote(lambda _: os.getpid()))
    old_epoch = _channel(topic, 0).epoch
    os.kill(_channel(topic, 0).pid, signal.SIGKILL)
    os.kill(coordinator_pid, signal.SIGKILL)
    serving_again(topic, 0, old_epoch, RESTART_BOUND)
    with topic.publisher() as publisher:
        statuses = [publisher.publish(value).result(timeout=TIMEOUT) for value in range(4)]
    assert {status.channel for status in statuses} == {0, 1}
    # The member hears of the loss once (it had no store), and reads on.
    values: list[Any] = []
    told = 0
    deadline = time.monotonic() + TIMEOUT
    while sorted(values) != [0, 1, 2, 3] and time.monotonic() < deadline:
        try:
            values.extend(e.value for e in get(member.receive_batch(10)))
        except rt.DataLossError as error:
            assert error.channel == 0
            told += 1
    assert sorted(values) == [0, 1, 2, 3] and told == 1


def _step(value: dict[str, int]) -> int:
    return value["step"]


def test_what_a_killed_home_took_from_a_sibling_and_held_is_delivered_again(
    make_topic, tmp_path: Path, wait_until
):
    # A resequencing member's receive session, at its home channel, takes from the
    # sibling and holds what it took there (step 0 is missing): the sibling's cursor
    # is past those elements, and no loan is left to take back. The home dies with
    # them: the sibling delivers them again, and nothing is lost.
    topic = make_topic(channels=2, store=str(tmp_path), groups=["g"])
    order = rt.Resequence(seq=_step, start=0, timeout_ms=600_000)
    member = topic.subscriber(group="g", resequence=order)
    home = member._receives.host_channel  # the channel actor hosting its session
    sibling = 1 - home
    waiting = member.receive_batch(10)
    with topic.publisher() as publisher:
        for step in range(1, 6):
            publisher.publish({"step": step}, key=key_for(sibling, 2))
    wait_until(lambda: member.resequencer_stats.held == 5)
    assert topic.describe().groups["g"].channels[sibling].depth == 0

    old_epoch = kill_channel(topic, home)
    serving_again(topic, home, old_epoch, RESTART_BOUND)
    with topic.publisher() as publisher:
        publisher.publish({"step": 0}, key=key_for(home, 2)).result(timeout=TIMEOUT)
    steps = [e.value["step"] for e in get(waiting)]  # the receive, retried at the new home
    while len(steps) < 6:
        more = get(member.receive_batch(10))  # released later: hangs (fails) if lost
        steps += [e.value["step"] for e in more]
    assert steps == list(range(6))
    member.close()


def _held_the_first_time(marker: str, value: Any) -> bool:
    """A member's filter: the first time it sees "held" it marks ``marker`` and holds
    its channel's process (its take is under way meanwhile) until the test releases it
    (``_release``, once its publish and kill are done, however slow a loaded machine
    is) or HOLD_BOUND seconds pass, then marks that it let go; it passes everything."""
    if value == "held" and not os.path.exists(marker):
        Path(marker).touch()
        deadline = time.monotonic() + HOLD_BOUND
        while not os.path.exists(marker + ".released") and time.monotonic() < deadline:
            time.sleep(0.02)
        Path(marker + ".passed").touch()
    return True


def _release(marker: Path) -> None:
    """Let the filter holding "held" go on (see _held_the_first_time)."""
    Path(f"{marker}.released").touch()


def _let_go(marker: Path) -> bool:
    """Whether the filter holding "held" has let it go."""
    return Path(f"{marker}.passed").exists()


def _still_held(marker: Path) -> None:
    """The host was killed while b's filter held its take: the take moves b's read
    position past "held" once the filter lets it go, with no host to reply to. (Its
    replacement reads b again after the commit before it answers anything, so that
    moved position is not there to observe afterwards.)"""
    assert not _let_go(marker), "the kill came after the take's reply"


def _member_holding_at_b(
    make_topic: Any, tmp_path: Path
) -> tuple[rt.Topic, rt.Subscriber, Path, int, int]:
    """A member of group "g" on two stored channels whose filter holds "held" (see
    _held_the_first_time); returns the topic, the member, the filter's marker, the
    member's host channel a and its sibling b."""
    topic = make_topic(channels=2, store=str(tmp_path / "store"), groups=["g"])
    marker = tmp_path / "held"
    member = topic.subscriber(
        group="g", complete_on_empty=True, filter=partial(_held_the_first_time, str(marker))
    )
    a = member._receives.host_channel
    return topic, member, marker, a, 1 - a


def _kill_host_during_take_at_b(
    topic: rt.Topic,
    member: rt.Subscriber,
    publisher: rt.Publisher,
    marker: Path,
    channels: tuple[int, int],
    wait_until: Any,
) -> tuple[Any, int]:
    """The member's receive at its host a (empty there) takes "held" at b; "a1" is
    published at a, and a is SIGKILLed while b's filter holds that take's reply.
    Returns the receive (retried at the new a) and a's epoch before the kill."""
    a, b = channels
    publisher.publish("held", key=key_for(b, 2)).result(timeout=TIMEOUT)
    waiting = member.receive_batch(10)  # at a, empty: its session takes at b
    wait_until(marker.exists, timeout=TIMEOUT)
    publisher.publish("a1", key=key_for(a, 2)).result(timeout=TIMEOUT)
    old_epoch = kill_channel(topic, a)  # while b's filter holds the take's reply
    _still_held(marker)
    _release(marker)  # b replies to a process that is gone
    return waiting, old_epoch


def _receive_the_rest(member: rt.Subscriber, received: list[Any]) -> None:
    """Receive batches (committing each) until one comes back empty."""
    for _ in range(20):
        batch = get(member.receive_batch(10))
        if not batch:
            return
        received += [e.value for e in batch]
        batch[-1].commit()


@pytest.mark.slow
def test_what_a_killed_host_took_from_a_sibling_is_not_committed_past_by_another_session(
    make_topic, tmp_path: Path, wait_until
):
    # The member's host a takes "held" at channel b (b's read position moves past
    # it) and dies before b's reply reaches it. The receive, retried at the new a,
    # hands over a's own element, and the member commits on: "held" must still come.
    # (Seen as one loss in test_channels_killed_again_and_again...: a complete_on_empty
    # member's batches went to its channels in turn, so b hosted a session of it too,
    # which read on there past "held", and the member committed what it handed over.)
    topic, member, marker, a, b = _member_holding_at_b(make_topic, tmp_path)
    assert get(member.receive_batch(10)) == []  # (batches in turn: this one went to b)
    with topic.publisher() as publisher:
        waiting, old_epoch = _kill_host_during_take_at_b(
            topic, member, publisher, marker, (a, b), wait_until
        )
        serving_again(topic, a, old_epoch, RESTART_BOUND)
        publisher.publish("b1", key=key_for(b, 2)).result(timeout=TIMEOUT)
    first = get(waiting)  # retried at the new a: its own element first
    assert [e.value for e in first] == ["a1"]
    first[-1].commit()
    received = [e.value for e in first]
    _receive_the_rest(member, received)
    assert sorted(set(received)) == ["a1", "b1", "held"], received
    member.close()


@pytest.mark.slow
@pytest.mark.parametrize("reply_first", [True, False], ids=["after-the-reply", "before-it"])
def test_what_a_killed_host_took_from_a_sibling_is_not_committed_past_by_an_iteration(
    make_topic, tmp_path: Path, wait_until, reply_first: bool
):
    # As above, but the member then iterates: an iteration reads each channel at its
    # own session, so b's session reads on at b, and the member commits what it hands
    # over. Started once the retried receive answered (``after-the-reply``), or at once
    # while the host is still down (``before-it``): "held" must still come.
    topic, member, marker, a, b = _member_holding_at_b(make_topic, tmp_path)
    received: list[Any] = []
    assert get(member.receive_batch(10)) == []  # (batches in turn: this one went to b)
    with topic.publisher() as publisher:
        waiting, old_epoch = _kill_host_during_take_at_b(
            topic, member, publisher, marker, (a, b), wait_until
        )
        publisher.publish("b1", key=key_for(b, 2)).result(timeout=TIMEOUT)
        if reply_first:
            serving_again(topic, a, old_epoch, RESTART_BOUND)
            first = get(waiting)  # retried at the new a: its own element
            assert [e.value for e in first] == ["a1"]
            first[-1].commit()
            received += [e.value for e in first]
    for batch in member.iter_batches(10):
        received += [e.value for e in batch]
        batch.commit()
    if not reply_first:
        received += [e.value for e in get(waiting)]
    _receive_the_rest(member, received)  # what is left after the iteration
    assert sorted(set(received)) == ["a1", "b1", "held"], received
    member.close()


@pytest.mark.slow
def test_what_a_killed_host_took_for_a_receive_sent_mid_iteration_is_not_committed_past(
    make_topic, tmp_path: Path, wait_until
):
    # An iteration is under way (each channel read at its own session) when the user
    # sends one receive(): it goes to the host a, whose session takes "held" at b. a
    # stalls (SIGSTOP) before b's reply reaches it, and is SIGKILLed 3 s later. The
    # iteration meanwhile reads on at b and the member commits what it hands over:
    # "held" must still come.
    topic, member, marker, a, b = _member_holding_at_b(make_topic, tmp_path)
    pid_a = topic.describe().channels[a].pid
    received: list[Any] = []
    with topic.publisher() as publisher:
        publisher.publish("a0", key=key_for(a, 2)).result(timeout=TIMEOUT)
        iteration = iter(member.iter_batches(10))
        first = next(iteration)
        assert [e.value for e in first] == ["a0"]
        first.commit()
        received += [e.value for e in first]
        in_flight = [ref for reads in member._receives._reads.values() for ref, _ in reads.refs]
        ray.wait(in_flight, num_returns=len(in_flight), timeout=TIMEOUT)  # answered "empty"
        for value in ("held", "b1"):
            publisher.publish(value, key=key_for(b, 2)).result(timeout=TIMEOUT)
        waiting = member.receive()  # at the host a, empty there: its session takes at b
        wait_until(marker.exists, timeout=TIMEOUT)
        publisher.publish("a1", key=key_for(a, 2)).result(timeout=TIMEOUT)
    os.kill(pid_a, signal.SIGSTOP)  # while b's filter holds the take's reply
    _still_held(marker)
    _release(marker)
    wait_until(lambda: _let_go(marker), timeout=TIMEOUT)
    time.sleep(0.5)  # b replied to a
    killer = threading.Timer(3.0, os.kill, (pid_a, signal.SIGKILL))
    killer.start()  # a dies with the reply unread
    try:
        for batch in iteration:  # reads b at once; a only once it is back
            received += [e.value for e in batch]
            batch.commit()
    finally:
        killer.join()
    element = get(waiting)
    if element is not None:
        received.append(element.value)
        element.commit()
    _receive_the_rest(member, received)
    assert sorted(set(received)) == ["a0", "a1", "b1", "held"], received
    member.close()


def _member_that_committed(topic: rt.Topic, count: int) -> rt.Subscriber:
    """A member of group "g" that received and committed values 0..count-1."""
    member = topic.subscriber(group="g", complete_on_empty=True)
    with topic.publisher() as publisher:
        for value in range(count):
            publisher.publish(value)
    for element in _drain(member, LossChecker(), "m"):
        element.commit()
    return member


def test_a_killed_coordinator_keeps_groups_commits_and_generations(make_topic, wait_until):
    topic = make_topic(channels=2, groups=["g"])
    member = _member_that_committed(topic, 20)
    before = topic.describe().groups["g"]
    coordinator_pid = get(topic._coordinator.__ray_call__.remote(lambda _: os.getpid()))
    os.kill(coordinator_pid, signal.SIGKILL)

    again = rt.get_topic(topic.name, namespace=topic.namespace)  # waits for the restart
    after = again.describe().groups["g"]
    assert after.committed == before.committed
    assert after.generation > before.generation
    assert [m.member_id for m in after.members] == [member.subscriber_id]
    # The member keeps its channels and receives on; a new member joins.
    with topic.publisher() as publisher:
        publisher.publish("next").result(timeout=TIMEOUT)
    assert [e.value for e in get(member.receive_batch(10))] == ["next"]
    second = again.subscriber(group="g", complete_on_empty=True)
    wait_until(lambda: len(second.channels) == 1 and len(member.channels) == 1)
    assert again.describe().groups["g"].generation > after.generation


def test_received_refs_stay_readable_after_their_channel_dies(make_topic):
    topic = make_topic(channels=1)
    subscriber = topic.subscriber(complete_on_empty=True)
    with topic.publisher() as publisher:
        publisher.publish({"big": "x" * 200_000})  # out of band: in the object store
        publisher.publish("small")
    refs = [subscriber.receive(), subscriber.receive()]
    ray.wait(refs, num_returns=2, timeout=TIMEOUT)
    stats = _channel(topic, 0)
    os.kill(stats.pid, signal.SIGKILL)
    big, small = get(refs)
    assert big.value == {"big": "x" * 200_000} and small.value == "small"


class _RefusingStore(RingbufferStore):
    """An in-memory store that refuses a value of "refuse" (a user's store), and ends
    its process on "exit" (SystemExit, as the bad-input run's store did)."""

    def __init__(self) -> None:
        self._items: dict[int, Any] = {}

    def store(self, sequence: int, item: Any) -> None:
        if item == "refuse":
            raise OSError("disk says no")
        if item == "exit":
            raise SystemExit(5)
        self._items[sequence] = item

    def load(self, sequence: int) -> Any:
        return self._items.get(sequence)

    def largest_sequence(self) -> int:
        return max(self._items, default=-1)


def _refusing_store(topic_name: str, channel: int) -> RingbufferStore:
    return _RefusingStore()


def test_a_store_error_rejects_the_add_and_the_channel_lives(make_topic):
    topic = make_topic(channels=1, store=_refusing_store, overflow="fail")
    ring = topic.ringbuffer(0)
    assert ring.add("kept") == 0
    with pytest.raises(rt.StoreError, match="disk says no"):
        get(ring.add_all_async(["refuse"], "fail"))
    epoch = topic.describe().channels[0].epoch
    with topic.publisher() as publisher:
        with pytest.raises(rt.StoreError):
            publisher.publish("refuse").result(timeout=TIMEOUT)
        with pytest.raises(rt.StoreError, match="raised SystemExit in store"):
            publisher.publish("exit").result(timeout=TIMEOUT)
        assert publisher.publish("after").result(timeout=TIMEOUT).position.sequence == 1
    assert (ring.head_sequence(), ring.tail_sequence()) == (0, 1)
    assert ring.read_one(1) == "after"
    assert topic.describe().channels[0].epoch == epoch  # its process never ended


def _records(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def test_a_torn_tail_and_a_flipped_bit_are_found_and_nothing_altered_is_delivered(
    make_topic, tmp_path: Path, ray_session
):
    name = f"damaged-{os.getpid()}-{time.monotonic_ns()}"
    topic = rt.create_topic(name, channels=1, store=str(tmp_path), groups=["g"])
    ring = topic.ringbuffer(0)
    for first in range(0, 50, 10):  # five appends: five records of ten
        get(ring.add_all_async(list(range(first, first + 10)), "fail"))
    stop_every_actor(topic)
    segment = _records(tmp_path / topic.namespace / name / "0")[0]
    data = bytearray(segment.read_bytes())
    size = len(data) // 5
    data[size + size // 2] ^= 0x10  # a bit in the second record (values 10..19)
    segment.write_bytes(bytes(data[:-3]))  # and the last record torn (values 40..49)

    again = rt.create_topic(name, channels=1, store=str(tmp_path), groups=["g"])
    try:
        stats = again.describe().channels[0]
        assert stats.damaged == ((10, 19),)
        # The intact records before the damage keep their places in the ring.
        assert (stats.head, stats.tail) == (0, 39)
        member = again.subscriber(group="g", complete_on_empty=True)
        # The good elements before the damage come from the store, then the
        # damaged range is reported once, then the rest.
        assert [e.value for e in get(member.receive_batch(100))] == list(range(10))
        with pytest.raises(rt.DataLossError, match="damaged") as lost:
            get(member.receive_batch(100))
        assert lost.value.head_sequence == 20
        assert [e.value for e in get(member.receive_batch(100))] == list(range(20, 40))
        assert get(member.receive_batch(100)) == []
    finally:
        again.destroy()


def _read_through(subscriber: rt.Subscriber) -> tuple[list[Any], list[tuple[int, int]]]:
    """Everything a subscriber receives until empty, and the damaged ranges it was told of."""
    values: list[Any] = []
    lost: list[tuple[int, int]] = []
    while True:
        try:
            batch = get(subscriber.receive_batch(1000))
        except rt.DataLossError as error:
            lost.append(error.lost)
            continue
        if not batch:
            return values, lost
        values.extend(element.value for element in batch)


def test_a_damaged_record_costs_only_its_own_elements_for_every_reader(
    ray_session, unique_name, tmp_path: Path
):
    name = unique_name("damaged")
    groups = ["g", rt.SharedGroup("s")]
    topic = rt.create_topic(name, channels=1, store=str(tmp_path), groups=groups)
    try:
        first, last = damage_a_middle_record(topic, str(tmp_path))
        stats = _channel(topic, 0)
        assert 0 < first <= last < 99
        assert (stats.head, stats.tail) == (0, 99)  # every intact record at its place
        intact = [value for value in range(100) if not first <= value <= last]

        # Anonymous from earliest, a channel-owned group, a shared group: every
        # intact element, and the damaged range named once.
        readers = [
            topic.subscriber(start="earliest", complete_on_empty=True),
            topic.subscriber(group="g", complete_on_empty=True),
            topic.subscriber(group="s", mode="shared", complete_on_empty=True),
        ]
        for reader in readers:
            assert _read_through(reader) == (intact, [(first, last)]), reader
        # A seek below it crosses it again, and is told again, once.
        anonymous = readers[0]
        anonymous.seek(0, topic.position(0, first - 2))
        assert _read_through(anonymous) == ([first - 1, *range(last + 1, 100)], [(first, last)])
        # The ring buffer view: a read that starts at it is told; one before it
        # stops short of it.
        ring = topic.ringbuffer(0)
        with pytest.raises(rt.DataLossError, match=f"{first}..{last}") as told:
            ring.read_one(first)
        assert (told.value.lost, told.value.head_sequence) == ((first, last), last + 1)
        assert ring.read_one(last + 1) == last + 1
        before = get(ring.read_many_async(0, 1, 100))
        assert list(before) == list(range(first)) and before.next_sequence_to_read_from == first
        with pytest.raises(rt.DataLossError):
            get(ring.read_many_async(first, 1, 100))
        # A range read (Ray Data's; Spark's in test_spark) fails at planning,
        # typed, unless it is asked to read around the damage.
        import raytopic.data

        with pytest.raises(rt.DataLossError, match="fail_on_data_loss") as planned:
            raytopic.data.read_topic(topic)
        assert planned.value.lost == (first, last) and planned.value.channel == 0
        rows = raytopic.data.read_topic(topic, fail_on_data_loss=False).take_all()
        assert sorted(row["value"] for row in rows) == intact
        for reader in readers:
            reader.close()
    finally:
        topic.destroy()


def test_a_retried_publish_whose_reply_was_lost_is_appended_once(make_topic, tmp_path: Path):
    marker = tmp_path / "killed-once"
    topic = make_topic(channels=1, store=_dying_store_factory(str(tmp_path), str(marker)))
    with topic.publisher() as publisher:
        status = publisher.publish("once").result(timeout=TIMEOUT)
    assert marker.exists()  # the channel died after storing, before replying
    assert status.position.sequence == 0
    assert _channel(topic, 0).epoch == 2
    ring = topic.ringbuffer(0)
    assert (ring.head_sequence(), ring.tail_sequence()) == (0, 0)


def _dying_store_factory(root: str, marker: str) -> Any:
    def factory(topic_name: str, channel: int) -> RingbufferStore:
        return _DyingStore(os.path.join(root, topic_name, str(channel)), marker)

    return factory


class _DyingStore(SegmentLogStore):
    """The embedded store, whose process dies right after its first stored append
    (once: a marker file remembers): the append is durable, its reply never sent."""

    def __init__(self, directory: str, marker: str) -> None:
        super().__init__(directory)
        self._marker = marker

    def store_batch(self, batch: Any) -> None:
        super().store_batch(batch)
        if not os.path.exists(self._marker):
            self.sync()
            Path(self._marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)


def _unopenable_store(topic_name: str, channel: int) -> RingbufferStore:
    raise OSError(f"no disk for channel {channel}")


def _exiting_factory(topic_name: str, channel: int) -> RingbufferStore:
    raise SystemExit(3)


def _interrupted_factory(topic_name: str, channel: int) -> RingbufferStore:
    raise KeyboardInterrupt


class _NotAStore:
    """Has ``store`` but none of the seed's other methods."""

    def store(self, sequence: int, item: Any) -> None:
        pass


def _not_a_store(topic_name: str, channel: int) -> Any:
    return _NotAStore()


def _no_topic_left(name: str) -> None:
    with pytest.raises(rt.TopicNotFoundError):
        rt.get_topic(name)
    actors = ray.util.list_named_actors(all_namespaces=True)
    assert not [actor for actor in actors if name in actor["name"]], actors


@pytest.mark.parametrize(
    ("factory", "error", "says"),
    [
        (_unopenable_store, rt.StoreError, r"_unopenable_store raised .*no disk for channel"),
        (_not_a_store, rt.InvalidTypeError, r"_not_a_store returned a _NotAStore.* lacks "),
        # Issue 47: its channel restarted 46 times in 30 s, then create_topic raised
        # RayTaskError(TimeoutError).
        (_exiting_factory, rt.StoreError, r"_exiting_factory raised .*SystemExit: 3"),
        (_interrupted_factory, rt.StoreError, r"_interrupted_factory raised .*KeyboardInterrupt"),
    ],
    ids=["raises", "not-a-store", "exits", "interrupts"],
)
def test_a_store_factory_that_fails_fails_create_topic_and_leaves_nothing(
    ray_session, unique_name, factory: Any, error: type, says: str
):
    name = unique_name("unopenable")
    with pytest.raises(error, match=says):
        rt.create_topic(name, channels=1, store=factory, groups=["g"])
    _no_topic_left(name)
    # The name is free: a topic with a working store is made under it at once.
    topic = rt.create_topic(name, channels=1)
    topic.destroy()


def test_a_store_is_any_object_with_the_seeds_four_methods(tmp_path: Path) -> None:
    plain = _LinesStore(str(tmp_path / "lines.jsonl"))
    assert type(plain).__mro__ == (_LinesStore, object)  # inherits nothing of ours
    assert isinstance(plain, rt.RingbufferStore)
    assert not isinstance(_NotAStore(), rt.RingbufferStore)
    assert isinstance(SegmentLogStore(tmp_path / "log"), rt.RingbufferStore)


def _store_refused_after(marker: str) -> Any:
    """A factory that opens a store until ``marker`` exists (a disk that went away)."""

    def factory(topic_name: str, channel: int) -> RingbufferStore:
        if os.path.exists(marker):
            raise OSError(f"no disk for channel {channel}")
        return _RefusingStore()

    return factory


def test_a_channel_that_cannot_reopen_its_store_after_a_restart_is_fenced(
    make_topic, tmp_path: Path
):
    marker = tmp_path / "disk-gone"
    topic = make_topic(channels=1, store=_store_refused_after(str(marker)))
    marker.touch()
    old_epoch = kill_channel(topic, 0)
    deadline = time.monotonic() + RESTART_BOUND
    while (stats := _channel(topic, 0)).state != "failed":
        assert time.monotonic() < deadline, stats
        time.sleep(0.1)
    assert "no disk for channel 0" in stats.failure and stats.epoch >= old_epoch
    publisher = topic.publisher()
    with pytest.raises(rt.ChannelFailedError, match="could not recover its store"):
        publisher.publish("x").result(timeout=TIMEOUT)
    with pytest.raises(rt.ChannelFailedError):
        topic.ringbuffer(0).size()
    assert topic.describe().channels[0].pid == stats.pid  # fenced, not dead


def test_a_coordinator_killed_during_a_rebalance_loses_no_commit(make_topic, wait_until):
    topic = make_topic(channels=2, groups=["g"])
    first = _member_that_committed(topic, 40)
    committed = topic.describe().groups["g"].committed
    generation = topic.describe().groups["g"].generation
    pid = get(topic._coordinator.__ray_call__.remote(lambda _: os.getpid()))
    joining = threading.Thread(
        target=lambda: joined.append(topic.subscriber(group="g", complete_on_empty=True))
    )
    joined: list[rt.Subscriber] = []
    joining.start()
    time.sleep(0.05)  # the join is under way at the coordinator
    os.kill(pid, signal.SIGKILL)
    joining.join(timeout=30)
    assert joined, "the join did not complete after the coordinator restarted"
    second = joined[0]
    started = time.monotonic()
    wait_until(lambda: len(first.channels) + len(second.channels) == 2, timeout=10)
    assert time.monotonic() - started < 10
    after = topic.describe().groups["g"]
    assert after.committed == committed
    assert after.generation > generation
    with topic.publisher() as publisher:
        for value in range(40, 48):
            publisher.publish(value)
    checker = LossChecker()
    got = _drain(first, checker, "first") + _drain(second, checker, "second")
    assert sorted(e.value for e in got) == list(range(40, 48))


# One channel (an actor fewer): what is checked is that the topic and all it was fed
# outlive the driver, not how they spread over channels.
DRIVER = """
import sys
import ray
import raytopic as rt
ray.init(address=sys.argv[1], namespace=sys.argv[3])
topic = rt.create_topic(sys.argv[2], channels=1, groups=["g"], namespace=sys.argv[3])
with topic.publisher() as publisher:
    for value in range(500):
        publisher.publish(value)
"""


def test_a_topic_outlives_the_driver_that_fed_it(ray_cluster, ray_session, unique_name):
    name = unique_name("outlives")
    namespace = DEFAULT_NAMESPACE
    fed = subprocess.run(
        [sys.executable, "-c", DRIVER, ray_cluster, name, namespace],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert fed.returncode == 0, fed.stderr[-3000:]
    topic = rt.get_topic(name)
    try:
        member = topic.subscriber(group="g", complete_on_empty=True)
        values = sorted(e.value for e in _drain(member, LossChecker(), "m"))
        assert values == list(range(500))
    finally:
        topic.destroy()


class _FailingSyncStore(SegmentLogStore):
    """The embedded store on a disk whose fdatasync fails (after it worked once)."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.syncs = 0

    def sync(self) -> None:
        self.syncs += 1
        if self.syncs > 1:
            raise OSError(5, "Input/output error")
        super().sync()


def _failing_sync_factory(root: str) -> Any:
    def factory(topic_name: str, channel: int) -> RingbufferStore:
        return _FailingSyncStore(os.path.join(root, topic_name, str(channel)))

    return factory


def test_a_failed_fdatasync_fences_the_channel_and_acknowledges_nothing_more(
    make_topic, tmp_path: Path
):
    topic = make_topic(channels=1, store=_failing_sync_factory(str(tmp_path)))
    publisher = topic.publisher()
    assert publisher.publish("synced").result(timeout=TIMEOUT).position.sequence == 0
    with pytest.raises(rt.ChannelFailedError, match="fdatasync failed"):
        publisher.publish("not synced").result(timeout=TIMEOUT)
    stats = topic.describe().channels[0]
    assert stats.state == "failed" and "Input/output error" in stats.failure
    with pytest.raises(rt.ChannelFailedError):
        publisher.publish("after").result(timeout=TIMEOUT)
    with pytest.raises(rt.ChannelFailedError):
        topic.subscriber(start="earliest")


def test_a_read_below_the_rings_head_falls_back_to_the_store(
    make_topic, plain_ring_of_ten, tmp_path: Path
):
    topic = make_topic(channels=1, capacity=10, overflow="overwrite", store=str(tmp_path))
    ring = topic.ringbuffer(0)
    for first in range(0, 30, 10):
        get(ring.add_all_async(list(range(first, first + 10)), "overwrite"))
    assert (ring.head_sequence(), ring.tail_sequence()) == (20, 29)
    assert ring.read_one(5) == 5  # the ring dropped it; the store has it
    result = get(ring.read_many_async(13, 0, 10))
    assert list(result) == list(range(13, 23))  # from the store, then the ring
    assert result.next_sequence_to_read_from == 23
    plain = plain_ring_of_ten  # shared: its sequences count from base
    base = next_sequences(plain)[0]
    plain_ring = plain.ringbuffer(0)
    get(plain_ring.add_all_async(list(range(30)), "overwrite"))
    with pytest.raises(rt.StaleSequenceError) as stale:
        plain_ring.read_one(base + 5)
    assert stale.value.head_sequence == base + 20


@pytest.mark.slow
def test_without_a_store_every_restart_is_reported_once_to_every_subscriber(make_topic):
    topic = make_topic(channels=2, groups=["g"], retain=True)
    subscribers = {
        "member": topic.subscriber(group="g", complete_on_empty=True),
        "anonymous": topic.subscriber(complete_on_empty=True),
    }
    places: dict[str, set[tuple[int, int]]] = {name: set() for name in subscribers}
    # Two restarts: the second is reported once to each again, at new positions (a
    # third only repeated that and cost one more actor start).
    rounds = 2
    for round_ in range(rounds):
        with topic.publisher() as publisher:
            for value in range(20):
                publisher.publish((round_, value))
        old_epoch = kill_channel(topic, 0)
        serving_again(topic, 0, old_epoch, RESTART_BOUND)
        with topic.publisher() as publisher:
            publisher.publish((round_, "after"), key=key_for(0, 2)).result(timeout=TIMEOUT)
        for name, subscriber in subscribers.items():
            losses = []
            while True:
                try:
                    batch = get(subscriber.receive_batch(100))
                except rt.DataLossError as lost:
                    losses.append((lost.old_epoch, lost.new_epoch))
                    continue
                if not batch:
                    break
                for element in batch:
                    place = (element.channel, element.sequence)
                    assert place not in places[name], f"{name}: {place} delivered twice"
                    places[name].add(place)
                    if name == "member":
                        element.commit()
            assert losses == [(old_epoch, old_epoch + 1)], (name, round_, losses)
    # What was published after each restart reached everyone, at a new position.
    for name in subscribers:
        after = [seq for channel, seq in places[name] if channel == 0 and seq >= 1 << 50]
        assert len(after) >= rounds, (name, after)


def test_store_retention_lets_a_reader_behind_the_ring_read_on_from_disk(
    make_topic, plain_ring_of_ten, tmp_path: Path
):
    def behind(**store: Any) -> list[Any]:
        if store:
            topic = make_topic(channels=1, capacity=10, overflow="overwrite", **store)
        else:  # the shared store-less one: sequences count from base
            topic = plain_ring_of_ten
        base = next_sequences(topic)[0]
        reader = topic.subscriber(start="earliest", complete_on_empty=True)
        ring = topic.ringbuffer(0)
        for first in range(0, 30, 10):  # the ring keeps only the last 10
            get(ring.add_all_async(list(range(first, first + 10)), "overwrite"))
        got: list[Any] = []
        while True:
            try:
                batch = get(reader.receive_batch(100))
            except rt.StaleSequenceError as stale:
                got.append(("stale", stale.head_sequence - base))
                continue
            if not batch:
                return got
            got.extend(e.value for e in batch)

    retained = behind(store=str(tmp_path / "kept"), store_retention={"seconds": 3600})
    assert retained == list(range(30))  # 0..19 from disk, then the ring
    # Without retention an overwritten element is gone for readers, store or not.
    assert behind(store=str(tmp_path / "plain")) == [("stale", 20), *range(20, 30)]
    assert behind() == [("stale", 20), *range(20, 30)]


class _LinesStore:
    """A user's store with only the seed's four methods, inheriting nothing (duck
    typing): one JSON line per item in a file (it keeps elements across
    restarts, and no state of the channel's)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._items: dict[int, Any] = {}
        if os.path.exists(path):
            with open(path) as lines:
                for line in lines:
                    sequence, item = json.loads(line)
                    self._items[sequence] = item

    def store(self, sequence: int, item: Any) -> None:
        self.store_all(sequence, [item])

    def store_all(self, first_sequence: int, items: list[Any]) -> None:
        with open(self._path, "a") as lines:
            for offset, item in enumerate(items):
                lines.write(json.dumps([first_sequence + offset, item]) + "\n")
                self._items[first_sequence + offset] = item

    def load(self, sequence: int) -> Any:
        return self._items.get(sequence)

    def largest_sequence(self) -> int:
        return max(self._items, default=-1)


def _lines_store_factory(root: str) -> Any:
    def factory(topic_name: str, channel: int) -> RingbufferStore:
        return _LinesStore(os.path.join(root, f"{topic_name}-{channel}.jsonl"))

    return factory


def test_a_users_store_without_state_keeps_its_elements_and_gets_its_groups_back(
    make_topic, tmp_path: Path
):
    topic = make_topic(channels=1, groups=["g"], store=_lines_store_factory(str(tmp_path)))
    member = topic.subscriber(group="g", complete_on_empty=True)
    with topic.publisher() as publisher:
        for value in range(5):
            publisher.publish(value)
    old_epoch = kill_channel(topic, 0)
    # Serving again: the coordinator gave it its groups and readers.
    serving_again(topic, 0, old_epoch, RESTART_BOUND)
    stats = _channel(topic, 0)
    assert (stats.head, stats.tail, stats.durable) == (0, 4, True)
    # No commit was kept (the store keeps no state): the group reads from the head.
    assert [e.value for e in _drain(member, LossChecker(), "m")] == list(range(5))


def test_a_member_that_joins_after_its_channels_restarted_gets_each_element_once(
    make_topic, tmp_path: Path
) -> None:
    # Before: a restarted host took every new reader's session for one its restart
    # lost and read each channel again after the commit, so a fresh member's
    # receive_batch loop got a channel's elements twice (1,334 of 1,000 values, one
    # run in three with one channel of three restarted).
    topic = make_topic(channels=3, store=str(tmp_path), groups=["g"])
    publish_all(topic, list(range(300)))
    epochs = {channel: kill_channel(topic, channel) for channel in range(3)}
    for channel, epoch in epochs.items():  # every channel, whichever hosts the member
        serving_again(topic, channel, epoch, RESTART_BOUND * 3)
    with topic.subscriber(group="g", complete_on_empty=True) as member:
        received = []
        while batch := get(member.receive_batch(1000)):
            received.extend(element.value for element in batch)
    assert sorted(received) == list(range(300))
