"""Run each sender's requests one at a time, in the order it numbered them.

Ray does not promise that an async actor starts calls in the order one caller
submitted them, so every ordered stream (a publisher's batches to a channel,
a subscriber's receives at its host channel) numbers its calls from 0 and the
actor takes turns by number. A number that never arrives (the call was
cancelled before it reached the actor) is skipped after ``gap_timeout``
seconds, but only while no call of that stream is running: a long receive
that waits for data holds the turn for as long as it needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

__all__ = ["DuplicateTurnError", "Turns"]


class DuplicateTurnError(Exception):
    """A number at or below one already taken: the call is a retry or a duplicate."""


@dataclass(slots=True)
class _Stream:
    next: int = 0
    started: bool = False  # a call of it ran here
    running: bool = False
    abandoned: set[int] = field(default_factory=set)
    waiting: list[int] = field(default_factory=list)  # numbers queued now
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def advance(self, number: int) -> None:
        self.started = True
        self.next = number + 1
        while self.next in self.abandoned:
            self.abandoned.discard(self.next)
            self.next += 1
        self.changed.set()
        self.changed = asyncio.Event()


class Turns:
    """Turn-taking by sequence number, per stream key."""

    def __init__(self, gap_timeout: float = 5.0, unknown_start: float | None = None) -> None:
        """Args:
        gap_timeout: Seconds a number waits for a missing lower one.
        unknown_start: If set, a stream's numbering may start anywhere (an actor
            that restarted meets senders mid-stream): its first call waits only
            this long for lower numbers (ones sent just before it) to arrive.
        """
        self._gap_timeout = gap_timeout
        self._unknown_start = unknown_start
        self._streams: dict[Hashable, _Stream] = {}

    def expected(self, key: Hashable) -> int:
        """The number the stream ``key`` runs next."""
        stream = self._streams.get(key)
        return stream.next if stream else 0

    @asynccontextmanager
    async def turn(self, key: Hashable, number: int) -> AsyncIterator[None]:
        """Wait until it is ``number``'s turn on stream ``key``, then hold the turn.

        Raises:
            DuplicateTurnError: ``number`` already ran (or was skipped).
        """
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = _Stream()
        try:
            while number != stream.next or stream.running:
                if number < stream.next:
                    raise DuplicateTurnError(f"call {number} of {key!r} already ran")
                changed = stream.changed
                stream.waiting.append(number)
                wait = self._gap_timeout
                if self._unknown_start is not None and not stream.started:
                    wait = self._unknown_start
                try:
                    await asyncio.wait_for(changed.wait(), wait)
                except TimeoutError:
                    # A timeout that fires as a turn ends (changed is set) has not
                    # waited out a gap with nothing running: wait a whole gap again.
                    quiet = not stream.running and not changed.is_set()
                    if quiet and stream.next < number == min(stream.waiting):
                        # The calls before this one never arrived: skip them (but
                        # never a lower number that is queued: it runs first).
                        stream.next = number
                finally:
                    stream.waiting.remove(number)
        except asyncio.CancelledError:
            # Cancelled while queued: let later numbers pass over this one.
            if number == stream.next and not stream.running:
                stream.advance(number)
            elif number > stream.next:
                stream.abandoned.add(number)
            raise
        stream.running = True
        try:
            yield
        finally:
            stream.running = False
            stream.advance(number)

    def resume(self, key: Hashable, number: int) -> None:
        """Start the stream ``key`` at ``number`` (a restarted actor continues a
        sender's numbering where its store left it)."""
        stream = self._streams.setdefault(key, _Stream())
        stream.next = max(stream.next, number)

    def rewind(self, key: Hashable, number: int) -> None:
        """Let ``number`` run again on stream ``key`` (a call that ended short is run
        again for its rest): the stream's later numbers wait for it."""
        stream = self._streams.setdefault(key, _Stream())
        stream.next = min(stream.next, number)

    def forget(self, key: Hashable) -> bool:
        """Drop the stream ``key`` (its sender is gone) unless a call of it runs or
        waits; return whether it is gone."""
        stream = self._streams.get(key)
        if stream is not None and (stream.running or stream.waiting):
            return False
        self._streams.pop(key, None)
        return True
