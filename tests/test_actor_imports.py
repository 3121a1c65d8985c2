"""An actor's process imports what it runs and no more.

Every actor is a Ray worker process of its own, and a process's start is most of
what an actor costs (a topic of two channels is three processes; an autoscaled
burst or a Serve queue starts several at once). Ray's worker already imports
numpy, pyarrow and cloudpickle; on top of that, a channel's or coordinator's
process imports only raytopic's data and control planes (about 90 modules), and no
actor's process imports Ray Serve, Ray Data, pandas or Spark.

Each actor class's module is imported in one fresh interpreter, in turn, and the
modules present after each are checked: a module a check refuses fails the first
actor whose import brought it in (later actors see the earlier ones' modules too,
so a refusal can only be stricter than in the actor's own process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ACTOR_MODULES = {
    "channel": "raytopic.actors.channel",
    "coordinator": "raytopic.coordinator.coordinator",
    "resequencer": "raytopic.resequencer_actor",
    "scaler": "raytopic.autoscale.scaler_actor",
    "scaled member": "raytopic.autoscale.scaled_member",
    "transaction registry": "raytopic.transaction.registry",
    "serve task board": "raytopic.serve.board_actor",
}
"""Each kind of actor process, by the module its class is unpickled from, in the
order imported: the data and control planes first, so their checks see only
their own imports."""

HEAVY = ("ray.serve", "ray.data", "ray.train", "ray.tune", "pandas", "pyspark", "raydp", "fastapi")
"""Packages no actor process runs (Serve's replicas and Spark's executors are Ray's
and RayDP's processes, not raytopic's actors)."""

PLANES = ("raytopic.actors", "raytopic.coordinator", "raytopic.core")
PACKAGE_ENTRY = ("raytopic", "raytopic.client", "raytopic.client.cluster")
"""What ``import raytopic`` itself runs (the package's ``__init__``s and the cluster
token set-up) before any submodule."""

_PROBE = textwrap.dedent(
    """
    import importlib, json, sys
    seen = {}
    for kind, module in json.loads(sys.argv[1]).items():
        importlib.import_module(module)
        seen[kind] = sorted(sys.modules)
    print(json.dumps(seen))
    """
)


@pytest.fixture(scope="module")
def found() -> dict[str, set[str]]:
    """The modules in ``sys.modules`` after each actor module's import, in one fresh
    interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(ACTOR_MODULES)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
    )
    return {kind: set(modules) for kind, modules in json.loads(done.stdout).items()}


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)


def test_no_actor_process_imports_serve_data_pandas_or_spark(found: dict[str, set[str]]) -> None:
    assert list(found) == list(ACTOR_MODULES)
    for kind, modules in found.items():
        heavy = sorted(m for m in modules if _in(m, HEAVY))
        assert not heavy, f"the {kind}'s module imports {heavy[:5]}"


def test_the_data_and_control_planes_import_only_themselves(found: dict[str, set[str]]) -> None:
    for kind in ("channel", "coordinator"):
        beyond = sorted(
            m
            for m in found[kind]
            if m.startswith("raytopic") and m not in PACKAGE_ENTRY and not _in(m, PLANES)
        )
        assert not beyond, f"the {kind}'s module imports {beyond}"
