"""What every part of a channel shares: which channel it is, its incarnation, its
clock, the wake-up signal, and whether it serves (recovering, serving or failed).
No Ray.

The parts of a channel (its log, publisher table, readers, shared groups, dead
letters, session host, state) are plain classes; they meet here instead of
reaching into each other or into the actor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.core.config import TopicConfig
from raytopic.core.errors import ChannelFailedError, ChannelUnavailableError, TopicNotFoundError

logger = logging.getLogger(__name__)

__all__ = ["POLL_INTERVAL", "ChannelContext", "fresh_start", "stamp_clock"]

POLL_INTERVAL = 0.25
"""Seconds between re-checks while waiting on something a clock changes (TTL)."""


@dataclass(slots=True, eq=False)
class ChannelContext:
    """One channel's identity and wake-up signal, shared by its parts."""

    config: TopicConfig
    channel: int
    metrics: ChannelMetrics
    epoch: int = 1
    """The channel's incarnation (with a store: one more than the stored one)."""
    failure: str | None = None
    """Why the channel has failed (its store broke, or could not be recovered), or
    None. A failed channel answers every call with ChannelFailedError."""
    seeded: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the channel serves: at once, or for a channel restarted without a
    store once its coordinator restored its groups (until then it is recovering)."""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _listeners: list[Callable[[], bool]] = field(default_factory=list)
    _handing: list[Callable[[], None]] = field(default_factory=list)
    _waiting: int = 0
    """Calls waiting in :meth:`wait_change` now."""
    _woke: bool = False
    """A change since the last :meth:`answer_woken_first` woke a waiting call."""
    ended: str | None = None
    """Why every wait here ends and every request but the life cycle's is refused
    (the topic is being destroyed: :meth:`end_waits`), or None."""

    @property
    def name(self) -> str:
        """The topic's name."""
        return self.config.name

    def fail(self, reason: str) -> str:
        """The channel has failed (a write to its store failed: nothing since can be
        trusted): from now on every call gets ChannelFailedError. Returns the failure
        as every call reports it (the first one, if it had failed already)."""
        if self.failure is None:
            logger.error("channel %d of %s failed: %s", self.channel, self.name, reason)
            self.failure = f"channel {self.channel} of topic {self.name!r}: {reason}"
        self.notify()
        return self.failure

    @property
    def admits_all(self) -> bool:
        """Whether every request is admitted as it comes: the channel serves, has not
        failed, and its topic is not being destroyed (else see ``ChannelRecovery.admit``)."""
        return self.failure is None and self.ended is None and self.seeded.is_set()

    def check_serving(self) -> None:
        """For a read that would only report a state still to come.

        Raises:
            ChannelFailedError: the channel has failed.
            ChannelUnavailableError: it is recovering (try again).
        """
        if self.failure is not None:
            raise ChannelFailedError(self.failure)
        if not self.seeded.is_set():
            raise ChannelUnavailableError(
                f"channel {self.channel} restarted and is getting its groups back: try again"
            )

    def listen(self, listener: Callable[[], bool]) -> None:
        """Call ``listener`` on every :meth:`notify` (sessions hosted here hear of
        their host channel directly: no watcher task between an append and a
        waiting receive); it returns whether it woke a receive that waited."""
        self._listeners.append(listener)

    def before_answering(self, hand: Callable[[], None]) -> None:
        """Call ``hand`` in :meth:`answer_woken_first` before the calls it woke run (a
        receive session takes for its waiting receive there: the request that made
        data visible is done, and durable)."""
        self._handing.append(hand)

    def notify(self) -> None:
        """Wake everything waiting on this channel's state (data, room, commits)."""
        self.wake()
        for listener in self._listeners:
            if listener():
                self._woke = True

    def wake(self) -> None:
        """Wake the waiters of this channel only (not the sessions' listeners)."""
        if self._waiting:
            self._woke = True
        self._changed.set()
        self._changed = asyncio.Event()

    async def answer_woken_first(self) -> None:
        """If a change woke a waiting call (a receive, a fetch, a read), let it run
        before the caller goes on: a request that made data visible answers after
        the receives it woke, whose replies are what a consumer waits for (the
        publisher's ack is not). One turn of the event loop: a woken call resumes
        in the next one (no task between it and its wake-up, see :meth:`wait_change`).
        (A wake-up by an earlier request that does not ask, an ack's or a commit's,
        costs the next one that asks this turn.)"""
        if self._woke:
            self._woke = False
            for hand in self._handing:
                hand()
            await asyncio.sleep(0)

    def end_waits(self, reason: str) -> None:
        """The topic is being destroyed: every wait here (a ring buffer read for data,
        an append for room, ...) raises TopicNotFoundError(``reason``) from now on,
        so a call waiting when the actor is killed answers typed, not with Ray's
        ActorDiedError; so does every request admitted from now on (an append that
        came after would meet a store removed under it: StoreError)."""
        self.ended = reason
        self.notify()

    async def wait_change(self, timeout: float | None) -> None:
        """Return at the next :meth:`notify` or :meth:`wake`, or after ``timeout`` seconds.

        Raises:
            TopicNotFoundError: the topic is being destroyed (:meth:`end_waits`).
        """
        if self.ended is None:
            changed = self._changed
            self._waiting += 1
            try:
                # Not wait_for: its task around the wait would cost the woken call
                # two more turns of the loop before it resumes.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await changed.wait()
            finally:
                self._waiting -= 1
        if self.ended is not None:
            raise TopicNotFoundError(self.ended)


def stamp_clock() -> float:
    """Now, in whole microseconds: the resolution of the datetimes users see.

    An element's ``timestamp`` (and its PublishStatus's) is a datetime, which
    keeps microseconds; a finer stamp would round, and ``seek(c, t)`` with an
    element's own timestamp would then land before that element instead of
    after it.
    """
    return round(time.time(), 6)


def fresh_start() -> int:
    """Where a channel restarted without a store numbers its elements (and jump
    counts) from: the time in microseconds, times 1024. Later than every position
    (and jump count) of an earlier incarnation unless one appended more than a
    thousand elements per microsecond of its life, and it needs no memory of the
    earlier incarnations (the epoch a coordinator remembers may be stale)."""
    return (time.time_ns() // 1000) << 10
