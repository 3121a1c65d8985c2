"""Calls this process sent to channels on a reader's behalf that must land before
the reader's next step: its poison reports before its next receive, its
acknowledgements before it leaves its group.

Ray orders the calls of one caller to one actor only as far as they are sent; an
async channel runs them as they come, and the reader's next step often reaches
the channel another way (a receive through another handle, a leave through the
coordinator). So such a call is waited for, by its ObjectRef, where the step
that must not pass it is taken.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import ray

__all__ = ["LEAVE_WAIT", "ReaderCalls", "before_leaving"]

_PRUNE_AT = 32
"""Refs kept per reader before the ones already answered are dropped (a reader that
acks asynchronously for hours holds no more than about twice those in flight)."""


class ReaderCalls:
    """The ObjectRefs of calls sent for each reader, not yet seen answered.

    Args:
        wait_seconds: The longest :meth:`wait` waits (a call still unanswered then
            is left: its channel restarted or is gone, and what it carried is
            found again there, or void with the topic).
    """

    def __init__(self, wait_seconds: float) -> None:
        self._wait_seconds = wait_seconds
        self._refs: dict[tuple[str, str], list[Any]] = {}
        self._prune_at: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def add(self, topic_id: str, reader: str, ref: ray.ObjectRef[Any]) -> None:
        """Keep ``ref``, a call sent for ``reader`` of topic ``topic_id``."""
        key = (topic_id, reader)
        with self._lock:
            refs = self._refs.setdefault(key, [])
            refs.append(ref)
            if len(refs) < self._prune_at.get(key, _PRUNE_AT):
                return
        _, pending = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        with self._lock:
            answered = set(refs) - set(pending)
            kept = [r for r in self._refs.get(key, ()) if r not in answered]
            self._refs[key] = kept
            self._prune_at[key] = max(_PRUNE_AT, 2 * len(kept))

    def wait(self, topic_id: str, reader: str) -> None:
        """Wait (at most ``wait_seconds``) until every call kept for ``reader`` is
        answered, and forget them."""
        key = (topic_id, reader)
        with self._lock:
            refs = self._refs.pop(key, None)
            self._prune_at.pop(key, None)
        if refs:
            with contextlib.suppress(Exception):  # failed or late: nothing more to wait for
                ray.wait(refs, num_returns=len(refs), timeout=self._wait_seconds)


LEAVE_WAIT = 5.0
"""Seconds a closing subscriber waits for its acknowledgements and commits to land."""

before_leaving = ReaderCalls(LEAVE_WAIT)
"""The acknowledgements (acks, nacks, extensions) and commits this process sent, per
reader, not yet seen answered: a subscriber's ``close()`` waits for them before it
leaves its group. The leave reaches the channels from the coordinator, and Ray does
not order it with a call sent a moment before: a leave served first would give a
shared element acked asynchronously back to the group, or move an owned channel to
another member before the commit, which then fails as NOT_OWNER (its elements
delivered again). Kafka's ``close()`` waits for pending async commits alike."""
