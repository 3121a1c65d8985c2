"""One ObjectRef for the results of several channel calls, in the input's order:
``Publisher.publish_batch``'s statuses, a bulk acknowledgement's outcomes.

No task and no extra call: the caller sends every channel's call but one, then
the last one (the *lead*) with the others' ObjectRefs beside it (:class:`Joined`).
The lead serves its own part, awaits the others' replies and returns them all,
joined in the input's order (:func:`join_replies`): its ObjectRef is the one the
caller hands out. An ObjectRef passed nested in an argument is not resolved by
Ray before the call, so the lead takes its own part at once.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import ray

__all__ = ["JoinKind", "Joined", "in_order", "join_replies", "send_joined"]


class JoinKind(enum.StrEnum):
    """How a lead joins the parts' replies."""

    STATUSES = "statuses"
    """PublishStatuses of ``publish_batch`` parts: joined without building a status."""
    LISTS = "lists"
    """Lists of per-item results (acknowledgements): joined item by item."""


class Joined(NamedTuple):
    """What a lead channel's call carries beside its own request."""

    kind: JoinKind
    layout: np.ndarray
    """``layout[i]``: the part item ``i`` of the input is in."""
    lead: int
    """The lead's own part's index among the parts."""
    others: tuple[ray.ObjectRef[Any], ...]
    """The other parts' replies, in part order (the lead's left out)."""


def in_order(layout: Sequence[int] | np.ndarray, *parts: Sequence[Any]) -> list[Any]:
    """Per-part result lists back in the order of the input (``layout[i]``: the part
    item ``i`` is in)."""
    cursors = [iter(part) for part in parts]
    return [next(cursors[index]) for index in np.asarray(layout).tolist()]


def send_joined(
    sends: Sequence[Callable[[Joined | None], ray.ObjectRef[Any]]],
    layout: np.ndarray,
    kind: JoinKind,
) -> ray.ObjectRef[Any]:
    """Send each part's call, the last one as the lead carrying the others' refs: one
    ObjectRef for all of them, and no call or task more than the parts'.

    Args:
        sends: Per part, a function that submits its call (with the Joined its
            call carries, or None) and returns the call's ObjectRef.
        layout: Each input item's part index (``sends``' order).
        kind: How the lead joins the replies.

    Returns:
        The lead's ObjectRef (the only part's, for one part).
    """
    if len(sends) == 1:
        return sends[0](None)
    others = tuple(send(None) for send in sends[:-1])
    return sends[-1](Joined(kind, layout, len(sends) - 1, others))


async def join_replies(own: Any, joined: Joined) -> Any:
    """The lead's reply: its own part's (``own``) joined with the others', in the
    input's order.

    Raises:
        The first part's error (in part order), as itself: a part refused (a
        channel's ``TopicFullError`` names its channel) fails the whole reply,
        as each part's reply would; the other parts may have gone in.
    """
    results: list[Any] = list(await asyncio.gather(*joined.others, return_exceptions=True))
    results.insert(joined.lead, own)
    for result in results:
        if isinstance(result, BaseException):
            raise _typed(result)
    if joined.kind is JoinKind.STATUSES:
        from raytopic.core.statuses import combine_statuses

        return combine_statuses(joined.layout, *results)
    return in_order(joined.layout, *results)


def _typed(error: BaseException) -> BaseException:
    """A part's error as the caller would have met it: a RayTaskError's cause."""
    cause = getattr(error, "cause", None)
    if isinstance(error, ray.exceptions.RayTaskError) and isinstance(cause, BaseException):
        return cause
    return error
