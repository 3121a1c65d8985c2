"""Ray Serve's asynchronous inference with topics as the broker (``pip install
raytopic[serve]``): no Redis, RabbitMQ or Celery process.

:class:`TopicTaskAdapter` is a Ray Serve ``TaskProcessorAdapter``: give it as the
``adapter`` of a ``TaskProcessorConfig`` and a ``@task_consumer`` deployment takes
its tasks from a topic.

- **Queues**: the task queue is a topic named ``queue_name``, read by a shared
  group (any replica takes any task; ``ordering="key"``), and the failed- and
  unprocessable-task queues are topics of their own names (one retained
  channel each), holding ``{"id", "name", "args", "kwargs", "error",
  "attempts", "payload"}`` entries.
- **Enqueue**: one publish (acknowledged before ``enqueue_task_sync`` returns);
  ``key=`` in the options routes the task by key: tasks of one key run one at
  a time, in enqueue order; ``task_id=`` names it.
- **Status and result** by task id, on the queue's task log (a compacted
  topic, ``<queue>.tasks``), whose channel decides each change in one step
  (``raytopic.serve.board``): ``PENDING`` for an id no replica has started
  (as Celery answers), ``STARTED``, ``RETRY``, ``SUCCESS``, ``FAILURE``,
  ``REJECTED`` (unprocessable), ``REVOKED``. A finished status stays, and a
  replica does not run a finished task; a status read learns the tasks
  changed since the last one, so the adapter answers for those finished
  without a call (``raytopic.serve.statuses``). A small detached actor per
  queue (``raytopic.serve.board_actor``) forgets past ``results_kept``.
- **Retries**: a handler that raises is delivered again (to any replica) after
  ``retry_backoff_s``, doubling up to a minute, until ``max_retries``; then
  the task goes to the failed-task queue. A replica that dies with tasks in
  hand: they are delivered again after the group's ``ack_timeout`` (a live
  replica keeps extending its hold while a task runs), and a task delivered
  more than ``max_retries + 1`` times without an outcome goes to the
  failed-task queue too.
- **Unprocessable**: a task no handler takes, whose arguments do not load in
  the replica, or an element that is no task: the unprocessable-task queue.
- **Cancel**: a task not yet started is not run by any replica (``REVOKED``).
- **Health and metrics**: ``health_check_sync``, ``get_metrics_sync`` (lag,
  tasks by status, the failed and unprocessable queues' sizes).

:class:`LagPolicy` scales a Serve deployment by a group's lag (a Serve
``AutoscalingPolicy`` class), with :class:`~raytopic.core.scaling.ScaleRule`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time, _EXPORTS
    from raytopic.serve.adapter import (
        CONSUMER_GROUP,
        TaskBoardStartError,
        TopicAdapterConfig,
        TopicTaskAdapter,
    )
    from raytopic.serve.policy import LagPolicy

__all__ = [
    "CONSUMER_GROUP",
    "LagPolicy",
    "TaskBoardStartError",
    "TopicAdapterConfig",
    "TopicTaskAdapter",
]

_EXPORTS = {
    "CONSUMER_GROUP": "raytopic.serve.adapter",
    "LagPolicy": "raytopic.serve.policy",
    "TaskBoardStartError": "raytopic.serve.adapter",
    "TopicAdapterConfig": "raytopic.serve.adapter",
    "TopicTaskAdapter": "raytopic.serve.adapter",
}
"""Where each name lives. Imported on first use: the task board's actor process
(``raytopic.serve.board_actor``) runs none of them, and the adapter's module imports
Ray Serve (with FastAPI, pandas, gRPC: about 0.6 CPU-s more per board process)."""


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'raytopic.serve' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
