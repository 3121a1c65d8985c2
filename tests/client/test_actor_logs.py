"""raytopic's INFO lines reach its actors' logs (issue 52 item 4): Ray leaves a
worker's Python logging at WARNING, which dropped every rebalance, timeout and
reset line the docs promise (docs/guides/metrics.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import ray
from ray.data._internal.logging import get_log_directory

import raytopic as rt

from tests.session_logs import worker_output_lines


def _worker_logs_saying(*texts: str) -> list[str]:
    """Lines of the session's worker logs holding every one of ``texts``."""
    logs = Path(get_log_directory()).parent
    return [
        line.rstrip("\n")
        for _, line in worker_output_lines(logs)
        if all(text in line for text in texts)
    ]


@ray.remote
class _Member:
    """A group member in a process of its own (killed: its heartbeats stop)."""

    def __init__(self, topic: rt.Topic) -> None:
        self.member = topic.subscriber(group="g", timeout=1.0)

    def ready(self) -> bool:
        return True


def test_a_departure_and_a_rebalance_are_info_lines_in_the_coordinators_log(
    make_topic: Callable[..., rt.Topic], wait_until: Callable[..., object]
) -> None:
    topic = make_topic(channels=2)
    member = _Member.remote(topic)
    assert ray.get(member.ready.remote(), timeout=60)
    ray.kill(member)
    wait_until(lambda: not topic.describe().groups["g"].members, timeout=30.0)

    def departed() -> bool:  # its timeout (1 s) or Ray saying its actor died, whichever is first
        return bool(
            _worker_logs_saying("INFO", topic.name, "timed out")
            or _worker_logs_saying("INFO", topic.name, "leaves: ")
        )

    deadline = time.monotonic() + 30.0
    while not departed():
        assert time.monotonic() < deadline, "no INFO line of the departure"  # before: none
        time.sleep(0.5)
    assert _worker_logs_saying("INFO", topic.name, "channels moved")  # the join
