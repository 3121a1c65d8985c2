"""The channel's data-path requests, typed: one small record per call, built by keyword.

Ray serializes each argument of an actor call on its own, at tens of
microseconds each way; the data-path calls carry five to eight small
arguments, so they travel as one record (about a quarter of a millisecond
less per call here), pickled by :func:`~raytopic.core.protocol.codec.pack_request`
and served by ``ChannelActor.request``. A record is a NamedTuple: it pickles
as its class and a tuple (no per-field names on the wire), and is built by
keyword, so a call site reads ``Take(reader_id=..., wait=...)`` instead of a
row of positional flags. Bulk data (an append's payload) is NOT in the
record: it travels as the call's second argument, so Ray's pickle protocol 5
moves its buffer out of band. The records hold no ObjectRefs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "Ack",
    "Append",
    "AppendOnce",
    "CHANNEL_REQUESTS",
    "ChannelRequest",
    "ExtendLease",
    "GiveBack",
    "Nack",
    "Receive",
    "ReportPoison",
    "SettleTake",
    "StopTake",
    "Take",
    "Watch",
]

Entries = tuple[tuple[int, int, int], ...]
"""Shared-group delivery ids: (sequence, delivery count, channel epoch)."""


class Append(NamedTuple):
    """Append one publisher batch (its payload is the call's second argument)."""

    publisher_id: str
    batch: int
    """The publisher's batch number on this channel (0, 1, 2, ...)."""
    overflow: str
    timeout: float | None
    statuses: bool = False
    """Reply with the batch's statuses (``publish_batch``) instead of an ack."""
    method = "append"


class AppendOnce(NamedTuple):
    """Append a writer's ``version`` unless the channel has it (exactly once)."""

    writer_id: str
    version: int
    overflow: str
    timeout: float | None
    method = "append_once"


class Receive(NamedTuple):
    """A subscriber's receive, served by its session at this channel."""

    reader_id: str
    stream: str
    number: int
    max_count: int
    single: bool
    spread: bool = False
    here_only: bool = False
    view: tuple[int, dict[int, Any]] | None = None
    method = "receive"


class Take(NamedTuple):
    """Deliver up to ``max_count`` elements; with ``wait``, a fetch that waits first."""

    reader_id: str
    fence: Any
    max_count: int
    wait: float = 0.0
    token: str | None = None
    method = "take"


class StopTake(NamedTuple):
    """End the wait of fetch ``token``."""

    token: str
    method = "stop_take"


class SettleTake(NamedTuple):
    """A fetch's session used what it took, up to ``give_back_from`` (None: all)."""

    reader_id: str
    fence: Any
    token: str
    give_back_from: int | None
    method = "settle_take"


class Watch(NamedTuple):
    """The reader's cursor state once it differs from ``known``."""

    reader_id: str
    fence: Any
    known: Any
    timeout: float
    method = "watch"


class GiveBack(NamedTuple):
    """Undo a take nobody saw."""

    reader_id: str
    fence: Any
    first: int
    expected_next: int
    jumps: int
    entries: tuple[tuple[int, int], ...] = ()
    method = "give_back"


class ReportPoison(NamedTuple):
    """A receive's reply held an element its reader could not decode (see
    ``raytopic.actors.poison``): stop before it, or (``skipped``) count it."""

    reader_id: str
    fence: Any
    jumps: int
    """The reader's cursor jump count at the take that delivered it."""
    sequence: int
    cause_type: str
    cause_message: str
    skipped: bool = False
    method = "report_poison"


class Ack(NamedTuple):
    """Acknowledge elements a shared group's member holds."""

    reader_id: str
    entries: Entries
    single: bool = False
    """Answer one status (the call named one element), not a list."""
    method = "ack"


class Nack(NamedTuple):
    """Give elements back to their shared group, delivered again after ``delay`` s."""

    reader_id: str
    entries: Entries
    delay: float = 0.0
    single: bool = False
    method = "nack"


class ExtendLease(NamedTuple):
    """Move the ack deadlines of elements a member holds."""

    reader_id: str
    entries: Entries
    seconds: float | None = None
    single: bool = False
    method = "extend_lease"


ChannelRequest = (
    Append
    | AppendOnce
    | Receive
    | Take
    | StopTake
    | SettleTake
    | Watch
    | GiveBack
    | ReportPoison
    | Ack
    | Nack
    | ExtendLease
)
"""Any data-path request."""

CHANNEL_REQUESTS = (
    Append,
    AppendOnce,
    Receive,
    Take,
    StopTake,
    SettleTake,
    Watch,
    GiveBack,
    ReportPoison,
    Ack,
    Nack,
    ExtendLease,
)
"""The request records a channel serves through ``request``."""
