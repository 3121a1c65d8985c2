"""What both kinds of readers of a channel share: the reader record, the one reader
interface, the loss notice, and the filter-and-convert pick. No Ray.

A channel has two kinds of readers behind one interface (:class:`ReaderMode`):
readers that own their channel (anonymous subscribers, and the members of
channel-owned groups: ``raytopic.actors.owned_readers``) and the members of
shared groups, who are handed elements one by one
(``raytopic.actors.shared_groups``). ``raytopic.actors.readers`` picks the
mode of each reader once per call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from raytopic.actors.receive_session import SessionSpec
from raytopic.actors.segment_ring import Run
from raytopic.core.errors import DataLossError
from raytopic.core.payloads import Payload, decode_checked, encode_values
from raytopic.core.protocol import (
    Chunk,
    CursorState,
    Delivery,
    Poison,
    ReaderLease,
    ReaderSpec,
    Take,
)
from raytopic.core.records import CommitResult

__all__ = [
    "LossNotice",
    "Picked",
    "Reader",
    "ReaderMode",
    "pick",
]


@dataclass(slots=True)
class Reader:
    """A subscriber as this channel knows it."""

    reader_id: str
    spec: ReaderSpec
    cursor: Any  # a Cursor for anonymous readers; members use their group's
    filter: Callable[[Any], bool] | None = None
    converter: Callable[[Any], Any] | None = None
    resequence: Any = None

    @property
    def group(self) -> str | None:
        """The reader's group, None for an anonymous subscriber."""
        return self.spec.group

    @property
    def session_spec(self) -> SessionSpec:
        """How its receive sessions behave."""
        spec = self.spec
        return SessionSpec(self.reader_id, spec.complete_on_empty, spec.window, self.resequence)


class ReaderMode(Protocol):
    """What a reader does at a channel, by the kind of its group (owned or shared).

    ``lease`` is the lease a member holds for this channel (None for an
    anonymous reader); ``check=False`` skips the ownership check (a reader
    opening, a handle reading its own figures).
    """

    @property
    def polls_clock(self) -> bool:
        """Whether what the reader may take changes with the clock (a TTL, a nack's
        delay), so a wait for a change also looks again now and then."""
        ...

    def reader_closed(self, reader: Reader) -> None:
        """The reader closed: what it holds goes back."""
        ...

    def state(self, reader: Reader, lease: ReaderLease, *, check: bool = True) -> CursorState:
        """The reader's position here, shaped as a cursor's."""
        ...

    def reported(self, reader: Reader, lease: ReaderLease) -> CursorState:
        """The reader's position as the handle reports it (heads, tails, remaining
        messages, last commits), checked against ``lease`` if one is given."""
        ...

    async def take(self, reader: Reader, take: Take) -> Delivery:
        """Hand the reader up to ``take.max_count`` elements (see ``Take``)."""
        ...

    def commit(
        self,
        reader: Reader | None,
        sequence: int,
        lease: ReaderLease,
        jumps: int | None,
        bound: int | None,
    ) -> CommitResult:
        """Commit ``sequence`` and every earlier one (None: a closed reader: not the owner);
        ``jumps``: the count an element's commit read it at (None: a bare position);
        no further than ``bound`` (None: no bound).

        Raises:
            GroupModeError: the mode takes no commits (a shared group acks instead).
        """
        ...

    def seek(
        self, reader: Reader, lease: ReaderLease, target: int | float, by_time: bool, commit: bool
    ) -> tuple[int, int]:
        """Move the reader's cursor; return (position set, new jump count).

        Raises:
            GroupModeError: the mode has no cursor per reader to move (a shared group).
        """
        ...

    async def seek_to_committed(self, reader: Reader, lease: ReaderLease) -> tuple[int, int]:
        """Move the reader's cursor back to its commit; return (the commit, new jump count).

        Raises:
            GroupModeError: the mode has no cursor per reader to move (a shared group).
        """
        ...

    def report_poison(
        self, reader: Reader, lease: ReaderLease, jumps: int, poison: Poison, skipped: bool
    ) -> bool:
        """The reader could not decode an element it was handed; False if not taken."""
        ...

    def reset(self, group: str, position: int) -> tuple[int, dict[str, Any]]:
        """The group's positions move after ``position``; returns (position, previous
        state for :meth:`restore`).

        Raises:
            GroupNotFoundError: no such group in this mode.
        """
        ...

    def restore(self, group: str, previous: dict[str, Any]) -> bool:
        """Undo a reset; False if the group is gone."""
        ...


