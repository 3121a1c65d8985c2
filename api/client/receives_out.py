"""A subscriber's own receives still out, and those Ray reported cancelled.

``ray.cancel`` of a receive the user holds can reach the receive's owner (this
process) while the channel's reply is on its way: Ray then fails the ObjectRef with
``TaskCancelledError`` and drops the reply, whose elements the channel's session
handed over and read past. :class:`ReceivesOut` finds such receives among those that
completed, without fetching or decoding their replies, so that the subscriber can
tell their channel before its next receive (``ReceivesLost``): the session reads
them again: neither closing nor ``ray.cancel`` of a receive loses an element
(docs/architecture.md, "Receive path"). A receive cancelled before its channel
answered it took nothing; telling it changes nothing.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import TYPE_CHECKING, Any, NamedTuple

import ray
from ray.core.generated.common_pb2 import ErrorType  # type: ignore[attr-defined]

from raytopic.core.commit_guards import Floors
from raytopic.core.destroyed import topic_calls
from raytopic.core.errors import TopicError
from raytopic.core.protocol import ReadCommitFloors, ReceivesLost, pack_request

if TYPE_CHECKING:
    from raytopic.client.topic import Topic

__all__ = ["ReceivesOut", "SentReceive"]

_CANCELLED = str(ErrorType.Value("TASK_CANCELLED")).encode()
"""The metadata Ray stores for the result of a cancelled task (its error type)."""


class SentReceive(NamedTuple):
    """One receive the user holds the ObjectRef of."""

    ref: ray.ObjectRef[Any]
    channel: int
    stream: str
    number: int


class ReceivesOut:
    """The user's receives not known to have completed, and the cancelled ones
    not told yet. Not thread-safe: the subscriber's receive lock guards it."""

    def __init__(self, resequencing: bool) -> None:
        self._out: deque[SentReceive] = deque()
        self._cancelled: dict[tuple[int, str], list[int]] = {}
        self._resequencing = resequencing
        # The channels whose resequencing session was told of a cancelled receive and
        # may still hold what its reply carried (see commit_floors).
        self._holding: set[int] = set()

    def sent(self, receive: SentReceive) -> None:
        """The user got the ObjectRef of ``receive``."""
        self._out.append(receive)

    def any_out(self) -> bool:
        """Whether any receive has not completed; those that completed cancelled are
        kept for :meth:`tell_cancelled`."""
        if not self._out:
            return False
        refs = [receive.ref for receive in self._out]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        if ready:
            done = set(ready)
            for receive in self._out:
                if receive.ref in done and _cancelled(receive.ref):
                    key = (receive.channel, receive.stream)
                    self._cancelled.setdefault(key, []).append(receive.number)
            self._out = deque(receive for receive in self._out if receive.ref not in done)
        return bool(self._out)

    def tell_cancelled(self, topic: Topic, reader_id: str) -> None:
        """Tell each channel which of the receives sent there were found cancelled
        since the last call (their replies may have been dropped on their way: the
        channel's session reads again what they handed over), and wait for it. A
        channel that cannot be told restarted (its new session reads again after
        the commit) or is gone with the topic."""
        cancelled, self._cancelled = self._cancelled, {}
        for (channel, stream), numbers in cancelled.items():
            actor = topic._channel_actors[channel]
            lost = ReceivesLost(reader_id=reader_id, stream=stream, numbers=tuple(numbers))
            with contextlib.suppress(TopicError), topic_calls(topic.topic_id, topic.name):
                ray.get(actor.request.remote(pack_request(lost)))
        if self._resequencing:
            self._holding.update(channel for channel, _ in cancelled)

    def commit_floors(self, topic: Topic, reader_id: str) -> Floors:
        """How far a commit of the reader may go per channel while the resequencing
        sessions told of cancelled receives hold what their replies carried, to hand
        it over again (see ``commit_guards``): one call to each such session's
        channel, until it holds nothing."""
        floors: dict[int, int] = {}
        for host in sorted(self._holding):
            actor = topic._channel_actors[host]
            held: dict[int, int] = {}
            with contextlib.suppress(TopicError), topic_calls(topic.topic_id, topic.name):
                held = ray.get(actor.request.remote(pack_request(ReadCommitFloors(reader_id))))
            if not held:  # (a restarted channel's new session holds nothing)
                self._holding.discard(host)
            for channel, floor in held.items():
                floors[channel] = min(floor, floors.get(channel, floor))
        return floors or None


def _cancelled(ref: ray.ObjectRef[Any]) -> bool:
    """Whether the completed ``ref`` holds Ray's "task cancelled" error.

    Read from the result's metadata in this process's object store (the owner keeps
    it), so a reply is neither fetched nor decoded: that costs a few microseconds,
    where ``ray.get`` would decode the whole batch again (2 ms for 1,000 elements
    here). Ray offers no public call for this; if the private one is gone, the
    result is read.
    """
    try:
        worker: Any = ray._private.worker.global_worker
        (result,) = worker.core_worker.get_objects([ref], 0)
        return bool(result.metadata == _CANCELLED)
    except Exception:
        try:
            ray.get(ref, timeout=0)
        except ray.exceptions.TaskCancelledError:
            return True
        except Exception:
            return False
        return False
