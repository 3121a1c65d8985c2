"""Poison elements against a real Ray: an element a consumer cannot decode, or on which
a user function raises, costs only itself. The receive that meets it delivers what came
before it, then one PoisonElementError names it; the reader stays before it (remaining,
lag) until it seeks past it; ``on_poison="skip"`` passes over it; a shared group nacks
it to its dead letters; a resequence key that raises releases it unordered."""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import ray

import raytopic as rt
import raytopic.data as rd

from tests.topic_helpers import (
    get,
    group_at_latest,
    key_for,
    module_topic,
    next_sequences,
    publish_all,
)

topic = module_topic(channels=3)


@contextmanager
def vanishing_class(folder: Path) -> Iterator[type]:
    """A class of a module only this process has, and only inside the block: its
    values, published inside, cannot be decoded after it (a consumer's version skew)."""
    name = f"skewed_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").write_text(
        "class Thing:\n    def __init__(self, n):\n        self.n = n\n"
    )
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(name).Thing
    finally:
        sys.path.remove(str(folder))
        del sys.modules[name]
        (folder / f"{name}.py").unlink()


def explode_on_three(value: dict[str, int]) -> bool:
    """A filter with a bug: it raises on n == 3."""
    return 1 / (value["n"] - 3) != 0


def explode_on_seven(value: dict[str, int]) -> dict[str, int]:
    """A converter with a bug: it raises on n == 7."""
    return {"n": value["n"], "inverse": 1 / (value["n"] - 7)}


def exits_on_three(value: dict[str, int]) -> bool:
    """A filter that ends its process on n == 3 (as the bad-input run's did)."""
    if value["n"] == 3:
        raise SystemExit(3)
    return True


def exits_on_three_seq(value: dict[str, int]) -> int:
    """A resequence key that raises SystemExit on n == 3."""
    exits_on_three(value)
    return value["n"]


def interrupts_on_five(value: dict[str, int]) -> dict[str, int]:
    """A converter that raises KeyboardInterrupt on n == 5."""
    if value["n"] == 5:
        raise KeyboardInterrupt
    return value


def numbers(elements: Any) -> list[int]:
    return [element.value["n"] for element in elements]


def published_with_a_poison(topic: rt.Topic, folder: Path, channel: int = 0) -> None:
    """{"n": 0}, an undecodable value, then {"n": 1..5}, all to ``channel``."""
    key = key_for(channel, topic.channel_count)
    with vanishing_class(folder) as thing:
        values = [{"n": 0}, thing(9), *({"n": n} for n in range(1, 6))]
        publish_all(topic, values, key=key)


def test_an_undecodable_element_costs_only_itself_and_is_told_once(
    topic: rt.Topic, unique_name: Any, tmp_path: Path
) -> None:
    group = unique_name("g")
    group_at_latest(topic, group)
    start = next_sequences(topic)[0]
    published_with_a_poison(topic, tmp_path)
    with topic.subscriber(group=group) as member:
        first = get(member.receive_batch(100))
        assert numbers(first) == [0]  # what came before it
        with pytest.raises(rt.PoisonElementError) as told:
            get(member.receive_batch(100))
        poison = told.value
        assert (poison.channel, poison.position.sequence) == (0, start + 1)
        assert poison.cause_type == "ModuleNotFoundError" and "skewed_" in poison.cause_message
        assert isinstance(poison, rt.TopicError)
        # Not delivered: still remaining, still lagging, however the group commits.
        first.commit()
        assert member.remaining_messages() == 6
        assert topic.describe().groups[group].channels[0].lag == 6
        # Told once: the channel holds nothing more for it, no error on every receive.
        waiting = member.receive_batch(100)
        assert ray.wait([waiting], timeout=1.0)[0] == []
        # Skipped deliberately: the waiting receive goes on after it.
        assert member.seek(0, poison.position) == poison.position
        rest = get(waiting)
        assert numbers(rest) == [1, 2, 3, 4, 5]
        rest.commit()
        assert topic.describe().groups[group].channels[0].lag == 0


