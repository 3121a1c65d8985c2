"""A user's store with the seed's four methods and nothing else, kept in memory.
Imported as ``tests.seed_store`` by the store and channel-part tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class SeedStore:
    """The seed's four methods (``store``, ``store_all``, ``load``, ``largest_sequence``)."""

    def __init__(self) -> None:
        self.items: dict[int, Any] = {}

    def store(self, sequence: int, item: Any) -> None:
        self.items[sequence] = item

    def store_all(self, first_sequence: int, items: Sequence[Any]) -> None:
        for offset, item in enumerate(items):
            self.store(first_sequence + offset, item)

    def load(self, sequence: int) -> Any:
        return self.items.get(sequence)

    def largest_sequence(self) -> int:
        return max(self.items, default=-1)
