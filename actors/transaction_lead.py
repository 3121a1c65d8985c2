"""The lead channel's part in a transaction: it runs the two-phase commit.

The holder of a transaction (``raytopic.transaction.handles``) stages its
publishes at their channels, then sends one ``EndTransaction`` with the
transaction's parts to its lead (``lead_of``): a channel with outputs if there
is one, so its outputs are visible when it answers. The lead, here:

1. asks the registry whether the holder's incarnation is still the newest
   (``committing``: from then on a newer incarnation aborts the transaction
   here, first come first served with this decision);
2. prepares every other participant (each checks and keeps its part
   durably), in parallel with 1;
3. decides in its own ``TransactionParticipant``, in-process (never through
   Ray): its own part is appended and the outcome recorded durably in one step;
4. finishes every other participant, in parallel, and answers the holder with
   the outcome and the runs each one appended once the outputs' finishes are
   done (they are visible when ``commit()`` returns); a participant with only
   consumed positions is finished after the answer (its group waits for it,
   since its positions stay pinned until then; nothing else does), which keeps
   a round trip off every commit;
5. forgets the outcome once every participant finished and the holder has its
   answer: with the decision of the incarnation's next transaction here (the
   holder ends one at a time, so it has the answer then). Until then a
   participant that missed its finish asks for it (``ResolveTransaction``), and
   a retried call gets the same answer.

An abort the holder asks for is recorded here and told to the others.

If the lead is killed meanwhile, Ray retries the holder's call on the restarted
lead (channels restart with ``max_task_retries=-1``), which runs it again: an
outcome it recorded before the kill is its answer (and its finishes go out
again: a finish is idempotent); one it did not record is decided now (a part it
staged did not survive the restart, so that is "abort"). Participants prepared
meanwhile ask the lead when their outcome is late, as ever. A lead without a
store that decided "commit" and restarted before it answered learns it from a
participant that already finished (its prepare answers "commit"): it records
"commit" again and reports the loss of its own part (``DataLossError``), never
an abort of what others already show.

The calls to the other channels and the registry go through a ``Peers`` port
(``RayPeers`` in the channel), so the driver runs in plain unit tests against
in-process participants. Every call is awaited: the lead's event loop serves
other calls (its participants' resolves included) while it waits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol

import ray

from raytopic.actors.transactions import TransactionParticipant, send
from raytopic.core.errors import (
    DataLossError,
    TopicError,
    TopicNotFoundError,
    TransactionAbortedError,
    TransactionFencedError,
)
from raytopic.core.naming import transaction_registry_name
from raytopic.core.protocol import (
    FENCED,
    Address,
    DecideTransaction,
    EndTransaction,
    FinishTransaction,
    Outcome,
    PrepareTransaction,
    TransactionAborted,
    TransactionCommitting,
    TransactionEnded,
    TransactionPart,
    TransactionRequest,
)

logger = logging.getLogger(__name__)

__all__ = ["Peers", "RayPeers", "TransactionLead", "lead_of"]

KEEP_FINISHED = 10_000
"""Transactional ids whose last committed transaction here waits to be forgotten
(the oldest are dropped: the table forgets old outcomes by itself too)."""


def lead_of(parts: Sequence[TransactionPart]) -> Address:
    """The channel that leads a transaction with these parts: the first that has
    outputs, else the first (its outputs are visible when the lead answers; the
    input commits elsewhere follow, pinned meanwhile)."""
    with_outputs = [part.at for part in parts if part.staged]
    return min(with_outputs) if with_outputs else min(part.at for part in parts)


class Peers(Protocol):
    """The lead's calls to the other participants and to the registry."""

    async def call(self, at: Address, request: TransactionRequest) -> Any:
        """Serve ``request`` at channel ``at``; raises raytopic errors only."""

    async def committing(self, request: EndTransaction, lead: Address) -> None:
        """Tell the registry the transaction is decided at ``lead`` from now on.

        Raises:
            TransactionFencedError: a newer incarnation exists (do not decide).
        """

    def ended(self, request: EndTransaction) -> None:
        """Tell the registry the transaction aborted (no answer awaited)."""