def test_an_iteration_delivers_every_other_element_and_stops_once_at_the_poison(
    topic: rt.Topic, tmp_path: Path
) -> None:
    with topic.subscriber(start="latest", complete_on_empty=True) as reader:
        publish_all(topic, [{"n": n} for n in range(100, 130)])  # every channel
        published_with_a_poison(topic, tmp_path, channel=1)
        got: list[int] = []
        told = []
        while True:
            try:
                for batch in reader.iter_batches(7):
                    got.extend(numbers(batch))
                break
            except rt.PoisonElementError as poison:
                told.append(poison)
                reader.seek(poison.channel, poison.position)  # skip it, read on
        # (What was read, in the message: it failed when a receive sent after the poison
        # was reported got served before the report, see wait_for_poison_reports.)
        assert len(told) == 1 and told[0].channel == 1, (told, sorted(got))
        assert sorted(got) == [0, 1, 2, 3, 4, 5, *range(100, 130)]  # none lost, none twice


def test_a_skipping_reader_passes_over_what_it_cannot_decode(
    topic: rt.Topic, tmp_path: Path
) -> None:
    with topic.subscriber(start="latest", complete_on_empty=True, on_poison="skip") as reader:
        published_with_a_poison(topic, tmp_path, channel=2)
        assert numbers(reader) == [0, 1, 2, 3, 4, 5]


def test_a_filter_or_converter_that_raises_is_told_once_per_element(
    topic: rt.Topic, unique_name: Any
) -> None:
    group = unique_name("g")
    group_at_latest(topic, group)
    start = next_sequences(topic)[0]
    publish_all(topic, [{"n": n} for n in range(10)], key=key_for(0, 3))
    with topic.subscriber(
        group=group, filter=explode_on_three, converter=explode_on_seven
    ) as member:
        assert numbers(get(member.receive_batch(100))) == [0, 1, 2]
        with pytest.raises(rt.PoisonElementError) as told:
            get(member.receive_batch(100))
        assert told.value.cause_type == "ZeroDivisionError"
        assert told.value.position.sequence == start + 3
        waiting = member.receive_batch(100)
        assert ray.wait([waiting], timeout=1.0)[0] == []  # once, not on every receive
        member.seek(0, told.value.position)
        assert numbers(get(waiting)) == [4, 5, 6]  # up to the converter's poison
        with pytest.raises(rt.PoisonElementError) as converted:
            get(member.receive_batch(100))
        assert converted.value.position.sequence == start + 7
        member.seek(0, converted.value.position)
        assert numbers(get(member.receive_batch(100))) == [8, 9]
    with topic.subscriber(
        start="earliest", filter=explode_on_three, on_poison="skip", complete_on_empty=True
    ) as skipping:
        skipped = [n for n in numbers(skipping) if n < 10]
    assert skipped.count(3) == 0 and skipped.count(4) >= 1


def test_a_filter_or_converter_raising_systemexit_is_poison_and_the_channel_lives_on(
    topic: rt.Topic, unique_name: Any
) -> None:
    # Issue 47: SystemExit from a filter ended the channel's process (exit code 3),
    # which restarted without a store and lost every element it held.
    group = unique_name("g")
    group_at_latest(topic, group)
    start, epoch = next_sequences(topic)[0], topic.describe().channels[0].epoch
    publish_all(topic, [{"n": n} for n in range(8)], key=key_for(0, 3))
    with topic.subscriber(group=group, filter=exits_on_three, converter=interrupts_on_five) as m:
        assert numbers(get(m.receive_batch(100))) == [0, 1, 2]
        with pytest.raises(rt.PoisonElementError) as exited:
            get(m.receive_batch(100))
        assert (exited.value.cause_type, exited.value.position.sequence) == (
            "SystemExit",
            start + 3,
        )
        m.seek(0, exited.value.position)
        assert numbers(get(m.receive_batch(100))) == [4]
        with pytest.raises(rt.PoisonElementError) as interrupted:
            get(m.receive_batch(100))
        assert interrupted.value.cause_type == "KeyboardInterrupt"
        m.seek(0, interrupted.value.position)
        assert numbers(get(m.receive_batch(100))) == [6, 7]
    assert topic.describe().channels[0].epoch == epoch  # its process never ended


