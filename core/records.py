"""The records users hold: positions, elements, publish and commit results.

All are frozen, slotted dataclasses. ``Element`` and ``PublishStatus`` are
made by the million on the hot path, so their positions and timestamps are
derived on access from a plain sequence number and a float time stamp
instead of being built eagerly (building a frozen dataclass costs about a
microsecond; most consumers never read ``.timestamp``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from raytopic.core.commit_guards import before_commit, lowered
from raytopic.core.config import MAX_CHANNELS, MAX_COUNT, shown
from raytopic.core.errors import (
    GroupModeError,
    InvalidArgumentError,
    InvalidTypeError,
    PositionMismatchError,
)
from raytopic.core.naming import channel_actor
from raytopic.core.reader_calls import before_leaving

if TYPE_CHECKING:
    import ray

    from raytopic.core.protocol.channel import Commit
    from raytopic.core.protocol.records import ReaderLease

__all__ = [
    "AckStatus",
    "CommitResult",
    "CommitStatus",
    "Element",
    "OwnershipChange",
    "Position",
    "PublishStatus",
    "PublishSummary",
    "ReadResultSet",
    "TransactionResult",
    "stamp_to_datetime",
]


def stamp_to_datetime(stamp: float) -> datetime:
    """A channel time stamp (seconds since the epoch) as an aware UTC datetime."""
    return datetime.fromtimestamp(stamp, tz=UTC)


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """The place of one element in one channel of one topic.

    Positions order by sequence within a channel. ``sequence`` is -1 for "before
    the first element ever published" and ``head - 1`` for "just before the
    oldest element still stored". ``str(p)`` round-trips through ``Position.parse``.

    Example:
        >>> p = Position("1f2e3d4c", 3, 41)
        >>> Position.parse(str(p)) == p
        True
    """

    topic_id: str
    """Id of the topic (made at ``create_topic``; a re-created topic gets a new id)."""
    channel: int
    """Channel number, ``0 <= channel < channel_count``."""
    sequence: int
    """Sequence number in the channel, ``>= -1``."""

    def __post_init__(self) -> None:
        if not isinstance(self.topic_id, str) or not self.topic_id or ":" in self.topic_id:
            raise InvalidArgumentError(f"topic_id must be a non-empty id, got {self.topic_id!r}")
        for name in ("channel", "sequence"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
        if not 0 <= self.channel < MAX_CHANNELS:
            raise InvalidArgumentError(
                f"channel must be >= 0 and < {MAX_CHANNELS}, got {shown(self.channel)}"
            )
        if not -1 <= self.sequence <= MAX_COUNT:
            raise InvalidArgumentError(
                f"sequence must be >= -1 and <= {MAX_COUNT}, got {shown(self.sequence)}"
            )

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.channel}:{self.sequence}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """Read a Position back from ``str(position)``.

        Args:
            text: A Position's string form, ``"<topic_id>:<channel>:<sequence>"``.

        Returns:
            The Position.

        Raises:
            InvalidArgumentError: ``text`` is not a Position's string form.
        """
        parts = text.split(":") if isinstance(text, str) else []
        if len(parts) != 3:
            raise InvalidArgumentError(f"not a Position: {text!r}")
        try:
            return cls(parts[0], int(parts[1]), int(parts[2]))
        except ValueError as error:
            raise InvalidArgumentError(f"not a Position: {text!r}") from error

    def check_belongs(self, topic_id: str, channel: int | None = None) -> None:
        """Check that this Position is of a topic (and channel).

        Args:
            topic_id: The topic's id.
            channel: The channel, or None for any.

        Raises:
            PositionMismatchError: it is of another topic or channel.
        """
        if self.topic_id != topic_id:
            raise PositionMismatchError(
                f"position {self} belongs to another topic "
                f"(id {self.topic_id}, expected {topic_id})"
            )
        if channel is not None and self.channel != channel:
            raise PositionMismatchError(
                f"position {self} is of channel {self.channel}, not channel {channel}"
            )


@dataclass(frozen=True, slots=True)
class PublishStatus:
    """Where a published value was stored: its channel, position and time stamp."""

    channel: int
    """The channel the value went to."""
    position: Position
    """Its position in that channel."""
    timestamp: datetime
    """When the channel appended it (aware UTC)."""


@dataclass(frozen=True, slots=True)
class PublishSummary:
    """What a bulk publish appended (``raytopic.spark.publish_dataframe``,
    ``raytopic.data.write_topic``, a streaming sink's micro-batch)."""

    rows: int
    """Rows appended (one element, one position each)."""
    rows_per_channel: dict[int, int]
    """Rows appended per channel (channels that got none are absent)."""
    bytes: int
    """Bytes of the Arrow rows appended."""
    seconds: float
    """Wall time of the whole publish."""

    @property
    def rows_per_second(self) -> float:
        """``rows / seconds``."""
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    @classmethod
    def total(cls, parts: Iterable[tuple[dict[int, int], int]], seconds: float) -> PublishSummary:
        """One summary of several writers' parts.

        Args:
            parts: Each writer's ``(rows_per_channel, bytes)``.
            seconds: Wall time of the whole publish.

        Returns:
            Their sum (channels that got no row left out).
        """
        per_channel: dict[int, int] = {}
        size = 0
        for rows, nbytes in parts:
            size += nbytes
            for channel, count in rows.items():
                per_channel[channel] = per_channel.get(channel, 0) + count
        per_channel = {c: n for c, n in sorted(per_channel.items()) if n}
        return cls(sum(per_channel.values()), per_channel, size, seconds)


class CommitStatus(enum.Enum):
    """How a commit request ended."""

    COMMITTED = "committed"
    """The commit moved forward to the result's position (for a resequencing member,
    maybe below the one asked: see ``Element.commit``)."""
    ALREADY_COMMITTED = "already_committed"
    """The position is at or below the current commit; nothing moved."""
    NOT_OWNER = "not_owner"
    """The member does not own the channel (or owns it under a stale generation)."""
    REJECTED = "rejected"
    """The position was never published, or was received before a reset of its channel."""


class AckStatus(enum.Enum):
    """How an acknowledgement of a shared group's element ended."""

    ACKED = "acked"
    """The element is done for the group: it is never delivered to it again."""
    NACKED = "nacked"
    """The element went back to the group, to be delivered again."""
    EXTENDED = "extended"
    """The element's ack deadline was extended."""
    REJECTED = "rejected"
    """This member no longer holds the element under that delivery (its ack
    deadline passed, it was delivered again, it was acked already, or purged), or
    (an owned group's element) it was received before a reset of its channel:
    nothing changed."""
    NOT_OWNER = "not_owner"
    """An owned group's element whose channel the member no longer owns (or owns
    under a newer generation), or any element of a member that has closed (its
    channels no longer know it): nothing changed; the group gets it again."""


@dataclass(frozen=True, slots=True)
class CommitResult:
    """The outcome of committing one position of one channel."""

    channel: int
    """The channel the commit was for."""
    position: Position
    """The position committed: the one asked, or the highest below it that a
    resequencing member's commit may reach (see ``Element.commit``)."""
    status: CommitStatus
    """What happened."""

    @property
    def committed(self) -> bool:
        """True when the commit moved forward."""
        return self.status is CommitStatus.COMMITTED


@dataclass(frozen=True, slots=True)
class TransactionResult:
    """What a committed transaction did (``Transaction.commit()``)."""

    published: dict[str, dict[int, list[Position]]]
    """Topic name -> channel -> the positions its elements took there, in publish
    order (consecutive sequences within a channel)."""
    committed: list[CommitResult]
    """The consumed positions committed with it, one per (topic, channel, group)."""

    @property
    def published_count(self) -> int:
        """How many elements the transaction published."""
        return sum(len(p) for channels in self.published.values() for p in channels.values())


@dataclass(frozen=True, slots=True)
class OwnershipChange:
    """A change of the channels a group member owns, passed to ``on_ownership_change``."""

    assigned: frozenset[int]
    """Channels newly given to this member."""
    revoked: frozenset[int]
    """Channels a rebalance moved to another member."""
    lost: frozenset[int]
    """Channels taken away because this member timed out (or was seen dead)."""
    channels: frozenset[int]
    """The channels this member owns after the change."""


@dataclass(frozen=True, slots=True, eq=False)
class Element:
    """One received element: its value, where it came from, and how to commit it.

    Elements pickle, so one can be handed to a Ray task, which may call
    ``commit()`` itself.

    **Ordering**: elements of one channel reach a subscriber in position order.
    **Delivery**: for a group member, committing an element commits every
    earlier position of its channel (cumulative, as in Kafka).
    """

    value: Any
    """The published value (after the subscriber's converter, if any)."""
    channel: int
    """The channel it was read from."""
    sequence: int
    """Its sequence number in the channel (``position.sequence``)."""
    stamp: float = field(repr=False)
    """Channel append time, seconds since the epoch (``timestamp`` as a float)."""
    _origin: _Origin = field(repr=False)
    delivery_count: int = 1
    """How many times the element was delivered to its group, this time included
    (1 on first delivery; a shared group counts redeliveries)."""
    key: Any = None
    """The key it was published with (a str, bytes, int or bool), or None."""

    @property
    def position(self) -> Position:
        """The element's position."""
        return Position(self._origin.topic_id, self.channel, self.sequence)

    @property
    def timestamp(self) -> datetime:
        """When the channel appended it (aware UTC)."""
        return stamp_to_datetime(self.stamp)

    def commit(self) -> CommitResult:
        """Commit this element's position (and every earlier one of its channel).

        A resequencing member hands elements over out of position order: its
        commit goes no further than the highest position of the channel below
        which every element was handed over before this one (the rest is
        delivered again after a restart, never skipped).

        Returns:
            The CommitResult, whose ``position`` is the one committed (below this
            element's when the resequencer still held an earlier one); ``status``
            is NOT_OWNER if the member lost the channel.

        Raises:
            GroupModeError: it was received in a shared group (ack it instead).
            TopicNotFoundError: its topic was destroyed.
        """
        return _resolve(self.commit_async())

    def commit_async(self) -> ray.ObjectRef[CommitResult]:
        """``commit`` without waiting.

        Returns:
            ``ObjectRef[CommitResult]``.

        Raises:
            GroupModeError: it was received in a shared group (ack it instead).
        """
        origin = self._origin
        if origin.shared:
            raise GroupModeError(
                f"element {self.position} was received in a shared group: ack it instead"
            )
        return self._send_commit(origin.handed_upto)

    def _send_commit(self, bound: int | None) -> ray.ObjectRef[CommitResult]:
        """Commit this element's position, no further than ``bound`` (a resequenced
        batch's hand-over mark; see ``_Origin.handed_upto``)."""
        from raytopic.core.protocol import pack_request  # (the protocol imports this)

        origin = self._origin
        bound = lowered(bound, before_commit(origin.reader), self.channel)
        actor = channel_actor(origin.namespace, origin.topic, origin.topic_id, self.channel)
        ref = actor.request.remote(pack_request(self._commit_request(bound)))
        before_leaving.add(origin.topic_id, origin.reader, ref)
        return ref

    def _commit_request(self, bound: int | None) -> Commit:
        """The request that commits this element's position, no further than ``bound``."""
        from raytopic.core.protocol import Commit  # (the protocol imports this)

        origin = self._origin
        return Commit(
            reader_id=origin.reader,
            sequence=self.sequence,
            lease=origin.lease,
            jumps=origin.jumps,
            bound=bound,
        )

    # -- shared groups: acknowledgement element by element --------------------------

    def ack(self) -> AckStatus:
        """Acknowledge this element alone: it is done.

        In a shared group, the member holding it is done with it: it is never
        delivered to the group again. In an owned group (and for an anonymous
        subscriber), its position is done: the group's commit advances over it
        once every earlier position of the channel is committed or done, so
        elements finished out of order (fanned out to tasks) never commit past
        one that is not finished; that one is delivered again after a restart
        or rebalance, and done ones are not. With a store, done positions are
        as durable as commits.

        Returns:
            ACKED, or REJECTED if this member no longer holds it under this
            delivery (a shared group: its ack deadline passed or it was
            delivered again) or it was received before a reset of its channel;
            NOT_OWNER if the member lost the element's channel (an owned group).
            Then the element is still the group's, and is not lost.
        """
        return _resolve(self.ack_async())

    def ack_async(self) -> ray.ObjectRef[AckStatus]:
        """``ack`` without waiting.

        Returns:
            ``ObjectRef[AckStatus]``: ACKED, REJECTED or NOT_OWNER (see ``ack``).
        """
        from raytopic.core.acks import Ack, send_one

        return send_one(self, Ack)

    def nack(self, delay: float | None = None) -> AckStatus:
        """Give this element back to its shared group, to be delivered again (to any
        member), after ``delay`` seconds if given. Past the group's
        ``max_deliveries`` it goes to the dead-letter topic instead.

        Args:
            delay: Seconds before it may be delivered again (None: at once;
                at most a year).

        Returns:
            NACKED, or REJECTED (see ``ack``).

        Raises:
            InvalidArgumentError: a negative delay, or one over a year.
            GroupModeError: it was not received in a shared group.
        """
        return _resolve(self.nack_async(delay))

    def nack_async(self, delay: float | None = None) -> ray.ObjectRef[AckStatus]:
        """``nack`` without waiting.

        Args:
            delay: Seconds before it may be delivered again (None: at once;
                at most a year).

        Returns:
            ``ObjectRef[AckStatus]``: NACKED or REJECTED (see ``ack``).

        Raises:
            InvalidArgumentError: a negative delay, or one over a year.
            GroupModeError: it was not received in a shared group.
        """
        from raytopic.core.acks import Nack, check_delay, send_one

        return send_one(self, Nack, delay=check_delay(delay))

    def extend_lease(self, seconds: float | None = None) -> AckStatus:
        """Keep holding this element: its ack deadline is now ``seconds`` from now
        (default: the group's ``ack_timeout``).

        Args:
            seconds: The new ack deadline, from now, > 0 and at most a year (None: the group's
                ``ack_timeout``).

        Returns:
            EXTENDED, or REJECTED (see ``ack``).

        Raises:
            InvalidArgumentError: ``seconds`` is not > 0, or is over a year.
            GroupModeError: it was not received in a shared group.
        """
        from raytopic.core.acks import ExtendHold, check_hold_seconds, send_one

        return _resolve(send_one(self, ExtendHold, seconds=check_hold_seconds(seconds)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Element):
            return NotImplemented
        return (self.channel, self.sequence, self._origin.topic_id, self.value) == (
            other.channel,
            other.sequence,
            other._origin.topic_id,
            other.value,
        )

    def __hash__(self) -> int:
        return hash((self._origin.topic_id, self.channel, self.sequence))


class ReadResultSet(Sequence[Any]):
    """The items one ``read_many`` read: a sequence of values.

    Attributes:
        read_count: Items read, matching the filter or not.
        next_sequence_to_read_from: Where a following read should start.
    """

    __slots__ = ("_items", "_sequences", "next_sequence_to_read_from", "read_count")

    def __init__(self, start: int, read_count: int, items: list[Any], sequences: list[int]) -> None:
        self.read_count = read_count
        self.next_sequence_to_read_from = start + read_count
        self._items = items
        self._sequences = sequences

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def get_sequence(self, index: int) -> int:
        """The sequence of an item returned.

        Args:
            index: The item's index in this result.

        Returns:
            Its sequence in the channel.
        """
        return self._sequences[index]

    def __repr__(self) -> str:
        return (
            f"ReadResultSet(read_count={self.read_count}, items={len(self)}, "
            f"next={self.next_sequence_to_read_from})"
        )


def _unfrozen(record: Any) -> Any:
    """A class with the slots of a frozen record, in which they can be set.

    A record built in bulk (an Element, a PublishStatus) is made as one of
    these and then becomes the record (``__class__`` assignment between
    classes of the same slot layout): a frozen dataclass only lets its slots be
    set through slot descriptors called as functions, which costs twice as
    much, and its ``__init__`` more again; the decoder builds a million
    elements a second. The values come from a channel: they need no checks.
    """
    return type(f"_Unfrozen{record.__name__}", (), {"__slots__": record.__slots__})


def _resolve(ref: Any) -> Any:
    import ray

    from raytopic.core.errors import TopicNotFoundError, unwrap_ray_error

    try:
        with unwrap_ray_error():
            return ray.get(ref)
    except ray.exceptions.ActorDiedError as error:
        # Channels restart after any crash: one dead for good was destroyed.
        raise TopicNotFoundError("the element's topic was destroyed") from error


@dataclass(frozen=True, slots=True)
class _Origin:
    """Where a batch of elements was read and who read it: what commit() needs."""

    topic_id: str
    topic: str  # name and namespace: how commit() finds the channel actor
    namespace: str
    reader: Any  # the reader key the channel knows (group name or subscriber id)
    lease: ReaderLease  # a group member's lease of the channel, else None
    jumps: int  # the reader's cursor jump count at read time (bumped by seeks and resets)
    shared: bool = False  # read by a shared group's member: acknowledged element by element
    epoch: int = 0  # a shared delivery's channel incarnation: part of its delivery id
    skip_poison: bool = False  # on_poison="skip": an undecodable element is passed over
    handed_upto: int | None = None  # a resequenced element's hand-over mark: its commits go
    # no further (every element of its channel up to it was handed over before it)

    def __reduce__(self) -> tuple[Any, ...]:
        # Not the dataclass's __getstate__/__setstate__ (Python, field by field):
        # every delivery carries one, and every commit of an element.
        return (
            _Origin,
            (
                self.topic_id,
                self.topic,
                self.namespace,
                self.reader,
                self.lease,
                self.jumps,
                self.shared,
                self.epoch,
                self.skip_poison,
                self.handed_upto,
            ),
        )
