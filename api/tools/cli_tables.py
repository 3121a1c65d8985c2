"""What the ``raytopic`` command prints: the readable tables and the JSON of a topic's
figures, in one place (new fields slot in here). No Ray."""

from __future__ import annotations

import base64
import json
import time
from dataclasses import asdict
from datetime import datetime
from typing import Any

from raytopic.client.stats import GroupStats, TopicStats
from raytopic.core.records import Element, Position

__all__ = ["element_line", "groups_table", "to_json", "topic_table"]


def to_json(value: Any) -> str:
    """``value`` as JSON: dataclasses as objects, Positions and datetimes as text,
    bytes as their text when they are UTF-8, else as base64."""
    return json.dumps(_plain(value), default=str)


def _plain(value: Any) -> Any:
    if isinstance(value, Position):
        return value.sequence
    if hasattr(value, "__dataclass_fields__"):
        return _plain(asdict(value))
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode()
    return value


def element_line(element: Element, *, full: bool) -> str:
    """One line of ``tail``: the value as JSON, or (``full``) an object with the
    key, channel, position and time stamp too."""
    if not full:
        return to_json(element.value)
    return to_json(
        {
            "key": element.key,
            "channel": element.channel,
            "position": element.position.sequence,
            "timestamp": element.timestamp,
            "value": element.value,
        }
    )


def _table(header: list[str], rows: list[list[Any]]) -> str:
    cells = [header, *[["-" if cell is None else str(cell) for cell in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def topic_table(stats: TopicStats) -> str:
    """``describe``: the channels (head, tail, size, epoch, node, pid, state), the open
    transactions of each channel, if any, a compacted topic's compaction per channel,
    then each group's members with their channels and its per-channel positions and
    counts."""
    lines = [f"topic {stats.name} (id {stats.topic_id})"]
    lines.append(
        _table(
            ["channel", "head", "tail", "size", "epoch", "node", "pid", "state"],
            [
                [c.channel, c.head, c.tail, c.size, c.epoch, c.node_id[:12], c.pid, c.state]
                for c in stats.channels
            ],
        )
    )
    transactions = _transactions_table(stats)
    if transactions:
        lines += ["", transactions]
    compaction = _compaction_table(stats)
    if compaction:
        lines += ["", compaction]
    for group in stats.groups.values():
        lines.append("")
        lines.append(_group_title(group))
        for member in group.members:
            if group.mode == "shared":  # every member reads every channel: say what it holds
                lines.append(f"  member {member.member_id[:12]}: holds {member.unacked}")
            else:
                lines.append(f"  member {member.member_id[:12]}: channels {list(member.channels)}")
        lines.append(
            _table(
                ["channel", "owner", "committed", "depth", "unacked", "lag"],
                [
                    [
                        c.channel,
                        (c.owner or "")[:12] or None,
                        c.committed.sequence if c.has_commit or group.mode == "shared" else None,
                        c.depth,
                        c.unacked,
                        c.lag,
                    ]
                    for c in group.channels
                ],
            )
        )
    return "\n".join(lines)


def _transactions_table(stats: TopicStats) -> str:
    """The open transactions, one row per channel each touched ("" if none)."""
    rows = [
        [c.channel, t["id"], t["key"], t["phase"], f"{t['age']:.1f}", t["staged"]]
        for c in stats.channels
        for t in sorted(c.transactions, key=lambda t: t["key"])
    ]
    if not rows:
        return ""
    title = f"open transactions ({len({row[2] for row in rows})})"
    header = ["channel", "transactional id", "transaction", "phase", "age (s)", "staged"]
    return title + "\n" + _table(header, rows)


def _compaction_table(stats: TopicStats) -> str:
    """A compacted topic's compaction, one row per channel ("" if not compacted): its
    compaction point, live keys and dirty ratio, its passes, and the last one's age,
    length, elements removed and log bytes before and after."""
    if all(c.compaction is None for c in stats.channels):
        return ""
    now = time.time()
    rows = []
    for c in stats.channels:
        figures = c.compaction or {}
        last = figures.get("last_run") or {}
        dirty = figures.get("dirty_ratio")
        rows.append(
            [
                c.channel,
                figures.get("point"),
                figures.get("live_keys"),
                None if dirty is None else f"{dirty:.2f}",
                figures.get("runs"),
                f"{now - last['at']:.1f}" if last else None,
                f"{last['seconds']:.3f}" if last else None,
                last.get("removed"),
                last.get("bytes_before"),
                last.get("bytes_after"),
            ]
        )
    header = [
        "channel", "point", "live keys", "dirty", "runs", "last run (s ago)", "took (s)",
        "removed", "bytes before", "bytes after",
    ]  # fmt: skip
    return "compaction\n" + _table(header, rows)


def _group_title(group: GroupStats) -> str:
    title = (
        f"group {group.name} ({group.mode}): generation {group.generation}, "
        f"{len(group.members)} member(s), depth {group.depth}, unacked {group.unacked}, "
        f"lag {group.lag}"
    )
    if group.mode == "shared":
        title += f", redelivered {group.redelivered}, dead-lettered {group.dead_lettered}"
    return title


def groups_table(stats: TopicStats) -> str:
    """``groups``: one row per group."""
    return _table(
        [
            "group",
            "mode",
            "generation",
            "members",
            "depth",
            "unacked",
            "lag",
            "redelivered",
            "dead",
        ],
        [
            [
                g.name,
                g.mode,
                g.generation,
                len(g.members),
                g.depth,
                g.unacked,
                g.lag,
                g.redelivered,
                g.dead_lettered,
            ]
            for g in stats.groups.values()
        ],
    )
