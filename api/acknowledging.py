"""A shared group member's acknowledgements: ``Subscriber.ack``, ``nack`` and
``extend_lease`` (and their async forms), apart from the rest of the handle."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from raytopic.core.acks import (
    Ack,
    ExtendLease,
    Nack,
    check_delay,
    check_lease,
    check_own,
    send_many,
)

if TYPE_CHECKING:
    import ray

    from raytopic.core.records import AckStatus, Element

__all__ = ["Acknowledging"]


class Acknowledging:
    """The acknowledging methods of a Subscriber (one call per channel each).

    The Subscriber supplies ``_check_open``, ``_call``, ``_member`` (its place
    in the group), ``_id`` and ``_topic``.
    """

    _member: Any
    _id: str
    _topic: Any

    def _check_open(self) -> None:
        raise NotImplementedError

    def _call(self, ref: ray.ObjectRef[Any]) -> Any:
        raise NotImplementedError

    def ack(self, elements: Iterable[Element]) -> list[AckStatus]:
        """Acknowledge elements this member received in its shared group.

        One call per channel.

        Args:
            elements: Elements this subscriber received.

        Returns:
            Each element's status, in order: ACKED, or REJECTED when no longer
            held by this member under that delivery (nothing changed for it).

        Raises:
            ForeignElementError: an element this subscriber did not receive in its
                shared group (nothing is acknowledged).
            InvalidTypeError: ``elements`` is not an iterable of Elements (None, a
                str, a dict, ...), or holds something else.
            GroupModeError: not a shared group's member (it commits instead).
            SubscriberClosedError: the subscriber is closed.
        """
        return self._call(self.ack_async(elements))

    def ack_async(self, elements: Iterable[Element]) -> ray.ObjectRef[list[AckStatus]]:
        """``ack`` without waiting.

        Args:
            elements: Elements this subscriber received.

        Returns:
            An ObjectRef of each element's status, in order.

        Raises:
            ForeignElementError, GroupModeError, SubscriberClosedError: as ``ack``.
        """
        return send_many(self._own(elements), Ack)

    def nack(self, elements: Iterable[Element], delay: float | None = None) -> list[AckStatus]:
        """Give elements back to the group, to be delivered again (to any member).

        Past the group's ``max_deliveries`` they go to its dead-letter topic.

        Args:
            elements: Elements this subscriber received.
            delay: Seconds before they may be delivered again (None: at once;
                at most a year).

        Returns:
            Each element's status, in order: NACKED, or REJECTED as in ``ack``.

        Raises:
            InvalidArgumentError: a negative delay, or one over a year.
            ForeignElementError, GroupModeError, SubscriberClosedError: as ``ack``.
        """
        return self._call(self.nack_async(elements, delay))

    def nack_async(
        self, elements: Iterable[Element], delay: float | None = None
    ) -> ray.ObjectRef[list[AckStatus]]:
        """``nack`` without waiting.

        Args:
            elements: Elements this subscriber received.
            delay: Seconds before they may be delivered again (None: at once;
                at most a year).

        Returns:
            An ObjectRef of each element's status, in order.

        Raises:
            InvalidArgumentError, ForeignElementError, GroupModeError,
            SubscriberClosedError: as ``nack``.
        """
        return send_many(self._own(elements), Nack, delay=check_delay(delay))

    def extend_lease(
        self, elements: Iterable[Element], seconds: float | None = None
    ) -> list[AckStatus]:
        """Keep holding elements a while longer.

        Args:
            elements: Elements this subscriber received.
            seconds: When their ack leases end, from now (> 0 and at most a
                year; None: the group's ``ack_timeout``).

        Returns:
            Each element's status, in order: EXTENDED, or REJECTED for one no
            longer held.

        Raises:
            InvalidArgumentError: ``seconds`` is not above 0, or is over a year.
            ForeignElementError, InvalidTypeError, GroupModeError,
                SubscriberClosedError: as ``ack``.
        """
        return self._call(send_many(self._own(elements), ExtendLease, seconds=check_lease(seconds)))

    def _own(self, elements: Iterable[Element]) -> list[Element]:
        self._check_open()
        self._member.check_acknowledging()
        return check_own(elements, self._id, self._topic.topic_id)
