"""Settings the tests give Spark's JVMs (the Spark tests' session, and the demo's own)."""

from __future__ import annotations

from raytopic.bridge.spark_session import JVM_OPTION_KEYS

QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""Flags for the tests' short-lived JVMs: the C2 compiler's threads cost more CPU
than they save in a test's seconds of Spark work (measured: a third of the CPU of
starting Spark on Ray and running its first jobs), and one GC thread is enough."""


def quick_jvm_configs() -> dict[str, str]:
    """``init_spark`` configs giving every JVM RayDP starts :data:`QUICK_JVM`."""
    return dict.fromkeys(JVM_OPTION_KEYS, QUICK_JVM)
