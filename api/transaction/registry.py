"""The transaction registry: one actor per namespace that knows which incarnation of
each transactional id is the newest, and fences the older ones.

It is not on a transaction's data path and holds no decision: a transaction's
outcome is recorded by its lead channel (``raytopic.actors.transactions``).
The registry keeps, per transactional id, the newest incarnation (its epoch),
the channels it ever staged elements at (``join``, once per channel) and the
transaction it is committing, with its lead and other participants
(``committing``, told by the lead before it prepares the others). A new
incarnation (``open``) aborts the older one's open transaction: at its lead if
it is committing (first come first served with the lead's own decision), and
at every channel it staged at, which then refuses the older holder's stagings
(``TransactionFencedError``).

**Durability**: the registry keeps this on a compacted topic keyed by
transactional id (``TRANSACTION_STATE``, as Kafka keeps ``__transaction_state``;
``raytopic.client.control_log``), and answers a call only once the change it made is
held there. A restarted registry reads it back before it answers anything, so
it still fences every older incarnation: one that stages at a channel it never
used before, or commits, is refused (nothing is taken as the newest because it
is the first heard of).

The state topic's store is the one the namespace's first ``rt.transactions(...,
store=)`` named (the registry is made with it, and restarts with it): a directory
every node mounts keeps the state through the loss of the node its channel ran on
(the channel restarts elsewhere and reads it back). Without one it is the Ray
session's directory on one node, whose loss leaves the namespace's transactions
failing (``ChannelFailedError``). An open naming another store than the running
registry's is refused (``TopicSettingsError``), changing nothing; one naming none
takes the registry's (a worker need not repeat it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import ray

from raytopic.actors.transactions import send
from raytopic.client.control_log import ControlLogLoader
from raytopic.core.errors import ClosedError, TopicSettingsError, TransactionFencedError
from raytopic.core.naming import transaction_registry_name
from raytopic.core.protocol import (
    FENCED,
    Address,
    CloseIncarnation,
    DecideTransaction,
    DescribeIncarnations,
    FenceTransactions,
    FinishTransaction,
    JoinIncarnation,
    OpenIncarnation,
    Outcome,
    RegistryRequest,
    TransactionAborted,
    TransactionCommitting,
)

logger = logging.getLogger(__name__)

__all__ = ["TRANSACTION_STATE", "TransactionRegistry", "registry_actor", "store_key"]

TRANSACTION_STATE = "raytopic-transaction-state"
"""The compacted topic (one per namespace) the registry keeps its state on."""

FENCE_CALL_TIMEOUT = 30.0
"""Seconds the registry waits for one channel while it aborts a fenced transaction."""


@dataclass(slots=True)
class _Committing:
    """An incarnation's transaction being decided at ``lead``."""

    key: str
    deadline: float
    lead: Address
    others: tuple[Address, ...]

    def record(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "deadline": self.deadline,
            "lead": list(self.lead),
            "others": [list(at) for at in self.others],
        }

    @classmethod
    def of(cls, record: dict[str, Any]) -> _Committing:
        return cls(
            record["key"],
            record["deadline"],
            _address(record["lead"]),
            tuple(_address(at) for at in record["others"]),
        )


@dataclass(slots=True)
class _Incarnation:
    epoch: int
    closed: bool = False
    channels: set[Address] = field(default_factory=set)
    """Every channel the incarnation staged elements at."""
    committing: _Committing | None = None

    def record(self) -> dict[str, Any]:
        """What the state topic keeps of it (version 1: plain data)."""
        return {
            "version": 1,
            "epoch": self.epoch,
            "closed": self.closed,
            "channels": sorted(list(at) for at in self.channels),
            "committing": None if self.committing is None else self.committing.record(),
        }

    @classmethod
    def of(cls, record: dict[str, Any]) -> _Incarnation:
        committing = record["committing"]
        return cls(
            record["epoch"],
            record["closed"],
            {_address(at) for at in record["channels"]},
            None if committing is None else _Committing.of(committing),
        )


def _address(at: list[Any]) -> Address:
    return tuple(at)  # type: ignore[return-value]


