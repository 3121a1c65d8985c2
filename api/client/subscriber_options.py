"""A subscriber's options, checked once: what ``Topic.subscriber`` was given.

:meth:`SubscriberOptions.check` reads the arguments of ``Topic.subscriber`` (the
same as ``Subscriber``'s), raises the typed error a bad one deserves, and
returns one frozen record. The subscriber's parts are built from it (its
membership, its receives): no option is passed on one by one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raytopic.core.config import (
    OnPoison,
    OnPoisonName,
    Start,
    StartName,
    check_bool,
    check_name,
    check_positive_int,
    check_timeout,
)
from raytopic.core.errors import GroupModeError, InvalidArgumentError, InvalidTypeError
from raytopic.core.protocol import ReaderSpec
from raytopic.core.records import OwnershipChange
from raytopic.core.resequencer import Resequence
from raytopic.core.shared_group import GroupModeName, SharedGroup, check_mode
from raytopic.core.user_functions import pickle_function

__all__ = ["SubscriberOptions"]


@dataclass(frozen=True, slots=True)
class SubscriberOptions:
    """A subscriber's options, checked (build it with :meth:`check`).

    A copy of the subscriber in another process holds :meth:`for_copy`: the
    listener and a shared group's definition act only where it was made.
    """

    group: str | None
    """The group's name; None for an anonymous subscriber."""
    mode: str
    """``"owned"`` or ``"shared"`` (anonymous subscribers are ``"owned"``)."""
    spec: ReaderSpec
    """What its reader registers with at every channel (start, filter, converter,
    complete_on_empty, window, resequence, poison handling)."""
    timeout: float
    """Seconds a member may go without a heartbeat before its group drops it."""
    cooperative: bool = False
    """An owned group's member keeps a channel its group moves away until it
    releases it (see ``Subscriber.release``)."""
    listener: Callable[[OwnershipChange], None] | None = None
    """``on_ownership_change``: called with each change of the channels owned."""
    definition: SharedGroup | None = None
    """A shared group's definition, used if the group does not exist yet."""
    create_group: bool = True
    """Make the group if it does not exist (False: GroupNotFoundError instead)."""

    @classmethod
    def check(
        cls,
        *,
        group: str | SharedGroup | None = None,
        start: Start | StartName | None = None,
        filter: Callable[[Any], bool] | None = None,
        converter: Callable[[Any], Any] | None = None,
        complete_on_empty: bool = False,
        window: int | None = None,
        timeout: float = 30.0,
        on_ownership_change: Callable[[OwnershipChange], None] | None = None,
        resequence: Resequence | None = None,
        mode: GroupModeName | None = None,
        on_poison: OnPoison | OnPoisonName = "raise",
        cooperative: bool = False,
        create_group: bool = True,
    ) -> SubscriberOptions:
        """Check a new subscriber's arguments (see ``Subscriber``).

        Returns:
            The checked options; functions given are cloudpickled into the spec.

        Raises:
            InvalidArgumentError: a bad value, or a combination the mode refuses.
            InvalidTypeError: an argument of the wrong type, or a function that
                cannot be pickled.
            GroupModeError: a ``SharedGroup`` joined with ``mode="owned"``.
        """
        check_bool(cooperative, "cooperative")
        check_bool(create_group, "create_group")
        definition = group if isinstance(group, SharedGroup) else None
        name = definition.name if definition is not None else group
        name = None if name is None else check_name(name, "group")
        if mode is None:
            mode = "shared" if definition is not None else "owned"
        mode = check_mode(mode)
        if definition is not None and mode != "shared":
            raise GroupModeError("a SharedGroup is joined with mode='shared'")
        if mode == "shared":
            if name is None:
                raise InvalidArgumentError("mode='shared' needs a group")
            if resequence is not None:
                raise InvalidArgumentError("a shared group's member cannot resequence")
            if type(window) is int and window < 0:
                window = None  # the group's (or the topic's) default
        if not create_group and name is None:
            raise InvalidArgumentError("create_group=False goes with a group to join")
        start_latest = _start_latest(start, name)
        for what, function in (
            ("filter", filter),
            ("converter", converter),
            ("on_ownership_change", on_ownership_change),
        ):
            if function is not None and not callable(function):
                raise InvalidTypeError(f"{what} must be callable, got {type(function).__name__}")
        if window is not None:
            check_positive_int(window, "window")
        if resequence is not None and not isinstance(resequence, Resequence):
            raise InvalidTypeError(
                f"resequence must be a raytopic.Resequence, got {type(resequence).__name__}"
            )
        if not isinstance(complete_on_empty, bool):
            raise InvalidTypeError("complete_on_empty must be a bool")
        checked_timeout = check_timeout(timeout, "timeout", allow_none=False)
        spec = ReaderSpec(
            name,
            start_latest,
            pickle_function(filter, "filter") if filter is not None else None,
            pickle_function(converter, "converter") if converter is not None else None,
            complete_on_empty,
            window,
            pickle_function(resequence, "resequence") if resequence is not None else None,
            skip_poison=OnPoison.parse(on_poison) is OnPoison.SKIP,
        )
        return cls(
            group=name,
            mode=mode,
            spec=spec,
            timeout=checked_timeout,
            cooperative=cooperative,
            listener=on_ownership_change,
            definition=definition,
            create_group=create_group,
        )

    def joined(self, spec: ReaderSpec) -> SubscriberOptions:
        """These options with the spec its group chose (a shared group's window)."""
        return dataclasses.replace(self, spec=spec)

    def for_copy(self) -> SubscriberOptions:
        """What a copy in another process holds: no listener, no definition."""
        return dataclasses.replace(self, listener=None, definition=None)


def _start_latest(start: str | None, group: str | None) -> bool:
    if start is None:
        return group is None  # anonymous: new messages; a new group: from the head
    return Start.parse(start) is Start.LATEST