class TransactionLead:
    """Ends the transactions this channel leads (see the module docstring).

    Args:
        participant: This channel's transactions (the lead's own part).
        peers: The calls to the other channels and the registry.
        here: This channel, as transactions name their participants.
    """

    def __init__(self, participant: TransactionParticipant, peers: Peers, here: Address) -> None:
        self._participant = participant
        self._peers = peers
        self._here = here
        self._finished: dict[str, list[str]] = {}
        """Transactional id -> its transactions committed everywhere, to forget."""
        self._finishing: set[asyncio.Task[None]] = set()
        """The commit-only participants' finishes the answer did not wait for."""

    async def end(self, request: EndTransaction) -> TransactionEnded:
        """Commit or abort the transaction everywhere; returns the outcome.

        Raises:
            DataLossError: it committed, but a participant restarted without a
                store after it prepared, losing its part.
            TopicError: the lead's own part could not be decided (its store
                refused it, say): the holder's call may be retried.
        """
        own = next((part for part in request.parts if part.at == self._here), None)
        if own is None:  # a holder that named another lead: nothing of it is here
            own = TransactionPart(self._here, 0, ())
        others = [part for part in request.parts if part.at != self._here]
        committed_before = False
        if request.outcome == Outcome.COMMIT:
            reason, committed_before = await self._prepared(request, others)
        else:
            reason = request.reason or "aborted by its holder"
        earlier = self._finished.pop(request.transactional_id, [])
        decide = DecideTransaction(
            request.key,
            request.transactional_id,
            request.deadline,
            Outcome.ABORT if reason else Outcome.COMMIT,
            reason,
            own.staged,
            own.commits,
            tuple(key for key in earlier if key != request.key),
        )
        lost_here = None
        if committed_before and not self._participant.decided(request.key):
            # This lead decided "commit", then a restart without a store lost it.
            lost_here = await self._participant.committed_elsewhere(decide)
            outcome, reason, own_runs = Outcome.COMMIT, "", ()
        else:
            outcome, reason, own_runs = await self._participant.decide(decide)
        if outcome != Outcome.COMMIT:
            await self._finish(request, others, Outcome.ABORT, reason)
            self._peers.ended(request)
            return TransactionEnded(Outcome.ABORT, reason)
        # The answer waits for the outputs' finishes (they are visible when commit()
        # returns), not for a commit-only participant's: its group waits for it (the
        # consumed positions are pinned until it finishes), nothing else does, and
        # waiting would add a round trip to every commit.
        outputs = [part for part in others if part.staged]
        commit_only = [part for part in others if not part.staged]
        runs, lost, all_finished = await self._finish(request, outputs, Outcome.COMMIT, "")
        forgettable = all_finished and lost_here is None
        if commit_only:
            task = asyncio.create_task(self._finish_commits(request, commit_only, forgettable))
            self._finishing.add(task)
            task.add_done_callback(self._finishing.discard)
        elif forgettable:
            self._forget_later(request)
        if lost_here is not None or lost:
            raise lost_here or lost[0]
        runs[self._here] = own_runs
        return TransactionEnded(
            Outcome.COMMIT, "", tuple((at, tuple(r)) for at, r in sorted(runs.items()) if r)
        )

    async def finishes_sent(self) -> None:
        """Wait until the commit-only finishes the answers did not wait for are done."""
        while self._finishing:
            await asyncio.gather(*self._finishing, return_exceptions=True)

    async def _finish_commits(
        self, request: EndTransaction, commit_only: list[TransactionPart], forgettable: bool
    ) -> None:
        """Finish the commit-only participants (after the answer went); the outcome
        becomes forgettable once every participant finished."""
        _, lost, all_finished = await self._finish(request, commit_only, Outcome.COMMIT, "")
        for error in lost:
            logger.warning("transaction %s: %s", request.key, error)
        if forgettable and all_finished:
            self._forget_later(request)

    def _forget_later(self, request: EndTransaction) -> None:
        """Forget this outcome with the transactional id's next decision here: every
        participant finished, and a holder that began another transaction has its
        answer (a request Ray retries before that still gets it)."""
        self._finished.setdefault(request.transactional_id, []).append(request.key)
        while len(self._finished) > KEEP_FINISHED:
            del self._finished[next(iter(self._finished))]

    async def _prepared(
        self, request: EndTransaction, others: list[TransactionPart]
    ) -> tuple[str, bool]:
        """Ask the registry and prepare the others, all at once (the registry's word
        is what the decision waits for, not what the prepares wait for).

        Returns:
            Why not to commit ("": commit), and whether a participant had already
            committed it. Only a decision of this lead commits a participant, so
            then this lead had decided "commit" and lost that (it restarted
            without a store): the outcome is "commit" whatever it holds now.
        """
        prepares = [
            self._peers.call(
                part.at,
                PrepareTransaction(
                    request.key,
                    request.transactional_id,
                    request.deadline,
                    self._here,
                    part.staged,
                    part.commits,
                ),
            )
            for part in others
        ]
        registry, *prepared = await asyncio.gather(
            self._peers.committing(request, self._here), *prepares, return_exceptions=True
        )
        reasons = []
        if isinstance(registry, TransactionFencedError):
            reasons.append(FENCED)
        elif isinstance(registry, Exception):
            reasons.append(f"the transaction registry refused it: {registry}")
        committed = False
        for result in prepared:
            if isinstance(result, TransactionAbortedError):
                reasons.append(result.reason)
            elif isinstance(result, Exception):
                reasons.append(f"a participant failed to prepare: {result}")
            elif result == Outcome.COMMIT:
                committed = True
        if committed:
            return "", True
        if FENCED in reasons:
            return FENCED, False
        return (reasons[0] if reasons else ""), False

    async def _finish(
        self, request: EndTransaction, others: list[TransactionPart], outcome: Outcome, reason: str
    ) -> tuple[dict[Address, Any], list[DataLossError], bool]:
        """Tell the others the outcome; returns each one's runs, the losses, and
        whether every one finished (one that did not asks the lead later)."""
        finish = FinishTransaction(
            request.key, request.transactional_id, request.deadline, outcome, reason
        )
        results = await asyncio.gather(
            *(self._peers.call(part.at, finish) for part in others), return_exceptions=True
        )
        runs: dict[Address, Any] = {}
        lost: list[DataLossError] = []
        for part, result in zip(others, results, strict=True):
            if isinstance(result, DataLossError):
                lost.append(result)
            elif isinstance(result, Exception):
                logger.info(
                    "transaction %s: channel %d of %r did not finish (%s): it asks the lead",
                    request.key,
                    part.at.channel,
                    part.at.topic,
                    result,
                )
            else:
                runs[part.at] = result
        return runs, lost, len(runs) + len(lost) == len(others) and not lost


