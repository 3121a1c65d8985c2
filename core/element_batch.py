"""ElementBatch: the elements one receive brought, committed or acknowledged as one.

``receive_batch`` and ``iter_batches`` hand out an :class:`ElementBatch`: a
``list`` of Elements (so everything a list does still works: ``len``,
indexing, slicing, ``+``, ``==``), plus committing or acknowledging the whole batch
in one call per channel: ``commit()`` for a channel-owned group's member (each
channel's last position, which commits every earlier one), ``ack()`` /
``nack()`` for a shared group's. ``values`` is every value, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from raytopic.core.commit_guards import before_commit
from raytopic.core.config import check_items
from raytopic.core.errors import GroupModeError, InvalidTypeError
from raytopic.core.records import Element, _resolve

if TYPE_CHECKING:
    import ray

    from raytopic.core.protocol.channel import Commit
    from raytopic.core.records import AckStatus, CommitResult

__all__ = ["ElementBatch"]


class _Carrier(Protocol):
    """The iteration that handed a batch out: its commit may carry the iteration's
    next receive at the batch's channel (see ``Receives.commit_carrying``)."""

    def commit_carrying(self, commit: Commit, channel: int) -> ray.ObjectRef[Any] | None: ...


class ElementBatch(list[Element]):
    """Elements received together, in the order received; a ``list`` of Elements.

    Elements of one channel are in position order. Commit or acknowledge the
    batch in one call per channel: ``commit()`` (a channel-owned group's member), or
    ``ack()`` / ``nack()`` (a shared group's member).

    Example:
        >>> for batch in subscriber.iter_batches(500):
        ...     handle([element.value for element in batch])
        ...     batch.commit()
    """

    __slots__ = ("_carrier",)

    def __init__(self, elements: Iterable[Element] = ()) -> None:
        """A batch of ``elements``, in order.

        Raises:
            InvalidTypeError: ``elements`` is not an iterable of them (None, a str,
                a dict, ...).
        """
        if type(elements) not in (list, tuple, ElementBatch):  # what receives hand in
            elements = check_items(elements, "elements")
        super().__init__(elements)
        # The iteration that handed it out, weakly (a weakref.ref: None once it is gone).
        self._carrier: Callable[[], _Carrier | None] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # The elements alone: the iteration that handed the batch out stays here.
        return ElementBatch, (list(self),)

    @property
    def values(self) -> list[Any]:
        """Every element's value, in order."""
        return [element.value for element in self]

    def last_per_channel(self) -> dict[int, Element]:
        """Each channel's last element in the batch (the one a commit names)."""
        last: dict[int, Element] = {}
        for element in self:
            if not isinstance(element, Element):
                raise InvalidTypeError(f"expected Elements, got {type(element).__name__}")
            held = last.get(element.channel)
            if held is None or element.sequence > held.sequence:
                last[element.channel] = element
        return dict(sorted(last.items()))

    def commit(self) -> dict[int, CommitResult]:
        """Commit every element of the batch: each channel's last position (and so
        every earlier one), one call per channel.

        Returns:
            Each channel's CommitResult (``NOT_OWNER`` where the member lost it).

        Raises:
            GroupModeError: the elements were received in a shared group (ack them).
            TopicNotFoundError: their topic was destroyed.
        """
        last = self._last_owned()
        carrier = self._carrier() if self._carrier is not None else None
        if carrier is not None and len(last) == 1 and not self._handed_upto():
            # One channel's batch from an iteration: the commit may carry its next receive.
            ((channel, element),) = last.items()
            before_commit(element._origin.reader)
            ref = carrier.commit_carrying(element._commit_request(None), channel)
            if ref is not None:
                result = _resolve(ref)
                if isinstance(result, Exception):  # the commit's typed error
                    raise result
                return {channel: result}
        return {channel: _resolve(ref) for channel, ref in self._send_commits(last).items()}

    def commit_async(self) -> dict[int, ray.ObjectRef[CommitResult]]:
        """``commit`` without waiting.

        Returns:
            Each channel's ``ObjectRef[CommitResult]``.

        Raises:
            GroupModeError: the elements were received in a shared group.
        """
        return self._send_commits(self._last_owned())

    def _last_owned(self) -> dict[int, Element]:
        """Each channel's last element (see ``last_per_channel``), none a shared group's.

        Raises:
            GroupModeError: an element was received in a shared group.
        """
        last = self.last_per_channel()
        for element in last.values():
            if element._origin.shared:
                raise GroupModeError(
                    f"element {element.position} was received in a shared group: ack it instead"
                )
        return last

    def _send_commits(self, last: dict[int, Element]) -> dict[int, ray.ObjectRef[CommitResult]]:
        """Commit each channel's ``last`` element, one call per channel."""
        marks = self._handed_upto()
        return {
            channel: element._send_commit(marks.get(channel)) for channel, element in last.items()
        }

    def _handed_upto(self) -> dict[int, int]:
        """Per channel, how far a commit may go for the whole batch: the highest
        hand-over mark of its elements there (marks grow in the order elements are
        handed over); only resequenced elements have one (see ``Element.commit``)."""
        marks: dict[int, int] = {}
        for element in self:
            mark = element._origin.handed_upto
            if mark is not None and mark > marks.get(element.channel, mark - 1):
                marks[element.channel] = mark
        return marks

    def ack(self) -> list[AckStatus]:
        """Acknowledge every element alone (see ``Element.ack``), one call per channel.

        Returns:
            Each element's status, in order: ACKED, or REJECTED for one this
            member no longer holds under that delivery (it stays the group's),
            NOT_OWNER for one of a channel the member lost.

        Raises:
            GroupModeError: elements of a shared group and of an owned one at once.
        """
        return _resolve(self._send("Ack"))

    def nack(self, delay: float | None = None) -> list[AckStatus]:
        """Give every element back to its shared group, to be delivered again.

        Args:
            delay: Seconds before they may be delivered again (None: at once;
                at most a year).

        Returns:
            Each element's status, in order: NACKED, or REJECTED (see ``ack``).

        Raises:
            InvalidArgumentError: a negative delay, or one over a year.
            GroupModeError: an element was not received in a shared group.
        """
        from raytopic.core.acks import check_delay

        return _resolve(self._send("Nack", delay=check_delay(delay)))

    def _send(self, kind: str, **options: Any) -> ray.ObjectRef[list[AckStatus]]:
        # Imported here: acks imports records, which this module builds on.
        from raytopic.core import acks

        elements = list(self)
        for element in elements:
            if not isinstance(element, Element):
                raise InvalidTypeError(f"expected Elements, got {type(element).__name__}")
        return acks.send_many(elements, getattr(acks, kind), **options)
