"""How many members a group should have for its lag: the autoscaler's rule. No Ray.

:class:`ScaleSettings` are ``Topic.autoscale``'s numbers, checked on the
caller's side; :class:`ScaleRule` turns a group's lag per channel into a
desired member count (docs/guides/autoscaling.md):

- desired = ceil(lag / target_lag_per_member), within [min_members, max_members];
- from 0 members, only once the lag reaches ``activation_lag`` (a single stray
  element need not wake a pool when the user says so);
- an owned group never gets more members than channels with lag (a member
  beyond them would own nothing to read); a shared group may have more members
  than channels (any member takes any element);
- up at once; down only after every count desired during ``scale_down_after_s``
  stayed below the current one, and then to the highest of them (Kubernetes'
  stabilization window): a dip in the backlog does not flap the pool.

:class:`ScaleRule` is the only state the decision needs (the window of recent
counts), so the scaler actor around it is a thin shell. The records an
autoscaler reports (:class:`AutoscalerStats`, :class:`ScaledMember`,
:class:`ScaleEvent`) are here too.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from raytopic.core.config import (
    check_int,
    check_nonnegative_number,
    check_positive_int,
    check_seconds,
)
from raytopic.core.errors import InvalidArgumentError
from raytopic.core.shared_group import check_dead_letter

__all__ = [
    "EVENTS_KEPT",
    "MAX_MEMBERS",
    "AutoscalerStats",
    "HandlerFailure",
    "ScaleDecision",
    "ScaleEvent",
    "ScaleRule",
    "ScaleSettings",
    "ScaledMember",
]

MAX_MEMBERS = 10_000
"""Most members an autoscaler starts (as a topic has at most 10,000 channels)."""

MAX_BATCH = 100_000
"""Most values one handler call gets."""

MAX_POLL = 3600.0
"""Longest ``poll_s``: an hour."""


@dataclass(frozen=True, slots=True)
class ScaleSettings:
    """``Topic.autoscale``'s numbers, checked (build with :meth:`create`)."""

    min_members: int
    """Members kept even with no lag."""
    max_members: int
    """Most members."""
    target_lag_per_member: int
    """Lag one member is meant to carry: desired = ceil(lag / this)."""
    activation_lag: int
    """Lag that wakes a group at 0 members."""
    poll_s: float
    """Seconds between decisions while the lag does not change."""
    scale_down_after_s: float
    """Seconds a lower desired count must hold before members stop."""
    batch_size: int
    """Most values one handler call gets."""
    max_deliveries: int | None = None
    """An owned group's handler calls on an element after which it goes to
    ``dead_letter`` (None: tried until it succeeds)."""
    dead_letter: str | None = None
    """The topic those elements go to."""

    @classmethod
    def create(
        cls,
        *,
        min_members: object = 0,
        max_members: object = 8,
        target_lag_per_member: object = 1000,
        activation_lag: object = 1,
        poll_s: object = 1.0,
        scale_down_after_s: object = 30.0,
        batch_size: object = 100,
        max_deliveries: object = None,
        dead_letter: object = None,
    ) -> ScaleSettings:
        """Check every setting, naming the first bad one.

        Raises:
            InvalidTypeError: a setting of the wrong type.
            InvalidArgumentError: a value out of range, ``min_members`` above
                ``max_members``, or ``max_deliveries`` without ``dead_letter`` or
                the reverse.
        """
        check_dead_letter(max_deliveries, dead_letter)
        if dead_letter is not None and max_deliveries is None:
            raise InvalidArgumentError(
                "dead_letter needs max_deliveries (the failed handler calls after which "
                "a batch goes there)"
            )
        low = check_int(min_members, "min_members", minimum=0, maximum=MAX_MEMBERS)
        high = check_positive_int(max_members, "max_members", maximum=MAX_MEMBERS)
        if low > high:
            raise InvalidArgumentError(f"min_members ({low}) must not exceed max_members ({high})")
        return cls(
            min_members=low,
            max_members=high,
            target_lag_per_member=check_positive_int(
                target_lag_per_member, "target_lag_per_member"
            ),
            activation_lag=check_positive_int(activation_lag, "activation_lag"),
            poll_s=check_seconds(poll_s, "poll_s", maximum=MAX_POLL),  # type: ignore[arg-type]
            scale_down_after_s=check_nonnegative_number(scale_down_after_s, "scale_down_after_s"),
            batch_size=check_positive_int(batch_size, "batch_size", maximum=MAX_BATCH),
            max_deliveries=max_deliveries,  # type: ignore[arg-type]
            dead_letter=dead_letter,  # type: ignore[arg-type]
        )


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """What the rule made of one look at the lag."""

    desired: int
    """The member count to have now."""
    wanted: int
    """The count the lag alone asks for (before the scale-down delay)."""
    lag: int
    """The group's lag over all channels."""
    reason: str
    """Why ``desired`` differs from the current count ("" when it does not)."""
    repeated: bool = False
    """The same change, from the same count, as the last look asked for (members
    still leaving take the room of new ones, so the count has not moved): no news,
    so no new event."""


