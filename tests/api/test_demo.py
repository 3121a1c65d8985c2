"""``raytopic.demo``: what the demo prints around the faults it injects itself."""

from __future__ import annotations

import pytest

from raytopic.demo import run_demo


@pytest.mark.slow
def test_the_demo_announces_its_channel_kill_and_ray_does_not_report_it_as_a_crash(
    ray_session: None, capfd: pytest.CaptureFixture[str]
) -> None:
    said: list[str] = []
    capfd.readouterr()
    assert run_demo(3000, spark=False, say=said.append), said
    out, err = capfd.readouterr()
    # Ray's report of the killed worker (printed by this driver, which made the
    # channel) names the OOM killer: the demo keeps it off its console.
    assert "worker died" not in out + err and "OOM" not in out + err, out + err
    lines = out.splitlines()  # the demo's progress console prints the fault lines
    announced = next(i for i, line in enumerate(lines) if "killing channel 0 on purpose" in line)
    killed = next(i for i, line in enumerate(lines) if line.startswith("killed channel 0"))
    back = next(i for i, line in enumerate(lines) if line.startswith("channel 0 is back"))
    assert announced < killed < back
