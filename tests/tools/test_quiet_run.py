"""A first run prints raytopic's own lines (issue 50, item 5): an iteration left with
``break`` before its topic is destroyed leaves no "Unhandled error" behind (the receives
it kept in flight failed with the destroy: raytopic reads them, not Ray's report of refs
nobody read), and the tools hold Ray's reports of a kill they make on purpose off. That
``raytopic demo`` leaves out the start-up lines of the Ray it starts is checked on the
demo's one run from a fresh environment (tests/bridge/test_spark_session.py)."""

from __future__ import annotations

import pytest

from tests.script_runner import run_apart

BREAK_THEN_DESTROY = """
import gc
import time
import uuid

import ray
import raytopic as rt

ray.init()  # the session's cluster, at RAY_ADDRESS
for closed in (True, False):
    topic = rt.create_topic(f"quiet-{uuid.uuid4().hex[:8]}", channels=2)
    with topic.publisher() as publisher:
        for n in range(100):
            publisher.publish(n)
    subscriber = topic.subscriber(start="earliest")
    for element in subscriber:  # receives stay in flight at both channels
        break
    if closed:
        subscriber.close()
    topic.destroy()  # they fail with TopicNotFoundError
    del subscriber, element
    gc.collect()
time.sleep(3)  # Ray reports a failed ref nobody read a moment after the ref goes
print("done")
"""


def test_an_iteration_left_with_break_leaves_nothing_behind_after_a_destroy(
    ray_cluster: str, tmp_path
) -> None:
    done = run_apart(BREAK_THEN_DESTROY, ray_cluster, tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["done"]
    assert "Unhandled error" not in done.stderr, done.stderr[-3000:]


def test_the_tools_hold_ray_s_reports_of_a_kill_off_while_they_kill() -> None:
    """``raytopic demo`` and ``bench`` kill a channel on purpose inside
    ``worker_death_reports_off``: this process prints no worker's report meanwhile
    (Ray's report names the OOM killer, and reads as a crash), then prints them again,
    also when the block raises."""
    import ray._private.worker as ray_worker

    from raytopic.tools.quiet_kills import worker_death_reports_off

    assert ray_worker._worker_logs_enabled
    with worker_death_reports_off():
        assert not ray_worker._worker_logs_enabled
    assert ray_worker._worker_logs_enabled
    with pytest.raises(KeyError), worker_death_reports_off():
        raise KeyError("the kill failed")
    assert ray_worker._worker_logs_enabled
