"""``raytopic bench``'s scale case: K producers -> a topic of K channels -> a group of
K members, at K = 1 and at K = ``channels``, against K independent
``ray.util.queue.Queue``s and K independent floor pairs measured in the same run
(``bench`` runs it with the other cases, ``raytopic bench --scale`` alone).

Cases (each at K = 1 and K = ``channels``, moving ``messages`` in all, split
evenly between its K producers; each K > 1 figure is given as its ratio to K = 1):
    floor pairs    K producers -> K plain actors holding a deque -> K consumers:
                   Ray's floor (``raytopic.tools.bench_throughput``) K times
                   side by side.
    queues         K producers ``put_nowait_batch(1000)`` -> K Queues -> K
                   consumers ``get_nowait_batch(1000)``.
    publish()      K producers calling ``publish()`` (keyless: round robin over
                   the channels) -> a topic of K channels -> a group of K
                   members, one channel each, iterating ``iter_batches(1000)``
                   (the clock runs from the producers' start, every member
                   owning its channel, to the last member's last batch; they
                   leave after); also as a ratio to the K Queues.
    publish_batch  the same with ``publish_batch(1000)``, a few calls in flight
                   (each batch spread over the K channels); with
                   ``publish_batch(1000, ref=False)`` used as ``publish()`` is
                   (Futures checked at the end: the parts ride the publisher's
                   per-channel queues, ``max_in_flight=4``); and from publishers
                   made with ``round_robin="batch"`` (each batch to one channel,
                   in turn; each producer's share whole turns of the channels).
    one publisher  one producer's ``publish_batch(1000)``, 8 calls in flight,
                   over K channels, with the publish acknowledgements only (no
                   consumer); the same with ``ref=False``, and with
                   ``round_robin="batch"``.

Each case also reports its CPU per message by role (each role summed over its
K processes; ``raytopic.tools.bench_cpu``), against the floor pairs' of the
same K.

Every producer, consumer and member runs in a process the case keeps from its
start to its end (a runner actor; K producers and K consumers), as do the
baselines' K floor actors and K Queues. Tasks would not do: Ray starts worker
processes only as many at a time as there are CPUs, so K of each role would
be started inside the timed run.

Targets (``scale_targets``): on a machine of fewer than ``MANY_CORES`` cores,
each topic case at K = ``channels`` >= 0.8x its K = 1 figure (no collapse: the
cores are the limit); on ``MANY_CORES`` or more, the group cases >= 5x their
K = 1 figure and >= 1.0x the K Queues (the one publisher still >= 0.8x).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import ray

from raytopic.client.topic import Topic, create_topic
from raytopic.core.errors import InvalidArgumentError
from raytopic.tools.bench_common import BATCH, Figure, Target, _check_ids, _name, at_least
from raytopic.tools.bench_cpu import (
    Throughput,
    channel_actors,
    cpu_seconds,
    measure_run,
    median_throughput,
)
from raytopic.tools.bench_throughput import (
    FLOOR_ROLES,
    TOPIC_ROLES,
    _floor_put,
    _floor_take,
    _FloorActor,
    _publish_each,
    _publish_in_batches,
    _publish_in_futures,
    _queue_get,
    _queue_put,
    cpu_figures,
    sum_batches,
)

if TYPE_CHECKING:
    from raytopic.client.subscriber import Subscriber

__all__ = [
    "MANY_CORES",
    "NO_COLLAPSE_TARGET",
    "QUEUES_TARGET",
    "SPEEDUP_TARGET",
    "ScaleTargets",
    "run_scale_benchmarks",
    "scale_targets",
]

MANY_CORES = 16
"""Cores (``os.cpu_count()``) from which the K processes of each role can all run
at once, so that K should multiply the rate."""
NO_COLLAPSE_TARGET = at_least(0.8)
"""K channels against 1 where the cores are the limit: more channels should not
collapse the rate."""
SPEEDUP_TARGET = at_least(5.0)
"""On MANY_CORES or more: the group cases at K = 8 against K = 1."""
QUEUES_TARGET = at_least(1.0)
"""On MANY_CORES or more: the group cases at K = 8 against K Queues side by side."""

PUBLISHER_IN_FLIGHT = 8
"""``publish_batch`` calls the one-publisher case keeps outstanding."""
GROUP = "scale"
BALANCE_TIMEOUT = 60.0
"""Seconds the group's members may take to join and own one channel each."""


