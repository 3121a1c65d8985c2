"""The ``raytopic`` command against the session's cluster: as a real process where
being one is the point (the demo, exit codes, a cluster that does not answer),
else in this process through the same ``main`` (a process costs seconds to
import Ray and connect; ``main`` keeps this process's connection).

Token handling, which needs a process without the session's settings, is
tested in tests/client/test_cluster.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

import raytopic as rt
from raytopic.tools.cli import _parse, main

from tests.topic_helpers import get, publish_all


def _raytopic(
    *args: str, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = shutil.which("raytopic") or sys.executable
    prefix = [] if command.endswith("raytopic") else ["-m", "raytopic.cli"]
    return subprocess.run(
        [command, *prefix, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _in_process(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """``raytopic args`` run by ``main`` in this process (joined to the session's
    cluster already), with what it printed and the exit code the command has."""
    capsys.readouterr()  # only what this command prints
    try:
        code = main(list(args))
    except SystemExit as exited:  # argparse's usage errors
        code = exited.code
    out, err = capsys.readouterr()
    if isinstance(code, str):  # SystemExit("message"): the process prints it, exit 1
        code, err = 1, err + code + "\n"
    return subprocess.CompletedProcess(list(args), int(code or 0), out, err)


def test_the_python_demo_runs_without_spark(ray_cluster: str) -> None:
    result = _raytopic("demo", "--rows", "3000", "--no-spark", "--address", ray_cluster)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "published 3,000 orders" in result.stdout
    assert "verdict: PASS" in result.stdout
    _says_in_its_own_words_that_it_kills_a_channel(result)


def _says_in_its_own_words_that_it_kills_a_channel(
    result: subprocess.CompletedProcess[str],
) -> None:
    # First, that the kill is on purpose: Ray's report of the killed worker names the
    # OOM killer (the demo kills inside worker_death_reports_off, which holds Ray's
    # reports off: tests/tools/test_quiet_run.py checks it, not Ray's lines here).
    lines = result.stdout.splitlines()
    announced = next(i for i, line in enumerate(lines) if "killing channel 0 on purpose" in line)
    killed = next(i for i, line in enumerate(lines) if line.startswith("killed channel 0"))
    back = next(i for i, line in enumerate(lines) if line.startswith("channel 0 is back"))
    assert announced < killed < back


def test_bench_prints_figures_with_baselines_verdicts_and_a_summary(
    ray_session: None, ray_cluster: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every case's figures are checked in-process (tests/tools/test_bench.py); here,
    # that the command prints them: its quickest case, on 2 channels (an 8-channel
    # topic beside 9 bare actors would add seconds of worker starts, and no check).
    result = _in_process(
        capsys, "bench", "--idle", "--idle-topics", "1", "--idle-seconds", "1",
        "--channels", "2", "--address", ray_cluster,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    channel = next(line for line in lines if line.startswith("idle: channel CPU"))
    assert "x bare actor" in channel and "(target <= 1.2x: " in channel
    assert any(line.startswith("create_topic(channels=2)") for line in lines)
    verdicts = [line for line in lines if line.startswith("verdict: ")]
    assert len(verdicts) == 1 and "of 3 targets met" in verdicts[0]


def test_list_and_describe_show_a_topic(
    make_topic, ray_cluster: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = make_topic(channels=2, groups=["audit"])
    with topic.publisher() as publisher:
        publisher.publish({"n": 1}, key="k")

    listed = _in_process(capsys, "list", "--json", "--address", ray_cluster)
    described = _in_process(capsys, "describe", topic.name, "--json", "--address", ray_cluster)

    assert listed.returncode == 0, listed.stderr
    assert topic.name in json.loads(listed.stdout)
    assert described.returncode == 0, described.stderr
    stats = json.loads(described.stdout)
    assert [c["channel"] for c in stats["channels"]] == [0, 1]
    assert sum(c["size"] for c in stats["channels"]) == 1
    assert all(c["node_id"] and c["pid"] > 0 for c in stats["channels"])
    assert "audit" in stats["groups"]
    # Options may follow the arguments; the table names each channel's node.
    table = _in_process(capsys, "describe", "--address", ray_cluster, topic.name)
    assert table.returncode == 0, table.stderr
    assert "node" in table.stdout.splitlines()[1] and "group audit" in table.stdout


def test_describe_shows_open_transactions_per_channel(
    make_topic, unique_name, ray_cluster: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = make_topic(channels=2)
    txs = rt.transactions(unique_name("cli-tx"))
    tx = txs.begin()
    try:
        tx.publish_batch(topic, list(range(5)))  # round robin: 3 staged at channel 0, 2 at 1

        described = _in_process(capsys, "describe", topic.name, "--json", "--address", ray_cluster)
        assert described.returncode == 0, described.stderr
        staged = {
            c["channel"]: [(t["id"], t["key"], t["phase"], t["staged"]) for t in c["transactions"]]
            for c in json.loads(described.stdout)["channels"]
        }
        opened = (txs.transactional_id, tx.key, "staged")
        assert staged == {0: [(*opened, 3)], 1: [(*opened, 2)]}

        table = _in_process(capsys, "describe", topic.name, "--address", ray_cluster)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert "open transactions (1)" in lines
        rows = [line.split() for line in lines if txs.transactional_id in line]
        assert [(row[0], row[1], row[2], row[3], row[5]) for row in rows] == [
            ("0", *opened, "3"),
            ("1", *opened, "2"),
        ]
        assert float(rows[0][4]) >= 0.0  # age (s)
    finally:
        tx.abort()
        txs.close()
    assert not any(c.transactions for c in topic.describe().channels)


def test_missing_topics_and_groups_exit_3(
    ray_session: None, ray_cluster: str, make_topic, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = make_topic(channels=1, groups=["g"])
    # Every command finds its topic through one function (cli_admin._topic): two
    # of them stand for the rest; a missing group is found in two places. The
    # first runs as the command's own process: its exit status is 3.
    for index, args in enumerate(
        (
            ["describe", "no-such-topic-here"],
            ["delete", "no-such-topic-here", "--yes"],
            ["reset-group", topic.name, "no-such-group", "--to", "earliest"],
            ["tail", topic.name, "--group", "no-such-group", "-n", "1"],
        )
    ):
        command = [*args, "--address", ray_cluster]
        result = _raytopic(*command) if index == 0 else _in_process(capsys, *command)
        assert result.returncode == 3, (args, result.stdout, result.stderr)
        assert "no-such" in result.stderr
        assert result.stdout == ""
        if "no-such-group" in args:  # worded one way (reset-group said "does not exist")
            assert result.stderr == f"raytopic: topic {topic.name!r} has no group 'no-such-group'\n"


def test_create_tail_groups_reset_and_delete_a_topic(
    ray_session: None,
    ray_cluster: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = f"cli-{os.getpid()}"
    created = _in_process(
        capsys, "create", name, "--channels", "2", "--capacity", "100", "--group", "a",
        "--group", "b", "--retain", "--json", "--address", ray_cluster,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert sorted(json.loads(created.stdout)["groups"]) == ["a", "b"]
    again = _in_process(capsys, "create", name, "--address", ray_cluster)
    assert again.returncode == 1 and "exists" in again.stderr
    topic = rt.get_topic(name)
    try:
        with topic.publisher() as publisher:
            for i in range(10):
                publisher.publish({"i": i}, key=str(i))

        tailed = _in_process(capsys, "tail", name, "-n", "4", "--address", ray_cluster)
        assert tailed.returncode == 0, tailed.stderr
        lines = tailed.stdout.splitlines()
        assert len(lines) == 4  # exactly N lines, one JSON value each
        assert all(set(json.loads(line)) == {"i"} for line in lines)
        everything = _in_process(capsys, "tail", name, "--json", "--address", ray_cluster)
        records = [json.loads(line) for line in everything.stdout.splitlines()]
        assert sorted(r["value"]["i"] for r in records) == list(range(10))
        assert {"key", "channel", "position", "timestamp", "value"} == set(records[0])
        assert all(r["key"] == str(r["value"]["i"]) for r in records)

        with topic.subscriber(group="a") as member:  # group a commits 3 on channel 0
            got: list[rt.Element] = []
            while len([e for e in got if e.channel == 0]) < 3:
                got += get(member.receive_batch(100))
            member.commit(0, [e for e in got if e.channel == 0][2].position)
        from_group = _in_process(
            capsys, "tail", name, "--group", "a", "--json", "--address", ray_cluster
        )
        positions = [json.loads(line) for line in from_group.stdout.splitlines()]
        assert len(positions) == 10 - 3
        assert min(r["position"] for r in positions if r["channel"] == 0) == 3

        topic.create_group(rt.SharedGroup("s"))
        with topic.subscriber(group="s", mode="shared") as shared:
            held = get(shared.receive_batch(4))
            listed = _in_process(capsys, "groups", name, "--json", "--address", ray_cluster)
            groups = {g["name"]: g for g in json.loads(listed.stdout)}
            assert set(groups) == {"a", "b", "s"}
            assert groups["s"]["mode"] == "shared" and len(held) == 4
            assert [m["unacked"] for m in groups["s"]["members"]] == [4]
        plain = _in_process(capsys, "groups", name, "--address", ray_cluster)
        assert plain.stdout.splitlines()[0].split() == [
            "group", "mode", "generation", "members", "depth", "unacked", "lag",
            "redelivered", "dead",
        ]  # fmt: skip

        reset = _in_process(
            capsys, "reset-group", name, "a", "--to", "0:0,1:1", "--json", "--address", ray_cluster
        )
        assert reset.returncode == 0, reset.stderr
        assert json.loads(reset.stdout) == {"0": 0, "1": 1}
        latest = _in_process(
            capsys, "reset-group", name, "b", "--to", "latest", "--address", ray_cluster
        )
        assert latest.returncode == 0 and "channel 1" in latest.stdout
        bad = _in_process(
            capsys, "reset-group", name, "a", "--to", "soon", "--address", ray_cluster
        )
        assert bad.returncode == 2 and "ISO time" in bad.stderr

        monkeypatch.setattr(sys, "stdin", io.StringIO())  # no terminal to ask, as under cron
        refused = _in_process(capsys, "delete", name, "--address", ray_cluster)
        assert refused.returncode == 2 and "--yes" in refused.stderr
        assert name in rt.list_topics()
        deleted = _in_process(capsys, "delete", "--yes", name, "--address", ray_cluster)
        assert deleted.returncode == 0, deleted.stderr
        assert name not in rt.list_topics()
    finally:
        with contextlib.suppress(rt.TopicNotFoundError):
            rt.get_topic(name).destroy()


def test_create_compact_and_describe_show_each_channels_compaction(
    ray_session: None,
    ray_cluster: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path,
    wait_until,
) -> None:
    name = f"cli-compact-{os.getpid()}"
    created = _in_process(
        capsys, "create", name, "--channels", "2", "--compact", "--max-lag", "0.5",
        "--tombstone-retention", "600", "--store", str(tmp_path), "--json",
        "--address", ray_cluster,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    settings = json.loads(created.stdout)
    assert settings["retain"] is True  # a compacted topic keeps its elements
    assert settings["compaction"] == {
        "min_lag_s": 0.0,
        "max_lag_s": 0.5,
        "tombstone_retention_s": 600.0,
    }
    topic = rt.get_topic(name)
    try:
        assert topic.config.compaction == rt.Compaction(max_lag_s=0.5, tombstone_retention_s=600)
        with topic.publisher() as publisher:
            for version in range(5):
                for k in range(10):
                    publisher.publish({"v": version}, key=f"k{k}")
            publisher.delete("k0").result(timeout=60)

        def compacted() -> bool:  # every channel's pass covered everything published
            return all(
                c.compaction is not None and c.compaction["point"] > c.tail
                for c in topic.describe().channels
            )

        wait_until(compacted, timeout=60)
        described = _in_process(capsys, "describe", name, "--json", "--address", ray_cluster)
        assert described.returncode == 0, described.stderr
        channels = json.loads(described.stdout)["channels"]
        assert sum(c["size"] for c in channels) == 10  # every key's latest, k0's delete
        figures = {c["channel"]: c["compaction"] for c in channels}
        assert sum(f["live_keys"] for f in figures.values()) == 9  # k0 is deleted
        for channel, f in figures.items():
            assert f["point"] > channels[channel]["tail"] and f["runs"] >= 1
            assert f["dirty_ratio"] == 0.0
            last = f["last_run"]
            assert set(last) == {"at", "seconds", "removed", "bytes_before", "bytes_after"}
            assert last["seconds"] >= 0 and last["bytes_after"] <= last["bytes_before"]

        table = _in_process(capsys, "describe", name, "--address", ray_cluster)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        at = lines.index("compaction")
        assert lines[at + 1].split() == [
            "channel", "point", "live", "keys", "dirty", "runs", "last", "run", "(s", "ago)",
            "took", "(s)", "removed", "bytes", "before", "bytes", "after",
        ]  # fmt: skip
        for row, channel in zip(lines[at + 2 : at + 4], (0, 1), strict=True):
            cells = row.split()
            f, last = figures[channel], figures[channel]["last_run"]
            assert cells[:5] == [str(channel), str(f["point"]), str(f["live_keys"]), "0.00",
                                 str(f["runs"])]  # fmt: skip
            assert float(cells[5]) >= 0
            assert cells[7:] == [str(last["removed"]), str(last["bytes_before"]),
                                 str(last["bytes_after"])]  # fmt: skip
    finally:
        topic.destroy()


def test_create_compact_refuses_bad_settings_and_creates_nothing(
    ray_session: None, ray_cluster: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"cli-compact-bad-{os.getpid()}"
    for args, said in (
        (["--max-lag", "5"], "--compact"),  # a setting of a compacted topic without it
        (["--compact", "--min-lag", "5", "--max-lag", "1"], "min_lag_s"),
        (["--compact", "--max-lag", "nan"], "max_lag_s"),
        (["--compact", "--tombstone-retention", "-1"], "tombstone_retention_s"),
        (["--compact", "--retain", "--max-lag", "0"], "max_lag_s"),
    ):
        refused = _in_process(capsys, "create", name, *args, "--address", ray_cluster)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert said in refused.stderr and refused.stdout == ""
        assert name not in rt.list_topics()
    # One channel: the compaction settings are the topic's, not a channel's (the
    # default 8 channels cost 8 actors' starts, and no check).
    created = _in_process(
        capsys, "create", name, "--compact", "--channels", "1", "--address", ray_cluster
    )
    try:
        assert created.returncode == 0, created.stderr
        assert created.stdout.strip().endswith(
            "; compacted: min lag 0 s, max lag 60 s, tombstone retention 86400 s)"
        )
        assert rt.get_topic(name).config.compaction == rt.Compaction()
    finally:
        rt.get_topic(name).destroy()


def test_an_unreachable_cluster_fails_fast_with_a_message() -> None:
    started = time.monotonic()
    result = _raytopic("list", "--address", "127.0.0.1:1", timeout=60)
    assert time.monotonic() - started < 15
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "no Ray cluster answers at 127.0.0.1:1" in result.stderr


def test_a_host_that_never_answers_fails_in_about_5_s_with_one_line() -> None:
    # A listening socket that never accepts stands in for a silent host (Ray alone
    # took 20 s and printed 20 warnings).
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        result = _raytopic("list", "--address", address, timeout=60)
        took = time.monotonic() - started
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"raytopic: no Ray cluster answers at {address}: nothing answered within 5 s"
    ]
    assert took < 15


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The last line ``raytopic argv`` prints when it refuses its command line (exit 2),
    run in this process: the parser refuses before anything connects."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize(
    "argv", [["list", "--address", "garbage"], ["--address", "h:99999", "describe", "t"]]
)
def test_a_malformed_address_is_a_usage_error_naming_the_form(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    message = _usage_error(argv, capsys)
    assert "argument --address: expected HOST:PORT" in message and "or auto" in message


def test_a_malformed_ray_address_is_a_usage_error_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "garbage")
    assert main(["list"]) == 2  # refused before Ray is asked
    assert capsys.readouterr().err.splitlines() == [
        "raytopic: RAY_ADDRESS: expected HOST:PORT (e.g. 127.0.0.1:6379), got 'garbage'"
    ]


def test_a_bad_position_names_its_flag_and_every_form(capsys: pytest.CaptureFixture[str]) -> None:
    message = _usage_error(["reset-group", "t", "g", "--to", "yesterday"], capsys)
    for words in ("--to", "earliest", "latest", "ISO time", "CH:SEQ[,CH:SEQ...]", "'yesterday'"):
        assert words in message
    message = _usage_error(["tail", "t", "--from", "0:1"], capsys)
    assert "argument --from: expected earliest, latest or an ISO time, got '0:1'" in message
    # A channel given twice: which one was meant? (The last one silently won.)
    message = _usage_error(["reset-group", "t", "g", "--to", "0:3,1:2,0:4"], capsys)
    assert "argument --to: channel 0 is given twice in '0:3,1:2,0:4'" in message


_NAMED = [
    (["tail", "t", "--group", "{}"], "--group"),  # was exit 3: "topic 't' has no group ''"
    (["tail", "{}"], "topic"),
    (["describe", "{}"], "topic"),
    (["groups", "{}"], "topic"),
    (["delete", "{}", "--yes"], "topic"),
    (["reset-group", "{}", "g", "--to", "earliest"], "topic"),
    (["reset-group", "t", "{}", "--to", "earliest"], "group"),
    (["create", "{}"], "topic"),
    (["create", "t", "--group", "{}"], "--group"),
    (["list", "--namespace", "{}"], "--namespace"),
    (["--namespace", "{}", "list"], "--namespace"),
]
"""Every name a command takes; "{}" is where the bad one goes."""


@pytest.mark.parametrize(
    ("argv", "argument", "blank"),
    [
        *[(argv, argument, blank) for argv, argument in _NAMED for blank in ("", " ", "a b")],
        *[(["create", "t", "--store", "{}"], "--store", blank) for blank in ("", " ")],
    ],
)
def test_an_empty_or_blank_name_is_a_usage_error_before_anything_connects(
    argv: list[str], argument: str, blank: str, capsys: pytest.CaptureFixture[str]
) -> None:
    filled = [blank if word == "{}" else word for word in argv]
    message = _usage_error([*filled, "--address", "127.0.0.1:1"], capsys)  # nothing answers
    assert f"argument {argument}: " in message and repr(blank) in message, message


def test_options_before_the_command_are_not_overwritten_by_its_defaults() -> None:
    assert _parse(["--address", "127.0.0.1:1", "bench", "--quick"]).address == "127.0.0.1:1"
    assert _parse(["bench"]).address is None  # an embedded local Ray
    assert _parse(["list"]).address == "auto"
    before = _parse(["--namespace", "a", "--json", "tail", "t"])
    assert (before.namespace, before.json) == ("a", True)
    assert _parse(["--namespace", "a", "list", "--namespace", "b"]).namespace == "b"
    assert _parse(["reset-group", "t", "g", "--to", "0:3,1:4"]).to == {0: 3, 1: 4}


@pytest.mark.parametrize(
    "args",
    [
        ["nonsense"],
        ["describe"],
        ["tail", "t", "-n", "x"],
        ["create", "t", "--overflow", "x"],
        ["--json", "demo"],
        ["tail", "t", "--group", ""],
    ],
)
def test_bad_usage_exits_2(args: list[str]) -> None:
    result = _raytopic(*args)
    assert result.returncode == 2


def test_list_is_empty_json_in_an_unused_namespace(
    ray_session: None, ray_cluster: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _in_process(
        capsys, "list", "--json", "--namespace", "nobody-uses-this", "--address", ray_cluster
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
    assert rt.list_topics(namespace="nobody-uses-this") == []
    # Options before the command; an empty namespace is said so, on stderr.
    plain = _in_process(capsys, "--namespace", "nobody-uses-this", "--address", ray_cluster, "list")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == ""
    assert plain.stderr.splitlines() == ["no topics in namespace nobody-uses-this"]


def test_namespace_before_the_command_picks_the_namespace(
    ray_session: None, ray_cluster: str, unique_name, capsys: pytest.CaptureFixture[str]
) -> None:
    namespace = unique_name("ns")
    topic = rt.create_topic(unique_name("topic"), channels=1, namespace=namespace)
    try:
        listed = _in_process(capsys, "--namespace", namespace, "--address", ray_cluster, "list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split() == [topic.name]
    finally:
        topic.destroy()


def test_reset_group_says_where_it_clamped_and_tail_prints_bytes_readably(
    ray_session: None,
    ray_cluster: str,
    make_topic,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = make_topic(channels=2, groups=["g"])
    statuses = publish_all(topic, [b"\x00\xff", b"text"], key="k")  # the first not UTF-8
    channel = statuses[0].channel  # positions 0 and 1; the other channel has none
    other = 1 - channel
    tailed = _in_process(capsys, "tail", topic.name, "--json", "--address", ray_cluster)
    values = [json.loads(line) for line in tailed.stdout.splitlines()]
    # before: "b'\\x00\\xff'" and "b'text'"
    assert [v["value"] for v in values] == ["AP8=", "text"]
    reset = _in_process(
        capsys, "reset-group", topic.name, "g", "--to", f"{channel}:9,{other}:0",
        "--address", ray_cluster,
    )  # fmt: skip
    assert reset.returncode == 0, reset.stderr
    # before: "channel N: next after 1", not saying it was asked 9
    assert reset.stdout.splitlines() == sorted(
        [
            f"channel {channel}: next after 1 (asked 9: clamped to its tail)",
            f"channel {other}: next after -1 (asked 0: clamped to its tail)",
        ]
    )


@contextlib.contextmanager
def _following_tail(
    ray_cluster: str, name: str
) -> Iterator[tuple[rt.Topic, subprocess.Popen[str]]]:
    """A 1-channel topic of its own namespace and ``raytopic tail --follow`` of it, in a
    process of its own (output piped), once it has printed the topic's first value."""
    namespace = f"cli-{name}-{os.getpid()}"
    topic = rt.create_topic(f"{name}-{os.getpid()}", channels=1, namespace=namespace)
    try:
        command = shutil.which("raytopic") or sys.executable
        prefix = [] if command.endswith("raytopic") else ["-m", "raytopic.cli"]
        tail = subprocess.Popen(
            [command, *prefix, "tail", topic.name, "--follow", "--address", ray_cluster,
             "--namespace", namespace],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert tail.stdout is not None
        with topic.publisher() as publisher:
            publisher.publish("first")
        assert tail.stdout.readline() == '"first"\n'  # it is following
        yield topic, tail
    finally:
        topic.destroy()


def test_tail_follow_stopped_by_sigterm_exits_quietly(ray_session: None, ray_cluster: str) -> None:
    with _following_tail(ray_cluster, "sigterm") as (_, tail):
        tail.send_signal(signal.SIGTERM)
        out, err = tail.communicate(timeout=60)
        assert (tail.returncode, out, err) == (0, "", "")  # before: 1, Ray's SIGTERM stack dump


def test_tail_keeps_ray_s_reports_off_its_output(ray_session: None, ray_cluster: str) -> None:
    # The raylet's reports to every driver (a worker died, many worker processes
    # started) Ray prints on a driver's stdout, log_to_driver=False or not: in a pipe
    # reading `raytopic tail --json`, such a line is not JSON.
    import ray

    with _following_tail(ray_cluster, "report") as (topic, tail):
        assert tail.stdout is not None
        # A report through the cluster's own GCS, as the raylet's, addressed to the
        # tail's job alone: a driver prints its own job's reports and those to every
        # driver (the same listener), and the suite's other drivers must not get it.
        gcs = ray._private.worker.global_worker.gcs_client
        tails_job = next(
            job
            for job, info in gcs.get_all_job_info().items()
            if info.driver_pid == tail.pid and not info.is_dead
        )
        ray._private.utils.publish_error_to_driver(
            "test_report", "a report the raylet sends a driver", gcs, job_id=tails_job
        )
        time.sleep(2.0)  # it reaches a driver well within this
        with topic.publisher() as publisher:
            publisher.publish("second")
        assert tail.stdout.readline() == '"second"\n'
        tail.send_signal(signal.SIGTERM)
        out, err = tail.communicate(timeout=60)
        assert (tail.returncode, out) == (0, "")
        assert "a report the raylet sends" not in err