class RayPeers:
    """``Peers`` through Ray: the channels' ``request`` and the namespace's registry.

    A Ray failure of a call is raised as a raytopic error: a destroyed topic's
    channel as TopicNotFoundError, any other as TopicError (a channel that
    restarts is waited for: channels retry their calls).
    """

    def __init__(self) -> None:
        self._registries: dict[str, Any] = {}

    async def call(self, at: Address, request: TransactionRequest) -> Any:
        return await _unwrapped(send, at, request)

    async def committing(self, request: EndTransaction, lead: Address) -> None:
        registry = await self._registry(request.namespace)
        others = [part.at for part in request.parts if part.at != lead]
        committing = TransactionCommitting(
            request.transactional_id,
            request.epoch,
            request.key,
            request.deadline,
            lead,
            tuple(others),
        )
        await _unwrapped(lambda: registry.request.remote(committing))

    def ended(self, request: EndTransaction) -> None:
        registry = self._registries.get(request.namespace)
        if registry is not None:  # known: committing() looked it up
            aborted = TransactionAborted(request.transactional_id, request.epoch, request.key)
            registry.request.remote(aborted)

    async def _registry(self, namespace: str) -> Any:
        """The registry's handle (looked up once, off the event loop: a GCS call)."""
        registry = self._registries.get(namespace)
        if registry is None:
            try:
                registry = await asyncio.to_thread(
                    ray.get_actor, transaction_registry_name(), namespace=namespace
                )
            except ValueError as error:
                raise TopicError(f"no transaction registry in {namespace!r}") from error
            self._registries[namespace] = registry
        return registry


async def _unwrapped(call: Any, *args: Any) -> Any:
    """Await the Ray call ``call(*args)`` makes, with raytopic's errors as themselves
    and Ray's as raytopic's."""
    try:
        return await call(*args)
    except ray.exceptions.RayTaskError as wrapped:
        cause = wrapped.cause
        if isinstance(cause, TopicError):
            raise cause from wrapped
        raise TopicError(f"a transaction's call failed: {cause!r}") from wrapped
    except ray.exceptions.ActorDiedError as error:
        raise TopicNotFoundError("a topic of the transaction was destroyed") from error
    except ray.exceptions.RayError as error:
        raise TopicError(f"a transaction's call failed: {error}") from error
