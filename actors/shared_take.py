"""One take of a shared group's member from one channel's ring. No Ray.

The shared cursor decides who gets what (:class:`SharedCursor.choose`); this
module offers it the ring's elements (the ones to deliver again first, then
new ones) and packs what it chose as chunks, with each element's delivery
count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from raytopic.actors.payloads import Payload, encode_values
from raytopic.actors.segment_ring import Run, SegmentRing
from raytopic.actors.shared_cursor import Candidate, SharedCursor
from raytopic.actors.wire import Chunk

__all__ = ["SCAN_LIMIT", "take_shared"]

SCAN_LIMIT = 1000
"""New elements one take looks at when a filter or key order may pass some over
(a filter that matches nothing must not hold the actor for the whole ring)."""


def take_shared(
    cursor: SharedCursor,
    ring: SegmentRing,
    member: str,
    max_count: int,
    now: float,
    lease: float,
    *,
    keep: Callable[[Any], bool] | None = None,
    convert: Callable[[Any], Any] | None = None,
    key_order: bool = False,
    stop: int | None = None,
) -> list[Chunk]:
    """Deliver up to ``max_count`` elements to ``member`` (held under a lease of
    ``lease`` seconds from ``now``), as chunks in sequence order per source;
    new elements only below ``stop`` (a damaged range begins there)."""
    if cursor.floor < ring.head - 1:
        cursor.drop_below(ring.head)  # removed (overwrite, TTL, purge) before settled
    if max_count <= 0:
        return []
    tail = ring.tail if stop is None else min(ring.tail, stop - 1)
    ready = cursor.ready(now)
    if keep is None and not key_order and not ready:
        # The common case, element by element below it: new elements in a row.
        taken = cursor.hold_new(member, max_count, tail, now, lease)
        runs = ring.read(cursor.next - taken, taken) if taken else []
        return [Chunk(run.first, run.stamp, _converted(run.payload, convert)) for run in runs]
    located: dict[int, tuple[Run, int]] = {}
    decoded: dict[int, list[Any]] = {}  # id(run) -> its values, for the filter

    def offer(run: Run, offset: int) -> Candidate:
        sequence = run.first + offset
        located[sequence] = (run, offset)
        matches = True
        if keep is not None:
            values = decoded.get(id(run))
            if values is None:
                values = decoded[id(run)] = run.payload.decode()
            matches = bool(keep(values[offset]))
        key = None
        if key_order:
            keys = run.payload.keys
            key = None if keys is None or not keys[offset] else int(keys[offset])  # 0: no key
        return Candidate(sequence, key, matches)

    def offered() -> Iterator[Candidate]:
        for sequence in ready:
            yield offer(ring.get(sequence), 0)
        limit = max_count if keep is None and not key_order else max(max_count, SCAN_LIMIT)
        for run in ring.read(cursor.next, min(limit, tail - cursor.next + 1)):
            for offset in range(len(run.payload)):
                yield offer(run, offset)

    chosen = cursor.choose(member, offered(), max_count, now, lease, key_order=key_order)
    return _pack(chosen, located, convert)


def _pack(
    chosen: list[tuple[int, int]],
    located: dict[int, tuple[Run, int]],
    convert: Callable[[Any], Any] | None,
) -> list[Chunk]:
    """Chunks of the chosen elements: consecutive ones of one run share a chunk."""
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
        payload = _converted(run.payload.slice(start, offset), convert)
        counts = np.fromiter((count for _, count in chosen[index:stop]), dtype=np.int32)
        chunks.append(Chunk(chosen[index][0], run.stamp, payload, None, counts))
        index = stop
    return chunks


def _converted(payload: Payload, convert: Callable[[Any], Any] | None) -> Payload:
    """The payload's values through the reader's converter (if it has one)."""
    if convert is None:
        return payload
    return encode_values([convert(value) for value in payload.decode()])
