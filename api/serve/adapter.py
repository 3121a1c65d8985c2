"""TopicTaskAdapter: Ray Serve's ``TaskProcessorAdapter`` with topics as the task,
failed-task and unprocessable-task queues (the package's docs say how)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import ray
from ray.serve.schema import TaskProcessorAdapter, TaskProcessorConfig, TaskResult

from raytopic.client.control_log import ControlLog, WriteUnless, open_control_log
from raytopic.client.topic import create_topic, get_topic
from raytopic.core.config import (
    check_name,
    check_nonnegative_int,
    check_positive_int,
    check_seconds,
)
from raytopic.core.destroyed import topic_calls
from raytopic.core.errors import (
    ChannelUnavailableError,
    InvalidArgumentError,
    InvalidTypeError,
    PoisonElementError,
    TopicError,
    TopicNotFoundError,
    unwrap_ray_error,
)
from raytopic.core.records import AckStatus
from raytopic.core.shared_group import SharedGroup
from raytopic.serve.board import (
    CANCEL_REFUSED,
    CONSUMER_GROUP,
    FAILURE,
    FINISHED,
    PENDING,
    REJECTED,
    RETRY,
    REVOKED,
    STARTED,
    SUCCESS,
    state_of,
    task_record,
)
from raytopic.serve.board_actor import TaskBoardActor, task_log_name
from raytopic.serve.records import (
    UnreadableTask,
    check_task,
    load_arguments,
    make_task,
    queue_entry,
    stray_entry,
)
from raytopic.serve.statuses import CHANGES_READ, KnownStatuses

logger = logging.getLogger(__name__)

Outcome = tuple[Any, dict[str, Any] | None, str, Any]
"""A task's outcome in a batch: its element, the task (None: unreadable), its status,
and its result or error."""

__all__ = [
    "CONSUMER_GROUP",
    "TaskBoardStartError",
    "TopicAdapterConfig",
    "TopicTaskAdapter",
    "board_name",
]

BACKOFF_MOST = 60.0
"""Longest pause before a retry (seconds), as Celery's retry_backoff_max."""

BOARD_WAIT = 60.0
"""Seconds a call waits for the task board or the task log's channel while it
restarts before it raises ``ChannelUnavailableError``."""


STATUS_READ_WAIT = 0.02
"""Seconds a status read of a task that has not finished (no record yet, or STARTED)
waits at the task log for its outcome: a short task's poller learns of it when the
log holds it, in one read from its enqueue, not a read, a sleep and a read again; a
long or long-queued task's read costs that much more."""

READ_WAITS_ON = frozenset({None, STARTED})
"""The statuses under which a status read waits (None: no record, the task is PENDING)."""


HINT_EVERY = 0.5
"""Seconds a replica gathers the queue elements it acknowledged before it hints the task
board, in one call (a call per batch took CPU from the next task's walk). A hint only
hastens the board: it follows the task log by itself (a replica killed before its
hint costs time, never a result kept past ``results_kept``)."""


class TaskBoardStartError(ChannelUnavailableError):
    """A queue's task board failed to start: its constructor raised (the message says
    what). The board stays down; ``initialize()`` again starts a new one."""


def board_name(queue: str) -> str:
    """The Ray actor name of a queue's task board (in the queue topic's namespace)."""
    return f"raytopic:tasks:{queue}"


