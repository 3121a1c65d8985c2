"""Ray Data in and out of topics against a real Ray: ``raytopic.data``."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
import ray
from ray.data._internal.logging import get_log_directory
from ray.util.debug import log_once, reset_log_once

import raytopic as rt
import raytopic.data as rd
from raytopic.client.bulk import BulkWriter
from raytopic.client.routing import channel_for_key

from tests.topic_helpers import drain_group, get, group_at_latest, module_topic, next_sequences

# Under pytest -n (xdist), every test of this module runs in one worker, which makes
# its module-scoped topics once: the Spark tests' worker, because the quiet write's test
# holds the CPUs it counts free beside Spark's executor (long-lived; only test_spark
# starts one). In another worker, an executor started after that count left the
# write's tasks no CPU, and both workers hung in Ray Data's from_arrow (a full run on
# b5f35a5: 15 min, until killed).
pytestmark = pytest.mark.xdist_group("spark")

# A 2-channel topic for the tests that read only what they wrote themselves: from
# the sequences it had when they started, or through a group made then. Shared to
# save actors; it retains, as the reads test's own topic did.
shared_topic = module_topic(channels=2, retain=True)
# A 1-channel one for the tests that read one channel's order (or none): shared too.
one_channel_topic = module_topic(channels=1)
# A 1-channel topic that nothing is appended to, shared by the tests that only read
# it or fail to write to it (each checks it is still empty).
empty_topic = module_topic(channels=1)


def _orders(count: int) -> ray.data.Dataset:
    return ray.data.from_arrow(
        pa.table(
            {
                "id": list(range(count)),
                "customer": [f"c{i % 7}" for i in range(count)],
                "amount": [i * 0.25 for i in range(count)],
            }
        )
    )


def _table(dataset: ray.data.Dataset) -> pa.Table:
    blocks = [ray.get(ref) for ref in dataset.to_arrow_refs()]
    return pa.concat_tables(blocks, promote_options="permissive")


def test_a_dataset_round_trips_through_a_topic_one_position_per_row(
    shared_topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    topic = shared_topic  # shared: it reads from where it began, and through a group made then
    group = unique_name("g")
    group_at_latest(topic, group)
    base = next_sequences(topic)
    summary = rd.write_topic(_orders(2000), topic, key="customer")
    assert summary.rows == 2000
    assert sum(summary.rows_per_channel.values()) == 2000
    assert summary.bytes > 0 and summary.seconds > 0

    back = _table(rd.read_topic(topic, start=base))
    assert back.column_names == [
        "id",
        "customer",
        "amount",
        "key",
        "channel",
        "position",
        "timestamp",
    ]
    assert back.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    rows = sorted(back.to_pylist(), key=lambda row: row["id"])
    assert [(r["id"], r["customer"], r["amount"]) for r in rows] == [
        (i, f"c{i % 7}", i * 0.25) for i in range(2000)
    ]
    for row in rows:  # routed as publish(row, key=row["customer"]) routes, and keyed so
        assert row["channel"] == channel_for_key(row["customer"], topic.channel_count)
        assert row["key"] == row["customer"]
    for channel, count in summary.rows_per_channel.items():
        positions = sorted(r["position"] for r in rows if r["channel"] == channel)
        assert positions == list(range(base[channel], base[channel] + count))  # consecutive

    elements = drain_group(topic, group, 2000)  # ordinary subscribers get dicts
    assert len(elements) == 2000
    assert elements[0].value.keys() == {"id", "customer", "amount"}
    assert all(element.key == element.value["customer"] for element in elements)


def test_rows_without_a_key_go_round_robin_row_by_row(shared_topic: rt.Topic) -> None:
    topic = shared_topic  # shared: what it checks is the write's own summary
    summary = rd.write_topic(ray.data.range(8).repartition(1), topic)  # one block
    assert summary.rows_per_channel == {0: 4, 1: 4}


def test_reads_mix_dicts_other_values_and_arrow_rows_and_keep_types(
    one_channel_topic: rt.Topic,
) -> None:
    topic = one_channel_topic  # shared: it reads from the sequence it began at
    first = next_sequences(topic)[0]
    moment = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    nested = pa.table(
        {
            "when": pa.array([moment]),
            "point": pa.array([{"x": 1, "y": None}]),
            "tags": pa.array([["a", "b"]]),
            "note": pa.array([None], pa.string()),
        }
    )
    rd.write_topic(ray.data.from_arrow(nested), topic)
    with topic.publisher() as publisher:
        publisher.publish({"when": moment, "note": "dict"}).result()
        publisher.publish(42).result()
    read = rd.read_topic(topic, start={0: first})
    rows = sorted(_table(read).to_pylist(), key=lambda row: row["position"])
    assert rows[0]["point"] == {"x": 1, "y": None}
    assert rows[0]["tags"] == ["a", "b"]
    assert rows[0]["when"] == moment and rows[0]["note"] is None
    assert rows[1]["note"] == "dict" and rows[1]["when"] == moment
    assert rows[2]["value"] == 42
    assert [row["position"] for row in rows] == [first, first + 1, first + 2]


def test_an_empty_topic_reads_as_an_empty_dataset(empty_topic: rt.Topic) -> None:
    topic = empty_topic
    empty = rd.read_topic(topic)
    assert empty.count() == 0
    assert empty.schema().names == ["key", "channel", "position", "timestamp"]
    assert rd.write_topic(ray.data.from_items([]), topic).rows == 0


def test_a_topic_whose_group_committed_everything_reads_empty_with_its_columns(
    make_topic: Callable[..., rt.Topic],
) -> None:
    # retain=False removes what every group committed; before, the read had only
    # key/channel/position/timestamp and sum("amount") failed far from the cause.
    topic = make_topic(channels=2, groups=["g"], retain=False)
    rd.write_topic(_orders(6), topic)  # Arrow rows
    with topic.publisher() as publisher:
        publisher.publish({"id": 6, "customer": "c6", "amount": 1.5})  # a dict
    with topic.subscriber(group="g", complete_on_empty=True) as member:
        for batch in member.iter_batches(100):
            batch.commit()
    assert topic.describe().groups["g"].lag == 0
    assert all(channel.size == 0 for channel in topic.describe().channels)  # removed
    for dataset in (rd.read_topic(topic), rd.read_topic(topic, channels=[0, 1])):
        assert dataset.count() == 0
        names = dataset.schema().names
        assert {"id", "customer", "amount", "channel", "position"} <= set(names)
        assert dataset.sum("amount") is None  # no rows, but the column is there


def test_reads_take_channels_start_end_and_a_groups_uncommitted_rows(
    shared_topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    # Shared: its sequences count from where it began, its group is made then.
    topic = shared_topic
    group = unique_name("g")
    group_at_latest(topic, group)
    base = next_sequences(topic)
    rd.write_topic(ray.data.range(100).repartition(1), topic)  # 50 per channel
    assert rd.read_topic(topic, channels=[1], start=base).count() == 50
    assert rd.read_topic(topic, start={0: base[0] + 40, 1: base[1] + 45}).count() == 10 + 5
    ten = rd.read_topic(topic, start={0: base[0] + 10}, end={0: base[0] + 20}, channels=[0])
    assert ten.count() == 10
    assert rd.read_topic(topic, start="latest").count() == 0
    after = datetime.now(UTC) + timedelta(seconds=1)
    assert rd.read_topic(topic, start=after).count() == 0
    assert rd.read_topic(topic, start=base, end=after).count() == 100

    with topic.subscriber(group=group) as member:
        mine: list[rt.Element] = []
        while len(mine) < 30:
            mine += [e for e in get(member.receive_batch(1000)) if e.channel == 0]
        assert member.commit(0, mine[29].position).status is rt.CommitStatus.COMMITTED
    unconsumed = rd.read_topic(topic, group=group)
    assert unconsumed.count() == 100 - 30
    assert rd.read_topic(topic, group=group).count() == 70  # reading committed nothing


def test_a_writer_run_again_with_its_id_appends_nothing_twice(
    shared_topic: rt.Topic, unique_name: Callable[[str], str]
) -> None:
    topic = shared_topic  # shared: it counts what was appended from where it began
    base = next_sequences(topic)
    table = pa.table({"id": list(range(10)), "k": [str(i) for i in range(10)]})
    writer_id = f"data:{unique_name('run')}:0"  # no other writer of this topic has it
    for _ in range(2):  # as a retried task would
        writer = BulkWriter(topic, writer_id, key="k")
        writer.write(table)
        writer.close()
    assert rd.read_topic(topic, start=base).count() == 10


def test_bad_inputs_get_typed_errors_and_change_nothing(empty_topic: rt.Topic) -> None:
    topic = empty_topic
    floats = ray.data.from_arrow(pa.table({"k": [1.5, 2.5]}))
    with pytest.raises(rt.InvalidTypeError, match="key column") as refused:
        rd.write_topic(floats, topic, key="k")  # found by the write tasks
    assert type(refused.value) is rt.InvalidTypeError  # raytopic's own, not a RayTaskError
    with pytest.raises(rt.InvalidArgumentError, match="not a column"):
        rd.write_topic(_orders(3), topic, key="nope")
    with pytest.raises(rt.InvalidTypeError):
        rd.write_topic([1, 2], topic)  # type: ignore[arg-type]
    with pytest.raises(rt.GroupNotFoundError):
        rd.read_topic(topic, group="missing")
    with pytest.raises(rt.InvalidArgumentError):
        rd.read_topic(topic, start="soon")
    with pytest.raises(rt.InvalidArgumentError):
        rd.read_topic(topic, start={0: -1})
    with pytest.raises(rt.InvalidArgumentError):
        rd.read_topic(topic, start=datetime(2026, 1, 1))  # naive
    with pytest.raises(rt.InvalidArgumentError):
        rd.read_topic(topic, channels=[5])
    assert rd.read_topic(topic).count() == 0  # nothing appended
    assert [c.state for c in topic.describe().channels] == ["serving"]


@ray.remote
class _CpuHolder:
    """Holds the CPUs it was made with, as a Spark executor does."""

    def ready(self) -> bool:
        return True


def test_a_write_prints_nothing_and_leaves_ray_datas_settings_as_they_were(
    one_channel_topic: rt.Topic, capfd: pytest.CaptureFixture[str]
) -> None:
    # Shared: it checks what the write printed and logged; the topic's other writes
    # logged before it are counted.
    topic = one_channel_topic
    log = Path(get_log_directory()) / "ray-data.log"
    finished = f"Data sink WriteTopic({topic.name}) finished"
    logged = log.read_text().count(finished) if log.exists() else 0
    # One CPU left for the write task, as beside a Spark session: Ray Data's
    # checks of free CPUs (before the write and once it is done) read Ray's
    # lagging view and warn of a hang while the write runs fine.
    spare = ray.available_resources().get("CPU", 0.0) - 1
    holder = _CpuHolder.options(num_cpus=spare).remote() if spare > 0 else None
    ray_data = logging.getLogger("ray.data")
    filters = {handler: list(handler.filters) for handler in ray_data.handlers}
    # Ray Data's console handler writes to the stderr it found when it was made
    # (under pytest, not the one capfd reads): catch what it writes here.
    console = [h for h in ray_data.handlers if type(h).__name__ == "PlainRayHandler"]
    assert console, ray_data.handlers
    printed = io.StringIO()
    streams = [handler.setStream(printed) for handler in console]
    try:
        if holder is not None:
            ray.get(holder.ready.remote(), timeout=60)
        reset_log_once("cpu_warning")  # an earlier write of this session may have said it
        dataset = _orders(100)
        progress_bars = dataset.context.enable_progress_bars
        capfd.readouterr()
        assert rd.write_topic(dataset, topic).rows == 100
        out, err = capfd.readouterr()
    finally:
        for handler, stream in zip(console, streams, strict=True):
            handler.setStream(stream)
        if holder is not None:
            ray.kill(holder)
    text = printed.getvalue() + out + err
    for line in ("Dataset", "Data sink", "Progress", "available CPUs"):
        assert line not in text, text
    # Ray Data's own log file still has the write, and its settings are as they were:
    # it may still warn of CPUs for other work.
    assert log.read_text().count(finished) == logged + 1
    assert dataset.context.enable_progress_bars is progress_bars
    assert {handler: list(handler.filters) for handler in ray_data.handlers} == filters
    assert log_once("cpu_warning")
    reset_log_once("cpu_warning")


@contextlib.contextmanager
def _ray_data_console() -> Iterator[io.StringIO]:
    """What Ray Data's console handler prints while the block runs (it writes to the
    stderr it found when it was made, which capfd does not read)."""
    ray_data = logging.getLogger("ray.data")
    console = [h for h in ray_data.handlers if type(h).__name__ == "PlainRayHandler"]
    assert console, ray_data.handlers
    printed = io.StringIO()
    streams = [handler.setStream(printed) for handler in console]
    try:
        yield printed
    finally:
        for handler, stream in zip(console, streams, strict=True):
            handler.setStream(stream)


def test_reads_and_micro_batches_print_nothing_when_run_unless_asked(
    make_topic, capfd: pytest.CaptureFixture[str]
) -> None:
    # Before: ~10 lines per micro-batch (its plan, its progress, "finished") and 5
    # per read_topic: 39 lines for three micro-batches and a read.
    topic = make_topic(channels=2, groups=["g"], retain=True)
    rd.write_topic(_orders(300), topic)
    capfd.readouterr()
    with _ray_data_console() as printed:
        with rd.stream(topic, group="g", max_rows_per_batch=100) as batches:
            rows = [len(batch.dataset.map_batches(lambda b: b).to_pandas()) for batch in batches]
        read = rd.read_topic(topic)
        assert len(read.to_pandas()) == 300
        out, err = capfd.readouterr()
    assert rows == [100, 100, 100]
    text = printed.getvalue() + out + err
    assert "Dataset" not in text and "Progress" not in text, text
    # The process's own Datasets are as they were; quiet=False leaves a read's too.
    default = ray.data.DataContext.get_current()
    assert default.print_on_execution_start and not default.custom_execution_callback_classes
    loud = rd.read_topic(topic, quiet=False).context
    assert (loud.enable_progress_bars, loud.print_on_execution_start) == (
        default.enable_progress_bars,
        True,
    )
    assert read.context.print_on_execution_start is False


def test_the_bridges_are_reached_from_the_package() -> None:
    assert rt.data is rd  # imported on first use
    assert rt.PublishSummary.total([({0: 2}, 10), ({0: 1, 1: 3}, 5)], 2.0) == rt.PublishSummary(
        6, {0: 3, 1: 3}, 15, 2.0
    )


def test_read_topic_refuses_a_topic_name_before_reading() -> None:
    # The check sits in read_topic (plan_ranges takes a Topic its callers checked).
    with pytest.raises(rt.InvalidTypeError, match="topic"):
        rd.read_topic("orders")
