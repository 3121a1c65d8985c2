"""A queue's task board (``raytopic.serve.board_actor``) on a real Ray: an idle board
looks at its task log less and less often, and a hint makes it busy again; a board
that failed to start is a typed error saying why, not "queue deleted"."""

from __future__ import annotations

import operator
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.serve.schema import TaskProcessorConfig

import raytopic as rt
from raytopic.serve import TaskBoardStartError, TopicAdapterConfig, TopicTaskAdapter
from raytopic.serve.adapter import board_name
from raytopic.serve.board_actor import FOLLOW_EVERY, FOLLOW_MOST, TaskBoardActor, follow_pause

pytestmark = pytest.mark.xdist_group("serve")

WAIT = 120.0


def test_an_idle_boards_pause_doubles_up_to_a_minute() -> None:
    assert [follow_pause(looks) for looks in range(7)] == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert follow_pause(0) == FOLLOW_EVERY and follow_pause(10**6) == FOLLOW_MOST


def _idle_looks(board: Any) -> int:
    return ray.get(board.__ray_call__.remote(lambda actor: actor._idle_looks), timeout=WAIT)


def test_an_idle_board_looks_less_often_and_a_finished_task_makes_it_busy_again(
    ray_session: None, tmp_path: Path, wait_until: Any
) -> None:
    # Before: a board looked at its task log every 2 s for ever, for a queue with no
    # task as for one that went away without destroy(). Now each look that finds
    # nothing to do doubles the pause (at most FOLLOW_MOST); a replica's hint wakes it.
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    adapter = TopicTaskAdapter(
        TaskProcessorConfig(
            queue_name=queue,
            adapter=TopicTaskAdapter,
            adapter_config=TopicAdapterConfig(namespace=namespace, store=str(tmp_path)),
        )
    )
    adapter.initialize()
    board = ray.get_actor(board_name(queue), namespace=namespace)
    try:
        wait_until(lambda: _idle_looks(board) >= 2, timeout=WAIT)  # paused 4 s, then 8 s
        adapter.register_task_handle(lambda: "done", "work")
        adapter.start_consumer()
        task = adapter.enqueue_task_sync("work").id
        wait_until(lambda: adapter.get_task_status_sync(task).status == "SUCCESS", timeout=WAIT)
        # Its replica's hint (the ack answered) woke it: the look found the task.
        wait_until(lambda: _idle_looks(board) == 0, timeout=WAIT)
    finally:
        adapter.destroy()


class _Unloadable:
    """Pickles, but raises where it is loaded."""

    def __reduce__(self) -> tuple[object, tuple[int, int]]:
        return operator.truediv, (1, 0)


def test_a_board_that_failed_to_start_is_a_typed_error_saying_why(ray_session: None) -> None:
    # Before: Ray's ActorDiedError of a board whose constructor raised read as "the task
    # queue was deleted" (TopicNotFoundError). Ray does not restart such an actor.
    queue, namespace = f"q-{uuid.uuid4().hex[:6]}", f"serve-{uuid.uuid4().hex[:6]}"
    adapter = TopicTaskAdapter(
        TaskProcessorConfig(
            queue_name=queue,
            adapter=TopicTaskAdapter,
            adapter_config=TopicAdapterConfig(namespace=namespace),
        )
    )
    # A board that cannot start (an argument that does not load in its process, as on a
    # node that cannot import what it needs), as the adapter's calls meet it.
    board = (
        ray.remote(TaskBoardActor)
        .options(name=board_name(queue), namespace=namespace, max_restarts=-1, num_cpus=0)
        .remote(queue, namespace, _Unloadable(), 1)
    )
    with pytest.raises(TaskBoardStartError, match=r"failed to start.*ZeroDivisionError") as raised:
        adapter._board_answer(board.ready.remote())
    assert isinstance(raised.value, rt.ChannelUnavailableError)
    assert not isinstance(raised.value, rt.TopicNotFoundError)
