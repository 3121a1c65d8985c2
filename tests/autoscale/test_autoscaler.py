"""``Topic.autoscale``: member actors by lag, each element handled once, a handler
that raises (retried; past ``max_deliveries``, dead-lettered), bad arguments,
reattaching, ``destroy()``, the desired-members metric, and (slow) members, the
coordinator and the scaler SIGKILLed during a burst."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import ray

import raytopic as rt
from raytopic.core.naming import scaled_member_prefix, scaler_prefix

from tests.client.test_metrics import _eventually, _scrape
from tests.topic_helpers import TIMEOUT, group_at_latest, module_topic

topic = module_topic(channels=4)

SLOW_POLL_S = 0.25
"""How often a wait of seconds (a burst handled, a failed batch retried) asks again: a
tally's whole list or a topic's description 50 times a second cost more CPU than the
members it waits for."""


@pytest.fixture
def stopped_after() -> Iterator[Callable[[rt.Autoscaler], rt.Autoscaler]]:
    """``stopped_after(topic.autoscale(...))``: the autoscaler, stopped after the test
    whatever its outcome (``stop`` is idempotent). A test that fails before its own
    ``stop()`` would leave it scaling the module's shared topic, where the next tests
    would find it (seen once: the bad-argument tests failed after such a test)."""
    started: list[rt.Autoscaler] = []

    def stop_later(scaler: rt.Autoscaler) -> rt.Autoscaler:
        started.append(scaler)
        return scaler

    try:
        yield stop_later
    finally:
        for scaler in started:
            scaler.stop()


@ray.remote
class _Tallies:
    """What the handlers were handed, in the order they were, per tally: one actor for
    the module's tests (an actor is a process to start), each test its own key."""

    def __init__(self) -> None:
        self.handled: dict[str, list[Any]] = defaultdict(list)
        self.failed: set[tuple[str, Any]] = set()

    def add(self, key: str, values: list[Any]) -> None:
        self.handled[key].extend(values)

    def fail_first_time(self, key: str, value: Any) -> bool:
        """True the first time ``value`` is asked about under ``key``."""
        first = (key, value) not in self.failed
        self.failed.add((key, value))
        return first

    def get(self, key: str) -> list[Any]:
        return list(self.handled[key])


@dataclass(frozen=True)
class Tally:
    """A test's tally in the module's ``_Tallies`` (it pickles into the handlers)."""

    tallies: Any
    key: str

    def add(self, values: list[Any]) -> None:
        ray.get(self.tallies.add.remote(self.key, values))

    def fail_first_time(self, value: Any) -> bool:
        return ray.get(self.tallies.fail_first_time.remote(self.key, value))

    def get(self) -> list[Any]:
        return ray.get(self.tallies.get.remote(self.key))


@pytest.fixture(scope="module")
def tallies(ray_session: None) -> Iterator[Any]:
    actor = _Tallies.remote()
    yield actor
    ray.kill(actor)


@pytest.fixture
def tally(tallies: Any) -> Tally:
    """This test's tally (a key of its own in the module's actor)."""
    return Tally(tallies, uuid.uuid4().hex)


class Record:
    """A handler: record the values in a Tally, after ``seconds`` of work per value;
    raise once on the values of ``fail_on``."""

    def __init__(self, tally: Tally, seconds: float = 0.0, fail_on: frozenset[Any] = frozenset()):
        self.tally = tally
        self.seconds = seconds
        self.fail_on = fail_on

    def __call__(self, values: list[Any]) -> None:
        time.sleep(self.seconds * len(values))
        for value in self.fail_on.intersection(values):
            if self.tally.fail_first_time(value):
                raise RuntimeError(f"handler failed on {value!r} (once)")
        self.tally.add(values)


