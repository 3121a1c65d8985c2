"""What a dead letter is, and how it is appended to its dead-letter topic. No Ray.

Two senders share it: a shared group's channel (``raytopic.actors.dead_letters``:
elements past the group's ``max_deliveries``) and an autoscaled owned group's
member (``raytopic.autoscale.scaled_member``: a batch its handler failed ``max_deliveries``
times). Both append with ``append_once`` under a writer of their own, so a
sender that dies after the append and sends the same letters again under the
same version leaves one copy.
"""

from __future__ import annotations

from typing import Any

from raytopic.core.config import TopicConfig
from raytopic.core.protocol import AppendOnce, pack_request
from raytopic.core.records import Position

__all__ = [
    "APPEND_TIMEOUT",
    "dead_letter",
    "dead_letter_append",
    "dead_letter_topic_config",
    "dead_letter_writer",
]

APPEND_TIMEOUT = 5.0
"""Seconds a dead-letter append may wait for room; then it is tried again later."""

WRITER_PREFIX = "once:dead:"
"""Dead-letter writers are ``append_once`` writers (``publisher_table.ONCE_WRITER_PREFIX``)."""


def dead_letter(
    value: Any, *, reason: str, deliveries: int, topic: str, position: Position
) -> dict[str, Any]:
    """One element as its dead-letter topic receives it: the value, why and after how
    many deliveries it died, and where it was."""
    return {
        "value": value,
        "reason": reason,
        "deliveries": deliveries,
        "topic": topic,
        "channel": position.channel,
        "position": str(position),
    }


def dead_letter_writer(topic_id: str, sender: str, channel: int) -> str:
    """The ``append_once`` writer of one channel's dead letters, for one sender: a
    shared group's cursor life, or ``group=<name>`` for an owned group's members
    (``=`` is in no name, so the two never meet)."""
    return f"{WRITER_PREFIX}{topic_id}:{sender}:{channel}"


def dead_letter_append(writer: str, version: int) -> bytes:
    """The packed request appending a writer's ``version`` of dead letters once."""
    return pack_request(
        AppendOnce(writer_id=writer, version=version, overflow="block", timeout=APPEND_TIMEOUT)
    )


def dead_letter_topic_config(name: str, namespace: str) -> TopicConfig:
    """A dead-letter topic as it is made when missing: one channel, its elements
    retained until someone reads them."""
    return TopicConfig.create(name, channels=1, retain=True, namespace=namespace)
