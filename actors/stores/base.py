"""The store contract: what a channel asks of its backing store (Hazelcast RingbufferStore shape).

A store keeps what a channel appended, so a channel that restarts (after its
process, or its node, died) comes back with every acknowledged element, every
group's committed position and the publishers' retry records.

A user's store is any object with the seed's four methods (``store``,
``store_all``, ``load``, ``largest_sequence``): :class:`RingbufferStore` is a
runtime-checkable ``typing.Protocol`` of those four, so duck typing is enough
and inheriting from it is optional. The channel talks to every store through
:class:`ChannelStore`, an adapter that uses the store's own batch-level
methods where it has them (the embedded store,
:class:`raytopic.actors.stores.segment_log.SegmentLogStore`, keeps whole
batches as they arrived) and defaults built on the four where it does not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from raytopic.core.payloads import Payload, PickledValues

if TYPE_CHECKING:
    from raytopic.actors.stores.state_log import StateChange

__all__ = ["OPTIONAL_METHODS", "REQUIRED_METHODS", "ChannelStore", "RingbufferStore", "StoredBatch"]


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """One append as a store keeps it."""

    first: int
    """Sequence of the payload's first element (of the first position a compacted
    batch covers)."""
    stamp: float
    """Append time (seconds since the epoch), one for the batch (a compacted one's:
    its first element's)."""
    payload: Payload
    """The elements: pickled values or Arrow rows, as the channel holds them."""
    epoch: int = 0
    """The channel incarnation that appended it."""
    publisher_id: str = ""
    """The publisher whose batch it is ("" for a ring buffer add)."""
    batch: int = -1
    """The publisher's batch number on this channel (-1 for a ring buffer add)."""
    span: int | None = None
    """Positions from ``first`` on that the batch covers, when more than its elements
    (compaction removed the others: ``sequences`` and ``stamps`` say where each one
    is); None: one element per position."""
    sequences: np.ndarray | None = None
    """Each element's sequence (a compacted batch), or None: ``first`` on, one by one."""
    stamps: np.ndarray | None = None
    """Each element's append time (a compacted batch), or None: all ``stamp``."""

    @property
    def last(self) -> int:
        """Sequence of the last position the batch covers."""
        return self.first + self.covered - 1

    @property
    def covered(self) -> int:
        """How many positions the batch covers (its elements, unless compacted)."""
        return len(self.payload) if self.span is None else self.span


@runtime_checkable
class RingbufferStore(Protocol):
    """The shape of a channel's backing store: the seed's four methods.

    Any object with these methods is a store (``isinstance(obj,
    RingbufferStore)`` checks that they are there); subclassing is optional
    and gives ``store_all`` a default (``store`` one by one). Pass
    ``create_topic(store=factory)`` where ``factory(topic_name, channel)``
    returns one store per channel (each channel actor calls it once, in its
    own process). An exception from ``store``/``store_all`` rejects the add:
    the channel appends nothing and stays alive (the store must keep itself
    consistent, as in the seed).

    A store may also have any of the batch-level methods of
    :class:`ChannelStore` (``store_batch``, ``load_batches``, ``sync``,
    ``save_state``, ``load_state``, ...); the channel uses them where they
    exist and defaults over the four where not. Have ``store_batch`` and
    ``load_batches`` to keep publisher ids and batch numbers (then a retried
    publish is recognised across a restart), and ``save_state`` /
    ``load_state`` to keep group positions durably: without them a restarted
    channel has its elements back and gets its groups from the coordinator,
    starting them at the head.

    The channel's state is a dict of sections (epoch, groups, publishers,
    readers, ...: see :mod:`raytopic.actors.stores.state_log`). It hands the
    whole state to ``save_state(state)`` when it starts an epoch, and each
    change after that (a commit moves one group's cursor) to
    ``append_state(changes)``, a sequence of
    :class:`~raytopic.actors.stores.state_log.StateChange`. A store with
    ``save_state`` but no ``append_state`` gets the whole state, changes
    applied, on every change (:meth:`ChannelStore.append_state`); one with its
    own ``append_state`` may keep just the changes (the embedded store logs
    them and rewrites the whole state now and then), as long as
    ``load_state()`` returns the last state saved with every change appended
    since applied, and a change is durable when ``append_state`` returns.

    ``destroy()`` (optional) removes everything the store keeps, when its topic
    is destroyed (``Topic.destroy``): the store is empty afterwards and a topic
    made again of that name starts on it. The channel first saves a state that
    marks the topic destroyed, on every channel, and only then calls
    ``destroy``; a topic made over stores of which one still holds that mark
    has them all destroyed first, so a destroy stopped midway is finished, never
    half undone. Without ``destroy`` the store's elements stay: a topic made
    again over it starts after them, with its readers at its first position
    (without ``save_state`` either, nothing marks them, and such a topic takes
    them as its own).
    """

    def store(self, sequence: int, item: Any) -> None:
        """Keep ``item`` at ``sequence``."""
        raise NotImplementedError

    def store_all(self, first_sequence: int, items: Sequence[Any]) -> None:
        """Keep ``items`` from ``first_sequence`` on (default: ``store`` one by one)."""
        for offset, item in enumerate(items):
            self.store(first_sequence + offset, item)

    def load(self, sequence: int) -> Any:
        """The item at ``sequence``, or None when the store does not have it."""
        raise NotImplementedError

    def largest_sequence(self) -> int:
        """Sequence of the newest stored item, -1 when the store is empty."""
        raise NotImplementedError


REQUIRED_METHODS = ("store", "store_all", "load", "largest_sequence")
"""What makes an object a store (the seed's interface)."""

OPTIONAL_METHODS = (
    "store_batch",
    "sync",
    "load_batches",
    "first_sequence",
    "first_of_newest",
    "truncate",
    "save_state",
    "append_state",
    "load_state",
    "damaged",
    "release_cache",
    "close",
    "destroy",
)
"""Batch-level methods a store may have; :class:`ChannelStore` supplies the rest."""


class ChannelStore:
    """What a channel calls on its store: the store's own method where it has one,
    else a default built on the seed's four.

    An adapter, not a base class: a user's store need not inherit anything.
    The defaults keep the channel's small state in memory only.

    Args:
        store: Any object with the four methods of :class:`RingbufferStore`.
    """

    def __init__(self, store: RingbufferStore) -> None:
        self.inner = store
        """The store adapted."""
        self._state: dict[str, Any] | None = None  # kept by the in-memory default
        self._mirror: dict[str, Any] | None = None  # the state changes are applied to
        own = {
            name: getattr(store, name)
            for name in OPTIONAL_METHODS
            if callable(getattr(store, name, None))
        }
        self._save_whole = own.get("save_state", self._keep_state)
        if "append_state" not in own:
            # The default append_state applies changes to the state saved last:
            # a whole new state saved must go through this adapter to reach it.
            own.pop("save_state", None)
        # Its own destroy is called through this adapter, which forgets its copies.
        own.pop("destroy", None)
        # The store's own methods win: bound once here, so a call costs what a
        # direct call does.
        for name, method in own.items():
            setattr(self, name, method)

    # -- the seed's four ------------------------------------------------------------------

    def store(self, sequence: int, item: Any) -> None:
        """Keep ``item`` at ``sequence``."""
        self.inner.store(sequence, item)

    def store_all(self, first_sequence: int, items: Sequence[Any]) -> None:
        """Keep ``items`` from ``first_sequence`` on."""
        self.inner.store_all(first_sequence, items)

    def load(self, sequence: int) -> Any:
        """The item at ``sequence``, or None."""
        return self.inner.load(sequence)

    def largest_sequence(self) -> int:
        """Sequence of the newest stored item, -1 when empty."""
        return self.inner.largest_sequence()

    # -- defaults of the batch-level methods ------------------------------------------------

    def store_batch(self, batch: StoredBatch) -> None:
        """Keep one append (default: ``store_all`` of its decoded values)."""
        self.inner.store_all(batch.first, batch.payload.decode())

    def sync(self) -> None:
        """Make every batch stored so far survive a crash (default: nothing to do).
        Called off the channel's event loop; it may block."""

    def load_batches(self, start: int) -> Iterator[StoredBatch]:
        """Stored batches from ``start`` on, in sequence order (default: one
        ``load`` per sequence up to ``largest_sequence()``, a batch of one each)."""
        for sequence in range(max(start, 0), self.inner.largest_sequence() + 1):
            item = self.inner.load(sequence)
            if item is not None:
                # No time stamp kept: now (a stamp of 0 would expire at once under a TTL).
                yield StoredBatch(sequence, time.time(), PickledValues.from_values([item]))

    def first_sequence(self) -> int:
        """Sequence of the oldest element the store still has (default: 0)."""
        return 0

    def first_of_newest(self, count: int) -> int:
        """Where the newest ``count`` elements begin (default: ``count`` positions
        before the end: one element per position)."""
        return self.largest_sequence() + 1 - count

    def truncate(self, below: int) -> None:
        """The ring released everything below ``below``; the store may drop it
        (default: keep it). See ``store_retention`` of the embedded store."""

    def save_state(self, state: dict[str, Any]) -> None:
        """Keep the channel's small state (epoch, group positions, publisher
        tracks, readers) durably, replacing the whole last one. Called off the
        event loop; it may block (default: the store's ``save_state`` if it has
        one, else in memory only). ``state`` is kept as it is: the caller
        hands over a dict it no longer changes."""
        self._save_whole(state)
        self._mirror = state

    def append_state(self, changes: Sequence[StateChange]) -> None:
        """Keep ``changes`` to the state durably (all or none), on top of the state
        saved last and the changes appended since. Called off the event loop; it
        may block.

        Default: the changes are applied to the last state (loaded from the
        store once, copied where changed: a state handed to ``save_state`` is
        never altered afterwards) and the result goes to ``save_state``, so a
        store with ``save_state`` / ``load_state`` alone rewrites the whole
        state, and one with neither keeps it in memory.

        Raises:
            StoreError: the changes do not fit the state; or whatever the
                store's ``save_state`` raises (the state stays as it was).
        """
        # Imported here: state_log builds on frames, which builds on this module.
        from raytopic.actors.stores.state_log import with_changes

        current = self._mirror if self._mirror is not None else (self.load_state() or {})
        changed = with_changes(current, changes)
        self._save_whole(changed)
        self._mirror = changed

    def _keep_state(self, state: dict[str, Any]) -> None:
        """``save_state`` of a store without one: in memory only."""
        self._state = state

    def load_state(self) -> dict[str, Any] | None:
        """The state last saved, changes appended since applied, or None."""
        return self._state

    def damaged(self) -> list[tuple[int, int]]:
        """Sequence ranges ``(first, last)`` found corrupt (default: none)."""
        return []

    def release_cache(self) -> None:
        """The channel loaded what it needs: forget what was read while opening
        (default: nothing kept)."""

    def close(self) -> None:
        """Release files and threads (the channel is going away)."""

    def destroy(self) -> None:
        """Remove everything the store keeps: its topic was destroyed (the store's own
        ``destroy``; the store is empty afterwards). Called off the event loop; it may
        block. Default: nothing can be removed (the elements stay; the state the
        channel saved last, marking the topic destroyed, stays too)."""
        remove = getattr(self.inner, "destroy", None)
        if callable(remove):
            remove()
            self._state = self._mirror = None
