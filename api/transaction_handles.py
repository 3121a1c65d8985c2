"""Transactions: a group member's outputs and its input commits as one atomic step.

``rt.transactions(id)`` starts an incarnation of a transactional id (fencing
every older one); ``begin()`` opens a transaction, whose publishes are staged
at their channels, apart from the ring, and whose ``commit()`` runs a
two-phase commit over the channels it touched (see
``raytopic.actors.transactions`` for the channel side and
``raytopic.coordinator.transaction_registry`` for fencing)::

    txs = rt.transactions("doubler")
    member = source.subscriber(group="etl")
    for batch in member.iter_batches(100):
        with txs.begin() as tx:          # commits on exit; aborts if the block raises
            tx.publish_batch(sink, [2 * e.value for e in batch])
            tx.commit_consumed(batch)
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import ray

from raytopic.actors.transactions import send
from raytopic.coordinator.transaction_registry import registry_actor
from raytopic.core.config import check_instance, check_items, check_namespace, check_timeout
from raytopic.core.errors import (
    ClosedError,
    DataLossError,
    GroupModeError,
    InvalidArgumentError,
    InvalidTypeError,
    TopicError,
    TopicNotFoundError,
    TransactionAbortedError,
    TransactionFencedError,
    unwrap_ray_error,
)
from raytopic.core.protocol import (
    FENCED,
    Address,
    ConsumedCommit,
    DecideTransaction,
    FinishTransaction,
    ForgetTransaction,
    Outcome,
    PrepareTransaction,
    StageTransaction,
)
from raytopic.core.records import (
    CommitResult,
    CommitStatus,
    Element,
    Position,
    TransactionResult,
)
from raytopic.publisher import encode_part, parts_of, route
from raytopic.routing import key_hash
from raytopic.subscriber import live_subscriber
from raytopic.topic import Topic

__all__ = ["Transaction", "Transactions", "transactions"]

STAGE_TIMEOUT = 30.0
"""Seconds a staged publish waits for room (overflow "block") at most."""


def transactions(
    transactional_id: str, *, namespace: str | None = None, timeout: float = 60.0
) -> Transactions:
    """Start a new incarnation of ``transactional_id``: every older holder of the id is
    fenced: its open transaction is aborted, and its next call that reaches the
    cluster raises TransactionFencedError (see ``Transactions``, Fencing).

    Args:
        transactional_id: A name that stays the same across restarts of one
            logical worker (a pipeline stage and its partition, say).
        namespace: Ray namespace of the topics involved (default "raytopic").
        timeout: Seconds a transaction may stay open (> 0, at most a year); one
            whose holder is gone is aborted that long after it began.

    Returns:
        The holder's Transactions.

    Raises:
        InvalidArgumentError, InvalidTypeError: a bad id, namespace or timeout
            (nothing is fenced).
    """
    if not isinstance(transactional_id, str) or not transactional_id:
        raise InvalidTypeError("a transactional id must be a non-empty str")
    checked_timeout = check_timeout(timeout, "timeout", allow_none=False)
    return Transactions(transactional_id, check_namespace(namespace), checked_timeout)


class Transactions:
    """One incarnation of a transactional id: opens its transactions, one at a time.

    Not picklable: an incarnation belongs to the process that made it (another
    process takes over the id by calling ``rt.transactions(id)`` itself).
    A context manager: ``close()`` on exit.

    **Fencing**: a newer incarnation of the id aborts this one's open
    transaction at once, at every channel it staged at. This incarnation
    learns of it at its next call that reaches the cluster (``publish``,
    ``publish_batch``, ``commit``), which raises ``TransactionFencedError``, as
    does every call after it; ``begin()`` and ``commit_consumed()`` are local
    and ask nobody, so they raise only once it has learnt.

    Args:
        transactional_id: The id.
        namespace: The Ray namespace of its registry and topics.
        timeout: Seconds a transaction may stay open.
    """

    def __init__(self, transactional_id: str, namespace: str, timeout: float) -> None:
        self.transactional_id = transactional_id
        self.namespace = namespace
        self.timeout = timeout
        self._registry = registry_actor(namespace)
        with unwrap_ray_error():
            self.epoch: int = ray.get(self._registry.open.remote(transactional_id))
        self._numbers = itertools.count()
        self._next_channel: dict[str, int] = {}  # topic id -> next round-robin channel
        self._open: Transaction | None = None
        self._closed = False
        self._fenced = False
        self._joined: set[Address] = set()  # channels the registry knows we stage at
        self._forgets: list[tuple[Address, str, list[Any]]] = []
        """(lead, key, finishes in flight) of committed transactions: the lead forgets
        the outcome once every participant finished."""

    def begin(self) -> Transaction:
        """Open a transaction (the previous one must be committed or aborted).

        Raises:
            ClosedError: this incarnation was closed.
            TransactionFencedError: a newer incarnation exists (and a call of
                this one has met it: see Fencing above).
            InvalidArgumentError: a transaction of this incarnation is still open.

        Returns:
            The new transaction.
        """
        self._check_usable()
        if self._open is not None and self._open.is_open:
            raise InvalidArgumentError(
                f"transaction {self._open.key} is still open: commit or abort it first"
            )
        key = f"{self.transactional_id}@{self.epoch}.{next(self._numbers)}"
        self._open = Transaction(self, key, time.time() + self.timeout)
        return self._open

    def close(self) -> None:
        """Abort the open transaction, if any, and end this incarnation."""
        if self._closed:
            return
        if self._open is not None and self._open.is_open:
            with contextlib.suppress(TopicError):  # else its channels abort it at its deadline
                self._open.abort()
        self._closed = True
        self._registry.close.remote(self.transactional_id, self.epoch)
        in_flight = [ref for *_, refs in self._forgets for ref in refs]
        with contextlib.suppress(ray.exceptions.RayError):
            ray.wait(in_flight, num_returns=len(in_flight), timeout=10.0)
        self.forgets_ready(None)

    def forgets_ready(self, lead: Address | None) -> tuple[str, ...]:
        """Committed transactions whose participants all finished: a forget is sent to
        every lead but ``lead``.

        Args:
            lead: The lead of the decision about to be sent (None: none).

        Returns:
            The keys ``lead`` led, for it to forget with that decision.
        """
        ready, pending = [], []
        for held in self._forgets:
            refs = held[2]
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if refs else (refs, None)
            if len(done) < len(refs):
                pending.append(held)
            elif _all_succeeded(refs):  # else a participant asks the lead: it must remember
                ready.append(held)
        self._forgets = pending
        keys = []
        for at, key, _ in ready:
            if at == lead:
                keys.append(key)
            else:
                send(at, ForgetTransaction(key))
        return tuple(keys)

    def __enter__(self) -> Transactions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> Any:
        raise TypeError("Transactions do not pickle: call rt.transactions(id) in the process")

    def __repr__(self) -> str:
        return f"Transactions({self.transactional_id!r}, epoch={self.epoch})"

    def _check_usable(self) -> None:
        if self._fenced:
            raise TransactionFencedError(
                f"a newer holder of transactional id {self.transactional_id!r} exists", FENCED
            )
        if self._closed:
            raise ClosedError(f"transactions of {self.transactional_id!r} were closed")

    def _route(self, topic: Topic, count: int, hashes: list[int | None] | None) -> np.ndarray:
        """Each value's channel: by key, the rest in turn (as a publisher routes)."""
        start = self._next_channel.get(topic.topic_id, 0)
        layout, self._next_channel[topic.topic_id] = route(
            count, hashes, topic.channel_count, start
        )
        return layout


