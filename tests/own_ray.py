"""A test's own multi-node Ray (``ray.cluster_utils.Cluster``: a head and workers of 1
CPU each, one machine), started by a runner script in a process of its own, whose
last JSON line on stdout is its result (tests/client/multinode_run.py,
tests/transaction/registry_node_run.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

STORE_BYTES = 80 * 1024 * 1024


def run_own_ray(script: Path, *args: str, prefix: str) -> dict[str, Any]:
    """Run ``script`` with ``args`` in a process of its own, which starts its own Ray;
    its last JSON line. Its Ray's own temp dir (no clobbering
    /tmp/ray/ray_current_cluster; short: Ray's socket paths must fit in 107 bytes;
    named ``prefix``...), and no address inherited from the test session."""
    ray_dir = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    env = {
        **os.environ,
        "RAY_TMPDIR": ray_dir,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("RAY_ADDRESS", None)
    try:
        run = subprocess.run(
            [sys.executable, str(script), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)  # its cluster is shut down by then
    assert run.returncode == 0, run.stderr[-4000:]
    # Its JSON line (a raylet's warning may still come after it).
    return json.loads([line for line in run.stdout.splitlines() if line.startswith("{")][-1])


def start_cluster(namespace: str, workers: int = 1, **init: Any) -> tuple[Any, list[Any]]:
    """A head and ``workers`` worker nodes of 1 CPU each, this process connected in
    ``namespace`` (``init``: more of ``ray.init``'s arguments); the cluster and its
    worker nodes, once the scheduler counts every node's CPU. (A runner sets Ray's
    health check's environment before it imports Ray: see multinode_run.py.)"""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "object_store_memory": STORE_BYTES,
            "include_dashboard": False,
        },
    )
    nodes = [cluster.add_node(num_cpus=1, object_store_memory=STORE_BYTES) for _ in range(workers)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace=namespace, **init)
    # Until the scheduler counts the workers' CPU too: a topic made before that
    # has all its channels on the head (seen each time).
    deadline = time.monotonic() + 60
    while ray.cluster_resources().get("CPU", 0) < 1 + workers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the workers' CPU never showed: {ray.cluster_resources()}")
        time.sleep(0.05)
    return cluster, nodes
