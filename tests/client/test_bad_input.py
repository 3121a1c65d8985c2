"""Bad input to every public call: wrong types and values get raytopic's typed errors
(InvalidArgumentError, InvalidTypeError, or a documented subclass) and change nothing.

Each test feeds one argument of one call values drawn by hypothesis from what the
argument must refuse (None, text, bytes, bools, NaN and infinities, ints up to
10**400, containers, naive datetimes out of range, functions that cannot be
pickled, ...) and checks the topic afterwards: same heads and tails, same groups,
members and positions. The checks run in the caller, so most examples cost no
cluster call; one module topic serves them all.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pyarrow as pa
import pytest
import ray
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import raytopic as rt
import raytopic.data
from raytopic.core.config import (
    MAX_CHANNELS,
    MAX_COUNT,
    MAX_LINGER_SECONDS,
    MAX_RETENTION_SECONDS,
    MAX_SECONDS,
)
from raytopic.resequencer_actor import make_resequencer_actor

from tests.topic_helpers import get, module_topic, receive_exactly

CHANNELS = 2

# A namespace of its own, one per process: the snapshot lists the namespace's topics,
# and the other xdist worker makes topics meanwhile (this module's own among them).
topic = module_topic(
    namespace=f"bad-input-{uuid.uuid4().hex[:8]}",
    channels=CHANNELS,
    groups=["owned", rt.SharedGroup("shared", ack_timeout=3600.0)],
    retain=True,
)

# -- what an argument must refuse ---------------------------------------------------------


class _HoldsALock:
    """A callable that cannot be pickled (it holds a lock): it cannot reach a channel."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, *args: Any) -> bool:
        return True


