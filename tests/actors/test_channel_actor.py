"""The class channels are made of imports the channel's code only where a channel runs:
Ray imports an actor's class wherever a handle to it is rebuilt (a coordinator, a
driver given a topic), and the whole channel cost those processes a sixth of a
coordinator's start."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from raytopic.coordinator import launch
remote_class = launch._channel_class()
print(sorted(name for name in sys.modules if name.startswith("raytopic.actors.")))
"""


def test_the_class_channels_are_made_of_imports_no_channel_code() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert "raytopic.actors.channel_actor" in loaded
    assert "'raytopic.actors.channel'" not in loaded
    assert "raytopic.actors.appends" not in loaded
