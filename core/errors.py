"""The typed errors of raytopic, all under :class:`TopicError`.

Errors that describe a bad argument also inherit the stdlib class users
already catch (``ValueError``, ``TypeError``, ``LookupError``,
``TimeoutError``). An error raised inside a channel or coordinator actor
reaches the caller as the same class: Ray re-raises it as a subclass of both
``RayTaskError`` and the original class, and the handles unwrap it where
they block on a result themselves (see :func:`unwrap_ray_error`). Where the user
blocks on a ref (``ray.get(subscriber.receive())``), that subclass prints the
error's own message, not the actor's traceback: see :meth:`TopicError.__init_subclass__`.

Every error pickles with its extra fields (``head_sequence``, ...), because
it crosses process boundaries inside Ray.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
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
    "unwrap_ray_error",
]


def _is_ray_task_error(cls: type) -> bool:
    return cls.__name__ == "RayTaskError" and cls.__module__ == "ray.exceptions"


def _cause_message(wrapper: BaseException) -> str:
    return str(wrapper.cause)  # type: ignore[attr-defined]


class TopicError(Exception):
    """Root of every error raised by raytopic."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        """Give Ray's wrapper of a raytopic error the error's own message.

        ``ray.get`` of a ref whose actor call raised makes a class deriving from
        both ``RayTaskError`` and the error's class, whose ``__str__`` is the
        actor's whole traceback (22 lines for a receive on a destroyed topic).
        Python calls this hook as that class is made: it prints what the error
        says instead.
        """
        super().__init_subclass__(**kwargs)
        if any(_is_ray_task_error(base) for base in cls.__mro__):
            cls.__str__ = _cause_message  # type: ignore[method-assign]


class TopicNotFoundError(TopicError, LookupError):
    """No topic of that name exists in the namespace."""


class TopicExistsError(TopicError):
    """A topic of that name already exists (and ``exist_ok`` was not set)."""


class GroupNotFoundError(TopicError, LookupError):
    """No subscriber group of that name exists on the topic."""

    @classmethod
    def of(cls, topic: str, group: str) -> GroupNotFoundError:
        """The error for ``group`` missing from ``topic``, worded as every refusal
        of a missing group is."""
        return cls(f"topic {topic!r} has no group {group!r}")


class NotOwnerError(TopicError):
    """The member does not own the channel, or owns it under a stale generation."""


class GroupBusyError(TopicError):
    """The group is consumed by someone else, and a group has one kind of consumer
    at a time (its coordinator decides): a member cannot join a group that a stream
    consumes (the message names the stream), and a stream cannot open on a group
    that has members (until they leave)."""


class ClosedError(TopicError):
    """A handle was used after ``close()``."""


class SubscriberClosedError(ClosedError):
    """The subscriber was closed (or its group destroyed) and cannot be used any more."""


class PublisherClosedError(ClosedError):
    """The publisher was closed and cannot publish any more."""


class TopicFullError(TopicError):
    """The channel had no room: overflow ``"fail"``, or ``"block"`` timed out."""


class ResetInProgressError(TopicError):
    """Another reset of the same subscriber group is still running."""


class StaleSequenceError(TopicError):
    """A sequence below the channel's head was asked for: it is no longer stored.

    Attributes:
        head_sequence: The channel's head (oldest stored sequence) when raised.
        skipped: How many elements a subscriber skipped when it was moved up to
            the head (0 for a plain ring-buffer read).
    """

    def __init__(self, message: str, head_sequence: int, skipped: int = 0) -> None:
        super().__init__(message, head_sequence, skipped)
        self.head_sequence = head_sequence
        self.skipped = skipped

    def __str__(self) -> str:
        return str(self.args[0])


class DataLossError(StaleSequenceError):
    """Elements a reader had not received yet are gone: their channel restarted
    without a store, or a stored record is damaged (its checksum fails).

    Raised once per reader (by ``ray.get`` of its next receive there); the
    reader then continues from ``head_sequence``. Positions of the old epoch
    are never reused.

    Attributes:
        channel: The channel.
        old_epoch: The incarnation that held the lost elements (0: unknown).
        new_epoch: The incarnation serving now.
        head_sequence: Where the reader continues: every position below it
            that the reader had not received is lost (for a damaged record,
            those of ``lost``).
        lost: For a damaged stored record, the range ``(first, last)`` of its
            positions; None for a restart without a store.
    """

    def __init__(
        self,
        message: str,
        head_sequence: int,
        channel: int,
        old_epoch: int,
        new_epoch: int,
        lost: tuple[int, int] | None = None,
    ) -> None:
        StaleSequenceError.__init__(self, message, head_sequence)
        self.args = (message, head_sequence, channel, old_epoch, new_epoch, lost)
        self.channel = channel
        self.old_epoch = old_epoch
        self.new_epoch = new_epoch
        self.lost = lost


class PoisonElementError(TopicError):
    """An element could not be decoded where it was delivered, or a user function
    (filter, converter) raised on it: the element is a *poison* element.

    It costs only itself: the receive that met it delivered what came before
    it, and the reader stays before it (it is not delivered, not committed,
    still counted by ``remaining_messages`` and lag). The error is raised once
    per element and reader; until the reader skips it (``seek(channel,
    position)``: the next element is the first after it), that channel holds
    nothing more for it. A subscriber made with ``on_poison="skip"`` skips such
    elements itself (logged, and counted in ``raytopic_poison_skipped``); a
    shared group negatively acknowledges them (dead letters after
    ``max_deliveries``).

    Attributes:
        channel: The element's channel.
        position: The element's position (a ``Position``).
        cause_type: The name of the exception's class (``ModuleNotFoundError``, ...).
        cause_message: The exception's message. (Not ``cause``: a ``RayTaskError``
            that Ray raises as this error has a ``cause`` of its own.)
    """

    def __init__(
        self, message: str, channel: int, position: object, cause_type: str, cause_message: str
    ) -> None:
        super().__init__(message, channel, position, cause_type, cause_message)
        self.channel = channel
        self.position = position
        self.cause_type = cause_type
        self.cause_message = cause_message

    def __str__(self) -> str:
        return str(self.args[0])


class ChannelUnavailableError(TopicError):
    """A channel stayed unreachable (restarting, recovering) past the retry bound, or
    did not start within 30 s when its topic was made (the topic is not made)."""


class ChannelFailedError(ChannelUnavailableError):
    """A channel could not recover its store, or its store failed (an fsync error):
    it has failed and answers every call with this error until an operator acts.
    Nothing it acknowledged is altered."""


class ReceivePassedOverError(ChannelUnavailableError):
    """A receive came to its channel after a later receive of its handle had run there
    (the channel restarted with both under way, and Ray delivered this one late, or
    it came past the wait for a missing number): it took nothing, since what it took
    would come out of order. Receive again; an iteration does so by itself."""


class StoreError(TopicError):
    """The channel's store refused a write: the add was rejected, and ring and store
    are unchanged (the channel lives on)."""


class InvalidArgumentError(TopicError, ValueError):
    """An argument has a bad value; the message names it."""


class PositionMismatchError(InvalidArgumentError):
    """A Position of another topic or another channel was given."""


class InvalidTypeError(TopicError, TypeError):
    """An argument or a published value has a type raytopic cannot take."""


class TopicSettingsError(InvalidArgumentError):
    """``create_topic`` over a store that holds the topic (reopening it) asked other
    settings than it was made with: the settings fixed at creation (channel count,
    capacity, retain, ttl, overflow, compaction) must be the same. Nothing was created or
    written. Also ``rt.transactions(store=)`` naming another store than its namespace's
    transaction registry keeps its state in (``differences["store"]``); nothing fenced.

    Attributes:
        differences: Per setting that differs, (what the store holds, what was asked).
    """

    def __init__(self, message: str, differences: dict[str, tuple[object, object]]) -> None:
        super().__init__(message, differences)
        self.differences = differences

    def __str__(self) -> str:
        return str(self.args[0])


class GroupModeError(InvalidArgumentError):
    """A group was used in the other mode: joined as "owned" when it is "shared" (or
    the reverse), or a commit or seek asked of a shared group (its members
    acknowledge element by element), or an ack of an owned group's element."""


