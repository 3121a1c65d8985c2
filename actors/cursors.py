"""A reader's place in one channel, and the rules that move it. No Ray.

A *cursor* belongs to an anonymous subscriber (one per subscriber and
channel) or to a subscriber group (one per group and channel, shared by
whichever member owns the channel). It keeps the next sequence to deliver
and the last committed one; the channel actor applies these rules to it.

Sequences here are plain ints; ``-1`` and ``head - 1`` mean "before the first".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from raytopic.actors.done_ranges import DoneRanges
from raytopic.actors.poison import PoisonMark
from raytopic.core.protocol import Lease, Poison
from raytopic.core.records import CommitStatus

__all__ = ["Cursor", "bounded", "clamp"]

_UNREAD_RANGES_KEPT = 32
"""Passed-over ranges a cursor tracks exactly (a reader that never commits
would otherwise grow the list with every seek or filtered take)."""


def bounded(sequence: int, bound: int | None) -> int:
    """The sequence a commit of ``sequence`` reaches under ``bound`` (None: no bound)."""
    return sequence if bound is None or bound >= sequence else bound


def clamp(sequence: int, head: int, tail: int) -> int:
    """A "next is the one after" position, clamped to ``[head - 1, tail]``."""
    return max(head - 1, min(sequence, tail))


@dataclass(slots=True)
class Cursor:
    """A reader's position in one channel.

    Attributes:
        next: The next sequence to deliver.
        committed: Resume point: a (re)joining group member reads from
            ``committed + 1``.
        has_commit: Whether ``committed`` came from a commit (or a seek or
            reset that sets it), rather than from where the cursor started.
        jumps: Bumped on every seek, reset and change of owner (every jump of
            the read position); deliveries carry it, so a handle can drop
            what it prefetched before. (Not the channel's *epoch*, which
            counts the channel actor's incarnations.)
        owner: For a group cursor, the current lease (None: nobody owns it).
        reset_floor: After a group reset, the position it was reset to;
            commits below it were received before the reset (REJECTED).
        delivered_high: Highest sequence delivered since the last reset; a
            commit above it was received before the reset or never (REJECTED).
        reset_jumps: The jump count the last reset left (0: none). An
            element's commit carries the count it was read at: one read under
            a lower count was received before the reset (REJECTED), whatever
            was delivered since (the position rule above is for bare positions).
        unread: Ranges ``(first, last)`` above the commit that were passed
            over without being delivered (a seek forward, a filter's misses
            after the last match of a take): behind the read position but
            not unacknowledged, so the window does not wait for their commit.
            (A filter's misses are done instead: see ``done``.)
        done: Positions above the commit that need no commit (see
            ``raytopic.actors.done_ranges``): acknowledged one by one
            (:meth:`ack`), a filter's misses, a damaged record's. The commit
            advances over those right after it; they are not unacknowledged,
            and not delivered again. A seek's range is not done: the commit
            does not pass it by itself.
        poison: A poison element the cursor stops before (see
            ``raytopic.actors.poison``); not kept by a store (a restarted
            channel finds it again).
        unseen: ``(position, jumps)``: a reply that carried ``position`` never
            reached its reader's user (see ``Take.unseen``); under that jump
            count, commits stop below it until a take serves it again. Not kept
            by a store (a restarted channel's sessions read again after the commit).
    """

    next: int
    committed: int
    has_commit: bool = False
    jumps: int = 0
    owner: Lease | None = None
    reset_floor: int | None = None
    delivered_high: int = -1
    reset_jumps: int = 0
    unread: list[tuple[int, int]] = field(default_factory=list)
    done: DoneRanges = field(default_factory=DoneRanges)
    poison: PoisonMark | None = None
    unseen: tuple[int, int] | None = None

    @classmethod
    def starting_at(cls, next_sequence: int) -> Cursor:
        """A cursor whose first delivery will be ``next_sequence``."""
        return cls(next=next_sequence, committed=next_sequence - 1)

    @property
    def unacked(self) -> int:
        """Delivered but not committed (0 when the commit is ahead)."""
        skipped = sum(
            min(last, self.next - 1) - max(first, self.committed + 1) + 1
            for first, last in self.unread
            if last > self.committed and first < self.next
        )
        if self.done:
            skipped += self.done.count(self.committed + 1, self.next - 1)
        return max(0, self.next - 1 - self.committed - skipped)

    def passed_over(self, first: int, last: int) -> None:
        """Record ``first..last`` as read past without delivery (see ``unread``)."""
        if first > last:
            return
        unread = self.unread
        if unread and unread[-1][1] + 1 >= first:
            unread[-1] = (unread[-1][0], max(unread[-1][1], last))
        else:
            unread.append((first, last))
        if len(unread) > _UNREAD_RANGES_KEPT:
            # Join the two oldest ranges: what was delivered between them counts
            # as passed over. The window may then admit a few more elements; it
            # never waits for elements nobody received.
            (oldest_first, _), (_, next_last) = unread[0], unread[1]
            unread[0:2] = [(oldest_first, next_last)]

    def missed(self, first: int, last: int) -> None:
        """``first..last`` were read and not delivered (a filter's misses): done."""
        self.done.add(first, last)

    def _forget_unread(self) -> None:
        """Keep only the unread ranges between the commit and the read position."""
        if self.unread:
            kept = (
                (max(first, self.committed + 1), min(last, self.next - 1))
                for first, last in self.unread
            )
            self.unread = [(first, last) for first, last in kept if first <= last]

    def delivered(self, last: int, next_sequence: int) -> None:
        """Record a delivery that ended at ``last``; read on from ``next_sequence``."""
        self.next = next_sequence
        if last > self.delivered_high:
            self.delivered_high = last
        self._served_again(next_sequence)

    def hold_commits_below(self, sequence: int) -> None:
        """A reply that carried ``sequence`` never reached the user (``Take.unseen``):
        commits stop below it until a take serves it again."""
        held = self.unseen
        if held is None or held[1] != self.jumps or sequence < held[0]:
            self.unseen = (sequence, self.jumps)

    def commit_bound(self, bound: int | None, jumps: int | None = None) -> int | None:
        """``bound`` lowered below an element a lost reply carried (see ``unseen``), for
        a commit of what was read under ``jumps`` (None: a bare position). A hold
        bounds every commit while the read position stands under its count, and a
        commit of a read under its count after a jump too: a transaction's consumed
        commit is applied after it decided, and its member may have closed meanwhile
        (the cursor jumped) before the lost element was served again."""
        held = self.unseen
        if held is None or held[1] not in (self.jumps, jumps):
            return bound
        return held[0] - 1 if bound is None else min(bound, held[0] - 1)

    def _served_again(self, next_sequence: int) -> None:
        """The read position moved past what a lost reply carried: it was served again."""
        if self.unseen is not None and next_sequence > self.unseen[0]:
            self.unseen = None

    def commit(
        self, sequence: int, tail: int, jumps: int | None = None, bound: int | None = None
    ) -> CommitStatus:
        """Apply a commit of ``sequence`` (ownership already checked); ``jumps``: the
        count of the element's read (None: a bare position). It goes no further than
        ``bound``: a resequencing reader's hand-over mark, below which every element
        was handed to its user (the commit of an element handed over before an
        earlier one of its channel stops short of that one: see :func:`bounded`)."""
        if sequence > tail or (jumps is not None and jumps < self.reset_jumps):
            return CommitStatus.REJECTED
        if self.reset_floor is not None and not (
            self.reset_floor <= sequence <= self.delivered_high
        ):
            return CommitStatus.REJECTED
        sequence = bounded(sequence, self.commit_bound(bound, jumps))
        if sequence <= self.committed and self.has_commit:
            return CommitStatus.ALREADY_COMMITTED
        if sequence <= self.committed:
            # Below the start point of a fresh cursor: nothing to move, but it
            # is now a commit the reader made.
            self.has_commit = True
            return CommitStatus.ALREADY_COMMITTED
        self.committed = sequence
        self.has_commit = True
        self._moved()
        return CommitStatus.COMMITTED

    def ack(self, sequence: int, tail: int, jumps: int | None = None) -> CommitStatus:
        """Mark ``sequence`` done alone (its reader's ``Element.ack``): the commit
        advances over it once every earlier position is committed or done.
        Refused (REJECTED) as :meth:`commit` refuses; ALREADY_COMMITTED at or below
        the commit; else COMMITTED (done, whether the commit moved or not)."""
        if sequence > tail or (jumps is not None and jumps < self.reset_jumps):
            return CommitStatus.REJECTED
        if self.reset_floor is not None and not (
            self.reset_floor <= sequence <= self.delivered_high
        ):
            return CommitStatus.REJECTED
        if sequence <= self.committed:
            return CommitStatus.ALREADY_COMMITTED
        self.done.add(sequence, sequence)
        if self.done and self.done.ranges[0][0] == self.committed + 1:
            self.has_commit = True
            self._moved()
        return CommitStatus.COMMITTED

    def consumed(
        self,
        sequence: int,
        tail: int,
        done: Iterable[tuple[int, int]],
        jumps: int | None = None,
    ) -> CommitStatus:
        """A transaction's consumed commit (``ConsumedCommit``): commit ``sequence``, a
        bare position read under ``jumps`` (None: now; ownership was checked when it
        prepared), and mark ``done`` the positions the transaction consumed above where
        the commit stops: they are not delivered again, and the commit moves over them
        once contiguous. A commit stops below an element its member has not handed
        over (a resequencing member's hand-over mark, applied by its holder) or whose
        reply Ray dropped (``unseen``): that one is delivered again, not what the
        transaction consumed. The read position moves past the commit (a member that
        took the channel since read nothing: it waited for this). Nothing is done if
        the commit is REJECTED."""
        status = self.commit(sequence, tail, bound=self.commit_bound(None, jumps))
        if status is CommitStatus.REJECTED:
            return status
        # After a group reset, what was read before it is read again: done only up to
        # what was delivered since (as commit() and ack() refuse a position above it).
        high = tail if self.reset_floor is None else min(tail, self.delivered_high)
        for first, last in done:
            self.done.add(max(first, self.committed + 1), min(last, high), firm=True)
        if self.done and self.done.ranges[0][0] <= self.committed + 1:
            self._moved()
        self.read_past_commit()
        return status

    def over_gaps(self, first_at: Callable[[int], int]) -> bool:
        """A compacted channel's commit moves on over positions compaction left empty
        (nothing there to finish, nor to deliver again) and the done positions after
        each, up to the read position; ``first_at(p)`` is the position of the first
        element at or after ``p``. Returns whether the commit moved.

        A read marks the gaps it passes done, but a cursor keeps only so many done
        ranges (``DONE_RANGES_KEPT``): past them, acks alone would leave the commit at
        the first gap forgotten."""
        moved = False
        while self.committed + 1 < self.next:
            first = min(first_at(self.committed + 1), self.next)
            if first <= self.committed + 1:
                break
            self.committed = first - 1
            self.has_commit = True
            self._moved()
            moved = True
        return moved

    def _moved(self) -> None:
        """The commit moved: on over the done positions right after it that the read
        position passed (see ``DoneRanges.advance``)."""
        if self.done:
            self.committed = self.done.advance(self.committed, self.next - 1)
        self._forget_unread()

    def read_past_commit(self) -> None:
        """Read on after the commit if the read position is at or below it: what is
        committed is never delivered again. (A commit may pass the read position: a
        commit of elements received before the channel restarted from its store,
        which recovered an older commit and reads on after that one.)"""
        if self.next <= self.committed:
            self.next = self.committed + 1

    def skip_done(self) -> int | None:
        """Move the read position past done positions it stands at (never delivered
        again; the commit moves over them if they are right after it); return how
        many may be read before the next done ones (None: no bound)."""
        if not self.done:
            return None
        ahead = self.done.range_at(self.next)
        if ahead is not None and ahead[0] <= self.next:
            self.next = ahead[1] + 1
            if ahead[0] <= self.committed + 1:
                self.has_commit = True
                self._moved()
            ahead = self.done.range_at(self.next)
        return None if ahead is None else ahead[0] - self.next

    def advance(self, sequence: int) -> bool:
        """A stream's commit (``raytopic.core.stream_log``): read and commit positions
        move up to ``sequence``, never back (the stream read the range itself, not
        through takes). Returns whether the commit moved."""
        if sequence <= self.committed and self.has_commit:
            return False
        self.committed = max(self.committed, sequence)
        self.has_commit = True
        self._moved()
        self.next = max(self.next, self.committed + 1)
        return True

    def seek(self, position: int, head: int, tail: int, *, commit: bool) -> int:
        """Move so the next delivery is the first after ``position``; return it clamped.

        Seeking back before the commit rolls the commit back; ``commit=True``
        sets the commit to the new position either way.
        """
        position = clamp(position, head, tail)
        self.passed_over(self.next, position)
        self.done.forget_above(position)  # read again from there
        self.next = position + 1
        if commit or position < self.committed:
            self.committed = position
            # Rolling back moves the resume point, but is not a commit of its own.
            self.has_commit = self.has_commit or commit
        self._forget_unread()
        if self.reset_floor is not None:
            # The reader chose a new place: what it receives from here on is
            # committable even if the group was reset before.
            self.reset_floor = min(self.reset_floor, position)
            self.delivered_high = max(self.delivered_high, position)
        self.jumps += 1
        return position

    def reset(self, position: int, head: int, tail: int) -> int:
        """A group reset: read and commit both move to ``position`` (clamped)."""
        position = clamp(position, head, tail)
        self.committed = position
        self.has_commit = True
        self.done = DoneRanges()  # read again from there: nothing above it is done
        self._read_again_after(position)
        return position

    def reset_to_commit(self) -> int:
        """A reader's own reset to its commit (an aborted transaction's inputs): what was
        delivered since is delivered again, and a commit of it is REJECTED until then,
        as after a group reset. What is done stays done (a committed transaction consumed
        it, or its reader acknowledged it): never delivered again. Returns the commit
        (which stays)."""
        self._read_again_after(self.committed)
        return self.committed

    def _read_again_after(self, position: int) -> None:
        """Read again after ``position``: what was delivered before is stale (its commits
        REJECTED, its takes void)."""
        self.next = position + 1
        self.unread = []
        self.reset_floor = position
        self.delivered_high = position
        self.jumps += 1
        self.reset_jumps = self.jumps

    def grant(self, lease: Lease | None) -> None:
        """Give the cursor a new owner: it resumes after the last commit."""
        self.owner = lease
        self.redeliver()

    def redeliver(self) -> None:
        """Read again after the last commit (what was delivered since comes again: at
        least once); the positions sessions hold are void (one jump more)."""
        self.next = self.committed + 1
        self.unread = []
        self.jumps += 1

    def skip_to_head(self, head: int) -> int:
        """Move a cursor that fell below the head up to it; return how many it skipped."""
        skipped = head - self.next
        if skipped <= 0:
            return 0
        self.next = head
        if self.committed < head - 1:
            self.committed = head - 1
        self._moved()
        return skipped

    def pass_lost(self, first: int, last: int) -> None:
        """Read on after ``first..last``, whose elements are lost (a damaged stored
        record): done, never delivered (the commit moves over them with the next
        commit or ack)."""
        self.missed(max(first, self.next), last)
        self.next = max(self.next, last + 1)

    def rewind(self, next_sequence: int) -> None:
        """Read again from ``next_sequence``, forgetting what it skipped from there on."""
        self.next = next_sequence
        self._forget_unread()

    def read_from(self, sequence: int) -> None:
        """The reader's session reads on from ``sequence`` (see ``Take``): forward over
        what it handed over from a fetch's offer (delivered already), or back over
        what it took and never handed over."""
        if sequence < self.next:
            self.rewind(sequence)
        else:
            self.next = sequence
            self._served_again(sequence)

    def poison_ahead(self) -> PoisonMark | None:
        """The poison mark at or after the read position (None: none, or a jump
        voided it, or the cursor is past it)."""
        mark = self.poison
        if mark is not None and (mark.jumps != self.jumps or mark.poison.sequence < self.next):
            self.poison = mark = None
        return mark

    @property
    def stopped(self) -> bool:
        """Whether the cursor stands at a poison element its reader was told of: it
        holds nothing for the reader until a jump."""
        mark = self.poison_ahead()
        return mark is not None and mark.reported and mark.poison.sequence == self.next

    def stop_at(self, poison: Poison, *, reported: bool) -> None:
        """Stop before ``poison``: the read position moves to it, back if the cursor is
        past it (what was taken after it is void), forward if it stands before it (a
        fetch's offer: its reader kept what came before), with one jump more, so
        handles drop what came after it and sessions' positions are void; hold
        there until a jump."""
        read_under = self.jumps
        if self.next != poison.sequence:
            self.read_from(poison.sequence)
            self.jumps += 1
        self.poison = PoisonMark(poison, self.jumps, reported, read_under)

    def read_stands(self, jumps: int, last: int) -> bool:
        """Whether what the reader read under jump count ``jumps``, up to position
        ``last``, still stands: no jump since, or only the stop before a poison above
        ``last`` (:meth:`stop_at`: the elements before it were delivered; a
        transaction consuming them may commit them)."""
        if jumps == self.jumps:
            return True
        mark = self.poison_ahead()
        return mark is not None and jumps == mark.read_under and last < mark.poison.sequence

    def to_state(self) -> dict[str, object]:
        """What a store keeps of the cursor (JSON-ready); see :meth:`from_state`."""
        owner = self.owner
        return {
            "next": self.next,
            "committed": self.committed,
            "has_commit": self.has_commit,
            "jumps": self.jumps,
            "owner": None if owner is None else [owner.reader_id, owner.generation],
            "reset_floor": self.reset_floor,
            "delivered_high": self.delivered_high,
            "reset_jumps": self.reset_jumps,
            "done": self.done.to_state(),
            "done_firm_to": self.done.firm_to,
        }

    @classmethod
    def from_state(cls, state: dict[str, object], *, group: bool) -> Cursor:
        """A cursor as a restarted channel resumes it.

        A group cursor resumes after its commit (what was delivered and not
        committed is delivered again: at least once), with one more jump so
        handles drop what they fetched from the old incarnation. An
        anonymous cursor resumes where it was last saved.
        """
        owner = state["owner"]
        cursor = cls(
            next=int(state["next"]),  # type: ignore[call-overload]
            committed=int(state["committed"]),  # type: ignore[call-overload]
            has_commit=bool(state["has_commit"]),
            jumps=int(state["jumps"]) + 1,  # type: ignore[call-overload]
            owner=None if owner is None else Lease(*owner),  # type: ignore[misc]
            reset_floor=state["reset_floor"],  # type: ignore[arg-type]
            delivered_high=int(state["delivered_high"]),  # type: ignore[call-overload]
            reset_jumps=int(state.get("reset_jumps", 0)),  # type: ignore[call-overload]
            done=DoneRanges.from_state(
                state.get("done"),  # type: ignore[arg-type]
                int(state.get("done_firm_to", -1)),  # type: ignore[call-overload]
            ),
        )
        if group:
            cursor.next = cursor.committed + 1
        return cursor