class TransactionRegistry:
    """The newest incarnation of each transactional id of a namespace (a Ray actor).

    Args:
        namespace: The namespace it serves.
        store: The state topic's store (as ``create_topic``'s, checked); None: the
            Ray session's directory (``raytopic.client.control_log.session_store``).
    """

    def __init__(self, namespace: str, store: Any = None) -> None:
        self._ids: dict[str, _Incarnation] = {}
        self._namespace = namespace
        self._store = store_key(store)
        self._control = ControlLogLoader(TRANSACTION_STATE, namespace, store, self._restore)
        self._fencings = _fencing_counter(namespace)

    def _restore(self, records: dict[str, Any]) -> None:
        """The state topic read back (before the first answer)."""
        self._ids = {tid: _Incarnation.of(record) for tid, record in records.items()}

    async def _keep(self, transactional_id: str, incarnation: _Incarnation) -> None:
        """Write the incarnation as its id's record; return once the topic holds it."""
        log = await self._control.loaded()
        await log.written(log.write(transactional_id, incarnation.record()))

    async def request(self, request: RegistryRequest) -> Any:
        """Serve a holder's or a lead's request (see ``raytopic.core.protocol.registry``).

        Raises:
            TransactionFencedError: a join or a committing transaction of an
                incarnation older than the newest.
            ClosedError: the incarnation was closed by its holder.
            TopicSettingsError: an open naming another store than the registry's.
        """
        if (
            isinstance(request, OpenIncarnation)
            and request.store is not None  # None: whatever store the registry keeps
            and request.store != self._store
        ):
            # Before the state is read: a refused open reads and changes nothing.
            raise TopicSettingsError(
                f"the transaction registry of namespace {self._namespace!r} keeps its "
                f"state in {_shown(self._store)}, not {_shown(request.store)}: every "
                "rt.transactions() of a namespace names the same store",
                {"store": (self._store, request.store)},
            )
        log = await self._control.loaded()
        match request:
            case OpenIncarnation():
                return await self._open(request)
            case JoinIncarnation(transactional_id, epoch, at):
                incarnation = self._current(transactional_id, epoch)
                if tuple(at) not in incarnation.channels:
                    incarnation.channels.add(tuple(at))  # type: ignore[arg-type]
                    await self._keep(transactional_id, incarnation)
            case TransactionCommitting(transactional_id, epoch, key, deadline, lead, others):
                incarnation = self._current(transactional_id, epoch)
                incarnation.committing = _Committing(
                    key,
                    deadline,
                    tuple(lead),  # type: ignore[arg-type]
                    tuple(tuple(at) for at in others),  # type: ignore[misc]
                )
                await self._keep(transactional_id, incarnation)
            case TransactionAborted(transactional_id, epoch, key):
                known = self._incarnation(transactional_id, epoch)
                committing = None if known is None else known.committing
                if known is not None and committing is not None and committing.key == key:
                    known.committing = None
                    # Not waited for: a record still naming it only makes a later
                    # fencing ask its lead, which answers with the outcome it recorded.
                    log.write(transactional_id, known.record())
            case CloseIncarnation(transactional_id, epoch):
                known = self._incarnation(transactional_id, epoch)
                if known is not None:
                    known.closed = True
                    known.committing = None
                    await self._keep(transactional_id, known)
            case DescribeIncarnations():
                return self._describe()
            case _:
                raise TypeError(f"not a registry request: {type(request).__name__}")
        return None

    async def _open(self, request: OpenIncarnation) -> int:
        """Start a new incarnation; its epoch. The older one's open transaction is
        aborted first (or found committed)."""
        transactional_id = request.transactional_id
        held = self._ids.get(transactional_id)
        epoch = max(time.time_ns(), held.epoch + 1 if held else 0)
        incarnation = self._ids[transactional_id] = _Incarnation(epoch)
        await self._keep(transactional_id, incarnation)
        if held is not None and not held.closed:
            self._fencings.inc()
            await _fence(transactional_id, held, epoch)
        return epoch

    def _describe(self) -> dict[str, Any]:
        return {
            tid: {
                "epoch": incarnation.epoch,
                "closed": incarnation.closed,
                "committing": None
                if incarnation.committing is None
                else incarnation.committing.key,
            }
            for tid, incarnation in self._ids.items()
        }

    def _incarnation(self, transactional_id: str, epoch: int) -> _Incarnation | None:
        """The incarnation ``epoch`` of the id if it is the newest (None: it is not)."""
        incarnation = self._ids.get(transactional_id)
        return incarnation if incarnation is not None and incarnation.epoch == epoch else None

    def _current(self, transactional_id: str, epoch: int) -> _Incarnation:
        incarnation = self._ids.get(transactional_id)
        if incarnation is None:  # opened in another cluster's session: newest here
            incarnation = self._ids[transactional_id] = _Incarnation(epoch)
        if incarnation.epoch > epoch:
            raise TransactionFencedError(
                f"a newer holder of transactional id {transactional_id!r} exists", FENCED
            )
        if incarnation.epoch < epoch:  # opened in another session of the state topic
            self._ids[transactional_id] = incarnation = _Incarnation(epoch)
        if incarnation.closed:
            raise ClosedError(f"transactional id {transactional_id!r} was closed by its holder")
        return incarnation


