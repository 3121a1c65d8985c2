"""raytopic.serve: the task board and the task records (no Ray), bad arguments, LagPolicy
on a real topic, and a real Serve deployment with ``@task_consumer`` on
TopicTaskAdapter whose replica is SIGKILLed mid-task; then examples/serve_tasks.py on
the same Serve.

Serve is one per cluster (a detached controller in the "serve" namespace): this
module and test_bench's Serve case run in one xdist worker (the "serve" group), one
after the other, and the module shuts Serve down when it is done, leaving no
controller or replica in the cluster the run shares.
"""

from __future__ import annotations

import contextlib
import operator
import os
import runpy
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from ray.serve.config import AutoscalingContext
from ray.serve.schema import TaskProcessorConfig

import raytopic as rt
from raytopic.client.control_log import LatestRead
from raytopic.serve import CONSUMER_GROUP, LagPolicy, TopicAdapterConfig, TopicTaskAdapter
from raytopic.serve.adapter import board_name
from raytopic.serve.board import TaskBook, state_of, task_record
from raytopic.serve.records import UnreadableTask, check_task, load_arguments, make_task
from raytopic.serve.statuses import KnownStatuses

from tests.topic_helpers import publish_all

pytestmark = pytest.mark.xdist_group("serve")

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"

# -- the forgetting order and what a reader knows (no Ray) -------------------------------


def _done(status: str, at: float, element: tuple[int, int] | None) -> dict:
    return {"status": status, "at": at, "element": None if element is None else list(element)}


def test_the_board_forgets_the_oldest_acknowledged_finished_tasks_first() -> None:
    book = TaskBook(kept=2)
    book.seen(
        [
            ("newer", _done("SUCCESS", 3.0, (0, 2))),
            ("retrying", _done("RETRY", 0.0, None)),  # unfinished ones are not counted
            ("older", _done("FAILURE", 2.0, (0, 1))),
            # Nor a cancel no replica passed over: the task may wait in the queue
            # (forgotten, a replica would find no record and run it).
            ("cancelled", _done("REVOKED", 0.5, None)),
            ("old-format", _done("SUCCESS", 1.0, None)),  # no element: counted as acked
        ]
    )
    assert book.held_back == {0: 2}
    assert book.forget() == []
    book.floors({0: 1})  # "older" acknowledged; "newer" not yet
    assert book.forget() == []  # two counted
    book.acked({(0, 2)})  # a replica's hint
    assert book.held_back == {}
    assert book.forget() == ["old-format"]
    book.seen([("old-format", None)])  # its delete, read back
    book.seen([("newer", _done("SUCCESS", 3.0, (0, 2)))])  # read again: counted once
    book.seen([("passed", _done("REVOKED", 0.5, (0, 0)))])  # passed over: an old finish
    book.floors({0: 2})
    assert book.forget() == ["passed"]  # the oldest by its record's time, not by its count


def test_a_forgotten_task_is_not_counted_again_and_a_reread_drops_what_is_gone() -> None:
    # Before (stop 71): a held-back task released, forgotten, then told late counted
    # again, and one more task was forgotten early. Now the board counts what the log
    # shows: a forgotten task until its delete shows is being forgotten, then gone.
    book = TaskBook(kept=1)
    book.seen([("a", _done("SUCCESS", 1.0, (0, 1))), ("b", _done("SUCCESS", 2.0, (0, 2)))])
    book.floors({0: 2})
    assert book.forget() == ["a"]
    book.seen([("a", _done("SUCCESS", 1.0, (0, 1)))])  # before its delete shows
    book.acked({(0, 1)})  # a late hint
    assert book.forget() == ["a"]  # sent again until the log shows it gone
    book.reloaded({"b": _done("SUCCESS", 2.0, (0, 2))})  # "a" deleted
    assert book.forget() == []
    book.seen([("c", _done("SUCCESS", 3.0, (1, 7)))])  # held back: "b" is kept
    assert book.forget() == [] and book.held_back == {1: 7}
    book.seen([("c", _done("STARTED", 4.0, None))])  # forgotten, then run anew
    assert book.held_back == {}


