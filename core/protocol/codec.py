"""Requests on the wire: one record as the single bytes argument of a call. No Ray.

Ray serializes each argument of an actor call on its own, and a Python object
through its own pickler, at tens of microseconds each way; a request record
pickled here (plain pickle, protocol 5) crosses as one ``bytes`` argument.
"""

from __future__ import annotations

import pickle
from typing import Any

from raytopic.core.errors import InvalidArgumentError

__all__ = ["pack_request", "unpack_request"]


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
