"""A stream's claim on its group: granted by the topic's coordinator, kept alive by
heartbeats, given back when the stream ends.

The coordinator decides who consumes a group, for members and streams alike
(``raytopic.coordinator.groups``): it grants the stream a lease that owns every
channel of the group (refusing the claim while the group has members, and
members while the stream holds it: ``GroupBusyError``), and the channels refuse
a micro-batch's record or commit under any other lease. A newer stream's claim
takes the group from an older one. The claim lasts until :meth:`StreamClaim.end`
(the stream ended or was stopped), or until the stream's process stops
heartbeating for longer than ``timeout`` (it died): then a member may join.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
import weakref
from typing import TYPE_CHECKING, Any

import ray

from raytopic.core.errors import GroupNotFoundError, TopicNotFoundError, unwrap_ray_error
from raytopic.core.protocol import ClaimStream, EndStream, StreamHeartbeat
from raytopic.core.waits import bounded_wait

if TYPE_CHECKING:
    from raytopic.client.topic import Topic
    from raytopic.core.protocol import Lease, StreamLogState

logger = logging.getLogger(__name__)

__all__ = ["StreamClaim"]


class StreamClaim:
    """A stream's hold on ``group`` of ``topic``, granted when this is made.

    Args:
        topic: The topic.
        group: The group (made if new, at the tail with ``start_latest``).
        timeout: Seconds without a heartbeat after which the claim ends.
        start_latest: A new group starts at the tail (else at the head).

    Raises:
        GroupBusyError: the group has members.
        GroupModeError: the group is shared.
    """

    def __init__(self, topic: Topic, group: str, timeout: float, start_latest: bool) -> None:
        self.stream_id = f"stream:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        """The stream's id: its host and process, so a member refused can tell whose it is."""
        coordinator = topic._coordinator
        lease, states = topic._call(ClaimStream(group, self.stream_id, timeout, start_latest))
        self.lease: Lease = lease
        """What the stream's steps carry: the channels refuse any other."""
        self.states: list[StreamLogState] = states
        """Where the group's stream stood at each channel when the claim was granted."""
        self._topic = topic
        self._group = group
        self._stop = threading.Event()
        self._ended = False
        beats = threading.Thread(
            target=_heartbeats,
            args=(coordinator, group, self.stream_id, timeout, self._stop),
            name=f"raytopic-stream-{self.stream_id[-12:]}",
            daemon=True,
        )
        beats.start()
        # A stream dropped without ending stops heartbeating: its claim ends after
        # the timeout, as a dead process's does.
        weakref.finalize(self, self._stop.set)

    def end(self) -> None:
        """Give the group back now (a member may join); idempotent. If the coordinator
        cannot be told, the claim ends after its timeout."""
        if self._ended:
            return
        self._ended = True
        self._stop.set()
        topic = self._topic
        try:
            topic._call(EndStream(self._group, self.stream_id))
        except Exception as error:
            logger.warning(
                "stream %s on group %s: could not give the group back (%s); it is free "
                "once its timeout passes",
                self.stream_id,
                self._group,
                error,
            )


def _heartbeats(
    coordinator: Any, group: str, stream_id: str, timeout: float, stop: threading.Event
) -> None:
    """Background: tell the coordinator the stream is alive, four times a timeout,
    until ``stop`` or until the stream no longer holds the group."""
    interval = bounded_wait(max(0.05, timeout / 4))
    while not stop.wait(interval):
        try:
            with unwrap_ray_error():
                holds = ray.get(
                    coordinator.request.remote(StreamHeartbeat(group, stream_id, timeout)),
                    timeout=timeout,
                )
        except (GroupNotFoundError, TopicNotFoundError, ray.exceptions.ActorDiedError):
            return  # the group or the topic is gone
        except Exception as error:  # the coordinator restarting, say: the next beat
            if not ray.is_initialized():
                return
            logger.warning("stream %s: heartbeat failed: %s", stream_id, error)
            continue
        if not holds:
            return  # a newer stream took the group, or the claim timed out
