"""The ``raytopic`` command, run as a real process against the session's cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import raytopic as rt


def _raytopic(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    command = shutil.which("raytopic") or sys.executable
    prefix = [] if command.endswith("raytopic") else ["-m", "raytopic.cli"]
    return subprocess.run(
        [command, *prefix, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
        check=False,
    )


@pytest.mark.slow
def test_the_spark_demo_runs_end_to_end_with_its_faults_and_passes_its_check(
    ray_cluster: str,
) -> None:
    result = _raytopic("demo", "--rows", "20000", "--address", ray_cluster, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "published 20,000 orders" in out
    assert "Spark stopped: the topic holds the orders" in out
    assert "killed consumer 0" in out and "killed channel 0" in out
    assert "channel 0 is back at epoch" in out
    assert "lost = 0; group lag = 0" in out
    assert "verdict: PASS: totals of 1000 customers match" in out


def test_the_python_demo_runs_without_spark(ray_cluster: str) -> None:
    result = _raytopic("demo", "--rows", "3000", "--no-spark", "--address", ray_cluster)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "published 3,000 orders" in result.stdout
    assert "verdict: PASS" in result.stdout


def test_bench_prints_every_figure_with_its_baseline(ray_cluster: str) -> None:
    result = _raytopic(
        "bench",
        "--messages", "3000",
        "--channels", "2",
        "--latency-samples", "20",
        "--repeat", "1",
        "--memory-elements", "2000",
        "--address", ray_cluster,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for case in (
        "queue: batch put/get",
        "topic: publish() -> iterate, 2 channel(s)",
        "topic: publish() -> iterate, 1 channel(s)",
        "queue: put -> waiting get, p50",
        "topic: publish -> waiting receive, 2 channel(s), p50",
        "channel RSS holding 2,000 elements",
        "group: 2 members, commit per batch",
        "group: close -> full reassignment",
    ):
        assert any(line.startswith(case) for line in lines), case
    throughput = next(line for line in lines if line.startswith("topic: publish() -> iterate, 2"))
    assert "x queue batch" in throughput


def test_list_and_describe_show_a_topic(make_topic, ray_cluster: str) -> None:
    topic = make_topic(channels=2, groups=["audit"])
    with topic.publisher() as publisher:
        publisher.publish({"n": 1}, key="k")

    listed = _raytopic("list", "--json", "--address", ray_cluster)
    described = _raytopic("describe", topic.name, "--json", "--address", ray_cluster)

    assert listed.returncode == 0, listed.stderr
    assert topic.name in json.loads(listed.stdout)
    assert described.returncode == 0, described.stderr
    stats = json.loads(described.stdout)
    assert [c["channel"] for c in stats["channels"]] == [0, 1]
    assert sum(c["size"] for c in stats["channels"]) == 1
    assert "audit" in stats["groups"]


def test_describe_of_a_missing_topic_exits_2(ray_session: None, ray_cluster: str) -> None:
    result = _raytopic("describe", "no-such-topic-here", "--address", ray_cluster)
    assert result.returncode == 2
    assert "no topic 'no-such-topic-here'" in result.stderr


@pytest.mark.parametrize("args", [["nonsense"], ["describe"]])
def test_bad_usage_exits_2(args: list[str]) -> None:
    result = _raytopic(*args)
    assert result.returncode == 2


def test_list_is_empty_json_in_an_unused_namespace(ray_session: None, ray_cluster: str) -> None:
    result = _raytopic(
        "list", "--json", "--namespace", "nobody-uses-this", "--address", ray_cluster
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
    assert rt.list_topics(namespace="nobody-uses-this") == []


@pytest.mark.slow
def test_bench_spark_prints_the_bridge_figures_against_raydp(ray_cluster: str) -> None:
    result = _raytopic(
        "bench", "--spark", "--messages", "5000", "--repeat", "1", "--address", ray_cluster,
        timeout=400,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    for case, baseline in (
        ("publish_dataframe (Spark tasks append, mapInArrow)", "x RayDP from_spark"),
        ("publish via RayDP blocks + Ray Data write_topic", "x RayDP from_spark"),
        ("read_topic(spark) -> aggregate", "x from_arrow.to_spark"),
        ("driver RSS growth over publish_dataframe", ""),
    ):
        line = next((line for line in lines if line.startswith(case)), None)
        assert line is not None, case
        assert baseline in line
