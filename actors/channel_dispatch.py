"""How a request reaches the channel's handler, and when it is admitted.

The channel answers Ray through two entries (``request``, ``control``); each typed
request is served by the handler registered for its type, behind the guard its
registration names (the channel's ``_serve`` applies it). A handler is a method of
the channel or of one of the request families it is made of (``channel_elements``,
``channel_transactions``, ``channel_groups``, ``channel_readers``,
``channel_receives``): :func:`bind` ties each request type to the object whose class
defines its handler. The reply of a request only a sibling's session or a control log
sends (``PACKED_REPLIES``) is packed by its registered handler (see
``raytopic.core.protocol.codec``). Pure.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from raytopic.core.errors import TopicError
from raytopic.core.protocol import PACKED_REPLIES, pack_small

__all__ = ["SERVED", "Admit", "Handler", "bind", "call_handler", "entry", "in_turn", "serves"]


class Admit(enum.Enum):
    """When a request is admitted: the guard every request type of the channel has.

    A failed channel (its store broke, or it could not recover it) refuses
    typed (ChannelFailedError); a channel restarted without a store is "recovering"
    until its coordinator seeds it (its groups and epoch).
    """

    SEEDED = enum.auto()
    """Refused by a failed channel; on a recovering one, waits until it is seeded."""
    NOW = enum.auto()
    """Refused by a failed channel; a recovering one refuses at once ("try again"):
    a read that would only report a state still to come."""
    ALWAYS = enum.auto()
    """Answered in any state: the life cycle (seeding is what ends recovering), and
    what a coordinator rebuilding itself or destroying the topic asks."""
    BY_REQUEST = enum.auto()
    """An entry: each request type's own (see :func:`serves`)."""


Handler = Callable[..., Awaitable[Any]]

SERVED: dict[type, tuple[Handler, Admit]] = {}
"""Request type -> (its handler, when it is admitted): the dispatch table of
``request`` and ``control``. A handler is unbound: :func:`bind` gives it its object."""


def serves(kind: type, admit: Admit = Admit.SEEDED) -> Callable[[Handler], Handler]:
    """Make a method of the channel, or of one of its request families, the handler of
    requests of type ``kind`` (called with the record, and an append's payload),
    admitted as ``admit`` says."""

    def register(handler: Handler) -> Handler:
        if kind in SERVED:
            raise TypeError(f"two handlers of {kind.__name__}")
        SERVED[kind] = (_packing(handler) if kind in PACKED_REPLIES else handler, admit)
        handler.__serves__ = (*getattr(handler, "__serves__", ()), kind)  # type: ignore[attr-defined]
        return handler

    return register


def bind(*owners: object) -> dict[type, tuple[Callable[..., Awaitable[Any]], Admit]]:
    """Every request type's handler bound to the one of ``owners`` whose class defines
    it, with when it is admitted: one channel's dispatch table.

    Raises:
        TypeError: a request type with no handler among ``owners``, or with two.
    """
    table: dict[type, tuple[Callable[..., Awaitable[Any]], Admit]] = {}
    for owner in owners:
        for function in vars(type(owner)).values():
            for kind in getattr(function, "__serves__", ()):
                if kind in table:
                    raise TypeError(f"two handlers of {kind.__name__}")
                handler, admit = SERVED[kind]
                table[kind] = (functools.partial(handler, owner), admit)
    unserved = sorted(kind.__name__ for kind in set(SERVED) - set(table))
    if unserved:
        raise TypeError(f"no handler of {', '.join(unserved)}")
    return table


def _packing(handler: Handler) -> Handler:
    """``handler`` with its reply packed for the caller (a sibling, a control log)."""

    async def packed(channel: Any, request: Any, *payload: Any) -> Any:
        return pack_small(await handler(channel, request, *payload))

    return packed


def entry(method: Callable[..., Any]) -> Callable[..., Any]:
    """A Ray-callable entry of the channel: it serves typed requests, each admitted as
    its type's registration says (see :func:`serves`)."""
    method.__admits__ = Admit.BY_REQUEST  # type: ignore[attr-defined]
    return method


def call_handler(
    handler: Callable[..., Awaitable[Any]], request: Any, payload: Any
) -> Awaitable[Any]:
    """Call a bound handler; only the requests that carry values (appends) get a payload."""
    if payload is None:
        return handler(request)
    return handler(request, payload)


async def in_turn(*parts: Callable[[], Awaitable[Any]]) -> tuple[Any, ...]:
    """Serve one request's parts one after the other, each started once the one before
    has answered: each part's reply, or the typed error it raised (a part that fails
    neither hides another's answer nor keeps it from running)."""
    replies: list[Any] = []
    for part in parts:
        try:
            replies.append(await part())
        except TopicError as error:
            replies.append(error)
    return tuple(replies)
