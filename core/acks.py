"""Acknowledging a shared group's elements: what ``Element.ack`` and ``Subscriber.ack``
send to the channels.

An acknowledgement names each element by its sequence, its delivery count
and its channel's incarnation (together the delivery's id), so a channel
applies it only if the sender still holds the element under that delivery.
Acknowledgements of one channel travel as ONE call, however many elements
they cover.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import ray

from raytopic.core.config import check_items, check_nonnegative_number, check_timeout
from raytopic.core.errors import ForeignElementError, GroupModeError, InvalidTypeError
from raytopic.core.gather import Joined, JoinKind, send_joined
from raytopic.core.naming import channel_actor
from raytopic.core.protocol import Ack, ExtendHold, Nack, pack_request
from raytopic.core.reader_calls import before_leaving
from raytopic.core.records import Element

__all__ = [
    "Ack",
    "ExtendHold",
    "Nack",
    "check_delay",
    "check_hold_seconds",
    "check_own",
    "check_shared",
    "send_many",
    "send_one",
]


def check_shared(element: Element) -> None:
    """An element of a shared group, or GroupModeError."""
    if not element._origin.shared:
        raise GroupModeError(
            f"element {element.position} was not received in a shared group: commit it instead"
        )


def check_own(
    elements: object, reader_id: str, topic_id: str, *, shared: bool = True
) -> list[Element]:
    """``elements`` if all were received by ``reader_id`` from the topic (``shared``:
    in a shared group).

    Raises:
        InvalidTypeError: ``elements`` is not an iterable of Elements (None, a
            str, a dict, ...), or one is not an Element.
        ForeignElementError: one was received by another subscriber, from
            another topic, or (``shared``) in an owned group (nothing is sent).
    """
    elements = check_items(elements, "elements")
    for element in elements:
        if not isinstance(element, Element):
            raise InvalidTypeError(f"expected Elements, got {type(element).__name__}")
        origin = element._origin
        if (
            origin.topic_id != topic_id
            or origin.reader != reader_id
            or (shared and not origin.shared)
        ):
            raise ForeignElementError(
                f"element {element.position} was not received by this subscriber"
                + (" in its shared group" if shared else "")
            )
    return elements


def check_delay(delay: object, what: str = "delay") -> float:
    """Seconds >= 0 and at most a year (None: 0)."""
    return 0.0 if delay is None else check_nonnegative_number(delay, what)


def check_hold_seconds(seconds: object) -> float | None:
    """Seconds > 0 and at most a year for an ack deadline extension (None: the group's
    ``ack_timeout``)."""
    return check_timeout(seconds, "seconds")


AckRequest = type[Ack] | type[Nack] | type[ExtendHold]
"""What an acknowledgement asks of the channels."""


def send_one(element: Element, kind: AckRequest, **options: Any) -> ray.ObjectRef[Any]:
    """An ``kind`` request (Ack, Nack, ExtendHold, with its ``options``) for one
    element: ``ObjectRef[AckStatus]``."""
    origin = element._origin
    actor = channel_actor(origin.namespace, origin.topic, origin.topic_id, element.channel)
    ref = actor.request.remote(pack_request(_request(kind, [element], single=True, **options)))
    before_leaving.add(origin.topic_id, origin.reader, ref)
    return ref


def _request(kind: AckRequest, elements: list[Element], **options: Any) -> Any:
    """The ``kind`` request for ``elements`` of one channel: a shared group's holds
    by delivery id; an owned reader's elements (an Ack only: done one by one) under
    its lease, with the jump count each was read at.

    Raises:
        GroupModeError: a Nack or ExtendHold of an element not received in a shared
            group, or elements of both kinds at once.
    """
    origin = elements[0]._origin
    if origin.shared or kind is not Ack:
        for element in elements:
            check_shared(element)
        entries = tuple((e.sequence, e.delivery_count, e._origin.epoch) for e in elements)
        return kind(reader_id=origin.reader, entries=entries, **options)
    if any(element._origin.shared for element in elements):
        raise GroupModeError("elements of a shared group and of an owned one in one ack")
    return Ack(
        reader_id=origin.reader,
        entries=tuple((element.sequence, 1, 0) for element in elements),
        lease=origin.lease,
        jumps=tuple(element._origin.jumps for element in elements),
        **options,
    )


def send_many(elements: list[Element], kind: AckRequest, **options: Any) -> ray.ObjectRef[Any]:
    """A ``kind`` request for many elements, one call per channel and no other call
    or task: ``ObjectRef[list[AckStatus]]`` in the order of ``elements`` (the last
    channel's call joins the others' replies: ``raytopic.core.gather``)."""
    if not elements:
        return ray.put([])
    by_channel: dict[int, list[Element]] = {}
    for element in elements:
        by_channel.setdefault(element.channel, []).append(element)
    sends = []
    readers = set()  # each channel's request names its group's reader
    for channel, group in by_channel.items():
        origin = group[0]._origin
        readers.add((origin.topic_id, origin.reader))
        actor = channel_actor(origin.namespace, origin.topic, origin.topic_id, channel)
        sends.append(partial(_send, actor, pack_request(_request(kind, group, **options))))
    part_of = {channel: part for part, channel in enumerate(by_channel)}
    layout = np.fromiter((part_of[e.channel] for e in elements), np.int64, len(elements))
    ref = send_joined(sends, layout, JoinKind.LISTS)
    # Each reader's close waits for it (a batch may hold elements of several readers).
    for topic_id, reader in readers:
        before_leaving.add(topic_id, reader, ref)
    return ref


def _send(actor: Any, packed: bytes, joined: Joined | None) -> ray.ObjectRef[Any]:
    if joined is None:
        return actor.request.remote(packed)
    return actor.request.remote(packed, None, joined)
