"""What the actor-part tests share: embedded stores opened on a temporary directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raytopic.actors.stores.segment_log import SegmentLogStore


@pytest.fixture
def opened(tmp_path: Path):
    """Open stores on ``tmp_path`` (``opened(**options)``), closed at the end."""
    stores: list[SegmentLogStore] = []

    def open_store(**options: Any) -> SegmentLogStore:
        store = SegmentLogStore(tmp_path, **options)
        stores.append(store)
        return store

    yield open_store
    for store in stores:
        store.close()