@dataclass(frozen=True, slots=True)
class TopicAdapterConfig:
    """How :class:`TopicTaskAdapter` makes its topics (``adapter_config`` of the
    ``TaskProcessorConfig``; None: these defaults).

    Args:
        channels: Channels of the task queue's topic. One serves every replica (its
            shared group hands any task to any replica); more spread the queue over
            more actors, for a task rate one channel cannot carry, at a cost: a
            replica takes the tasks of the channels it does not host through the one
            it does, a hop more per task (with 4, 3 tasks in 4: p50 about twice).
        namespace: Ray namespace of the topics and the task board (None: raytopic's).
        store: The topics' store (a directory, see ``create_topic``); None: memory.
        retry_backoff_s: Seconds before the first retry (doubling, at most a minute).
        ack_timeout: Seconds a replica that stopped answering holds its tasks before
            they are delivered again (a live replica extends its hold while a task
            runs, so a task may run longer).
        results_kept: Finished tasks whose status and result are kept (oldest go first).
    """

    channels: int = 1
    namespace: str | None = None
    store: Any = None
    retry_backoff_s: float = 1.0
    ack_timeout: float = 60.0
    results_kept: int = 100_000

    def __post_init__(self) -> None:
        check_positive_int(self.channels, "channels", maximum=10_000)
        if self.namespace is not None:
            check_name(self.namespace, "namespace")
        check_seconds(self.retry_backoff_s, "retry_backoff_s", allow_zero=True)
        check_seconds(self.ack_timeout, "ack_timeout")
        check_positive_int(self.results_kept, "results_kept")