async def _fence(transactional_id: str, held: _Incarnation, epoch: int) -> None:
    """Abort what a fenced incarnation has open: the transaction it is committing, at
    its lead (whose answer is the outcome: commit, if the holder decided first),
    then at its other participants; and its staged transaction at every channel
    it staged at (which also refuses its later stagings)."""
    calls = []
    committing = held.committing
    if committing is not None:
        decide = DecideTransaction(
            committing.key, transactional_id, committing.deadline, Outcome.ABORT, FENCED, 0, ()
        )
        try:
            outcome, reason, _ = await asyncio.wait_for(
                send(committing.lead, decide), FENCE_CALL_TIMEOUT
            )
            finish = FinishTransaction(
                committing.key, transactional_id, committing.deadline, outcome, reason
            )
            calls += [send(at, finish) for at in committing.others]
        except Exception as error:  # its participants ask the lead at its deadline
            logger.warning("could not abort fenced transaction %s: %s", committing.key, error)
    fencing = FenceTransactions(transactional_id, epoch)
    calls += [send(at, fencing) for at in held.channels]
    results = await asyncio.gather(
        *(asyncio.wait_for(call, FENCE_CALL_TIMEOUT) for call in calls), return_exceptions=True
    )
    for result in results:
        if isinstance(result, Exception):
            logger.warning("fencing %r: a channel did not answer: %s", transactional_id, result)


def _fencing_counter(namespace: str) -> Any:
    """``raytopic_transaction_fencings``: incarnations fenced by a newer one."""
    if not ray.is_initialized():
        return _NoCounter()
    from ray.util.metrics import Counter

    counter = Counter(
        "raytopic_transaction_fencings",
        description="Transactional-id incarnations fenced by a newer one",
        tag_keys=("namespace",),
    )
    counter.set_default_tags({"namespace": namespace})
    return counter


class _NoCounter:
    def inc(self, value: float = 1.0) -> None:
        pass


def store_key(store: Any) -> str | None:
    """What tells a checked store (``raytopic.core.config.check_store``) from another:
    its directory, ``factory <module.qualname>``, or None (the session's directory)."""
    if store is None or isinstance(store, str):
        return store
    return f"factory {store.name}"  # a PickledFunction: compared by name, never loaded


def _shown(key: str | None) -> str:
    return "the Ray session's directory (no store)" if key is None else repr(key)


def registry_actor(namespace: str, store: Any = None) -> Any:
    """The namespace's transaction registry (started on first use, with ``store``, a
    checked store, for its state; named, detached: a running one keeps its own)."""
    return (
        ray.remote(TransactionRegistry)
        .options(
            name=transaction_registry_name(),
            namespace=namespace,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_concurrency=1000,
            max_restarts=-1,
            max_task_retries=-1,
        )
        .remote(namespace, store)
    )
