"""A subscriber's options, written once and checked once.

:class:`SubscriberArgs` names, types and documents the options ``Topic.subscriber``
(and ``Subscriber``) take, as ``**options: Unpack[SubscriberArgs]``: a user's type
checker checks each one by name, and the docs list them (griffe's
``unpack_typeddict`` extension). :meth:`SubscriberOptions.check` reads them, with
their defaults, raises the typed error a bad one deserves, and returns one frozen
record. The subscriber's parts are built from it (its membership, its receives):
no option is passed on one by one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

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

__all__ = ["SubscriberArgs", "SubscriberOptions"]


class SubscriberArgs(TypedDict, total=False):
    """A new subscriber's options (``Topic.subscriber``), each optional."""

    group: str | SharedGroup | None
    """A group's name, or a ``SharedGroup`` (its definition is used if the group does
    not exist yet); None (the default): an anonymous subscriber."""
    start: Start | StartName | None
    """``"earliest"`` or ``"latest"``; None (the default): latest for an anonymous
    subscriber, earliest for a new group."""
    filter: Callable[[Any], bool] | None
    """``value -> bool``, run in the channels: only matching elements are delivered."""
    converter: Callable[[Any], Any] | None
    """``value -> value``, run in the channels on what is delivered."""
    complete_on_empty: bool
    """A receive with nothing to deliver completes at once (None, or []), and
    iteration ends (default False)."""
    window: int | None
    """Most received but uncommitted (shared: unacknowledged) elements; in a shared
    group None or negative means the group's (default None)."""
    timeout: float
    """Seconds a member may go without a heartbeat before its group drops it (> 0,
    at most a year; default 30)."""
    on_ownership_change: Callable[[OwnershipChange], None] | None
    """Called with each change of the channels owned (an ``OwnershipChange``)."""
    resequence: Resequence | None
    """Release elements in the order of a sequence they carry (not in a shared
    group)."""
    mode: GroupModeName | None
    """``"owned"`` (the default) or ``"shared"`` (the default with a ``SharedGroup``):
    any member receives any element and acknowledges it alone (``Element.ack``)."""
    on_poison: OnPoison | OnPoisonName
    """``"raise"`` (the default): an element that cannot be decoded where it is
    delivered, or on which the filter or converter raises, stops the reader before
    it and raises ``PoisonElementError`` once (what came before it is delivered;
    ``seek`` past it to go on); ``"skip"``: such an element is logged, counted
    (``raytopic_poison_skipped``) and passed over. A shared group's member
    negatively acknowledges it either way."""
    cooperative: bool
    """An owned group's member keeps a channel its group moves to another member (a
    join) until it calls ``Subscriber.release`` (after committing what it handed
    out; ``Subscriber.revoking`` names such channels) or its ``timeout`` passes
    since: the new owner starts after those commits, so no element reaches two
    members' hands (Kafka's cooperative rebalancing with a commit on revoke).
    Default False."""
    create_group: bool
    """False: join only a group that exists (``GroupNotFoundError`` otherwise), so a
    misspelt name never makes a durable group; True (the default): a group that does
    not exist is made."""


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
    def check(cls, **given: Unpack[SubscriberArgs]) -> SubscriberOptions:
        """Check a new subscriber's options (see :class:`SubscriberArgs`).

        Returns:
            The checked options; functions given are cloudpickled into the spec.

        Raises:
            InvalidArgumentError: a bad value, or a combination the mode refuses.
            InvalidTypeError: an argument of the wrong type, or a function that
                cannot be pickled.
            GroupModeError: a ``SharedGroup`` joined with ``mode="owned"``.
            TypeError: an option ``SubscriberArgs`` does not name (as Python
                refuses an unexpected keyword argument).
        """
        unknown = sorted(given.keys() - SubscriberArgs.__optional_keys__)
        if unknown:
            raise TypeError(f"subscriber() got an unexpected keyword argument {unknown[0]!r}")
        group = given.get("group")
        start = given.get("start")
        filter = given.get("filter")
        converter = given.get("converter")
        complete_on_empty = given.get("complete_on_empty", False)
        window = given.get("window")
        timeout = given.get("timeout", 30.0)
        on_ownership_change = given.get("on_ownership_change")
        resequence = given.get("resequence")
        mode = given.get("mode")
        on_poison = given.get("on_poison", "raise")
        cooperative = given.get("cooperative", False)
        create_group = given.get("create_group", True)
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
