"""The channel's data-path requests, typed: one small record per call, built by keyword.

Ray serializes each argument of an actor call on its own, at tens of
microseconds each way; the data-path calls carry five to eight small
arguments, so they travel as one record (about a quarter of a millisecond
less per call here), pickled by :func:`~raytopic.core.protocol.codec.pack_request`
and served by ``ChannelActor.request``, which
dispatches on the record's type. A record is a NamedTuple: it pickles
as its class and a tuple (no per-field names on the wire), and is built by
keyword, so a call site reads ``Take(reader_id=..., wait=...)`` instead of a
row of positional flags. Bulk data (an append's payload) is NOT in the
record: it travels as the call's second argument, so Ray's pickle protocol 5
moves its buffer out of band. The records hold no ObjectRefs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from raytopic.core.protocol.records import ReaderLease

__all__ = [
    "Ack",
    "AddAll",
    "Append",
    "AppendOnce",
    "AppendPieces",
    "AppendUnless",
    "CHANNEL_REQUESTS",
    "PACKED_REPLIES",
    "SIBLING_REQUESTS",
    "STANDS_UNKNOWN",
    "ChannelRequest",
    "Commit",
    "CommitThenReceive",
    "DirectLine",
    "ExtendHold",
    "FirstAfter",
    "InterruptReceives",
    "Nack",
    "OfferSent",
    "ReadCursor",
    "ReadMany",
    "ReadOne",
    "ReadNewest",
    "ReadRange",
    "ReadHandOverMark",
    "ReadCommitFloors",
    "READ_WAIT_MOST",
    "ReadLatest",
    "ReadResequencerStats",
    "ReceivesLost",
    "ReadRingFigures",
    "Receive",
    "ReportPoison",
    "ResumeReceives",
    "Seek",
    "SeekToCommitted",
    "PauseReceives",
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
    each: bool = False
    """The values were published one by one (``Publisher.publish``): under "block"
    what fits goes in at once and only the rest waits for room (see
    ``ChannelLog.append``)."""


class AppendPieces(NamedTuple):
    """Append a publisher's next pieces, as its batches ``batch``, ``batch + 1``, ...,
    in that order (the payloads are the call's second argument, one per piece).
    The reply is each piece's AppendAck, in order: a piece refused does not stop
    the next (each piece is appended as an ``Append`` of its own would be)."""

    publisher_id: str
    batch: int
    """The publisher's number of the first piece on this channel."""
    overflow: str
    timeout: float | None
    whole: tuple[bool, ...]
    """Per piece: a ``publish_batch`` part, which goes in whole (or, with "fail", not
    at all); else values ``Publisher.publish`` batched (``Append.each``)."""


class AppendOnce(NamedTuple):
    """Append a writer's ``version`` unless the channel has it (exactly once)."""

    writer_id: str
    version: int
    overflow: str
    timeout: float | None


class AppendUnless(NamedTuple):
    """Append each keyed value (the payload, the call's second argument) unless its
    key's latest value is a mapping whose ``field`` is one of ``refused``: the check
    and the append are one step at the channel, so two writers of a key never both
    pass it (a compacted topic's conditional write: a task's start, outcome or
    cancel). The reply is, per value, None (appended) or the latest value that
    refused it."""

    field: str
    refused: tuple[Any, ...]
    timeout: float | None


class ReadLatest(NamedTuple):
    """The latest value of each key (None: the key has none) of a compacted channel,
    and the keys changed since the reader's mark ``since`` (its last read's), at most
    ``most`` (the newest): the reply is (values, the mark now, whether the reader must
    drop what it learnt before: its mark is of another incarnation of the channel or
    too old, [(key changed, its latest value or None)]).

    With ``wait`` (seconds, at most ``READ_WAIT_MOST``): while every key's latest value
    has its ``field`` in ``waiting`` (a key with no value, or a value that is no mapping,
    has None there: a pending task; a started one), the read waits at the channel, up
    to ``wait``, and answers as soon as one of them changes (a poller of a task learns
    of its outcome when the log holds it, not a poll later)."""

    keys: tuple[Any, ...]
    since: tuple[str, int] | None = None
    most: int = 0
    field: str = ""
    waiting: tuple[Any, ...] = ()
    wait: float = 0.0


READ_WAIT_MOST = 60.0
"""The longest a ``ReadLatest`` waits for a change (seconds)."""


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


class Take(NamedTuple):
    """Hand the reader up to ``max_count`` elements, read by position.

    A receive session keeps, per channel, where it reads on (``from_sequence``)
    and where it left the reader's read position here (``stands``, under the
    cursor's jump count ``jumps``): see ``raytopic.actors.receive.positions``. If
    the read position still stands there, the take reads from ``from_sequence``
    (the position moves there first: forward over what the session handed over
    from a fetch, back over what it took and never handed over); otherwise (a
    seek, a reset, a new owner, another session of the reader read on) from
    where the read position stands. None: the session knows no position here.
    Taking the same position again gives the same elements: nothing is lent.

    With ``wait``, a *fetch*: it waits up to ``wait`` seconds for an element at
    its position and hands out what it finds as an offer that moves nothing
    (``Delivery.stands``); it ends, taking nothing, when the read position moves
    meanwhile. A take of nothing (``max_count`` 0) only moves the read position.
    """

    reader_id: str
    lease: ReaderLease
    max_count: int
    wait: float = 0.0
    from_sequence: int | None = None
    stands: int = -1
    """Where the session left the read position (``STANDS_UNKNOWN``: a take of its
    own may have moved it, its reply lost: read from ``from_sequence`` wherever it
    stands, under the same jump count)."""
    jumps: int = 0
    again: bool = False
    """The session that read here before for this reader was lost with its host
    channel (it restarted): a group reads again after its commit (what that
    session took may never have been handed over)."""
    unseen: bool = False
    """``from_sequence`` went out in a reply that never reached the reader's user (Ray
    dropped it under a ``ray.cancel``): the cursor's commits stop below it until a
    take serves it again (a cumulative commit of a later element must not pass it)."""
    direct: DirectLine | None = None
    """A fetch's: where the channel also writes its reply straight to the session's
    host process, if it runs on the same node (see ``raytopic.actors.direct_offers``)."""


class DirectLine(NamedTuple):
    """A host's line for one fetch's offer (see ``raytopic.actors.direct_offers``)."""

    node_id: str
    """The Ray node the host runs on: a channel on another node replies by Ray alone."""
    address: str
    """The host process's socket (a Linux abstract Unix socket name)."""
    token: bytes
    """This fetch's token: the host reads only an offer for a token it is waiting on."""


class OfferSent(NamedTuple):
    """A sibling's Ray reply to a fetch whose offer it wrote whole to the host's line
    (see ``raytopic.actors.direct_offers``): the offer is on its way there, unless
    that line breaks first (the fetch then fails and is looked at again)."""

    line: bytes
    """The line the offer went on (the id the sibling sent first on it)."""


STANDS_UNKNOWN = -2
"""``Take.stands`` of a session whose earlier take there Ray reported cancelled after
it was sent (a user's ``ray.cancel`` of the receive reaches its calls to the
siblings): that take may have moved the read position, and its reply is lost."""


class Watch(NamedTuple):
    """The reader's cursor state once it differs from ``known``."""

    reader_id: str
    lease: ReaderLease
    known: Any
    timeout: float


class ReportPoison(NamedTuple):
    """A receive's reply held an element its reader could not decode (see
    ``raytopic.actors.poison``): stop before it, or (``skipped``) count it."""

    reader_id: str
    lease: ReaderLease
    jumps: int
    """The reader's cursor jump count at the take that delivered it."""
    sequence: int
    cause_type: str
    cause_message: str
    skipped: bool = False


class Ack(NamedTuple):
    """Acknowledge elements: a shared group's member's holds, or an owned reader's
    elements done one by one."""

    reader_id: str
    entries: Entries
    single: bool = False
    """Answer one status (the call named one element), not a list."""
    lease: ReaderLease = None
    """An owned group member's lease of the channel (None: anonymous, or shared)."""
    jumps: tuple[int, ...] = ()
    """An owned reader's: the jump count each element was read at (see ``Commit``)."""


class Nack(NamedTuple):
    """Give elements back to their shared group, delivered again after ``delay`` s."""

    reader_id: str
    entries: Entries
    delay: float = 0.0
    single: bool = False


class ExtendHold(NamedTuple):
    """Move the ack deadlines of elements a member holds."""

    reader_id: str
    entries: Entries
    seconds: float | None = None
    single: bool = False


class Commit(NamedTuple):
    """Commit ``sequence`` (and every earlier one) for the reader or its group."""

    reader_id: str
    sequence: int
    lease: ReaderLease
    jumps: int | None = None
    """The jump count an element's commit read it at (None: a bare position); one
    read before the cursor's last reset is REJECTED."""
    bound: int | None = None
    """Commit no further than this: a resequenced element's hand-over mark."""


class CommitThenReceive(NamedTuple):
    """A commit, then the same reader's next receive here, served as one unit of work:
    an iteration's commit per batch carries the receive it would send next (one call
    fewer per batch). The call has two returns, each part's reply or its typed error:
    the commit's (applied and durable before either is answered), then the receive's."""

    commit: Commit
    receive: Receive


class Seek(NamedTuple):
    """Move the reader's cursor: ``target`` is a sequence ("next is the first after
    it") or, with ``by_time``, a time stamp ("next is the first published after it")."""

    reader_id: str
    lease: ReaderLease
    target: int | float
    by_time: bool
    commit: bool


class SeekToCommitted(NamedTuple):
    """Move the reader's cursor back to its commit: what was delivered since comes
    again, and a commit of it is REJECTED (a reader's own reset to its commit: an
    aborted transaction's inputs). A commit a prepared transaction may still make
    there is waited for first."""

    reader_id: str
    lease: ReaderLease


class ReadCursor(NamedTuple):
    """The reader's cursor state (checked against ``lease`` unless None)."""

    reader_id: str
    lease: ReaderLease = None


class ReadRingFigures(NamedTuple):
    """The ring buffer's head, tail, size, capacity and room, read together."""


class FirstAfter(NamedTuple):
    """The sequence of the first element stamped strictly after ``stamp``."""

    stamp: float


class AddAll(NamedTuple):
    """Append items through the ring buffer API (the payload is the call's second
    argument)."""

    overflow: str
    timeout: float | None = None


class ReadOne(NamedTuple):
    """The element at ``sequence``."""

    sequence: int


class ReadMany(NamedTuple):
    """Hazelcast's ``readManyAsync``: from ``start``, at least ``min_count`` elements
    (waiting for them), at most ``max_count``, kept by the pickled filter."""

    start: int
    min_count: int
    max_count: int
    filter_bytes: bytes | None


class ReadRange(NamedTuple):
    """A bulk read of ``[start, stop)``, at most ``max_count`` elements."""

    start: int
    stop: int
    max_count: int


class ReadNewest(NamedTuple):
    """The channel's newest element, even if removed (a read's columns when nothing
    is in its ranges)."""


class ReadResequencerStats(NamedTuple):
    """The resequencer counts of the reader's receive session here."""

    reader_id: str


class ReadHandOverMark(NamedTuple):
    """The hand-over mark the reader's resequencing session here stamped on the
    element at ``sequence`` of ``channel`` (None: it does not know that element)."""

    reader_id: str
    channel: int
    sequence: int


class ReadCommitFloors(NamedTuple):
    """Per channel, how far a commit of the reader may go while an element Ray's
    dropped reply carried waits in its resequencing session here to go out again
    (empty: none waits; see ``HandOver.floors``)."""

    reader_id: str


class InterruptReceives(NamedTuple):
    """A handle abandons its receives of ``stream`` up to ``upto``."""

    reader_id: str
    stream: str
    upto: int


class ReceivesLost(NamedTuple):
    """Ray reported these receives of ``stream`` cancelled after they were sent: their
    replies may have been dropped on their way (what they handed over is read again)."""

    reader_id: str
    stream: str
    numbers: tuple[int, ...]


class PauseReceives(NamedTuple):
    """Answered once a handle's receives of ``stream`` up to ``upto`` finished (a seek
    goes after them)."""

    reader_id: str
    stream: str
    upto: int
    receives_out: bool = False
    """Some of them had not answered when the pause was sent: a channel with no
    session of the reader (it restarted) opens one, as they may still be on their
    way there, retried (its first answer comes after it read again)."""


class ResumeReceives(NamedTuple):
    """The seek announced by ``PauseReceives`` landed: waits may take again."""

    reader_id: str


ChannelRequest = (
    Append
    | AppendPieces
    | AppendOnce
    | AppendUnless
    | ReadLatest
    | Receive
    | Take
    | Watch
    | ReportPoison
    | Ack
    | Nack
    | ExtendHold
    | Commit
    | CommitThenReceive
    | Seek
    | SeekToCommitted
    | ReadCursor
    | ReadRingFigures
    | FirstAfter
    | AddAll
    | ReadOne
    | ReadMany
    | ReadRange
    | ReadNewest
    | ReadResequencerStats
    | ReadHandOverMark
    | ReadCommitFloors
    | InterruptReceives
    | ReceivesLost
    | PauseReceives
    | ResumeReceives
)
"""Any data-path request (a handle's or a sibling channel's)."""

CHANNEL_REQUESTS = (
    Append,
    AppendPieces,
    AppendOnce,
    AppendUnless,
    ReadLatest,
    Receive,
    Take,
    Watch,
    ReportPoison,
    Ack,
    Nack,
    ExtendHold,
    Commit,
    CommitThenReceive,
    Seek,
    SeekToCommitted,
    ReadCursor,
    ReadRingFigures,
    FirstAfter,
    AddAll,
    ReadOne,
    ReadMany,
    ReadRange,
    ReadNewest,
    ReadResequencerStats,
    ReadHandOverMark,
    ReadCommitFloors,
    InterruptReceives,
    ReceivesLost,
    PauseReceives,
    ResumeReceives,
)
"""The request records a channel serves through ``ChannelActor.request``."""

SIBLING_REQUESTS = (Take, Watch)
"""What only a receive session sends to a sibling of its host: their replies cross
Ray packed (``pack_small``; the session's ``RemotePort`` unpacks them)."""

PACKED_REPLIES = (*SIBLING_REQUESTS, AppendUnless, ReadLatest, AppendPieces)
"""Requests whose replies cross Ray packed (``pack_small``): a sibling's, a control
log's conditional append and read by key (``ControlLog`` unpacks them: a Serve task's
start, outcome and status read), and a publisher's pieces' acks (its completer
unpacks them: ``publish()``'s every call). Each is spared Ray's pickler, which looks
up every class and function a reply holds (an AppendAck: ~30 us a call, ~5 packed)."""
