"""A reader's acknowledgements (a shared group member's above all), a part the
Subscriber holds.

:class:`Acknowledgements` sends ``ack``, ``nack`` and the ack-deadline
extension (the public ``extend_lease``) for the elements a subscriber
received, one call per channel each. It needs the reader's id, its topic's id
and one question to its membership (:class:`AcknowledgingRole`); the
subscriber checks that it is open and waits for the replies.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from raytopic.core.acks import (
    Ack,
    ExtendHold,
    Nack,
    check_delay,
    check_hold_seconds,
    check_own,
    send_many,
)

if TYPE_CHECKING:
    import ray

    from raytopic.core.records import Element

__all__ = ["Acknowledgements", "AcknowledgingRole"]


class AcknowledgingRole(Protocol):
    """What acknowledging asks of the subscriber's membership."""

    def check_acknowledging(self) -> None:
        """Raise GroupModeError unless the member is a shared group's."""
        ...


class Acknowledgements:
    """Acknowledgements of the elements one reader received in its shared group.

    Each method checks the elements first (nothing is sent when one is not this
    reader's) and returns the ObjectRef of their statuses, in order.

    Args:
        reader_id: The subscriber's id, as the channels know its reader.
        topic_id: Its topic's id.
        role: Its membership, asked whether it may acknowledge.
    """

    def __init__(self, reader_id: str, topic_id: str, role: AcknowledgingRole) -> None:
        self._reader_id = reader_id
        self._topic_id = topic_id
        self._role = role

    def ack(self, elements: Iterable[Element]) -> ray.ObjectRef[Any]:
        """Acknowledge ``elements``: ACKED, or REJECTED for one no longer held (or,
        an owned group's, received before a reset), NOT_OWNER for one of a channel
        an owned group's member lost. Any reader acks its own elements (an owned
        one marks each done: see ``Element.ack``)."""
        return send_many(check_own(elements, self._reader_id, self._topic_id, shared=False), Ack)

    def nack(self, elements: Iterable[Element], delay: float | None) -> ray.ObjectRef[Any]:
        """Give ``elements`` back to the group, to be delivered again after ``delay``."""
        return send_many(self._own(elements), Nack, delay=check_delay(delay))

    def extend_hold(self, elements: Iterable[Element], seconds: float | None) -> ray.ObjectRef[Any]:
        """Move the ack deadline of held ``elements`` to ``seconds`` from now."""
        return send_many(self._own(elements), ExtendHold, seconds=check_hold_seconds(seconds))

    def _own(self, elements: Iterable[Element]) -> list[Element]:
        self._role.check_acknowledging()
        return check_own(elements, self._reader_id, self._topic_id)
