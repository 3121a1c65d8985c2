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

from raytopic.actors.stores.base import RingbufferStore, StoredBatch
from raytopic.cluster import enable_token_for_ray_address as _enable_token_for_ray_address
from raytopic.config import Overflow, Start
from raytopic.errors import (
    ChannelFailedError,
    ChannelUnavailableError,
    ClosedError,
    DataLossError,
    ForeignElementError,
    GroupFilterError,
    GroupModeError,
    GroupNotFoundError,
    InvalidArgumentError,
    InvalidTypeError,
    NotOwnerError,
    PositionMismatchError,
    PublisherClosedError,
    ResetInProgressError,
    StaleSequenceError,
    StoreError,
    SubscriberClosedError,
    TopicError,
    TopicExistsError,
    TopicFullError,
    TopicNotFoundError,
)
from raytopic.publisher import Publisher
from raytopic.records import (
    AckStatus,
    CommitResult,
    CommitStatus,
    Element,
    OwnershipChange,
    Position,
    PublishStatus,
    PublishSummary,
)
from raytopic.resequencer import Resequence, Resequencer, ResequencerStats
from raytopic.ringbuffer import ReadResultSet, Ringbuffer
from raytopic.shared_group import SharedGroup
from raytopic.stats import ChannelStats, GroupChannelStats, GroupStats, MemberStats, TopicStats
from raytopic.subscriber import Subscriber
from raytopic.topic import Topic, create_topic, get_topic, list_topics

# A script's ray.init(address=RAY_ADDRESS) then sends the token a cluster asks for.
_enable_token_for_ray_address()

__all__ = [
    # lifecycle
    "create_topic",
    "get_topic",
    "list_topics",
    # handles
    "Publisher",
    "Ringbuffer",
    "Subscriber",
    "Topic",
    # stores
    "RingbufferStore",
    "StoredBatch",
    # records and options
    "AckStatus",
    "ChannelStats",
    "CommitResult",
    "CommitStatus",
    "Element",
    "GroupChannelStats",
    "GroupStats",
    "MemberStats",
    "Overflow",
    "OwnershipChange",
    "Position",
    "PublishStatus",
    "PublishSummary",
    "ReadResultSet",
    "SharedGroup",
    "Start",
    "TopicStats",
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
    "GroupFilterError",
    "GroupModeError",
    "GroupNotFoundError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "NotOwnerError",
    "PositionMismatchError",
    "PublisherClosedError",
    "ResetInProgressError",
    "StaleSequenceError",
    "StoreError",
    "SubscriberClosedError",
    "TopicError",
    "TopicExistsError",
    "TopicFullError",
    "TopicNotFoundError",
]

_BRIDGES = ("spark", "data")
"""Modules reached as ``rt.spark`` and ``rt.data`` without importing them first:
imported on first use (``raytopic.spark`` needs the ``spark`` extra)."""


def __getattr__(name: str) -> object:
    if name in _BRIDGES:
        import importlib

        return importlib.import_module(f"raytopic.{name}")
    raise AttributeError(f"module 'raytopic' has no attribute {name!r}")
