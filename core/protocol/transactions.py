"""A transaction's requests to a channel (see ``raytopic.actors.transactions`` and
``raytopic.actors.transaction_lead``), typed as the data path's are
(``raytopic.core.protocol.channel``), and what they name: the outcome of a
transaction, its parts and a consumed commit.

The holder sends ``StageTransaction`` (its publishes) and one ``EndTransaction``
(to the lead); the rest are the channels' own: the lead's prepares and
finishes at the other participants, a participant's ``ResolveTransaction``
to the lead, the registry's fences.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from raytopic.core.protocol.records import Address, Lease

__all__ = [
    "FENCED",
    "TRANSACTION_REQUESTS",
    "ConsumedCommit",
    "Outcome",
    "DecideTransaction",
    "EndTransaction",
    "FenceTransactions",
    "FinishTransaction",
    "ForgetTransaction",
    "PrepareTransaction",
    "ResolveTransaction",
    "StageTransaction",
    "TransactionEnded",
    "TransactionPart",
    "TransactionRequest",
]


class Outcome(enum.StrEnum):
    """How a transaction ended (kept by its lead: its decision)."""

    COMMIT = "commit"
    """Its outputs appended and its consumed commits applied, everywhere."""
    ABORT = "abort"
    """Nothing of it took effect."""


FENCED = "fenced"
"""The reason of an abort caused by a newer incarnation of the transactional id."""


@dataclass(frozen=True, slots=True)
class ConsumedCommit:
    """A group member's commit made by a transaction: the group's position moves
    to ``sequence`` if ``lease`` still owns the channel at ``jumps`` (no seek,
    reset or change of owner since the elements were read). The holder names
    the member's reader; the channel fills in its group.

    ``done``: the ``(first, last)`` ranges of positions the transaction consumed.
    A commit can stop below ``sequence``: a resequencing member's below an element
    not handed over yet (``Element.commit``), and a channel's below an element a
    reply Ray dropped carried (``Take.unseen``). What the transaction consumed above
    where it stops is marked done instead (never delivered to the group again; the
    commit moves over it once contiguous): an abort or a restart, sending the member
    back to its commit, does not give it those elements again."""

    reader_id: str
    sequence: int
    lease: Lease
    jumps: int
    group: str = ""
    done: tuple[tuple[int, int], ...] = ()

    def with_done(self, consumed: Iterable[int]) -> ConsumedCommit:
        """This commit with the positions it ``consumed`` as its :attr:`done` runs (the
        channel makes done those above where its commit stops: see ``done``)."""
        runs = _runs_of(sorted(consumed))
        return replace(self, done=runs) if runs else self

    def to_state(self) -> list[Any]:
        lease = [self.lease.reader_id, self.lease.generation]
        done = [[first, last] for first, last in self.done]
        return [self.reader_id, self.sequence, lease, self.jumps, self.group, done]

    @classmethod
    def from_state(cls, state: list[Any]) -> ConsumedCommit:
        reader_id, sequence, lease, jumps, group = state[:5]
        kept = state[5] if len(state) > 5 else []  # (a store's entry from before ``done``)
        done = tuple((int(first), int(last)) for first, last in kept)
        return cls(
            reader_id, int(sequence), Lease(lease[0], int(lease[1])), int(jumps), group, done
        )


def _runs_of(positions: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Ascending ``positions`` as ``(first, last)`` runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for position in positions:
        if runs and runs[-1][1] + 1 >= position:
            runs[-1] = (runs[-1][0], position)
        else:
            runs.append((position, position))
    return tuple(runs)


class StageTransaction(NamedTuple):
    """Keep elements published in a transaction apart from the ring (its payload is
    the call's second argument)."""

    key: str
    transactional_id: str
    deadline: float
    timeout: float | None


class TransactionPart(NamedTuple):
    """What a transaction does at one channel: the elements its holder staged there
    and the consumed commits it makes there."""

    at: Address
    staged: int
    """How many elements the holder staged here (fewer: the channel lost some)."""
    commits: tuple[ConsumedCommit, ...]


class EndTransaction(NamedTuple):
    """At the transaction's lead (the channel of its parts that ``lead_of`` names):
    end it, and answer with a ``TransactionEnded``.

    With ``outcome`` "commit" the lead runs the two-phase commit over the parts
    (the registry's word that the incarnation is current, the others' prepares,
    its own decision, the others' finishes); with "abort" it records the abort
    and tells the others.
    """

    key: str
    transactional_id: str
    epoch: int
    """The holder's incarnation (the registry fences older ones)."""
    namespace: str
    """Where the holder's transaction registry is."""
    deadline: float
    outcome: Outcome
    """What the holder asks for (the answer may still be "abort")."""
    reason: str
    """Why, when the holder asks for "abort"."""
    parts: tuple[TransactionPart, ...]


class TransactionEnded(NamedTuple):
    """The lead's answer to an ``EndTransaction``: the decided outcome, why it aborted,
    and the (first, count) runs each participant appended, if it committed."""

    outcome: Outcome
    reason: str
    runs: tuple[tuple[Address, tuple[tuple[int, int], ...]], ...] = ()


class PrepareTransaction(NamedTuple):
    """Check and keep durably what a transaction does here, before its decision."""

    key: str
    transactional_id: str
    deadline: float
    lead: Address
    staged: int
    """How many elements the holder staged here (fewer: the channel lost some)."""
    commits: tuple[ConsumedCommit, ...]
    """The consumed commits made here."""


class DecideTransaction(NamedTuple):
    """At the transaction's lead: record its outcome and finish it here, in one step."""

    key: str
    transactional_id: str
    deadline: float
    outcome: Outcome
    reason: str
    staged: int
    commits: tuple[ConsumedCommit, ...]
    forget: tuple[str, ...] = ()
    """Earlier transactions it led whose participants all finished."""


class FinishTransaction(NamedTuple):
    """At a participant other than the lead: the decided outcome."""

    key: str
    transactional_id: str
    deadline: float
    outcome: Outcome
    reason: str


class ResolveTransaction(NamedTuple):
    """At the lead: the outcome of a transaction (None: undecided); past its
    deadline an undecided one is aborted."""

    key: str
    transactional_id: str
    deadline: float


class ForgetTransaction(NamedTuple):
    """Every participant finished the transaction: its outcome is no longer needed."""

    key: str


class FenceTransactions(NamedTuple):
    """Incarnations of ``transactional_id`` older than ``epoch`` are fenced: their
    staged transactions here are aborted, their stagings refused."""

    transactional_id: str
    epoch: int


TransactionRequest = (
    StageTransaction
    | EndTransaction
    | PrepareTransaction
    | DecideTransaction
    | FinishTransaction
    | ResolveTransaction
    | ForgetTransaction
    | FenceTransactions
)
"""A transaction's request, served by ``ChannelActor.request``."""

TRANSACTION_REQUESTS = (
    StageTransaction,
    EndTransaction,
    PrepareTransaction,
    DecideTransaction,
    FinishTransaction,
    ResolveTransaction,
    ForgetTransaction,
    FenceTransactions,
)
