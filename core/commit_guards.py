"""What a subscriber's handle does before a commit of its reader is sent from this
process. No Ray.

``ray.cancel`` of a receive can make Ray drop a reply the channel sent (see
``raytopic.client.receives_out``): its elements were taken and never seen. A commit of
a later element (``Element.commit``, which goes straight to its channel) would move
the group's commit past them, and a member that closed or lost the channel then would
never get them. So before any commit of its reader is sent from the process that holds
the handle, the handle tells the channels of such receives (``ReceivesLost``), which
stop their commits below what those replies carried until it is served again
(``Take.unseen``). A resequencing reader's session puts such elements back instead,
and the hand-over marks stamped on elements handed over after them claim them: until
they go out again, the guard returns how far a commit may go at their channels
(``HandOver.floors``). The registry is keyed by reader id and holds the handle weakly.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

__all__ = ["before_commit", "guard_commits", "lowered"]

Floors = dict[int, int] | None
"""Per channel, the highest position a commit may reach now (None: no limit)."""

_GUARDS: dict[str, weakref.WeakMethod[Callable[[], Floors]]] = {}


def guard_commits(reader_id: str, guard: Callable[[], Floors]) -> None:
    """Run ``guard`` (a bound method of the reader's handle, held weakly) before each
    commit of ``reader_id`` sent from this process."""
    _GUARDS[reader_id] = weakref.WeakMethod(guard)


def before_commit(reader_id: str) -> Floors:
    """Run the guard of ``reader_id``'s handle, if it lives in this process; returns
    how far its commits may go per channel (None: as far as they say)."""
    method = _GUARDS.get(reader_id)
    if method is None:
        return None
    guard = method()
    if guard is None:  # the handle is gone
        _GUARDS.pop(reader_id, None)
        return None
    return guard()


def lowered(bound: int | None, floors: Floors, channel: int) -> int | None:
    """A resequenced commit's ``bound`` (its hand-over mark) no higher than the floor
    at ``channel`` (a commit with no mark is not a resequencing reader's: no floor)."""
    if bound is None or not floors or channel not in floors:
        return bound
    return min(bound, floors[channel])
