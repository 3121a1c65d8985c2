"""How a batch of values splits into one part per channel: each value's channel, its
key as an element keeps it, and each part's values encoded once. No Ray.

``Publisher.publish_batch`` and ``Transaction.publish_batch`` split their values
the same way, so a key lands on the same channel whichever way it was published.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from raytopic.client.routing import key_hash, stored_key
from raytopic.core.errors import InvalidArgumentError
from raytopic.core.payloads import Payload, encode_values

__all__ = [
    "check_keyed",
    "encode_part",
    "lead_last",
    "no_key_error",
    "part_layout",
    "parts_of",
    "route",
    "routed_keys",
]


def route(
    count: int,
    hashes: list[int | None] | None,
    channels: int,
    start: int,
    *,
    by_batch: bool = False,
) -> tuple[np.ndarray, int]:
    """Each of ``count`` values' channel: a keyed value by its key's hash, the others
    in turn from channel ``start`` (``by_batch``: all of them to ``start``, the turn
    passing once). Returns the channels and the next turn."""
    if hashes is None:
        if by_batch:
            return np.full(count, start, dtype=np.int64), (start + 1) % channels if count else start
        return (start + np.arange(count)) % channels, (start + count) % channels
    layout = np.empty(count, dtype=np.int64)
    turn = start
    for index, hashed in enumerate(hashes):
        if hashed is not None:
            layout[index] = hashed % channels
        elif by_batch:
            layout[index], turn = start, (start + 1) % channels
        else:
            layout[index], turn = turn, (turn + 1) % channels
    return layout, turn


def parts_of(layout: np.ndarray) -> dict[int, np.ndarray]:
    """Each channel's value indices, in order, by the channel's first value."""
    channels, firsts = np.unique(layout, return_index=True)
    return {
        int(channel): np.flatnonzero(layout == channel) for channel in channels[np.argsort(firsts)]
    }


def lead_last(parts: dict[int, Payload], turn: int) -> dict[int, Payload]:
    """The parts in the order their calls go: the one at ``turn`` (modulo their count)
    last, as the lead whose channel awaits and joins the others' replies, the rest
    after it in turn. A publisher's successive batches pass successive turns, so
    the joining is spread over the channels, not left to the one each batch ends on."""
    order = list(parts)
    lead = turn % len(order) + 1 if order else 0
    return {channel: parts[channel] for channel in order[lead:] + order[:lead]}


def no_key_error(topic: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"topic {topic!r} is compacted: every value needs a key (publish(value, key=...))"
    )


def check_keyed(topic: str, keys: list[Any] | None, count: int) -> None:
    """Every one of ``count`` values has a key (a compacted topic's rule).

    Raises:
        InvalidArgumentError: one has none (naming the first).
    """
    if count and keys is None:
        raise no_key_error(topic)
    if keys is not None and None in keys:
        raise InvalidArgumentError(
            f"topic {topic!r} is compacted: every value needs a key, and value "
            f"{keys.index(None)} has none"
        )


def routed_keys(
    keys: Sequence[Any] | None,
) -> tuple[list[Any] | None, list[int | None] | None]:
    """Each key as an element keeps it (``raytopic.client.routing.stored_key``) and its hash
    (None for a None key); (None, None) for no keys.

    Raises:
        InvalidTypeError: a key of a type that cannot be a key.
    """
    if keys is None:
        return None, None
    stored = [None if key is None else stored_key(key) for key in keys]
    return stored, [None if key is None else key_hash(key) for key in stored]


def encode_part(values: list[Any], keys: list[Any] | None, indices: np.ndarray) -> Payload:
    """The values at ``indices`` (and their keys, if any of them has one), encoded."""
    chosen = indices.tolist()
    whole = len(chosen) == len(values)
    part = values if whole else [values[index] for index in chosen]
    if keys is not None and not whole:
        keys = [keys[index] for index in chosen]
    if keys is not None and all(key is None for key in keys):
        keys = None
    return encode_values(part, keys)


def part_layout(layout: np.ndarray, channels: list[int]) -> np.ndarray:
    """Each value's part index, from its channel (``layout``) and the parts' channels."""
    part_of = np.empty(max(channels) + 1, dtype=np.int64)
    part_of[channels] = np.arange(len(channels))
    return part_of[layout]
