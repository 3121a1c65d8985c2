"""raytopic: durable, partitioned publish/subscribe topics inside a Ray cluster.

Example:
    >>> import raytopic as rt
    >>> topic = rt.create_topic("orders", channels=4, groups=["billing"])
    >>> with topic.publisher() as publisher:
    ...     publisher.publish({"order": 1, "amount": 9.5}, key="customer-7")
    >>> with topic.subscriber(group="billing") as subscriber:
    ...     element = ray.get(subscriber.receive())
    ...     element.commit()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from raytopic.client.cluster import enable_token_for_ray_address as _enable_token_for_ray_address

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time, _EXPORTS
    from raytopic.actors.stores.base import RingbufferStore, StoredBatch
    from raytopic.autoscale.autoscaler import Autoscaler
    from raytopic.client.publisher import Publisher
    from raytopic.client.ringbuffer import Ringbuffer
    from raytopic.client.stats import (
        ChannelStats,
        GroupChannelStats,
        GroupStats,
        MemberStats,
        TopicStats,
    )
    from raytopic.client.subscriber import Subscriber
    from raytopic.client.table import TableView
    from raytopic.client.topic import Topic, create_topic, get_topic, list_topics
    from raytopic.core.compaction import Compaction
    from raytopic.core.config import Overflow, Start
    from raytopic.core.element_batch import ElementBatch
    from raytopic.core.errors import (
        ChannelFailedError,
        ChannelUnavailableError,
        ClosedError,
        DataLossError,
        ForeignElementError,
        GroupBusyError,
        GroupFilterError,
        GroupModeError,
        GroupNotFoundError,
        InvalidArgumentError,
        InvalidTypeError,
        NotOwnerError,
        PoisonElementError,
        PositionMismatchError,
        PublisherClosedError,
        ReceivePassedOverError,
        ResetInProgressError,
        StaleSequenceError,
        StoreError,
        SubscriberClosedError,
        TopicError,
        TopicExistsError,
        TopicFullError,
        TopicNotFoundError,
        TopicSettingsError,
        TransactionAbortedError,
        TransactionFencedError,
    )
    from raytopic.core.records import (
        AckStatus,
        CommitResult,
        CommitStatus,
        Element,
        OwnershipChange,
        Position,
        PublishStatus,
        PublishSummary,
        ReadResultSet,
        TransactionResult,
    )
    from raytopic.core.resequencer import Resequence, Resequencer, ResequencerStats
    from raytopic.core.scaling import AutoscalerStats, ScaledMember, ScaleEvent
    from raytopic.core.shared_group import SharedGroup
    from raytopic.transaction.handles import Transaction, Transactions, transactions

# A script's ray.init(address=RAY_ADDRESS) then sends the token a cluster asks for.
_enable_token_for_ray_address()

__all__ = [
    # lifecycle
    "create_topic",
    "get_topic",
    "list_topics",
    "transactions",
    # handles
    "Autoscaler",
    "Publisher",
    "Ringbuffer",
    "Subscriber",
    "TableView",
    "Topic",
    "Transaction",
    "Transactions",
    # stores
    "RingbufferStore",
    "StoredBatch",
    # records and options
    "AckStatus",
    "AutoscalerStats",
    "ChannelStats",
    "CommitResult",
    "CommitStatus",
    "Compaction",
    "Element",
    "ElementBatch",
    "GroupChannelStats",
    "GroupStats",
    "MemberStats",
    "Overflow",
    "OwnershipChange",
    "Position",
    "PublishStatus",
    "PublishSummary",
    "ReadResultSet",
    "ScaleEvent",
    "ScaledMember",
    "SharedGroup",
    "Start",
    "TopicStats",
    "TransactionResult",
    # resequencing
    "Resequence",
    "Resequencer",
    "ResequencerStats",
    # errors
    "ChannelFailedError",
    "ChannelUnavailableError",
    "ClosedError",
    "DataLossError",
    "ForeignElementError",
    "GroupBusyError",
    "GroupFilterError",
    "GroupModeError",
    "GroupNotFoundError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "NotOwnerError",
    "PoisonElementError",
    "PositionMismatchError",
    "PublisherClosedError",
    "ReceivePassedOverError",
    "ResetInProgressError",
    "StaleSequenceError",
    "StoreError",
    "SubscriberClosedError",
    "TopicError",
    "TopicExistsError",
    "TopicFullError",
    "TopicNotFoundError",
    "TopicSettingsError",
    "TransactionAbortedError",
    "TransactionFencedError",
]

_EXPORTS = {
    "create_topic": "raytopic.client.topic",
    "get_topic": "raytopic.client.topic",
    "list_topics": "raytopic.client.topic",
    "Autoscaler": "raytopic.autoscale.autoscaler",
    "AutoscalerStats": "raytopic.core.scaling",
    "ScaleEvent": "raytopic.core.scaling",
    "ScaledMember": "raytopic.core.scaling",
    "Publisher": "raytopic.client.publisher",
    "Ringbuffer": "raytopic.client.ringbuffer",
    "Subscriber": "raytopic.client.subscriber",
    "TableView": "raytopic.client.table",
    "Topic": "raytopic.client.topic",
    "RingbufferStore": "raytopic.actors.stores.base",
    "StoredBatch": "raytopic.actors.stores.base",
    "AckStatus": "raytopic.core.records",
    "ChannelStats": "raytopic.client.stats",
    "CommitResult": "raytopic.core.records",
    "CommitStatus": "raytopic.core.records",
    "Compaction": "raytopic.core.compaction",
    "Element": "raytopic.core.records",
    "ElementBatch": "raytopic.core.element_batch",
    "GroupChannelStats": "raytopic.client.stats",
    "GroupStats": "raytopic.client.stats",
    "MemberStats": "raytopic.client.stats",
    "Overflow": "raytopic.core.config",
    "OwnershipChange": "raytopic.core.records",
    "Position": "raytopic.core.records",
    "PublishStatus": "raytopic.core.records",
    "PublishSummary": "raytopic.core.records",
    "ReadResultSet": "raytopic.core.records",
    "SharedGroup": "raytopic.core.shared_group",
    "Start": "raytopic.core.config",
    "TopicStats": "raytopic.client.stats",
    "Resequence": "raytopic.core.resequencer",
    "Resequencer": "raytopic.core.resequencer",
    "ResequencerStats": "raytopic.core.resequencer",
    "ChannelFailedError": "raytopic.core.errors",
    "ChannelUnavailableError": "raytopic.core.errors",
    "ClosedError": "raytopic.core.errors",
    "DataLossError": "raytopic.core.errors",
    "ForeignElementError": "raytopic.core.errors",
    "GroupBusyError": "raytopic.core.errors",
    "GroupFilterError": "raytopic.core.errors",
    "GroupModeError": "raytopic.core.errors",
    "GroupNotFoundError": "raytopic.core.errors",
    "InvalidArgumentError": "raytopic.core.errors",
    "InvalidTypeError": "raytopic.core.errors",
    "NotOwnerError": "raytopic.core.errors",
    "PoisonElementError": "raytopic.core.errors",
    "PositionMismatchError": "raytopic.core.errors",
    "PublisherClosedError": "raytopic.core.errors",
    "ReceivePassedOverError": "raytopic.core.errors",
    "ResetInProgressError": "raytopic.core.errors",
    "StaleSequenceError": "raytopic.core.errors",
    "StoreError": "raytopic.core.errors",
    "SubscriberClosedError": "raytopic.core.errors",
    "TopicError": "raytopic.core.errors",
    "TopicExistsError": "raytopic.core.errors",
    "TopicFullError": "raytopic.core.errors",
    "TopicNotFoundError": "raytopic.core.errors",
    "TopicSettingsError": "raytopic.core.errors",
    "TransactionAbortedError": "raytopic.core.errors",
    "TransactionFencedError": "raytopic.core.errors",
    "transactions": "raytopic.transaction.handles",
    "Transaction": "raytopic.transaction.handles",
    "Transactions": "raytopic.transaction.handles",
    "TransactionResult": "raytopic.core.records",
}
"""Where each public name lives. Imported on first use: a channel or coordinator
actor's process imports only the modules it runs, not the whole package (a
topic's actors start that much faster)."""

_BRIDGES = ("spark", "data", "serve")
"""Modules reached as ``rt.spark``, ``rt.data`` and ``rt.serve`` without importing them
first: imported on first use (``raytopic.spark`` needs the ``spark`` extra,
``raytopic.serve`` the ``serve`` one)."""


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # found once
        return value
    if name in _BRIDGES:
        return importlib.import_module(f"raytopic.{name}")
    raise AttributeError(f"module 'raytopic' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_BRIDGES})
