"""What handles, channels and launchers ask of a topic's coordinator
(``raytopic.coordinator.coordinator``), typed as a channel's requests are: the
coordinator serves them through one entry, ``request``, which dispatches on the
record's type.

Three of a channel's control requests mean the same for the whole topic, and the
coordinator serves them by sending them to every channel: ``OpenReader``,
``CloseReader`` and ``DestroyGroup`` (``raytopic.core.protocol.control``).

Coordinator calls are few and not on the data path: a record travels as the call's
one argument as it is (Ray pickles it).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from raytopic.core.protocol.control import CloseReader, DestroyGroup, OpenReader, Origin
from raytopic.core.protocol.records import ReaderSpec
from raytopic.core.shared_group import SharedGroup

__all__ = [
    "COORDINATOR_REQUESTS",
    "AwaitTopic",
    "ChannelRestarted",
    "ClaimStream",
    "CoordinatorRequest",
    "DeclareGroup",
    "DescribeTopic",
    "DestroyTopic",
    "EndStream",
    "EndTopic",
    "EnsureDeadLetterTopic",
    "Heartbeat",
    "JoinGroup",
    "LeaveGroup",
    "PurgeTopic",
    "ReadGroupNames",
    "ReadTopicInfo",
    "ReadTopicLag",
    "ReleaseChannels",
    "ResetGroupPositions",
    "StartTopic",
    "StreamHeartbeat",
]


# -- the topic's life cycle -------------------------------------------------------------


class StartTopic(NamedTuple):
    """Take the topic's channel actors (created with the coordinator), introduce them
    to each other, open their stores and make the groups named at creation. Once;
    a later one waits for the first. Answered with the ``TopicInfo``."""

    channels: tuple[Any, ...]
    """The channel actors, index = channel."""


class ReadTopicInfo(NamedTuple):
    """The configuration and channel actors (``TopicInfo``), answered at once, even
    before the topic serves (a launcher's liveness probe)."""


class AwaitTopic(NamedTuple):
    """Wait until the topic serves (a restarted coordinator first recovers); then
    the ``TopicInfo``."""


class PurgeTopic(NamedTuple):
    """Remove every element of every channel (``Topic.purge``); answered with how
    many were removed."""


class EndTopic(NamedTuple):
    """The first step of ``Topic.destroy``: members' long polls and every wait at the
    channels answer TopicNotFoundError; the actors stay up (so the destroying process
    hears those answers before the kill: ``Topic.destroying``). A retry does it again."""


class DestroyTopic(NamedTuple):
    """Stop background work, remove the stored data and kill the channel actors
    (``Topic.destroy``; it ends the topic first if :class:`EndTopic` did not); a retry
    does it again."""


class DescribeTopic(NamedTuple):
    """Channels' figures and groups' membership, one snapshot per channel."""


class ChannelRestarted(NamedTuple):
    """A channel came back after its process died (it says so itself as it starts):
    one without a store gets its groups back."""

    topic_id: str
    """The channel's topic (an announcement for another topic of this name is ignored)."""
    channel: int
    """The channel's number."""
    identity: dict[str, Any]
    """Its identity as it started (epoch, state, pid, ...)."""


# -- groups ---------------------------------------------------------------------------


class ReadGroupNames(NamedTuple):
    """Names of the topic's groups, sorted."""


class DeclareGroup(NamedTuple):
    """Make a durable group unless it exists, and check an existing one is what the
    caller takes it for. Answered with a shared group's definition (None: owned).
    A new shared group's dead-letter topic is made too."""

    group: str
    """Its name."""
    start_latest: bool = False
    """A new group starts at the tail (else at the head)."""
    mode: str = "owned"
    """``"owned"`` or ``"shared"``: an existing group must have this mode
    (GroupModeError)."""
    spec: SharedGroup | None = None
    """A new shared group's definition (default: the defaults, with ``member_filter``)."""
    member_filter: bytes | None = None
    """The cloudpickled filter of the member about to join a shared group: it must be
    the group's, or None (GroupFilterError)."""
    reader: ReaderSpec | None = None
    """The spec of the member the group is made for: a new group is made only if
    every channel can open that reader."""
    create: bool = True
    """Make the group if it does not exist (else GroupNotFoundError)."""


class EnsureDeadLetterTopic(NamedTuple):
    """Make a shared group's dead-letter topic again (a channel about to send it dead
    letters found it missing)."""

    group: str


class ResetGroupPositions(NamedTuple):
    """Move a group's read and commit positions on the given channels, all or
    nothing; answered with the position set per channel (clamped to
    ``[head - 1, tail]``)."""

    group: str
    targets: dict[int, int | float | str]
    """Per channel: a sequence ("next is the first after it"), a time stamp (float),
    ``"earliest"`` or ``"latest"``."""


class ReadTopicLag(NamedTuple):
    """The group's lag per channel, as ``DescribeTopic`` counts it, in one light call
    (what the autoscaler and ``LagPolicy`` poll); a channel that does not answer
    within ``NOTICE_TIMEOUT`` is left out."""

    group: str


# -- members --------------------------------------------------------------------------


class JoinGroup(NamedTuple):
    """Add a member (or rejoin one); answered with its ``MemberView`` once its
    assignment is in force."""

    group: str
    reader_id: str
    timeout: float
    """Seconds without a heartbeat after which the member times out."""
    cooperative: bool = False
    """The member releases channels itself before they move (``ReleaseChannels``)."""
    origin: Origin | None = None
    """Where it runs; once Ray says that is gone, the member leaves."""


class LeaveGroup(NamedTuple):
    """A member closed: its channels go to the others."""

    group: str
    reader_id: str


class ReleaseChannels(NamedTuple):
    """A cooperative member committed what it handed out from ``channels`` that its
    group is moving: they go to their new owners now. Answered with its view
    (None: it is no longer a member)."""

    group: str
    reader_id: str
    channels: tuple[int, ...]


class Heartbeat(NamedTuple):
    """Keep a member alive; answered with its view (None: it timed out and must
    rejoin)."""

    group: str
    reader_id: str
    known_version: int
    """The version of the view the member knows."""
    touch: bool = True
    """A sign of life (False: the view is only read)."""
    idle: float = 0.0
    """Seconds since the member's last receive."""
    wait: float = 0.0
    """If the view is still ``known_version``, wait up to that many seconds for it to
    change before answering (the member's long poll)."""
    cooperative: bool = False
    """The member releases channels itself (a restarted coordinator learns it here)."""


# -- streams --------------------------------------------------------------------------


class ClaimStream(NamedTuple):
    """Give the group to a stream: the only consumer of every channel until it ends
    or stays silent past ``timeout``; a newer stream takes it from an older one.
    Answered with the stream's lease and every channel's offset log of the group."""

    group: str
    stream_id: str
    timeout: float
    start_latest: bool
    """A new group starts at the tail (else at the head)."""


class StreamHeartbeat(NamedTuple):
    """The stream is alive; answered False once it no longer holds the group."""

    group: str
    stream_id: str
    timeout: float


class EndStream(NamedTuple):
    """The stream ended: the group is free (nothing if it no longer held it)."""

    group: str
    stream_id: str


CoordinatorRequest = (
    StartTopic
    | ReadTopicInfo
    | AwaitTopic
    | PurgeTopic
    | EndTopic
    | DestroyTopic
    | DescribeTopic
    | ChannelRestarted
    | OpenReader
    | CloseReader
    | ReadGroupNames
    | DeclareGroup
    | EnsureDeadLetterTopic
    | DestroyGroup
    | ResetGroupPositions
    | ReadTopicLag
    | JoinGroup
    | LeaveGroup
    | ReleaseChannels
    | Heartbeat
    | ClaimStream
    | StreamHeartbeat
    | EndStream
)
"""A request served by ``CoordinatorActor.request``."""

COORDINATOR_REQUESTS = (
    StartTopic,
    ReadTopicInfo,
    AwaitTopic,
    PurgeTopic,
    EndTopic,
    DestroyTopic,
    DescribeTopic,
    ChannelRestarted,
    OpenReader,
    CloseReader,
    ReadGroupNames,
    DeclareGroup,
    EnsureDeadLetterTopic,
    DestroyGroup,
    ResetGroupPositions,
    ReadTopicLag,
    JoinGroup,
    LeaveGroup,
    ReleaseChannels,
    Heartbeat,
    ClaimStream,
    StreamHeartbeat,
    EndStream,
)
"""The request records the coordinator serves."""
