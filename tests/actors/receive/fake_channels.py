"""Fake channels behind real reader ports, for the receive parts' unit tests (no Ray):
each records the requests it serves and answers takes from a count of elements."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from raytopic.core.errors import NotOwnerError
from raytopic.core.payloads import encode_values
from raytopic.core.protocol import (
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
    """Let the tasks started so far run (settles and give-backs are tasks of their own)."""
    for _ in range(count):
        await asyncio.sleep(0)


def delivery(channel: int, first: int, count: int, lease: ReaderLease = None) -> Delivery:
    """``count`` elements of ``channel`` from ``first`` (values: their sequences)."""
    origin = _Origin("t", "topic", "ns", "r", lease, 0)
    chunks = [Chunk(first, 0.0, encode_values(list(range(first, first + count))))] if count else []
    return Delivery.pack(channel, chunks, 0, first + count, first + count, -1, origin)


class FakeChannel:
    """A channel's end of a port: ``available`` elements from ``next``; a take waits
    while ``release`` is clear; ``refuse`` makes every call raise it."""

    def __init__(self, channel: int, available: int = 2) -> None:
        self.channel = channel
        self.next = 10
        self.available = available
        self.requests: list[ChannelRequest] = []
        self.release = asyncio.Event()
        self.release.set()
        self.refuse: BaseException | None = None

    def state(self, reader_id: str, lease: ReaderLease = None) -> CursorState:
        if isinstance(self.refuse, NotOwnerError):
            raise self.refuse
        return CursorState(self.next, self.next - 1, self.next + self.available - 1, 0)

    async def __call__(self, request: ChannelRequest) -> Any:
        self.requests.append(request)
        if self.refuse is not None:
            raise self.refuse
        if isinstance(request, Take):
            await self.release.wait()
            count = min(request.max_count, self.available)
            taken = delivery(self.channel, self.next, count, request.lease)
            self.next += count
            self.available -= count
            return taken
        if isinstance(request, Watch):
            return self.state(request.reader_id)
        return True

    def sent(self, kind: type) -> list[Any]:
        return [r for r in self.requests if isinstance(r, kind)]
