"""Dead letters: a shared group's elements past ``max_deliveries`` go to its
dead-letter topic. The only part of a channel that calls another topic; it only
appends to it: the topic is made by the group's coordinator (the control plane),
which a channel asks to make it again if it is gone.

Exactly once: the batch and its version are on disk before the append (see
``SharedCursor.sending``), and the append is an ``append_once`` of that
version, so a channel that restarts mid-send sends the same batch under the
same version and the dead-letter channel keeps one copy.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import ray

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.shared_cursor import SharedCursor
from raytopic.core.dead_letters import dead_letter, dead_letter_append, dead_letter_writer
from raytopic.core.errors import TopicNotFoundError
from raytopic.core.naming import coordinator_actor_name
from raytopic.core.payloads import PickledValues
from raytopic.core.protocol import AwaitTopic, EnsureDeadLetterTopic
from raytopic.core.records import Position
from raytopic.core.shared_group import SharedGroup

logger = logging.getLogger(__name__)

__all__ = ["DeadLetters"]

BATCH = 1000
"""Elements one dead-letter append carries at most."""


class DeadLetters:
    """Sends one channel's dead letters to the dead-letter topics' channels.

    Args:
        context: The channel's identity.
        log: The channel's log (the dead elements' values).
        save: Makes the channel's state durable (awaited before an append).
    """

    def __init__(
        self, context: ChannelContext, log: ChannelLog, save: Callable[[], Awaitable[None]]
    ) -> None:
        self._context = context
        self._log = log
        self._save = save
        self._channels: dict[str, Any] = {}  # dead-letter topic -> the channel appended to

    async def send(self, group: str, cursor: SharedCursor, spec: SharedGroup) -> None:
        """Append the group's dead elements to its dead-letter topic (from the
        channel's event loop, by actor call: a Publisher's threads cannot run
        there).

        Raises:
            TopicError: the dead-letter topic refused them (tried again later).
        """
        assert spec.dead_letter is not None
        version, sequences = cursor.dead_batch(BATCH)
        await self._save()
        letters = self._letters(cursor, sequences)
        if letters:
            writer = dead_letter_writer(
                self._context.config.topic_id, cursor.life, self._context.channel
            )
            request = dead_letter_append(writer, version)
            values = PickledValues.from_values(letters)
            try:
                target = await self._channel(group, spec)
                ack = await target.request.remote(request, values)
            except ray.exceptions.ActorDiedError:
                # The dead-letter topic was destroyed (maybe made again under its
                # name): find or make it anew, and send the same batch under the
                # same version.
                self._channels.pop(spec.dead_letter, None)
                target = await self._channel(group, spec)
                ack = await target.request.remote(request, values)
            if ack.error is not None:
                cursor.dead_letter_failed()
                raise ack.error
        cursor.dead_lettered_now(sequences)
        logger.info(
            "channel %d: %d elements of %s to dead-letter topic %s",
            self._context.channel,
            len(letters),
            group,
            spec.dead_letter,
        )

    def _letters(self, cursor: SharedCursor, sequences: list[int]) -> list[dict[str, Any]]:
        """The dead elements still here, each with why and where it died."""
        config = self._context.config
        ring = self._log.ring
        letters = []
        for sequence in sequences:
            if sequence < ring.head or sequence not in cursor.dead:
                continue  # removed meanwhile (purge, overwrite): nothing to send
            deliveries, reason = cursor.dead[sequence]
            try:
                value = ring.get(sequence).payload.decode()[0]
            except Exception as error:  # its class does not load here
                value = f"<not decodable in the channel: {error}>"
            position = Position(config.topic_id, self._context.channel, sequence)
            letters.append(
                dead_letter(
                    value,
                    reason=reason,
                    deliveries=deliveries,
                    topic=config.name,
                    position=position,
                )
            )
        return letters

    async def _channel(self, group: str, spec: SharedGroup) -> Any:
        """The channel of the group's dead-letter topic this channel appends to. A
        topic missing (destroyed since the group was made) is made again by this
        channel's coordinator.

        Raises:
            TopicNotFoundError: it is still missing (tried again later).
        """
        topic = spec.dead_letter
        assert topic is not None
        handle = self._channels.get(topic)
        if handle is None:
            channels = await self._channels_of(topic)
            if channels is None:
                config = self._context.config
                own = ray.get_actor(coordinator_actor_name(config.name), namespace=config.namespace)
                await own.request.remote(EnsureDeadLetterTopic(group))
                channels = await self._channels_of(topic)
            if channels is None:
                raise TopicNotFoundError(f"dead-letter topic {topic!r} is missing")
            handle = self._channels[topic] = channels[self._context.channel % len(channels)]
        return handle

    async def _channels_of(self, topic: str) -> tuple[Any, ...] | None:
        """The channel actors of a topic in this channel's namespace (None: none such,
        or it is being destroyed)."""
        try:
            coordinator = ray.get_actor(
                coordinator_actor_name(topic), namespace=self._context.config.namespace
            )
            info = await coordinator.request.remote(AwaitTopic())
        except (ValueError, ray.exceptions.RayActorError):
            return None
        return tuple(info.channels)
