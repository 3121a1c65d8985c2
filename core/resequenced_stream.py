"""A subscriber's :class:`Resequence` option applied to what its session receives.

:class:`ResequencedStream` feeds received items into a :class:`Resequencer` (with
where each was read, so a channel sent back is taken back: see
:meth:`ResequencedStream.rewind`) and keeps what it releases until a receive takes it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from raytopic.core.errors import InvalidTypeError
from raytopic.core.release_record import at_or_after
from raytopic.core.resequencer import Resequence, Resequencer, ResequencerStats, logger

__all__ = ["ResequencedStream"]


class ResequencedStream:
    """A :class:`Resequence` option applied to received items: in, out in order.

    Items go in with the value they carry (``feed``), come out in sequence
    order per correlation id (``take``). Timeout releases come from a sweeper
    thread, started here and stopped by :meth:`close`; ``on_ready`` is called
    (from any thread) whenever something was released, ``on_late`` with an item
    dropped as late (on the thread that fed it). ``origin`` says where an item was
    read (a source, such as its channel, and its position there), for :meth:`rewind`.

    **Delivery**: a value without a usable sequence number cannot be ordered;
    it is released as it came rather than lost (logged once, counted in
    ``stats.unsequenced``).
    """

    def __init__(
        self,
        option: Resequence,
        name: str,
        on_ready: Callable[[], object],
        on_late: Callable[[Any], None] | None = None,
        origin: Callable[[Any], tuple[Hashable, int]] | None = None,
    ) -> None:
        if not isinstance(option, Resequence):
            raise InvalidTypeError(
                f"resequence must be a raytopic.Resequence, got {type(option).__name__}"
            )
        self._option = option
        self._name = name
        self._on_ready = on_ready
        self._origin = origin
        self._released: deque[Any] = deque()
        self._unsequenced = 0  # released unordered: the first is logged, all counted
        self._lock = threading.Lock()
        # Sweep often enough that a timeout release is not late by much.
        self.poll_interval = max(0.005, min(option.timeout_ms / 4000, 0.25))
        self._resequencer = Resequencer(
            name,
            timeout_ms=option.timeout_ms,
            capacity=option.capacity,
            reap_interval_ms=max(1, int(self.poll_interval * 1000)),
            start=option.start,
            on_release=self._release,
            on_late=None if on_late is None else lambda seq, item, correlation: on_late(item),
        )
        self._sweeper = threading.Thread(
            target=self._resequencer.start, name=f"raytopic-resequencer-{name}", daemon=True
        )
        self._sweeper.start()

    def _release(self, seq: int, item: Any, correlation: Hashable | None) -> None:
        with self._lock:
            self._released.append(item)
        self._on_ready()

    def feed(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        """Hand over received ``(value, item)`` pairs.

        Args:
            pairs: Each received value (its sequence number and correlation are
                read from it) with the item to release (the Element). One without
                a usable sequence number is released at once, unordered.
        """
        option = self._option
        for value, item in pairs:
            try:
                correlation = option.correlation(value) if option.correlation else None
                origin = None if self._origin is None else self._origin(item)
                self._resequencer.accept(option.seq(value), item, correlation, origin)
            except BaseException as error:  # SystemExit too
                # The user's seq or correlation raised (any exception: one value
                # must never cost the rest of a batch), or the value did not
                # decode here: it costs only its order. Said once (a key that
                # raises usually raises for every value), counted always.
                self._unsequenced += 1
                if self._unsequenced == 1:
                    logger.warning(
                        "resequencer %s: no usable sequence number (%s: %s); released "
                        "unordered (said once: resequencer_stats().unsequenced counts them)",
                        self._name,
                        type(error).__name__,
                        error,
                    )
                self._release(-1, item, None)

    def rewind(self, source: Hashable, position: int) -> list[Any]:
        """``source`` was sent back to ``position`` (see :meth:`Resequencer.rewind`):
        what it delivers from there on comes again and is released again in order.

        Returns:
            The items from ``source`` at or after ``position`` dropped: held, or
            released and not taken yet (they come again).
        """
        dropped = self._resequencer.rewind(source, position)
        origin = self._origin
        if origin is None:
            return dropped
        with self._lock:
            kept: deque[Any] = deque()
            for item in self._released:
                (dropped if at_or_after(origin(item), source, position) else kept).append(item)
            self._released = kept
        return dropped

    def passed(self, source: Hashable, first: int, last: int) -> None:
        """``source``, sent back, read on past ``first..last`` without delivering them
        (see :meth:`Resequencer.passed`): what was released from there stays released."""
        self._resequencer.passed(source, first, last)

    @property
    def stats(self) -> ResequencerStats:
        """Released, gaps, late, held and unsequenced counts so far."""
        return dataclasses.replace(self._resequencer.stats, unsequenced=self._unsequenced)

    @property
    def held(self) -> int:
        """Items waiting for a predecessor."""
        return self._resequencer.stats.held

    @property
    def ready(self) -> bool:
        """Whether released items wait to be taken."""
        return bool(self._released)

    def take(self, count: int) -> list[Any]:
        """Take released items.

        Args:
            count: Most items to take.

        Returns:
            Up to ``count`` released items, in release order.
        """
        with self._lock:
            taken: list[Any] = []
            while self._released and len(taken) < count:
                taken.append(self._released.popleft())
            return taken

    def close(self) -> None:
        """Stop the sweeper."""
        self._resequencer.stop()
        self._sweeper.join(timeout=5)