def test_a_bulk_read_names_what_its_task_cannot_decode_and_reads_around_it_on_skip(
    make_topic: Any, tmp_path: Path
) -> None:
    # Issue 47: the read task failed with the raw decode error (ModuleNotFoundError).
    topic = make_topic(channels=1, retain=True)
    published_with_a_poison(topic, tmp_path)  # {"n": 0}, a poison, {"n": 1..5} at 0..6
    with pytest.raises(rt.PoisonElementError) as told:
        rd.read_topic(topic).take_all()
    poison = told.value
    assert (poison.channel, poison.position.sequence) == (0, 1)
    assert poison.cause_type == "ModuleNotFoundError" and "on_poison='skip'" in str(poison)
    rows = rd.read_topic(topic, on_poison="skip").take_all()
    assert [(row["n"], row["position"]) for row in rows] == [
        (0, 0),
        *((n, n + 1) for n in range(1, 6)),
    ]
    # A stream's batch the same; one that raised is not committed.
    with rd.stream(topic, group="g") as stream, pytest.raises(rt.PoisonElementError):
        next(stream).dataset.take_all()
    with rd.stream(topic, group="g", on_poison="skip") as stream:
        batch = next(stream)
        assert batch.batch_id == 0
        assert [row["n"] for row in batch.dataset.take_all()] == [0, 1, 2, 3, 4, 5]
    # Read ahead (while the batch before is in hand): the same, once the batch is used.
    with rd.stream(topic, group="ahead", max_rows_per_batch=1) as stream:
        assert [row["n"] for row in next(stream).dataset.take_all()] == [0]
        with pytest.raises(rt.PoisonElementError):
            next(stream).dataset.take_all()


_READ_A_POISON = """
import importlib, os, sys, uuid
import raytopic as rt, raytopic.data as rd
topic = rt.create_topic(f"poison-print-{uuid.uuid4().hex[:8]}", channels=1)
name = f"skewed_{uuid.uuid4().hex[:8]}"
with open(f"{name}.py", "w") as module:
    module.write("class Thing:\\n    pass\\n")
sys.path.insert(0, os.getcwd())
with topic.publisher() as publisher:
    publisher.publish(1)
    publisher.publish(importlib.import_module(name).Thing())
os.unlink(f"{name}.py")
try:
    rd.read_topic(topic).take_all()
except rt.PoisonElementError as poison:
    print("told", poison.channel, poison.position.sequence)
finally:
    topic.destroy()
"""


