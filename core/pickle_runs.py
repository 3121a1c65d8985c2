"""Decoding a run of values pickled one by one in a single ``pickle.loads``.

``publish()`` pickles each value when it is called (a later change to the
caller's object must not reach readers), so its values arrive as pickles laid
back to back (``PickledValues``). Loaded in one stream instead of one
``pickle.loads`` per value, they cost about a quarter less to decode.

A value's pickle (protocol 5) is ``PROTO 5``, an optional ``FRAME``, the
opcodes that build the value, and ``STOP``. ``PROTO 5`` and ``FRAME`` change
nothing in a stream of protocol 5 (a frame is a read-ahead hint: the
unpickler checks its bytes are there and reads on). With each value's
``STOP`` turned into ``APPEND``, after ``PROTO 5, EMPTY_LIST``, the run is the
pickle of the list of its values. Except where a value reads the unpickler's
memo (``BINGET``, ``LONG_BINGET``: an object met twice in one value): its
numbers would name another value's objects in a joined stream. So a value
whose pickle holds either byte anywhere (exact, as an opcode is a byte of the
pickle; about 2% of small dicts of numbers and short strings, where a
number's bytes happen to) is loaded alone, its place in the stream taken by
opcodes that append a placeholder.

Whatever goes wrong in the joined load (a value that cannot be decoded here)
is left to the decoding one by one, which raises it at its own value.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

__all__ = ["JOIN_MIN", "loads_joined"]

JOIN_MIN = 512
"""Fewest values worth joining: the scan costs about 40 us a run on a loaded machine,
and the joined load saves 0.1-0.3 us a value (slower at 128 values, faster at 1,000)."""

_PROTO = 0x80
_STOP = 0x2E
_APPEND = 0x61
_MEMO_READ = 0x6A
"""``LONG_BINGET``; ``BINGET`` (0x68) is the one other byte ``b | 2`` maps to it
(``GET`` is protocol 0's alone)."""
_LIST_HEAD = b"\x80\x05]"  # PROTO 5, EMPTY_LIST
_PLACEHOLDER = b"Na"  # NONE, APPEND
_NO_OP = b"\x80\x05"  # PROTO 5 again
_ODD_NO_OP = b"K\x000"  # BININT1 0, POP


def loads_joined(buffer: Any, begin: int, ends: np.ndarray) -> list[Any] | None:
    """The values pickled back to back in ``buffer[begin:ends[-1]]`` (value ``i``
    ends at ``ends[i]``), loaded in one ``pickle.loads``; None when most cannot be
    joined, or when the load fails (the caller decodes them one by one, which
    raises at the value that fails)."""
    count = len(ends)
    run = np.frombuffer(buffer, dtype=np.uint8)[begin : int(ends[-1])]
    lasts = ends - (begin + 1)  # each value's STOP, in ``run``
    firsts = np.empty(count, dtype=np.int64)
    firsts[0] = 0
    firsts[1:] = lasts[:-1] + 1
    if (lasts - firsts < 3).any():
        return None  # (no pickle of protocol 5 is this short)
    alone = (run[firsts] != _PROTO) | (run[firsts + 1] != 5) | (run[lasts] != _STOP)
    memo_reads = np.flatnonzero((run | 2) == _MEMO_READ)
    if len(memo_reads):
        alone[np.searchsorted(lasts, memo_reads)] = True
    apart = np.flatnonzero(alone).tolist()
    if 2 * len(apart) > count:
        return None
    stream = bytearray(_LIST_HEAD)
    stream += run.data
    stream.append(_STOP)
    np.frombuffer(stream, dtype=np.uint8)[lasts + len(_LIST_HEAD)] = _APPEND
    head = len(_LIST_HEAD)
    for index in apart:
        first, last = int(firsts[index]) + head, int(lasts[index]) + head
        stream[first : last + 1] = _placeholder(last + 1 - first)
    try:
        values = pickle.loads(stream)
        if len(values) != count:
            return None  # (never seen: a joined stream that built more or fewer)
        for index in apart:
            first, last = int(firsts[index]), int(lasts[index])
            values[index] = pickle.loads(run.data[first : last + 1])
    except BaseException:  # SystemExit too: a value's loading runs its own code
        return None
    return values


def _placeholder(size: int) -> bytes:
    """``size`` (>= 4) bytes of opcodes that append None, then change nothing."""
    rest = size - len(_PLACEHOLDER)
    if rest % 2:
        return _PLACEHOLDER + _ODD_NO_OP + _NO_OP * ((rest - 3) // 2)
    return _PLACEHOLDER + _NO_OP * (rest // 2)