@dataclass(frozen=True, slots=True)
class ScaleTargets:
    """The targets of the scale case on one machine."""

    group: Target
    """The group cases (``publish()``, ``publish_batch``) at K = ``channels`` against K = 1."""
    publisher: Target
    """The one publisher on K channels against 1."""
    queues: Target | None
    """The group cases at K = ``channels`` against the K Queues (None: not judged)."""


def scale_targets(cores: int) -> ScaleTargets:
    """The targets for a machine of ``cores`` cores: on fewer than MANY_CORES the
    cores are the limit, so K should at least not collapse the rate."""
    if cores >= MANY_CORES:
        return ScaleTargets(SPEEDUP_TARGET, NO_COLLAPSE_TARGET, QUEUES_TARGET)
    return ScaleTargets(NO_COLLAPSE_TARGET, NO_COLLAPSE_TARGET, None)


class _Runner:
    """A process kept for one producer, consumer or member of the scale case."""

    def ready(self) -> None:
        """Answers once the process is up (and has imported raytopic)."""

    def run(self, work: Callable[..., Any], *args: Any) -> Any:
        """``work(*args)`` here (one of ``raytopic.tools.bench_throughput``'s
        producers and consumers, which return what they give with their CPU)."""
        return work(*args)


_RUNNER = ray.remote(_Runner).options(num_cpus=0)
"""The runner's actor class."""


@dataclass(frozen=True, slots=True)
class _Runners:
    """The processes a scale run keeps from its start to its end: K producers, K
    consumers, and the K floor actors and K Queues of the baselines (each empty
    again after a run)."""

    producers: list[Any]
    consumers: list[Any]
    floors: list[Any]
    queues: list[Any]

    @classmethod
    def start(cls, count: int) -> _Runners:
        from ray.util.queue import Queue

        runners = cls(
            [_RUNNER.remote() for _ in range(count)],
            [_RUNNER.remote() for _ in range(count)],
            [_FloorActor.remote() for _ in range(count)],
            [Queue(actor_options={"num_cpus": 0}) for _ in range(count)],
        )
        # Every process up before anything is timed: one still starting would
        # take CPU from the runs.
        actors = runners.floors + [queue.actor for queue in runners.queues]
        ray.get(
            [runner.ready.remote() for runner in runners.producers + runners.consumers]
            + [actor.__ray_call__.remote(lambda _actor: None) for actor in actors]
        )
        return runners

    def stop(self) -> None:
        for actor in self.producers + self.consumers + self.floors:
            ray.kill(actor)
        for queue in self.queues:
            queue.shutdown()


def _share(count: int, pairs: int) -> int:
    """Messages per producer: ``count`` split between ``pairs`` producers, each a
    multiple of ``pairs`` so that round robin gives every channel the same number."""
    return count // (pairs * pairs) * pairs


def _pairs_run(
    what: str,
    count: int,
    ends: list[Any],
    actors: list[Any],
    runners: _Runners,
    put: Callable[..., tuple[None, float]],
    take: Callable[..., tuple[int, float]],
) -> Throughput:
    """K independent pairs side by side: producer i ``put``s its share into
    ``ends[i]`` (a floor actor, a Queue), consumer i ``take``s it from there."""
    share = _share(count, len(ends))
    pairs = list(zip(runners.producers, ends, runners.consumers, strict=False))
    # Warm each pair's code paths with one batch, as the single-pair cases do.
    ray.get(
        [consumer.run.remote(take, end, BATCH) for _, end, consumer in pairs]
        + [producer.run.remote(put, end, BATCH) for producer, end, _ in pairs]
    )
    result, id_sums = measure_run(
        share * len(pairs),
        actors,
        lambda: [consumer.run.remote(take, end, share) for _, end, consumer in pairs],
        lambda: [
            producer.run.remote(put, end, share, index * share)
            for index, (producer, end, _) in enumerate(pairs)
        ],
    )
    _check_ids(what, share * len(pairs), sum(id_sums))
    return result


