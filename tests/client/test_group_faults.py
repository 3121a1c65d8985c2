"""Group members that die or stall, against a real Ray: takeover within the
timeout, resume after the last commit, fencing of stale members (DESIGN 3, 5.1,
5.6, 8). Deliveries are recorded and counted as DESIGN 8 says: lost = 0,
duplicates only for what was not committed, stale commits accepted = 0."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import ray

import raytopic as rt

from tests.topic_helpers import (
    get,
    group_at_latest,
    module_topic,
    next_sequences,
    publish_all,
    receive_until_empty,
)

# Topics the tests share to save actors (no test here kills a channel or the
# coordinator; the member processes and pauses are the tests' own): each test uses a
# group of its own name, made at "latest" by its first member (one that closes at once
# where the test publishes before its members join), so it sees only what it publishes;
# sequences count from next_sequences.
# Two channels where a member takes over another's channel, one where one is the point.
two_channels = module_topic(channels=2)
one_channel = module_topic(channels=1)

COMMITTED = rt.CommitStatus.COMMITTED
NOT_OWNER = rt.CommitStatus.NOT_OWNER


def _members(topic: rt.Topic, group: str) -> dict[str, rt.MemberStats]:
    return {m.member_id: m for m in topic.describe().groups[group].members}


@ray.remote(num_cpus=0, max_restarts=0)
class _RemoteMember:
    """A group member in its own worker process."""

    def __init__(self, topic: rt.Topic, group: str, timeout: float) -> None:
        self._subscriber = topic.subscriber(group=group, timeout=timeout)
        self._received: list[rt.Element] = []
        self._waiting: Any = None

    def identity(self) -> tuple[int, str, tuple[int, ...]]:
        return os.getpid(), self._subscriber.subscriber_id, self._subscriber.channels

    def receive(self, count: int) -> list[tuple[int, int, Any]]:
        got = [ray.get(self._subscriber.receive()) for _ in range(count)]
        self._received.extend(got)
        return [(e.channel, e.sequence, e.value) for e in got]

    def commit(self, channel: int, sequence: int) -> rt.CommitResult:
        return self._subscriber.commit(channel, self._subscriber.topic.position(channel, sequence))

    def start_waiting_receive(self) -> None:
        # A receive that waits for data: the handle heartbeats while it waits.
        self._waiting = self._subscriber.receive()

    def received(self) -> list[rt.Element]:
        return self._received


def test_killed_member_process_loses_its_channels_and_nothing_is_lost(
    two_channels, unique_name, wait_until
):
    timeout = 1.5
    topic, g = two_channels, unique_name("g")
    base = next_sequences(topic)
    heard: list[rt.OwnershipChange] = []
    survivor = topic.subscriber(
        group=g, start="latest", complete_on_empty=True, on_ownership_change=heard.append
    )
    victim = _RemoteMember.remote(topic, g, timeout)
    pid, victim_id, (moved,) = get(victim.identity.remote())
    kept = 1 - moved
    assert pid != os.getpid()
    assert survivor.channels == (kept,)
    assert set(_members(topic, g)) == {survivor.subscriber_id, victim_id}
    first_wave = publish_all(topic, list(range(10)))  # five per channel

    # The victim receives all of its channel, commits up to 1, and waits for more.
    victim_got = get(victim.receive.remote(5))
    assert [(c, s) for c, s, _ in victim_got] == [(moved, base[moved] + s) for s in range(5)]
    assert get(victim.commit.remote(moved, base[moved] + 1)).status is COMMITTED
    old_elements = get(victim.received.remote())
    get(victim.start_waiting_receive.remote())
    survivor_got = receive_until_empty(survivor)
    assert [(e.channel, e.sequence) for e in survivor_got] == [
        (kept, base[kept] + s) for s in range(5)
    ]
    assert survivor.commit(kept, topic.position(kept, base[kept] + 4)).status is COMMITTED

    os.kill(pid, signal.SIGKILL)
    second_wave = publish_all(topic, list(range(10, 14)))  # two more per channel

    def survivor_owns_all() -> bool:
        survivor.heartbeat()
        return survivor.channels == (0, 1)

    wait_until(survivor_owns_all, timeout=timeout + 2)
    assert heard == [
        rt.OwnershipChange(frozenset({0, 1}), frozenset(), frozenset(), frozenset({0, 1})),
        rt.OwnershipChange(frozenset(), frozenset({moved}), frozenset(), frozenset({kept})),
        rt.OwnershipChange(frozenset({moved}), frozenset(), frozenset(), frozenset({0, 1})),
    ]
    assert set(_members(topic, g)) == {survivor.subscriber_id}
    assert topic.describe().groups[g].ownership == {
        0: survivor.subscriber_id,
        1: survivor.subscriber_id,
    }

    taken_over = receive_until_empty(survivor)
    on_moved = [e.sequence for e in taken_over if e.channel == moved]
    # Resumes right after the last commit: 2, not 0 and not later.
    assert on_moved == [base[moved] + s for s in (2, 3, 4, 5, 6)]
    assert [e.sequence for e in taken_over if e.channel == kept] == [base[kept] + s for s in (5, 6)]

    # Count as DESIGN 8: lost = 0; duplicates only of uncommitted positions.
    published = {
        (s.channel, s.position.sequence): v
        for s, v in zip(first_wave + second_wave, list(range(14)), strict=True)
    }
    deliveries = [(c, s, v) for c, s, v in victim_got] + [
        (e.channel, e.sequence, e.value) for e in survivor_got + taken_over
    ]
    delivered = {(c, s): v for c, s, v in deliveries}
    assert delivered == published  # nothing lost, no position with two payloads
    counts: dict[tuple[int, int], int] = {}
    for c, s, _ in deliveries:
        counts[c, s] = counts.get((c, s), 0) + 1
    duplicates = {key for key, n in counts.items() if n > 1}
    assert duplicates == {(moved, base[moved] + s) for s in (2, 3, 4)}  # received, never committed
    # The dead member's elements can never be committed again (stale commits accepted = 0).
    assert [e.commit().status for e in old_elements] == [NOT_OWNER] * 5
    assert survivor.last_committed() == {
        kept: topic.position(kept, base[kept] + 4),
        moved: topic.position(moved, base[moved] + 1),
    }
    survivor.close()


def test_paused_member_is_fenced_then_rejoins_with_a_new_generation(
    two_channels, unique_name, wait_until
):
    timeout = 1.0
    topic, g = two_channels, unique_name("g")
    base = next_sequences(topic)
    group_at_latest(topic, g)
    publish_all(topic, list(range(8)))  # four per channel
    heard: list[rt.OwnershipChange] = []
    # Until its deliberate pause, `paused` heartbeats well within its timeout.
    paused = topic.subscriber(group=g, timeout=timeout, on_ownership_change=heard.append)
    other = topic.subscriber(group=g, complete_on_empty=True)
    paused.heartbeat()
    (mine,) = set(paused.channels)
    (theirs,) = set(other.channels)
    generation = _members(topic, g)[paused.subscriber_id].generation
    got = [get(paused.receive()) for _ in range(2)]
    assert [(e.channel, e.sequence) for e in got] == [(mine, base[mine] + s) for s in (0, 1)]
    assert got[0].commit().status is COMMITTED
    assert heard == [
        rt.OwnershipChange(frozenset({0, 1}), frozenset(), frozenset(), frozenset({0, 1})),
        rt.OwnershipChange(frozenset(), frozenset({theirs}), frozenset(), frozenset({mine})),
    ]

    # `paused` now neither receives nor heartbeats; `other` takes over.
    def other_owns_all() -> bool:
        other.heartbeat()
        return other.channels == (0, 1)

    wait_until(other_owns_all, timeout=timeout + 2)
    assert paused.subscriber_id not in _members(topic, g)
    taken = [e for e in receive_until_empty(other) if e.channel == mine]
    # Right after paused's commit:
    assert [e.sequence for e in taken] == [base[mine] + s for s in (1, 2, 3)]
    assert taken[0].commit().status is COMMITTED

    # Back from its pause: every commit on the moved channel is NOT_OWNER.
    assert paused.commit(mine, got[1].position).status is NOT_OWNER
    assert get(paused.commit_async(mine, topic.position(mine, base[mine] + 3))).status is NOT_OWNER
    assert got[1].commit().status is NOT_OWNER
    assert get(got[1].commit_async()).status is NOT_OWNER
    assert topic.describe().groups[g].committed == {mine: topic.position(mine, base[mine] + 1)}
    # Until it rejoins it owns nothing, and it hears that it lost its channel.
    assert paused.channels == ()
    assert paused.last_committed() == {}
    assert paused.subscriber_id not in _members(topic, g)
    assert heard[2:] == [
        rt.OwnershipChange(frozenset(), frozenset(), frozenset({mine}), frozenset())
    ]

    # Its next heartbeat rejoins it with a new, higher generation.
    paused.heartbeat()
    rejoined = _members(topic, g)[paused.subscriber_id]
    assert rejoined.generation > generation
    assert len(paused.channels) == 1 and len(other.channels) == 1
    assert heard[3].assigned == frozenset(paused.channels) and heard[3].lost == frozenset()
    # Elements it received under its old generation stay fenced off.
    assert got[1].commit().status is NOT_OWNER
    assert topic.describe().groups[g].committed == {mine: topic.position(mine, base[mine] + 1)}
    paused.close()
    other.close()


def test_timed_out_member_rejoins_on_its_next_receive(one_channel, unique_name, wait_until):
    timeout = 1.0
    topic, g = one_channel, unique_name("g")
    group_at_latest(topic, g)
    publish_all(topic, ["a", "b"])
    paused = topic.subscriber(group=g, timeout=timeout, complete_on_empty=True)
    generation = _members(topic, g)[paused.subscriber_id].generation
    first = get(paused.receive())
    assert first.value == "a"
    wait_until(lambda: paused.subscriber_id not in _members(topic, g), timeout=timeout + 2)
    assert paused.channels == ()
    # The receive rejoins: it resumes after the last commit (none: from "a").
    assert [e.value for e in receive_until_empty(paused)] == ["a", "b"]
    assert _members(topic, g)[paused.subscriber_id].generation > generation
    assert paused.channels == (0,)
    assert first.commit().status is NOT_OWNER
    paused.close()


def test_a_waiting_receive_keeps_its_member_alive(one_channel, unique_name):
    # Long enough that a heartbeat held up by a loaded machine (the suite's two
    # workers beside the cluster) is not a timeout: 1 s timed the member out there.
    timeout = 3.0
    topic, g = one_channel, unique_name("g")
    member = topic.subscriber(group=g, start="latest", timeout=timeout)
    generation = _members(topic, g)[member.subscriber_id].generation
    waiting = member.receive()
    time.sleep(2 * timeout)  # a deliberate pause: only the waiting receive speaks for it
    assert ray.wait([waiting], timeout=0)[0] == []
    assert _members(topic, g)[member.subscriber_id].generation == generation
    assert topic.describe().groups[g].ownership == {0: member.subscriber_id}
    publish_all(topic, ["x"])
    assert get(waiting).value == "x"
    member.close()
