"""A resequencing group member's commits, through closes, kills and a host channel's
restart (real Ray, real processes; docs/guides/ring-buffer-and-resequencing.md).

A resequencer hands elements over out of position order, so a commit of an element
must not pass an earlier element of its channel still held back: each test has a
member commit every element it handles, stop part-way (closed, killed, or its host
channel killed under it), and a successor read the rest. Every value must reach one
of them (duplicates are allowed: what was never committed is delivered again).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time

import pytest
import ray

import raytopic as rt

from tests.topic_helpers import (
    get,
    group_at_latest,
    key_for,
    kill_channel,
    module_topic,
    next_sequences,
    publish_all,
    serving_again,
)

VALUES = 100
RESTART_BOUND = 30.0
"""Seconds a receive may take while a channel it reads restarts (a restart takes
~2.3 s on a quiet machine)."""
HANDLED = 40

# The topic the tests that kill no channel share to save actors (each topic is an actor
# per channel and a coordinator): each test's group is its own, made at the latest
# position before the test publishes, so it and its successor read only what the test
# published. A test whose channel is killed keeps its own topic.
shared_two = module_topic(channels=2)


def _publish_scrambled(topic: rt.Topic) -> None:
    """``{"n": 0..99}``, shuffled within blocks of ten (35-44 straddles the 40th),
    round robin over the channels: each channel holds its numbers out of order, so
    the resequencer hands some of a channel's elements over before earlier ones."""
    numbers: list[int] = []
    for block in range(-5, VALUES, 10):
        chunk = list(range(max(block, 0), min(block + 10, VALUES)))
        random.Random(block).shuffle(chunk)
        numbers.extend(chunk)
    with topic.publisher() as publisher:
        for n in numbers:
            publisher.publish({"n": n})


def _in_order() -> rt.Resequence:
    return rt.Resequence(seq=lambda v: v["n"], timeout_ms=60_000, start=0)


def _successor_reads(topic: rt.Topic, group: str) -> list[int]:
    """What a new member (not resequencing) of ``group`` receives until empty."""
    with topic.subscriber(group=group, complete_on_empty=True) as successor:
        got = []
        while batch := get(successor.receive_batch(1000)):
            got.extend(element.value["n"] for element in batch)
            batch.commit()
    return got


def _handle_and_commit(member: rt.Subscriber, count: int) -> tuple[list[int], int]:
    """Iterate ``member``, committing each element; stop after ``count``. Returns the
    numbers handled and how many commits stopped short of their element."""
    handled, short = [], 0
    for element in member:
        handled.append(element.value["n"])
        result = element.commit()
        short += result.position != element.position
        if len(handled) == count:
            break
    return handled, short


def test_a_closed_member_commits_nothing_it_did_not_hand_over(shared_two, unique_name) -> None:
    topic, g = shared_two, unique_name("g")  # shared: a group of its own, made at latest
    group_at_latest(topic, g)
    _publish_scrambled(topic)
    member = topic.subscriber(group=g, resequence=_in_order(), complete_on_empty=True)
    handled, short = _handle_and_commit(member, HANDLED)
    member.close()

    rest = _successor_reads(topic, g)

    assert handled == list(range(HANDLED))  # in order, as the resequencer promises
    assert set(handled) | set(rest) == set(range(VALUES))
    assert short  # some commits stopped short: an earlier element was still held


@ray.remote(num_cpus=0, max_restarts=0)
class _ResequencingMember:
    """A resequencing member in its own worker process."""

    def __init__(self, topic: rt.Topic, group: str) -> None:
        self._member = topic.subscriber(
            group=group, resequence=_in_order(), timeout=2.0, complete_on_empty=True
        )

    def pid(self) -> int:
        return os.getpid()

    def handle(self, count: int) -> list[int]:
        return _handle_and_commit(self._member, count)[0]


@pytest.mark.slow
def test_a_killed_member_commits_nothing_it_did_not_hand_over(
    shared_two, unique_name, wait_until
) -> None:
    # Shared: what is killed is the member's process, never a channel of the topic.
    topic, g = shared_two, unique_name("g")  # a group of its own, made at latest
    group_at_latest(topic, g)
    _publish_scrambled(topic)
    victim = _ResequencingMember.remote(topic, g)
    handled = get(victim.handle.remote(HANDLED))
    os.kill(get(victim.pid.remote()), signal.SIGKILL)
    wait_until(lambda: not topic.describe().groups[g].members, timeout=30)

    rest = _successor_reads(topic, g)

    assert handled == list(range(HANDLED))
    assert set(handled) | set(rest) == set(range(VALUES))


