"""Sticky, balanced assignment of a topic's channels to a group's members. No Ray.

Balanced: members' channel counts differ by at most one. Sticky: a member
keeps every channel it can keep within its share, so a join moves only the
channels the newcomer needs, and a leave moves only the leaver's channels.
Deterministic: the same inputs always give the same assignment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["assign"]


def assign(
    channel_count: int,
    current: Mapping[int, str | None],
    members: Iterable[str],
) -> dict[int, str | None]:
    """Assign every channel to one of ``members`` (None for all when there are none).

    Args:
        channel_count: Channels ``0 .. channel_count - 1``.
        current: Today's owner of each channel (missing or None: unowned).
        members: The live members; order does not matter.

    Returns:
        The owner of every channel.
    """
    people = sorted(set(members))
    if not people:
        return dict.fromkeys(range(channel_count))
    held: dict[str, list[int]] = {member: [] for member in people}
    for channel in range(channel_count):
        owner = current.get(channel)
        if owner in held:
            held[owner].append(channel)

    base, extra = divmod(channel_count, len(people))
    # The members holding most today get the larger shares: fewer moves.
    by_holding = sorted(people, key=lambda member: (-len(held[member]), member))
    share = {member: base + (1 if rank < extra else 0) for rank, member in enumerate(by_holding)}

    result: dict[int, str | None] = {}
    free: list[int] = []
    for member in people:
        keep, give_up = held[member][: share[member]], held[member][share[member] :]
        for channel in keep:
            result[channel] = member
        free.extend(give_up)
    free.extend(channel for channel in range(channel_count) if current.get(channel) not in held)
    free.sort()

    hungry = sorted(people, key=lambda member: (len(held[member]), member))
    for member in hungry:
        missing = share[member] - min(len(held[member]), share[member])
        for _ in range(missing):
            result[free.pop(0)] = member
    return dict(sorted(result.items()))