class TopicTaskAdapter(TaskProcessorAdapter):
    """Ray Serve's task processor on topics (see the package's docs).

    **Delivery**: at least once: a task whose replica dies before it is
    acknowledged runs again, unless its outcome was recorded already; a
    finished task's status does not change. **Ordering**: tasks enqueued with
    one ``key`` run one at a time, in enqueue order. **Durability**: statuses
    and results are kept on the queue's task log (``<queue>.tasks``, a compacted
    topic keyed by task id, in ``store``; see ``raytopic.serve.board_actor``):
    they survive the restart of any actor of the queue. ``destroy()`` deletes
    the queue and everything it made.

    Args:
        config: Serve's ``TaskProcessorConfig``; its ``adapter_config`` is a
            :class:`TopicAdapterConfig` or None; ``max_retries`` None retries
            without limit.

    Raises:
        InvalidTypeError: ``adapter_config`` is something else; a queue name or
            ``max_retries`` of the wrong type.
        InvalidArgumentError: a queue name that is not a valid topic name; a
            negative ``max_retries``.
    """

    def __init__(self, config: TaskProcessorConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = config.adapter_config
        if settings is None:
            settings = TopicAdapterConfig()
        if not isinstance(settings, TopicAdapterConfig):
            raise InvalidTypeError(
                "adapter_config must be a raytopic.serve.TopicAdapterConfig (or None), "
                f"got {type(settings).__name__}"
            )
        check_name(config.queue_name, "queue name")
        for name in (config.failed_task_queue_name, config.unprocessable_task_queue_name):
            if name is not None:
                check_name(name, "queue name")
        if config.max_retries is not None:
            check_nonnegative_int(config.max_retries, "max_retries")
        self._config = config
        self._settings = settings
        self._max_retries = config.max_retries
        self._queue_name = config.queue_name
        self._handlers: dict[str, Callable[..., Any]] = {}
        self._concurrency = 1
        self._batch_size = 4
        self._topic: Any = None
        self._outlets: dict[str, Any] = {}  # the failed and unprocessable queues' topics
        self._board: Any = None
        self._log: ControlLog | None = None  # the task log: statuses and results
        self._statuses = KnownStatuses(settings.results_kept)
        self._publisher: Any = None
        self._publish_lock = threading.Lock()
        self._consumer: threading.Thread | None = None
        self._subscriber: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self._running: list[Any] | None = None  # the batch whose tasks run now
        self._holder: threading.Thread | None = None  # extends the running batch's hold
        self._holding = threading.Event()  # set: the holder stops
        self._acknowledger: ThreadPoolExecutor | None = None  # waits for outcomes, then acks
        self._recording: list[tuple[set[str], concurrent.futures.Future]] = []
        self._acking: list[concurrent.futures.Future] = []  # acks not yet answered
        self._unhinted: list[tuple[int, int]] = []  # acked elements, the board not yet hinted
        self._hint_timer: threading.Timer | None = None
        self._hints_lock = threading.Lock()

    # -- set-up ------------------------------------------------------------------------

    def initialize(self, consumer_concurrency: int = 1) -> None:
        """Make (or find) the queue's topics, its task board and task log.

        Raises:
            TaskBoardStartError: the task board failed to start (the message says why).
        """
        config, settings = self._config, self._settings
        self._concurrency = max(1, int(consumer_concurrency))
        self._batch_size = 4 * self._concurrency
        for name in (config.failed_task_queue_name, config.unprocessable_task_queue_name):
            if name is not None:
                self._outlets[name] = create_topic(
                    name,
                    channels=1,
                    retain=True,
                    namespace=settings.namespace,
                    store=settings.store,
                    exist_ok=True,
                )
        group = SharedGroup(CONSUMER_GROUP, ordering="key", ack_timeout=settings.ack_timeout)
        self._topic = create_topic(
            config.queue_name,
            channels=settings.channels,
            namespace=settings.namespace,
            store=settings.store,
            groups=[group],
            exist_ok=True,
        )
        self._board = (
            ray.remote(TaskBoardActor)
            .options(
                name=board_name(config.queue_name),
                namespace=self._topic.namespace,
                lifetime="detached",
                get_if_exists=True,
                max_restarts=-1,
                max_task_retries=-1,  # every call is idempotent: a restart is waited out
                max_concurrency=1000,
                num_cpus=0,
            )
            .remote(config.queue_name, self._topic.namespace, settings.store, settings.results_kept)
        )
        self._ask_board("ready")  # its task log made: the queue's first task does not wait
        self._log = open_control_log(
            task_log_name(config.queue_name), self._topic.namespace, store=settings.store
        )

    def register_task_handle(self, func: Callable[..., Any], name: str | None = None) -> None:
        """Run ``func(*args, **kwargs)`` (or await it) for tasks named ``name``
        (default: its name)."""
        if not callable(func):
            raise InvalidTypeError(f"a task handler must be callable, got {type(func).__name__}")
        if name is not None and not isinstance(name, str):
            raise InvalidTypeError(f"a task name must be a str, got {type(name).__name__}")
        self._handlers[name or func.__name__] = func

    # -- producing ---------------------------------------------------------------------

    def enqueue_task_sync(
        self, task_name: str, args: Any = None, kwargs: Any = None, **options: Any
    ) -> TaskResult:
        """Publish a task; returns once the queue acknowledged it.

        Options: ``key`` (tasks of one key run one at a time, in order),
        ``task_id`` (default: a new uuid).

        Raises:
            InvalidTypeError, InvalidArgumentError: bad arguments (nothing enqueued).
        """
        task = make_task(task_name, args, kwargs, options)
        self._queue_publisher().publish(task, key=task["key"]).result()  # in the queue
        return TaskResult(id=task["id"], status=PENDING, created_at=task["created_at"], result=None)

    async def enqueue_task_async(
        self, task_name: str, args: Any = None, kwargs: Any = None, **options: Any
    ) -> TaskResult:
        return await asyncio.to_thread(self.enqueue_task_sync, task_name, args, kwargs, **options)

    def get_task_status_sync(self, task_id: str) -> TaskResult:
        """The task's status and result (``PENDING`` while no replica has started it).

        One call to the task log's channel, which also brings the tasks changed since
        this adapter's last call: a task known finished is answered here without a
        call (a finished status stays). A read of a task that is pending or started
        waits there up to ``STATUS_READ_WAIT`` (20 ms) for its outcome, answered as soon
        as it is held (a RETRY or a cancel answers too).
        """
        _check_task_id(task_id)
        record = self._statuses.get(task_id)
        if record is None:
            log, marks = self._task_log(), self._statuses.marks
            until = ("status", READ_WAITS_ON, STATUS_READ_WAIT)
            read = self._log_answer(
                lambda: log.read([task_id], BOARD_WAIT, marks, CHANGES_READ, until)
            )
            self._statuses.learn(read)
            record = read.latest.get(task_id)
        status, result, created = state_of(record)
        return TaskResult(id=task_id, status=status, created_at=created, result=result)

    async def get_task_status_async(self, task_id: str) -> TaskResult:
        _check_task_id(task_id)
        return await asyncio.to_thread(self.get_task_status_sync, task_id)

    def cancel_task_sync(self, task_id: str) -> bool:
        """Cancel a task that has not started: no replica runs it (``REVOKED``).

        Returns:
            False if it has started or finished (it runs on).
        """
        _check_task_id(task_id)
        log = self._task_log()
        revoked = {task_id: task_record(REVOKED, None, None)}
        refusing = self._log_answer(
            lambda: log.write_unless(revoked, "status", CANCEL_REFUSED, BOARD_WAIT)
        )
        if task_id in refusing:
            return refusing[task_id]["status"] == REVOKED  # cancelled already: True again
        # Not counted by the board yet: this REVOKED record names no queue element, and
        # forgotten past results_kept while the task waits in the queue, a replica
        # finding no record would run it. The replica that passes it over writes
        # REVOKED again naming the element; the board counts it once that is acknowledged.
        return True

    async def cancel_task_async(self, task_id: str) -> bool:
        _check_task_id(task_id)
        return await asyncio.to_thread(self.cancel_task_sync, task_id)

    def _queue_publisher(self) -> Any:
        with self._publish_lock:
            if self._publisher is None:
                self._publisher = self._queue().publisher()
            return self._publisher

    def _queue(self) -> Any:
        if self._topic is None:
            raise InvalidArgumentError(
                "the adapter is not initialized: call initialize() first "
                "(instantiate_adapter_from_config does)"
            )
        return self._topic

    def _task_board(self) -> Any:
        self._queue()
        return self._board

    def _task_log(self) -> ControlLog:
        self._queue()
        assert self._log is not None
        return self._log

    def _hint(self, elements: list[tuple[int, int]]) -> None:
        """Hint the board that these queue elements are acknowledged, not waited for (off
        the tasks' path; Ray retries the call while the board restarts). Its answer is
        read when it comes: unread, a hint that failed (the board killed with its deleted
        queue) would be printed by Ray as an "Unhandled error" traceback once its ref is
        gone."""
        hint = self._task_board().acked.remote(elements)
        hint.future().add_done_callback(self._hinted)

    def _hint_soon(self, elements: list[tuple[int, int]]) -> None:
        """Hint the board of these acknowledged elements with the others of the next
        ``HINT_EVERY`` seconds (one call)."""
        with self._hints_lock:
            self._unhinted += elements
            if self._hint_timer is None:
                self._hint_timer = threading.Timer(HINT_EVERY, self._send_hints)
                self._hint_timer.daemon = True
                self._hint_timer.start()

    def _send_hints(self) -> None:
        """Hint the board of what was acknowledged here and not yet hinted (at the timer, or
        now)."""
        with self._hints_lock:
            elements, self._unhinted = self._unhinted, []
            timer, self._hint_timer = self._hint_timer, None
        if timer is not None:
            timer.cancel()
        if elements:
            self._hint(elements)

    def _hinted(self, hinted: concurrent.futures.Future) -> None:
        error = hinted.exception()
        if error is not None and not isinstance(error, ray.exceptions.RayActorError):
            # A board gone went with its queue (nothing to forget); a live one that
            # failed: it follows the log anyway (the hint only hastened it).
            logger.warning(
                "task queue %s: the task board was not hinted of acknowledged tasks: %s",
                self._queue_name,
                getattr(error, "cause", None) or type(error).__name__,
            )

    def _log_answer(self, call: Callable[[], Any]) -> Any:
        """``call``'s answer (a call to the task log's channel); while the channel
        restarts it waits (Ray retries it), up to ``BOARD_WAIT`` seconds, then
        ChannelUnavailableError."""
        try:
            return call()
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError) as error:
            raise ChannelUnavailableError(
                f"the task log of queue {self._queue_name!r} did not answer within "
                f"{BOARD_WAIT:.0f} s ({type(error).__name__})"
            ) from None

    def _ask_board(self, method: str, *args: Any) -> Any:
        """The board's answer; while it restarts the call waits (Ray retries it), up
        to ``BOARD_WAIT`` seconds, then ChannelUnavailableError."""
        return self._board_answer(getattr(self._task_board(), method).remote(*args))

    def _board_answer(self, ref: ray.ObjectRef) -> Any:
        """The answer of a call to the board, as :meth:`_ask_board` waits for it: a
        raytopic error the board raised as itself; a board whose constructor raised as
        TaskBoardStartError (saying why); a board killed for good (only a ``destroy()``
        does) as TopicNotFoundError; one that did not read the task log in time (its
        channel restarting) as ChannelUnavailableError, never Ray's wrapper."""
        try:
            with unwrap_ray_error():
                return ray.get(ref, timeout=BOARD_WAIT)
        except ray.exceptions.ActorDiedError as error:  # (a restart is waited out: Ray retries)
            if error.actor_init_failed:  # not restarted: Ray gives up on such an actor
                raise TaskBoardStartError(
                    f"the task board of queue {self._queue_name!r} failed to start: "
                    f"{_last_line(str(error))}"
                ) from None
            raise TopicNotFoundError(
                f"the task queue {self._queue_name!r} was deleted (its task board is gone)"
            ) from None
        except (
            ray.exceptions.GetTimeoutError,
            ray.exceptions.RayActorError,
            ray.exceptions.RayTaskError,
        ) as error:
            cause = getattr(error, "cause", None) or error
            raise ChannelUnavailableError(
                f"the task board of queue {self._queue_name!r} did not answer within "
                f"{BOARD_WAIT:.0f} s ({type(cause).__name__}: {cause})"
            ) from None

    # -- deleting ----------------------------------------------------------------------

    def destroy(self) -> None:
        """Delete the queue and everything it made: this replica's consumer stops, and
        the queue's topic, its task log (statuses and results), its failed- and
        unprocessable-task queues and its task board are destroyed, stored data
        included. Other replicas' consumers end with TopicNotFoundError. Idempotent, as
        a topic's ``destroy()`` is: a queue another replica deleted already is gone.
        """
        self.stop_consumer()
        self._task_log().close()
        board = self._task_board()
        with contextlib.suppress(TopicNotFoundError, TaskBoardStartError):  # (the log: below)
            self._board_answer(board.destroy.remote())
        ray.kill(board, no_restart=True)
        for topic in (*self._outlets.values(), self._topic):
            with contextlib.suppress(TopicNotFoundError):
                topic.destroy()
        with contextlib.suppress(TopicNotFoundError):  # a log the board never opened
            get_topic(task_log_name(self._queue_name), namespace=self._topic.namespace).destroy()

    # -- consuming ---------------------------------------------------------------------

    def start_consumer(self, **kwargs: Any) -> None:
        """Join the queue's group and run its tasks on a thread of this replica."""
        if self._consumer is not None and self._consumer.is_alive():
            return
        # A batch of 4 tasks a thread (Celery's prefetch), and room for the next while
        # the outcomes of the last are recorded and acknowledged (held till then).
        self._subscriber = self._queue().subscriber(
            group=CONSUMER_GROUP, mode="shared", window=2 * self._batch_size
        )
        self._pool = ThreadPoolExecutor(self._concurrency, thread_name_prefix="raytopic-task")
        self._acknowledger = ThreadPoolExecutor(1, thread_name_prefix="raytopic-ack")
        self._consumer = threading.Thread(target=self._consume, name="raytopic-tasks", daemon=True)
        self._holding = threading.Event()
        self._holder = threading.Thread(
            target=self._hold_running, args=(self._holding,), name="raytopic-hold", daemon=True
        )
        self._consumer.start()
        self._holder.start()

    def stop_consumer(self, timeout: float = 10.0) -> None:
        """Leave the group (what this replica holds goes to the others) once the
        outcomes on their way are recorded and acknowledged; wait for the thread up to
        ``timeout`` seconds (each)."""
        subscriber, consumer = self._subscriber, self._consumer
        acknowledging = [acked for _, acked in list(self._recording)]
        concurrent.futures.wait(acknowledging, timeout)  # else their tasks would go to others
        concurrent.futures.wait(list(self._acking), timeout)  # what they finished is not yet hinted
        self._send_hints()
        if subscriber is not None:
            subscriber.close()  # a waiting receive completes empty: the loop ends
        if consumer is not None:
            consumer.join(timeout)
        self._holding.set()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        if self._acknowledger is not None:
            self._acknowledger.shutdown(wait=False)
        with self._publish_lock:
            if self._publisher is not None:
                self._publisher.close()
                self._publisher = None

    def _consume(self) -> None:
        subscriber, queue = self._subscriber, self._queue()
        while subscriber.is_active:
            try:
                # A receive in flight when another replica deleted the queue may fail
                # with Ray's ActorDiedError: typed here, as the handle's own waits are.
                with topic_calls(queue.topic_id, queue.name):
                    batch = ray.get(subscriber.receive_batch(self._batch_size))
                if batch:
                    self._run_batch(list(batch))
            except PoisonElementError as error:  # the group gives it back; logged once
                logger.warning("task queue %s: %s", self._config.queue_name, error)
            except TopicNotFoundError:  # deleted (destroy() here or in another replica)
                logger.warning(
                    "task queue %s: the queue was deleted; this replica's consumer stops",
                    self._config.queue_name,
                )
                return
            except TopicError as error:
                if not subscriber.is_active:
                    return
                logger.warning("task queue %s: %s; trying again", self._config.queue_name, error)
                time.sleep(0.5)
            except Exception:  # never let the consumer die quietly
                logger.exception("task queue %s", self._config.queue_name)

    def _run_batch(self, batch: list[Any]) -> None:
        """Run a batch's tasks (those of one key in order, one after the other), holding
        them while they run; then finish each (record it, ack or nack it)."""
        outcomes: list[Outcome] = []
        runnable = []
        for element in batch:
            try:
                runnable.append((element, check_task(element.value)))
            except UnreadableTask as error:
                outcomes.append((element, None, REJECTED, error))
        self._until_recorded({task["id"] for _, task in runnable})
        log = self._task_log()
        started = {t["id"]: task_record(STARTED, None, t["created_at"]) for _, t in runnable}
        # Started unless finished or cancelled, decided at the log's channel (one call).
        refusing = self._log_answer(
            lambda: log.write_unless(started, "status", FINISHED, BOARD_WAIT)
        )
        by_key: dict[Any, list[tuple[Any, dict]]] = {}
        for element, task in runnable:
            if task["id"] in refusing:  # finished already, or cancelled: not run again
                outcomes.append((element, task, REVOKED, None))
                continue
            # Tasks of one key run one after the other, in order; unkeyed ones alone.
            key = task["key"] if task["key"] is not None else object()
            by_key.setdefault(key, []).append((element, task))
        self._running = batch  # held while its tasks run (_hold_running)
        try:
            if len(by_key) == 1 or self._concurrency == 1:
                # One thread's work runs here: a hand-off to the pool and back woke two
                # threads on each task's way (0.1-0.2 ms under load).
                outcomes += [out for tasks in by_key.values() for out in self._run_in_order(tasks)]
            else:
                assert self._pool is not None
                runs = [self._pool.submit(self._run_in_order, tasks) for tasks in by_key.values()]
                outcomes += [outcome for run in runs for outcome in run.result()]
        finally:
            self._running = None
        self._finish(outcomes, refusing)

    def _hold_running(self, stop: threading.Event) -> None:
        """Extend the running batch's ack deadlines every third of the ack_timeout
        (so only a replica that stopped answering loses its tasks), until ``stop``."""
        every = self._settings.ack_timeout / 3
        while not stop.wait(every):
            batch = self._running
            if batch is None:
                continue
            try:
                self._subscriber.extend_lease(batch)
            except TopicError as error:
                logger.warning("task queue %s: hold not extended: %s", self._queue_name, error)

    def _run_in_order(self, tasks: list[tuple[Any, dict]]) -> list[tuple[Any, dict, str, Any]]:
        """Run one key's tasks in order: (element, task, status, result or error)."""
        return [(element, task, *self._run_one(element, task)) for element, task in tasks]

    def _run_one(self, element: Any, task: dict) -> tuple[str, Any]:
        handler = self._handlers.get(task["name"])
        if handler is None:
            return REJECTED, f"no handler for task {task['name']!r}"
        try:
            args, kwargs = load_arguments(task)
        except UnreadableTask as error:
            return REJECTED, error
        attempts, most = element.delivery_count, self._max_retries
        if most is not None and attempts > most + 1:
            return FAILURE, f"delivered {attempts} times without an outcome (its replicas died)"
        try:
            result = handler(*args, **kwargs)
            if asyncio.iscoroutine(result):
                result = asyncio.run(result)
        except BaseException as error:  # SystemExit too: it costs its task, not the consumer
            again = most is None or attempts <= most
            logger.warning(
                "task %s (%s) failed on attempt %d%s: %r; %s",
                task["id"],
                task["name"],
                attempts,
                "" if most is None else f" of {most + 1}",
                error,
                "it runs again" if again else "no attempt left: FAILURE",
            )
            return (RETRY if again else FAILURE), repr(error)
        return SUCCESS, result

    def _until_recorded(self, task_ids: set[str]) -> None:
        """Wait for the outcomes on their way to the task log if one is of these tasks (a
        task enqueued again under its id finds its first outcome recorded)."""
        self._recording = [(ids, done) for ids, done in self._recording if not done.done()]
        if any(not ids.isdisjoint(task_ids) for ids, _ in self._recording):
            concurrent.futures.wait([self._recording[-1][1]])  # recorded in order

    def _finish(
        self, outcomes: list[tuple[Any, Any, str, Any]], refusing: dict[str, dict[str, Any]]
    ) -> None:
        """Move failed and unprocessable tasks to their queues and send the outcomes to
        the task log; the acknowledging thread waits for them to be held, then acknowledges
        what finished and nacks the retries (after their backoff), while this thread
        receives and starts the next batch.

        A moved task is recorded after its move: a replica that dies between the two
        moves it again when the task comes back (at least once, never lost). A cancelled
        task passed over for the first time gets its REVOKED record again, naming its
        element: the board may forget it once that is acknowledged (before, the task
        may still wait in the queue).
        """
        config = self._config
        recorded: dict[str, dict[str, Any]] = {}
        passed: dict[str, dict[str, Any]] = {}  # cancelled, passed over here first
        retries, done = [], []
        for element, task, status, result in outcomes:
            if status == RETRY:
                retries.append(element)
                recorded[task["id"]] = task_record(RETRY, None, task["created_at"])
                continue
            done.append(element)
            refused = None if task is None else refusing.get(task["id"])
            if refused is not None:  # its outcome is on the task log already
                if refused["status"] == REVOKED and refused.get("element") is None:
                    passed[task["id"]] = task_record(REVOKED, None, task["created_at"], element)
                continue
            queue = {
                FAILURE: config.failed_task_queue_name,
                REJECTED: config.unprocessable_task_queue_name,
            }.get(status)
            if queue is not None:
                attempts = element.delivery_count
                entry = (
                    queue_entry(task, result, attempts)
                    if task is not None
                    else stray_entry(element.value, result, attempts)
                )
                self._move(queue, entry)
            if task is not None:
                kept = result if status == SUCCESS else None if status == REVOKED else str(result)
                recorded[task["id"]] = task_record(status, kept, task["created_at"], element)
        # Sent from here, in order (each unless its task has one: a task delivered again
        # after a crash may report twice); the acknowledging thread waits for it.
        log = self._task_log()
        sent = [log.send_unless(recorded, "status", FINISHED)] if recorded else []
        if passed:  # (a REVOKED record is replaced by one naming the element only)
            sent.append(log.send_unless(passed, "status", FINISHED - {REVOKED}))
        assert self._acknowledger is not None
        acked = self._acknowledger.submit(self._acknowledge_once_held, sent, done, retries)
        self._recording.append((set(recorded), acked))

    def _acknowledge_once_held(self, sent: list[WriteUnless], done: list, retries: list) -> None:
        """Wait for the outcomes' writes to the task log (``sent``), then acknowledge
        what finished (``done``) and nack the retries: a task is acknowledged only once
        its outcome is held. The board is hinted of the elements whose ack is answered
        ACKED, soon, not waited for (it counts a finished task once its element is
        acknowledged: a task whose ack is lost comes back, and forgotten meanwhile past
        results_kept, it would find no record to be passed over by)."""
        try:
            for write in sent:
                self._log_answer(functools.partial(write.refused, BOARD_WAIT))
            if done:
                # Not waited for. An ack that fails leaves its tasks to come back after
                # ack_timeout, and their start passes them over (their outcomes are
                # recorded): logged, never run again.
                answered: concurrent.futures.Future = concurrent.futures.Future()
                self._acking = [acking for acking in self._acking if not acking.done()]
                self._acking.append(answered)
                self._subscriber.ack_async(done).future().add_done_callback(
                    lambda acked: self._acked(acked, done, answered)
                )
            for element in retries:
                delay = self._settings.retry_backoff_s * 2 ** (element.delivery_count - 1)
                self._subscriber.nack([element], delay=min(BACKOFF_MOST, delay))
        except Exception:  # not recorded: the tasks come back after ack_timeout
            logger.exception("task queue %s: outcomes not recorded", self._queue_name)

    def _acked(
        self, acked: concurrent.futures.Future, done: list, answered: concurrent.futures.Future
    ) -> None:
        """Hint the board of the elements whose ack was answered ACKED; then ``answered``."""
        try:
            if acked.exception() is not None:
                logger.warning(
                    "task queue %s: ack failed (the tasks come back and are passed over): %r",
                    self._queue_name,
                    acked.exception(),
                )
                return
            statuses = acked.result()
            elements = [
                (element.channel, element.sequence)
                for element, status in zip(done, statuses, strict=True)
                if status is AckStatus.ACKED
            ]
            if elements:
                self._hint_soon(elements)
        finally:
            answered.set_result(None)

    def _move(self, queue: str, entry: dict[str, Any]) -> None:
        with self._outlets[queue].publisher() as publisher:
            publisher.publish(entry).result()

    # -- observing ---------------------------------------------------------------------

    def get_metrics_sync(self) -> dict[str, Any]:
        """The queue's lag (tasks not yet acknowledged), tasks by status, and the
        failed and unprocessable queues' sizes."""
        stats = self._queue().describe().groups[CONSUMER_GROUP]
        metrics = {
            "queue": self._config.queue_name,
            "lag": stats.lag,
            "depth": stats.depth,
            "redelivered": stats.redelivered,
            "tasks": self._ask_board("counts", BOARD_WAIT / 2),  # the board answers first
        }
        for name, topic in self._outlets.items():
            metrics[name] = sum(channel.size or 0 for channel in topic.describe().channels)
        return metrics

    async def get_metrics_async(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.get_metrics_sync)

    def health_check_sync(self) -> list[dict[str, Any]]:
        """``[{"raytopic@<queue>": {"ok": "pong"}}]`` while the consumer runs and the
        queue answers (else the error)."""
        name = f"raytopic@{self._config.queue_name}"
        try:
            self._queue().describe()
        except Exception as error:
            return [{name: {"error": repr(error)}}]
        if self._consumer is not None and not self._consumer.is_alive():
            return [{name: {"error": "the consumer thread ended"}}]
        return [{name: {"ok": "pong"}}]

    async def health_check_async(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.health_check_sync)


def _check_task_id(task_id: object) -> None:
    if not isinstance(task_id, str):
        raise InvalidTypeError(f"task_id must be a str, got {type(task_id).__name__}")


def _last_line(text: str) -> str:
    """The last line of a Ray error's text with a traceback (the exception itself)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else text
