"""Transactions: a group member's outputs and its input commits as one atomic step.

``rt.transactions(id)`` starts an incarnation of a transactional id (fencing
every older one); ``begin()`` opens a transaction, whose publishes are staged
at their channels, apart from the ring, and whose ``commit()`` asks its lead
channel, in one call, to run the two-phase commit over the channels it touched
(see ``raytopic.actors.transaction_lead`` for the commit,
``raytopic.actors.transactions`` for a channel's part and
``raytopic.transaction.registry`` for fencing)::

    txs = rt.transactions("doubler")
    member = source.subscriber(group="etl")
    for batch in member.iter_batches(100):
        with txs.begin() as tx:          # commits on exit; aborts if the block raises
            tx.publish_batch(sink, [2 * e.value for e in batch])
            tx.commit_consumed(batch)
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import ray

from raytopic.actors.cursors import bounded
from raytopic.actors.transaction_lead import lead_of
from raytopic.actors.transactions import send
from raytopic.client.batch_parts import check_keyed, encode_part, parts_of, route, routed_keys
from raytopic.client.topic import Topic
from raytopic.client.transaction_inputs import give_back
from raytopic.core.commit_guards import before_commit
from raytopic.core.config import (
    check_instance,
    check_items,
    check_namespace,
    check_store,
    check_timeout,
)
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
    CloseIncarnation,
    ConsumedCommit,
    EndTransaction,
    JoinIncarnation,
    OpenIncarnation,
    Outcome,
    StageTransaction,
    TransactionEnded,
    TransactionPart,
)
from raytopic.core.records import (
    CommitResult,
    CommitStatus,
    Element,
    Position,
    TransactionResult,
)
from raytopic.transaction.registry import registry_actor, store_key

__all__ = ["Transaction", "Transactions", "transactions"]

STAGE_TIMEOUT = 30.0
"""Seconds a staged publish waits for room (overflow "block") at most."""


def transactions(
    transactional_id: str,
    *,
    namespace: str | None = None,
    timeout: float = 60.0,
    store: Any = None,
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
        store: Where the namespace's transaction registry keeps its state (as
            ``create_topic``'s ``store``): a directory every node mounts keeps it
            through the loss of a node. Fixed by the namespace's first call; a
            later call names the same or none (None: the running registry's
            store). A registry first made without one keeps its state in the Ray
            session's directory on one node, whose loss stops the namespace's
            transactions (docs/guides/transactions.md).

    Returns:
        The holder's Transactions.

    Raises:
        InvalidArgumentError, InvalidTypeError: a bad id, namespace, timeout or
            store (nothing is fenced).
        TopicSettingsError: the namespace's registry keeps its state in another
            store (its ``differences["store"]``: (the registry's, the one asked));
            nothing is fenced.
    """
    if not isinstance(transactional_id, str) or not transactional_id:
        raise InvalidTypeError("a transactional id must be a non-empty str")
    checked_timeout = check_timeout(timeout, "timeout", allow_none=False)
    return Transactions(
        transactional_id, check_namespace(namespace), checked_timeout, check_store(store)
    )