def floor_pairs_throughput(count: int, pairs: int, runners: _Runners) -> Throughput:
    """K independent floor pairs: producer -> a plain actor holding a deque -> consumer."""
    actors = runners.floors[:pairs]
    return _pairs_run("floor pairs", count, actors, actors, runners, _floor_put, _floor_take)


def queues_throughput(count: int, pairs: int, runners: _Runners) -> Throughput:
    """K independent Queues in batch mode: producer -> Queue -> consumer."""
    queues = runners.queues[:pairs]
    actors = [queue.actor for queue in queues]
    return _pairs_run("queues", count, queues, actors, runners, _queue_put, _queue_get)


_MEMBERS: list[Subscriber] = []
"""The members this process holds from their last batch until they leave (``_leave``)."""


def _member_batches(topic: Topic, count: int) -> tuple[int, float]:
    """Join the group and iterate ``iter_batches(1000)`` until ``count`` elements
    arrived; return the sum of their ids and the CPU seconds used from joined to
    the last batch. The member stays in the group until ``_leave``."""
    subscriber = topic.subscriber(group=GROUP)
    _MEMBERS.append(subscriber)
    cpu = cpu_seconds()
    id_sum = sum_batches(subscriber, count)
    return id_sum, cpu_seconds() - cpu


def _leave() -> None:
    """Close the members this process holds."""
    while _MEMBERS:
        _MEMBERS.pop().close()


def _held(topic: Topic) -> list[int]:
    """The elements each channel of a fresh topic holds (its sequences start at 0)."""
    return [
        0 if channel.tail is None else channel.tail + 1 for channel in topic.describe().channels
    ]


def _wait_balanced(topic: Topic, members: list[ray.ObjectRef[Any]]) -> None:
    """Wait until the group has every member, each owning one channel.

    Raises:
        RuntimeError: Not within BALANCE_TIMEOUT seconds.
    """
    deadline = time.monotonic() + BALANCE_TIMEOUT
    while True:
        joined = topic.describe().groups[GROUP].members
        if len(joined) == len(members) and all(len(member.channels) == 1 for member in joined):
            return
        ended, _ = ray.wait(members, num_returns=len(members), timeout=0)
        if ended:
            ray.get(ended)  # raises the member's error
            raise RuntimeError("a member of the scale case ended before any message came")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the group's members did not own one channel each: {joined}")
        time.sleep(0.02)


