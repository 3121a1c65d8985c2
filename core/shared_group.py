"""A shared group's definition (``rt.SharedGroup``), validated on the caller's side.

A *shared* group hands any element of any channel to any of its members and
takes acknowledgements element by element (Universal Messaging's shared
durables, Pulsar's Shared subscriptions, Kafka share groups). Its settings are
fixed when the group is created; every channel keeps them with the group's
state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from raytopic.core.config import check_name, check_positive_int, check_timeout
from raytopic.core.errors import InvalidArgumentError, InvalidTypeError
from raytopic.core.user_functions import load_pickled, pickle_function

__all__ = ["GROUP_MODES", "GroupModeName", "SharedGroup", "check_dead_letter", "check_mode"]

GroupModeName = Literal["owned", "shared"]
"""A group's ``mode`` by name."""

GROUP_MODES: tuple[GroupModeName, ...] = ("owned", "shared")
"""``owned``: each channel is read by one member at a time, committed cumulatively.
``shared``: any member takes any element, acknowledged one by one."""

ORDERINGS = (None, "key")


def check_mode(mode: object) -> GroupModeName:
    """A group mode, or InvalidArgumentError naming the choices."""
    if mode not in GROUP_MODES:
        raise InvalidArgumentError(f"mode must be one of {GROUP_MODES}, got {mode!r}")
    return mode


def check_dead_letter(max_deliveries: object, dead_letter: object) -> None:
    """Check a group's ``max_deliveries`` (a positive int, or None) and ``dead_letter``
    (a topic name, or None): a limit needs a dead-letter topic (without one,
    nothing is dropped).

    Raises:
        InvalidTypeError: either is of the wrong type.
        InvalidArgumentError: ``max_deliveries`` below 1, a bad topic name, or
            ``max_deliveries`` without ``dead_letter``.
    """
    if max_deliveries is not None:
        check_positive_int(max_deliveries, "max_deliveries")
        if dead_letter is None:
            raise InvalidArgumentError("max_deliveries needs a dead_letter topic")
    if dead_letter is not None:
        check_name(dead_letter, "dead_letter topic name")


@dataclass(frozen=True, slots=True)
class SharedGroup:
    """The definition of a shared group, given when it is created.

    Pass it to ``create_topic(groups=[...])`` beside plain group names, or to
    ``Topic.create_group``. Joining a shared group that does not exist
    (``topic.subscriber(group="g", mode="shared")``) creates it with these
    defaults (and the joining member's filter).

    **Delivery**: at least once. An element goes to one member at a time; if
    that member nacks it, closes, dies or holds it past ``ack_timeout``, it
    goes to another one with ``delivery_count`` one higher.

    Args:
        name: The group's name.
        max_deliveries: Deliveries after which an element that is still not
            acknowledged goes to ``dead_letter`` (None: no limit).
        dead_letter: Name of the topic that receives elements past
            ``max_deliveries`` (created, with one retained channel, if missing).
            Required when ``max_deliveries`` is set.
        ack_timeout: Seconds a member holds an element before it is delivered
            again (> 0, at most a year; the holder may extend it:
            ``Subscriber.extend_lease``).
        window: Default most unacknowledged elements per member (members may
            ask for another); None: the topic's ``default_window``.
        ordering: None, or ``"key"``: elements of one publish key go to one
            member at a time, so per-key order holds while keys spread over
            the members (Pulsar's Key_Shared).
        filter: ``value -> bool``: the group takes only matching elements (the
            others are not kept for it). Part of the group's definition: a
            member that brings a different filter is refused.

    Example:
        >>> rt.create_topic("jobs", groups=[rt.SharedGroup("workers", max_deliveries=5,
        ...                                                dead_letter="jobs-dead")])
    """

    name: str
    max_deliveries: int | None = None
    dead_letter: str | None = None
    ack_timeout: float = 30.0
    window: int | None = None
    ordering: str | None = None
    filter: bytes | None = None
    """The filter, cloudpickled (compared byte for byte with a member's)."""

    def __init__(
        self,
        name: str,
        *,
        max_deliveries: int | None = None,
        dead_letter: str | None = None,
        ack_timeout: float = 30.0,
        window: int | None = None,
        ordering: str | None = None,
        filter: Callable[[Any], bool] | bytes | None = None,
    ) -> None:
        set_field = object.__setattr__
        set_field(self, "name", check_name(name, "group name"))
        check_dead_letter(max_deliveries, dead_letter)
        set_field(self, "max_deliveries", max_deliveries)
        set_field(self, "dead_letter", dead_letter)
        set_field(self, "ack_timeout", check_timeout(ack_timeout, "ack_timeout", allow_none=False))
        if window is not None:
            check_positive_int(window, "window")
        set_field(self, "window", window)
        if ordering not in ORDERINGS:
            raise InvalidArgumentError(f"ordering must be None or 'key', got {ordering!r}")
        set_field(self, "ordering", ordering)
        set_field(self, "filter", pickled_filter(filter))

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (
                self.name,
                self.max_deliveries,
                self.dead_letter,
                self.ack_timeout,
                self.window,
                self.ordering,
                self.filter,
            ),
        )

    def load_filter(self) -> Callable[[Any], bool] | None:
        """The filter as a function (in the channel, where it runs).

        Returns:
            The unpickled filter, or None if the group has none.

        Raises:
            InvalidArgumentError: the filter cannot be loaded in this process.
        """
        if self.filter is None:
            return None
        return load_pickled(self.filter, f"the filter of shared group {self.name!r}")


def pickled_filter(filter: Callable[[Any], bool] | bytes | None) -> bytes | None:
    """A filter as the group and its members carry it (cloudpickled)."""
    if filter is None or isinstance(filter, bytes):
        return filter
    if not callable(filter):
        raise InvalidTypeError(f"filter must be callable, got {type(filter).__name__}")
    return pickle_function(filter, "filter")


def _rebuild(*fields: Any) -> SharedGroup:
    name, max_deliveries, dead_letter, ack_timeout, window, ordering, filter = fields
    return SharedGroup(
        name,
        max_deliveries=max_deliveries,
        dead_letter=dead_letter,
        ack_timeout=ack_timeout,
        window=window,
        ordering=ordering,
        filter=filter,
    )
