"""The channel's requests for transactions: a participant's steps, and the end of a
transaction this channel leads. No Ray (the lead's peers are given).

A participant's steps go to :class:`~raytopic.actors.transactions.TransactionParticipant`
(staged elements, the two-phase commit's votes and outcomes); an end goes to the
:class:`~raytopic.actors.transaction_lead.TransactionLead`, made again whenever the
store names the topic (the lead names this channel by the topic's id).
"""

from __future__ import annotations

from typing import Any

from raytopic.actors.channel_dispatch import serves
from raytopic.actors.transaction_lead import Peers, TransactionLead
from raytopic.actors.transactions import TransactionParticipant
from raytopic.core.payloads import Payload
from raytopic.core.protocol import (
    DecideTransaction,
    EndTransaction,
    FenceTransactions,
    FinishTransaction,
    ForgetTransaction,
    Outcome,
    PrepareTransaction,
    ResolveTransaction,
    StageTransaction,
    TransactionEnded,
)

__all__ = ["TransactionRequests"]


class TransactionRequests:
    """One channel's part in transactions, and the ones it leads.

    Args:
        participant: The channel's staged elements and two-phase commit.
        peers: How the lead reaches the other channels and the registry.
    """

    def __init__(self, participant: TransactionParticipant, peers: Peers) -> None:
        self._participant, self._peers = participant, peers
        self._lead = self._new_lead()

    def renew_lead(self) -> None:
        """Lead from now on under the participant's address as it is now (once the
        store named the topic's id, which the address holds)."""
        self._lead = self._new_lead()

    def _new_lead(self) -> TransactionLead:
        return TransactionLead(self._participant, self._peers, self._participant.address)

    @serves(StageTransaction)
    async def stage(self, request: StageTransaction, payload: Payload | None = None) -> int:
        return await self._participant.stage(request, payload)

    @serves(EndTransaction)
    async def end(self, request: EndTransaction) -> TransactionEnded:
        """This channel leads the transaction (``raytopic.actors.transaction_lead``)."""
        return await self._lead.end(request)

    @serves(PrepareTransaction)
    async def prepare(self, request: PrepareTransaction) -> Outcome | None:
        return await self._participant.prepare(request)

    @serves(DecideTransaction)
    async def decide(self, request: DecideTransaction) -> tuple[str, str, Any]:
        return await self._participant.decide(request)

    @serves(FinishTransaction)
    async def finish(self, request: FinishTransaction) -> tuple[Any, ...]:
        return await self._participant.finish(request)

    @serves(ResolveTransaction)
    async def resolve(self, request: ResolveTransaction) -> str | None:
        return await self._participant.resolve(request)

    @serves(ForgetTransaction)
    async def forget(self, request: ForgetTransaction) -> None:
        await self._participant.forget(request)

    @serves(FenceTransactions)
    async def fence(self, request: FenceTransactions) -> None:
        await self._participant.fence(request)