class GroupFilterError(InvalidArgumentError):
    """A member brought a filter other than its shared group's (a shared group's
    filter is part of its definition, fixed at creation)."""


class ForeignElementError(InvalidArgumentError):
    """An element this subscriber did not receive was given to its ``ack``, ``nack``
    or ``extend_lease`` (another member's, another topic's, or an owned
    group's): nothing was acknowledged."""


class TransactionAbortedError(TopicError):
    """A transaction was aborted instead of committed: none of its outputs appear
    and none of its consumed positions moved. ``reason`` says why (a member that
    no longer owns a consumed element's channel, a timeout, a channel that lost
    what the transaction staged there, an ``abort()``)."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.reason))


class TransactionFencedError(TransactionAbortedError):
    """A newer ``rt.transactions(id)`` of the same transactional id exists: this
    older holder's open transaction was aborted, and it can start no other.
    Also a TransactionAbortedError (nothing of the transaction took effect)."""


@contextmanager
def unwrap_ray_error() -> Iterator[None]:
    """Re-raise a raytopic error that Ray wrapped in ``RayTaskError`` as itself.

    Ray already makes the wrapper an instance of the original class, so
    ``except rt.NotOwnerError`` works either way; unwrapping gives users the
    plain class, its own message and a short traceback, chained with ``from``.
    """
    import ray.exceptions

    try:
        yield
    except ray.exceptions.RayTaskError as wrapped:
        cause = wrapped.cause
        if isinstance(cause, TopicError):
            raise cause from wrapped
        raise
