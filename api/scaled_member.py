"""A member actor of an autoscaled group: receive a batch, call the handler, finish the batch.

An autoscaler (``raytopic.scaler_actor``) starts and stops these. Each holds
one group member (a :class:`~raytopic.Subscriber`) and runs one loop:

1. give back the channels the group is moving to another member (an owned
   group's member is *cooperative*: it keeps such a channel until it has
   committed what it handed to the handler, so the new owner starts after
   those commits and no element reaches two handlers);
2. receive up to ``batch_size`` elements;
3. call ``handler(values)``;
4. commit the batch (an owned group) or acknowledge it (a shared group). A
   handler that raises: a shared group's member nacks the batch (delivered
   again, dead letters as the group says); an owned group's member goes back
   to its last commit and tries again after a pause. Either way it is logged.

``stop()`` ends the loop after the batch in hand is finished, then leaves the
group: its channels go to the other members, after its commits.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

import ray

from raytopic.core.errors import SubscriberClosedError, TopicError, TopicNotFoundError
from raytopic.core.records import CommitStatus
from raytopic.core.user_functions import load_pickled, name_of

if TYPE_CHECKING:
    from raytopic.core.element_batch import ElementBatch
    from raytopic.core.shared_group import SharedGroup
    from raytopic.subscriber import Subscriber
    from raytopic.topic import Topic

logger = logging.getLogger(__name__)

__all__ = ["MEMBER_TIMEOUT", "ScaledMemberActor"]

MEMBER_TIMEOUT = 10.0
"""Seconds a member may go unheard before its group drops it (a member whose process
died, while its autoscaler is down to say so); also how long a hand-over waits
for a member stuck in its handler."""

RETRY_PAUSE = 1.0
"""Seconds an owned group's member waits before it tries a failed batch again."""

IDLE_FIRST = 0.01
IDLE_MOST = 0.2
"""Seconds an idle member waits before it looks again: from the first, doubling to
the most (a receive that finds nothing returns at once)."""


class ScaledMemberActor:
    """One member of an autoscaled group (a threaded Ray actor: ``stop`` and
    ``identity`` answer while the loop runs).

    Args:
        topic: The topic.
        group: The group's name, or its ``SharedGroup`` definition.
        mode: ``"owned"`` or ``"shared"``.
        handler: The cloudpickled ``handler(values)``.
        batch_size: Most values one handler call gets.
    """

    def __init__(
        self,
        topic: Topic,
        group: str | SharedGroup,
        mode: str,
        handler: bytes,
        batch_size: int,
    ) -> None:
        self._handler = load_pickled(handler, "handler")
        self._name = name_of(self._handler)
        self._batch_size = batch_size
        self._shared = mode == "shared"
        self._subscriber: Subscriber = topic.subscriber(
            group=group,
            mode=mode,
            complete_on_empty=True,
            timeout=MEMBER_TIMEOUT,
            cooperative=not self._shared,
        )
        self._stopping = threading.Event()
        self._finished = threading.Event()
        self._loop = threading.Thread(target=self._run, name="raytopic-member", daemon=True)
        self._keepalive = threading.Thread(target=self._beat, name="raytopic-beat", daemon=True)

    def identity(self) -> tuple[str, int, str]:
        """(member id in the group, process id, node id)."""
        node = ray.get_runtime_context().get_node_id()
        return self._subscriber.subscriber_id, os.getpid(), node

    def start(self) -> None:
        """Start the loop (once: a restarted autoscaler that adopts this member calls
        it again, which changes nothing)."""
        if self._loop.ident is None:
            self._loop.start()
            self._keepalive.start()

    def wait_stopped(self) -> None:
        """Return once the loop has ended (the autoscaler keeps this call waiting: it
        fails with Ray's actor error when the member dies)."""
        self._finished.wait()

    def stop(self) -> None:
        """End the loop after the batch in hand is finished, then leave the group."""
        self._stopping.set()
        if self._loop.ident is not None:
            self._finished.wait()
        self._subscriber.close()

    # -- the loop ----------------------------------------------------------------------

    def _run(self) -> None:
        idle = IDLE_FIRST
        try:
            while not self._stopping.is_set():
                try:
                    batch = self._next_batch()
                    if batch:
                        self._handle(batch)
                except (SubscriberClosedError, TopicNotFoundError):
                    logger.warning("member %s: its group or topic is gone", self._member_id)
                    return
                except Exception as error:  # a channel or the coordinator restarting, say
                    logger.warning("member %s: %r; trying again", self._member_id, error)
                    self._stopping.wait(RETRY_PAUSE)
                    continue
                if batch:
                    idle = IDLE_FIRST
                else:
                    self._stopping.wait(idle)
                    idle = min(2 * idle, IDLE_MOST)
        finally:
            self._finished.set()

    def _next_batch(self) -> ElementBatch:
        """Release the channels being moved away (everything handed out from them is
        committed by now), then receive."""
        subscriber = self._subscriber
        if subscriber.revoking:
            subscriber.release()
        return ray.get(subscriber.receive_batch(self._batch_size))

    def _handle(self, batch: ElementBatch) -> None:
        try:
            self._handler(batch.values)
        except Exception:
            logger.exception(
                "member %s: handler %s failed on %d values", self._member_id, self._name, len(batch)
            )
            self._retry_later(batch)
            return
        try:
            if self._shared:
                batch.ack()
            else:
                self._commit(batch)
        except TopicError as error:  # handled, not finished: delivered again (at least once)
            logger.warning("member %s: could not finish a batch: %s", self._member_id, error)

    def _commit(self, batch: ElementBatch) -> None:
        for channel, result in batch.commit().items():
            if result.status is CommitStatus.NOT_OWNER:
                # Its channel moved without our release (a hand-over that ran out):
                # the new owner handles the batch again.
                logger.warning(
                    "member %s: channel %d moved before its commit", self._member_id, channel
                )

    def _retry_later(self, batch: ElementBatch) -> None:
        """A shared group's member nacks the batch; an owned one goes back to its last
        commit and pauses."""
        try:
            if self._shared:
                batch.nack()
                return
            channels = sorted({element.channel for element in batch})
            owned = set(self._subscriber.channels)
            self._subscriber.seek_to_committed(*(c for c in channels if c in owned))
        except TopicError as error:
            logger.warning("member %s: could not give a batch back: %s", self._member_id, error)
        self._stopping.wait(RETRY_PAUSE)

    def _beat(self) -> None:
        """Report this member alive while it runs (a handler may take longer than the
        group's timeout; a receive only reports it when it is sent)."""
        while not self._finished.wait(MEMBER_TIMEOUT / 4):
            try:
                self._subscriber.heartbeat()
            except (SubscriberClosedError, TopicNotFoundError):
                return
            except Exception as error:  # the coordinator restarting: the next beat counts
                logger.debug("member %s: heartbeat failed: %s", self._member_id, error)

    @property
    def _member_id(self) -> str:
        return self._subscriber.subscriber_id[:8]

    def __repr__(self) -> str:
        return f"ScaledMemberActor({self._subscriber!r})"
