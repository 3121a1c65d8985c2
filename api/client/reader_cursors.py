"""A subscriber's cursors at the channels: read them, move them (seeks), commit.

:class:`ReaderCursors` is a part the Subscriber holds. Every call carries the
member's lease of the channel (None for an anonymous reader); a seek pauses
the subscriber's receives at their host until it landed, and raises the
channel's jump count so what was read before it is dropped.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import ray

from raytopic.core.commit_guards import before_commit, lowered
from raytopic.core.config import check_datetime
from raytopic.core.destroyed import check_topic, topic_calls
from raytopic.core.errors import InvalidTypeError, NotOwnerError, TopicError
from raytopic.core.protocol import Commit, ReadCursor, Seek, SeekToCommitted, pack_request
from raytopic.core.reader_calls import before_leaving
from raytopic.core.records import CommitResult, CommitStatus, Position

if TYPE_CHECKING:
    from collections.abc import Mapping
    from contextlib import AbstractContextManager

    from raytopic.client.receives import StaleReads
    from raytopic.client.topic import Topic
    from raytopic.core.protocol import CursorState, ReaderLease

__all__ = ["CursorRole", "ReaderCursors", "SeekPause"]

TAIL = 1 << 62
"""A sequence past any tail: seeking there clamps to the tail."""

HEAD = -1
"""A sequence before any head: seeking there clamps to the head."""


class CursorRole(Protocol):
    """What the cursors ask of the subscriber's membership."""

    def owned(self, *, catch_up: bool = True) -> tuple[int, ...]:
        """The channels owned now, from the view in hand."""
        ...

    def current_channels(self) -> tuple[int, ...]:
        """The channels owned now, asking the coordinator if the view may be stale."""
        ...

    def lease(self, channel: int, *, required: bool = False, refresh: bool = False) -> ReaderLease:
        """The lease of ``channel`` (None: anonymous, or not owned unless ``required``)."""
        ...

    def leases_now(self) -> Mapping[int, ReaderLease]:
        """The channels owned and their leases as the coordinator holds them now."""
        ...

    def check_positions(self, what: str) -> None:
        """Raise GroupModeError if the member acknowledges instead of moving positions."""
        ...


class SeekPause(Protocol):
    """What a seek (and a resequencing member's commit) asks of the subscriber's receives."""

    stale: StaleReads

    @property
    def resequencing(self) -> bool:
        """Whether its host resequences what it reads."""
        ...

    def paused(self) -> AbstractContextManager[None]:
        """Receives sent before entering complete first; the host resumes after."""
        ...

    def align_positions(self) -> None:
        """The read positions at the channels stand where the host's session reads on."""
        ...

    def hand_over_mark(self, channel: int, sequence: int) -> int | None:
        """The mark the host's resequencer stamped on that element (None: unknown)."""
        ...


