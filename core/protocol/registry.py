"""What a transaction's holder and lead ask of the namespace's transaction registry
(``raytopic.transaction.registry``), typed as a channel's requests are:
the registry serves them through one entry, ``request``.
"""

from __future__ import annotations

from typing import NamedTuple

from raytopic.core.protocol.records import Address

__all__ = [
    "CloseIncarnation",
    "DescribeIncarnations",
    "JoinIncarnation",
    "OpenIncarnation",
    "RegistryRequest",
    "TransactionAborted",
    "TransactionCommitting",
]


class OpenIncarnation(NamedTuple):
    """Start a new incarnation of ``transactional_id`` (its epoch is the reply); the
    older one's open transaction is aborted first (or found committed). Refused,
    changing nothing, if ``store`` is not the registry's (``TopicSettingsError``)."""

    transactional_id: str
    store: str | None = None
    """The store its opener named for the registry's state, as ``store_key`` tells it
    (``raytopic.transaction.registry``): a path, a factory's name, or None."""


class JoinIncarnation(NamedTuple):
    """The incarnation stages elements at channel ``at`` (told once per channel)."""

    transactional_id: str
    epoch: int
    at: Address


class TransactionCommitting(NamedTuple):
    """The incarnation's transaction ``key`` is about to be decided at ``lead`` (told by
    the lead before it prepares ``others``)."""

    transactional_id: str
    epoch: int
    key: str
    deadline: float
    lead: Address
    others: tuple[Address, ...]


class TransactionAborted(NamedTuple):
    """The transaction ``key`` aborted everywhere (told by its lead)."""

    transactional_id: str
    epoch: int
    key: str


class CloseIncarnation(NamedTuple):
    """The incarnation is closed by its holder (it starts no more transactions)."""

    transactional_id: str
    epoch: int


class DescribeIncarnations(NamedTuple):
    """Each transactional id's newest epoch, whether it is closed, and the transaction
    it is committing."""


RegistryRequest = (
    OpenIncarnation
    | JoinIncarnation
    | TransactionCommitting
    | TransactionAborted
    | CloseIncarnation
    | DescribeIncarnations
)
"""A request served by ``TransactionRegistry.request``."""