def test_a_task_given_again_under_a_forgotten_id_keeps_its_record() -> None:
    # A read brings each key's latest record only: when the delete of a forgotten task
    # and a new run under the same id (a user's task_id) land between two looks, the
    # read shows the new run's record, not the delete. The delete went through: it is
    # not sent again (it would delete the new run's record: read PENDING while it runs).
    book = TaskBook(kept=1)
    book.seen([("a", _done("SUCCESS", 1.0, (0, 1))), ("b", _done("SUCCESS", 2.0, (0, 2)))])
    book.floors({0: 2})
    assert book.forget() == ["a"]
    book.seen([("a", _done("STARTED", 5.0, None))])  # the new run, hiding the delete
    assert book.forget() == []
    book.seen([("a", _done("SUCCESS", 6.0, (0, 3)))])  # and it finishes: counted anew
    book.floors({0: 3})
    assert book.forget() == ["b"]


def test_a_record_reads_as_its_state_and_an_unknown_task_as_pending() -> None:
    record = task_record("SUCCESS", 42, 1.5)
    assert state_of(record) == ("SUCCESS", 42, 1.5) and record["at"] > 0
    assert state_of(None) == ("PENDING", None, None)  # not seen: as Celery answers


def test_a_reader_answers_for_finished_tasks_from_what_a_read_brought() -> None:
    # A status read asks the task log once and learns the tasks changed since its
    # last read: a finished task is then answered without a call (issue 47 item 3).
    known = KnownStatuses(kept=2)
    done, retry = task_record("SUCCESS", 1, 0.0), task_record("RETRY", None, 0.0)
    known.learn(LatestRead({}, {0: ("one", 5)}, True, [("a", done), ("b", retry)]))
    assert known.get("a") == done
    assert known.get("b") is None  # not finished: asked again
    assert known.marks == {0: ("one", 5)}
    known.learn(LatestRead({}, {0: ("one", 4)}, False, [("a", None)]))  # an older reply
    assert known.get("a") == done
    known.learn(LatestRead({}, {0: ("one", 7)}, False, [("a", None), ("c", done)]))
    assert (known.get("a"), known.get("c")) == (None, done)  # "a" forgotten
    known.learn(LatestRead({}, {0: ("two", 1)}, True, [("d", done)]))  # the log restarted
    assert (known.get("c"), known.get("d")) == (None, done)


class Unloadable:
    """Pickles, but raises where it is loaded (as a class a replica cannot import)."""

    def __reduce__(self) -> tuple[object, tuple[int, int]]:
        return operator.truediv, (1, 0)


class ExitsWhenPickled:
    """Raises SystemExit where it is pickled (a user's ``__reduce__`` with a bug)."""

    def __reduce__(self) -> tuple[object, tuple[()]]:
        raise SystemExit(4)


class ExitsWhenLoaded:
    """Pickles, and raises SystemExit where it is loaded."""

    def __reduce__(self) -> tuple[object, tuple[int]]:
        return sys.exit, (5,)


def test_a_task_record_carries_its_arguments_pickled_apart() -> None:
    task = make_task("score", ["text"], {"lang": "en"}, {"key": "user-7", "task_id": "t1"})
    assert check_task(task) is task
    assert (task["id"], task["name"], task["key"]) == ("t1", "score", "user-7")
    assert load_arguments(task) == (["text"], {"lang": "en"})
    unloadable = make_task("score", [Unloadable()], None, {})
    with pytest.raises(UnreadableTask, match="ZeroDivisionError"):
        load_arguments(unloadable)  # its id and name are still there to report
    with pytest.raises(UnreadableTask):
        check_task({"not": "a task"})
    # Before: SystemExit itself (an enqueue raised it; a replica's consumer thread ended).
    with pytest.raises(rt.InvalidTypeError, match="cannot be pickled: SystemExit"):
        make_task("score", [ExitsWhenPickled()], None, {})
    with pytest.raises(UnreadableTask, match="SystemExit"):
        load_arguments(make_task("score", [ExitsWhenLoaded()], None, {}))
    # Before: "value of type dict cannot be pickled" (the whole task record, at publish).
    with pytest.raises(rt.InvalidTypeError, match="key must be a str, bytes, int or bool, got lo"):
        make_task("score", [], None, {"key": threading.Lock()})
    assert make_task("score", [], None, {"key": 7})["key"] == 7


