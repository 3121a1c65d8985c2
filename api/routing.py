"""Which channel a key goes to: the same in every process, run and release.

Python's ``hash`` is salted per process, so keys are hashed as bytes with
CRC-32: a ``str`` as UTF-8, ``bytes`` as they are, an ``int`` (or ``float``,
``bool``) as the UTF-8 of ``str(key)``. A key column of a DataFrame hashes the
same way once cast to strings, so the Spark bridge and the Publisher agree.
"""

from __future__ import annotations

import zlib
from typing import Any

from raytopic.errors import InvalidTypeError

__all__ = ["channel_for_key", "key_bytes"]


def key_bytes(key: Any) -> bytes:
    """The bytes a key is hashed as.

    Raises:
        InvalidTypeError: the key is not a str, bytes, int, float or bool.
    """
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, (int, float)):
        return str(key).encode("utf-8")
    raise InvalidTypeError(f"a key must be a str, bytes, int or float, got {type(key).__name__}")


def channel_for_key(key: Any, channel_count: int) -> int:
    """The channel of ``key`` in a topic of ``channel_count`` channels."""
    return zlib.crc32(key_bytes(key)) % channel_count
