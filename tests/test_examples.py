"""Every script in ``examples/`` runs, as ``python examples/x.py`` runs it, on the
session's cluster: one after another in the interpreter the session keeps for its
scripts (``tests/script_runner.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.script_runner import RunnerTimeout, ScriptRunner

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

EXPECTED = {
    "publish_subscribe.py": "total 150.0",
    "groups_and_commits.py": "a new member received the other 80",
    "seek_and_reset.py": "after reset to earliest: 10 elements",
    "ring_buffer.py": "read_many: ['item-3', 'item-4', 'item-5', 'item-6', 'item-7'] next 8",
    "resequencer.py": "['B0', 'A0', 'A1', 'A2', 'B1']",
    "shared_workers.py": "dead letter: {'job': 13} after 3 deliveries",
    "exactly_once_pipeline.py": "every input appears in the sink exactly once",
    "streams.py": "every click written exactly once: 1000 rows",
    "elastic_consumers.py": "handled 1000, distinct 1000: each order once",
    "compacted_topics.py": "table view and read_table agree: True",
}
"""A line each script prints when it did what it shows."""

RUN_ELSEWHERE = {
    "spark_bridge.py": "tests/bridge/test_spark.py",
    "serve_tasks.py": "tests/serve/test_serve.py",
}
"""Scripts another test runs: the Spark example runs in the Spark tests' session
(its ``init_spark`` gets the running one), not in a Spark of its own (tens of
seconds to start); the Serve example on the Serve the Serve test started."""


def test_every_example_is_checked_here() -> None:
    examples = sorted(path.name for path in EXAMPLES.glob("*.py"))
    assert examples == sorted([*EXPECTED, *RUN_ELSEWHERE])
    for script, test in RUN_ELSEWHERE.items():
        assert script in (EXAMPLES.parent / test).read_text()


@pytest.mark.slow  # each a whole script: its topics, actors and tasks
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_the_example_runs(script: str, script_runner: ScriptRunner, tmp_path: Path) -> None:
    try:
        done = script_runner.run(path=EXAMPLES / script, cwd=tmp_path, timeout=300)
    except RunnerTimeout as hung:
        pytest.fail(f"still running after {hung.timeout} s:\n{hung.stderr[-3000:]}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert EXPECTED[script] in done.stdout
