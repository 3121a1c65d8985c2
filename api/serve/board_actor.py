"""A queue's task board: a small detached Ray actor off the tasks' path, which makes
the queue's task log (a compacted topic keyed by task id,
``raytopic.client.control_log``), forgets the oldest finished tasks past
``results_kept`` (deletes their records), counts tasks by status and destroys the
log with the queue.

A task's start, outcome and cancel are conditional writes decided at the log's
channel, and a status read is answered there (``raytopic.serve.board``): no call
of a task's walk goes through this actor. It follows the log: every ``FOLLOW_EVERY``
seconds while it finds something to do (less and less often, up to ``FOLLOW_MOST``,
while it does not: an idle queue costs a look a minute), and at once when a replica
hints (``acked``), it reads the records changed since it last looked (the whole log
when it (re)starts, or when the log's channel restarted), so what the log holds is
what it knows, whoever wrote it. A hint lost (its replica killed) costs time only, at
most ``FOLLOW_MOST``. A finished
task counts once its queue element is acknowledged (``raytopic.serve.board.TaskBook``):
the queue group's floor passed it (asked of the queue's channels while tasks are held
back), or a replica's hint named it (its ack was answered ACKED; a hint lost costs
only time).

Nothing is lost to a failure here: a look that fails (the log's channel restarts, a
read takes longer than ``LOAD_TIMEOUT``) is logged and tried again at the next, and
the hints it did not use and the deletes not held wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from typing import Any

import ray

from raytopic.client.control_log import LOAD_TIMEOUT, ControlLog, ControlLogLoader
from raytopic.client.topic import Topic, getting
from raytopic.core.errors import TopicError
from raytopic.core.protocol import ReadGroupCursors
from raytopic.core.steps import run_awaiting
from raytopic.serve.board import CONSUMER_GROUP, TaskBook

logger = logging.getLogger(__name__)

__all__ = ["FOLLOW_EVERY", "FOLLOW_MOST", "TaskBoardActor", "follow_pause", "task_log_name"]

FOLLOW_EVERY = 2.0
"""Seconds between a board's looks at its task log when no replica hints sooner (a
replica killed before its hint, a look that failed), while its queue is busy."""

FOLLOW_MOST = 60.0
"""Longest pause between the looks of an idle board (the pause doubles from
``FOLLOW_EVERY`` with each look that found nothing to do); a hint wakes it at once."""

CHANGES_READ = 10_000
"""Changed tasks a look reads at most per log channel (more since the last look: the
whole log is read)."""


def follow_pause(idle_looks: int) -> float:
    """Seconds to the next look after ``idle_looks`` looks in a row found nothing to do
    (no change on the log, no hint, nothing held back or being forgotten): 2, 4, 8, ...
    at most ``FOLLOW_MOST``."""
    return min(FOLLOW_EVERY * 2 ** min(idle_looks, 16), FOLLOW_MOST)


def task_log_name(queue: str) -> str:
    """The compacted topic that keeps a queue's task statuses and results."""
    return f"{queue}.tasks"