UNPICKLABLE = _HoldsALock()

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=6),
    st.binary(max_size=6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.sampled_from([float("inf"), float("-inf"), float("nan"), 2**63, 10**400, -(10**400)]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from([object(), datetime(1, 1, 1), datetime.min, UNPICKLABLE, {1, 2}, ()]),
)
"""Anything: each argument's strategy keeps what that argument must refuse."""

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def bad_seconds(
    maximum: float = MAX_SECONDS, *, none: bool = False, zero: bool = False
) -> st.SearchStrategy[Any]:
    """Values a duration refuses: not a number, NaN, out of ``(0, maximum]``
    (``[0, maximum]`` with ``zero``), and None unless ``none``."""

    def valid(value: Any) -> bool:
        if value is None:
            return none
        return _number(value) and (value >= 0 if zero else value > 0) and value <= maximum

    edges = st.sampled_from([maximum * 1.01, maximum + 1, -0.001, 0, 0.0, True])
    return st.one_of(JUNK, edges).filter(lambda value: not valid(value))


def bad_int(
    minimum: int, maximum: int = MAX_COUNT, *, none: bool = False
) -> st.SearchStrategy[Any]:
    """Values an int argument refuses: not an int (bools too), or out of range (every
    count, size and sequence is at most ``MAX_COUNT``: 2**63 and 10**400 are drawn)."""

    def valid(value: Any) -> bool:
        if value is None:
            return none
        return (
            isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= maximum
        )

    return JUNK.filter(lambda value: not valid(value))


def bad_name(*, none: bool = False) -> st.SearchStrategy[Any]:
    """Values a topic, group or namespace name refuses."""
    edges = st.sampled_from(["", " ", "a b", "-lead", "x" * 129, "é", "a/b"])
    return st.one_of(JUNK, edges).filter(
        lambda value: (
            not ((value is None and none) or (isinstance(value, str) and NAME.fullmatch(value)))
        )
    )


NOT_ITEMS = st.one_of(
    st.none(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True),
    st.booleans(),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just(object()),
)
"""Not an iterable of items: a str, bytes or a dict is refused too (never meant)."""

NOT_BOOL = JUNK.filter(lambda value: not isinstance(value, bool))
ON_POISON_JUNK = JUNK.filter(lambda value: value not in ("raise", "skip"))

NOT_CALLABLE = JUNK.filter(lambda value: value is not None and not callable(value))
"""Not a function (None excluded: where None is allowed it means 'none')."""

BAD_FUNCTION = st.one_of(NOT_CALLABLE, st.just(UNPICKLABLE))
"""What a filter, converter or factory that runs in the channels refuses."""

BAD_DATETIME = st.sampled_from([datetime(1, 1, 1), datetime.min])
"""Naive datetimes that ``datetime.timestamp()`` cannot place."""

REFUSED = (rt.InvalidArgumentError, rt.InvalidTypeError)


def refuses(
    call: Callable[[Any], Any],
    values: st.SearchStrategy[Any],
    state: Callable[[], Any] | None = None,
    examples: int = 25,
) -> None:
    """``call(value)`` raises a typed error for each value drawn; ``state()`` is the
    same afterwards."""
    before = state() if state is not None else None

    @settings(
        max_examples=examples,
        database=None,
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
    )
    @given(values)
    def check(value: Any) -> None:
        with pytest.raises(REFUSED):
            result = call(value)
            if isinstance(result, ray.ObjectRef):  # what an async call's ref raises
                get(result)

    check()
    if state is not None:
        assert state() == before


def snapshot(topic: rt.Topic) -> Any:
    """What a call could change: each channel's head and tail, each group's members
    and positions, the namespace's topics."""
    stats = topic.describe()
    channels = [(c.channel, c.head, c.tail, c.size) for c in stats.channels]
    groups = {
        name: (
            group.mode,
            group.generation,
            sorted(member.member_id for member in group.members),
            [
                (c.channel, c.owner, c.committed, c.has_commit, c.next, c.unacked, c.holdings)
                for c in group.channels
            ],
        )
        for name, group in stats.groups.items()
    }
    return channels, groups, rt.list_topics(namespace=topic.namespace)


# -- what the tests read --------------------------------------------------------------------


@pytest.fixture(scope="module")
def state(topic: rt.Topic) -> Callable[[], Any]:
    return lambda: snapshot(topic)


@pytest.fixture(scope="module")
def compacted(topic: rt.Topic) -> Any:
    """A compacted topic beside the module's (in its namespace), which nothing enters."""
    made = rt.create_topic(
        f"bad-input-compacted-{uuid.uuid4().hex[:8]}",
        namespace=topic.namespace,
        channels=1,
        compaction=rt.Compaction(),
    )
    yield made
    made.destroy()


@pytest.fixture(scope="module")
def compacted_state(compacted: rt.Topic) -> Callable[[], Any]:
    return lambda: snapshot(compacted)


@pytest.fixture(scope="module")
def publisher(topic: rt.Topic) -> Any:
    with topic.publisher() as publisher:
        yield publisher


@pytest.fixture(scope="module")
def member(topic: rt.Topic) -> Any:
    """The one member of "owned": it owns every channel. Idle for the module (it
    receives once), so a timeout of an hour: with the default 30 s the group timed
    it out during a later test under a full run's load, and that test's snapshot
    changed."""
    with topic.subscriber(group="owned", timeout=3600.0) as member:
        yield member


@pytest.fixture(scope="module")
def shared_member(topic: rt.Topic) -> Any:
    with topic.subscriber(group="shared", mode="shared", timeout=3600.0) as member:
        yield member


@pytest.fixture(scope="module")
def received(topic: rt.Topic, member: Any, shared_member: Any) -> dict[str, rt.ElementBatch]:
    """Elements the owned and the shared member received (and hold, unsettled)."""
    with topic.publisher() as publisher:
        get(publisher.publish_batch(list(range(4))))
    return {
        "owned": receive_exactly(member, 2),
        "shared": receive_exactly(shared_member, 2),
    }


# -- lifecycle ------------------------------------------------------------------------------

CREATE_TOPIC = {
    "name": bad_name(),
    "channels": bad_int(1, MAX_CHANNELS),
    "capacity": bad_int(1),
    "retain": NOT_BOOL.filter(lambda value: value is not None),  # None: the default
    "ttl": bad_seconds(MAX_RETENTION_SECONDS, none=True),
    "overflow": JUNK.filter(lambda v: v not in ("block", "overwrite", "fail")),
    "store": st.one_of(
        st.sampled_from(["", "s3://bucket/x", UNPICKLABLE]), NOT_CALLABLE.filter(_number)
    ),
    "groups": st.one_of(NOT_ITEMS, st.sampled_from([["a b"], [5], ["g", "g"], [None]])),
    "namespace": bad_name(none=True),
    "exist_ok": NOT_BOOL,
    "sync": st.one_of(JUNK, st.sampled_from([MAX_LINGER_SECONDS + 1])).filter(
        lambda v: v not in ("always", "write") and not (_number(v) and 0 < v <= MAX_LINGER_SECONDS)
    ),
    "store_retention": st.sampled_from([{"seconds": 10**400}, {"seconds": -1}, {"bytes": 1.5}]),
    "placement": JUNK.filter(lambda v: v not in ("spread", "pack")),
    "default_window": bad_int(1),
    "compaction": JUNK.filter(lambda value: value is not None),
}


@pytest.mark.parametrize("argument", list(CREATE_TOPIC))
def test_create_topic(topic: rt.Topic, state: Any, argument: str) -> None:
    good: dict[str, Any] = {"name": "bad-input-new", "namespace": topic.namespace}
    if argument == "store_retention":
        good["store"] = "/nonexistent/raytopic-bad-input"
    refuses(
        lambda value: rt.create_topic(**{**good, argument: value}), CREATE_TOPIC[argument], state
    )


def test_a_compacted_topic_refuses_retain_false(topic: rt.Topic, state: Any) -> None:
    good: dict[str, Any] = {"name": "bad-input-new", "namespace": topic.namespace}
    compaction = rt.Compaction()
    refuses(
        lambda retain: rt.create_topic(**good, compaction=compaction, retain=retain),
        st.just(False),
        state,
        examples=1,
    )


COMPACTION = {
    "min_lag_s": bad_seconds(MAX_RETENTION_SECONDS, zero=True),
    "max_lag_s": bad_seconds(MAX_RETENTION_SECONDS),
    "tombstone_retention_s": bad_seconds(MAX_RETENTION_SECONDS, zero=True),
}


@pytest.mark.parametrize("argument", list(COMPACTION))
def test_compaction(argument: str) -> None:
    refuses(lambda value: rt.Compaction(**{argument: value}), COMPACTION[argument])


def test_compaction_refuses_a_min_lag_over_its_max_lag() -> None:
    refuses(
        lambda lags: rt.Compaction(min_lag_s=lags[0], max_lag_s=lags[1]),
        st.tuples(st.floats(1.0, 100.0), st.floats(0.001, 0.999)),
    )


def test_get_topic_and_list_topics(topic: rt.Topic) -> None:
    refuses(lambda name: rt.get_topic(name, namespace=topic.namespace), bad_name())
    refuses(lambda namespace: rt.get_topic(topic.name, namespace=namespace), bad_name(none=True))
    refuses(lambda namespace: rt.list_topics(namespace=namespace), bad_name(none=True))


# -- Topic ----------------------------------------------------------------------------------

PUBLISHER = {
    "ordering": NOT_CALLABLE,
    "block_timeout": bad_seconds(none=True),
    "batch_size": bad_int(1),
    "linger": bad_seconds(MAX_LINGER_SECONDS, zero=True),
    "max_in_flight": bad_int(1),
    "round_robin": JUNK.filter(lambda value: value not in ("value", "batch")),
}


@pytest.mark.parametrize("argument", list(PUBLISHER))
def test_topic_publisher(topic: rt.Topic, argument: str) -> None:
    refuses(lambda value: topic.publisher(**{argument: value}), PUBLISHER[argument])


SUBSCRIBER = {
    "group": bad_name(none=True).filter(lambda v: not isinstance(v, rt.SharedGroup)),
    "start": JUNK.filter(lambda v: v not in (None, "earliest", "latest")),
    "filter": BAD_FUNCTION,
    "converter": BAD_FUNCTION,
    "complete_on_empty": NOT_BOOL,
    "window": bad_int(1, none=True),
    "timeout": bad_seconds(),
    "on_ownership_change": NOT_CALLABLE,
    "resequence": st.one_of(NOT_CALLABLE, st.just(rt.Resequence(seq=UNPICKLABLE))),
    "mode": JUNK.filter(lambda v: v not in (None, "owned", "shared")),
    "on_poison": ON_POISON_JUNK,
    "create_group": NOT_BOOL,
}


@pytest.mark.parametrize("argument", list(SUBSCRIBER))
def test_topic_subscriber(topic: rt.Topic, state: Any, argument: str) -> None:
    group = {} if argument == "group" else {"group": "owned"}
    refuses(
        lambda value: topic.subscriber(**{**group, argument: value}), SUBSCRIBER[argument], state
    )


def test_topic_ringbuffer_and_position(topic: rt.Topic) -> None:
    refuses(topic.ringbuffer, bad_int(0, CHANNELS - 1))
    refuses(lambda channel: topic.position(channel, 0), bad_int(0, CHANNELS - 1))
    refuses(lambda sequence: topic.position(0, sequence), bad_int(-1))


def test_topic_groups(topic: rt.Topic, state: Any) -> None:
    refuses(
        topic.create_group, bad_name().filter(lambda v: not isinstance(v, rt.SharedGroup)), state
    )
    refuses(topic.destroy_group, bad_name(), state)
    refuses(lambda name: topic.reset_group(name, "earliest"), bad_name(), state)


def test_topic_reset_group(topic: rt.Topic, state: Any) -> None:
    other = rt.Position("0ther", 0, 0)
    targets = st.one_of(
        JUNK.filter(lambda v: v not in ("earliest", "latest")),
        BAD_DATETIME,
        st.sampled_from([{}, {0: 5}, {5: other}, {"0": other}, {0: other}, {None: 1}]),
    )
    refuses(lambda to: topic.reset_group("owned", to), targets, state)


# -- Publisher ------------------------------------------------------------------------------


def _valid_key(key: Any) -> bool:
    """None, a str, bytes, or an int a signed 64-bit int holds (a bool is an int)."""
    if isinstance(key, int):
        return -(2**63) <= key < 2**63
    return isinstance(key, (type(None), str, bytes))


def test_publisher_publish(publisher: Any, state: Any) -> None:
    def flushed() -> Any:
        publisher.flush()
        return state()

    values = st.sampled_from([None, UNPICKLABLE, ray.put(1)])
    keys = JUNK.filter(lambda k: not _valid_key(k))
    refuses(publisher.publish, values, flushed)
    refuses(lambda key: publisher.publish(1, key=key), keys, flushed)


def test_publisher_publish_batch(publisher: Any, state: Any) -> None:
    def flushed() -> Any:
        publisher.flush()
        return state()

    values = st.one_of(NOT_ITEMS, st.sampled_from([[1, None], [UNPICKLABLE], [ray.put(1)]]))
    keys = st.one_of(
        NOT_ITEMS.filter(lambda k: k is not None),
        st.sampled_from([["a"], ["a", "b", "c"], [1.5, 1]]),
    )
    refuses(publisher.publish_batch, values, flushed)
    refuses(lambda keys: publisher.publish_batch([1, 2], keys=keys), keys, flushed)


def test_delete_is_refused_on_a_plain_topic(publisher: Any, state: Any) -> None:
    def flushed() -> Any:
        publisher.flush()
        return state()

    refuses(publisher.delete, st.one_of(st.none(), st.text(max_size=4)), flushed)


def test_a_compacted_topic_refuses_a_value_without_a_key(
    compacted: rt.Topic, compacted_state: Any
) -> None:
    with compacted.publisher() as publisher:

        def flushed() -> Any:
            publisher.flush()
            return compacted_state()

        refuses(publisher.publish, st.integers(), flushed, examples=5)
        refuses(
            lambda keys: publisher.publish_batch([1, 2], keys=keys),
            st.sampled_from([None, [None, None], ["a", None]]),
            flushed,
        )
        refuses(publisher.delete, st.none(), flushed, examples=1)
        keys = JUNK.filter(lambda k: not _valid_key(k))
        refuses(publisher.delete, keys, flushed)
    ring = compacted.ringbuffer(0)  # a ring buffer add carries no key: the channel refuses it
    refuses(ring.add, st.integers(), compacted_state, examples=3)
    refuses(lambda items: ring.add_all(items), st.sampled_from([[1], [1, 2]]), compacted_state)
    with rt.transactions("bad-input-compacted", namespace=compacted.namespace) as holder:
        tx = holder.begin()
        refuses(lambda value: tx.publish(compacted, value), st.integers(), compacted_state)
        refuses(
            lambda keys: tx.publish_batch(compacted, [1, 2], keys=keys),
            st.sampled_from([None, ["a", None]]),
            compacted_state,
        )
        assert tx.commit() == rt.TransactionResult({}, [])  # nothing was staged
    rows = ray.data.from_arrow(pa.table({"k": ["a", None], "v": [1, 2]}))  # one block
    refuses(
        lambda key: raytopic.data.write_topic(rows, compacted, key=key),
        st.sampled_from([None, "k"]),  # no key column; a null key (its block: nothing sent)
        compacted_state,
        examples=2,
    )


def _ordering_that_raises(failure: BaseException) -> Callable[[Any], Any]:
    def ordering(value: Any) -> Any:
        raise failure

    return ordering


def test_an_ordering_that_raises_anything_is_a_typed_error_and_publishes_nothing(
    topic: rt.Topic, state: Any
) -> None:
    # Issue 47: SystemExit from the key function reached the caller as SystemExit.
    failures = st.sampled_from([SystemExit(4), KeyboardInterrupt(), GeneratorExit(), KeyError(1)])

    def publish(failure: BaseException) -> Any:
        with topic.publisher(ordering=_ordering_that_raises(failure)) as publisher:
            return publisher.publish(1)

    def publish_batch(failure: BaseException) -> Any:
        with topic.publisher(ordering=_ordering_that_raises(failure)) as publisher:
            return publisher.publish_batch([1, 2])

    refuses(publish, failures, state, examples=4)
    refuses(publish_batch, failures, state, examples=4)


def test_publisher_flush_and_close(topic: rt.Topic, publisher: Any) -> None:
    timeouts = bad_seconds(none=True, zero=True)
    refuses(publisher.flush, timeouts)
    refuses(lambda timeout: topic.publisher().close(timeout), timeouts)


def test_publisher_linger_that_would_kill_its_thread_is_refused(topic: rt.Topic) -> None:
    for linger in (float("inf"), 10**400, 2**63, MAX_LINGER_SECONDS * 2):
        with pytest.raises(rt.InvalidArgumentError, match="linger"):
            topic.publisher(linger=linger)


# -- Subscriber -----------------------------------------------------------------------------


def test_subscriber_receives(member: Any) -> None:
    refuses(member.receive_batch, bad_int(1))
    refuses(member.iter_batches, bad_int(1))


def test_subscriber_timeout_that_would_kill_its_heartbeat_is_refused(topic: rt.Topic) -> None:
    for timeout in (float("inf"), 10**400, MAX_SECONDS * 2):
        with pytest.raises(rt.InvalidArgumentError, match="timeout"):
            topic.subscriber(group="owned", timeout=timeout)


def test_subscriber_seeks(member: Any, state: Any) -> None:
    other_channel = rt.Position(member.topic.topic_id, 1, 0)
    targets = st.one_of(
        JUNK.filter(lambda v: not isinstance(v, datetime)),
        BAD_DATETIME,
        st.sampled_from([rt.Position("0ther", 0, 0), other_channel]),
    )
    refuses(lambda to: member.seek(0, to), targets, state)
    refuses(lambda to: member.seek_and_commit(0, to), targets, state)
    channels = bad_int(0, CHANNELS - 1)
    refuses(
        lambda channel: member.seek(channel, rt.Position(member.topic.topic_id, 0, 0)), channels
    )
    for seek in (member.seek_to_head, member.seek_to_tail, member.seek_to_tail_and_commit):
        refuses(seek, channels, state)


def test_subscriber_commits(member: Any, received: Any, state: Any) -> None:
    element = received["owned"][0]
    refuses(lambda channel: member.commit(channel, element.position), bad_int(0, CHANNELS - 1))
    positions = st.one_of(
        JUNK,
        st.sampled_from([rt.Position("0ther", element.channel, 0), str(element.position)]),
    )
    refuses(lambda position: member.commit(element.channel, position), positions, state)
    refuses(lambda position: member.commit_async(element.channel, position), positions, state)


def test_subscriber_positions(member: Any) -> None:
    refuses(member.remaining_messages, bad_int(0, CHANNELS - 1, none=True))
    refuses(
        member.is_owner, JUNK.filter(lambda v: not (isinstance(v, int) and not isinstance(v, bool)))
    )
    refuses(member.on_close, NOT_CALLABLE)


def test_subscriber_acknowledgements(shared_member: Any, received: Any, state: Any) -> None:
    elements = st.one_of(NOT_ITEMS, st.sampled_from([[1], list(received["owned"])]))
    refuses(shared_member.ack, elements, state)
    refuses(shared_member.ack_async, elements, state)
    refuses(shared_member.nack, elements, state)
    refuses(shared_member.extend_lease, elements, state)
    held = list(received["shared"])
    refuses(lambda delay: shared_member.nack(held, delay), bad_seconds(none=True, zero=True), state)
    refuses(lambda delay: shared_member.nack_async(held, delay), bad_seconds(none=True, zero=True))
    refuses(
        lambda seconds: shared_member.extend_lease(held, seconds), bad_seconds(none=True), state
    )


# -- Element and ElementBatch ---------------------------------------------------------------


def test_element_and_batch(received: Any, state: Any) -> None:
    shared, owned = received["shared"][0], received["owned"][0]
    refuses(shared.nack, bad_seconds(none=True, zero=True), state)
    refuses(shared.nack_async, bad_seconds(none=True, zero=True), state)
    refuses(shared.extend_lease, bad_seconds(none=True), state)
    refuses(rt.ElementBatch(received["shared"]).nack, bad_seconds(none=True, zero=True), state)
    before = state()
    with pytest.raises(rt.GroupModeError):
        shared.commit()
    with pytest.raises(rt.GroupModeError):
        owned.nack()
    with pytest.raises(rt.GroupModeError):
        owned.extend_lease()
    with pytest.raises(rt.InvalidTypeError):
        rt.ElementBatch([1, 2]).commit()
    with pytest.raises(rt.InvalidTypeError):
        rt.ElementBatch([1, 2]).ack()
    refuses(rt.ElementBatch, NOT_ITEMS)
    assert state() == before


# -- Ringbuffer -----------------------------------------------------------------------------


def test_ringbuffer_adds(topic: rt.Topic, state: Any) -> None:
    ring = topic.ringbuffer(0)
    refuses(ring.add, st.sampled_from([None, UNPICKLABLE, ray.put(1)]), state)
    refuses(
        lambda overflow: ring.add(1, overflow),
        JUNK.filter(lambda v: v not in ("overwrite", "fail", "block")),
        state,
    )
    refuses(lambda timeout: ring.add(1, "overwrite", timeout), bad_seconds(), state)
    refuses(lambda timeout: ring.add_async(1, "overwrite", timeout), bad_seconds(), state)
    items = st.one_of(NOT_ITEMS, st.sampled_from([[1, None], [UNPICKLABLE]]))
    refuses(ring.add_all, items, state)
    refuses(ring.add_all_async, items, state)


def test_ringbuffer_reads(topic: rt.Topic) -> None:
    ring = topic.ringbuffer(0)
    # Ints far past the tail (a read at tail + 1 would wait for an add).
    sequences = JUNK.filter(
        lambda v: not (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**40)
    )
    refuses(ring.read_one, sequences)
    refuses(lambda start: ring.read_many(start, 0, 1), sequences)
    refuses(lambda low: ring.read_many(0, low, 1), bad_int(0, 1))
    refuses(lambda high: ring.read_many(0, 0, high), bad_int(0, 1000))
    refuses(lambda function: ring.read_many(0, 0, 1, filter=function), BAD_FUNCTION)
    refuses(lambda function: ring.read_many_async(0, 0, 1, filter=function), BAD_FUNCTION)


# -- SharedGroup, Resequence, Resequencer ---------------------------------------------------

SHARED_GROUP = {
    "name": bad_name(),
    "max_deliveries": bad_int(1, none=True),
    "dead_letter": bad_name(none=True),
    "ack_timeout": bad_seconds(),
    "window": bad_int(1, none=True),
    "ordering": JUNK.filter(lambda v: v not in (None, "key")),
    "filter": st.one_of(
        NOT_CALLABLE.filter(lambda v: not isinstance(v, bytes)), st.just(UNPICKLABLE)
    ),
}


@pytest.mark.parametrize("argument", list(SHARED_GROUP))
def test_shared_group(argument: str) -> None:
    name = {} if argument == "name" else {"name": "g"}
    dead_letter = {"dead_letter": "dead"} if argument == "max_deliveries" else {}
    refuses(
        lambda value: rt.SharedGroup(**{**name, **dead_letter, argument: value}),
        SHARED_GROUP[argument],
    )


MILLISECONDS = int(MAX_SECONDS * 1000)

RESEQUENCER = {
    "name": JUNK.filter(lambda v: not (isinstance(v, str) and v)),
    "timeout_ms": bad_int(0, MILLISECONDS),
    "capacity": bad_int(0),
    "reap_interval_ms": bad_int(1, MILLISECONDS),
    "on_release": JUNK.filter(lambda v: not callable(v)),
    "on_gap": NOT_CALLABLE,
    "start": bad_int(-MAX_COUNT - 1, none=True),
}


@pytest.mark.parametrize("argument", list(RESEQUENCER))
def test_resequencer(argument: str) -> None:
    arguments = {"name": "r", "on_release": print}

    def make(value: Any) -> Any:
        resequencer = rt.Resequencer(**{**arguments, argument: value})
        resequencer.stop()
        return resequencer

    refuses(make, RESEQUENCER[argument])


def test_resequencer_accept_and_the_option() -> None:
    resequencer = rt.Resequencer("r", on_release=print)
    refuses(lambda seq: resequencer.accept(seq, "payload"), bad_int(-MAX_COUNT - 1))
    refuses(lambda cid: resequencer.accept(1, "payload", cid), st.sampled_from([[1], {}, {1}]))
    assert resequencer.stats.held == 0
    refuses(lambda seq: rt.Resequence(seq=seq), NOT_CALLABLE.filter(lambda v: v is not None))
    refuses(lambda ms: rt.Resequence(seq=len, timeout_ms=ms), bad_int(0, MILLISECONDS))
    refuses(lambda capacity: rt.Resequence(seq=len, capacity=capacity), bad_int(0))


def test_resequencer_intervals_that_would_kill_its_sweeper_are_refused() -> None:
    for interval in (2**63, 10**400, MILLISECONDS + 1):
        with pytest.raises(rt.InvalidArgumentError, match="reap_interval_ms"):
            rt.Resequencer("r", reap_interval_ms=interval, on_release=print)
        with pytest.raises(rt.InvalidArgumentError, match="timeout_ms"):
            rt.Resequence(seq=len, timeout_ms=interval)


def test_resequencer_actor_takes_only_what_pickles() -> None:
    refuses(lambda function: make_resequencer_actor("r", on_release=function), BAD_FUNCTION)
    refuses(lambda sink: make_resequencer_actor("r", sink=sink), st.just(_UnpicklableSink()))
    refuses(
        lambda ms: make_resequencer_actor("r", on_release=print, reap_interval_ms=ms),
        bad_int(1, MILLISECONDS),
    )


class _UnpicklableSink:
    def __init__(self) -> None:
        self.lock = threading.Lock()

    def publish(self, value: Any) -> None:
        pass


# -- transactions ---------------------------------------------------------------------------


def test_transactions(topic: rt.Topic) -> None:
    refuses(
        lambda tid: rt.transactions(tid, namespace=topic.namespace),
        JUNK.filter(lambda v: not (isinstance(v, str) and v)),
    )
    refuses(
        lambda namespace: rt.transactions("bad-input", namespace=namespace), bad_name(none=True)
    )
    refuses(
        lambda timeout: rt.transactions("bad-input", namespace=topic.namespace, timeout=timeout),
        bad_seconds(),
    )


def test_transaction_calls(topic: rt.Topic, received: Any, state: Any) -> None:
    with rt.transactions("bad-input", namespace=topic.namespace) as holder:
        tx = holder.begin()
        refuses(
            lambda target: tx.publish(target, 1), st.one_of(st.just(topic.name), NOT_ITEMS), state
        )
        refuses(
            lambda values: tx.publish_batch(topic, values),
            st.one_of(NOT_ITEMS, st.sampled_from([[None], [UNPICKLABLE]])),
            state,
        )
        refuses(
            lambda keys: tx.publish_batch(topic, [1, 2], keys=keys),
            st.one_of(
                NOT_ITEMS.filter(lambda k: k is not None), st.sampled_from([["a"], [1.5, 1]])
            ),
            state,
        )
        refuses(
            lambda key: tx.publish(topic, 1, key=key), st.sampled_from([1.5, [1], object()]), state
        )
        consumed = st.one_of(NOT_ITEMS, st.sampled_from([[1], list(received["shared"])]))
        refuses(tx.commit_consumed, consumed, state)
        assert tx.commit() == rt.TransactionResult({}, [])  # nothing was staged or recorded


# -- Ray Data and Spark ---------------------------------------------------------------------

NOT_A_TOPIC = st.one_of(NOT_ITEMS, st.just("a-topic-name"))


def test_data_read_topic(topic: rt.Topic) -> None:
    refuses(raytopic.data.read_topic, NOT_A_TOPIC)
    refuses(
        lambda channels: raytopic.data.read_topic(topic, channels=channels),
        st.one_of(
            NOT_ITEMS.filter(lambda v: v is not None), st.sampled_from([[], [CHANNELS], ["0"]])
        ),
    )
    bounds = st.one_of(
        JUNK.filter(lambda v: v not in ("earliest", "latest") and not isinstance(v, dict)),
        st.sampled_from([datetime(2020, 1, 1), {0: -1}, {0: 1.5}, {CHANNELS: 0}, {9: 0}]),
    )
    refuses(lambda start: raytopic.data.read_topic(topic, start=start), bounds)
    refuses(lambda end: raytopic.data.read_topic(topic, end=end), bounds)
    refuses(lambda group: raytopic.data.read_topic(topic, group=group), bad_name(none=True))
    refuses(lambda flag: raytopic.data.read_topic(topic, fail_on_data_loss=flag), NOT_BOOL)
    refuses(lambda poison: raytopic.data.read_topic(topic, on_poison=poison), ON_POISON_JUNK)


def test_data_stream(topic: rt.Topic, state: Any) -> None:
    # A group that does not exist: a stream let through would make it (the state says).
    def stream(**arguments: Any) -> Any:
        return raytopic.data.stream(topic, **{"group": "never-made", **arguments})

    refuses(lambda target: raytopic.data.stream(target, group="owned"), NOT_A_TOPIC, state)
    refuses(lambda group: stream(group=group), bad_name(), state)
    refuses(
        lambda trigger: stream(trigger=trigger),
        st.one_of(bad_seconds(), st.sampled_from(["available", "once", "1.0"])),
        state,
    )
    refuses(lambda rows: stream(max_rows_per_batch=rows), bad_int(1), state)
    refuses(
        lambda start: stream(start=start),
        st.one_of(JUNK, st.sampled_from([{0: 1}, datetime(2020, 1, 1)])).filter(
            lambda v: v not in ("earliest", "latest")
        ),
        state,
    )
    refuses(lambda flag: stream(fail_on_data_loss=flag), NOT_BOOL, state)
    refuses(lambda timeout: stream(timeout=timeout), bad_seconds(), state)
    refuses(lambda poison: stream(on_poison=poison), ON_POISON_JUNK, state)


def test_data_write_topic(topic: rt.Topic, state: Any) -> None:
    dataset = ray.data.range(3)
    refuses(
        lambda target: raytopic.data.write_topic(dataset, target), NOT_A_TOPIC, state, examples=10
    )
    refuses(lambda data: raytopic.data.write_topic(data, topic), NOT_ITEMS, state, examples=10)
    refuses(
        lambda key: raytopic.data.write_topic(dataset, topic, key=key),
        NOT_ITEMS.filter(lambda v: not (v is None or isinstance(v, str))),
        state,
        examples=10,
    )
    refuses(
        lambda timeout: raytopic.data.write_topic(dataset, topic, block_timeout=timeout),
        bad_seconds(none=True),
        state,
        examples=10,
    )
    before = state()
    with pytest.raises(rt.InvalidArgumentError, match="not a column") as refused:
        raytopic.data.write_topic(dataset, topic, key="nope")
    assert not isinstance(refused.value, ray.exceptions.RayTaskError)  # before any task ran
    assert state() == before


def test_spark_calls_check_their_topic_before_spark_runs(topic: rt.Topic) -> None:
    spark_bridge = pytest.importorskip("raytopic.spark")
    refuses(lambda target: spark_bridge.read_topic(None, target), NOT_A_TOPIC)
    refuses(lambda target: spark_bridge.publish_dataframe(target, None), NOT_A_TOPIC)
    refuses(lambda target: spark_bridge.sink(target), NOT_A_TOPIC)
    refuses(lambda timeout: spark_bridge.sink(topic, block_timeout=timeout), bad_seconds(none=True))
    refuses(lambda session: spark_bridge.read_topic(session, topic), NOT_ITEMS)
    refuses(lambda session: spark_bridge.stream(session, topic, group="never-made"), NOT_ITEMS)
