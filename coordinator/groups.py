"""Subscriber groups as the coordinator keeps them: members, leases, timeouts. No Ray.

A group is *owned* (each channel read by one member, which the sticky
assignment picks) or *shared* (every member may take from every channel: its
view names all of them, under the member's own generation, and the channels
hand out elements one by one). Every change of membership (join, leave,
timeout) bumps the group's *generation*; a channel that changes owner gets a
new :class:`Lease` under that generation, so a member that lost a channel
cannot use it again with the lease it had. Every change a member should hear
of (its channels, a reset of its channels) bumps the group's *version*;
members compare versions on their heartbeats.

**Streams** (``raytopic.data.stream``): a stream consumes the whole group. The
coordinator gives it every channel under one lease (``ClaimStream``), refuses
members while it holds the group and refuses a stream while the group has
members (``GroupBusyError``); a newer stream takes the group from an older one
(whose lease then owns nothing). The claim ends when the stream ends
(``EndStream``) or stays silent past its timeout, as a member's does.

**Cooperative hand-over** (Kafka's incremental rebalancing with commit on
revoke): a member that joined ``cooperative`` keeps a channel a rebalance
takes from it until it *releases* the channel, after committing what it
handed out; only then is the channel granted to its new owner (or once the
member's timeout has passed since the hand-over began: a member stuck in its
work must not hold a channel forever). Its view names such channels in
``revoking``. Any other member's channels move at once, as before.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from raytopic.coordinator.assignment import assign
from raytopic.core.errors import GroupBusyError
from raytopic.core.protocol import Lease

if TYPE_CHECKING:
    from raytopic.core.shared_group import SharedGroup

__all__ = ["Group", "Member", "MemberView", "Rebalance", "recovered_groups"]

RECOVERED_TIMEOUT = 30.0
"""Timeout given to members a restarted coordinator learns from the channels' leases
(their own is not kept there): a dead one's channels move after this long."""


@dataclass(slots=True)
class Member:
    """One live member of a group, or the stream consuming it."""

    reader_id: str
    generation: int
    timeout: float
    last_seen: float
    cooperative: bool = False
    """It releases channels itself (after committing) before they move."""


@dataclass(frozen=True, slots=True)
class MemberView:
    """What a member learns from the coordinator about itself."""

    reader_id: str
    """The member."""
    generation: int
    """Its generation (a rejoin gets a new, higher one)."""
    version: int
    """The group's version when this view was made."""
    leases: dict[int, Lease]
    """The channels it owns and the lease of each."""
    jumps: dict[int, int]
    """Per channel, the cursor jump count after the group's latest reset there."""
    revoking: frozenset[int] = frozenset()
    """Channels it still owns that the group is moving to another member: a
    cooperative member commits what it handed out, then releases them."""


@dataclass(frozen=True, slots=True)
class Rebalance:
    """What a membership change requires of the channels and the members' sessions."""

    grants: dict[int, Lease | None]
    """Channels whose owner changed, with the new lease (None: nobody)."""
    members: tuple[str, ...]
    """Members whose set of channels changed (their receive sessions must hear of it)."""
    stream: str | None = None
    """The stream the change gives the group to (its grants are a stream's), or takes
    it from (its grants are to nobody)."""


