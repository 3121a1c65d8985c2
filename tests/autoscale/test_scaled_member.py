"""An autoscaled owned member's go-back after its handler raised
(``raytopic.autoscale.scaled_member.back_to_commit``), against a real Ray: what it
received under a lease its view has not learnt yet comes again, and its deliveries
count on towards ``max_deliveries``."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from typing import Any

import pytest
import ray

import raytopic as rt
from raytopic.autoscale.scaled_member import back_to_commit
from raytopic.core.element_batch import ElementBatch
from raytopic.core.retries import Deliveries

from tests.topic_helpers import TIMEOUT, get, group_at_latest, key_for, module_topic, publish_all

topic = module_topic(channels=2)

MAX_DELIVERIES = 2


def test_a_failed_batch_at_a_channel_the_members_view_has_not_learnt_goes_back_and_counts(
    topic: rt.Topic, unique_name
) -> None:
    # A channel goes from the member to a newcomer and back under a new lease; the
    # channels hear of it (the member's receive session reads under it at once) before
    # the member's heartbeats bring it to its view. In an autoscaled group this comes
    # with a member that left, or one timed out and back, under load: the view lags.
    # Here the member's listener is slow: its heartbeat thread waits there, so the
    # view stops (at the channel it kept). The handler fails on W, received at the
    # other channel under the new lease, until W has been delivered MAX_DELIVERIES
    # times; then it is dead-lettered (committed past), as the member does. The
    # go-back filtered the batch's channels by the view: W went back only because
    # none was left (every channel owned was sent back), and the delivery counts of
    # W's channel were forgotten (not in the view): W was handed out once more than
    # max_deliveries allows. A batch of two channels would have lost W.
    group = unique_name("scaled")
    group_at_latest(topic, group)
    told_revoke, release = threading.Event(), threading.Event()

    def slow_listener(change: rt.OwnershipChange) -> None:
        if change.revoked and not told_revoke.is_set():
            told_revoke.set()
            release.wait(300)  # the view stops here until W went back

    # As a scaled member receives (complete on empty); its heartbeats stop in the
    # listener: a timeout far past the test's length.
    member = topic.subscriber(
        group=group, complete_on_empty=True, timeout=600.0, on_ownership_change=slow_listener
    )
    deliveries = Deliveries(MAX_DELIVERIES)
    failing, after = list(range(1000, 1010)), list(range(2000, 2010))
    handled: list[int] = []
    dead: list[int] = []
    attempts: list[int] = []
    views_at_failure: list[tuple[int, ...]] = []
    try:
        newcomer = topic.subscriber(group=group)
        moved = newcomer.channels[0]
        assert told_revoke.wait(120)
        newcomer.close()  # its channels go back to the member, under new leases
        publish_all(topic, failing, key=key_for(moved, 2))
        deadline = time.monotonic() + 10 * TIMEOUT
        while time.monotonic() < deadline:
            batch = get(member.receive_batch(100))
            if not batch:
                if dead and topic.describe().groups[group].lag == 0:
                    break
                time.sleep(0.05)  # a receive completes on empty: look again soon
                continue
            if set(failing) & set(batch.values) - set(dead):
                # The handler raises on W: count, dead-letter what reached the limit
                # (commit past it), send the rest back, as the member does.
                views_at_failure.append(member.channels)
                attempt, upto = deliveries.failed((e.channel, e.sequence) for e in batch)
                attempts.append(attempt)
                letters = ElementBatch(e for e in batch if e.sequence <= upto.get(e.channel, -1))
                if letters:
                    letters.commit()
                    dead.extend(letters.values)
                    deliveries.forget((e.channel, e.sequence) for e in letters)
                    publish_all(topic, after, key=key_for(moved, 2))  # the next batch's
                deliveries.keep_channels(back_to_commit(member, batch))
                continue
            handled.extend(batch.values)
            batch.commit()
    finally:
        release.set()
        member.close()
    assert views_at_failure, "W never came"
    assert moved not in views_at_failure[0]  # W came under a lease the view had not learnt
    assert Counter(handled + dead) == Counter(failing + after)  # none lost
    assert sorted(dead) == failing
    assert attempts == list(range(1, MAX_DELIVERIES + 1))  # W handed out MAX_DELIVERIES times


def test_a_go_back_that_fails_at_an_owned_channel_is_raised_before_one_that_moved_on(
    make_topic: Any, unique_name: Any, wait_until: Any
) -> None:
    # Before: seek_to_committed raised the first error it met. A NotOwnerError (the
    # channel moved on: back_to_commit passes it over) tried before an owned channel
    # that could not go back hid that failure, and the member went on as if its batch
    # had gone back. Now the failure is raised first; a NotOwnerError only when every
    # other channel went back.
    two: rt.Topic = make_topic(channels=2)
    group = unique_name("back")
    member = two.subscriber(group=group)
    other = two.subscriber(group=group)
    try:
        wait_until(lambda: len(member.channels) == 1 and len(other.channels) == 1, TIMEOUT)
        (owned,), (moved,) = member.channels, other.channels
        ray.kill(two._channel_actors[owned], no_restart=True)  # it cannot go back
        with pytest.raises(rt.TopicNotFoundError):
            member.seek_to_committed(moved, owned)  # the channel that moved on first
        with pytest.raises(rt.NotOwnerError):  # alone, it is raised as before
            member.seek_to_committed(moved)
    finally:
        for subscriber in (member, other):
            with contextlib.suppress(Exception):  # a channel of theirs is gone
                subscriber.close()