class TaskBoardActor:
    """The board of one queue (a Ray actor; see the module docstring).

    Args:
        queue: The queue's name.
        namespace: The queue's Ray namespace.
        store: The task log's store (the queue's; None: the Ray session's directory).
        kept: Finished tasks kept at most (the oldest finished go first).
    """

    def __init__(self, queue: str, namespace: str, store: Any, kept: int) -> None:
        self._queue, self._namespace = queue, namespace
        self._book = TaskBook(kept)
        self._control = ControlLogLoader(task_log_name(queue), namespace, store)
        self._queue_topic: Topic | None = None  # found at the first floors' read
        self._marks: dict[int, tuple[str, int]] = {}  # where the last look read to
        self._hints: set[tuple[int, int]] = set()  # queue elements acked, not applied yet
        self._hinted = asyncio.Event()  # a hint came: look now
        self._failing = False  # the last look failed (said once)
        self._idle_looks = 0  # looks in a row that found nothing to do (the pause grows)
        self._following: asyncio.Task[None] | None = None
        self._deleting = False  # destroy() began: the log goes whole, nothing to follow
        # A board restarted by Ray follows its log at once, not at a caller's first call.
        ray.get_runtime_context().current_actor.follow.remote()

    async def follow(self) -> None:
        """Start following the task log (unless it is followed already)."""
        if self._following is None and not self._deleting:
            self._following = asyncio.get_running_loop().create_task(self._follow())

    async def acked(self, elements: list[tuple[int, int]]) -> None:
        """A replica's hint: these queue elements' acks were answered ACKED (their
        outcomes are on the log): look now, and count those tasks."""
        self._hints.update((int(channel), int(sequence)) for channel, sequence in elements)
        self._hinted.set()
        await self.follow()

    async def _follow(self) -> None:
        """Look at the log every ``FOLLOW_EVERY`` seconds while there is something to do,
        less and less often while there is not (``follow_pause``), at once after a hint."""
        while True:
            self._hinted.clear()
            try:
                idle = await self._look()
                self._failing = False
            except Exception as error:  # never let the following end quietly
                idle = False
                (logger.info if self._failing else logger.warning)(
                    "task queue %s: the task log not followed (tried again in %.0f s): %r",
                    self._queue,
                    FOLLOW_EVERY,
                    error,
                )
                self._failing = True
            self._idle_looks = self._idle_looks + 1 if idle else 0
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(follow_pause(self._idle_looks)):
                    await self._hinted.wait()

    async def _look(self) -> bool:
        """Read what changed on the log since the last look, count what was
        acknowledged and delete what is forgotten past ``kept``; return whether it found
        nothing to do (no change, no hint, nothing held back or being forgotten)."""
        log = await self._control.opened()
        hints, self._hints = self._hints, set()
        try:
            read = await run_awaiting(log.changing(self._marks, CHANGES_READ))
            if read.reset:  # first look, the log's channel restarted, or too far behind
                self._book.reloaded(await run_awaiting(log.loading()))
            else:
                self._book.seen(read.changed)
            self._marks = read.marks
        except BaseException:
            self._hints |= hints  # for the next look
            raise
        self._book.acked(hints)  # what is not on the log held back: of no task kept
        try:
            await self._read_floors()
        finally:  # what is forgotten already goes, whatever the floors' read did
            forgetting = self._book.forget()
            async with asyncio.timeout(LOAD_TIMEOUT):
                await self._delete(log, forgetting)
        return not (read.reset or read.changed or hints or forgetting or self._book.held_back)

    async def _read_floors(self) -> None:
        """Count the held-back tasks the queue's group floor passed (one call per queue
        channel with some; none while none is held back)."""
        channels = sorted(self._book.held_back)
        if not channels:
            return
        try:
            async with asyncio.timeout(LOAD_TIMEOUT):  # a stuck channel stops no look
                if self._queue_topic is None:
                    self._queue_topic = await run_awaiting(getting(self._queue, self._namespace))
                actors = self._queue_topic._channel_actors
                cursors = await asyncio.gather(
                    *(actors[c].control.remote(ReadGroupCursors()) for c in channels)
                )
        except (TopicError, ray.exceptions.RayActorError, TimeoutError) as error:  # next look
            logger.info("task queue %s: acknowledged tasks not read: %s", self._queue, error)
            return
        self._book.floors(
            {
                channel: cursor[CONSUMER_GROUP]["committed"]
                for channel, cursor in zip(channels, cursors, strict=True)
                if CONSUMER_GROUP in cursor
            }
        )

    async def _delete(self, log: ControlLog, forgetting: list[str]) -> None:
        """Delete the forgotten tasks' records; answered once the deletes are held (a
        failed one is sent again at the next look, until the log shows it gone)."""
        deletes = await asyncio.gather(
            *(asyncio.wrap_future(log.delete(task)) for task in forgetting),
            return_exceptions=True,
        )
        for deleted in deletes:
            if isinstance(deleted, BaseException):
                raise deleted

    async def ready(self) -> None:
        """Answer once the task log is made."""
        await self._control.opened()
        await self.follow()

    async def counts(self, timeout: float = LOAD_TIMEOUT) -> dict[str, int]:
        """Tasks by status, as the task log holds them (read within ``timeout``)."""
        await self.follow()
        log = await self._control.opened()
        records = await run_awaiting(log.loading(timeout))
        return dict(Counter(record["status"] for record in records.values()))

    async def destroy(self) -> None:
        """Destroy the task log (the queue is being deleted)."""
        self._deleting = True
        if self._following is not None:
            self._following.cancel()
        log = await self._control.opened()
        log.close()
        await run_awaiting(log.topic.destroying())
