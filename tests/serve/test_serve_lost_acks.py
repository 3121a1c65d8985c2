"""A task in a lost ack's window (docs/architecture.md, Control state): its outcome
went to the task log, or did not, and the process that wrote it (a replica), the log's
channel or the task board was SIGKILLed before the replica acknowledged the task. The
task comes back; whatever restarted meanwhile, a finished task does not run again, a
status never goes back, a SUCCESS once read stays readable (until ``results_kept``
newer finished tasks pass it), a cancel keeps its meaning and the log keeps
``results_kept`` finished tasks. Each run of a task is a line in a file the test
reads; statuses are read through the adapter, as a Celery user reads them.

The replica that holds the task runs in its own process (a Ray actor, as a Serve
replica does), so it can be stopped and killed; the producer, and the replica that
takes the task when it comes back, run in this one."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.serve.schema import TaskProcessorConfig

import raytopic as rt
from raytopic.serve import CONSUMER_GROUP, TopicAdapterConfig, TopicTaskAdapter
from raytopic.serve import adapter as adapter_module
from raytopic.serve.adapter import board_name
from raytopic.serve.board_actor import task_log_name

WAIT = 180.0
"""Seconds a step waits at most (a full run loads the 2 cores: an actor's start, a
task's walk or a tell took over a minute there)."""

ORDER = {"PENDING": 0, "STARTED": 1, "RETRY": 1, "SUCCESS": 2, "REVOKED": 2}
"""How far a task's status has come: a status read never answers a lower one (a
finished task forgotten past results_kept excepted, which the tests avoid)."""


def _new_queue(
    tmp_path: Path, kept: int, ack_timeout: float = 60.0
) -> tuple[str, str, TaskProcessorConfig, TopicTaskAdapter]:
    """A queue of its own (name, namespace, config; stored under ``tmp_path``) and its
    producer, initialized (the queue, task log and board made). One queue channel; a
    held task comes back after ``ack_timeout`` (or when its replica's death is
    noticed)."""
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    config = TaskProcessorConfig(
        queue_name=queue,
        adapter=TopicTaskAdapter,
        adapter_config=TopicAdapterConfig(
            namespace=namespace,
            store=str(tmp_path / "store"),
            results_kept=kept,
            ack_timeout=ack_timeout,
        ),
    )
    producer = TopicTaskAdapter(config)
    producer.initialize()
    return queue, namespace, config, producer


def _note(runs: Path, stops: dict[str, int], holds: dict[str, Path] | None = None) -> Any:
    """The handler "note": a line per run in ``runs``; a task named in ``stops`` then
    SIGSTOPs that process (its outcome's write waits there), one named in ``holds``
    runs until that file exists."""

    def note(name: str) -> str:
        with open(runs, "a") as lines:
            lines.write(f"{name} {time.time()} {os.getpid()}\n")
        if name in stops:
            os.kill(stops[name], signal.SIGSTOP)
        while holds and name in holds and not holds[name].exists():
            time.sleep(0.1)
        return name.upper()

    return note


def _started(runs: Path) -> list[tuple[str, float, int]]:
    """(task name, when it started, the pid that ran it) of each run, in order."""
    lines = runs.read_text().splitlines() if runs.exists() else []
    return [(name, float(at), int(pid)) for name, at, pid in (line.split() for line in lines)]


def _runs(runs: Path) -> list[str]:
    return [name for name, _, _ in _started(runs)]


@ray.remote(num_cpus=0, max_restarts=0)
class _Replica:
    """A replica of the queue in its own process (what a Serve replica runs)."""

    def __init__(
        self,
        config: TaskProcessorConfig,
        runs: Path,
        stops: dict[str, int],
        board_wait: float | None = None,
        holds: dict[str, Path] | None = None,
        hint_every: float | None = None,
    ) -> None:
        if board_wait is not None:  # how long this replica waits for the task log
            adapter_module.BOARD_WAIT = board_wait
        if hint_every is not None:  # how long it gathers its hints to the task board
            adapter_module.HINT_EVERY = hint_every
        self._adapter = TopicTaskAdapter(config)
        self._adapter.initialize()
        self._adapter.register_task_handle(_note(runs, stops, holds), "note")
        self._adapter.start_consumer()

    def pid(self) -> int:
        return os.getpid()

    def gave_up(self) -> bool:
        """Whether this replica gave up waiting for its first batch's outcomes to be
        written (it never acks that batch)."""
        recording = self._adapter._recording
        return bool(recording) and recording[0][1].done()


class _Watch:
    """Reads a task's status through an adapter until stopped, noting each change."""

    def __init__(self, adapter: TopicTaskAdapter, task_id: str) -> None:
        self.seen: list[tuple[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(adapter, task_id))
        self._thread.start()

    def _watch(self, adapter: TopicTaskAdapter, task_id: str) -> None:
        while not self._stop.wait(0.05):
            try:
                status = adapter.get_task_status_sync(task_id)
            except rt.ChannelUnavailableError:
                continue  # the log's channel restarting for a minute: seen again later
            if not self.seen or self.seen[-1] != (status.status, status.result):
                self.seen.append((status.status, status.result))

    def stop(self) -> list[tuple[str, Any]]:
        self._stop.set()
        self._thread.join(60)
        return self.seen


def _never_back(seen: list[tuple[str, Any]]) -> None:
    """A task's statuses as read, in order, only move forward and read one result; a
    finished task forgotten past results_kept reads PENDING (Celery's answer for an id
    it does not know) as its last change."""
    if len(seen) > 1 and seen[-1] == ("PENDING", None) and ORDER[seen[-2][0]] == 2:
        seen = seen[:-1]
    ranks = [ORDER[status] for status, _ in seen]
    assert ranks == sorted(ranks), seen
    assert len({result for status, result in seen if ORDER[status] == 2}) <= 1, seen


def _pid(actor: Any) -> int:
    return ray.get(actor.__ray_call__.remote(lambda _: os.getpid()), timeout=WAIT)


@pytest.mark.slow
def test_a_replica_killed_before_its_hint_leaves_no_result_past_results_kept(
    ray_session: None, tmp_path: Path, wait_until: Any
) -> None:
    # Before: the board learnt of a finished task only from its replica's tell, sent
    # half a second after the ack: a replica SIGKILLed in between (here: one that would
    # hint after an hour) left its finished, acknowledged tasks on the log past
    # results_kept until the board restarted. Now the board follows the log.
    queue, namespace, config, producer = _new_queue(tmp_path, kept=2)
    runs = tmp_path / "runs"
    replica = _Replica.remote(config, runs, {}, hint_every=3600.0)
    pid = ray.get(replica.pid.remote(), timeout=WAIT)
    ids = [producer.enqueue_task_sync("note", [f"n{n}"]).id for n in range(5)]
    queue_topic = rt.get_topic(queue, namespace=namespace)
    try:
        # Every task finished and acknowledged (the group's floor passed them).
        wait_until(lambda: queue_topic.describe().groups[CONSUMER_GROUP].lag == 0, WAIT)
        os.kill(pid, signal.SIGKILL)  # its tells never go
        wait_until(lambda: _counts(producer) == {"SUCCESS": 2}, WAIT)
        statuses = [producer.get_task_status_sync(task).status for task in ids]
        assert statuses == ["PENDING"] * 3 + ["SUCCESS"] * 2  # the oldest forgotten
        assert sorted(_runs(runs)) == [f"n{n}" for n in range(5)]
    finally:
        ray.kill(replica)
        producer.destroy()


@pytest.mark.slow
def test_a_restarted_board_forgets_a_cancelled_task_a_replica_passed_over(
    ray_session: None, tmp_path: Path, wait_until: Any
) -> None:
    # Before: a board that restarted never forgot a REVOKED record (the cancel named no
    # queue element, so it could not tell whether the task still waited in the queue):
    # one passed over before the restart stayed on the log past results_kept for ever.
    # Now the replica that passes a cancelled task over records its element, and the
    # board forgets it as a finished one once that is acknowledged.
    queue, namespace, _, producer = _new_queue(tmp_path, kept=2)
    runs = tmp_path / "runs"
    producer.register_task_handle(_note(runs, {}), "note")
    cancelled = producer.enqueue_task_sync("note", ["x"]).id
    assert producer.cancel_task_sync(cancelled) is True
    first = producer.enqueue_task_sync("note", ["a"]).id
    queue_topic = rt.get_topic(queue, namespace=namespace)
    producer.start_consumer()
    try:
        wait_until(lambda: queue_topic.describe().groups[CONSUMER_GROUP].lag == 0, WAIT)
        assert producer.get_task_status_sync(first).status == "SUCCESS"
        board = ray.get_actor(board_name(queue), namespace=namespace)
        os.kill(_pid(board), signal.SIGKILL)  # it restarts and reads the log back
        later = [producer.enqueue_task_sync("note", [name]).id for name in "bc"]
        wait_until(lambda: _counts(producer) == {"SUCCESS": 2}, WAIT)
        assert [producer.get_task_status_sync(task).status for task in later] == ["SUCCESS"] * 2
        assert producer.get_task_status_sync(cancelled).status == "PENDING"  # forgotten
        assert _runs(runs) == ["a", "b", "c"]  # the cancelled task never ran
    finally:
        producer.destroy()


@pytest.mark.slow
@pytest.mark.timeout(900)  # each step may take minutes under load (no built-in wait)
def test_a_board_restarted_in_a_lost_ack_window_runs_no_finished_task_again(
    ray_session: None, tmp_path: Path, wait_until: Any
) -> None:
    # Before: a board that restarted read every finished record back as forgettable,
    # one whose ack had not come too. Here the task log's channel stalls past the
    # replica's wait for the outcome's write (BOARD_WAIT, 5 s in that replica): the
    # replica gives up and never acks, the write goes in once the channel resumes.
    # The board restarts; newer tasks push the task past results_kept; it comes back
    # after the ack_timeout: forgotten, it found no record to be passed over by and
    # ran again. Now a restarted board holds it back until its element is acked.
    # (Stop 70's form waited for u, the first enqueued, to be forgotten: u and v may
    # run in two replicas, and the board forgets the first told, v as often.) The task
    # comes back when its replica is SIGKILLed, once u or v is forgotten (stop 71's form
    # waited out a 150 s ack_timeout, long enough for the rest on a loaded machine).
    queue, namespace, config, producer = _new_queue(tmp_path, kept=1, ack_timeout=3600.0)
    runs = tmp_path / "runs"
    producer.register_task_handle(_note(runs, {}), "note")
    log = rt.get_topic(task_log_name(queue), namespace=namespace)
    log_channel = log.describe().channels[0]
    replica = _Replica.remote(config, runs, {"t": log_channel.pid}, board_wait=5.0)
    ray.get(replica.pid.remote(), timeout=WAIT)
    task = producer.enqueue_task_sync("note", ["t"]).id
    watch = _Watch(producer, task)

    def status(task_id: str) -> str:
        return producer.get_task_status_sync(task_id).status

    try:
        wait_until(lambda: _runs(runs) == ["t"], WAIT)  # the log's channel stopped
        wait_until(lambda: ray.get(replica.gave_up.remote(), timeout=WAIT), WAIT)
        os.kill(log_channel.pid, signal.SIGCONT)  # the write goes in; no ack ever comes
        wait_until(lambda: status(task) == "SUCCESS", WAIT)
        board = ray.get_actor(board_name(queue), namespace=namespace)
        os.kill(_pid(board), signal.SIGKILL)  # it restarts and reads the log back
        producer.start_consumer()
        later = {name: producer.enqueue_task_sync("note", [name]).id for name in "uv"}
        # u and v run here or in the replica, and the board counts each when its
        # replica's ack is answered (hinted every HINT_EVERY): the older, whichever that
        # is, is forgotten once both count (results_kept=1; t, held back, is kept
        # beside). A task that ran reads STARTED at least, unless forgotten.
        forgotten = wait_until(
            lambda: [
                name
                for name in sorted(set(_runs(runs)) & set(later))
                if status(later[name]) == "PENDING"
            ],
            WAIT,
        )
        # The task comes back once its replica is gone (the group notices the death).
        os.kill(ray.get(replica.pid.remote(), timeout=WAIT), signal.SIGKILL)
        queue_topic = rt.get_topic(queue, namespace=namespace)
        wait_until(lambda: queue_topic.describe().groups[CONSUMER_GROUP].lag == 0, 2 * WAIT)
        assert sorted(_runs(runs)) == ["t", "u", "v"], _started(runs)
        # Every finish told, the log keeps results_kept finished tasks: the newest told.
        # (Main forgot both: a restored task told after it was forgotten counted again.)
        assert len(forgotten) == 1, (forgotten, _started(runs))
        (kept,) = set(later) - set(forgotten)
        wait_until(lambda: producer.get_metrics_sync()["tasks"] == {"SUCCESS": 1}, WAIT)
        assert status(later[kept]) == "SUCCESS"
        assert producer.cancel_task_sync(later[kept]) is False  # finished: cancel refused
    finally:
        seen = watch.stop()
        with contextlib.suppress(ProcessLookupError):
            os.kill(log_channel.pid, signal.SIGCONT)
        ray.kill(replica)
        producer.destroy()
    _never_back(seen)


@pytest.mark.slow
@pytest.mark.timeout(900)  # each step may take minutes under load (no built-in wait)
def test_a_board_that_cannot_read_its_log_back_answers_typed_and_loses_no_hint(
    ray_session: None, tmp_path: Path, wait_until: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before (stop 70): a board restarted while its task log's channel stalled failed to
    # read the log back; get_metrics_sync raised Ray's RayTaskError(TimeoutError), and a
    # replica's word that came then was lost: its task, read back later and held back
    # (an older task, h, still runs: the group's floor is below it), was never counted,
    # so newer tasks did not push it past results_kept. Now the adapter answers
    # ChannelUnavailableError, and the board keeps a hint until a look of the log uses it.
    # (Stop 71's form waited out two 60 s read backs: the board now reads its counts
    # within half the adapter's wait, here 30 s.)
    monkeypatch.setattr(adapter_module, "BOARD_WAIT", 30.0)
    queue, namespace, config, producer = _new_queue(tmp_path, kept=1)
    runs, hold = tmp_path / "runs", tmp_path / "hold"
    producer.register_task_handle(_note(runs, {}), "note")
    replica = _Replica.remote(config, runs, {}, holds={"h": hold})
    ray.get(replica.pid.remote(), timeout=WAIT)
    log_channel = rt.get_topic(task_log_name(queue), namespace=namespace).describe().channels[0]
    try:
        held = producer.enqueue_task_sync("note", ["h"]).id
        wait_until(lambda: _runs(runs) == ["h"], WAIT)  # the replica holds h until "hold"
        producer.start_consumer()
        told = producer.enqueue_task_sync("note", ["c"]).id
        wait_until(lambda: producer.get_task_status_sync(told).status == "SUCCESS", WAIT)
        element = producer._task_log().read([told], WAIT).latest[told]["element"]
        board = ray.get_actor(board_name(queue), namespace=namespace)
        os.kill(log_channel.pid, signal.SIGSTOP)
        os.kill(_pid(board), signal.SIGKILL)  # it restarts and cannot read the log back
        with pytest.raises(rt.ChannelUnavailableError):
            producer.get_metrics_sync()
        # A replica's hint of c's ack (as Ray delivers one made while the board restarted).
        ray.get(board.acked.remote([element]), timeout=WAIT)
        os.kill(log_channel.pid, signal.SIGCONT)
        newer = producer.enqueue_task_sync("note", ["d"]).id
        wait_until(lambda: producer.get_task_status_sync(newer).status == "SUCCESS", WAIT)
        # c acked, d acked: c is forgotten (results_kept=1), h still running.
        wait_until(lambda: producer.get_task_status_sync(told).status == "PENDING", WAIT)
        assert producer.get_task_status_sync(held).status == "STARTED"
        counts = wait_until(lambda: _counts(producer), WAIT)
        assert counts == {"STARTED": 1, "SUCCESS": 1}
        hold.touch()
        wait_until(lambda: producer.get_task_status_sync(held).status == "SUCCESS", WAIT)
        assert sorted(_runs(runs)) == ["c", "d", "h"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(log_channel.pid, signal.SIGCONT)
        hold.touch()
        ray.kill(replica)
        producer.destroy()


def _counts(adapter: TopicTaskAdapter) -> dict[str, int] | None:
    """The queue's tasks by status (None while the task log's channel restarts)."""
    try:
        return adapter.get_metrics_sync()["tasks"]
    except rt.ChannelUnavailableError:
        return None