@dataclass(slots=True)
class Group:
    """A subscriber group of one topic."""

    name: str
    channel_count: int
    generation: int = 0
    version: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    leases: dict[int, Lease | None] = field(default_factory=dict)
    jumps: dict[int, int] = field(default_factory=dict)
    resetting: bool = False
    shared: SharedGroup | None = None
    """A shared group's definition (None: an owned group)."""
    handovers: dict[int, float] = field(default_factory=dict)
    """Channels a cooperative owner is to release, with the (monotonic) time at
    which they move without it."""
    stream: Member | None = None
    """The stream consuming the group (it owns every channel; then no member exists)."""

    @property
    def mode(self) -> str:
        """ "owned" or "shared"."""
        return "owned" if self.shared is None else "shared"

    def owner(self, channel: int) -> str | None:
        """The member owning ``channel``, if any."""
        lease = self.leases.get(channel)
        return lease.reader_id if lease else None

    def channels_of(self, reader_id: str) -> dict[int, Lease]:
        """The channels ``reader_id`` owns, with their leases (a shared group's
        member: every channel, under its generation)."""
        if self.shared is not None:
            member = self.members.get(reader_id)
            if member is None:
                return {}
            lease = Lease(reader_id, member.generation)
            return dict.fromkeys(range(self.channel_count), lease)
        return {
            channel: lease
            for channel, lease in sorted(self.leases.items())
            if lease is not None and lease.reader_id == reader_id
        }

    def view(self, reader_id: str) -> MemberView | None:
        """The view of a live member, or None if it is not (or no longer) a member."""
        member = self.members.get(reader_id)
        if member is None:
            return None
        channels = self.channels_of(reader_id)
        return MemberView(
            reader_id,
            member.generation,
            self.version,
            channels,
            dict(self.jumps),
            frozenset(channel for channel in self.handovers if channel in channels),
        )

    def check_no_stream(self, what: str) -> None:
        """Refuse ``what`` (a join, a reset) while a stream consumes the group.

        Raises:
            GroupBusyError: a stream consumes the group.
        """
        if self.stream is not None:
            raise GroupBusyError(
                f"group {self.name!r} is consumed by stream {self.stream.reader_id}: {what} "
                "once it ends (stopped, or silent past its timeout)"
            )

    def join(
        self, reader_id: str, timeout: float, now: float, *, cooperative: bool = False
    ) -> Rebalance:
        """Add a member (a member already present rejoins with a new generation);
        a ``cooperative`` one releases channels itself before they move.

        Raises:
            GroupBusyError: a stream consumes the group.
        """
        self.check_no_stream("a member can join")
        self.members.pop(reader_id, None)
        if any(lease and lease.reader_id == reader_id for lease in self.leases.values()):
            # A rejoin: its old leases must not survive under the new generation.
            self.leases = {
                channel: (None if lease and lease.reader_id == reader_id else lease)
                for channel, lease in self.leases.items()
            }
        self.generation += 1
        self.members[reader_id] = Member(reader_id, self.generation, timeout, now, cooperative)
        return self._rebalance(extra_changed=(reader_id,), now=now)

    def leave(self, reader_id: str, now: float | None = None) -> Rebalance | None:
        """Remove a member that closed; None if it was not a member."""
        if self.members.pop(reader_id, None) is None:
            return None
        self.generation += 1
        return self._rebalance(extra_changed=(reader_id,), now=now)

    def touch(self, reader_id: str, now: float, *, cooperative: bool = False) -> bool:
        """Record a heartbeat; False if ``reader_id`` is not a member (timed out or closed).
        ``cooperative``: the member says so again (a restarted coordinator learns it here)."""
        member = self.members.get(reader_id)
        if member is None:
            return False
        member.last_seen = max(member.last_seen, now)
        member.cooperative = member.cooperative or cooperative
        return True

    def release(self, reader_id: str, channels: Iterable[int], now: float) -> Rebalance | None:
        """A cooperative member committed what it handed out from ``channels`` it is
        handing over: they go to their new owners now. None if none of them was
        being handed over by it."""
        released = [
            channel
            for channel in channels
            if channel in self.handovers and self.owner(channel) == reader_id
        ]
        if not released:
            return None
        for channel in released:
            del self.handovers[channel]
            self.leases[channel] = None  # free: the rebalance grants it to its new owner
        self.generation += 1
        return self._rebalance(extra_changed=(reader_id,), now=now)

    # -- a stream -----------------------------------------------------------------------

    def claim_stream(self, stream_id: str, timeout: float, now: float) -> Rebalance:
        """Give every channel to the stream ``stream_id`` under a new lease (a stream
        holding the group loses it: the newer one fences it).

        Raises:
            GroupBusyError: the group has members.
        """
        if self.members:
            raise GroupBusyError(
                f"group {self.name!r} has members ({', '.join(sorted(self.members))}): a "
                "stream must be its group's only consumer; it can open once they leave"
            )
        self.generation += 1
        self.stream = Member(stream_id, self.generation, timeout, now)
        return self._give_every_channel(Lease(stream_id, self.generation), stream_id)

    def touch_stream(self, stream_id: str, now: float, timeout: float) -> bool:
        """The stream is alive (``timeout``: its own, which a restarted coordinator
        learns here); False if it no longer holds the group."""
        stream = self.stream
        if stream is None or stream.reader_id != stream_id:
            return False
        stream.last_seen = max(stream.last_seen, now)
        stream.timeout = timeout
        return True

    def end_stream(self, stream_id: str) -> Rebalance | None:
        """The stream ended: no one owns the group's channels (None: it did not hold
        the group)."""
        if self.stream is None or self.stream.reader_id != stream_id:
            return None
        self.stream = None
        self.generation += 1
        return self._give_every_channel(None, stream_id)

    def _give_every_channel(self, lease: Lease | None, stream_id: str) -> Rebalance:
        grants: dict[int, Lease | None] = dict.fromkeys(range(self.channel_count), lease)
        self.leases = dict(grants)
        self.handovers.clear()
        self.version += 1
        return Rebalance(grants, (), stream_id)

    # -- timeouts -------------------------------------------------------------------------

    def deadline(self) -> float | None:
        """The first moment a member or the stream could time out, or a hand-over
        could run out (None: no member, no stream, no hand-over)."""
        due = [member.last_seen + member.timeout for member in self.members.values()]
        if self.stream is not None:
            due.append(self.stream.last_seen + self.stream.timeout)
        due.extend(self.handovers.values())
        return min(due) if due else None

    def overdue(self, now: float) -> tuple[str, ...]:
        """Members the coordinator has not heard from for longer than their timeout
        (before it asks the channels whether they have)."""
        return tuple(
            member.reader_id
            for member in self.members.values()
            if now - member.last_seen > member.timeout
        )

    def expire(self, now: float) -> tuple[list[str], Rebalance | None]:
        """Remove members (or end the stream) silent for longer than their timeout,
        and move the channels whose hand-over ran out (their owner did not release
        them in time)."""
        stream = self.stream
        if stream is not None and now - stream.last_seen > stream.timeout:
            return [stream.reader_id], self.end_stream(stream.reader_id)
        expired = [
            member.reader_id
            for member in self.members.values()
            if now - member.last_seen > member.timeout
        ]
        overdue = [channel for channel, due in self.handovers.items() if now >= due]
        if not expired and not overdue:
            return [], None
        for reader_id in expired:
            del self.members[reader_id]
        for channel in overdue:
            del self.handovers[channel]
            self.leases[channel] = None  # moves without its owner's release
        self.generation += 1
        return expired, self._rebalance(extra_changed=tuple(expired), now=now)

    def assign_unowned(self) -> Rebalance | None:
        """Give members (or the stream) the channels nobody owns (a channel that lost
        its cursor while the coordinator was down comes back unowned); None if there
        are none."""
        if self.stream is not None:
            lease = Lease(self.stream.reader_id, self.stream.generation)
            unowned = [c for c in range(self.channel_count) if self.leases.get(c) is None]
            if not unowned:
                return None
            granted: dict[int, Lease | None] = dict.fromkeys(unowned, lease)
            self.leases.update(granted)
            return Rebalance(granted, (), self.stream.reader_id)
        if self.shared is not None or not self.members:
            return None
        if all(self.leases.get(channel) for channel in range(self.channel_count)):
            return None
        self.generation += 1
        return self._rebalance(extra_changed=())

    def _rebalance(self, extra_changed: tuple[str, ...], now: float | None = None) -> Rebalance:
        if self.shared is not None:  # nothing to assign: only the members hear of it
            self.version += 1
            return Rebalance({}, tuple(sorted(extra_changed)))
        now = time.monotonic() if now is None else now  # when a hand-over begins
        current = {channel: self.owner(channel) for channel in range(self.channel_count)}
        target = assign(self.channel_count, current, self.members)
        grants: dict[int, Lease | None] = {}
        changed = set(extra_changed)
        for channel, owner in target.items():
            previous = current.get(channel)
            if owner == previous and (owner is None or self.leases.get(channel)):
                self.handovers.pop(channel, None)  # it stays: nothing to hand over
                continue
            holder = self.members.get(previous) if previous is not None else None
            if holder is not None and holder.cooperative:
                # Its owner releases it once it committed what it handed out.
                self.handovers.setdefault(channel, now + holder.timeout)
                changed.add(holder.reader_id)
                continue
            self.handovers.pop(channel, None)
            lease = Lease(owner, self.generation) if owner is not None else None
            grants[channel] = lease
            self.leases[channel] = lease
            changed.update(member for member in (owner, current.get(channel)) if member)
        self.version += 1
        return Rebalance(grants, tuple(sorted(changed)))


