"""A subscriber's ``resequence=`` option: its elements, in sequence order per stream.

Elements of one correlation id may arrive on several channels (a key-less
publisher spreads them), so channel order is not their order. Every element
a resequencing subscriber receives goes through a :class:`Resequencer` keyed
by ``Resequence.seq(value)`` and ``Resequence.correlation(value)``; what it
releases is handed out in that order. Timeout releases come from a sweeper
thread owned by the subscriber, stopped when it closes.

**Delivery**: a commit is per channel and cumulative, so committing a
released element also commits elements of its channel the resequencer may
still hold; commit what you have processed, not further ahead, if a crash
must not skip held elements.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import TYPE_CHECKING

from raytopic.errors import InvalidTypeError, TopicError
from raytopic.resequencer import Resequence, Resequencer, ResequencerStats

if TYPE_CHECKING:
    from collections.abc import Hashable, Iterable

    from raytopic.records import Element

logger = logging.getLogger(__name__)

__all__ = ["ResequencedElements"]


class ResequencedElements:
    """Elements in, elements out in sequence order per correlation id."""

    def __init__(self, option: Resequence, name: str) -> None:
        if not isinstance(option, Resequence):
            raise InvalidTypeError(
                f"resequence must be a raytopic.Resequence, got {type(option).__name__}"
            )
        self._option = option
        self._released: deque[Element] = deque()
        self._changed = threading.Condition()
        # Sweep often enough that a timeout release is not late by much.
        self.poll_interval = max(0.005, min(option.timeout_ms / 4000, 0.25))
        self._resequencer = Resequencer(
            name,
            timeout_ms=option.timeout_ms,
            capacity=option.capacity,
            reap_interval_ms=max(1, int(self.poll_interval * 1000)),
            start=option.start,
            on_release=self._release,
        )
        self._sweeper = threading.Thread(
            target=self._resequencer.start, name=f"raytopic-resequencer-{name}", daemon=True
        )
        self._sweeper.start()

    def _release(self, seq: int, element: Element, correlation: Hashable | None) -> None:
        with self._changed:
            self._released.append(element)
            self._changed.notify_all()

    def feed(self, elements: Iterable[Element]) -> None:
        """Hand received elements to the resequencer."""
        option = self._option
        for element in elements:
            value = element.value
            try:
                correlation = option.correlation(value) if option.correlation else None
                self._resequencer.accept(option.seq(value), element, correlation)
            except (TopicError, TypeError, KeyError, IndexError, AttributeError) as error:
                # A value without a usable sequence number cannot be ordered;
                # deliver it as it came rather than lose it.
                logger.warning(
                    "element %s has no usable sequence number (%s); delivered unordered",
                    element.position,
                    error,
                )
                self._release(-1, element, None)

    @property
    def stats(self) -> ResequencerStats:
        """Released, gaps, late and held counts so far."""
        return self._resequencer.stats

    @property
    def held(self) -> int:
        """Elements waiting for a predecessor."""
        return self._resequencer.stats.held

    def take(self, count: int, wait: float = 0.0) -> list[Element]:
        """Up to ``count`` released elements, waiting up to ``wait`` seconds for one."""
        with self._changed:
            if not self._released and wait > 0:
                self._changed.wait(wait)
            taken = []
            while self._released and len(taken) < count:
                taken.append(self._released.popleft())
            return taken

    def close(self) -> None:
        """Stop the sweeper."""
        self._resequencer.stop()
        self._sweeper.join(timeout=5)