class ReaderCursors:
    """One reader's cursors at the channels it owns.

    Args:
        topic: The subscriber's topic.
        reader_id: The subscriber's id, as the channels know its reader.
        role: Its membership: owned channels, their leases, positions allowed.
        receives: Its receives, paused by a seek and told its jump count.
    """

    def __init__(self, topic: Topic, reader_id: str, role: CursorRole, receives: SeekPause) -> None:
        self._topic = topic
        self._reader_id = reader_id
        self._role = role
        self._receives = receives

    def states(self) -> dict[int, CursorState]:
        """The cursor of every owned channel, read at the channels (one call each)."""
        self._receives.align_positions()
        actors = self._topic._channel_actors
        owned = self._role.owned()
        refs = [
            actors[c].request.remote(
                pack_request(ReadCursor(reader_id=self._reader_id, lease=self._role.lease(c)))
            )
            for c in owned
        ]
        states = {}
        for channel, ref in zip(owned, refs, strict=True):
            try:
                states[channel] = self._call(ref)
            except NotOwnerError:
                continue  # lost it a moment ago
        return states

    def pick(self, channels: tuple[int, ...]) -> list[int]:
        """``channels`` checked, or every owned one when none is given."""
        if not channels:
            return list(self._role.current_channels())
        return [self._topic._check_channel(channel) for channel in channels]

    def seek(self, channel: int, to: Position | datetime, commit: bool) -> Position:
        """Move ``channel`` to just after ``to`` (a Position of it, or a datetime)."""
        channel = self._topic._check_channel(channel)
        if isinstance(to, Position):
            to.check_belongs(self._topic.topic_id, channel)
            return self.seek_to(channel, to.sequence, commit)
        if isinstance(to, datetime):
            return self.seek_to(channel, check_datetime(to, "to"), commit, by_time=True)
        raise InvalidTypeError(f"to must be a Position or a datetime, got {type(to).__name__}")

    def seek_to(
        self, channel: int, target: int | float, commit: bool, by_time: bool = False
    ) -> Position:
        """Move ``channel`` to a sequence (clamped), or to a time (``by_time``)."""
        self._role.check_positions("seek")
        lease = self._role.lease(channel, required=True)
        seek = Seek(
            reader_id=self._reader_id, lease=lease, target=target, by_time=by_time, commit=commit
        )
        return self._jump(channel, seek)

    def seek_to_committed(self, channels: tuple[int, ...]) -> dict[int, Position]:
        """Move ``channels`` (none: every owned one) back to their commits: what was
        received since comes again, and a commit of it is REJECTED (see
        ``Cursor.reset_to_commit``).

        Under the leases the coordinator holds now, not those of the member's view,
        which may lag them: what a channel handed out under a lease the view has not
        learnt yet goes back too. A channel that moved on since had a new lease
        granted, which read it again from the commit: none named, it is passed over.
        Every channel is tried; then the first error is raised, one that kept an owned
        channel from going back before a NotOwnerError (which only says a channel moved
        on: a caller may pass it and still learn of the other).
        """
        self._role.check_positions("seek")
        named = [self._topic._check_channel(channel) for channel in channels]
        leases = self._role.leases_now()
        moved: dict[int, Position] = {}
        first_error: Exception | None = None
        not_owner: NotOwnerError | None = None
        for channel in named or sorted(leases):
            try:
                if channel not in leases:
                    raise NotOwnerError(f"channel {channel} is not owned by this subscriber")
                seek = SeekToCommitted(reader_id=self._reader_id, lease=leases[channel])
                moved[channel] = self._jump(channel, seek)
            except NotOwnerError as error:
                if named:
                    not_owner = not_owner or error
            except (TopicError, ray.exceptions.RayError) as error:
                first_error = first_error or error
        raised = first_error or not_owner
        if raised is not None:
            raise raised
        return moved

    def _jump(self, channel: int, request: Seek | SeekToCommitted) -> Position:
        """Send a seek once the receives sent before it completed; return the Position set."""
        actor = self._topic._channel_actors[channel]
        with self._receives.paused():
            position, jumps = self._call(actor.request.remote(pack_request(request)))
        # What an iteration prefetched before the seek carries a lower count: dropped.
        self._receives.stale.raise_to(channel, jumps)
        return self._topic.position(channel, position)

    def commit(self, channel: int, position: Position) -> ray.ObjectRef[CommitResult]:
        """Commit ``position`` and every earlier one of ``channel`` (without waiting)."""
        self._role.check_positions("commit")
        channel = self._topic._check_channel(channel)
        if not isinstance(position, Position):
            raise InvalidTypeError(f"position must be a Position, got {type(position).__name__}")
        position.check_belongs(self._topic.topic_id, channel)
        actor = self._topic._channel_actors[channel]
        lease = self._role.lease(channel, refresh=True)
        check_topic(self._topic.topic_id, self._topic.name, actor)  # Ray's ref would say ActorDied
        floors = before_commit(self._reader_id)  # (a lost reply's elements: see commit_guards)
        bound = None
        if self._receives.resequencing:
            # Its commit goes no further than the element's hand-over mark (see
            # Element.commit), which the host's session remembers: one call first.
            bound = self._receives.hand_over_mark(channel, position.sequence)
            if bound is None:  # not an element the session handed over (lately)
                return ray.put(CommitResult(channel, position, CommitStatus.REJECTED))
            bound = lowered(bound, floors, channel)
        commit = Commit(
            reader_id=self._reader_id, sequence=position.sequence, lease=lease, bound=bound
        )
        ref = actor.request.remote(pack_request(commit))
        before_leaving.add(self._topic.topic_id, self._reader_id, ref)
        return ref

    def _call(self, ref: ray.ObjectRef[Any]) -> Any:
        with topic_calls(self._topic.topic_id, self._topic.name):
            return ray.get(ref)
