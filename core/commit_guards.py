"""What a subscriber's handle does before a commit of its reader is sent from this
process. No Ray.

``ray.cancel`` of a receive can make Ray drop a reply the channel sent (see
``raytopic.client.receives_out``): its elements were taken and never seen. A commit of
a later element (``Element.commit``, which goes straight to its channel) would move
the group's commit past them, and a member that closed or lost the channel then would
never get them. So before any commit of its reader is sent from the process that holds
the handle, the handle tells the channels of such receives (``ReceivesLost``), which
stop their commits below what those replies carried until it is served again
(``Take.unseen``). The registry is keyed by reader id and holds the handle weakly.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

__all__ = ["before_commit", "guard_commits"]

_GUARDS: dict[str, weakref.WeakMethod[Callable[[], None]]] = {}


def guard_commits(reader_id: str, guard: Callable[[], None]) -> None:
    """Run ``guard`` (a bound method of the reader's handle, held weakly) before each
    commit of ``reader_id`` sent from this process."""
    _GUARDS[reader_id] = weakref.WeakMethod(guard)


def before_commit(reader_id: str) -> None:
    """Run the guard of ``reader_id``'s handle, if it lives in this process."""
    method = _GUARDS.get(reader_id)
    if method is None:
        return
    guard = method()
    if guard is None:  # the handle is gone
        _GUARDS.pop(reader_id, None)
    else:
        guard()
