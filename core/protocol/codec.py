"""Requests on the wire: one record as the single bytes argument of a call; a sibling's
reply and an append's small payload as bytes too. No Ray.

Ray serializes each argument of an actor call on its own, and a Python object
through its own pickler, at tens of microseconds each way; a request record
pickled here (plain pickle, protocol 5) crosses as one ``bytes`` argument. A reply
fares worse: any object but bytes, a str or plain numbers takes Ray's pickle path,
about 0.2 ms a hop on a quiet 2-core machine whatever its size (a ``Delivery``
as much as a one-field wrapper, bytes nothing: measured against an actor
returning a str; an argument pays about half). A reply only a channel's sibling or
a control log reads (``PACKED_REPLIES``) and an append's payload cross as bytes,
unless they hold a buffer Ray moves zero-copy.
"""

from __future__ import annotations

import pickle
from typing import Any

from raytopic.core.errors import InvalidArgumentError

__all__ = ["pack_request", "pack_small", "unpack_call", "unpack_request", "unpack_small"]


def pack_request(request: Any) -> bytes:
    """One request record as the single bytes argument of a call."""
    return pickle.dumps(request, protocol=5)


def unpack_request(packed: bytes, kinds: tuple[type, ...]) -> Any:
    """The request packed by :func:`pack_request`, one of ``kinds``.

    Raises:
        InvalidArgumentError: not a packed request of one of ``kinds``.
    """
    try:
        request = pickle.loads(packed)
    except Exception as error:
        raise InvalidArgumentError(f"not a packed request: {error}") from None
    if not isinstance(request, kinds):
        raise InvalidArgumentError(f"{type(request).__name__} is not a request served here")
    return request


def unpack_call(packed: bytes, payload: Any, kinds: tuple[type, ...]) -> tuple[Any, Any]:
    """A call's request (see :func:`unpack_request`) and its payload (an append's values,
    packed by :func:`pack_small` when small).

    Raises:
        InvalidArgumentError: not a packed request of one of ``kinds``, or bytes that
            are no packed payload.
    """
    request = unpack_request(packed, kinds)
    try:
        return request, unpack_small(payload)
    except Exception as error:
        raise InvalidArgumentError(f"not a packed payload: {error}") from None


def pack_small(value: Any) -> Any:
    """A reply to a sibling, or an append's payload, as bytes, unless it holds a buffer
    large enough to travel out of band (``OUT_OF_BAND_MIN``): Ray moves that one
    zero-copy as it is; so does one plain pickle refuses."""
    buffers: list[pickle.PickleBuffer] = []
    try:
        packed = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    except Exception:  # plain pickle refuses it (cloudpickle's alone can): Ray's way
        return value
    return value if buffers else packed


def unpack_small(value: Any) -> Any:
    """What :func:`pack_small` packed (a large one came as itself)."""
    return pickle.loads(value) if type(value) is bytes else value
