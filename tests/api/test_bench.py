"""``raytopic.bench`` on tiny counts against the session's cluster, and ``bench`` options.

Only that every case runs and reports a usable figure is checked here: the
figures themselves are judged by running ``raytopic bench``, never by timed
assertions in tests.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from raytopic.bench import DEFAULT, QUICK, Figure, format_figure, run_benchmarks
from raytopic.cli import _bench_settings, _parser

# Case -> the baseline its ratio is taken to (None: a figure without one).
EXPECTED = {
    "queue: batch put/get (1000), task -> task": None,
    "topic: publish() -> iterate, 2 channel(s)": "queue batch",
    "topic: publish() -> iterate, 1 channel(s)": "queue batch",
    "topic: 2 channels / 1 channel, publish() -> iterate": "1 channel",
    "topic: publish_batch -> receive_batch(1000), 1 channel": "queue batch",
    "queue: put -> waiting get, p50": None,
    "queue: put -> waiting get, p99": None,
    "topic: publish -> waiting receive, 1 channel(s), p50": "queue p50",
    "topic: publish -> waiting receive, 1 channel(s), p99": "queue p99",
    "topic: publish -> waiting receive, 2 channel(s), p50": "queue p50",
    "topic: publish -> waiting receive, 2 channel(s), p99": "queue p99",
    "channel RSS holding 2,000 elements": None,
    "channel RSS before publishing": None,
    "group: 2 members, commit per batch, 2 channels": "queue batch",
    "group: close -> full reassignment": None,
    "shared group: 4 members, 2 ch, ack per element": "owned group of 2",
    "shared group: 4 members, 2 ch, 10 ms task per element": "owned group of 2",
    'store sync="always": publish() -> iterate, 2 channel(s)': "in memory",
    'store sync="write": publish() -> iterate, 2 channel(s)': "in memory",
    "store: restart serving 2,000 elements": None,
}


# Tiny counts, yet 10 to 20 s: each case creates its topic and the group case
# waits 2 s for quiet; those fixed costs do not shrink with the counts.
@pytest.mark.slow
def test_every_case_reports_a_positive_figure_and_its_ratio(ray_session: None) -> None:
    reported: list[Figure] = []

    figures = run_benchmarks(
        messages=2000,
        channels=2,
        latency_samples=5,
        repeat=1,
        memory_elements=2000,
        restart_elements=2000,
        report=reported.append,
    )

    assert reported == figures
    by_case = {figure.case: figure for figure in figures}
    assert sorted(by_case) == sorted(EXPECTED)
    for case, baseline in EXPECTED.items():
        figure = by_case[case]
        assert math.isfinite(figure.value) and figure.value > 0, figure
        assert figure.baseline == baseline, figure
        if baseline is None:
            assert figure.ratio is None, figure
        else:
            assert figure.ratio is not None and math.isfinite(figure.ratio), figure
            assert figure.ratio > 0, figure
            assert f"x {baseline}" in format_figure(figure)
    scaling = by_case["topic: 2 channels / 1 channel, publish() -> iterate"]
    assert scaling.value == by_case["topic: publish() -> iterate, 2 channel(s)"].value
    assert scaling.baseline_value == by_case["topic: publish() -> iterate, 1 channel(s)"].value
    assert scaling.target == 0.9
    assert "target >= 0.90x" in format_figure(scaling)
    durable = by_case['store sync="always": publish() -> iterate, 2 channel(s)']
    assert durable.baseline_value == by_case["topic: publish() -> iterate, 2 channel(s)"].value
    assert durable.target == 0.5
    assert by_case["shared group: 4 members, 2 ch, 10 ms task per element"].target == 1.7


def test_bench_help_lists_quick(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["bench", "--help"])

    assert exited.value.code == 0
    assert "--quick" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["bench"], DEFAULT),
        (["bench", "--quick"], QUICK),
        (["bench", "--quick", "--repeat", "2"], replace(QUICK, repeat=2)),
        (["bench", "--messages", "5000"], replace(DEFAULT, messages=5000)),
    ],
)
def test_quick_sets_the_counts_and_options_override_it(argv: list[str], expected) -> None:
    assert _bench_settings(_parser().parse_args(argv)) == expected


def test_quick_is_smaller_in_every_count() -> None:
    assert QUICK.messages < DEFAULT.messages
    assert QUICK.latency_samples < DEFAULT.latency_samples
    assert QUICK.repeat <= DEFAULT.repeat
    assert QUICK.memory_elements < DEFAULT.memory_elements
    assert QUICK.restart_elements < DEFAULT.restart_elements
    assert QUICK.channels == DEFAULT.channels  # the same cases
