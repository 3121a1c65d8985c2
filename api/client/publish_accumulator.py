"""What a publisher's next call to each channel carries. No Ray.

A publisher keeps one :class:`ChannelQueue` per channel: the values ``publish()``
is batching (its open batch) and, behind them in publish order, the pieces
waiting for a call: batches of ``publish()``'s values closed at ``batch_size``,
and ``publish_batch`` parts (:class:`Part`). While a channel's calls are in
flight, what is published for it waits and coalesces, so one call carries what
a full batch would, however the values came (value by value, or batches spread
over many channels). A call takes the oldest pieces (:meth:`ChannelQueue.take`):
up to ``batch_size`` values, never splitting a piece, at most MAX_PIECES of them.
The channel appends a call's pieces in order, each as the publisher batch it
numbers (``raytopic.core.protocol.AppendPieces``).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raytopic.client.publish_futures import PublishBatch

if TYPE_CHECKING:
    from raytopic.client.publish_futures import BatchFuture
    from raytopic.core.payloads import Payload

__all__ = [
    "BATCHES_OUT",
    "MAX_PIECES",
    "PARTS_PIPELINE",
    "PIPELINE",
    "ChannelQueue",
    "Part",
    "Piece",
]

PIPELINE = 2
"""Calls to one channel a partial batch may queue behind: two keep a channel
busy (one in flight while the next fills) and let batches grow under load."""

PARTS_PIPELINE = 1
"""The same for a partial batch holding ``publish_batch`` parts: a part is a batch
its caller made, so it waits for its channel's call to return and goes with the
parts queued meanwhile (a second call in flight carrying a part or two cost the
channel more than the round trip it saves: one publisher's ``publish_batch(1000,
ref=False)`` over 4 channels made calls of ~250 values)."""

MAX_PIECES = 8
"""Pieces one call carries at most. Each is a publisher batch the channel keeps an
ack of for retries (``raytopic.actors.publisher_tracks.ACKS_KEPT``, 16): PIPELINE
calls of MAX_PIECES stay within them."""

BATCHES_OUT = 16
"""Batch numbers a publisher has out at one channel at most, counted from the
oldest call not returned (``raytopic.actors.publisher_tracks.ACKS_KEPT``). A
channel that restarted answers each call Ray retries (those not returned) from
the acks it kept; one older than those would be refused as stale, though it may
have gone in. So a call waits while it would pass them: a flush sends at most
this many batches to a channel at once, and a ``publish_batch`` part waits."""


@dataclass(slots=True, eq=False)
class Part:
    """One channel's share of a ``publish_batch``, waiting for its call: it goes in
    whole (or, with overflow "fail", not at all)."""

    payload: Payload
    batch: BatchFuture
    """The publish_batch's future, which this part's ack completes in part."""
    index: int
    """The part's index among the batch's parts."""

    def __len__(self) -> int:
        return len(self.payload)


Piece = PublishBatch | Part
"""What a call carries, piece by piece: values ``publish()`` batched, or a part."""


@dataclass(slots=True, eq=False)
class ChannelQueue:
    """One channel as a publisher sees it: the values being batched, the pieces
    waiting behind calls in flight, and the batch numbers it gave out."""

    channel: int
    actor: Any
    open: PublishBatch
    """``publish()``'s values not closed yet: they come after every waiting piece."""
    waiting: deque[Piece] = field(default_factory=deque)
    waiting_values: int = 0
    waiting_parts: int = 0
    """Parts among ``waiting``."""
    since: float = 0.0
    """Monotonic time the queue last went from empty to holding values (linger)."""
    next_batch: int = 0
    """The publisher's number of the next piece sent to this channel."""
    in_flight: int = 0
    """Calls to this channel not yet returned."""
    out: dict[int, int] = field(default_factory=dict)
    """The first batch number of each call not yet returned: its numbers and the
    later ones stay within BATCHES_OUT."""

    def room(self) -> int:
        """Batch numbers a call may take now (BATCHES_OUT from the oldest out)."""
        return BATCHES_OUT - (self.next_batch - min(self.out)) if self.out else BATCHES_OUT

    def sent(self, count: int) -> int:
        """Give a call ``count`` batch numbers; returns the first, counted out."""
        first = self.next_batch
        self.next_batch += count
        self.in_flight += 1
        self.out[first] = count
        return first

    def returned(self, first: int) -> None:
        """The call whose first batch number is ``first`` returned."""
        self.in_flight -= 1
        self.out.pop(first, None)

    @property
    def size(self) -> int:
        """Values waiting for a call, the open batch's included."""
        return self.waiting_values + len(self.open.payloads)

    def add_value(self, payload: bytes, key: Any, now: float | None, batch_size: int) -> Any:
        """Batch one ``publish()``ed value (the open batch closes at ``batch_size``);
        returns its future. ``now``: the monotonic time, or None to read it only when
        the queue was empty (``since``): this runs once a published value."""
        batch = self.open
        payloads = batch.payloads
        if not payloads and not self.waiting_values:
            self.since = time.monotonic() if now is None else now
        future = batch.add(payload, key)
        if len(payloads) >= batch_size:
            self.close_open()
        return future

    def add_part(self, part: Part, now: float) -> None:
        """Queue a ``publish_batch`` part, after everything published before it."""
        if not self.size:
            self.since = now
        self.close_open()
        self.waiting.append(part)
        self.waiting_values += len(part)
        self.waiting_parts += 1

    def close_open(self) -> None:
        """The open batch stops taking values and waits for a call."""
        batch = self.open
        if batch.payloads:
            self.waiting.append(batch)
            self.waiting_values += len(batch.payloads)
            self.open = PublishBatch(batch.topic_id, self.channel)

    def due(self, batch_size: int, *, force: bool, linger: float, now: float) -> int:
        """How many values a call would go for now (0: none goes yet): a full
        batch's worth at once, a partial one only while fewer than PIPELINE calls
        (PARTS_PIPELINE, if parts wait) are out and it is ``linger`` old (any, with
        ``force``)."""
        size = self.size
        if self.room() < 1:
            return 0
        if size >= batch_size:
            return size
        pipeline = PARTS_PIPELINE if self.waiting_parts else PIPELINE
        if size and (force or (self.in_flight < pipeline and now - self.since >= linger)):
            return size
        return 0

    def take(self, batch_size: int) -> tuple[int, list[Piece]]:
        """The next call's pieces, oldest first: up to ``batch_size`` values (at least
        one piece: a part larger than that goes alone) and MAX_PIECES pieces (fewer
        if :meth:`room` has fewer numbers). Returns the first piece's batch number
        and the pieces, counted in flight."""
        if not self.waiting or self.waiting_values + len(self.open.payloads) <= batch_size:
            self.close_open()
        pieces: list[Piece] = []
        count = 0
        waiting = self.waiting
        most = max(1, min(MAX_PIECES, self.room()))
        while waiting and len(pieces) < most:
            size = _size(waiting[0])
            if pieces and count + size > batch_size:
                break
            piece = waiting.popleft()
            pieces.append(piece)
            count += size
            self.waiting_parts -= type(piece) is Part
        self.waiting_values -= count
        if not pieces:
            raise ValueError(f"channel {self.channel}: nothing waits for a call")
        return self.sent(len(pieces)), pieces

    def take_all(self) -> list[Piece]:
        """Every piece not sent (the open batch's values included), emptied."""
        self.close_open()
        pieces = list(self.waiting)
        self.waiting.clear()
        self.waiting_values = self.waiting_parts = 0
        return pieces


def _size(piece: Piece) -> int:
    return len(piece.payloads) if isinstance(piece, PublishBatch) else len(piece)


def piece_count(pieces: list[Piece]) -> int:
    """Values in ``pieces``."""
    return sum(map(_size, pieces))
