"""Serve task state survives (issue 47 item 2, docs/architecture.md): statuses and results live
on the queue's task log, not in the board actor's memory. Every actor of a queue is
SIGKILLed (the board, the queue's and the task log's channels and coordinators);
nothing is forgotten, no finished task runs again, a cancelled task never runs,
``destroy()`` deletes the queue with all it made. The adapter runs in this process
(its consumer thread is what a Serve replica runs), without Serve."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.serve.schema import TaskProcessorConfig

import raytopic as rt
from raytopic.serve import TopicAdapterConfig, TopicTaskAdapter
from raytopic.serve import adapter as adapter_module
from raytopic.serve.adapter import board_name
from raytopic.serve.board_actor import task_log_name

from tests.topic_helpers import get, kill_channel, kill_coordinator, serving_again

RESTART_BOUND = 30.0


def _adapter(queue: str, namespace: str, store: Path, *, outlets: bool = False) -> TopicTaskAdapter:
    """The queue's adapter on one channel; with ``outlets``, its failed and unprocessable
    queues too (each a topic: a coordinator and a channel to start, which the tests
    whose tasks all succeed do not need)."""
    adapter = TopicTaskAdapter(
        TaskProcessorConfig(
            queue_name=queue,
            adapter=TopicTaskAdapter,
            adapter_config=TopicAdapterConfig(
                namespace=namespace, store=str(store), ack_timeout=5.0
            ),
            max_retries=1,
            failed_task_queue_name=f"{queue}-failed" if outlets else None,
            unprocessable_task_queue_name=f"{queue}-bad" if outlets else None,
        )
    )
    adapter.initialize()
    return adapter


def _kill_every_actor_of(queue: str, namespace: str) -> None:
    """SIGKILL the task board and every channel and coordinator of the queue's topics
    (the queue, its task log, its failed and unprocessable queues); return once they
    serve again."""
    topics = [
        rt.get_topic(name, namespace=namespace)
        for name in (queue, task_log_name(queue), f"{queue}-failed", f"{queue}-bad")
    ]
    epochs = [[kill_channel(t, c) for c in range(t.channel_count)] for t in topics]
    for topic in topics:
        kill_coordinator(topic)
    board = ray.get_actor(board_name(queue), namespace=namespace)
    os.kill(get(board.__ray_call__.remote(lambda _: os.getpid())), signal.SIGKILL)
    for topic, old in zip(topics, epochs, strict=True):
        for channel, epoch in enumerate(old):
            serving_again(topic, channel, epoch, RESTART_BOUND)


@pytest.mark.slow
def test_task_state_survives_every_actor_of_its_queue(
    ray_session: None, tmp_path: Path, wait_until: Any
) -> None:
    # Before: the board kept statuses in memory; killed, every task read PENDING again
    # and a task delivered again after its outcome was recorded ran twice.
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    adapter = _adapter(queue, namespace, tmp_path / "store", outlets=True)
    runs: Counter[int] = Counter()
    lock = threading.Lock()

    def double(n: int) -> int:
        with lock:
            runs[n] += 1
        return 2 * n

    adapter.register_task_handle(double, "double")
    cancelled = adapter.enqueue_task_sync("double", [100], task_id="cancelled")  # not started:
    assert adapter.cancel_task_sync(cancelled.id) is True  # no consumer runs yet
    ids = [adapter.enqueue_task_sync("double", [n]).id for n in range(20)]
    adapter.start_consumer()
    try:
        wait_until(
            lambda: all(adapter.get_task_status_sync(i).status == "SUCCESS" for i in ids),
            timeout=60,
        )
        _kill_every_actor_of(queue, namespace)
        statuses = [adapter.get_task_status_sync(i) for i in ids]
        assert [(s.status, s.result) for s in statuses] == [("SUCCESS", 2 * n) for n in range(20)]
        assert adapter.get_task_status_sync(cancelled.id).status == "REVOKED"
        assert adapter.cancel_task_sync(ids[0]) is False  # finished: cancel keeps its meaning
        # A finished task delivered again (its replica died before the ack) is not run
        # again: enqueued again under its id, it is passed over.
        again = adapter.enqueue_task_sync("double", [0], task_id=ids[0])
        later = adapter.enqueue_task_sync("double", [21])
        wait_until(lambda: adapter.get_task_status_sync(later.id).status == "SUCCESS", timeout=60)
        assert adapter.get_task_status_sync(again.id).result == 0
        assert runs == Counter({**dict.fromkeys(range(20), 1), 21: 1})  # 100 never ran
    finally:
        adapter.destroy()
    with pytest.raises(rt.TopicNotFoundError):
        rt.get_topic(queue, namespace=namespace)
    with pytest.raises(rt.TopicNotFoundError):
        rt.get_topic(task_log_name(queue), namespace=namespace)
    with pytest.raises(ValueError):
        ray.get_actor(board_name(queue), namespace=namespace)


def _doubling_while_its_log_stops(
    tmp_path: Path, runs: list[int]
) -> tuple[str, str, TopicTaskAdapter, rt.Topic, rt.ChannelStats, Any]:
    """A queue (its board has read its log back) whose task "double" notes its
    argument in ``runs``, SIGSTOPs the task log's channel (the outcome's write waits)
    and doubles; one task of 21 enqueued, the consumer started. Returns the queue,
    its namespace, the adapter, the task log, its channel's stats before the task
    ran (its pid and epoch: the channel is stopped afterwards) and the task."""
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    adapter = _adapter(queue, namespace, tmp_path / "store")
    adapter.get_task_status_sync("none")  # the board has read its log back
    log = rt.get_topic(task_log_name(queue), namespace=namespace)
    before = log.describe().channels[0]

    def stop_the_log_then_double(n: int) -> int:
        runs.append(n)
        os.kill(before.pid, signal.SIGSTOP)
        return 2 * n

    adapter.register_task_handle(stop_the_log_then_double, "double")
    task = adapter.enqueue_task_sync("double", [21])
    adapter.start_consumer()
    return queue, namespace, adapter, log, before, task


@pytest.mark.slow
def test_a_task_reads_success_only_once_its_outcome_is_on_the_task_log(
    ray_session: None, tmp_path: Path, wait_until: Any
) -> None:
    # Before: the board took the outcome into its memory, answered readers from it and
    # only then wrote the task log; a reader saw SUCCESS while the write was still
    # on its way (here: the log's channel stopped), and a board and log channel killed
    # right then took back a SUCCESS a client had seen. Now the log's channel answers
    # reads, from what it holds.
    runs: list[int] = []
    queue, namespace, adapter, log, before, task = _doubling_while_its_log_stops(tmp_path, runs)
    log_pid, epoch = before.pid, before.epoch
    try:
        wait_until(lambda: runs == [21], timeout=60)
        with ThreadPoolExecutor(1) as reader:
            reading = reader.submit(adapter.get_task_status_sync, task.id)
            time.sleep(0.5)
            assert not reading.done()  # stopped, the log's channel answers nothing
            os.kill(log_pid, signal.SIGKILL)  # stopped, it never wrote the outcome
            board = ray.get_actor(board_name(queue), namespace=namespace)
            os.kill(get(board.__ray_call__.remote(lambda _: os.getpid())), signal.SIGKILL)
            serving_again(log, 0, epoch, RESTART_BOUND)
            assert reading.result(timeout=60).status in ("STARTED", "SUCCESS")  # as held
        # The replica's finish, waited out across the restarts, records it.
        wait_until(lambda: adapter.get_task_status_sync(task.id).status == "SUCCESS", timeout=60)
        assert adapter.get_task_status_sync(task.id).result == 42
        assert runs == [21]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(log_pid, signal.SIGCONT)
        adapter.destroy()


@pytest.mark.slow
def test_a_tasks_walk_does_not_pass_the_task_board(
    ray_session: None, tmp_path: Path, wait_until: Any
) -> None:
    # Before: a task's start and outcome went replica -> board -> task log and back, and
    # a status read and a cancel asked the board: a stopped board held every task
    # (issue 47 item 3: four of a task's ten crossings). Now the task log's channel
    # decides (conditional writes) and answers reads: the board only forgets.
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    adapter = _adapter(queue, namespace, tmp_path / "store")
    adapter.register_task_handle(lambda n: 2 * n, "double")
    board = ray.get_actor(board_name(queue), namespace=namespace)
    board_pid = get(board.__ray_call__.remote(lambda _: os.getpid()))
    os.kill(board_pid, signal.SIGSTOP)
    try:
        waiting = adapter.enqueue_task_sync("double", [7])
        assert adapter.cancel_task_sync(waiting.id) is True
        assert adapter.cancel_task_sync(waiting.id) is True  # cancelled already
        ids = [adapter.enqueue_task_sync("double", [n]).id for n in range(5)]
        adapter.start_consumer()
        wait_until(
            lambda: all(adapter.get_task_status_sync(i).status == "SUCCESS" for i in ids),
            timeout=20,
        )
        assert [adapter.get_task_status_sync(i).result for i in ids] == [0, 2, 4, 6, 8]
        assert adapter.get_task_status_sync(waiting.id).status == "REVOKED"
        assert adapter.cancel_task_sync(ids[0]) is False  # finished
    finally:
        os.kill(board_pid, signal.SIGCONT)
        adapter.destroy()


def test_a_failing_task_logs_each_attempt_and_whether_it_runs_again(
    ray_session: None, tmp_path: Path, wait_until: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: "task ... failed: ValueError(...)" twice, alike (examples/serve_tasks.py): a
    # user could not tell a retry from a duplicate, nor the last attempt from the first.
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    adapter = _adapter(queue, namespace, tmp_path / "store")  # max_retries=1: two attempts

    def fail(n: int) -> int:
        raise ValueError(f"cannot take {n}")

    adapter.register_task_handle(fail, "fail")
    try:
        task = adapter.enqueue_task_sync("fail", [3])
        with caplog.at_level(logging.WARNING, logger=adapter_module.__name__):
            adapter.start_consumer()
            wait_until(lambda: adapter.get_task_status_sync(task.id).status == "FAILURE", 30)
        said = [r.getMessage() for r in caplog.records if r.name == adapter_module.__name__]
        assert said == [
            f"task {task.id} (fail) failed on attempt 1 of 2: ValueError('cannot take 3'); "
            "it runs again",
            f"task {task.id} (fail) failed on attempt 2 of 2: ValueError('cannot take 3'); "
            "no attempt left: FAILURE",
        ]
    finally:
        adapter.destroy()


def test_a_status_read_of_a_started_task_answers_when_its_outcome_is_held(
    ray_session: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: a read of a started task answered STARTED at once, and a poller learnt of
    # its outcome only at its next read, a sleep and a call after the log held it (issue
    # 47 item 3). Now the read waits at the task log's channel (up to STATUS_READ_WAIT)
    # and is answered when the outcome is appended.
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    adapter = _adapter(queue, namespace, tmp_path / "store")
    running, release = threading.Event(), threading.Event()

    def held(n: int) -> int:
        running.set()
        release.wait(60)
        return 2 * n

    adapter.register_task_handle(held, "double")
    task = adapter.enqueue_task_sync("double", [4])
    adapter.start_consumer()
    try:
        assert running.wait(60)  # started: its STARTED is on the log
        assert adapter.get_task_status_sync(task.id).status == "STARTED"  # the wait ends
        monkeypatch.setattr(adapter_module, "STATUS_READ_WAIT", 30.0)
        with ThreadPoolExecutor(1) as reader:
            reading = reader.submit(adapter.get_task_status_sync, task.id)
            time.sleep(0.5)
            assert not reading.done()  # waiting at the log's channel for the outcome
            release.set()
            answered = reading.result(timeout=20)  # at the outcome, not after the 30 s
        assert (answered.status, answered.result) == ("SUCCESS", 8)
    finally:
        release.set()
        adapter.destroy()


def test_a_status_read_of_a_pending_task_waits_for_its_outcome(
    ray_session: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: a read of a task no replica had started answered PENDING at once: a poller
    # from the enqueue made a read, a sleep and another read (or more) before its read
    # waited for the outcome (issue 47 item 3: calls of a task's walk). Now it waits at
    # the task log's channel through the start to the outcome: one read.
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    adapter = _adapter(queue, namespace, tmp_path / "store")
    adapter.register_task_handle(lambda n: 2 * n, "double")
    task = adapter.enqueue_task_sync("double", [5])
    cancelled = adapter.enqueue_task_sync("double", [6])
    try:
        monkeypatch.setattr(adapter_module, "STATUS_READ_WAIT", 30.0)
        with ThreadPoolExecutor(2) as reader:
            reading = reader.submit(adapter.get_task_status_sync, task.id)
            reading_cancelled = reader.submit(adapter.get_task_status_sync, cancelled.id)
            time.sleep(0.5)
            assert not reading.done()  # no consumer yet: waiting at the log's channel
            assert not reading_cancelled.done()
            assert adapter.cancel_task_sync(cancelled.id) is True
            assert reading_cancelled.result(timeout=20).status == "REVOKED"  # at the cancel
            adapter.start_consumer()
            answered = reading.result(timeout=20)  # at the outcome, not at the start
        assert (answered.status, answered.result) == ("SUCCESS", 10)
    finally:
        adapter.destroy()


def test_a_replica_hints_the_board_once_a_while_and_when_it_stops(
    ray_session: None, tmp_path: Path, wait_until: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: a replica told the board of each batch's finished tasks at once: with tasks
    # sent one at a time, a call (and the board's answer) per task, taking CPU from the
    # next task's walk (about 1 ms of its p50, issue 47 item 3). Now it gathers its hints
    # (the elements it acknowledged) for HINT_EVERY (here longer than the run) and hints
    # what is left when it stops; the board, following the log, forgets past
    # results_kept either way.
    monkeypatch.setattr(adapter_module, "HINT_EVERY", 60.0)
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    settings = TopicAdapterConfig(namespace=namespace, store=str(tmp_path), results_kept=5)
    config = TaskProcessorConfig(
        queue_name=queue, adapter=TopicTaskAdapter, adapter_config=settings
    )
    adapter, reader = TopicTaskAdapter(config), TopicTaskAdapter(config)
    adapter.initialize()
    reader.initialize()
    adapter.register_task_handle(lambda n: 2 * n, "double")
    told: list[list[tuple[int, int]]] = []
    hint = adapter._hint
    monkeypatch.setattr(adapter, "_hint", lambda elements: told.append(elements) or hint(elements))
    adapter.start_consumer()
    try:
        ids = []
        for n in range(8):
            ids.append(adapter.enqueue_task_sync("double", [n]).id)
            wait_until(lambda: adapter.get_task_status_sync(ids[-1]).status == "SUCCESS", 60)
        assert told == []  # gathered, not told task by task
        adapter.stop_consumer()
        assert [len(elements) for elements in told] == [len(ids)]  # told once, at the stop
        wait_until(lambda: reader.get_task_status_sync(ids[2]).status == "PENDING", 60)
        assert reader.get_task_status_sync(ids[3]).result == 6  # the newest 5 kept
    finally:
        adapter.destroy()


def test_destroying_a_queue_another_replica_destroyed_is_done(
    ray_session: None, tmp_path: Path
) -> None:
    # Before: the second destroy() asked the board the first had killed, and raised
    # ChannelUnavailableError. Now a queue deleted already is gone, as a topic's
    # destroy() is idempotent.
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    first = _adapter(queue, namespace, tmp_path / "store")
    second = _adapter(queue, namespace, tmp_path / "store")
    first.destroy()
    second.destroy()
    second.destroy()
    with pytest.raises(rt.TopicNotFoundError):
        rt.get_topic(queue, namespace=namespace)
    with pytest.raises(ValueError):
        ray.get_actor(board_name(queue), namespace=namespace)


def test_initialize_makes_the_task_log(ray_session: None, tmp_path: Path) -> None:
    # Before: the task board made its log at its first call, so a queue's first task (the
    # replica's start) paid for a new topic's actors, seconds on a busy machine (issue 47
    # item 3: inside the Serve bench's timed run).
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    adapter = _adapter(queue, namespace, tmp_path / "store")
    try:
        assert rt.get_topic(task_log_name(queue), namespace=namespace).channel_count == 1
    finally:
        adapter.destroy()


def test_another_replicas_consumer_ends_when_the_queue_is_deleted(
    ray_session: None, tmp_path: Path, wait_until: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: it logged "receive failed: topic ... was destroyed" every 0.5 s for ever
    # (and a batch in hand failed with a traceback), though destroy() says it ends.
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    deleting = _adapter(queue, namespace, tmp_path / "store")
    other = _adapter(queue, namespace, tmp_path / "store")
    other.register_task_handle(lambda n: 2 * n, "double")
    other.start_consumer()
    task = deleting.enqueue_task_sync("double", [3])
    wait_until(lambda: other.get_task_status_sync(task.id).status == "SUCCESS", timeout=20)
    with caplog.at_level(logging.WARNING, logger="raytopic"):
        deleting.destroy()
        wait_until(lambda: not other._consumer.is_alive(), timeout=10)
        time.sleep(1.0)  # a loop that went on would log again within 0.5 s
    said = [r for r in caplog.records if queue in r.getMessage()]
    assert [r.getMessage() for r in said] == [
        f"task queue {queue}: the queue was deleted; this replica's consumer stops"
    ]
    assert all(r.exc_info is None for r in caplog.records)
    other.stop_consumer()


def test_a_task_running_past_the_ack_timeout_stays_held_and_runs_once(
    ray_session: None, tmp_path: Path, wait_until: Any
) -> None:
    # A live replica extends the hold of the batch it runs (every third of ack_timeout),
    # now from a holder thread while the task runs on the consumer thread: a task that
    # runs longer than ack_timeout is not handed to another replica to run again.
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    config = TaskProcessorConfig(
        queue_name=queue,
        adapter=TopicTaskAdapter,
        adapter_config=TopicAdapterConfig(
            namespace=namespace, store=str(tmp_path / "store"), ack_timeout=3.0
        ),
    )
    runs: list[int] = []

    def slow(n: int) -> int:
        runs.append(n)
        # Past two ack timeouts: with 1 s ones, an extension late on a loaded machine
        # handed the task out again.
        time.sleep(7.0)
        return n

    replicas = [TopicTaskAdapter(config), TopicTaskAdapter(config)]
    try:
        for replica in replicas:
            replica.initialize()
            replica.register_task_handle(slow, "slow")
        task = replicas[0].enqueue_task_sync("slow", [1])
        for replica in replicas:
            replica.start_consumer()
        wait_until(lambda: replicas[0].get_task_status_sync(task.id).status == "SUCCESS", 30)
        time.sleep(1.0)  # a copy handed out again would have started long before
        assert runs == [1]
        assert replicas[1].get_task_status_sync(task.id).result == 1
    finally:
        replicas[1].stop_consumer()
        replicas[0].destroy()


def test_a_handler_raising_systemexit_or_keyboardinterrupt_fails_its_task_only(
    ray_session: None, tmp_path: Path, wait_until: Any
) -> None:
    # Before: the BaseException ended the consumer thread, silently (threading ignores
    # SystemExit): the batch it was in stayed STARTED, every later task PENDING, for ever.
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    adapter = _adapter(queue, namespace, tmp_path / "store", outlets=True)

    def work(n: int) -> int:
        if n == 3:
            raise SystemExit(3)
        if n == 5:
            raise KeyboardInterrupt
        return 10 * n

    adapter.register_task_handle(work, "work")
    try:
        ids = [adapter.enqueue_task_sync("work", [n]).id for n in range(8)]
        adapter.start_consumer()

        def ended() -> list[Any] | None:
            results = [adapter.get_task_status_sync(i) for i in ids]
            return results if all(r.status in ("SUCCESS", "FAILURE") for r in results) else None

        results = wait_until(ended, timeout=60, interval=0.2)
        statuses = [r.status for r in results]
        assert statuses == ["FAILURE" if n in (3, 5) else "SUCCESS" for n in range(8)]
        assert [results[n].result for n in (0, 1, 2, 4, 6, 7)] == [0, 10, 20, 40, 60, 70]
        assert "SystemExit" in results[3].result and "KeyboardInterrupt" in results[5].result
        with rt.get_topic(f"{queue}-failed", namespace=namespace).subscriber(
            start="earliest", complete_on_empty=True
        ) as failed:
            assert sorted(e.value["args"][0] for e in failed) == [3, 5]
        assert adapter._consumer.is_alive()
    finally:
        adapter.destroy()


@pytest.mark.parametrize("board_restarts", [False, True], ids=["board", "restarted-board"])
def test_a_cancelled_task_behind_more_finished_tasks_than_results_kept_never_runs(
    ray_session: None, tmp_path: Path, wait_until: Any, board_restarts: bool
) -> None:
    # Before: a cancel told the board at once that its task had finished (and a board
    # that restarted counted every REVOKED record so), so a task cancelled while more
    # than results_kept tasks ahead of it finished was forgotten (its REVOKED record
    # deleted) before a replica reached it, and the replica, finding no record, ran it
    # (trial69: 24 of 26 cancels answered True ran, results_kept=20, 200 tasks). Now a
    # cancelled task counts as finished once a replica passed it over.
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    settings = TopicAdapterConfig(namespace=namespace, store=str(tmp_path), results_kept=2)
    adapter = TopicTaskAdapter(
        TaskProcessorConfig(queue_name=queue, adapter=TopicTaskAdapter, adapter_config=settings)
    )
    adapter.initialize()
    runs: list[int] = []

    def slow(n: int) -> int:
        runs.append(n)
        time.sleep(0.5)
        return n

    adapter.register_task_handle(slow, "slow")
    ahead = [adapter.enqueue_task_sync("slow", [n]).id for n in range(8)]  # two batches
    cancelled = adapter.enqueue_task_sync("slow", [100]).id
    assert adapter.cancel_task_sync(cancelled) is True  # not started: no replica runs it
    last = adapter.enqueue_task_sync("slow", [8]).id  # in the batch after the 8 ahead
    if board_restarts:  # it reads the log back: the REVOKED record is there
        board = ray.get_actor(board_name(queue), namespace=namespace)
        os.kill(get(board.__ray_call__.remote(lambda _: os.getpid())), signal.SIGKILL)
        get(board.ready.remote())
    adapter.start_consumer()
    try:
        wait_until(lambda: adapter.get_task_status_sync(last).status == "SUCCESS", 60)
        assert 100 not in runs
        assert runs == list(range(9))
        assert adapter.get_task_status_sync(cancelled).status == "REVOKED"
        assert adapter.get_task_status_sync(ahead[0]).status == "PENDING"  # past results_kept
    finally:
        adapter.destroy()


def test_a_finished_task_whose_ack_was_lost_is_not_forgotten_before_it_is_passed_over(
    ray_session: None, tmp_path: Path, wait_until: Any
) -> None:
    # Before: a replica told the board a task had finished before its ack was answered.
    # An ack lost (here: the queue's channel restarted under it; a replica dying does the
    # same) leaves the task to come back, and a board that meanwhile forgot it past
    # results_kept left no record to pass it over by: it ran again (trial69). Now a task
    # is told once its ack is answered ACKED.
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    settings = TopicAdapterConfig(
        namespace=namespace, store=str(tmp_path), results_kept=1, ack_timeout=5.0
    )
    adapter = TopicTaskAdapter(
        TaskProcessorConfig(queue_name=queue, adapter=TopicTaskAdapter, adapter_config=settings)
    )
    adapter.initialize()
    topic = rt.get_topic(queue, namespace=namespace)
    before = topic.describe().channels[0]
    runs: list[str] = []

    def note(name: str) -> str:
        runs.append(name)
        if runs == ["first"]:  # the acks of this batch wait at a stopped channel
            os.kill(before.pid, signal.SIGSTOP)
        return name

    adapter.register_task_handle(note, "note")
    first = adapter.enqueue_task_sync("note", ["first"]).id
    second = adapter.enqueue_task_sync("note", ["second"]).id  # the same batch
    adapter.start_consumer()
    try:
        wait_until(lambda: adapter.get_task_status_sync(second).status == "SUCCESS", 60)
        time.sleep(2 * adapter_module.HINT_EVERY + 1.0)  # a tell would have been heard
        # Past results_kept, yet held back: its element is not acknowledged.
        assert adapter.get_task_status_sync(first).status == "SUCCESS"
        os.kill(before.pid, signal.SIGKILL)  # the acks never come: both are delivered again
        serving_again(topic, 0, before.epoch, RESTART_BOUND)
        wait_until(lambda: adapter.get_metrics_sync()["lag"] == 0, 60)
        wait_until(
            lambda: topic.describe().groups[adapter_module.CONSUMER_GROUP].channels[0].unacked == 0,
            60,
        )
        assert runs == ["first", "second"]  # both passed over by their records
        # Acknowledged now, the older is forgotten past results_kept (not before: a status
        # read just after the pass-over raced the board's forgetting).
        wait_until(lambda: adapter.get_task_status_sync(first).status == "PENDING", 60)
        assert adapter.get_task_status_sync(second).status == "SUCCESS"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(before.pid, signal.SIGCONT)
        adapter.destroy()
