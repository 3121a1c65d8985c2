"""A node lost with a shared store: its channels restart on other nodes and nothing is
lost (``multinode_run.py``, in a process and a Ray cluster of its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.own_ray import run_own_ray

HERE = Path(__file__).resolve().parent


# One xdist work unit with the other tests that start a Ray of their own
# (test_multinode, test_spark_session's demo, test_session_cleanup): one such
# cluster at a time, none stopping (its workers orphaned for a moment) while
# test_session_cleanup counts orphaned Ray processes; and, as xdist hands out
# groups first (the larger first), among the run's first units, not at its end,
# where a long single test kept one worker busy while the other had nothing left.
@pytest.mark.xdist_group("own_ray")
@pytest.mark.slow
def test_a_lost_node_restarts_its_channels_elsewhere_from_the_shared_store(tmp_path: Path):
    result = run_own_ray(HERE / "multinode_run.py", str(tmp_path / "store"), prefix="rt-mn-")
    assert result["distinct_nodes"] >= 2  # spread (a soft preference: Ray may place otherwise)
    assert result["received"] == list(range(result["published"]))  # nothing lost
    before, after = result["before"], result["after"]
    assert after[0] != before[0] and after[1] == before[1] + 1  # another node, new epoch
    assert result["restart_seconds"] < 30
