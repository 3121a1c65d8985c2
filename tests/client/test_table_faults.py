"""Table views under faults, against a real Ray: channels SIGKILLed (their pids from
``describe()``) under a live view, while publishers keep publishing."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

import raytopic as rt

from tests.topic_helpers import TIMEOUT, kill_channel, serving_again

RESTART_BOUND = 10.0
"""Seconds a killed channel may take to serve again."""
KEYS = 20


@pytest.mark.slow
def test_channels_killed_under_a_live_view_cost_it_nothing(
    make_topic: Callable[..., rt.Topic], tmp_path: Path, wait_until
) -> None:
    topic = make_topic(channels=2, store=str(tmp_path))
    view = topic.table()
    heard: dict[str, list[int]] = defaultdict(list)
    view.listen(lambda key, value: heard[key].append(value["v"]))
    acknowledged: dict[str, set[int]] = defaultdict(set)
    attempted: dict[str, set[int]] = defaultdict(set)
    versions = [0]
    stop = threading.Event()

    def publish() -> None:
        with topic.publisher(linger=0.002) as publisher:
            while not stop.is_set():
                version = versions[0]
                futures = []
                for k in range(KEYS):
                    attempted[f"k{k}"].add(version)
                    futures.append((f"k{k}", publisher.publish({"v": version}, key=f"k{k}")))
                for key, future in futures:
                    try:
                        future.result(timeout=60)
                        acknowledged[key].add(version)
                    except Exception as error:  # indeterminate: it may be in the log or not
                        print("publish failed:", type(error).__name__, error)
                versions[0] += 1

    publisher = threading.Thread(target=publish)
    publisher.start()
    try:
        for channel in (0, 1, 0):  # each channel, and one of them again after its restart
            floor = versions[0] + 20
            wait_until(lambda floor=floor: versions[0] >= floor, TIMEOUT, interval=0.02)
            old_epoch = kill_channel(topic, channel)
            serving_again(topic, channel, old_epoch, RESTART_BOUND)
    finally:
        stop.set()
        publisher.join(timeout=120)
    view.refresh()
    assert versions[0] > 60
    for k in range(KEYS):
        key = f"k{k}"
        got = heard[key]
        # In order, each version once (a reader that resumed may read some again:
        # the view applies each position once), and every acknowledged one heard.
        assert got == sorted(set(got)), (key, got)
        assert acknowledged[key] <= set(got) <= attempted[key], key
        assert view[key]["v"] == got[-1] >= max(acknowledged[key]), key
    # A view made now, from what the channels kept, holds the same.
    with topic.table() as fresh:
        assert dict(fresh.items()) == dict(view.items())
    view.close()
