"""A call that is refused changes nothing (DESIGN 4: "bad input ... changes nothing").

Every public call that makes something in several steps (a subscriber that makes
its group, a topic with its channels, groups and dead-letter topics, a shared
group with its dead-letter topic, a group reset) is refused here with a typed
error, and the test checks that nothing was made or moved: the groups, the
channels' figures and cursors, the readers open on the channels, the topics.
On the shared topic (``retain=False``, ``overflow="fail"``) a group left behind
would pin every element, and publishing a full ring twice would then fail.

The usual way to be refused is a function the channels cannot load: one defined
in a module only the driver can import (cloudpickle pickles such a function by
reference, as its module and name; the channel actors run in other processes,
without that module on their path).
"""

from __future__ import annotations

import importlib
import sys
import threading
import uuid
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
import ray

import raytopic as rt
from raytopic.core.protocol import ReadGroupCursors, ReadReaderSpecs, ResetGroupPositions
from raytopic.core.user_functions import PickledFunction, load_pickled, pickle_function

from tests.topic_helpers import get, key_for, module_topic, publish_all

pytestmark = pytest.mark.xdist_group("test_refused_calls")  # one worker: one topic

CAPACITY = 4
"""Elements each channel of the shared topic holds: publishing 2 x CAPACITY per
channel fails if anything but its committing group keeps elements."""

NOT_LOADABLE = r"could not be loaded in the channel: ModuleNotFoundError: No module named"

topic = module_topic(channels=2, capacity=CAPACITY, overflow="fail", groups=["real"])


@pytest.fixture(scope="module")
def driver_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """A module of functions that only this driver can import: written to a temp
    dir put on this process's path alone."""
    folder = tmp_path_factory.mktemp("driver-only")
    name = f"driver_only_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").write_text(
        "def keep(value):\n    return True\n\n"
        "def same(value):\n    return value\n\n"
        "def step(value):\n    return value\n\n"
        "def factory(topic_name, channel):\n    raise AssertionError('never called')\n"
    )
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)


def _channel_can_import(topic: rt.Topic, module: str) -> bool:
    return get(
        topic._channel_actors[0].__ray_call__.remote(
            lambda _: importlib.util.find_spec(module) is not None
        )
    )


class _OnlyChannelZero:
    """A filter that only channel 0 of a topic can load (the others raise as it
    loads): a channel refuses what another one took."""

    def __call__(self, value: Any) -> bool:
        return True

    def __reduce__(self) -> tuple[Any, ...]:
        return (_loaded_only_on_channel_zero, ())


def _loaded_only_on_channel_zero() -> _OnlyChannelZero:
    actor = ray.get_runtime_context().get_actor_name() or ""
    if not actor.endswith(":0"):
        raise ImportError(f"not loadable in {actor}")
    return _OnlyChannelZero()


def _snapshot(topic: rt.Topic) -> dict[str, Any]:
    """What a refused call must leave as it was."""
    stats = topic.describe()
    channels = topic._channel_actors
    return {
        "groups": topic.groups(),
        "described": {
            name: (
                group.mode,
                group.generation,
                [member.member_id for member in group.members],
                [(c.next, c.committed, c.has_commit, c.owner) for c in group.channels],
            )
            for name, group in stats.groups.items()
        },
        "channels": [(c.head, c.tail, c.size, c.epoch) for c in stats.channels],
        "group cursors": [sorted(get(c.control.remote(ReadGroupCursors()))) for c in channels],
        "readers": [sorted(get(c.control.remote(ReadReaderSpecs()))) for c in channels],
    }


def _publishes_flow(topic: rt.Topic) -> None:
    """Once the group "real" committed all there is, the channels are empty; then a
    full ring per channel is published twice, "real" committing each round: both go
    through (a group left behind would keep the first round, and the second would
    fail with TopicFullError)."""
    with topic.subscriber(group="real", complete_on_empty=True) as member:
        _commit_all(member)
        for _ in range(2):
            assert [c.size for c in topic.describe().channels] == [0] * topic.channel_count
            publish_all(topic, list(range(CAPACITY * topic.channel_count)))
            assert _commit_all(member) == CAPACITY * topic.channel_count


def _commit_all(member: rt.Subscriber) -> int:
    """Receive everything there is and commit it; returns how many elements."""
    last: dict[int, rt.Element] = {}
    count = 0
    while batch := get(member.receive_batch(100)):
        last.update((element.channel, element) for element in batch)
        count += len(batch)
    for element in last.values():
        assert element.commit().status is rt.CommitStatus.COMMITTED
    return count


def test_a_function_is_pickled_and_loaded_with_errors_that_name_it() -> None:
    lock = threading.Lock()
    with pytest.raises(rt.InvalidTypeError, match=r"^converter could not be pickled.*lock"):
        pickle_function(lambda value, held=lock: value, "converter")
    pickled = pickle_function(abs, "converter")
    assert load_pickled(pickled, "converter") is abs
    with pytest.raises(rt.InvalidArgumentError, match=r"^filter could not be loaded.*pickle"):
        load_pickled(b"not a pickle", "filter")
    factory = PickledFunction.of(abs, "store factory")
    assert factory.load() is abs and repr(factory) == "PickledFunction(builtins.abs)"
    with pytest.raises(rt.InvalidArgumentError, match=r"^store factory builtins\.abs could not"):
        PickledFunction("builtins.abs", "store factory", b"not a pickle").load()


