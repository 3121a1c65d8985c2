"""The records every side of the wire names: leases, addresses, reader specs, cursor
states and poison elements. No Ray.

They travel inside requests and replies (``raytopic.core.protocol``), so handles,
channels and coordinators agree on them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeAlias

from raytopic.core.errors import PoisonElementError
from raytopic.core.records import Position

__all__ = ["Address", "CursorState", "Lease", "Poison", "ReaderLease", "ReaderSpec", "poison_error"]


@dataclass(frozen=True, slots=True)
class Lease:
    """Who may read and commit a group's channel: a member under a generation.

    The coordinator grants a new lease each time a channel changes owner (or
    its owner rejoins), so a member that lost a channel can never use it again
    with the lease it had.
    """

    reader_id: str
    """The member's id."""
    generation: int
    """The group generation at which the channel was granted."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Not the dataclass's __getstate__/__setstate__ (Python, field by field):
        # a lease travels in most data-path requests and in every delivery.
        return (Lease, (self.reader_id, self.generation))


ReaderLease: TypeAlias = Lease | None
"""What a reader's call to a channel carries: a group member's lease of that channel,
or None for an anonymous reader."""


class Address(NamedTuple):
    """A channel anywhere in the cluster: what a call to it needs besides its handle."""

    namespace: str
    """The topic's Ray namespace."""
    topic: str
    """The topic's name."""
    topic_id: str
    """The topic's id (a topic made again under its name has another)."""
    channel: int
    """The channel's number."""


@dataclass(frozen=True, slots=True)
class ReaderSpec:
    """How a subscriber reads: registered on every channel when it subscribes."""

    group: str | None
    """The group, or None for an anonymous subscriber."""
    start_latest: bool
    """Anonymous cursors (and new groups) start at the tail, else at the head."""
    filter: bytes | None = None
    """cloudpickled ``value -> bool``, run in the channel."""
    converter: bytes | None = None
    """cloudpickled ``value -> value``, run in the channel."""
    complete_on_empty: bool = False
    """A receive with nothing to deliver completes with None / [] at once."""
    window: int | None = None
    """Most received-but-uncommitted elements, or None."""
    resequence: bytes | None = None
    """cloudpickled ``raytopic.Resequence``: its host session releases in order."""
    skip_poison: bool = False
    """``on_poison="skip"``: poison elements are logged, counted and passed over
    (else the reader stops before one and is told once: ``raytopic.actors.poison``)."""


@dataclass(frozen=True, slots=True)
class CursorState:
    """What a channel reports about a reader's cursor."""

    next: int
    """The next sequence it delivers."""
    committed: int
    """The last committed sequence (the resume point)."""
    tail: int
    """The channel's newest sequence when this was read."""
    jumps: int
    """The cursor's jump count (seeks, resets, new owners)."""
    has_commit: bool = field(default=False, compare=False)
    """Whether ``committed`` came from a commit, seek or reset."""
    unacked: int = field(default=0, compare=False)
    """Delivered but not committed."""
    stopped: bool = False
    """The cursor stops before a poison element the reader was told of
    (``raytopic.actors.poison``): nothing is takeable until it skips it."""

    @property
    def available(self) -> bool:
        """Whether an element waits to be delivered."""
        return self.tail >= self.next and not self.stopped


@dataclass(frozen=True, slots=True)
class Poison:
    """What made an element poison (``raytopic.actors.poison``): the exception's
    class name and message."""

    sequence: int
    """The element's sequence."""
    cause_type: str
    """The name of the exception's class."""
    cause_message: str
    """The exception's message."""

    @classmethod
    def of(cls, sequence: int, error: BaseException) -> Poison:
        """The poison that ``error`` made of the element at ``sequence``."""
        return cls(sequence, type(error).__name__, str(error))


def poison_error(
    topic_id: str, channel: int, poison: Poison, *, ring: bool = False
) -> PoisonElementError:
    """The error a reader gets for ``poison`` at ``channel`` (``ring``: a ring
    buffer's read, which a read after it skips)."""
    position = Position(topic_id, channel, poison.sequence)
    if ring:
        skip = f"read from {poison.sequence + 1} to skip it"
    else:
        skip = (
            f"the reader stays before it: skip it with seek({channel}, error.position), "
            "or subscribe with on_poison='skip'"
        )
    return PoisonElementError(
        f"channel {channel}: the element at {position} cannot be delivered "
        f"({poison.cause_type}: {poison.cause_message}); {skip}",
        channel,
        position,
        poison.cause_type,
        poison.cause_message,
    )
