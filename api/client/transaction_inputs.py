"""The group members an aborted transaction gives its inputs back to (an abort loses
nothing, whatever the order of the calls in its block: docs/guides/transactions.md).

A transaction's inputs are what group members received since their last commit.
The block may raise before it names them (``commit_consumed``: the natural code
raises in the transform, between ``publish_batch`` and ``commit_consumed``), so
the transaction cannot learn them from that call alone. An abort sends back to
its last commit (``Subscriber.seek_to_committed``: what it received since comes
again, what it had fetched is dropped, and a commit of an element received
before is REJECTED) every member of an owned group that

- received on the thread that ends the transaction: the holder's loop
  (``iter_batches``, ``receive_batch``, ``receive``) and its ``with txs.begin()``
  block run on one thread; or
- had elements consumed by the holder (``commit_consumed``, in this transaction
  or an earlier one of the same ``rt.transactions`` incarnation), on any thread.

A member in another process whose elements the transaction consumed is sent back
at its channels directly: its handle there drops nothing it had fetched, but
every commit of an element it received before is REJECTED, and it reads again
from the commit.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import ray

from raytopic.core.errors import SubscriberClosedError, TopicError
from raytopic.core.naming import channel_actor
from raytopic.core.protocol import SeekToCommitted, pack_request

if TYPE_CHECKING:
    from raytopic.client.subscriber import Subscriber
    from raytopic.core.protocol import Address, ConsumedCommit

logger = logging.getLogger(__name__)

__all__ = ["give_back", "live_subscriber", "opened", "received"]

_live: weakref.WeakValueDictionary[str, Subscriber] = weakref.WeakValueDictionary()
"""The open subscribers of this process by reader id."""


class _Receivers(threading.local):
    """Per thread: the owned groups' members that received on it."""

    def __init__(self) -> None:
        self.members: weakref.WeakSet[Subscriber] = weakref.WeakSet()


_receivers = _Receivers()


def opened(subscriber: Subscriber) -> None:
    """A subscriber opened in this process (or a copy of one arrived here)."""
    _live[subscriber.subscriber_id] = subscriber


def live_subscriber(reader_id: str) -> Subscriber | None:
    """The subscriber of this process reading as ``reader_id``, if it is open here."""
    subscriber = _live.get(reader_id)
    return None if subscriber is None or not subscriber.is_active else subscriber


def received(subscriber: Subscriber) -> None:
    """``subscriber`` receives on this thread (an owned group's member: one an abort on
    this thread sends back to its commit)."""
    if subscriber.group is not None and subscriber.mode == "owned":
        _receivers.members.add(subscriber)


def give_back(
    consumed_from: Iterable[str], consumed: Iterable[tuple[tuple[Address, Any], ConsumedCommit]]
) -> None:
    """An aborted transaction's inputs go back to their members (see the module docstring).

    Args:
        consumed_from: Reader ids whose elements the transaction's holder consumed.
        consumed: The transaction's own consumed commits, by channel and reader
            (those of a member not open here are sent back at their channel).
    """
    members = {member.subscriber_id: member for member in _receivers.members}
    for reader_id in consumed_from:
        member = live_subscriber(reader_id)
        if member is not None:
            members[reader_id] = member
    refs = [
        channel_actor(*at).request.remote(
            pack_request(SeekToCommitted(reader_id=commit.reader_id, lease=commit.lease))
        )
        for (at, _), commit in consumed
        if commit.reader_id not in members
    ]
    for member in members.values():
        _send_back(member)
    for ref in refs:
        with contextlib.suppress(TopicError, ray.exceptions.RayError):  # lost it: read anyway
            ray.get(ref)


def _send_back(member: Subscriber) -> None:
    """Send ``member`` back to its commit on every channel it owns now (as the
    coordinator holds them: see ``Subscriber.seek_to_committed``)."""
    if not member.is_active:
        return
    try:
        member.seek_to_committed()
    except SubscriberClosedError:
        return
    except (TopicError, ray.exceptions.RayError) as error:  # its topic destroyed, unreachable
        logger.warning(
            "an aborted transaction could not send member %s back to its commit: %s",
            member.subscriber_id,
            error,
        )