def _values(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{n}" for n in range(count)]


def _publish(topic: rt.Topic, values: list[Any]) -> None:
    with topic.publisher() as publisher:
        futures = [publisher.publish(value) for value in values]
    for future in futures:
        future.result(timeout=TIMEOUT)


def _handled_all(tally: Tally, values: list[Any]) -> Callable[[], bool]:
    wanted = set(values)
    return lambda: wanted <= set(tally.get())


def _named(prefix: str, namespace: str) -> list[str]:
    return [
        actor["name"]
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor.get("namespace") == namespace and actor["name"].startswith(prefix)
    ]


# -- scaling and delivery --------------------------------------------------------------


def _two_quick_members(
    topic: rt.Topic, group: str, tally: Tally, activation_lag: int = 1
) -> rt.Autoscaler:
    """An autoscaler of up to 2 members recording into ``tally``, quick to scale
    (polls every 0.2 s, down after 0.5 s idle, 100 elements of lag per member)."""
    return topic.autoscale(
        group,
        Record(tally, seconds=0.002),
        max_members=2,
        target_lag_per_member=100,
        poll_s=0.2,
        scale_down_after_s=0.5,
        batch_size=10,
        activation_lag=activation_lag,
    )


@pytest.mark.parametrize("mode", ["owned", "shared"])
def test_a_burst_scales_up_from_zero_each_element_once_then_down(
    topic: rt.Topic, wait_until, stopped_after, tally: Tally, mode: str
) -> None:
    group = f"work-{mode}"
    group_at_latest(topic, group if mode == "owned" else rt.SharedGroup(group))
    # The batch's parts (a call per channel, sent together) land at their channels one
    # by one: under load a poll fell between them, saw one part's lag and scaled to 1
    # first. Waking at the whole burst's lag, the scaler's first step sees all of it.
    scaler = stopped_after(_two_quick_members(topic, group, tally, activation_lag=400))
    assert scaler.members == 0  # no lag, min_members=0: nobody
    values = _values(mode, 400)
    with topic.publisher() as publisher:
        ray.get(publisher.publish_batch(values), timeout=TIMEOUT)
    wait_until(lambda: scaler.describe().members, timeout=TIMEOUT)
    stats = scaler.describe()
    assert stats.desired == 2  # 400 / 100 wanted, max_members 2
    member = stats.members[0]
    assert member.pid > 0 and member.node_id
    members = {m.member_id for m in topic.describe().groups[group].members}
    assert member.member_id in members
    wait_until(_handled_all(tally, values), timeout=60, interval=SLOW_POLL_S)
    wait_until(lambda: scaler.members == 0, timeout=TIMEOUT)  # idle: down after 0.5 s
    handled = Counter(tally.get())
    assert sorted(handled) == sorted(values)
    assert set(handled.values()) == {1}  # no crash: each element handled once
    events = scaler.describe().events
    assert (events[0].before, events[0].after) == (0, 2)
    assert "activation_lag" in events[0].reason
    assert events[-1].after == 0 and "fewer members" in events[-1].reason
    assert topic.describe().groups[group].lag == 0
    scaler.stop()
    assert topic.autoscaler(group) is None


def test_members_start_from_parked_processes_that_hold_no_channel(
    topic: rt.Topic, wait_until, stopped_after, tally: Tally
) -> None:
    group = "warm"
    group_at_latest(topic, group)
    scaler = stopped_after(_two_quick_members(topic, group, tally))
    # Idle: the processes of the next two members are started, parked, in no group.
    wait_until(lambda: scaler.describe().parked == 2, timeout=TIMEOUT)
    assert scaler.members == 0
    assert topic.describe().groups[group].members == ()
    processes = set(_named(scaled_member_prefix(topic.name, group), topic.namespace))
    assert len(processes) == 2
    for burst in ("first", "second"):  # parked again after the scale-down, and taken again
        values = _values(f"warm-{burst}", 400)
        with topic.publisher() as publisher:
            ray.get(publisher.publish_batch(values), timeout=TIMEOUT)
        wait_until(lambda: len(scaler.describe().members) == 2, timeout=TIMEOUT)
        assert set(_named(scaled_member_prefix(topic.name, group), topic.namespace)) == processes
        wait_until(_handled_all(tally, values), timeout=60, interval=SLOW_POLL_S)
        wait_until(lambda: scaler.describe().parked == 2 and scaler.members == 0, TIMEOUT)
        assert set(_named(scaled_member_prefix(topic.name, group), topic.namespace)) == processes
    handled = Counter(tally.get())
    assert set(handled.values()) == {1}
    scaler.stop()
    assert _named(scaled_member_prefix(topic.name, group), topic.namespace) == []


def test_members_that_reserve_resources_are_not_parked(
    topic: rt.Topic, wait_until, stopped_after, tally: Tally
) -> None:
    group = "reserving"
    group_at_latest(topic, group)
    scaler = stopped_after(
        topic.autoscale(
            group,
            Record(tally),
            max_members=2,
            poll_s=0.1,
            member_options={"num_cpus": 0.1},
        )
    )
    time.sleep(1.0)  # ten polls
    assert scaler.describe().parked == 0
    assert _named(scaled_member_prefix(topic.name, group), topic.namespace) == []


def test_members_join_a_busy_owned_group_without_handling_anything_twice(
    topic: rt.Topic, wait_until, stopped_after, tally: Tally
) -> None:
    # One member is busy when the others join: its channels move only after it
    # committed what it had in hand (without the hand-over some would run twice).
    group_at_latest(topic, "handover")
    values = _values("handover", 600)
    _publish(topic, values[:100])  # wakes one member (target 100)...
    scaler = stopped_after(
        topic.autoscale(
            "handover",
            Record(tally, seconds=0.01),
            max_members=3,
            target_lag_per_member=100,
            poll_s=0.2,
            scale_down_after_s=60.0,
            batch_size=20,
        )
    )
    wait_until(lambda: scaler.describe().members, timeout=TIMEOUT)
    _publish(topic, values[100:])  # ...then two more join it while it works
    wait_until(lambda: len(scaler.describe().members) == 3, timeout=TIMEOUT)
    wait_until(_handled_all(tally, values), timeout=60, interval=SLOW_POLL_S)
    handled = Counter(tally.get())
    assert set(handled.values()) == {1}
    assert sorted(handled) == sorted(values)
    scaler.stop()


def test_a_handler_that_raises_is_retried_owned_and_nacked_shared(
    topic: rt.Topic, wait_until, stopped_after, tally: Tally
) -> None:
    group_at_latest(topic, "flaky")
    group_at_latest(topic, rt.SharedGroup("flaky-shared"))
    values = _values("flaky", 40)
    bad = frozenset({values[5], values[17]})
    settings = dict(min_members=1, max_members=1, poll_s=0.2, batch_size=5)
    owned = stopped_after(topic.autoscale("flaky", Record(tally, fail_on=bad), **settings))
    shared = stopped_after(topic.autoscale("flaky-shared", Record(tally, fail_on=bad), **settings))
    _publish(topic, values)
    # Each group handles every value: a failed batch comes back (owned: from the
    # last commit after a pause; shared: nacked) and succeeds the second time.
    wait_until(
        lambda: Counter(tally.get()) == Counter(values * 2),
        timeout=60,
        interval=SLOW_POLL_S,
    )
    assert topic.describe().groups["flaky"].lag == 0
    assert topic.describe().groups["flaky-shared"].lag == 0
    owned.stop()
    shared.stop()


class FailOn:
    """A handler that records the values in a Tally, and always raises on a batch
    holding ``bad``."""

    def __init__(self, tally: Tally, bad: Any, error: type[BaseException] = ValueError) -> None:
        self.tally = tally
        self.bad = bad
        self.error = error

    def __call__(self, values: list[Any]) -> None:
        if self.bad in values:
            raise self.error(f"cannot handle {self.bad!r}")
        self.tally.add(values)


def _dead_lettering(
    topic: rt.Topic,
    group: str,
    handler: FailOn,
    batch_size: int,
    values: list[Any],
    stopped_after: Callable[[rt.Autoscaler], rt.Autoscaler],
    wait_until: Any,
) -> tuple[rt.Autoscaler, list[dict[str, Any]]]:
    """Scale ``group`` (at its latest) with ``handler``, one member, ``max_deliveries=2``
    into ``<topic>-<group>-dead``; publish ``values``; once the group's lag is 0, return
    the autoscaler and the dead letters (the dead-letter topic is destroyed)."""
    group_at_latest(topic, group)
    dead_letter = f"{topic.name}-{group}-dead"
    scaler = stopped_after(
        topic.autoscale(
            group,
            handler,
            min_members=1,
            max_members=1,
            poll_s=0.2,
            batch_size=batch_size,
            max_deliveries=2,
            dead_letter=dead_letter,
        )
    )
    _publish(topic, values)
    wait_until(lambda: topic.describe().groups[group].lag == 0, timeout=60, interval=SLOW_POLL_S)
    dead = rt.get_topic(dead_letter, namespace=topic.namespace)
    try:
        with dead.subscriber(start="earliest", complete_on_empty=True) as reader:
            return scaler, [element.value for element in reader]
    finally:
        dead.destroy()


def test_an_owned_batch_failing_max_deliveries_times_goes_to_the_dead_letter_topic(
    topic: rt.Topic, wait_until, stopped_after, tally: Tally
) -> None:
    values = _values("poisoned", 40)
    bad = values[13]
    # The channel behind the bad value moves on: its batch is dead-lettered after
    # two failed calls (1 s apart), and the member commits past it.
    scaler, letters = _dead_lettering(
        topic, "poisoned", FailOn(tally, bad), 5, values, stopped_after, wait_until
    )
    handled = tally.get()
    dead_values = [letter["value"] for letter in letters]
    assert bad in dead_values and bad not in handled
    assert Counter(handled + dead_values) == Counter(values)  # each value once, somewhere
    for letter in letters:
        assert letter["deliveries"] == 2
        assert letter["topic"] == topic.name
        assert letter["reason"].startswith(
            f"handler failed 2 times: ValueError: cannot handle {bad!r}"
        )
        assert letter["position"].split(":")[1] == str(letter["channel"])
    stats = scaler.describe()
    assert stats.failures == 2 and stats.dead_lettered == len(letters)
    assert stats.last_failure is not None
    assert stats.last_failure.attempt == 2 and stats.last_failure.dead_lettered == len(letters)
    assert stats.last_failure.error.startswith(
        f"ValueError: cannot handle {bad!r} (test_autoscaler.py:"
    )
    scaler.stop()


def test_a_handler_raising_systemexit_is_a_failure_of_its_batch_not_of_its_member(
    topic: rt.Topic, wait_until, stopped_after, tally: Tally
) -> None:
    # Before: SystemExit ended the member's process; its successor met the same batch and
    # ended too, for ever: failures 0, nothing dead-lettered, the channel's lag stuck.
    values = _values("exiting", 20)
    handler = FailOn(tally, values[7], SystemExit)
    scaler, letters = _dead_lettering(
        topic, "exiting", handler, 1, values, stopped_after, wait_until
    )
    assert [letter["value"] for letter in letters] == [values[7]]
    assert letters[0]["reason"].startswith("handler failed 2 times: SystemExit: cannot handle")
    assert Counter(tally.get()) == Counter(values[:7] + values[8:])
    stats = scaler.describe()
    assert (stats.failures, stats.dead_lettered) == (2, 1)
    scaler.stop()


def test_limits_for_a_shared_group_are_refused_and_make_nothing(topic: rt.Topic) -> None:
    dead_letter = f"{topic.name}-refused-dead"
    group = rt.SharedGroup(f"shared-{uuid.uuid4().hex[:6]}")
    with pytest.raises(rt.InvalidArgumentError, match="is a shared group"):
        topic.autoscale(group, print, max_deliveries=2, dead_letter=dead_letter)
    group_at_latest(topic, group)  # named by a string: refused once its mode is known
    with pytest.raises(rt.InvalidArgumentError, match="is a shared group"):
        topic.autoscale(group.name, print, max_deliveries=2, dead_letter=dead_letter)
    assert _named(scaler_prefix(topic.name), topic.namespace) == []
    assert dead_letter not in rt.list_topics(namespace=topic.namespace)
    topic.destroy_group(group.name)


# -- handles, bad input, destroy -----------------------------------------------------------


def _holding_a_lock() -> Callable[[list[Any]], None]:
    """A handler that cannot be sent to a member: it holds a lock (not picklable)."""
    lock = threading.Lock()

    def handle(values: list[Any]) -> None:
        with lock:
            pass

    return handle


def test_an_autoscaler_is_found_again_and_a_second_one_is_refused(
    topic: rt.Topic, stopped_after, tally: Tally
) -> None:
    group_at_latest(topic, "found")  # no lag: no member starts
    # max_members 1: one parked member, not the default's 8 processes, none needed here.
    scaler = stopped_after(topic.autoscale("found", Record(tally), max_members=1, poll_s=0.5))
    found = topic.autoscaler("found")
    assert found is not None and found.group == "found"
    assert ray.get(ray.remote(lambda s: s.members).remote(scaler)) == 0  # pickles
    with pytest.raises(rt.InvalidArgumentError, match="autoscaled already"):
        stopped_after(topic.autoscale("found", Record(tally)))
    assert topic.autoscaler("nobody") is None
    scaler.stop()
    scaler.stop()  # idempotent
    assert topic.autoscaler("found") is None


@pytest.mark.parametrize(
    ("arguments", "error", "named"),
    [
        ({"handler": "not callable"}, rt.InvalidTypeError, "handler"),
        ({"handler": _holding_a_lock()}, rt.InvalidTypeError, "handler"),
        ({"group": 7}, rt.InvalidTypeError, "group"),
        ({"group": "no spaces"}, rt.InvalidArgumentError, "group"),
        ({"min_members": 3, "max_members": 2}, rt.InvalidArgumentError, "min_members"),
        ({"poll_s": 0}, rt.InvalidArgumentError, "poll_s"),
        ({"batch_size": "10"}, rt.InvalidTypeError, "batch_size"),
        ({"member_options": ["num_cpus"]}, rt.InvalidTypeError, "member_options"),
        ({"member_options": {"num_gpu": 1}}, rt.InvalidArgumentError, "num_gpu"),
        ({"member_options": {"num_cpus": "one"}}, rt.InvalidTypeError, "num_cpus"),
        ({"member_options": {"name": "mine"}}, rt.InvalidArgumentError, "name"),
        ({"max_deliveries": 0, "dead_letter": "dead"}, rt.InvalidArgumentError, "max_deliveries"),
        ({"max_deliveries": 3}, rt.InvalidArgumentError, "needs a dead_letter"),
        ({"dead_letter": "dead"}, rt.InvalidArgumentError, "needs max_deliveries"),
        ({"max_deliveries": 3, "dead_letter": "a b"}, rt.InvalidArgumentError, "dead_letter"),
    ],
)
def test_bad_arguments_are_typed_errors_and_start_nothing(
    topic: rt.Topic,
    stopped_after,
    arguments: dict[str, Any],
    error: type[Exception],
    named: str,
) -> None:
    group = f"bad-{uuid.uuid4().hex[:6]}"
    call = {"group": group, "handler": print, **arguments}
    with pytest.raises(error, match=named):
        stopped_after(topic.autoscale(call.pop("group"), call.pop("handler"), **call))
    assert _named(scaler_prefix(topic.name), topic.namespace) == []
    assert group not in topic.groups()
    assert "dead" not in rt.list_topics(namespace=topic.namespace)


def test_destroy_stops_the_autoscaler_and_its_members(
    make_topic, wait_until, stopped_after, tally: Tally
) -> None:
    doomed = make_topic(channels=2)
    # max_members 3: two members and one parked, which destroy() must stop too (the
    # default's 8 would park six processes).
    scaler = stopped_after(
        doomed.autoscale("g", Record(tally), min_members=2, max_members=3, poll_s=0.2)
    )
    wait_until(lambda: len(scaler.describe().members) == 2, timeout=TIMEOUT)
    doomed.destroy()
    assert _named(scaler_prefix(doomed.name), doomed.namespace) == []
    wait_until(lambda: not _named(scaled_member_prefix(doomed.name), doomed.namespace))
    with pytest.raises(rt.TopicNotFoundError):
        scaler.describe()


def test_a_stale_handle_s_destroy_leaves_a_topic_made_again_of_the_name_alone(
    make_topic, wait_until, stopped_after, tally: Tally, caplog: pytest.LogCaptureFixture
) -> None:
    # destroy() is idempotent; a second one from a handle of the destroyed topic, once
    # the name is another topic's, killed that topic's autoscaler (found by its name)
    # and waited 30 s for each of its actors' names to be freed; the old autoscaler's
    # stop() waited 30 s for the new one's name, and the old topic's autoscaler(group)
    # gave the new topic's.
    old = make_topic(channels=1)
    first = stopped_after(old.autoscale("g", Record(tally), max_members=1, poll_s=0.2))
    old.destroy()
    again = rt.create_topic(old.name, channels=1, namespace=old.namespace)
    try:
        scaler = stopped_after(
            again.autoscale("g", Record(tally), min_members=1, max_members=1, poll_s=0.2)
        )
        wait_until(lambda: len(scaler.describe().members) == 1, timeout=TIMEOUT)
        with caplog.at_level(logging.WARNING, logger="raytopic"):
            old.destroy()
            first.stop()
            with pytest.raises(rt.TopicNotFoundError):
                old.autoscaler("g")
        assert [record.getMessage() for record in caplog.records] == []
        assert len(_named(scaler_prefix(again.name), again.namespace)) == 1
        assert len(scaler.describe().members) == 1
        _publish(again, ["after"])
        wait_until(lambda: tally.get() == ["after"], timeout=TIMEOUT)
        with pytest.raises(rt.TopicNotFoundError):
            old.describe()
    finally:
        again.destroy()


def test_the_desired_count_is_a_metric(
    topic: rt.Topic, metrics_url: str, stopped_after, tally: Tally
) -> None:
    group_at_latest(topic, "metered")
    scaler = stopped_after(  # max_members 1: no parked processes (the default's 8 would park 7)
        topic.autoscale("metered", Record(tally), min_members=1, max_members=1, poll_s=0.2)
    )

    def reported() -> None:
        samples = _scrape(metrics_url, topic.name)
        desired = samples["ray_raytopic_group_desired_members"]
        assert [value for labels, value in desired if labels["group"] == "metered"] == [1.0]

    _eventually(reported)
    scaler.stop()


# -- faults (slow) -----------------------------------------------------------------------


@pytest.mark.slow
def test_member_coordinator_and_scaler_sigkills_during_a_burst_lose_nothing(
    make_topic, wait_until, stopped_after, tally: Tally
) -> None:
    """A member, the coordinator and the scaler are SIGKILLed in turn while a burst is
    handled: every element is handled (a killed member's batch may run twice), and
    the scaler comes back to the desired count with its settings."""
    victim = make_topic(channels=4)
    scaler = stopped_after(
        victim.autoscale(
            "g",
            Record(tally, seconds=0.005),
            min_members=2,
            max_members=4,
            target_lag_per_member=100,
            poll_s=0.2,
            scale_down_after_s=60.0,
            batch_size=10,
        )
    )
    values = _values("burst", 1200)
    _publish(victim, values[:400])
    wait_until(lambda: len(scaler.describe().members) == 4, timeout=TIMEOUT)

    member = scaler.describe().members[0]
    os.kill(member.pid, signal.SIGKILL)
    _publish(victim, values[400:800])
    wait_until(
        lambda: member.member_id not in {m.member_id for m in scaler.describe().members},
        timeout=TIMEOUT,
    )
    assert any("died" in event.reason for event in scaler.describe().events)

    coordinator_pid = ray.get(victim._coordinator.__ray_call__.remote(lambda _: os.getpid()))
    os.kill(coordinator_pid, signal.SIGKILL)
    _publish(victim, values[800:])

    scaler_pid = ray.get(scaler._actor.__ray_call__.remote(lambda _: os.getpid()))
    os.kill(scaler_pid, signal.SIGKILL)
    wait_until(_handled_all(tally, values), timeout=120, interval=SLOW_POLL_S)
    # Restarted with its settings (max_members 4, scale-down after 60 s): it adopted
    # the members alive and came back to the desired count.
    stats = wait_until(
        lambda: (s := scaler.describe()).desired == len(s.members) and s, 60, SLOW_POLL_S
    )
    assert any("restarted" in event.reason for event in stats.events)
    assert 2 <= len(stats.members) <= 4
    handled = Counter(tally.get())
    assert set(handled) == set(values)  # nothing lost; a killed batch may run again
    scaler.stop()


@pytest.mark.slow
def test_a_member_killed_while_it_stops_leaves_its_group_at_once(
    make_topic, wait_until, stopped_after, tally: Tally
) -> None:
    """A member SIGKILLed while it finishes its batch to stop (a scale-down, or
    ``stop()``) is told to the group at once, as one that dies at work is: its
    channels do not wait for its timeout to move (the group listed it, dead, for
    ``MEMBER_TIMEOUT`` after ``stop()`` returned). Meanwhile ``describe()`` answers
    (it waited behind the stop, up to ``STOP_TIMEOUT``, 120 s)."""
    victim = make_topic(channels=2)
    scaler = stopped_after(
        victim.autoscale(
            "g",
            Record(tally, seconds=120.0),
            min_members=1,
            max_members=1,
            poll_s=0.2,
            batch_size=1,
        )
    )
    member = wait_until(lambda: scaler.describe().members, timeout=90)[0]
    _publish(victim, ["slow"])  # in the handler for 2 minutes: stop() waits for it
    wait_until(lambda: victim.describe().groups["g"].depth == 0, timeout=90)
    stopping = threading.Thread(target=scaler.stop)
    stopping.start()
    (name,) = _named(scaled_member_prefix(victim.name, "g"), victim.namespace)
    handle = ray.get_actor(name, namespace=victim.namespace)
    wait_until(
        lambda: ray.get(handle.__ray_call__.remote(lambda actor: actor._stopping.is_set())),
        timeout=90,
    )
    described: list[rt.AutoscalerStats] = []
    describing = threading.Thread(target=lambda: described.append(scaler.describe()))
    describing.start()
    describing.join(60)  # its handler holds the batch for 120 s
    assert described and described[0].members == ()  # leaving: no longer a member
    os.kill(member.pid, signal.SIGKILL)
    stopping.join(90)
    assert not stopping.is_alive()
    members = [m.member_id for m in victim.describe().groups["g"].members]
    assert member.member_id not in members