def test_the_driver_only_module_cannot_be_imported_by_the_channels(topic, driver_only):
    # What the tests below rely on: the module is ours alone.
    assert driver_only.keep(1) is True
    assert not _channel_can_import(topic, driver_only.__name__)
    assert _channel_can_import(topic, "raytopic")


# -- subscribers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"group": "ghost", "filter": "keep"}, "filter"),
        ({"group": "ghost", "converter": "same"}, "converter"),
        ({"group": "ghost", "resequence": "step"}, "resequence"),
        ({"filter": "keep"}, "filter"),
        ({"group": "ghost", "mode": "shared", "filter": "keep"}, "filter of shared group"),
        ({"group": "ghost", "mode": "shared", "converter": "same"}, "converter"),
        ({"shared group": "keep"}, "filter of shared group"),
        ({"shared group": None, "converter": "same"}, "converter"),
    ],
    ids=[
        "owned-filter",
        "owned-converter",
        "owned-resequence",
        "anonymous-filter",
        "shared-filter",
        "shared-converter",
        "shared-group-filter-with-dead-letters",
        "shared-group-converter-with-dead-letters",
    ],
)
def test_a_subscriber_whose_function_the_channels_cannot_load_makes_nothing(
    topic, driver_only, unique_name, options: dict[str, Any], argument: str
):
    dead_letters = unique_name("ghost-dead")
    kwargs: dict[str, Any] = {}
    for option, value in options.items():
        if option in ("group", "mode"):
            kwargs[option] = value
            continue
        function = None if value is None else getattr(driver_only, value)
        if option == "shared group":
            kwargs["group"] = rt.SharedGroup(
                "ghost", max_deliveries=2, dead_letter=dead_letters, filter=function
            )
        elif option == "resequence":
            kwargs["resequence"] = rt.Resequence(seq=function)
        else:
            kwargs[option] = function
    before = _snapshot(topic)
    with pytest.raises(rt.InvalidArgumentError, match=f"{argument}.* {NOT_LOADABLE}") as refused:
        topic.subscriber(**kwargs)
    assert driver_only.__name__ in str(refused.value)
    assert type(refused.value) is rt.InvalidArgumentError  # itself, not in Ray's wrapper
    assert _snapshot(topic) == before
    assert dead_letters not in rt.list_topics()
    _publishes_flow(topic)


def test_joining_an_existing_group_with_such_a_function_changes_nothing(
    topic, driver_only, unique_name
):
    group = unique_name("existing")
    topic.create_group(group)
    try:
        with topic.subscriber(group=group) as member:
            before = _snapshot(topic)
            with pytest.raises(rt.InvalidArgumentError, match=f"^filter {NOT_LOADABLE}"):
                topic.subscriber(group=group, filter=driver_only.keep)
            with pytest.raises(rt.InvalidArgumentError, match=f"^converter {NOT_LOADABLE}"):
                topic.subscriber(group=group, mode="owned", converter=driver_only.same)
            assert _snapshot(topic) == before
            assert member.channels == (0, 1)  # no rebalance: nobody joined
    finally:
        topic.destroy_group(group)
    _publishes_flow(topic)


@pytest.mark.parametrize(
    "options",
    [
        {"group": "ghost"},
        {},
        {"group": "ghost", "mode": "shared"},
    ],
    ids=["owned", "anonymous", "shared"],
)
def test_what_one_channel_took_is_undone_when_another_refuses(topic, options):
    # Channel 0 loads the filter and opens the reader (and makes the group); channel 1
    # cannot: channel 0 drops them again.
    before = _snapshot(topic)
    with pytest.raises(rt.InvalidArgumentError, match=r"filter.*could not be loaded.*ImportError"):
        topic.subscriber(filter=_OnlyChannelZero(), **options)
    assert _snapshot(topic) == before
    _publishes_flow(topic)


@pytest.mark.parametrize(
    "options",
    [{"group": "ghost"}, {}, {"group": "ghost", "mode": "shared"}],
    ids=["owned", "anonymous", "shared"],
)
def test_a_function_that_cannot_be_pickled_is_refused_before_anything(topic, options):
    lock = threading.Lock()
    before = _snapshot(topic)
    for argument in ("filter", "converter"):
        with pytest.raises(rt.InvalidTypeError, match=f"^{argument} could not be pickled.*lock"):
            topic.subscriber(**options, **{argument: lambda value, held=lock: held is not None})
    if options.get("mode") != "shared":
        with pytest.raises(rt.InvalidTypeError, match=r"^resequence could not be pickled.*lock"):
            topic.subscriber(**options, resequence=rt.Resequence(seq=lambda v, held=lock: v))
    assert _snapshot(topic) == before


