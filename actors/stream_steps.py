"""A stream's steps at a channel: the grant of its group, this channel's part of each
step, and, when this channel leads a step, every other channel's.

A stream (``raytopic.data.stream``) sends each step of a micro-batch (its record
before the batch is handed out, its commit after, or one batch's commit with the
next one's record) as ONE call to a lead channel,
as a transaction's holder sends one ``EndTransaction`` and ``publish_batch`` one
joined call: the lead serves its own part and asks every other channel for
theirs, all at once, and answers once every part is done (durably with a store).
Each part is checked against the group's owner there: only the lease its
coordinator granted the stream passes (``raytopic.actors.stream_logs``).

**Faults**: every part is idempotent (a batch recorded again with the same ranges,
or committed again, changes nothing), so a call Ray runs again, on a lead that
restarted or at a channel that restarted, does what it did once; a step that some
channels took and others did not (the stream's driver died meanwhile) is finished
by the next stream on the group (``raytopic.core.stream_log.recover``).

The calls to the other channels go through a ``StreamPeers`` port (``RayStreamPeers``
in the channel), so the part runs in unit tests without Ray.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import ray

from raytopic.actors.channel_state import ChannelState
from raytopic.actors.readers import Readers
from raytopic.actors.stream_logs import StreamLogs
from raytopic.core.config import TopicConfig
from raytopic.core.errors import TopicError, TopicNotFoundError
from raytopic.core.naming import channel_actor
from raytopic.core.protocol import (
    CommitMicroBatch,
    GrantStream,
    RecordMicroBatch,
    StreamLogState,
    StreamPart,
    StreamRequest,
    pack_request,
)

__all__ = ["RayStreamPeers", "StreamPeers", "StreamSteps"]


class StreamPeers(Protocol):
    """The lead's calls to the other channels of its topic."""

    async def part(self, channel: int, request: StreamPart) -> None:
        """Serve the part at ``channel``; raises raytopic errors only."""


class StreamSteps:
    """A stream's steps at this channel (see the module docstring).

    Args:
        channel: This channel's number.
        channels: How many channels the topic has.
        logs: The channel's offset logs.
        readers: The channel's readers (the group's cursor: its owner, its commit).
        state: The channel's durable state (the ``streams`` section).
        peers: The calls to the other channels.
    """

    def __init__(
        self,
        channel: int,
        channels: int,
        logs: StreamLogs,
        readers: Readers,
        state: ChannelState,
        peers: StreamPeers,
    ) -> None:
        self._channel = channel
        self._others = [other for other in range(channels) if other != channel]
        self._logs = logs
        self._readers = readers
        self._state = state
        self._peers = peers

    def grant(self, request: GrantStream) -> StreamLogState:
        """The coordinator gives the group to a stream: its lease owns the group's
        channel here (an older stream's or a member's no longer does). Returns where
        the group's stream stands here.

        Raises:
            GroupNotFoundError: no such group.
            GroupModeError: a shared group.
        """
        cursor = self._readers.owned_group(request.group)
        self._readers.grant(request.group, request.lease)
        record = self._logs.grant(request.group, request.lease)
        self._state.touch("streams", request.group)
        return StreamLogState(record, cursor.committed)

    def serve(self, request: StreamRequest) -> None:
        """This channel's part of a step (in the request's unit of work: answered once
        the record, and the cursor it moved, are durable).

        Raises:
            NotOwnerError: the request's lease does not own the group here.
            GroupNotFoundError, GroupModeError: no such owned group.
            InvalidArgumentError: a batch older than the last one recorded here.
        """
        group = request.group
        cursor = self._readers.owned_group(group)
        match request:
            case RecordMicroBatch():
                self._logs.record(request, cursor.owner)
            case CommitMicroBatch():
                through = self._logs.commit(request, cursor.owner)
                if through is not None:
                    self._readers.advance(group, through)
        self._state.touch("streams", group)

    async def lead(self, request: StreamRequest) -> None:
        """Serve ``request`` at every channel: this one's part (in the request's unit
        of work), then every other's, all at once; returns once each is done.

        Raises:
            The first refusal, as itself (this channel's first, then in channel
            order): NotOwnerError when the stream no longer holds the group. The
            other parts may have been served (each is idempotent, and a new stream
            finishes a commit).
        """
        self.serve(request)
        part = StreamPart(request)
        parts = [self._peers.part(other, part) for other in self._others]
        for outcome in await asyncio.gather(*parts, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome

    def mark_streams(self, cursors: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Every group's cursor as ``ReadGroupCursors`` answers it: a group whose owner
        here is its stream's lease says so (``stream``), so a restarted coordinator
        knows the stream from a member."""
        for group, cursor in cursors.items():
            if self._logs.stream_of(group, cursor.get("owner")) is not None:
                cursor["stream"] = True
        return cursors


class RayStreamPeers:
    """``StreamPeers`` through Ray: the sibling channels' ``request`` entry.

    Args:
        config: The topic's configuration (its channels are found by name).
    """

    def __init__(self, config: TopicConfig) -> None:
        self._config = config

    async def part(self, channel: int, request: StreamPart) -> None:
        config = self._config
        try:
            actor = channel_actor(config.namespace, config.name, config.topic_id, channel)
            await actor.request.remote(pack_request(request))
        except ray.exceptions.RayTaskError as wrapped:
            cause = wrapped.cause
            if isinstance(cause, TopicError):
                raise cause from wrapped
            raise TopicError(
                f"channel {channel}'s part of a stream's step failed: {cause!r}"
            ) from wrapped
        except ray.exceptions.ActorDiedError as error:
            raise TopicNotFoundError(f"topic {config.name!r} was destroyed") from error
        except ray.exceptions.RayError as error:
            raise TopicError(
                f"channel {channel}'s part of a stream's step failed: {error}"
            ) from error
