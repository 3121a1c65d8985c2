"""The channel's control requests, typed: what a coordinator asks of a channel (its
siblings, its seed after a restart, readers, groups, grants to members and streams,
resets, views, purges, and what it reads back to rebuild itself), served by
``ChannelActor.control``, which dispatches on the record's type.

Control calls are few and not on the data path, so a record travels as the call's
one argument as it is (Ray pickles it), not packed.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from raytopic.core.protocol.records import Lease, ReaderSpec
from raytopic.core.shared_group import SharedGroup

__all__ = [
    "CONTROL_REQUESTS",
    "AttachChannels",
    "DescribeChannel",
    "ReadIdentity",
    "SeedChannel",
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
    "Origin",
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
]


class AttachChannels(NamedTuple):
    """Learn every channel actor of the topic (index = channel); answered with the
    channel's identity (``ReadIdentity``)."""

    channels: tuple[Any, ...]


class ReadIdentity(NamedTuple):
    """Where the channel runs: its topic's id, epoch, node id, process id, and its state
    ("serving"; "opening": new, waiting for its coordinator to open its store;
    "recovering": restarted without a store, waiting for its coordinator; or
    "failed"). Answered in any state."""


class DescribeChannel(NamedTuple):
    """The channel's identity, figures, group cursors, transactions and compaction in
    one snapshot (a failed channel answers too: its state says so)."""


class SeedChannel(NamedTuple):
    """Restore a channel that restarted without a store: a new epoch whose positions
    follow every earlier one, each group's cursor at its start with the lease it
    had; each reader is told of the loss once. Answered with its identity."""

    old_epoch: int
    """The epoch the coordinator last knew of the channel."""
    groups: dict[str, tuple[Lease | None, int, int]]
    """Per group: (lease, view version, generation)."""
    views: dict[str, dict[str, tuple[int, dict[int, Lease]]]]
    """Per group, the members' latest views."""
    readers: dict[str, ReaderSpec]
    """The topic's open readers."""
    shared: dict[str, SharedGroup] | None = None
    """The shared groups' definitions (they start over at the new epoch's first position)."""


class OpenReader(NamedTuple):
    """Register a subscriber on the channel (its cursor, if anonymous)."""

    reader_id: str
    spec: ReaderSpec


class CloseReader(NamedTuple):
    """Forget a subscriber; its receive session at the channel ends."""

    reader_id: str


class EnsureGroup(NamedTuple):
    """Create the group's cursor unless it exists (``shared``: a shared group's, with its
    definition); ``reader``: the spec of the member it is made for, checked first."""

    group: str
    start_latest: bool
    shared: SharedGroup | None = None
    reader: ReaderSpec | None = None


class DestroyGroup(NamedTuple):
    """Forget a group: its positions and the retention it held."""

    group: str


class Grant(NamedTuple):
    """Give the group's channel to a member (None: to nobody)."""

    group: str
    lease: Lease | None


class GrantStream(NamedTuple):
    """Give the group's channel to a stream: ``lease`` owns it, and the group's offset
    log here names it as its stream's (answered with the log's ``StreamLogState``).
    A stream ends as a member leaves: by a ``Grant`` to nobody (or to a member)."""

    group: str
    lease: Lease


class ResetGroup(NamedTuple):
    """Move the group's read and commit positions to ``target`` (a sequence, a time
    stamp, or "earliest"/"latest")."""

    group: str
    target: int | float | str


class RestoreGroup(NamedTuple):
    """Undo a reset (``previous``: the state the reset answered)."""

    group: str
    previous: dict[str, Any]


class UpdateViews(NamedTuple):
    """Members' channels changed (a member None: it left or timed out)."""

    group: str
    version: int
    views: dict[str, dict[int, Lease] | None]
    generation: int = 0


class Purge(NamedTuple):
    """Remove every element (an operator's ``Topic.purge``)."""


class EndReceives(NamedTuple):
    """The topic is being destroyed: every wait at the channel ends (``reason``)."""

    reason: str


class ReadReaderSpecs(NamedTuple):
    """Every open reader's spec (a restarted coordinator asks)."""


class ReadGroupCursors(NamedTuple):
    """Every group's cursor at the channel."""


class ReadGroupLag(NamedTuple):
    """The group's lag at the channel: elements not committed (nor done) up to the
    tail; None where the channel has no such group. What scaling polls."""

    group: str


class ReadGroupMarks(NamedTuple):
    """Per group, the highest (view version, generation) pushed to the channel."""


class Origin(NamedTuple):
    """Where a group member runs, as Ray names it: the coordinator asks Ray whether
    that is gone (see ``raytopic.coordinator.member_origins``)."""

    kind: str
    """``"job"`` (a driver, or a task of that job) or ``"actor"`` (an actor, which
    may outlive its job)."""
    id: str
    """The job's or the actor's id, in hex."""


class ReadActivity(NamedTuple):
    """Seconds since each of ``readers`` last acknowledged, nacked or extended a hold
    at the channel (readers not heard from there are left out): signs of life the
    coordinator weighs before it times a member out, made wherever the member's
    elements went (a task acking them too)."""

    readers: tuple[str, ...]


class ReadOpeningError(NamedTuple):
    """Why the channel's store could not be opened (a typed error), or None."""


class ReadStoredTopic(NamedTuple):
    """What the channel's store holds: its ``TopicRecord`` (None: nothing recorded)."""


class OpenStore(NamedTuple):
    """A new channel with a store begins, once its coordinator compared what every
    channel's store holds (``raytopic.core.topic_record.opening``): it loads its store
    (``wipe``: first removes what it holds, a destroyed topic's) under ``topic_id``."""

    topic_id: str
    wipe: bool


class MarkDestroyed(NamedTuple):
    """The topic is being destroyed: record it in the channel's store, durably, before
    any channel removes its data."""


class RemoveStore(NamedTuple):
    """Remove what the channel's store holds (every channel's store marks the topic
    destroyed by now); the channel writes nothing more."""


ControlRequest = (
    AttachChannels
    | ReadIdentity
    | DescribeChannel
    | SeedChannel
    | OpenReader
    | CloseReader
    | EnsureGroup
    | DestroyGroup
    | Grant
    | GrantStream
    | ResetGroup
    | RestoreGroup
    | UpdateViews
    | Purge
    | EndReceives
    | ReadReaderSpecs
    | ReadGroupCursors
    | ReadGroupLag
    | ReadGroupMarks
    | ReadActivity
    | ReadOpeningError
    | ReadStoredTopic
    | OpenStore
    | MarkDestroyed
    | RemoveStore
)
"""Any control request."""

CONTROL_REQUESTS = (
    AttachChannels,
    ReadIdentity,
    DescribeChannel,
    SeedChannel,
    OpenReader,
    CloseReader,
    EnsureGroup,
    DestroyGroup,
    Grant,
    GrantStream,
    ResetGroup,
    RestoreGroup,
    UpdateViews,
    Purge,
    EndReceives,
    ReadReaderSpecs,
    ReadGroupCursors,
    ReadGroupLag,
    ReadGroupMarks,
    ReadActivity,
    ReadOpeningError,
    ReadStoredTopic,
    OpenStore,
    MarkDestroyed,
    RemoveStore,
)
"""The request records a channel serves through ``ChannelActor.control``."""