def test_a_ring_buffer_read_with_such_a_filter_is_refused(topic, driver_only):
    (status,) = publish_all(topic, ["kept"], key=key_for(0, topic.channel_count))
    ring, sequence = topic.ringbuffer(0), status.position.sequence
    with pytest.raises(rt.InvalidArgumentError, match=f"^filter {NOT_LOADABLE}"):
        ring.read_many(sequence, 0, 1, driver_only.keep)
    with pytest.raises(rt.InvalidArgumentError, match=f"filter {NOT_LOADABLE}"):
        get(ring.read_many_async(sequence, 0, 1, driver_only.keep))
    assert list(ring.read_many(sequence, 1, 1)) == ["kept"]
    _publishes_flow(topic)


# -- groups made by the topic ------------------------------------------------------------


def test_create_group_that_is_refused_makes_no_group_and_no_dead_letter_topic(
    topic, driver_only, unique_name
):
    owned, dead_letters = unique_name("owned"), unique_name("dead")
    topic.create_group(owned)
    try:
        before = _snapshot(topic)
        # The group exists in the other mode.
        over_owned = rt.SharedGroup(owned, max_deliveries=2, dead_letter=dead_letters)
        with pytest.raises(rt.GroupModeError):
            topic.create_group(over_owned)
        with pytest.raises(rt.GroupModeError):
            topic.subscriber(group=over_owned)
        # Its filter cannot be loaded: in every channel, or only in channel 0.
        for refused in (driver_only.keep, _OnlyChannelZero()):
            shared = rt.SharedGroup(
                "ghost", max_deliveries=2, dead_letter=dead_letters, filter=refused
            )
            with pytest.raises(rt.InvalidArgumentError, match=r"^the filter of shared group 'g"):
                topic.create_group(shared)
        assert _snapshot(topic) == before
        assert dead_letters not in rt.list_topics()
    finally:
        topic.destroy_group(owned)
    _publishes_flow(topic)


# -- resets -------------------------------------------------------------------------------


def test_a_refused_reset_moves_no_channel(topic, unique_name):
    group = unique_name("reset")
    topic.create_group(group)
    try:
        publish_all(topic, list(range(2 * topic.channel_count)))
        topic.reset_group(group, "latest")
        before = _snapshot(topic)
        earliest = topic.position(0, -1)
        for target, error in [
            # Channel 0's target is good; channel 1's is refused: channel 0 does not move.
            ({0: earliest, 1: topic.position(0, -1)}, rt.PositionMismatchError),
            ({0: earliest, 1: rt.Position("0123456789abcdef", 1, -1)}, rt.PositionMismatchError),
            ({0: earliest, 2: topic.position(0, -1)}, rt.InvalidArgumentError),
            ({0: earliest, 1: -1}, rt.InvalidTypeError),
        ]:
            with pytest.raises(error):
                topic.reset_group(group, target)
        with pytest.raises(rt.GroupNotFoundError):
            topic.reset_group(unique_name("nobody"), "earliest")
        # Channel 0 moves, then channel 1 fails (a target no handle sends): channel 0
        # moves back.
        with pytest.raises(rt.TopicError, match="nothing changed"):
            get(topic._coordinator.request.remote(ResetGroupPositions(group, {0: -1, 1: "bogus"})))
        assert _snapshot(topic) == before
    finally:
        topic.destroy_group(group)
    _publishes_flow(topic)


def test_the_coordinator_refuses_what_is_not_its_request(topic):
    # Its one entry takes typed requests: anything else is a typed error, and the
    # coordinator goes on serving.
    for wrong in (ReadGroupCursors(), ("reset_group", "g"), None):
        with pytest.raises(rt.InvalidArgumentError, match="not a coordinator request"):
            get(topic._coordinator.request.remote(wrong))
    _publishes_flow(topic)


# -- topics -------------------------------------------------------------------------------


def _no_topic_named(name: str) -> None:
    assert name not in rt.list_topics()
    with pytest.raises(rt.TopicNotFoundError):
        rt.get_topic(name)
    actors = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    assert not [actor for actor in actors if f":{name}" in actor], actors


def test_create_topic_that_is_refused_leaves_no_topic(ray_session, driver_only, unique_name):
    lock = threading.Lock()
    name, dead_letters = unique_name("refused"), unique_name("refused-dead")
    shared = rt.SharedGroup(
        "g", max_deliveries=2, dead_letter=dead_letters, filter=driver_only.keep
    )
    for kwargs, error, says in [
        # Refused before any actor exists.
        ({"groups": ["g", "bad name"]}, rt.InvalidArgumentError, "group name"),
        (
            {"store": lambda topic_name, channel, held=lock: None},
            rt.InvalidTypeError,
            r"^store factory could not be pickled.*lock",
        ),
        # Refused by the channels as they start: the actors made go again.
        (
            {"store": driver_only.factory},
            rt.InvalidArgumentError,
            f"^store factory {driver_only.__name__}.factory {NOT_LOADABLE}",
        ),
        ({"groups": ["owned", shared]}, rt.InvalidArgumentError, f"^the filter .*{NOT_LOADABLE}"),
    ]:
        with pytest.raises(error, match=says):
            rt.create_topic(name, channels=1, **kwargs)
        _no_topic_named(name)
        _no_topic_named(dead_letters)
