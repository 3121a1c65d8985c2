"""The Resequencer actor fed by parallel Ray tasks (real local Ray)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from raytopic.core.errors import InvalidArgumentError, InvalidTypeError
from raytopic.core.resequencer import ResequencerStats
from raytopic.resequencer_actor import make_resequencer_actor

TOTAL = 1000
PRODUCERS = 8


class CollectingSink:
    """A sink like a Publisher: ``publish`` collects, ``flush`` is counted."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.flushes = 0

    def publish(self, value: Any) -> None:
        self.values.append(value)

    def flush(self) -> None:
        self.flushes += 1


class CollectingCallback:
    """An ``on_release`` callable that records ``(seq, payload, correlation_id)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, Any, Any]] = []

    def __call__(self, seq: int, payload: Any, correlation_id: Any) -> None:
        self.calls.append((seq, payload, correlation_id))


@ray.remote(num_cpus=0.25)  # all eight run at once on two CPUs
def produce(resequencer: Any, seqs: list[int], batch_size: int) -> int:
    """Send ``seqs`` in order, alternating batches and single calls."""
    for index in range(0, len(seqs), batch_size):
        chunk = seqs[index : index + batch_size]
        if (index // batch_size) % 2:
            ray.get([resequencer.accept.remote(seq, seq) for seq in chunk])
        else:
            ray.get(resequencer.accept_batch.remote([(seq, seq, None) for seq in chunk]))
    return len(seqs)


@pytest.fixture
def actors(ray_session: None) -> Iterator[list[Any]]:
    """Actors a test creates; killed afterwards."""
    created: list[Any] = []
    yield created
    for actor in created:
        ray.kill(actor)


def test_parallel_producers_release_every_message_in_order_once(actors, unique_name) -> None:
    actor = make_resequencer_actor(
        unique_name("reseq"), sink=CollectingSink(), timeout_ms=60_000, start=0
    )
    actors.append(actor)
    rng = random.Random(7)
    slices = []
    for producer in range(PRODUCERS):
        part = list(range(producer, TOTAL, PRODUCERS))
        rng.shuffle(part)
        slices.append(part)
    sent = ray.get([produce.remote(actor, part, 10) for part in slices], timeout=60)
    assert sum(sent) == TOTAL
    assert ray.get(actor.stats.remote()) == ResequencerStats(released=TOTAL, gaps=0, late=0, held=0)
    sink = ray.get(actor.sink.remote())
    assert sink.values == list(range(TOTAL))
    assert ray.get(actor.flush.remote()).released == TOTAL
    assert ray.get(actor.sink.remote()).flushes == 1
    assert ray.get(actor.gaps.remote()) == []


def test_a_gap_released_by_timeout_is_recorded(actors, unique_name, wait_until) -> None:
    actor = make_resequencer_actor(
        unique_name("reseq"),
        on_release=CollectingCallback(),
        timeout_ms=100,
        reap_interval_ms=20,
        start=0,
    )
    actors.append(actor)
    ray.get(actor.accept_batch.remote([(0, "a", "k"), (1, "b", "k"), (4, "e", "k")]))
    wait_until(lambda: ray.get(actor.stats.remote()).released == 3)
    assert ray.get(actor.gaps.remote()) == [(2, "k"), (3, "k")]
    ray.get(actor.accept.remote(2, "late", "k"))
    assert ray.get(actor.stats.remote()) == ResequencerStats(released=3, gaps=2, late=1, held=0)
    calls = ray.get(actor.sink.remote()).calls
    assert calls == [(0, "a", "k"), (1, "b", "k"), (4, "e", "k")]


def test_stop_ends_the_sweeper_cleanly(actors, unique_name) -> None:
    actor = make_resequencer_actor(
        unique_name("reseq"), sink=CollectingSink(), reap_interval_ms=60_000, start=0
    )
    actors.append(actor)
    assert ray.get(actor.is_running.remote())
    ray.get(actor.stop.remote(), timeout=10)  # not one 60 s reap interval
    assert not ray.get(actor.is_running.remote())
    ray.get(actor.stop.remote(), timeout=10)  # idempotent
    # Still usable without the sweeper: successors and flush release.
    ray.get(actor.accept_batch.remote([(1, "b"), (0, "a"), (3, "d")]))
    assert ray.get(actor.sink.remote()).values == ["a", "b"]
    assert ray.get(actor.flush.remote()) == ResequencerStats(released=3, gaps=1, late=0, held=0)


def test_a_bad_batch_is_refused_whole(actors, unique_name) -> None:
    actor = make_resequencer_actor(unique_name("reseq"), sink=CollectingSink(), start=0)
    actors.append(actor)
    with pytest.raises(InvalidTypeError, match="seq"):
        ray.get(actor.accept_batch.remote([(0, "a"), ("1", "b")]))
    with pytest.raises(InvalidArgumentError, match="items"):
        ray.get(actor.accept_batch.remote([(0, "a"), (1,)]))
    # Not a list (issue 47: a raw TypeError from the actor before): typed, nothing taken.
    for items in (5, None, {0: "a"}, "ab", {(0, "a")}):
        with pytest.raises(InvalidTypeError, match="items must be a list") as refused:
            ray.get(actor.accept_batch.remote(items))
        assert isinstance(refused.value.cause, InvalidTypeError)  # raytopic's, not a TypeError
    assert ray.get(actor.stats.remote()).released == 0
    ray.get(actor.accept.remote(0, "a"))
    assert ray.get(actor.sink.remote()).values == ["a"]


@pytest.mark.parametrize(
    ("kwargs", "error", "argument"),
    [
        ({}, InvalidArgumentError, "sink"),
        ({"sink": CollectingSink(), "on_release": print}, InvalidArgumentError, "on_release"),
        ({"sink": object()}, InvalidTypeError, "sink"),
        ({"on_release": 3}, InvalidTypeError, "on_release"),
        ({"sink": CollectingSink(), "timeout_ms": -1}, InvalidArgumentError, "timeout_ms"),
        ({"sink": CollectingSink(), "reap_interval_ms": 0}, InvalidArgumentError, "reap_interval"),
        ({"sink": CollectingSink(), "actor_options": 3}, InvalidTypeError, "actor_options"),
    ],
)
def test_make_resequencer_actor_validates_before_creating(
    kwargs: dict[str, Any], error: type[Exception], argument: str
) -> None:
    # No ray_session: a bad argument must fail before any actor is made.
    with pytest.raises(error, match=argument):
        make_resequencer_actor("bad", **kwargs)
