"""The wire in one place: every request to a channel, the replies, and the records
they carry. Handles, channels and coordinators import this package, not each other.

- :mod:`~raytopic.core.protocol.records`: leases, addresses, reader specs, cursor
  states, poison elements;
- :mod:`~raytopic.core.protocol.channel`: the channel's data-path requests;
- :mod:`~raytopic.core.protocol.control`: what a coordinator asks of a channel;
- :mod:`~raytopic.core.protocol.transactions`: a transaction's requests, outcomes
  and consumed commits;
- :mod:`~raytopic.core.protocol.registry`: what a transaction's holder and lead ask
  of the namespace's transaction registry;
- :mod:`~raytopic.core.protocol.streams`: a stream's offset log and the steps of
  its micro-batches;
- :mod:`~raytopic.core.protocol.replies`: acks, deliveries, and the replies that
  rebuild into the user's records where they are read;
- :mod:`~raytopic.core.protocol.codec`: one record as one bytes argument.
"""

from __future__ import annotations

from raytopic.core.protocol.channel import (
    CHANNEL_REQUESTS,
    Ack,
    AddAll,
    Append,
    AppendOnce,
    AppendPieces,
    ChannelRequest,
    Commit,
    ExtendHold,
    FirstAfter,
    InterruptReceives,
    Nack,
    PauseReceives,
    ReadCursor,
    ReadHandOverMark,
    ReadMany,
    ReadOne,
    ReadRange,
    ReadResequencerStats,
    ReadRingFigures,
    Receive,
    ReportPoison,
    ResumeReceives,
    Seek,
    SeekToCommitted,
    Take,
    Watch,
)
from raytopic.core.protocol.codec import pack_request, unpack_request
from raytopic.core.protocol.control import (
    CONTROL_REQUESTS,
    CloseReader,
    ControlRequest,
    DestroyGroup,
    EndReceives,
    EnsureGroup,
    Grant,
    GrantStream,
    MarkDestroyed,
    OpenReader,
    OpenStore,
    Purge,
    ReadActivity,
    ReadGroupCursors,
    ReadGroupLag,
    ReadGroupMarks,
    ReadOpeningError,
    ReadReaderSpecs,
    ReadStoredTopic,
    RemoveStore,
    ResetGroup,
    RestoreGroup,
    UpdateViews,
)
from raytopic.core.protocol.records import (
    Address,
    CursorState,
    Lease,
    Poison,
    ReaderLease,
    ReaderSpec,
    poison_error,
)
from raytopic.core.protocol.registry import (
    CloseIncarnation,
    DescribeIncarnations,
    JoinIncarnation,
    OpenIncarnation,
    RegistryRequest,
    TransactionAborted,
    TransactionCommitting,
)
from raytopic.core.protocol.replies import (
    AppendAck,
    Chunk,
    Delivery,
    RawReadResult,
    ReceivedBatch,
    RingFigures,
    StatusBatch,
)
from raytopic.core.protocol.streams import (
    STREAM_REQUESTS,
    CommitMicroBatch,
    MicroBatchRecord,
    RecordMicroBatch,
    StreamLogState,
    StreamRecord,
    StreamRequest,
)
from raytopic.core.protocol.transactions import (
    FENCED,
    TRANSACTION_REQUESTS,
    ConsumedCommit,
    DecideTransaction,
    EndTransaction,
    FenceTransactions,
    FinishTransaction,
    ForgetTransaction,
    Outcome,
    PrepareTransaction,
    ResolveTransaction,
    StageTransaction,
    TransactionEnded,
    TransactionPart,
    TransactionRequest,
)

__all__ = [
    # records
    "Address",
    "CursorState",
    "Lease",
    "Poison",
    "ReaderLease",
    "ReaderSpec",
    "poison_error",
    # channel requests
    "CHANNEL_REQUESTS",
    "Ack",
    "AddAll",
    "Append",
    "AppendOnce",
    "AppendPieces",
    "ChannelRequest",
    "Commit",
    "ExtendHold",
    "FirstAfter",
    "InterruptReceives",
    "Nack",
    "ReadCursor",
    "ReadMany",
    "ReadOne",
    "ReadRange",
    "ReadHandOverMark",
    "ReadResequencerStats",
    "ReadRingFigures",
    "Receive",
    "ReportPoison",
    "ResumeReceives",
    "Seek",
    "SeekToCommitted",
    "PauseReceives",
    "Take",
    "Watch",
    # control requests
    "CONTROL_REQUESTS",
    "CloseReader",
    "ControlRequest",
    "DestroyGroup",
    "EndReceives",
    "EnsureGroup",
    "Grant",
    "GrantStream",
    "MarkDestroyed",
    "OpenReader",
    "OpenStore",
    "Purge",
    "ReadGroupCursors",
    "ReadGroupLag",
    "ReadGroupMarks",
    "ReadActivity",
    "ReadOpeningError",
    "ReadReaderSpecs",
    "ReadStoredTopic",
    "RemoveStore",
    "ResetGroup",
    "RestoreGroup",
    "UpdateViews",
    # streams
    "STREAM_REQUESTS",
    "CommitMicroBatch",
    "MicroBatchRecord",
    "RecordMicroBatch",
    "StreamLogState",
    "StreamRecord",
    "StreamRequest",
    # the transaction registry's requests
    "CloseIncarnation",
    "DescribeIncarnations",
    "JoinIncarnation",
    "OpenIncarnation",
    "RegistryRequest",
    "TransactionAborted",
    "TransactionCommitting",
    # transactions
    "FENCED",
    "TRANSACTION_REQUESTS",
    "ConsumedCommit",
    "DecideTransaction",
    "EndTransaction",
    "FenceTransactions",
    "FinishTransaction",
    "ForgetTransaction",
    "Outcome",
    "PrepareTransaction",
    "ResolveTransaction",
    "StageTransaction",
    "TransactionEnded",
    "TransactionPart",
    "TransactionRequest",
    # replies
    "AppendAck",
    "Chunk",
    "Delivery",
    "RawReadResult",
    "ReceivedBatch",
    "RingFigures",
    "StatusBatch",
    # codec
    "pack_request",
    "unpack_request",
]