class Transaction:
    """An open transaction: publishes staged at their channels, consumed positions to
    commit, and then ``commit()`` or ``abort()``.

    Outputs are invisible to every reader until ``commit()``; then every
    output of it (any topics, any channels) and every consumed commit take
    effect together, each channel's outputs at consecutive positions in
    publish order. Ordinary publishes and readers never wait for it.

    Not picklable: it holds what was staged where, which only its holder
    knows; hand elements or values to other processes instead.

    A context manager: commits on exit, aborts if the block raised.
    """

    def __init__(self, holder: Transactions, key: str, deadline: float) -> None:
        self._holder = holder
        self.key = key
        self.deadline = deadline
        self._staged: dict[Address, int] = {}
        self._commits: dict[Address, ConsumedCommit] = {}
        self._state = "open"
        self._doomed: str | None = None  # why it can only abort now

    @property
    def is_open(self) -> bool:
        """Whether it can still take publishes and commit."""
        return self._state == "open"

    # -- outputs ------------------------------------------------------------------

    def publish(self, topic: Topic, value: Any, *, key: Any = None) -> None:
        """Stage one value (one call to its channel; stage many with ``publish_batch``).

        Args:
            topic: The topic.
            value: A picklable value (not None, not an ObjectRef).
            key: Routes the value as a publisher would (None: round robin).

        Raises:
            See ``publish_batch``.
        """
        self.publish_batch(topic, [value], keys=None if key is None else [key])

    def publish_batch(
        self, topic: Topic, values: Iterable[Any], *, keys: Sequence[Any] | None = None
    ) -> None:
        """Stage values at their channels (one call per channel), invisible until commit.

        Args:
            topic: The topic.
            values: Picklable values (not None, not ObjectRefs).
            keys: One key per value (None entries: round robin), or None.

        Raises:
            InvalidTypeError, InvalidArgumentError: a bad value, key or topic, or
                ``values`` or ``keys`` that is not a list of them (None, a str, a
                dict); nothing is staged, and the transaction goes on.
            TopicNotFoundError: the topic was destroyed; nothing staged there.
            TopicFullError: a channel had no room (overflow "fail", or "block"
                past 30 s); nothing staged there.
            TransactionFencedError: a newer incarnation of the id aborted it.
            TransactionAbortedError: it was aborted (timed out) or cannot commit.
        """
        self._check_open()
        check_instance(topic, Topic, "topic")
        values = check_items(values, "values")
        if keys is not None:
            keys = check_items(keys, "keys")
        if keys is not None and len(keys) != len(values):
            raise InvalidArgumentError(f"keys has {len(keys)} entries for {len(values)} values")
        if not values:
            return
        hashes = None if keys is None else [None if k is None else key_hash(k) for k in keys]
        layout = self._holder._route(topic, len(values), hashes)
        parts = {
            channel: encode_part(values, hashes, indices)
            for channel, indices in parts_of(layout).items()
        }
        holder = self._holder
        timeout = min(STAGE_TIMEOUT, max(0.0, self.deadline - time.time()))
        stage = StageTransaction(self.key, holder.transactional_id, self.deadline, timeout)
        refs, joins = {}, []
        for channel, payload in parts.items():
            at = Address(topic.namespace, topic.name, topic.topic_id, channel)
            if at not in holder._joined:
                joins.append(
                    holder._registry.join.remote(holder.transactional_id, holder.epoch, at)
                )
            try:
                refs[at] = send(at, stage, payload)
            except TopicNotFoundError:
                self._settle(refs, joins)
                raise
        self._settle(refs, joins)

    def _settle(self, refs: dict[Address, Any], joins: list[Any]) -> None:
        """Wait for staging calls; the counts they report are what prepare checks."""
        first_error: Exception | None = None
        for ref in joins:
            try:
                _get(ref)
            except TransactionFencedError as error:
                self._holder._fenced = True
                first_error = first_error or error
        if first_error is not None:  # staged after the registry aborted the rest: drop it
            self._finish_everywhere(list(refs), Outcome.ABORT, FENCED)
        self._holder._joined.update(refs)
        for at, ref in refs.items():
            try:
                self._staged[at] = _get(ref)
            except TransactionAbortedError as error:
                if isinstance(error, TransactionFencedError):
                    self._holder._fenced = True
                self._doomed = error.reason
                first_error = first_error or error
            except TopicError as error:
                first_error = first_error or error
            except ray.exceptions.RayActorError as error:  # staged there or not: unknown
                self._doomed = f"channel {at.channel} of {at.topic!r} failed while staging"
                first_error = first_error or TransactionAbortedError(
                    f"transaction {self.key}: {self._doomed}: {error}", self._doomed
                )
        if first_error is not None:
            raise first_error

    # -- inputs -------------------------------------------------------------------

    def commit_consumed(self, elements: Element | Iterable[Element]) -> None:
        """Commit these elements' positions with the transaction (each channel's last,
        and so every earlier one): they move with the outputs, or not at all.

        Args:
            elements: Elements a channel-owned group's member received (an
                ElementBatch, a list, or one Element).

        Raises:
            InvalidTypeError: not Elements (None, a str, a dict, ... too; nothing
                recorded).
            GroupModeError: an anonymous subscriber's or a shared group's element
                (nothing recorded).
        """
        self._check_open()
        elements = (
            [elements] if isinstance(elements, Element) else check_items(elements, "elements")
        )
        latest: dict[Address, ConsumedCommit] = {}
        for element in elements:
            if not isinstance(element, Element):
                raise InvalidTypeError(f"expected Elements, got {type(element).__name__}")
            origin = element._origin
            if origin.shared:
                raise GroupModeError(
                    f"element {element.position} was received in a shared group: "
                    "transactions commit channel-owned groups' positions (ack it instead)"
                )
            if origin.fence is None:
                raise GroupModeError(
                    f"element {element.position} was received by an anonymous subscriber: "
                    "only a group member's positions commit"
                )
            at = Address(origin.namespace, origin.topic, origin.topic_id, element.channel)
            held = latest.get(at) or self._commits.get(at)
            if held is None or element.sequence >= held.sequence:
                latest[at] = ConsumedCommit(
                    origin.reader, element.sequence, origin.fence, origin.jumps
                )
        self._commits.update(latest)

    # -- the end ------------------------------------------------------------------

    def commit(self) -> TransactionResult:
        """Commit: every output appears and every consumed position moves, or nothing.

        Returns:
            TransactionResult(published, committed).

        Raises:
            TransactionFencedError: a newer incarnation of the id exists (aborted).
            TransactionAbortedError: it could not commit (a member lost a
                consumed channel, a channel lost staged elements, it timed
                out); nothing took effect.
            DataLossError: it committed, but a channel restarted without a
                store after it prepared, losing its part (as any element
                there was lost).
        """
        self._check_open()
        if self._doomed is not None:
            self.abort()
            raise TransactionAbortedError(
                f"transaction {self.key} aborted: {self._doomed}", self._doomed
            )
        self._state = "committing"
        holder = self._holder
        participants = sorted(set(self._staged) | set(self._commits))
        if not participants:
            self._state = "committed"
            return TransactionResult({}, [])
        # The lead decides: a channel with outputs if there is one (its outputs are
        # visible when it answers; the inputs' commits follow, pinned meanwhile).
        lead = min(self._staged) if self._staged else min(self._commits)
        others = [at for at in participants if at != lead]
        committing = holder._registry.committing.remote(
            holder.transactional_id, holder.epoch, self.key, self.deadline, lead, others
        )
        prepares = {
            at: send(
                at,
                PrepareTransaction(
                    self.key,
                    holder.transactional_id,
                    self.deadline,
                    lead,
                    self._staged.get(at, 0),
                    self._commits_at(at),
                ),
            )
            for at in others
        }
        failure = self._failure_of([committing, *prepares.values()])
        if failure is not None:
            self._abort_everywhere(lead, others, failure.reason)
            raise failure
        decide = DecideTransaction(
            self.key,
            holder.transactional_id,
            self.deadline,
            Outcome.COMMIT,
            "",
            self._staged.get(lead, 0),
            self._commits_at(lead),
            holder.forgets_ready(lead),
        )
        try:
            outcome, reason, lead_runs = _get(send(lead, decide))
        except (TopicError, ray.exceptions.RayActorError) as error:
            # Undecided or unknown: the participants ask the lead at the deadline.
            self._aborted()
            raise TransactionAbortedError(
                f"transaction {self.key}: its lead channel failed ({error}); its "
                "participants settle it with the lead (if undecided, aborted at its deadline)",
                "the lead channel failed",
            ) from error
        if outcome != Outcome.COMMIT:
            self._finish_everywhere(others, Outcome.ABORT, reason)
            self._aborted()
            error_class = TransactionFencedError if reason == FENCED else TransactionAbortedError
            raise error_class(f"transaction {self.key} was aborted: {reason}", reason)
        # Outputs are awaited (visible when commit() returns); a commit-only
        # participant's finish is not: its group waits for it, nothing else does.
        # The lead forgets the outcome only once every finish succeeded: a
        # participant whose finish failed asks the lead, which must still know.
        finishes = self._send_finish(others, Outcome.COMMIT, "")
        outputs = {at: ref for at, ref in finishes.items() if at in self._staged}
        runs, lost = self._collect_finishes(outputs, Outcome.COMMIT)
        runs[lead] = lead_runs
        holder._forgets.append((lead, self.key, list(finishes.values())))
        self._state = "committed"
        if lost:
            raise lost[0]
        return self._result(runs)

    def abort(self) -> None:
        """Drop every staged output and commit nothing (a no-op once it ended)."""
        if self._state != "open":
            return
        self._state = "aborting"
        self._finish_everywhere(sorted(self._staged), Outcome.ABORT, "aborted by its holder")
        self._aborted()

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        if kind is not None:
            with contextlib.suppress(TopicError):  # else its channels abort it at its deadline
                self.abort()
            return
        if self._state == "open":
            self.commit()

    def __reduce__(self) -> Any:
        raise TypeError("a Transaction does not pickle: only its holder knows what it staged")

    def __repr__(self) -> str:
        return f"Transaction({self.key!r}, {self._state})"

    # -- parts --------------------------------------------------------------------

    def _check_open(self) -> None:
        self._holder._check_usable()
        if time.time() >= self.deadline and self._state == "open":
            self._doomed = "it timed out before it committed"
        if self._state != "open":
            raise InvalidArgumentError(f"transaction {self.key} is {self._state}")

    def _commits_at(self, at: Address) -> tuple[ConsumedCommit, ...]:
        commit = self._commits.get(at)
        return () if commit is None else (commit,)

    def _failure_of(self, refs: list[Any]) -> TransactionAbortedError | None:
        """The first reason the calls give not to commit (None: commit)."""
        failure = None
        for ref in refs:
            try:
                _get(ref)
            except TransactionAbortedError as error:
                if isinstance(error, TransactionFencedError):
                    self._holder._fenced = True
                failure = failure or error
            except (TopicError, ray.exceptions.RayActorError) as error:
                failure = failure or TransactionAbortedError(
                    f"transaction {self.key}: a participant failed to prepare: {error}",
                    f"a participant failed to prepare: {error}",
                )
        return failure

    def _abort_everywhere(self, lead: Address, others: list[Address], reason: str) -> None:
        """Decide "abort" at the lead, then tell the others (best effort: a channel not
        told asks the lead later)."""
        decide = DecideTransaction(
            self.key, self._holder.transactional_id, self.deadline, Outcome.ABORT, reason, 0, ()
        )
        with contextlib.suppress(TopicError, ray.exceptions.RayActorError):
            _get(send(lead, decide))
        self._finish_everywhere(others, Outcome.ABORT, reason)
        self._aborted()

    def _finish_everywhere(
        self, participants: list[Address], outcome: Outcome, reason: str
    ) -> tuple[dict[Address, Any], list[DataLossError]]:
        """Tell each participant the outcome; returns each one's runs and the losses."""
        return self._collect_finishes(self._send_finish(participants, outcome, reason), outcome)

    def _send_finish(
        self, participants: list[Address], outcome: Outcome, reason: str
    ) -> dict[Address, Any]:
        """Send each participant the outcome; returns each one's reply (an ObjectRef)."""
        finish = FinishTransaction(
            self.key, self._holder.transactional_id, self.deadline, outcome, reason
        )
        return {at: send(at, finish) for at in participants}

    def _collect_finishes(
        self, refs: dict[Address, Any], outcome: Outcome
    ) -> tuple[dict[Address, Any], list[DataLossError]]:
        """Each participant's runs, and the losses, from its reply to a finish."""
        runs: dict[Address, Any] = {}
        lost: list[DataLossError] = []
        for at, ref in refs.items():
            try:
                runs[at] = _get(ref)
            except DataLossError as error:
                lost.append(error)
            except (TopicError, ray.exceptions.RayActorError):
                if outcome == Outcome.COMMIT:  # it asks the lead: the commit completes there
                    continue
        return runs, lost

    def _aborted(self) -> None:
        """It aborted: its inputs go back to their members; the registry forgets it."""
        self._state = "aborted"
        self._rewind_consumed()
        holder = self._holder
        holder._registry.ended.remote(holder.transactional_id, holder.epoch, self.key)

    def _rewind_consumed(self) -> None:
        """An aborted transaction's inputs are delivered again: each member of this
        process whose elements it consumed goes back to its last commit (a member
        elsewhere, or one that lost the channel, reads again from there anyway)."""
        for (_, _, topic_id, channel), commit in self._commits.items():
            member = live_subscriber(commit.reader_id)
            if member is None or member._topic.topic_id != topic_id:
                continue
            with contextlib.suppress(TopicError, ray.exceptions.RayActorError):
                if member.is_owner(channel):
                    member.seek_to_committed(channel)

    def _result(self, runs: dict[Address, Any]) -> TransactionResult:
        published: dict[str, dict[int, list[Position]]] = {}
        for at, channel_runs in sorted(runs.items()):
            positions = [
                Position(at.topic_id, at.channel, sequence)
                for first, count in channel_runs
                for sequence in range(first, first + count)
            ]
            if positions:
                published.setdefault(at.topic, {})[at.channel] = positions
        committed = [
            CommitResult(
                at.channel,
                Position(at.topic_id, at.channel, commit.sequence),
                CommitStatus.COMMITTED,
            )
            for at, commit in sorted(self._commits.items())
        ]
        return TransactionResult(published, committed)


def _all_succeeded(refs: list[Any]) -> bool:
    try:
        ray.get(refs)
    except Exception:
        return False
    return True


def _get(ref: Any) -> Any:
    """``ray.get`` with raytopic's errors unwrapped; a destroyed topic's channel is
    TopicNotFoundError."""
    try:
        with unwrap_ray_error():
            return ray.get(ref)
    except ray.exceptions.ActorDiedError as error:
        raise TopicNotFoundError("a topic of the transaction was destroyed") from error