# -- bad arguments ----------------------------------------------------------------------------


def test_bad_settings_and_arguments_are_typed_errors() -> None:
    with pytest.raises(rt.InvalidArgumentError, match="channels"):
        TopicAdapterConfig(channels=0)
    with pytest.raises(rt.InvalidTypeError, match="retry_backoff_s"):
        TopicAdapterConfig(retry_backoff_s="1")
    with pytest.raises(rt.InvalidTypeError, match="adapter_config"):
        TopicTaskAdapter(TaskProcessorConfig(queue_name="q", adapter_config={"x": 1}))
    with pytest.raises(rt.InvalidArgumentError, match="queue name"):
        TopicTaskAdapter(TaskProcessorConfig(queue_name="no spaces", adapter_config=None))
    with pytest.raises(rt.InvalidArgumentError, match="max_retries"):
        TopicTaskAdapter(TaskProcessorConfig(queue_name="q", adapter_config=None, max_retries=-1))
    with pytest.raises(rt.InvalidArgumentError, match="target_lag_per_member"):
        LagPolicy("t", target_lag_per_replica=0)
    with pytest.raises(rt.InvalidTypeError, match="shared"):
        LagPolicy("t", shared="yes")
    for args, kwargs, options, error in [
        (None, None, {"priority": 1}, rt.InvalidArgumentError),  # unknown option
        ("abc", None, {}, rt.InvalidTypeError),  # args: a list or tuple
        (None, ["x"], {}, rt.InvalidTypeError),  # kwargs: a mapping
        (None, {1: "x"}, {}, rt.InvalidTypeError),  # with str keys
        (None, None, {"task_id": 7}, rt.InvalidTypeError),
        (None, None, {"task_id": ""}, rt.InvalidArgumentError),
        ([lambda: (yield)], None, {}, None),  # cloudpickle pickles a lambda: fine
    ]:
        if error is None:
            make_task("t", args, kwargs, options)
            continue
        with pytest.raises(error):
            make_task("t", args, kwargs, options)
    with pytest.raises(rt.InvalidTypeError, match="task_name"):
        make_task(None, None, None, {})
    with pytest.raises(rt.InvalidArgumentError, match="task_name"):
        make_task("", None, None, {})
    adapter = TopicTaskAdapter(TaskProcessorConfig(queue_name="q", adapter_config=None))
    with pytest.raises(rt.InvalidArgumentError, match="initialize"):
        adapter.enqueue_task_sync("t")  # not initialized: nothing made, nothing sent
    with pytest.raises(rt.InvalidTypeError, match="task_id"):
        adapter.get_task_status_sync(7)
    with pytest.raises(rt.InvalidTypeError, match="callable"):
        adapter.register_task_handle("not a function")


# -- LagPolicy ---------------------------------------------------------------------------------


def _context(current: int, low: int = 0, high: int = 10) -> AutoscalingContext:
    """Serve's context as its controller builds it (the parts a policy reads)."""
    return AutoscalingContext(
        deployment_id=None,
        deployment_name="consumer",
        app_name="app",
        current_num_replicas=current,
        target_num_replicas=current,
        running_replicas=[],
        total_num_requests=0.0,
        total_queued_requests=0.0,
        aggregated_metrics={},
        raw_metrics={},
        capacity_adjusted_min_replicas=low,
        capacity_adjusted_max_replicas=high,
        policy_state={},
        last_scale_up_time=None,
        last_scale_down_time=None,
        current_time=time.time(),
        config=None,
    )