@dataclass(slots=True)
class LossNotice:
    """A restart without a store lost elements: each reader is told once."""

    error: DataLossError | None = None
    unaware: set[str] = field(default_factory=set)

    def tell(self, reader_id: str) -> DataLossError | None:
        """The loss to raise to ``reader_id`` now (once), or None."""
        if self.error is None or reader_id not in self.unaware:
            return None
        self.unaware.discard(reader_id)
        return self.error


class Picked(NamedTuple):
    """What :func:`pick` took from a run of elements."""

    chunks: list[Chunk]
    next_sequence: int
    """Where to read on: after the last element looked at, or AT a poison element."""
    poison: Poison | None = None
    """The poison element the pick stopped before (not skipping), if any."""
    skipped: tuple[Poison, ...] = ()
    """The poison elements passed over (skipping)."""


def pick(
    runs: list[Run],
    keep: Callable[[Any], bool] | None,
    convert: Callable[[Any], Any] | None,
    max_count: int,
    *,
    skip_poison: bool = False,
) -> Picked:
    """Up to ``max_count`` elements of ``runs`` that ``keep`` accepts, converted.

    The filter and converter see decoded values; what is delivered keeps its
    payload kind unless a converter made new values. An element that cannot
    be decoded here, or on which ``keep`` or ``convert`` raises, is poison
    (``raytopic.actors.poison``): the pick stops before it, or passes over it
    (``skip_poison``).
    """
    chunks: list[Chunk] = []
    sequence = runs[0].first if runs else 0
    found = 0
    poison: Poison | None = None
    skipped: list[Poison] = []
    for run in runs:
        values: list[Any] = []
        failures: dict[int, BaseException] = {}
        if keep is not None or convert is not None:
            values, failures = decode_checked(run.payload)
        picked: list[int] = []
        converted: list[Any] = []
        for offset in range(len(run.payload)):
            at = run.sequence_at(offset)
            try:
                if offset in failures:
                    raise failures[offset]
                if keep is not None and not keep(values[offset]):
                    sequence = at + 1
                    continue
                if convert is not None:
                    converted.append(convert(values[offset]))
            except BaseException as error:  # SystemExit too: a user's function costs its element
                if not skip_poison:
                    poison = Poison.of(at, error)
                    sequence = poison.sequence
                    break
                skipped.append(Poison.of(at, error))
                sequence = at + 1
                continue
            sequence = at + 1
            picked.append(offset)
            found += 1
            if found >= max_count:
                break
        if picked:
            chunks.append(_picked_chunk(run, picked, converted if convert is not None else None))
        if found >= max_count or poison is not None:
            break
    return Picked(chunks, sequence, poison, tuple(skipped))


def _picked_chunk(run: Run, picked: list[int], converted: list[Any] | None) -> Chunk:
    """The elements of ``run`` at offsets ``picked`` (``converted``: their new values)."""
    if converted is not None:
        keys = run.payload.keys  # a converted value keeps its key
        payload: Payload = encode_values(
            converted, None if keys is None else [keys[offset] for offset in picked]
        )
    elif len(picked) == len(run.payload):
        payload = run.payload
    else:
        payload = run.payload.take(picked)
    stamps = None if run.stamps is None else run.stamps[picked]
    if run.sequences is not None:
        sequences = run.sequences[picked]
    elif picked[-1] - picked[0] + 1 == len(picked):
        sequences = None
    else:
        sequences = np.array(picked, dtype=np.int64) + run.first
    first = run.sequence_at(picked[0])
    stamp = run.stamp if stamps is None else float(stamps[0])
    return Chunk(first, stamp, payload, sequences, None, stamps)


def delivered_count(chunks: list[Chunk]) -> tuple[int, int]:
    """(elements, bytes) in ``chunks``."""
    return (
        sum(len(chunk.payload) for chunk in chunks),
        sum(chunk.payload.nbytes for chunk in chunks),
    )
