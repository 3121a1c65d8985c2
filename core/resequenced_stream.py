"""A subscriber's :class:`Resequence` option applied to what its session receives.

:class:`ResequencedStream` feeds received items into a :class:`Resequencer` (with
where each was read, so a channel sent back is taken back: see
:meth:`ResequencedStream.rewind`) and keeps what it releases until a receive takes it.

Its hold window counts only what its session has looked at: a head held past a gap
is released only once the session, after the head's window ended, read every source
up to where that source ended (:meth:`ResequencedStream.look`). So a session slow to
read again (its user's loop works between receives) makes no number late that was
in its source in time; a number that truly never came holds its stream no longer
than the window and one read of every source.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raytopic.core.errors import InvalidTypeError
from raytopic.core.release_record import at_or_after
from raytopic.core.resequencer import Resequence, Resequencer, ResequencerStats, logger

__all__ = ["ResequencedStream"]


class ResequencedStream:
    """A :class:`Resequence` option applied to received items: in, out in order.

    Items go in with the value they carry (``feed``), come out in sequence
    order per correlation id (``take``). Nothing runs on its own: a head held
    past a gap goes out when the session's look ends (:meth:`look_due`,
    :meth:`look`, :meth:`looked`). ``on_ready`` is called whenever something was
    released, ``on_late`` with an item dropped as late (on the thread that fed
    it). ``origin`` says where an item was read (a source, such as its channel,
    and its position there), for :meth:`rewind`.

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
        self._resequencer = Resequencer(  # (its sweeper never runs: see look)
            name,
            timeout_ms=option.timeout_ms,
            capacity=option.capacity,
            start=option.start,
            on_release=self._release,
            on_late=None if on_late is None else lambda seq, item, correlation: on_late(item),
        )
        self._look: _Look | None = None

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

    def due(self) -> float | None:
        """When the first hold window of a head held now ends (a ``time.monotonic()``
        time); None: nothing is held, or a look is under way (its end decides)."""
        return None if self._look is not None else self._resequencer.due()

    def look_due(self, now: float) -> bool:
        """Whether a look is under way, or a held head's hold window ended by ``now``:
        the session is to read every source (:meth:`look`)."""
        if self._look is not None:
            return True
        due = self._resequencer.due()
        return due is not None and due <= now

    def look(self, at: float) -> bool:
        """The session begins, at ``at``, to read every source: once :meth:`looked`
        finds each read up to where it ended then, the heads whose hold window ended
        by ``at`` go out past their gaps. Returns whether it began (False: a look is
        under way, and goes on)."""
        if self._look is not None:
            return False
        self._look = _Look(at)
        return True

    def looked(self, reads: Mapping[Any, tuple[int, int] | None], blocked: bool) -> list[Any]:
        """Where the session's reading of every source stands, as each one's latest
        read since :meth:`look` began told: ``(next, end)``, the next position it
        reads there and the last position stored there (None: not read since). Each
        source's first end known since the look began is where the look reads it up
        to (what it gets later is not waited for: a busy source cannot hold a gap
        forever). When every source is read up to there, or the session can read no
        more (``blocked``: its window is full of what this stream holds, which no
        commit frees; a window that commits can free is waited for, the look going
        on), the look ends: the heads whose hold window ended by its beginning go out,
        past their gaps (see :meth:`Resequencer.expire`).

        Returns:
            The sources still to read (none: the look ended, or none is under way).
        """
        look = self._look
        if look is None:
            return []
        unread = look.unread(reads)
        if unread and not blocked:
            return unread
        self._look = None
        self._resequencer.expire(look.began)
        return []

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

    def put_back(self, items: Sequence[Any]) -> None:
        """Items taken before whose receive never reached its caller (Ray dropped the
        reply): released again, first, in the order they were taken."""
        with self._lock:
            self._released.extendleft(reversed(items))
        self._on_ready()

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


@dataclass(slots=True)
class _Look:
    """A look at every source under way: when it began, and where it reads each up to."""

    began: float
    upto: dict[Hashable, int] = field(default_factory=dict)
    """Source -> the last position stored there at its first read since ``began``."""

    def unread(self, reads: Mapping[Any, tuple[int, int] | None]) -> list[Hashable]:
        """The sources of ``reads`` not read yet up to where the look reads them."""
        unread: list[Hashable] = []
        for source, read in reads.items():
            if read is None or read[0] <= self.upto.setdefault(source, read[1]):
                unread.append(source)
        return unread