def test_lag_policy_asks_for_replicas_by_the_groups_lag(make_topic) -> None:
    namespace = f"serve-{uuid.uuid4().hex[:6]}"  # none lists it (test_bad_input lists its own)
    topic = make_topic(channels=2, groups=[rt.SharedGroup(CONSUMER_GROUP)], namespace=namespace)
    policy = LagPolicy(
        topic.name,
        target_lag_per_replica=100,
        scale_down_after_s=0.0,
        refresh_s=0.01,
        namespace=namespace,
    )
    assert policy(_context(0)) == (0, {"lag": 0})  # nothing to do: stays at 0
    publish_all(topic, list(range(250)))
    time.sleep(0.02)  # past refresh_s: the next call reads the lag again
    assert policy(_context(0)) == (3, {"lag": 250})
    time.sleep(0.02)
    assert policy(_context(3, high=2)) == (2, {"lag": 250})  # the deployment's max
    with topic.subscriber(group=CONSUMER_GROUP, mode="shared", complete_on_empty=True) as m:
        for batch in m.iter_batches(100):
            batch.ack()
    time.sleep(0.02)
    assert policy(_context(3, low=1)) == (1, {"lag": 0})  # down (no delay here), to min


# -- a real Serve deployment -----------------------------------------------------------------


@pytest.fixture(scope="module")
def serve_started(ray_session: None) -> Iterator[None]:
    """Serve, started once for the module and shut down after it (its controller and
    replicas are detached actors: nothing of them may outlive the module)."""
    from ray import serve

    serve.start(proxy_location="Disabled")
    try:
        yield
    finally:
        serve.shutdown()


def _finished(producer: TopicTaskAdapter, ids: list[str]) -> list | None:
    results = [producer.get_task_status_sync(task_id) for task_id in ids]
    if all(r.status in ("SUCCESS", "FAILURE", "REJECTED", "REVOKED") for r in results):
        return results
    return None


