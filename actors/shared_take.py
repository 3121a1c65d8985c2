"""One take of a shared group's member from one channel's ring. No Ray.

The shared cursor decides who gets what (:class:`SharedCursor.choose`); this
module offers it the ring's elements (the ones to deliver again first, then
new ones) and packs what it chose as chunks, with each element's delivery
count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from raytopic.actors.segment_ring import Run, SegmentRing
from raytopic.actors.shared_cursor import Candidate, SharedCursor
from raytopic.core.payloads import decode_checked, encode_values
from raytopic.core.protocol import Chunk

__all__ = ["POISON_NACK_DELAY", "SCAN_LIMIT", "take_shared"]

logger = logging.getLogger(__name__)

SCAN_LIMIT = 1000
"""New elements one take looks at when a filter or key order may pass some over
(a filter that matches nothing must not hold the actor for the whole ring)."""

POISON_NACK_DELAY = 1.0
"""Seconds before a poison element goes out again (a filter that raises on it
should not be run again at once)."""


def take_shared(
    cursor: SharedCursor,
    ring: SegmentRing,
    member: str,
    max_count: int,
    now: float,
    ack_timeout: float,
    *,
    keep: Callable[[Any], bool] | None = None,
    convert: Callable[[Any], Any] | None = None,
    key_order: bool = False,
    stop: int | None = None,
    max_deliveries: int | None = None,
) -> list[Chunk]:
    """Deliver up to ``max_count`` elements to ``member`` (held until an ack deadline
    ``ack_timeout`` seconds from ``now``), as chunks in sequence order per source;
    new elements only below ``stop`` (a damaged range begins there).

    A poison element (it does not decode here, or ``keep`` or ``convert`` raises
    on it: ``raytopic.actors.poison``) is not delivered: it counts as a delivery
    negatively acknowledged at once (after ``max_deliveries``, a dead letter).
    """
    if cursor.floor < ring.head - 1:
        cursor.drop_below(ring.head)  # removed (overwrite, TTL, purge) before acked
    if max_count <= 0:
        return []
    tail = ring.tail if stop is None else min(ring.tail, stop - 1)
    ready = cursor.ready(now)
    if keep is None and not key_order and not ready:
        # The common case, element by element below it: new elements in a row.
        taken = cursor.hold_new(member, max_count, tail, now, ack_timeout)
        runs = ring.read(cursor.next - taken, taken) if taken else []
        if convert is None:
            return [run.chunk() for run in runs]
        chosen = [(sequence, 1) for run in runs for sequence in range(run.first, run.last + 1)]
        every = {
            run.first + offset: (run, offset) for run in runs for offset in range(len(run.payload))
        }
        return _delivered(cursor, member, chosen, every, convert, now, max_deliveries)
    located: dict[int, tuple[Run, int]] = {}
    decoded: dict[int, tuple[list[Any], dict[int, BaseException]]] = {}  # id(run) -> values
    raised: dict[int, BaseException] = {}  # sequence -> what its filter raised

    def offer(run: Run, offset: int, keys: list[Any] | None) -> Candidate:
        sequence = run.first + offset
        located[sequence] = (run, offset)
        matches = True
        if keep is not None:
            values, failures = _values_of(run, decoded)
            try:
                if offset in failures:
                    raise failures[offset]
                matches = bool(keep(values[offset]))
            except BaseException as error:  # SystemExit too: it costs its element only
                raised[sequence] = error  # chosen, then negatively acknowledged
        key = None if keys is None else keys[offset]
        return Candidate(sequence, key, matches)

    def offered() -> Iterator[Candidate]:
        for sequence in ready:
            run = ring.get(sequence)
            yield offer(run, 0, run.payload.keys if key_order else None)
        limit = max_count if keep is None and not key_order else max(max_count, SCAN_LIMIT)
        for run in ring.read(cursor.next, min(limit, tail - cursor.next + 1)):
            keys = run.payload.keys if key_order else None  # once per run: a list's slice
            for offset in range(len(run.payload)):
                yield offer(run, offset, keys)

    chosen = cursor.choose(member, offered(), max_count, now, ack_timeout, key_order=key_order)
    for sequence, count in chosen:
        if sequence in raised:
            _nack_poison(cursor, member, sequence, count, raised[sequence], now, max_deliveries)
    chosen = [(sequence, count) for sequence, count in chosen if sequence not in raised]
    return _delivered(cursor, member, chosen, located, convert, now, max_deliveries)


def _values_of(
    run: Run, decoded: dict[int, tuple[list[Any], dict[int, BaseException]]]
) -> tuple[list[Any], dict[int, BaseException]]:
    """A run's values (decoded once per take), and those that did not decode."""
    values = decoded.get(id(run))
    if values is None:
        values = decoded[id(run)] = decode_checked(run.payload)
    return values


def _delivered(
    cursor: SharedCursor,
    member: str,
    chosen: list[tuple[int, int]],
    located: dict[int, tuple[Run, int]],
    convert: Callable[[Any], Any] | None,
    now: float,
    max_deliveries: int | None,
) -> list[Chunk]:
    """Chunks of the chosen elements (converted); one the converter raises on (or
    that does not decode for it) is negatively acknowledged instead."""
    if convert is None:
        return _pack(chosen, located, None)
    decoded: dict[int, tuple[list[Any], dict[int, BaseException]]] = {}
    converted: dict[int, Any] = {}
    kept = []
    for sequence, count in chosen:
        run, offset = located[sequence]
        values, failures = _values_of(run, decoded)
        try:
            if offset in failures:
                raise failures[offset]
            converted[sequence] = convert(values[offset])
        except BaseException as error:  # SystemExit too: it costs its element only
            _nack_poison(cursor, member, sequence, count, error, now, max_deliveries)
            continue
        kept.append((sequence, count))
    return _pack(kept, located, converted)


def _nack_poison(
    cursor: SharedCursor,
    member: str,
    sequence: int,
    count: int,
    error: BaseException,
    now: float,
    max_deliveries: int | None,
) -> None:
    logger.warning(
        "poison element %d nacked for member %s (%s: %s)",
        sequence,
        member,
        type(error).__name__,
        error,
    )
    cursor.nack(sequence, member, count, now + POISON_NACK_DELAY, max_deliveries)


def _pack(
    chosen: list[tuple[int, int]],
    located: dict[int, tuple[Run, int]],
    converted: dict[int, Any] | None,
) -> list[Chunk]:
    """Chunks of the chosen elements: consecutive ones of one run share a chunk
    (with ``converted``: their converted values)."""
    chunks: list[Chunk] = []
    index = 0
    while index < len(chosen):
        run, start = located[chosen[index][0]]
        stop = index + 1
        while (
            stop < len(chosen)
            and chosen[stop][0] == chosen[stop - 1][0] + 1
            and located[chosen[stop][0]][0] is run
        ):
            stop += 1
        offset = start + (stop - index)
        if converted is None:
            payload = run.payload.slice(start, offset)
        else:
            values = [converted[sequence] for sequence, _ in chosen[index:stop]]
            payload = encode_values(values, run.payload.slice(start, offset).keys)
        counts = np.fromiter((count for _, count in chosen[index:stop]), dtype=np.int32)
        chunks.append(Chunk(chosen[index][0], run.stamp, payload, None, counts))
        index = stop
    return chunks