class Incarnation:
    """What an incarnation of a transactional id knows and asks the registry (shared by
    its ``Transactions`` and their ``Transaction``s).

    Args:
        transactional_id: The id.
        namespace: The Ray namespace of its registry and topics.
        store: The registry's store (checked), or None.
    """

    def __init__(self, transactional_id: str, namespace: str, store: Any = None) -> None:
        self.transactional_id = transactional_id
        self.namespace = namespace
        self._registry = registry_actor(namespace, store)
        opening = OpenIncarnation(transactional_id, store_key(store))
        with unwrap_ray_error():
            self.epoch: int = ray.get(self._registry.request.remote(opening))
        self.fenced = False
        """A call met a newer incarnation (every later call raises)."""
        self.closed = False
        self._joined: set[Address] = set()  # channels the registry knows we stage at
        self._next_channel: dict[str, int] = {}  # topic id -> next round-robin channel
        self.consumed_from: set[str] = set()
        """Reader ids whose elements its transactions consumed: an abort of any of them
        sends these members back to their commits (``raytopic.client.transaction_inputs``)."""

    def check_usable(self) -> None:
        """Raises TransactionFencedError or ClosedError if it is no longer usable."""
        if self.fenced:
            raise TransactionFencedError(
                f"a newer holder of transactional id {self.transactional_id!r} exists", FENCED
            )
        if self.closed:
            raise ClosedError(f"transactions of {self.transactional_id!r} were closed")

    def route(self, topic: Topic, count: int, hashes: list[int | None] | None) -> np.ndarray:
        """Each value's channel: by key, the rest in turn (as a publisher routes)."""
        start = self._next_channel.get(topic.topic_id, 0)
        layout, self._next_channel[topic.topic_id] = route(
            count, hashes, topic.channel_count, start
        )
        return layout

    def join(self, at: Address) -> Any:
        """Tell the registry the incarnation stages at ``at``, once per channel;
        returns the call's ObjectRef (None: told before)."""
        if at in self._joined:
            return None
        return self._registry.request.remote(JoinIncarnation(self.transactional_id, self.epoch, at))

    def joined(self, channels: Iterable[Address]) -> None:
        """The registry knows of these channels now."""
        self._joined.update(channels)

    def close(self) -> None:
        """It starts no more transactions; the registry forgets it."""
        self.closed = True
        self._registry.request.remote(CloseIncarnation(self.transactional_id, self.epoch))


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
        store: The registry's store (checked), or None.
    """

    def __init__(
        self, transactional_id: str, namespace: str, timeout: float, store: Any = None
    ) -> None:
        self._incarnation = Incarnation(transactional_id, namespace, store)
        self.timeout = timeout
        self._numbers = itertools.count()
        self._open: Transaction | None = None

    @property
    def transactional_id(self) -> str:
        return self._incarnation.transactional_id

    @property
    def namespace(self) -> str:
        return self._incarnation.namespace

    @property
    def epoch(self) -> int:
        return self._incarnation.epoch

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
        self._incarnation.check_usable()
        if self._open is not None and self._open.is_open:
            raise InvalidArgumentError(
                f"transaction {self._open.key} is still open: commit or abort it first"
            )
        key = f"{self.transactional_id}@{self.epoch}.{next(self._numbers)}"
        self._open = Transaction(self._incarnation, key, time.time() + self.timeout)
        return self._open

    def close(self) -> None:
        """Abort the open transaction, if any, and end this incarnation."""
        if self._incarnation.closed:
            return
        if self._open is not None and self._open.is_open:
            with contextlib.suppress(TopicError):  # else its channels abort it at its deadline
                self._open.abort()
        self._incarnation.close()

    def __enter__(self) -> Transactions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> Any:
        raise TypeError("Transactions do not pickle: call rt.transactions(id) in the process")

    def __repr__(self) -> str:
        return f"Transactions({self.transactional_id!r}, epoch={self.epoch})"


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

    **Aborts lose nothing** (an exception in the block, ``abort()``, a failed
    commit): the group members it may have consumed from go back to their last
    commit, ``commit_consumed`` called or not: every owned group's member that
    received on the thread that ends it, and every member whose elements its
    holder consumed (see ``raytopic.client.transaction_inputs``). Each receives again
    what it received since; a commit of an element received before is REJECTED.
    """

    def __init__(self, incarnation: Incarnation, key: str, deadline: float) -> None:
        self._incarnation = incarnation
        self.key = key
        self.deadline = deadline
        self._staged: dict[Address, int] = {}
        # Consumed commits by channel and reader (a group): two groups of one topic
        # consumed in one transaction commit each its own positions.
        self._commits: dict[tuple[Address, Any], ConsumedCommit] = {}
        # The positions it consumed, per channel and reader: those above where the
        # commit stops there are made done with it (a resequencing member's commit
        # stops at its hand-over mark, and a channel's below what a reply Ray dropped
        # carried: see Cursor.consumed).
        self._consumed: dict[tuple[Address, Any], set[int]] = {}
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
            TopicError: as ``publish_batch`` raises them (see it).
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
            InvalidTypeError, InvalidArgumentError: a bad value, key or topic, a
                value without a key for a compacted topic, or ``values`` or
                ``keys`` that is not a list of them (None, a str, a dict); nothing
                is staged, and the transaction goes on.
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
        keys, hashes = routed_keys(keys)
        if topic.config.compaction is not None:
            check_keyed(topic.name, keys, len(values))
        incarnation = self._incarnation
        layout = incarnation.route(topic, len(values), hashes)
        parts = {
            channel: encode_part(values, keys, indices)
            for channel, indices in parts_of(layout).items()
        }
        timeout = min(STAGE_TIMEOUT, max(0.0, self.deadline - time.time()))
        stage = StageTransaction(self.key, incarnation.transactional_id, self.deadline, timeout)
        refs, joins = {}, []
        for channel, payload in parts.items():
            at = Address(topic.namespace, topic.name, topic.topic_id, channel)
            join = incarnation.join(at)
            if join is not None:
                joins.append(join)
            try:
                refs[at] = send(at, stage, payload)
            except TopicNotFoundError:
                self._await_stagings(refs, joins)
                raise
        self._await_stagings(refs, joins)

    def _await_stagings(self, refs: dict[Address, Any], joins: list[Any]) -> None:
        """Wait for staging calls; the counts they report are what prepare checks."""
        first_error: Exception | None = None
        for ref in joins:
            try:
                _get(ref)
            except TransactionFencedError as error:
                self._incarnation.fenced = True
                first_error = first_error or error
        if first_error is not None:  # staged after the registry aborted the rest: drop it
            with contextlib.suppress(TopicError):
                self._end(Outcome.ABORT, FENCED, [TransactionPart(at, 0, ()) for at in refs])
        self._incarnation.joined(refs)
        for at, ref in refs.items():
            try:
                self._staged[at] = _get(ref)
            except TransactionAbortedError as error:
                if isinstance(error, TransactionFencedError):
                    self._incarnation.fenced = True
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
        and so every earlier one): they move with the outputs, or not reader_at all.

        A resequencing member's commit reader_at a channel stops below an element it has
        not handed over yet (its hand-over mark); these elements' positions above
        it are committed as done instead (never delivered to the group again, even
        after an abort or a restart sends the member back to its commit).

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
        latest: dict[tuple[Address, Any], ConsumedCommit] = {}
        marks: dict[tuple[Address, Any], int] = {}
        for element in elements:
            if not isinstance(element, Element):
                raise InvalidTypeError(f"expected Elements, got {type(element).__name__}")
            origin = element._origin
            if origin.shared:
                raise GroupModeError(
                    f"element {element.position} was received in a shared group: "
                    "transactions commit channel-owned groups' positions (ack it instead)"
                )
            if origin.lease is None:
                raise GroupModeError(
                    f"element {element.position} was received by an anonymous subscriber: "
                    "only a group member's positions commit"
                )
            reader_at = (
                Address(origin.namespace, origin.topic, origin.topic_id, element.channel),
                origin.reader,
            )
            self._incarnation.consumed_from.add(origin.reader)
            mark = origin.handed_upto
            if mark is not None and (reader_at not in marks or mark > marks[reader_at]):
                marks[reader_at] = mark
            self._consumed.setdefault(reader_at, set()).add(element.sequence)
            held = latest.get(reader_at)
            if held is None or element.sequence >= held.sequence:
                latest[reader_at] = ConsumedCommit(
                    origin.reader, element.sequence, origin.lease, origin.jumps
                )
        for reader_at, commit in latest.items():
            # A resequencing member's commit goes no further than its hand-over mark
            # (see Element.commit): the highest of these elements' is the batch's.
            commit = dataclasses.replace(
                commit, sequence=bounded(commit.sequence, marks.get(reader_at))
            )
            held = self._commits.get(reader_at)
            if held is None or commit.sequence >= held.sequence:
                self._commits[reader_at] = commit

    # -- the end ------------------------------------------------------------------

    def commit(self) -> TransactionResult:
        """Commit: every output appears and every consumed position moves, or nothing.

        One call: the transaction's lead channel runs the two-phase commit over
        every channel it touched (``raytopic.actors.transaction_lead``).

        Returns:
            TransactionResult(published, committed).

        Raises:
            TransactionFencedError: a newer incarnation of the id exists (aborted).
            TransactionAbortedError: it could not commit (a member lost a
                consumed channel, a channel lost staged elements, it timed
                out, its lead channel failed); nothing took effect.
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
        self._guard_commits()
        parts = self._parts()
        if not parts:
            self._state = "committed"
            return TransactionResult({}, [])
        try:
            ended = self._end(Outcome.COMMIT, "", parts)
        except DataLossError:
            self._state = "committed"
            raise
        except TopicError as error:
            # Undecided or unknown: its participants resolve it with the lead.
            self._aborted()
            raise TransactionAbortedError(
                f"transaction {self.key}: its lead channel failed ({error}); its "
                "participants resolve it with the lead (if undecided, aborted at its deadline)",
                "the lead channel failed",
            ) from error
        if ended.outcome != Outcome.COMMIT:
            self._aborted()
            if ended.reason == FENCED:
                self._incarnation.fenced = True
                raise TransactionFencedError(
                    f"transaction {self.key} was aborted: {ended.reason}", FENCED
                )
            raise TransactionAbortedError(
                f"transaction {self.key} was aborted: {ended.reason}", ended.reason
            )
        self._state = "committed"
        return self._result(dict(ended.runs))

    def abort(self) -> None:
        """Drop every staged output and commit nothing (a no-op once it ended); the
        members it may have consumed from go back to their last commit (see Aborts)."""
        if self._state != "open":
            return
        self._state = "aborting"
        parts = [TransactionPart(at, count, ()) for at, count in sorted(self._staged.items())]
        try:
            if parts:
                with contextlib.suppress(TopicError):  # else its channels abort it at its deadline
                    self._end(Outcome.ABORT, "aborted by its holder", parts)
        finally:
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
        self._incarnation.check_usable()
        if time.time() >= self.deadline and self._state == "open":
            self._doomed = "it timed out before it committed"
        if self._state != "open":
            raise InvalidArgumentError(f"transaction {self.key} is {self._state}")

    def _guard_commits(self) -> None:
        """Run each consumed reader's commit guard (a lost reply's elements: see
        ``commit_guards``); a resequencing reader's commits go no further than it says."""
        for reader in sorted({reader for _, reader in self._commits}):
            floors = before_commit(reader)
            for (at, of), commit in list(self._commits.items()):
                if floors and of == reader and at.channel in floors:
                    sequence = bounded(commit.sequence, floors[at.channel])
                    self._commits[at, of] = dataclasses.replace(commit, sequence=sequence)

    def _commits_at(self, at: Address) -> tuple[ConsumedCommit, ...]:
        commits = []
        for (address, reader), commit in sorted(self._commits.items()):
            if address != at:
                continue
            commits.append(commit.with_done(self._consumed.get((address, reader), ())))
        return tuple(commits)

    def _parts(self) -> list[TransactionPart]:
        """What it does at each channel it touched."""
        return [
            TransactionPart(at, self._staged.get(at, 0), self._commits_at(at))
            for at in sorted(set(self._staged) | {at for at, _ in self._commits})
        ]

    def _end(self, outcome: Outcome, reason: str, parts: list[TransactionPart]) -> TransactionEnded:
        """Ask the lead of ``parts`` to end the transaction with ``outcome``; returns
        what it decided.

        Raises:
            DataLossError: it committed, losing a participant's part.
            TopicError: the lead failed (a Ray failure included).
        """
        incarnation = self._incarnation
        request = EndTransaction(
            self.key,
            incarnation.transactional_id,
            incarnation.epoch,
            incarnation.namespace,
            self.deadline,
            outcome,
            reason,
            tuple(parts),
        )
        try:
            return _get(send(lead_of(parts), request))
        except ray.exceptions.RayError as error:
            raise TopicError(f"the lead channel failed: {error}") from error

    def _aborted(self) -> None:
        """It aborted: its inputs go back to their members, whatever it was told of them
        (see ``raytopic.client.transaction_inputs``)."""
        self._state = "aborted"
        give_back(self._incarnation.consumed_from, self._commits.items())

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
            for (at, _), commit in sorted(self._commits.items())
        ]
        return TransactionResult(published, committed)


def _get(ref: Any) -> Any:
    """``ray.get`` with raytopic's errors unwrapped; a destroyed topic's channel is
    TopicNotFoundError."""
    try:
        with unwrap_ray_error():
            return ray.get(ref)
    except ray.exceptions.ActorDiedError as error:
        raise TopicNotFoundError("a topic of the transaction was destroyed") from error
