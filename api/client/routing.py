"""Which channel a key goes to: the same in every process, run and release, and in Spark.

Python's ``hash`` is salted per process, so a key is hashed as bytes with
CRC-32 (zlib's, IEEE): ``channel = crc32(key_bytes(key)) % channels``, where

- a ``str`` is its UTF-8,
- ``bytes`` (``bytearray``, ``memoryview``) are taken as they are,
- an ``int`` (``numpy`` integers too) is its decimal digits (``-7`` -> ``b"-7"``);
  it must fit a signed 64-bit int (``MIN_INT_KEY`` to ``MAX_INT_KEY``), as the
  ``key`` column of ``read_topic`` (Arrow's int64) and Spark's LongType hold it,
- a ``bool`` (``numpy.bool_`` too) is ``b"true"`` or ``b"false"``.

This is what Spark computes as ``pmod(crc32(cast(k AS STRING)), channels)``
for string, binary, integer and boolean columns: Spark casts ``true`` to
``"true"``, where Python's ``str(True)`` is ``"True"``, so booleans follow
Spark's text on both sides. Floating-point keys are refused: Python and Spark
(Java's ``Double.toString``) write many doubles differently (``1e+20`` and
``1.0E20``), so a float key could not land where the same row from a
DataFrame does. Round or format it first (``str(x)``, ``int(x)``).

An element keeps its key (``Element.key``) as :func:`stored_key` gives it: a
``str``, ``bytes``, ``int`` or ``bool`` (a ``bytearray`` as ``bytes``, a numpy
integer as ``int``), so what a reader gets back pickles anywhere and compares
as the publisher's key did.
"""

from __future__ import annotations

import numbers
import zlib
from typing import Any

from raytopic.core.config import shown
from raytopic.core.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["MAX_INT_KEY", "MIN_INT_KEY", "channel_for_key", "key_bytes", "key_hash", "stored_key"]

MIN_INT_KEY = -(2**63)
"""The lowest int key: a signed 64-bit int's (Arrow's int64, Spark's LongType)."""
MAX_INT_KEY = 2**63 - 1
"""The highest int key (a larger one could not be read back as a ``key`` column)."""


def key_bytes(key: Any) -> bytes:
    """The bytes a key is hashed as (see the module docstring).

    Raises:
        InvalidTypeError: the key is a float, or not a str, bytes, int or bool.
        InvalidArgumentError: an int key outside a signed 64-bit int's range.
    """
    kind = type(key)
    if kind is str:  # the common cases first, without isinstance chains
        return key.encode("utf-8")
    if kind is int:
        return str(_int_key(key)).encode("ascii")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, bool) or _is_numpy_bool(key):
        return b"true" if key else b"false"
    if isinstance(key, numbers.Integral):
        return str(_int_key(int(key))).encode("ascii")
    if isinstance(key, numbers.Real):
        raise InvalidTypeError(
            f"a float key ({key!r}) is refused: Python and Spark write floats as different "
            "text, so it could not route like a DataFrame row; use str(key) or int(key)"
        )
    raise InvalidTypeError(f"a key must be a str, bytes, int or bool, got {kind.__name__}")


def channel_for_key(key: Any, channel_count: int) -> int:
    """The channel of ``key`` in a topic of ``channel_count`` channels.

    Raises:
        InvalidTypeError: the key's type is not accepted (see :func:`key_bytes`).
        InvalidArgumentError: an int key outside a signed 64-bit int's range.
    """
    if type(key) is str:  # publish() calls this for every keyed value
        return zlib.crc32(key.encode("utf-8")) % channel_count
    return zlib.crc32(key_bytes(key)) % channel_count


def key_hash(key: Any) -> int:
    """CRC-32 of the key's bytes: ``channel_for_key`` is this modulo the channels.

    Raises:
        InvalidTypeError: the key's type is not accepted (see :func:`key_bytes`).
        InvalidArgumentError: an int key outside a signed 64-bit int's range.
    """
    if type(key) is str:
        return zlib.crc32(key.encode("utf-8"))
    return zlib.crc32(key_bytes(key))


def stored_key(key: Any) -> str | bytes | int | bool:
    """``key`` as an element keeps it: a ``str``, ``bytes``, ``int`` or ``bool``.

    Raises:
        InvalidTypeError: the key's type is not accepted (see :func:`key_bytes`).
        InvalidArgumentError: an int key outside a signed 64-bit int's range.
    """
    kind = type(key)
    if kind is str or kind is bytes or kind is bool:
        return key
    if kind is int:
        return _int_key(key)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, str):
        return str(key)
    if isinstance(key, bool) or _is_numpy_bool(key):
        return bool(key)
    if isinstance(key, numbers.Integral):
        return _int_key(int(key))
    key_bytes(key)  # raises, naming what is refused
    raise InvalidTypeError(f"a key must be a str, bytes, int or bool, got {kind.__name__}")


def _int_key(key: int) -> int:
    """``key`` if a signed 64-bit int holds it: a larger one would route, but neither
    Arrow's int64 ``key`` column (``read_topic``) nor Spark could read it back, and
    one past 4,300 digits has no decimal text in Python at all."""
    if MIN_INT_KEY <= key <= MAX_INT_KEY:
        return key
    raise InvalidArgumentError(
        f"an int key must be between {MIN_INT_KEY} and {MAX_INT_KEY} (a signed 64-bit int, "
        f"as read_topic's key column and Spark hold it), got {shown(key)}"
    )


def _is_numpy_bool(key: Any) -> bool:
    # numpy is not a dependency of routing: recognise numpy.bool_ (named "bool" in numpy 2)
    kind = type(key)
    return kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")
