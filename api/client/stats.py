"""``Topic.describe()``'s records: one snapshot of every channel and group."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raytopic.core.records import Position
from raytopic.core.shared_group import GroupModeName

__all__ = ["ChannelStats", "GroupChannelStats", "GroupStats", "MemberStats", "TopicStats"]


@dataclass(frozen=True, slots=True)
class ChannelStats:
    """One channel: its figures and where its actor runs."""

    channel: int
    """Channel number."""
    head: int | None
    """Sequence of the oldest stored element (None: unreachable)."""
    tail: int | None
    """Sequence of the newest element (head - 1 when empty)."""
    size: int | None
    """Elements stored."""
    capacity: int
    """Most elements it holds."""
    epoch: int
    """Incarnation of the channel actor."""
    node_id: str
    """Ray node the actor runs on."""
    pid: int
    """Process id of the actor (for operators and fault tests)."""
    state: str = "serving"
    """"serving"; "opening" (new, while its topic is made: its coordinator compares
    what the channels' stores hold); "recovering" (restarted without a store, waiting
    for its groups); "failed" (its store broke: see ``failure``); "unreachable"
    (restarting, or gone: the figures are the last known or None)."""
    durable: bool = False
    """Whether it has a store."""
    failure: str | None = None
    """Why it is failed or unreachable."""
    damaged: tuple[tuple[int, int], ...] = ()
    """Stored sequence ranges found corrupt (checksum) when it recovered: never delivered."""
    transactions: tuple[dict[str, Any], ...] = ()
    """Open transactions here, each ``{"id", "key", "phase", "age", "staged"}``:
    transactional id, transaction, "staged" or "prepared", seconds since it
    first touched this channel, elements it staged here (invisible until it
    commits)."""
    compaction: dict[str, Any] | None = None
    """A compacted topic's channel: ``{"point", "live_keys", "dirty_ratio", "runs",
    "last_run"}``: its compaction point (below it, only the latest element of each
    key is left; -1 before the first pass), the keys whose latest element is not a
    delete (as of the last pass), the share of what it holds appended since that
    pass, how many passes ran, and the last one's ``{"at", "seconds", "removed",
    "bytes_before", "bytes_after"}`` (None before the first). None for a topic that is
    not compacted."""


@dataclass(frozen=True, slots=True)
class GroupChannelStats:
    """One group on one channel."""

    channel: int
    """Channel number."""
    owner: str | None
    """Member owning it, or None."""
    committed: Position
    """Resume point: a (re)joining owner reads from the element after it."""
    has_commit: bool
    """Whether ``committed`` comes from a commit (or a seek/reset that sets it)."""
    next: int
    """Sequence the group receives next."""
    depth: int
    """Elements not yet received."""
    unacked: int
    """Elements received but not committed (not those a seek or a filter passed over,
    nor those acknowledged one by one: ``Element.ack``)."""
    lag: int
    """Elements after the commit that are not done (acknowledged one by one, or a
    filter's misses): depth + unacked + those a seek passed over unreceived."""
    redelivered: int = 0
    """Shared groups: deliveries beyond an element's first, so far."""
    dead_lettered: int = 0
    """Shared groups: elements moved to the dead-letter topic, so far."""
    holdings: dict[str, int] = field(default_factory=dict)
    """Shared groups: per member, the elements it holds unacknowledged here."""


@dataclass(frozen=True, slots=True)
class MemberStats:
    """One live member of a group."""

    member_id: str
    """The member's id (its reader id: ``Subscriber.subscriber_id``)."""
    generation: int
    """Its generation."""
    channels: tuple[int, ...]
    """Channels it owns."""
    idle: float
    """Seconds since its last receive or heartbeat."""
    timeout: float
    """Seconds of silence after which it loses its channels."""
    unacked: int = 0
    """Shared groups: elements it holds, received and not yet acknowledged."""


@dataclass(frozen=True, slots=True)
class GroupStats:
    """One subscriber group."""

    name: str
    """Group name."""
    generation: int
    """Bumped on every membership change."""
    members: tuple[MemberStats, ...]
    """Live members."""
    channels: tuple[GroupChannelStats, ...]
    """Per channel positions and counts."""
    mode: GroupModeName = "owned"
    """"owned" (channels owned by members, cumulative commits) or "shared"
    (per-element acknowledgement; ``committed`` is then the low watermark:
    every element up to it is acknowledged)."""
    stream: str | None = None
    """The id of the stream consuming the group (it owns every channel; then the
    group has no members), or None."""

    @property
    def redelivered(self) -> int:
        """Shared groups: deliveries beyond an element's first, over all channels."""
        return sum(channel.redelivered for channel in self.channels)

    @property
    def dead_lettered(self) -> int:
        """Shared groups: elements sent to the dead-letter topic, over all channels."""
        return sum(channel.dead_lettered for channel in self.channels)

    @property
    def depth(self) -> int:
        """Elements not yet received, over all channels."""
        return sum(channel.depth for channel in self.channels)

    @property
    def unacked(self) -> int:
        """Elements received but not committed, over all channels."""
        return sum(channel.unacked for channel in self.channels)

    @property
    def lag(self) -> int:
        """Elements not yet committed, over all channels."""
        return sum(channel.lag for channel in self.channels)

    @property
    def committed(self) -> dict[int, Position]:
        """Per channel, the last committed position (channels with a commit)."""
        return {c.channel: c.committed for c in self.channels if c.has_commit}

    @property
    def ownership(self) -> dict[int, str | None]:
        """Per channel, its owner."""
        return {c.channel: c.owner for c in self.channels}


@dataclass(frozen=True, slots=True)
class TopicStats:
    """A snapshot of a topic."""

    name: str
    """Topic name."""
    topic_id: str
    """Topic id."""
    channels: tuple[ChannelStats, ...]
    """Per channel figures."""
    groups: dict[str, GroupStats]
    """Per group figures."""


def topic_stats(raw: dict[str, Any]) -> TopicStats:
    """Build TopicStats from the coordinator's ``describe`` reply."""
    config = raw["config"]
    channels = tuple(
        ChannelStats(
            channel=c["channel"],
            head=c["head"],
            tail=c["tail"],
            size=c["size"],
            capacity=c["capacity"],
            epoch=c.get("epoch", 0),
            node_id=c.get("node_id", ""),
            pid=c.get("pid", 0),
            state=c.get("state", "serving"),
            durable=c.get("durable", False),
            failure=c.get("failure"),
            damaged=tuple(tuple(r) for r in c.get("damaged", ())),
            transactions=tuple(c.get("transactions", ())),
            compaction=c.get("compaction"),
        )
        for c in raw["channels"]
    )
    groups = {}
    for name, group in raw["groups"].items():
        per_channel = []
        for c in raw["channels"]:
            cursor = c["groups"].get(name)
            if cursor is None:
                continue
            tail, next_sequence, committed = c["tail"], cursor["next"], cursor["committed"]
            owner = cursor["owner"]
            # What is below the head (expired by the ttl, dropped) counts in neither.
            floor = max(committed, c["head"] - 1)
            depth = cursor.get("depth", max(0, tail - max(next_sequence, c["head"]) + 1))
            per_channel.append(
                GroupChannelStats(
                    channel=c["channel"],
                    owner=owner.reader_id if owner else None,
                    committed=Position(config.topic_id, c["channel"], committed),
                    has_commit=cursor["has_commit"],
                    next=next_sequence,
                    depth=depth,
                    unacked=cursor["unacked"],
                    lag=max(0, tail - floor - cursor.get("done", 0)),
                    redelivered=cursor.get("redelivered", 0),
                    dead_lettered=cursor.get("dead_lettered", 0),
                    holdings=dict(cursor.get("holdings", {})),
                )
            )
        members = tuple(
            MemberStats(
                member_id=reader_id,
                generation=member["generation"],
                channels=tuple(member["channels"]),
                idle=member["idle"],
                timeout=member["timeout"],
                unacked=sum(c.holdings.get(reader_id, 0) for c in per_channel),
            )
            for reader_id, member in group["members"].items()
        )
        groups[name] = GroupStats(
            name,
            group["generation"],
            members,
            tuple(per_channel),
            group.get("mode", "owned"),
            group.get("stream"),
        )
    return TopicStats(config.name, config.topic_id, channels, groups)
