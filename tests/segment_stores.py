"""Restarting an embedded store in a test. Imported as ``tests.segment_stores``; the
``opened`` fixture it takes is tests/actors/stores/conftest.py's."""

from __future__ import annotations

from typing import Any

from raytopic.actors.stores.segment_log import SegmentLogStore


def reopen(store: SegmentLogStore, opened, **options: Any) -> SegmentLogStore:
    """Close ``store`` and open its directory again (a restart)."""
    store.close()
    return opened(**options)
