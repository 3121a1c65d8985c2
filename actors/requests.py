"""The channel's data-path requests, typed: one small record per call, built by keyword.

Ray serializes each argument of an actor call on its own, at tens of
microseconds each way; the data-path calls carry five to eight small
arguments, so they travel as one record (about a quarter of a millisecond
less per call here), pickled by :func:`pack_request` and served by
``ChannelActor.request``. A record is a NamedTuple: it pickles as its class
and a tuple (no per-field names on the wire), and is built by keyword, so a
call site reads ``Take(reader_id=..., wait=...)`` instead of a row of
positional flags. Bulk data (an append's payload) is NOT in the record: it
travels as the call's second argument, so Ray's pickle protocol 5 moves its
buffer out of band. The records hold no ObjectRefs.
"""

from __future__ import annotations

import pickle
from typing import Any, NamedTuple

from raytopic.core.errors import InvalidArgumentError

__all__ = [
    "Ack",
    "TRANSACTION_REQUESTS",
    "Append",
    "AppendOnce",
    "ChannelRequest",
    "DecideTransaction",
    "FenceTransactions",
    "FinishTransaction",
    "ForgetTransaction",
    "PrepareTransaction",
    "ResolveTransaction",
    "StageTransaction",
    "TransactionRequest",
    "ExtendLease",
    "GiveBack",
    "Nack",
    "Receive",
    "ReportPoison",
    "SettleTake",
    "StopTake",
    "Take",
    "Watch",
    "pack_request",
    "unpack_request",
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


class StageTransaction(NamedTuple):
    """Keep elements published in a transaction apart from the ring (its payload is
    the call's second argument)."""

    key: str
    transactional_id: str
    deadline: float
    timeout: float | None
    method = "stage"


class PrepareTransaction(NamedTuple):
    """Check and keep durably what a transaction does here, before its decision."""

    key: str
    transactional_id: str
    deadline: float
    lead: tuple[str, str, str, int]
    staged: int
    """How many elements the holder staged here (fewer: the channel lost some)."""
    commits: tuple[Any, ...]
    """ConsumedCommits made here."""
    method = "prepare"


class DecideTransaction(NamedTuple):
    """At the transaction's lead: record its outcome and finish it here, in one step."""

    key: str
    transactional_id: str
    deadline: float
    outcome: str
    reason: str
    staged: int
    commits: tuple[Any, ...]
    forget: tuple[str, ...] = ()
    """Earlier transactions it led whose participants all finished."""
    method = "decide"


class FinishTransaction(NamedTuple):
    """At a participant other than the lead: the decided outcome."""

    key: str
    transactional_id: str
    deadline: float
    outcome: str
    reason: str
    method = "finish"


class ResolveTransaction(NamedTuple):
    """At the lead: the outcome of a transaction (None: undecided); past its
    deadline an undecided one is aborted."""

    key: str
    transactional_id: str
    deadline: float
    method = "resolve"


class ForgetTransaction(NamedTuple):
    """Every participant finished the transaction: its outcome is no longer needed."""

    key: str
    method = "forget"


class FenceTransactions(NamedTuple):
    """Incarnations of ``transactional_id`` older than ``epoch`` are fenced: their
    staged transactions here are aborted, their stagings refused."""

    transactional_id: str
    epoch: int
    method = "fence"


TransactionRequest = (
    StageTransaction
    | PrepareTransaction
    | DecideTransaction
    | FinishTransaction
    | ResolveTransaction
    | ForgetTransaction
    | FenceTransactions
)
"""A transaction's request, served by ``ChannelActor.transact``."""

TRANSACTION_REQUESTS = (
    StageTransaction,
    PrepareTransaction,
    DecideTransaction,
    FinishTransaction,
    ResolveTransaction,
    ForgetTransaction,
    FenceTransactions,
)

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

REQUEST_TYPES = (
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


def pack_request(request: ChannelRequest | TransactionRequest) -> bytes:
    """One request as the single bytes argument of ``ChannelActor.request``."""
    return pickle.dumps(request, protocol=5)


def unpack_request(packed: bytes, kinds: tuple[type, ...] = REQUEST_TYPES) -> Any:
    """The request packed by :func:`pack_request`, one of ``kinds``.

    Raises:
        InvalidArgumentError: not a packed request of a data-path call.
    """
    try:
        request = pickle.loads(packed)
    except Exception as error:
        raise InvalidArgumentError(f"not a packed channel request: {error}") from None
    if not isinstance(request, kinds):
        raise InvalidArgumentError(f"{type(request).__name__} is not a channel request")
    return request