@pytest.mark.slow
def test_a_serve_deployment_on_topics_ends_every_task_despite_a_killed_replica(
    serve_started: None, tmp_path: Path, wait_until
) -> None:
    from ray import serve
    from ray.serve.task_consumer import (
        instantiate_adapter_from_config,
        task_consumer,
        task_handler,
    )

    queue, namespace = f"tasks-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    config = TaskProcessorConfig(
        queue_name=queue,
        adapter=TopicTaskAdapter,
        adapter_config=TopicAdapterConfig(
            channels=1, namespace=namespace, retry_backoff_s=0.05, ack_timeout=2.0
        ),
        max_retries=2,
        failed_task_queue_name=f"{queue}-failed",
        unprocessable_task_queue_name=f"{queue}-unprocessable",
    )
    marker = tmp_path / "holding"  # the replica running "hold" writes its pid here

    @serve.deployment(
        num_replicas=2,
        max_ongoing_requests=4,
        ray_actor_options={"num_cpus": 0},
        graceful_shutdown_wait_loop_s=0.1,  # Serve's 2 s: the deletion's wait
    )
    @task_consumer(task_processor_config=config)
    class Consumer:
        @task_handler(name="double")
        def double(self, n: int) -> list:
            if n % 20 == 6:
                raise ValueError(f"cannot double {n}")
            return [2 * n, time.time()]

        @task_handler(name="hold")
        def hold(self) -> list:
            if marker.exists():  # delivered again after its replica was killed
                return ["held", time.time()]
            marker.write_text(str(os.getpid()))
            time.sleep(120)  # killed meanwhile
            return ["not killed", time.time()]

    # The queue is there before its consumers: tasks wait in it.
    producer = instantiate_adapter_from_config(config)
    numbers = list(range(40))
    keys = {n: f"k{n % 3}" if n % 2 else None for n in numbers}  # odd numbers name a key
    held = producer.enqueue_task_sync("hold", key="k0").id  # k0's tasks wait for it
    ids = [producer.enqueue_task_sync("double", args=[n], key=keys[n]).id for n in numbers]
    unknown = producer.enqueue_task_sync("triple", args=[1]).id
    unloadable = producer.enqueue_task_sync("double", args=[Unloadable()]).id
    cancelled = producer.enqueue_task_sync("double", args=[1000], key="k0").id
    assert producer.cancel_task_sync(cancelled) is True  # no replica has it yet
    serve.run(Consumer.bind(), name=queue, route_prefix=None)
    try:
        killed = int(wait_until(lambda: marker.exists() and marker.read_text(), timeout=60))
        os.kill(killed, signal.SIGKILL)  # mid-task: "hold" and what its batch holds
        every = [held, *ids, unknown, unloadable, cancelled]
        results = wait_until(lambda: _finished(producer, every), timeout=90, interval=0.2)
        by_id = dict(zip(every, results, strict=True))
        assert by_id[held].status == "SUCCESS" and by_id[held].result[0] == "held"
        failing = {n for n in numbers if n % 20 == 6}
        statuses = Counter(by_id[task_id].status for task_id in ids)
        assert statuses == {"SUCCESS": len(numbers) - len(failing), "FAILURE": len(failing)}
        for n, task_id in zip(numbers, ids, strict=True):
            if n not in failing:
                assert by_id[task_id].result[0] == 2 * n
        # Each key's tasks ran one at a time, in enqueue order (k0's after "hold").
        for key in ("k0", "k1", "k2"):
            keyed = [held] if key == "k0" else []
            keyed += [task_id for n, task_id in zip(numbers, ids, strict=True) if keys[n] == key]
            ended = [by_id[task_id].result[1] for task_id in keyed]
            assert ended == sorted(ended), key
        assert by_id[cancelled].status == "REVOKED"
        assert by_id[unknown].status == "REJECTED"
        assert by_id[unloadable].status == "REJECTED"
        with rt.get_topic(f"{queue}-failed", namespace=namespace).subscriber(
            start="earliest", complete_on_empty=True
        ) as failed:
            moved = [element.value for element in failed]
        assert sorted(entry["args"][0] for entry in moved) == sorted(failing)
        assert all("cannot double" in entry["error"] for entry in moved)
        assert all(entry["attempts"] == 3 for entry in moved)  # max_retries + 1 runs
        with rt.get_topic(f"{queue}-unprocessable", namespace=namespace).subscriber(
            start="earliest", complete_on_empty=True
        ) as unprocessable:
            rejected = {element.value["id"]: element.value for element in unprocessable}
        assert sorted(rejected) == sorted([unknown, unloadable])
        assert "no handler" in rejected[unknown]["error"]
        assert "ZeroDivisionError" in rejected[unloadable]["error"]
        assert rejected[unloadable]["args"] is None  # they do not load here either
        metrics = wait_until(lambda: (m := producer.get_metrics_sync())["lag"] == 0 and m)
        assert metrics[f"{queue}-unprocessable"] == 2
        assert metrics[f"{queue}-failed"] == len(failing)
        assert metrics["tasks"]["SUCCESS"] == len(numbers) - len(failing) + 1
        assert producer.health_check_sync() == [{f"raytopic@{queue}": {"ok": "pong"}}]
    finally:
        serve.delete(queue)
        producer.stop_consumer()
        for name in (queue, f"{queue}-failed", f"{queue}-unprocessable"):
            with contextlib.suppress(rt.TopicNotFoundError):
                rt.get_topic(name, namespace=namespace).destroy()
        ray.kill(ray.get_actor(board_name(queue), namespace=namespace))


@pytest.mark.slow
def test_the_example_runs_on_serve(serve_started: None, capsys: pytest.CaptureFixture[str]) -> None:
    """examples/serve_tasks.py (test_examples leaves it to this module), in this
    process, on the Ray and the Serve running already (no driver of its own to start)."""
    runpy.run_path(str(EXAMPLES / "serve_tasks.py"), run_name="__main__")
    assert "every task succeeded or is in the failed-task queue" in capsys.readouterr().out
