"""``cluster.yaml`` is a real cluster-launcher file: Ray's own checks accept it, and it
installs what raytopic needs on every node and starts Ray with token authentication."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTER = Path(__file__).resolve().parent.parent / "cluster.yaml"


def _config() -> dict:
    return yaml.safe_load(CLUSTER.read_text())


def test_ray_validates_cluster_yaml_as_ray_up_does() -> None:
    config = _config()
    prepared = prepare_config(copy.deepcopy(config))  # defaults filled in, as `ray up` does
    validate_config(prepared)  # raises on any schema or consistency error
    assert prepared["provider"]["type"] == "local"
    assert prepared["max_workers"] == len(config["provider"]["worker_ips"])


def test_every_node_gets_java_17_raytopic_and_a_token() -> None:
    config = _config()
    setup = "\n".join(config["setup_commands"])
    assert "openjdk-17" in setup  # Spark on RayDP needs Java 17
    assert "raytopic-" in setup and "[spark]" in setup  # the wheel with its pinned extras
    assert "~/.ray/auth_token" in setup
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all(
        "RAY_AUTH_MODE=token" in c for c in starts if c.strip().startswith(("RAY_", "ray start"))
    )
    assert any("ray start --head" in c for c in config["head_start_ray_commands"])