def _group_throughput(
    what: str,
    count: int,
    members: int,
    runners: _Runners,
    publish: Callable[..., tuple[None, float]],
    *,
    by_batch: bool = False,
) -> Throughput:
    """K producers ``publish`` -> a topic of K channels -> K members of one group;
    the clock starts once every member owns its channel. ``by_batch``: the producers
    send each batch to one channel in turn, so each one's share is whole turns."""
    share = _share(count, members)
    if by_batch:
        share = max(share // (members * BATCH), 1) * members * BATCH
    topic = create_topic(_name("scl"), channels=members, capacity=share * members, groups=[GROUP])
    producers = runners.producers[:members]

    def join() -> list[ray.ObjectRef[Any]]:
        joining = [
            consumer.run.remote(_member_batches, topic, share)
            for consumer in runners.consumers[:members]
        ]
        _wait_balanced(topic, joining)
        ray.get([producer.run.remote(publish, topic, 0) for producer in producers])  # warm
        return joining

    def produced() -> None:
        # Round robin gives each channel a member's share; a member waits for
        # all of it, so anything else would leave the run waiting for ever.
        held = _held(topic)
        if held != [share] * members:
            raise RuntimeError(f"the channels hold {held} elements, not {share} each")

    try:
        result, id_sums = measure_run(
            share * members,
            channel_actors(topic),
            join,
            lambda: [
                producer.run.remote(publish, topic, share, index * share)
                for index, producer in enumerate(producers)
            ],
            produced,
        )
        # The members leave once the clock stopped: a leave waits for the
        # group's rebalance (up to a second with 2 members here), which is no
        # part of the rate, and a member leaving early would hand its
        # uncommitted channel to one still reading.
        ray.get([consumer.run.remote(_leave) for consumer in runners.consumers[:members]])
        _check_ids(what, share * members, sum(id_sums))
        return result
    finally:
        topic.destroy()


def publish_throughput(count: int, members: int, runners: _Runners) -> Throughput:
    """K producers calling ``publish()`` -> K channels -> K members."""
    return _group_throughput("scale publish()", count, members, runners, _publish_each)


def publish_batch_throughput(count: int, members: int, runners: _Runners) -> Throughput:
    """K producers calling ``publish_batch(1000)`` -> K channels -> K members."""
    return _group_throughput("scale publish_batch", count, members, runners, _publish_in_batches)


def publish_whole_batches_throughput(count: int, members: int, runners: _Runners) -> Throughput:
    """K producers calling ``publish_batch(1000)`` with ``round_robin="batch"``."""
    return _group_throughput(
        'scale publish_batch, round_robin="batch"',
        count,
        members,
        runners,
        partial(_publish_in_batches, round_robin="batch"),
        by_batch=True,
    )


def publish_futures_throughput(count: int, members: int, runners: _Runners) -> Throughput:
    """K producers calling ``publish_batch(1000, ref=False)`` -> K channels -> K members."""
    return _group_throughput(
        "scale publish_batch(ref=False)", count, members, runners, _publish_in_futures
    )


def one_publisher_throughput(
    count: int, channels: int, runners: _Runners, publish: Callable[..., Any] = _publish_in_batches
) -> Throughput:
    """One producer's ``publish_batch(1000)``, PUBLISHER_IN_FLIGHT calls outstanding,
    over ``channels`` channels; no consumer."""
    topic = create_topic(_name("pub"), channels=channels, capacity=max(count, 1))
    producer = runners.producers[0]
    try:
        ray.get(producer.run.remote(publish, topic, 0))  # warm
        result, _ = measure_run(
            count,
            channel_actors(topic),
            lambda: [],
            lambda: [producer.run.remote(publish, topic, count, 0, PUBLISHER_IN_FLIGHT)],
        )
        if sum(_held(topic)) != count:
            raise RuntimeError(f"one publisher: the topic holds {_held(topic)}, not {count}")
        return result
    finally:
        topic.destroy()


def one_publisher_futures_throughput(count: int, channels: int, runners: _Runners) -> Throughput:
    """:func:`one_publisher_throughput` with ``publish_batch(ref=False)``."""
    return one_publisher_throughput(count, channels, runners, _publish_in_futures)


def one_publisher_whole_batches_throughput(
    count: int, channels: int, runners: _Runners
) -> Throughput:
    """:func:`one_publisher_throughput` from a publisher of ``round_robin="batch"``."""
    publish = partial(_publish_in_batches, round_robin="batch")
    return one_publisher_throughput(count, channels, runners, publish)


@dataclass(frozen=True, slots=True)
class _Case:
    """One case of the scale run and how its figures read."""

    name: str
    """The figures' name, before their K."""
    label: str
    """The CPU figures' name of the case, before their K."""
    measure: Callable[[int, int, _Runners], Throughput]
    """(messages, K, runners) -> the run."""
    roles: tuple[str, str, str] = TOPIC_ROLES
    """The CPU figures' names of the producers, the actors and the consumers."""


CASES = (
    _Case(
        f"K floor pairs (batches of {BATCH})", "K floor pairs", floor_pairs_throughput, FLOOR_ROLES
    ),
    _Case(f"K queues, batch put/get ({BATCH})", "K queues", queues_throughput, FLOOR_ROLES),
    _Case("K x publish() -> K ch -> K members", "K x publish()", publish_throughput),
    _Case("K x publish_batch -> K ch -> K members", "K x publish_batch", publish_batch_throughput),
    _Case(
        "K x publish_batch(ref=False) -> K ch -> K members",
        "K x publish_batch(ref=False)",
        publish_futures_throughput,
    ),
    _Case(
        'K x publish_batch, round_robin="batch" -> K ch -> K members',
        'K x publish_batch, round_robin="batch"',
        publish_whole_batches_throughput,
    ),
    _Case(
        f"1 publisher, publish_batch x{PUBLISHER_IN_FLIGHT} in flight, acks, K ch",
        "1 publisher",
        one_publisher_throughput,
    ),
    _Case(
        "1 publisher, publish_batch(ref=False), acks, K ch",
        "1 publisher (ref=False)",
        one_publisher_futures_throughput,
    ),
    _Case(
        f'1 publisher, publish_batch x{PUBLISHER_IN_FLIGHT} in flight, round_robin="batch", '
        "acks, K ch",
        '1 publisher, round_robin="batch"',
        one_publisher_whole_batches_throughput,
    ),
)
"""In the order measured: the floor pairs first, every CPU figure's baseline."""
(
    _FLOOR,
    _QUEUES,
    _PUBLISH,
    _PUBLISH_BATCH,
    _PUBLISH_FUTURES,
    _PUBLISH_WHOLE,
    _ONE_PUBLISHER,
    _ONE_FUTURES,
    _ONE_WHOLE,
) = CASES
_GROUPED = (_PUBLISH, _PUBLISH_BATCH, _PUBLISH_FUTURES, _PUBLISH_WHOLE)
"""The group cases (K producers -> K channels -> K members)."""


def run_scale_benchmarks(
    *,
    messages: int,
    channels: int,
    repeat: int,
    report: Callable[[Figure], None],
    cores: int | None = None,
) -> list[Figure]:
    """Every case at K = 1 and K = ``channels``.

    Args:
        messages: Messages per run, split between its K producers.
        channels: K of the larger runs.
        repeat: Runs per case and K (the median is reported).
        report: Called with each figure as soon as it is measured.
        cores: The machine's cores, which choose the targets (None: ``os.cpu_count()``).

    Returns:
        Every figure, in the order measured.

    Raises:
        InvalidArgumentError: ``channels`` is below 1, or ``messages`` below
            ``channels`` squared (each of K producers publishes a multiple of K).
        RuntimeError: a case received other messages than were published.
    """
    if channels < 1 or messages < channels * channels:
        raise InvalidArgumentError(
            f"the scale case needs channels >= 1 and messages >= channels squared, "
            f"got {channels} channels and {messages} messages"
        )
    targets = scale_targets(cores if cores is not None else os.cpu_count() or 1)
    sizes = sorted({1, channels})
    figures: list[Figure] = []

    def add(figure: Figure) -> None:
        figures.append(figure)
        report(figure)

    runs: dict[_Case, dict[int, Throughput]] = {}
    runners = _Runners.start(max(sizes))
    try:
        for case in CASES:
            runs[case] = {
                size: median_throughput(repeat, partial(case.measure, messages, size, runners))
                for size in sizes
            }
            for size in sizes:
                for figure in _case_figures(case, size, runs, targets):
                    add(figure)
    finally:
        runners.stop()
    return figures


def _case_figures(
    case: _Case, size: int, runs: dict[_Case, dict[int, Throughput]], targets: ScaleTargets
) -> list[Figure]:
    """A case's figures at K = ``size``: its rate (above K = 1 against K = 1; a
    group case's at K = 1 against a floor pair, above it also against the K
    Queues), then its CPU."""
    rate = runs[case][size].rate
    name = f"scale: {case.name}, K={size}"
    grouped = case in _GROUPED
    if size == 1:
        base = ("1 floor pair", runs[_FLOOR][1].rate) if grouped else (None, None)
        figures = [Figure(name, rate, "msgs/s", *base)]
    else:
        target = (
            targets.group
            if grouped
            else targets.publisher
            if case in (_ONE_PUBLISHER, _ONE_FUTURES, _ONE_WHOLE)
            else None
        )
        figures = [Figure(name, rate, "msgs/s", "K=1", runs[case][1].rate, target=target)]
        if grouped:
            figures.append(
                Figure(
                    f"{name} / {size} queues",
                    rate,
                    "msgs/s",
                    f"{size} queues",
                    runs[_QUEUES][size].rate,
                    target=targets.queues,
                )
            )
    floor = None if case is _FLOOR else runs[_FLOOR][size]
    return figures + cpu_figures(
        f"scale {case.label}, K={size}", runs[case][size], floor, case.roles
    )