def recovered_groups(
    channel_count: int,
    cursors: list[dict[str, dict[str, object]]],
    marks: list[dict[str, tuple[int, int]]],
    now: float,
) -> dict[str, Group]:
    """The groups a restarted coordinator rebuilds from what its channels keep.

    Each channel has every group's cursor (with the lease of its owner, and
    whether that lease is the group's stream's) and the highest (view version,
    generation) pushed to it. Members are the lease holders, alive as of
    ``now``, except a stream's lease (named so by any channel): its holder is
    the group's stream; versions and generations continue above every one a
    channel saw, so they only grow.

    Args:
        channel_count: The topic's channels.
        cursors: Per channel, ``group_cursors()``.
        marks: Per channel, ``group_marks()``.
        now: The coordinator's monotonic clock.
    """
    groups: dict[str, Group] = {}
    streams = {
        (name, cursor["owner"])
        for by_group in cursors
        for name, cursor in by_group.items()
        if cursor.get("stream")
    }
    for channel, by_group in enumerate(cursors):
        for name, cursor in by_group.items():
            group = groups.setdefault(name, Group(name, channel_count))
            if cursor.get("mode") == "shared":
                group.shared = cursor["spec"]  # type: ignore[assignment]
            lease = cursor.get("owner")
            group.leases[channel] = lease  # type: ignore[assignment]
            group.jumps[channel] = int(cursor.get("jumps", 0))  # type: ignore[call-overload]
            if isinstance(lease, Lease):
                group.generation = max(group.generation, lease.generation)
                if (name, lease) in streams:
                    stream = group.stream
                    if stream is None or stream.generation < lease.generation:
                        group.stream = Member(
                            lease.reader_id, lease.generation, RECOVERED_TIMEOUT, now
                        )
                    continue
                member = group.members.get(lease.reader_id)
                if member is None or member.generation < lease.generation:
                    group.members[lease.reader_id] = Member(
                        lease.reader_id, lease.generation, RECOVERED_TIMEOUT, now
                    )
    for marked in marks:
        for name, (version, generation) in marked.items():
            known = groups.get(name)
            if known is not None:
                known.version = max(known.version, version)
                known.generation = max(known.generation, generation)
    for group in groups.values():
        # Above anything a member may have seen: its next view is news to it.
        group.version += 1
        group.generation += 1
    return groups
