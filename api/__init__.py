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
from raytopic.config import Overflow, Start
from raytopic.errors import (
    ChannelFailedError,
    ChannelUnavailableError,
    ClosedError,
    DataLossError,
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
    CommitResult,
    CommitStatus,
    Element,
    OwnershipChange,
    Position,
    PublishStatus,
)
from raytopic.resequencer import Resequence, Resequencer, ResequencerStats
from raytopic.ringbuffer import ReadResultSet, Ringbuffer
from raytopic.stats import ChannelStats, GroupChannelStats, GroupStats, MemberStats, TopicStats
from raytopic.subscriber import Subscriber
from raytopic.topic import Topic, create_topic, get_topic, list_topics

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
    "ReadResultSet",
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