def test_a_bulk_read_s_poison_is_one_line_of_ray_data_not_its_traceback(
    script_runner: Any, tmp_path: Path
) -> None:
    # Ray Data printed its executor's traceback and "Exception occurred in Ray Data or
    # Ray Core internal code ... open an issue" (~70 lines) before the typed error.
    run = script_runner.run(code=_READ_A_POISON, cwd=tmp_path, timeout=240)
    assert run.returncode == 0 and run.stdout == "told 0 1\n", (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr and "internal code" not in run.stderr, run.stderr


class ExitsWhenLoaded:
    """Pickles, and raises SystemExit where it is loaded (its ``__reduce__`` names
    ``sys.exit``)."""

    def __reduce__(self) -> tuple[object, tuple[int]]:
        return sys.exit, (5,)


def test_an_element_whose_loading_raises_systemexit_is_a_poison_element(make_topic: Any) -> None:
    # Found by trial65: the receive raised SystemExit itself (on_poison="skip" too), and
    # read_topic's task ended its worker (the read hung).
    topic = make_topic(channels=1, retain=True)
    publish_all(topic, [1, ExitsWhenLoaded(), 3])
    with topic.subscriber(start="earliest", complete_on_empty=True) as reader:
        assert get(reader.receive_batch(10)).values == [1]
        with pytest.raises(rt.PoisonElementError) as told:
            get(reader.receive_batch(10))
        assert (told.value.cause_type, told.value.position.sequence) == ("SystemExit", 1)
        reader.seek(0, told.value.position)
        assert get(reader.receive_batch(10)).values == [3]
    with topic.subscriber(start="earliest", complete_on_empty=True, on_poison="skip") as reader:
        assert [element.value for element in reader] == [1, 3]
    with pytest.raises(rt.PoisonElementError, match="SystemExit"):
        rd.read_topic(topic).take_all()
    assert [row["value"] for row in rd.read_topic(topic, on_poison="skip").take_all()] == [1, 3]


def test_a_shared_group_nacks_what_it_cannot_decode_to_its_dead_letters(
    topic: rt.Topic, unique_name: Any, tmp_path: Path, wait_until: Any
) -> None:
    group, dead_name = unique_name("g"), unique_name("dead")
    group_at_latest(topic, rt.SharedGroup(group, max_deliveries=2, dead_letter=dead_name))
    try:
        with topic.subscriber(group=group, mode="shared", complete_on_empty=True) as member:
            published_with_a_poison(topic, tmp_path)
            got: list[int] = []
            while len(got) < 6:
                batch = get(member.receive_batch(100))
                got.extend(numbers(batch))
                batch.ack()
            assert sorted(got) == [0, 1, 2, 3, 4, 5]

            # Nacked on each delivery (it decodes to nothing here): after two, a dead letter.
            def dead_lettered() -> bool:
                assert get(member.receive_batch(100)) == []
                return topic.describe().groups[group].dead_lettered == 1

            wait_until(dead_lettered, timeout=30)
    finally:
        rt.get_topic(dead_name, namespace=topic.namespace).destroy()


def test_a_resequence_key_that_raises_releases_its_element_unordered(
    topic: rt.Topic, unique_name: Any
) -> None:
    group = unique_name("g")
    group_at_latest(topic, group)
    order = rt.Resequence(seq=lambda v: 12 // (v["n"] - 6) and v["n"], timeout_ms=200, start=0)
    publish_all(topic, [{"n": n} for n in range(13)], key=key_for(0, 3))
    with topic.subscriber(group=group, resequence=order, complete_on_empty=True) as member:
        got = numbers(member)
    assert sorted(got) == list(range(13))  # none lost; 6 came unordered
    # One that ends its process (SystemExit) costs its element's order alone too.
    again = unique_name("g")
    group_at_latest(topic, again)
    exiting = rt.Resequence(seq=exits_on_three_seq, timeout_ms=200, start=0)
    publish_all(topic, [{"n": n} for n in range(6)], key=key_for(0, 3))
    with topic.subscriber(group=again, resequence=exiting, complete_on_empty=True) as member:
        assert sorted(numbers(member)) == list(range(6))


def test_a_ring_read_stops_before_what_its_filter_raises_on_or_cannot_decode(
    topic: rt.Topic, tmp_path: Path
) -> None:
    ring = topic.ringbuffer(0)
    start = ring.tail_sequence() + 1
    publish_all(topic, [{"n": n} for n in range(6)], key=key_for(0, 3))
    read = ring.read_many(start, 1, 10, filter=explode_on_three)
    assert numbers_of(read) == [0, 1, 2] and read.next_sequence_to_read_from == start + 3
    with pytest.raises(rt.PoisonElementError) as told:
        ring.read_many(start + 3, 1, 10, filter=explode_on_three)
    assert told.value.position.sequence == start + 3
    assert numbers_of(ring.read_many(start + 4, 1, 10, filter=explode_on_three)) == [4, 5]
    published_with_a_poison(topic, tmp_path)
    with pytest.raises(rt.PoisonElementError):
        ring.read_one(start + 7)
    undecodable = ring.read_many(start + 6, 1, 10)
    assert numbers_of(undecodable) == [0] and undecodable.next_sequence_to_read_from == start + 7


def numbers_of(items: Any) -> list[int]:
    return [item["n"] for item in items]
