"""A shared group's place in one channel: per-element acknowledgement. No Ray.

Where a channel-owned group's cursor is one position (everything before it
is committed), a shared group's cursor keeps each element's fate, because
any member may take any element and acknowledges it alone:

- ``floor``: every sequence at or below it is done (acknowledged,
  dead-lettered, filtered out or removed). It is the group's low watermark
  for retention.
- ``next``: the first sequence never looked at; everything from it to the
  tail is the group's untouched *depth*.
- ``done``: sequences between the two that are done already (an ack
  that came before an earlier element's).
- ``held``: elements delivered and not yet acknowledged, each with its
  member, delivery count (the delivery's id: an ack names it) and ack deadline
  deadline.
- ``waiting``: elements to deliver again (nacked, their holder gone, their
  ack deadline passed, or passed over for key order), each with its delivery
  count so far and the time before which it is not redelivered.
- ``dead``: elements past ``max_deliveries``, until the dead-letter topic
  has them.

The channel actor scans candidates (:meth:`candidates`), decides which ones
a member gets (:meth:`choose`), and applies acks, nacks, expiries and
members leaving.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Candidate", "Held", "SharedCursor", "Waiting"]


@dataclass(slots=True)
class Held:
    """An element delivered to a member and not yet acknowledged."""

    member: str
    """The member holding it."""
    count: int
    """Its delivery count (1 on first delivery): the id of this delivery."""
    deadline: float
    """Monotonic time at which the ack deadline passes and the element is delivered again."""
    key: Hashable | None = None
    """Its ordering key (with ``ordering="key"``)."""


@dataclass(slots=True)
class Waiting:
    """An element to deliver (again)."""

    count: int
    """Deliveries so far (0: passed over for key order, never delivered)."""
    not_before: float = 0.0
    """Monotonic time before which it is not delivered (a nack's delay)."""
    key: Hashable | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    """An element the channel offers a member, in sequence order per source."""

    sequence: int
    key: Hashable | None = None
    """Its ordering key (None: none, or no key order)."""
    matches: bool = True
    """Whether the group's filter takes it (False: it is done, never delivered)."""


@dataclass(slots=True)
class SharedCursor:
    """One shared group's elements in one channel (see the module docstring).

    **Delivery**: an element is held by at most one member at a time; an ack or
    nack counts only from the member that holds it, for the delivery it
    names (its delivery count), so a late ack never finishes a redelivery.
    **Ordering**: with key order, an element is not delivered while an
    earlier element of its key is held by another member or waits.
    """

    floor: int
    next: int
    done: set[int] = field(default_factory=set)
    held: dict[int, Held] = field(default_factory=dict)
    waiting: dict[int, Waiting] = field(default_factory=dict)
    dead: dict[int, tuple[int, str]] = field(default_factory=dict)
    """sequence -> (deliveries, reason): to append to the dead-letter topic."""
    redelivered: int = 0
    """Deliveries beyond the first, so far."""
    dead_lettered: int = 0
    """Elements moved to the dead-letter topic, so far."""
    dead_serial: int = 0
    """Version of the last dead-letter append (its exactly-once number)."""
    life: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    """This cursor's own id (a reset or a re-created group makes a new cursor):
    its dead-letter appends are numbered within it."""
    sending: tuple[int, list[int]] | None = None
    """The dead-letter append under way: its version and sequences. Kept across
    a restart, so the same append is sent again under the same version, and
    the dead-letter channel skips it if it had landed."""
    _per_member: dict[str, int] = field(default_factory=dict)
    """Per member, how many elements it holds (kept with ``held``)."""

    @classmethod
    def starting_at(cls, next_sequence: int) -> SharedCursor:
        """A cursor whose first delivery will be ``next_sequence``."""
        return cls(floor=next_sequence - 1, next=next_sequence)

    # -- figures --------------------------------------------------------------------

    def depth(self, tail: int) -> int:
        """Elements not yet delivered (or to deliver again)."""
        return max(0, tail - self.next + 1) + len(self.waiting) + len(self.dead)

    @property
    def unacked(self) -> int:
        """Elements delivered and waiting for an ack or nack."""
        return len(self.held)

    def held_by(self, member: str) -> int:
        """Elements ``member`` holds here."""
        return self._per_member.get(member, 0)

    def holdings(self) -> dict[str, int]:
        """Per member, the elements it holds here."""
        return dict(self._per_member)

    def _hold(self, sequence: int, held: Held) -> None:
        self.held[sequence] = held
        self._per_member[held.member] = self._per_member.get(held.member, 0) + 1

    def _unhold(self, sequence: int) -> Held:
        held = self.held.pop(sequence)
        left = self._per_member[held.member] - 1
        if left:
            self._per_member[held.member] = left
        else:
            del self._per_member[held.member]
        return held

    def _holds(self, sequence: int, member: str, count: int) -> bool:
        held = self.held.get(sequence)
        return held is not None and held.member == member and held.count == count

    # -- delivering -----------------------------------------------------------------

    def ready(self, now: float) -> list[int]:
        """Waiting sequences deliverable now, ascending."""
        return sorted(s for s, w in self.waiting.items() if w.not_before <= now)

    def has_work(self, member: str, tail: int, now: float, *, key_order: bool = False) -> bool:
        """Whether a take by ``member`` would find something now (new elements may
        still be filtered out)."""
        if self.next <= tail:
            return True
        if not key_order:
            return any(w.not_before <= now for w in self.waiting.values())
        blocked = self._blocked_keys(member, now)
        return any(
            w.not_before <= now and (w.key is None or w.key not in blocked)
            for w in self.waiting.values()
        )

    def _blocked_keys(self, member: str, now: float) -> set[Hashable]:
        """Keys ``member`` may not take now: held by another member, or with an
        element whose nack delay still runs (a later one must not overtake it)."""
        blocked = {h.key for h in self.held.values() if h.key is not None and h.member != member}
        blocked.update(
            w.key for w in self.waiting.values() if w.key is not None and w.not_before > now
        )
        return blocked

    def choose(
        self,
        member: str,
        candidates: Iterable[Candidate],
        max_count: int,
        now: float,
        ack_timeout: float,
        *,
        key_order: bool = False,
    ) -> list[tuple[int, int]]:
        """Hand ``member`` up to ``max_count`` of ``candidates``: [(sequence, count)].

        ``candidates`` are the ready waiting elements, then new ones from
        ``next`` on, each source in sequence order. New elements looked at are
        passed (``next`` moves after them); the filter's misses are done;
        with ``key_order``, an element whose key is held by another member, or
        comes after a waiting or skipped element of its key, waits its turn.
        """
        chosen: list[tuple[int, int]] = []
        blocked = self._blocked_keys(member, now) if key_order else set()
        deadline = now + ack_timeout
        for candidate in candidates:
            if len(chosen) >= max_count:
                break
            sequence = candidate.sequence
            new = sequence >= self.next
            if new:
                self.next = sequence + 1
            if not candidate.matches:
                self.waiting.pop(sequence, None)
                self.mark_done(sequence)
                continue
            key = candidate.key if key_order else None
            if key is not None and key in blocked:
                if new:
                    self.waiting[sequence] = Waiting(0, 0.0, key)
                continue  # later elements of the key wait behind this one
            waiting = self.waiting.pop(sequence, None)
            count = 1 if waiting is None else waiting.count + 1
            if count > 1:
                self.redelivered += 1
            self._hold(sequence, Held(member, count, deadline, key))
            chosen.append((sequence, count))
        return chosen

    def hold_new(self, member: str, count: int, tail: int, now: float, ack_timeout: float) -> int:
        """The common take (no filter, no key order, nothing to deliver again): hand
        ``member`` the next ``count`` new elements (at most to ``tail``), each on
        its first delivery. Returns how many."""
        first = self.next
        last = min(tail, first + count - 1)
        if last < first:
            return 0
        deadline = now + ack_timeout
        held = self.held
        for sequence in range(first, last + 1):
            held[sequence] = Held(member, 1, deadline)
        self._per_member[member] = self._per_member.get(member, 0) + last - first + 1
        self.next = last + 1
        return last - first + 1

    # -- done -------------------------------------------------------------------

    def ack(self, sequence: int, member: str, count: int) -> bool:
        """Ack an element ``member`` holds under delivery ``count``; False if it
        does not (its ack deadline passed, it was delivered again, or it is acked)."""
        if not self._holds(sequence, member, count):
            return False
        self._unhold(sequence)
        self.mark_done(sequence)
        return True

    def nack(
        self,
        sequence: int,
        member: str,
        count: int,
        not_before: float,
        max_deliveries: int | None,
    ) -> bool:
        """Give back an element ``member`` holds, to deliver again from ``not_before``
        (or to dead-letter, past ``max_deliveries``); False if it does not hold it."""
        if not self._holds(sequence, member, count):
            return False
        held = self._unhold(sequence)
        self._return(sequence, held, not_before, max_deliveries, "negatively acknowledged")
        return True

    def extend(self, sequence: int, member: str, count: int, deadline: float) -> bool:
        """Move the ack deadline of an element ``member`` holds to ``deadline``."""
        if not self._holds(sequence, member, count):
            return False
        held = self.held[sequence]
        held.deadline = max(held.deadline, deadline)
        return True

    def release(self, member: str, max_deliveries: int | None, reason: str) -> list[int]:
        """Everything ``member`` holds goes back to the group (it closed or died)."""
        released = [s for s, h in self.held.items() if h.member == member]
        for sequence in released:
            self._return(sequence, self._unhold(sequence), 0.0, max_deliveries, reason)
        return released

    def expire(self, now: float, max_deliveries: int | None) -> list[int]:
        """Elements whose ack deadline passed go back to the group."""
        expired = [s for s, h in self.held.items() if h.deadline <= now]
        for sequence in expired:
            self._return(
                sequence, self._unhold(sequence), 0.0, max_deliveries, "its ack timeout expired"
            )
        return expired

    def _return(
        self, sequence: int, held: Held, not_before: float, limit: int | None, reason: str
    ) -> None:
        if limit is not None and held.count >= limit:
            self.dead[sequence] = (held.count, f"{reason} after {held.count} deliveries")
        else:
            self.waiting[sequence] = Waiting(held.count, not_before, held.key)

    def enforce_limit(self, max_deliveries: int | None, reason: str) -> None:
        """Waiting elements already delivered ``max_deliveries`` times go to the dead
        letters (they were held when their channel restarted)."""
        if max_deliveries is None:
            return
        for sequence, waiting in list(self.waiting.items()):
            if waiting.count >= max_deliveries:
                del self.waiting[sequence]
                self.dead[sequence] = (waiting.count, f"{reason} after {waiting.count} deliveries")

    def dead_batch(self, limit: int) -> tuple[int, list[int]]:
        """The next dead-letter append: the one under way, or a new one of at most
        ``limit`` dead elements under the next version."""
        if self.sending is None:
            self.dead_serial += 1
            self.sending = (self.dead_serial, sorted(self.dead)[:limit])
        return self.sending

    def dead_letter_failed(self) -> None:
        """The append under way was refused: the next one goes under a new version
        (a version is spent once a channel has answered it)."""
        self.sending = None

    def dead_lettered_now(self, sequences: Iterable[int]) -> None:
        """The dead-letter topic has these: they are done."""
        self.sending = None
        for sequence in sequences:
            if self.dead.pop(sequence, None) is not None:
                self.dead_lettered += 1
                self.mark_done(sequence)

    def mark_done(self, sequence: int) -> None:
        """``sequence`` needs nothing more from this group."""
        if sequence <= self.floor:
            return
        self.done.add(sequence)
        self._advance()

    def _advance(self) -> None:
        """Move the floor over the done elements just above it."""
        done = self.done
        floor = self.floor
        while floor + 1 in done:
            floor += 1
            done.discard(floor)
        self.floor = floor

    def forget(self, first: int, last: int) -> int:
        """Elements ``first..last`` are lost (a damaged stored record): mark every
        one of them, whatever its state, and read on after them. Returns how many
        had been delivered before (held, to deliver again, or dead)."""
        delivered = 0
        for sequence in [s for s in self.held if first <= s <= last]:
            self._unhold(sequence)
            delivered += 1
        for table in (self.waiting, self.dead):
            for sequence in [s for s in table if first <= s <= last]:
                del table[sequence]
                delivered += 1
        if self.sending is not None:
            self.sending = (self.sending[0], [s for s in self.sending[1] if not first <= s <= last])
        self.next = max(self.next, last + 1)
        self.done.update(range(max(first, self.floor + 1), last + 1))
        self._advance()
        return delivered

    def drop_below(self, head: int) -> int:
        """Elements below ``head`` are gone (a purge, overwrite or TTL): forget them.
        Returns how many the group was not done with."""
        if head - 1 <= self.floor:
            return 0
        lost = 0
        for sequence in [s for s in self.held if s < head]:
            self._unhold(sequence)
            lost += 1
        for table in (self.waiting, self.dead):
            for sequence in [s for s in table if s < head]:
                del table[sequence]
                lost += 1
        lost += max(0, head - self.next)
        self.done = {s for s in self.done if s >= head}
        self.next = max(self.next, head)
        self.floor = head - 1
        self._advance()
        return lost

    # -- state ----------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """What a store keeps (JSON-ready). Held elements are kept as waiting, with
        their counts: after a restart they are delivered again, counted."""
        waiting = {
            str(s): [w.count, w.key if _plain(w.key) else None] for s, w in self.waiting.items()
        }
        for sequence, held in self.held.items():
            waiting[str(sequence)] = [held.count, held.key if _plain(held.key) else None]
        return {
            "floor": self.floor,
            "next": self.next,
            "settled": _ranges(self.done),
            "waiting": waiting,
            "dead": {str(s): [n, reason] for s, (n, reason) in self.dead.items()},
            "redelivered": self.redelivered,
            "dead_lettered": self.dead_lettered,
            "dead_serial": self.dead_serial,
            "sending": self.sending,
            "life": self.life,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SharedCursor:
        """A cursor as a restarted channel resumes it (see :meth:`to_state`)."""
        cursor = cls(floor=int(state["floor"]), next=int(state["next"]))
        for first, last in state["settled"]:
            cursor.done.update(range(int(first), int(last) + 1))
        for sequence, (count, key) in state["waiting"].items():
            cursor.waiting[int(sequence)] = Waiting(int(count), 0.0, key)
        for sequence, (count, reason) in state["dead"].items():
            cursor.dead[int(sequence)] = (int(count), str(reason))
        cursor.redelivered = int(state["redelivered"])
        cursor.dead_lettered = int(state["dead_lettered"])
        cursor.dead_serial = int(state["dead_serial"])
        cursor.life = str(state["life"])
        sending = state["sending"]
        if sending is not None:
            cursor.sending = (int(sending[0]), [int(s) for s in sending[1]])
        return cursor


def _plain(key: Hashable | None) -> bool:
    return key is None or isinstance(key, int | str)


def _ranges(sequences: set[int]) -> list[tuple[int, int]]:
    """``sequences`` as sorted, inclusive (first, last) ranges."""
    ranges: list[tuple[int, int]] = []
    for sequence in sorted(sequences):
        if ranges and ranges[-1][1] + 1 == sequence:
            ranges[-1] = (ranges[-1][0], sequence)
        else:
            ranges.append((sequence, sequence))
    return ranges