@pytest.mark.slow
def test_commits_after_the_host_channel_restarts_skip_nothing(make_topic, tmp_path) -> None:
    # The host's resequencer dies with it; the elements handed over before commit after.
    topic = make_topic(channels=2, groups=["g"], store=str(tmp_path))
    _publish_scrambled(topic)
    member = topic.subscriber(group="g", resequence=_in_order(), complete_on_empty=True)
    handed: list[rt.Element] = []
    while len(handed) < HANDLED:
        handed.extend(get(member.receive_batch(HANDLED - len(handed))))
    host = member._receives.host_channel
    epoch = kill_channel(topic, host)
    serving_again(topic, host, epoch, bound=30)

    for element in handed:
        assert element.commit().status in (
            rt.CommitStatus.COMMITTED,
            rt.CommitStatus.ALREADY_COMMITTED,
        )
    member.close()
    rest = _successor_reads(topic, "g")

    assert [e.value["n"] for e in handed] == list(range(HANDLED))
    assert {e.value["n"] for e in handed} | set(rest) == set(range(VALUES))


def test_a_transaction_commits_what_a_resequencing_member_consumed_up_to_its_marks(
    make_topic, shared_two, unique_name
) -> None:
    # An exactly-once pipeline over a resequencing member: its consumed commits stop
    # where the resequencer still held an earlier element, as the member's own do.
    source, g = shared_two, unique_name("g")  # shared: a group of its own, made at latest
    group_at_latest(source, g)
    sink = make_topic(channels=1)
    _publish_scrambled(source)
    member = source.subscriber(group=g, resequence=_in_order(), complete_on_empty=True)
    txs = rt.transactions(unique_name("reseq"))
    handled: list[int] = []
    while len(handled) < HANDLED:
        batch = get(member.receive_batch(min(10, HANDLED - len(handled))))
        with txs.begin() as tx:
            tx.publish_batch(sink, [e.value["n"] for e in batch])
            tx.commit_consumed(batch)
        handled.extend(e.value["n"] for e in batch)
    txs.close()
    member.close()
    rest = _successor_reads(source, g)

    assert handled == list(range(HANDLED))
    assert set(handled) | set(rest) == set(range(VALUES))


def test_a_commit_of_a_bare_position_goes_no_further_than_its_element(
    shared_two, unique_name
) -> None:
    topic, g = shared_two, unique_name("g")  # shared: a group of its own, from base
    base = next_sequences(topic)
    group_at_latest(topic, g)
    _publish_scrambled(topic)
    member = topic.subscriber(group=g, resequence=_in_order(), complete_on_empty=True)
    # Nothing handed over yet: nothing moves.
    unknown = member.commit(0, topic.position(0, base[0]))
    handled, short = [], 0
    for element in member:
        handled.append(element.value["n"])
        result = member.commit(element.channel, element.position)
        short += result.position != element.position
        if len(handled) == HANDLED:
            break
    member.close()
    rest = _successor_reads(topic, g)

    assert unknown.status is rt.CommitStatus.REJECTED
    assert set(handled) | set(rest) == set(range(VALUES))
    assert short


@pytest.mark.slow
def test_a_look_while_a_channel_restarts_waits_for_the_numbers_its_store_holds(
    make_topic, tmp_path
) -> None:
    # A look (the hold window of 2 ended) reads every owned channel before it passes
    # the gap at 1; 1 is stored at the sibling, SIGKILLed just before the look (Ray
    # answers its calls ActorUnavailable while it restarts, and retries them). The
    # look must read it once it serves again: 1 comes in order, not passed over (and
    # then dropped as late), and the receives answer within a restart's bound.
    topic = make_topic(channels=2, groups=["g"], store=str(tmp_path))
    option = rt.Resequence(seq=lambda v: v["n"], timeout_ms=200, start=0)
    member = topic.subscriber(group="g", resequence=option, complete_on_empty=True)
    host = member._receives.host_channel
    sibling = 1 - host
    publish_all(topic, [{"n": 0}, {"n": 2}], key=key_for(host, 2))
    got: list[int] = []
    while not got:  # 0 handed over; 2 held, waiting for 1
        got.extend(e.value["n"] for e in get(member.receive_batch(10)))
    assert got == [0]
    time.sleep(0.5)  # 2's hold window ends: the next receive looks
    publish_all(topic, [{"n": 1}], key=key_for(sibling, 2))  # stored at the sibling
    kill_channel(topic, sibling)
    killed = time.monotonic()
    while len(got) < 3 and time.monotonic() - killed < RESTART_BOUND:
        # (Ray retries the look's read of the sibling until it serves again; a
        # channel still getting its groups back may say so: receive again.)
        with contextlib.suppress(rt.ChannelUnavailableError):
            got.extend(e.value["n"] for e in get(member.receive_batch(10)))
    assert got == [0, 1, 2]
    stats = member.resequencer_stats
    assert (stats.late, stats.gaps, stats.held) == (0, 0, 0)
    member.close()