class ScaleRule:
    """The desired member count of one group, look after look. No Ray.

    Args:
        settings: The autoscaler's settings.
        owned: The group is channel-owned (members capped by channels with lag).
        channel_count: The topic's channels.
    """

    def __init__(self, settings: ScaleSettings, *, owned: bool, channel_count: int) -> None:
        self.settings = settings
        self._owned = owned
        self._channel_count = channel_count
        self._window: deque[tuple[float, int]] = deque()  # (time, wanted) while below current
        self._asked: tuple[int, int] | None = None  # (current, desired) of the last change asked

    def wanted(self, lags: Mapping[int, int], current: int) -> int:
        """The count the lag asks for now, before the scale-down delay."""
        settings = self.settings
        lag = sum(lags.values())
        if current == 0 and lag < settings.activation_lag:
            wanted = 0
        else:
            wanted = math.ceil(lag / settings.target_lag_per_member)
        wanted = min(wanted, settings.max_members)
        if self._owned:
            wanted = min(wanted, sum(1 for lag in lags.values() if lag > 0))
        floor = settings.min_members
        if self._owned:
            floor = min(floor, self._channel_count)  # a member beyond them owns nothing
        return max(wanted, floor)

    def decide(self, lags: Mapping[int, int], current: int, now: float) -> ScaleDecision:
        """The count to have now, given the lag per channel and ``current`` members.

        Args:
            lags: Per channel, the group's lag there (elements not yet committed).
            current: Members the group has now.
            now: A monotonic clock, seconds.
        """
        decision = self._decide(lags, current, now)
        asked = (current, decision.desired) if decision.desired != current else None
        repeated = asked is not None and asked == self._asked
        self._asked = asked
        return replace(decision, repeated=True) if repeated else decision

    def _decide(self, lags: Mapping[int, int], current: int, now: float) -> ScaleDecision:
        lag = sum(lags.values())
        wanted = self.wanted(lags, current)
        if wanted >= current:
            self._window.clear()
            reason = "" if wanted == current else f"lag {lag}"
            if current == 0 and wanted > 0:
                reason = f"lag {lag} >= activation_lag {self.settings.activation_lag}"
            return ScaleDecision(wanted, wanted, lag, reason)
        self._window.append((now, wanted))
        delay = self.settings.scale_down_after_s
        started = self._window[0][0]
        if now - started < delay:
            return ScaleDecision(current, wanted, lag, "")
        desired = max(count for at, count in self._window if now - at <= delay)
        self._window.clear()  # a further step down waits a whole window again
        return ScaleDecision(
            desired, wanted, lag, f"lag {lag}: fewer members wanted for {delay:g} s"
        )


# -- what an autoscaler reports ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScaledMember:
    """One member actor of an autoscaled group."""

    member_id: str
    """Its id in the group (as ``Topic.describe()`` lists members)."""
    pid: int
    """Its process id."""
    node_id: str
    """The Ray node it runs on."""


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    """One change of an autoscaled group's member count (or a member's end)."""

    at: datetime
    """When it happened (UTC)."""
    before: int
    """Members before."""
    after: int
    """Members after (what the scaler asked for; members still starting count)."""
    lag: int
    """The group's lag then."""
    reason: str
    """Why: the lag, the scale-down delay, a member that died, a restart, ``stop()``."""


@dataclass(frozen=True, slots=True)
class AutoscalerStats:
    """``Autoscaler.describe()``: the members, the desired count, the lag, the events."""

    members: tuple[ScaledMember, ...]
    """The members running now (started and joined)."""
    desired: int
    """The member count the rule asks for now."""
    lag: int
    """The group's lag at the last look (elements not yet committed or acknowledged)."""
    events: tuple[ScaleEvent, ...]
    """The latest scale events, oldest first (at most ``EVENTS_KEPT``)."""
    failures: int = 0
    """Handler calls that raised, over every member since the autoscaler started."""
    dead_lettered: int = 0
    """Elements sent to the dead-letter topic (past ``max_deliveries``) since then."""
    last_failure: HandlerFailure | None = None
    """The latest failed handler call (its error), or None."""
    parked: int = 0
    """Member processes started and waiting to join (they hold no channel; see
    ``raytopic.autoscale.scaler_actor``)."""


@dataclass(frozen=True, slots=True)
class HandlerFailure:
    """One handler call of an autoscaled member that raised."""

    at: datetime
    """When (UTC)."""
    member_id: str
    """The member's id in the group."""
    values: int
    """Values the call got."""
    attempt: int
    """How many times the oldest of them was handed to the handler, this call included."""
    error: str
    """The exception, one line: its type, message and where it was raised."""
    dead_lettered: int = 0
    """Elements this failure sent to the dead-letter topic (past ``max_deliveries``)."""


EVENTS_KEPT = 100
"""Scale events an autoscaler keeps for ``describe()``."""
