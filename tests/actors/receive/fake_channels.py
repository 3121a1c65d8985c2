"""Fake channels behind real reader ports, for the receive parts' unit tests (no Ray):
each records the requests it serves and keeps one reader's read position by the
channel's rule (``Take``: a take reads from the session's position while the read
position stands where the session left it, and moves it; a fetch offers)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from raytopic.core.errors import NotOwnerError
from raytopic.core.payloads import encode_values
from raytopic.core.protocol import (
    STANDS_UNKNOWN,
    ChannelRequest,
    Chunk,
    CursorState,
    Delivery,
    ReaderLease,
    Take,
    Watch,
)
from raytopic.core.records import _Origin


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    """Run a coroutine function on a fresh event loop, with an overall guard."""

    async def guarded() -> Any:
        return await asyncio.wait_for(main(), 10.0)

    return asyncio.run(guarded())


async def turns(count: int = 5) -> None:
    """Let the tasks started so far run (replies heard, takes of nothing sent)."""
    for _ in range(count):
        await asyncio.sleep(0)


def delivery(
    channel: int,
    first: int,
    count: int,
    lease: ReaderLease = None,
    *,
    jumps: int = 0,
    stands: int | None = None,
    shared: bool = False,
    passed: tuple[int, int] | None = None,
) -> Delivery:
    """``count`` elements of ``channel`` from ``first`` (values: their sequences)."""
    origin = _Origin("t", "topic", "ns", "r", lease, jumps, shared)
    chunks = [Chunk(first, 0.0, encode_values(list(range(first, first + count))))] if count else []
    end = first + count
    return Delivery.pack(channel, chunks, jumps, end, end, -1, origin, stands=stands, passed=passed)


class FakeChannel:
    """A channel's end of a port: elements up to ``tail``, the reader's read position
    ``next`` under jump count ``jumps``; a take waits while ``release`` is clear;
    ``refuse`` makes every call raise it (``drop_reply``: a take's, once it took); a
    watch whose ``known`` is the state now waits while ``settle`` is clear; a take
    that stands at ``done``'s first position reads past it (``Delivery.passed``)."""

    def __init__(self, channel: int, available: int = 2) -> None:
        self.channel = channel
        self.next = 10
        self.tail = 10 + available - 1
        self.jumps = 0
        self.shared = False
        self.requests: list[ChannelRequest] = []
        self.release = asyncio.Event()
        self.release.set()
        self.settle = asyncio.Event()
        self.settle.set()
        self.refuse: BaseException | None = None
        self.done: tuple[int, int] | None = None
        self.drop_reply: BaseException | None = None

    @property
    def available(self) -> int:
        return self.tail - self.next + 1

    @available.setter
    def available(self, count: int) -> None:
        self.tail = self.next + count - 1

    def state(self, reader_id: str, lease: ReaderLease = None) -> CursorState:
        if isinstance(self.refuse, NotOwnerError):
            raise self.refuse
        return CursorState(self.next, self.next - 1, self.tail, self.jumps)

    def jump(self, to: int) -> None:
        """A seek: the read position moves to ``to`` and the jump count rises."""
        self.next, self.jumps = to, self.jumps + 1

    async def __call__(self, request: ChannelRequest) -> Any:
        self.requests.append(request)
        if self.refuse is not None:
            raise self.refuse
        if isinstance(request, Take):
            await self.release.wait()
            taken = self._take(request)
            if self.drop_reply is not None:
                raise self.drop_reply  # the take moved the read position; Ray lost its reply
            return taken
        if isinstance(request, Watch):
            if request.known == self.state(request.reader_id):
                await self.settle.wait()
            return self.state(request.reader_id)
        return True

    def take_now(self, take: Take) -> Delivery | None:
        """The host's take served at once: None where it would wait (held back, or
        nothing to take)."""
        self.requests.append(take)
        if self.refuse is not None:
            raise self.refuse
        if not self.release.is_set() or not self.available:
            return None
        return self._take(take)

    def _take(self, request: Take) -> Delivery:
        if (
            request.from_sequence is not None
            and request.jumps == self.jumps
            and (request.stands in (self.next, STANDS_UNKNOWN))
        ):
            self.next = request.from_sequence
        passed = None
        if self.done is not None and self.next == self.done[0] and request.max_count:
            passed, self.next = self.done, self.done[1] + 1
        start = self.next
        count = max(0, min(request.max_count, self.tail - start + 1))
        if not request.wait:
            self.next = start + count
        return delivery(
            self.channel,
            start,
            count,
            request.lease,
            jumps=self.jumps,
            stands=self.next,
            shared=self.shared,
            passed=passed,
        )

    def sent(self, kind: type) -> list[Any]:
        return [r for r in self.requests if isinstance(r, kind)]
