"""Subscriber: the read side of a topic, anonymous or a member of a group.

A subscriber registers itself as a *reader* on every channel (its filter and
converter run there; an anonymous subscriber's cursor lives there). The
handle is a facade: it checks that it is open and hands each call to one of
its parts, all built from one :class:`~raytopic.client.subscriber_options.SubscriberOptions`:

- :class:`~raytopic.client.receives.Receives`: where each receive goes, iteration's
  receives in flight, what an abandoned iteration left over, and what makes
  earlier reads stale (a seek, a reset, a lease lost).
- a :class:`~raytopic.client.group_member.Membership`: the subscriber's place in its
  group, kept fresh by its heartbeats (never by a call on the receive path);
  an anonymous subscriber holds a ``NoMembership``.
- :class:`~raytopic.client.reader_cursors.ReaderCursors`: its cursors at the channels
  (read, seek, commit).
- :class:`~raytopic.client.acknowledging.Acknowledgements`: a shared group member's
  ack, nack and ack-deadline extension.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, Unpack

import ray

from raytopic.client.acknowledging import Acknowledgements
from raytopic.client.group_member import membership_for
from raytopic.client.reader_cursors import HEAD, TAIL, ReaderCursors
from raytopic.client.receives import Receives
from raytopic.client.subscriber_options import SubscriberArgs, SubscriberOptions
from raytopic.client.transaction_inputs import opened, received
from raytopic.core.config import (
    check_int,
    check_positive_int,
)
from raytopic.core.destroyed import check_topic, topic_calls
from raytopic.core.errors import InvalidTypeError, SubscriberClosedError, TopicNotFoundError
from raytopic.core.protocol import CloseReader, OpenReader, ReadResequencerStats, pack_request
from raytopic.core.reader_calls import before_leaving
from raytopic.core.records import CommitResult, Element, Position

if TYPE_CHECKING:
    from raytopic.client.topic import Topic
    from raytopic.core.element_batch import ElementBatch
    from raytopic.core.protocol import CursorState
    from raytopic.core.records import AckStatus
    from raytopic.core.resequencer import ResequencerStats

logger = logging.getLogger(__name__)

__all__ = ["Subscriber"]


class Subscriber:
    """Receives a topic's elements: all of them (anonymous) or its group's share.

    **Ordering**: elements of one channel arrive in position order, and the
    ObjectRefs of one subscriber's receives complete in order per channel.

    **Delivery**: anonymous subscribers see every element published after
    they start (or every retained one with ``start="earliest"``). In a group,
    each element goes to one member; after a member closes, dies or times out,
    what it had not committed is delivered again (at least once).

    **Back-pressure**: ``window=N`` stops receives at N received but
    uncommitted elements until commits free room.

    **Shared groups** (``mode="shared"``): any member receives any element
    of any channel, and acknowledges each one (``ack``, ``nack``) instead of
    committing positions. What a member holds goes to another member when it
    nacks, closes, dies or holds it past the group's ``ack_timeout``; its
    ``window`` counts what it holds unacknowledged.

    A Subscriber pickles: the copy in another process is the same subscriber
    (same cursor or membership, receiving in its own order); closing any
    copy closes it.

    Once the topic is destroyed, every call (and every ref a call returns)
    raises ``TopicNotFoundError``; ``close()`` still closes quietly.

    Raises:
        InvalidArgumentError: a bad value, or one the mode refuses; or a filter,
            converter or resequence that the channels cannot load (its module is
            not importable there).
        InvalidTypeError: an argument of the wrong type, or a function that
            cannot be pickled.
        GroupModeError: a ``SharedGroup`` joined with ``mode="owned"``, or a
            group joined in the other mode than it has.
        TopicNotFoundError: the topic was destroyed.
        GroupNotFoundError: ``create_group=False`` and the group does not exist.

    A subscriber that is refused changes nothing: a new group is made only once
    every channel can open its reader.
    """

    def __init__(self, topic: Topic, **options: Unpack[SubscriberArgs]) -> None:
        """A new subscriber (``topic.subscriber(...)`` makes one the same way).

        Args:
            topic: The topic to read.
            **options: The subscriber's options, each by keyword (written once, in
                :class:`~raytopic.client.subscriber_options.SubscriberArgs`).
        """
        checked = SubscriberOptions.check(**options)
        self._assemble(topic, checked, uuid.uuid4().hex, attached=False)

    @classmethod
    def _with_options(cls, topic: Topic, options: SubscriberOptions) -> Subscriber:
        """A new subscriber of ``topic`` with checked options (``Topic.subscriber``)."""
        subscriber = cls.__new__(cls)
        subscriber._assemble(topic, options, uuid.uuid4().hex, attached=False)
        return subscriber

    def _assemble(
        self, topic: Topic, options: SubscriberOptions, reader_id: str, *, attached: bool
    ) -> None:
        """Build the parts; a new subscriber (not ``attached``: a copy of one
        unpickled) registers its reader and joins its group first."""
        self._topic = topic
        self._id = reader_id
        self._lock = threading.Lock()  # closing: once
        self._closed = False
        self._on_close: list[Callable[[], None]] = []
        self._member = membership_for(topic, options, reader_id)
        if not attached:
            options = options.joined(self._member.prepare(options.spec))
            self._call(topic._coordinator.request.remote(OpenReader(reader_id, options.spec)))
        self._options = options
        self._receives = Receives(topic, reader_id, options.spec, self._member)
        self._cursors = ReaderCursors(topic, reader_id, self._member, self._receives)
        self._acks = Acknowledgements(reader_id, topic.topic_id, self._member)
        try:
            self._member.start(self._receives.stale, attached=attached)
        except BaseException:
            if not attached:  # refused (a stream consumes the group, say): no reader left
                with contextlib.suppress(Exception):
                    self._call(topic._coordinator.request.remote(CloseReader(reader_id)))
            raise
        opened(self)  # an aborted transaction may send it back to its commit

    def __reduce__(self) -> tuple[Any, ...]:
        return (_attached_subscriber, (self._topic, self._options.for_copy(), self._id))

    # -- properties ----------------------------------------------------------------------

    @property
    def topic(self) -> Topic:
        """The topic read.

        Returns:
            The Topic this subscriber was made by.
        """
        return self._topic

    @property
    def group(self) -> str | None:
        """The group joined.

        Returns:
            The group's name, or None for an anonymous subscriber.
        """
        return self._member.group

    @property
    def mode(self) -> str:
        """How this subscriber's group hands out elements.

        Returns:
            ``"shared"`` for a shared group's member, else ``"owned"`` (anonymous too).
        """
        return self._member.mode

    @property
    def subscriber_id(self) -> str:
        """This subscriber's id.

        Returns:
            The id the channels know its reader by (its member id in a group).
        """
        return self._id

    @property
    def channel_count(self) -> int:
        """The topic's channel count.

        Returns:
            How many channels the topic has (not only the owned ones).
        """
        return self._topic.channel_count

    @property
    def channels(self) -> tuple[int, ...]:
        """The channels this subscriber owns now.

        A member answers from its view (kept fresh by its heartbeats); a
        timed-out member owns nothing until its next receive or heartbeat. A
        member silent for longer than its timeout may have timed out a moment
        ago: that one asks the coordinator (no other read does).

        Returns:
            The owned channels in ascending order (all of them, for an anonymous one).

        Raises:
            SubscriberClosedError: the subscriber is closed, or its group was destroyed.
        """
        self._check_open()
        return self._member.current_channels()

    def is_owner(self, channel: int) -> bool:
        """Whether this subscriber owns ``channel`` now.

        Args:
            channel: A channel number.

        Returns:
            True if ``channel`` is in :attr:`channels`.

        Raises:
            InvalidTypeError: ``channel`` is not an int.
            SubscriberClosedError: the subscriber is closed, or its group was destroyed.
        """
        return check_int(channel, "channel") in self.channels

    @property
    def resequencer_stats(self) -> ResequencerStats | None:
        """What the resequencer did, with ``resequence``.

        Returns:
            How many elements were released, skipped as gaps, dropped as late,
            and are held now (by the resequencer in its host channel's
            session); None without ``resequence``.
        """
        if self._options.spec.resequence is None:
            return None
        host = self._topic._channel_actors[self._receives.host_channel]
        stats = pack_request(ReadResequencerStats(reader_id=self._id))
        return self._call(host.request.remote(stats))

    @property
    def is_active(self) -> bool:
        """Whether this subscriber is open.

        Returns:
            False once closed.
        """
        return not self._closed

    # -- receiving -------------------------------------------------------------------------

    def receive(self) -> ray.ObjectRef[Element | None]:
        """Receive one element.

        The ref completes when an element arrives on any owned channel; with
        ``complete_on_empty`` it completes with None at once when there is
        none; after ``close()`` it completes with None.

        Returns:
            An ObjectRef of the Element, or of None.

        Raises:
            SubscriberClosedError: the subscriber is closed.
        """
        self._check_open()
        received(self)
        return self._receives.receive(1, single=True)

    def receive_batch(self, max_elements: int) -> ray.ObjectRef[ElementBatch]:
        """Receive up to ``max_elements`` elements.

        They come from the channel the receive was sent to while it has data
        (from others when it has none). Fewer does not mean the topic is empty.

        Args:
            max_elements: The most elements to receive (>= 1).

        Returns:
            An ObjectRef of the ElementBatch (a list of Elements, committed or
            acknowledged in one call with ``commit()`` or ``ack()``; empty with
            ``complete_on_empty`` when there are none).

        Raises:
            InvalidArgumentError: ``max_elements`` is below 1.
            InvalidTypeError: ``max_elements`` is not an int.
            SubscriberClosedError: the subscriber is closed.
        """
        check_positive_int(max_elements, "max_elements")
        self._check_open()
        received(self)
        return self._receives.receive(max_elements, single=False)

    def __iter__(self) -> Iterator[Element]:
        """Iterate element by element, blocking; receives are prefetched in batches.

        Ends when the subscriber closes, or (with ``complete_on_empty``) when
        nothing is left. A StaleSequenceError is raised once and iteration can
        go on.

        Returns:
            An iterator of Elements.
        """
        received(self)
        return self._receives.iterate()

    def iter_batches(self, max_elements: int = 1000) -> Iterator[ElementBatch]:
        """Iterate a batch at a time, blocking: the fast way to drain a topic.

        Receives stay in flight at every owned channel, as for element
        iteration, and every rule of it holds (order per channel, window,
        ownership, seeks); a batch is never empty. Commit or acknowledge a batch in
        one call per channel with ``batch.commit()`` or ``batch.ack()``.

        Args:
            max_elements: The most elements per batch (>= 1).

        Returns:
            An iterator of ElementBatches (lists of Elements). It ends when the
            subscriber closes, or (with ``complete_on_empty``) when nothing is left.

        Raises:
            InvalidArgumentError: ``max_elements`` is below 1.
            InvalidTypeError: ``max_elements`` is not an int.
        """
        check_positive_int(max_elements, "max_elements")
        received(self)
        return self._receives.iterate_batches(max_elements)

    # -- positions -------------------------------------------------------------------------

    def seek(self, channel: int, to: Position | datetime) -> Position:
        """Move an owned channel so the next element received is the first after ``to``.

        Clamped to the head and tail. Seeking back before the commit rolls the
        commit back.

        Args:
            channel: An owned channel.
            to: A Position of this channel, or a datetime (the first element
                published after it).

        Returns:
            The Position set.

        Raises:
            NotOwnerError: the channel is not owned by this subscriber.
            PositionMismatchError: a Position of another topic or channel.
            InvalidTypeError: ``to`` is neither a Position nor a datetime.
            InvalidArgumentError: a datetime out of range (a naive one is local
                time: ``datetime(1, 1, 1)`` cannot be placed).
            GroupModeError: a shared group's member (it acknowledges instead).
            SubscriberClosedError: the subscriber is closed.
        """
        self._check_open()
        return self._cursors.seek(channel, to, commit=False)

    def seek_and_commit(self, channel: int, to: Position | datetime) -> Position:
        """``seek``, and set the commit to the Position set.

        Args:
            channel: An owned channel.
            to: A Position of this channel, or a datetime.

        Returns:
            The Position set and committed.

        Raises:
            NotOwnerError: as ``seek``.
            PositionMismatchError: as ``seek``.
            InvalidTypeError: as ``seek``.
            GroupModeError: as ``seek``.
            SubscriberClosedError: as ``seek``.
        """
        self._check_open()
        return self._cursors.seek(channel, to, commit=True)

    def seek_to_head(self, *channels: int) -> dict[int, Position]:
        """Move channels to their heads; their commits reset too.

        Args:
            *channels: Owned channels (none: every owned channel).

        Returns:
            Per channel, the Position set.

        Raises:
            NotOwnerError, GroupModeError, SubscriberClosedError: as ``seek``.
        """
        return self._seek_each(channels, lambda _: HEAD, commit=False)

    def seek_to_tail(self, *channels: int) -> dict[int, Position]:
        """Move channels to their tails: only new elements follow.

        Args:
            *channels: Owned channels (none: every owned channel).

        Returns:
            Per channel, the Position set.

        Raises:
            NotOwnerError, GroupModeError, SubscriberClosedError: as ``seek``.
        """
        return self._seek_each(channels, lambda _: TAIL, commit=False)

    def seek_to_committed(self, *channels: int) -> dict[int, Position]:
        """Move channels back to their last commit: what was received since is
        delivered again (what an aborted transaction had consumed: an abort does
        this itself), except what is done above the commit (acknowledged alone, or
        consumed by a committed transaction: see ``Transaction.commit_consumed``),
        and until then a commit of an element received before is
        ``REJECTED``, so none passes over what was given back. A commit that a
        transaction is still making there lands first.

        Ownership is read at the coordinator (one call): a member's view may lag
        the leases its receives were served under. A channel the member no longer
        owns had a new owner granted, which reads again from the commit.

        Args:
            *channels: Owned channels (none: every channel owned now; one that
                moves away meanwhile is passed over).

        Returns:
            Per channel, the Position set (the commit).

        Raises:
            NotOwnerError, GroupModeError, SubscriberClosedError: as ``seek`` (every
                channel is tried first; an error that kept an owned channel from going
                back is raised before a NotOwnerError).
        """
        self._check_open()
        return self._cursors.seek_to_committed(channels)

    def seek_to_tail_and_commit(self, *channels: int) -> dict[int, Position]:
        """``seek_to_tail``, and commit there.

        Args:
            *channels: Owned channels (none: every owned channel).

        Returns:
            Per channel, the Position set and committed.

        Raises:
            NotOwnerError, GroupModeError, SubscriberClosedError: as ``seek``.
        """
        return self._seek_each(channels, lambda _: TAIL, commit=True)

    def _seek_each(
        self, channels: tuple[int, ...], target: Callable[[int], int], commit: bool
    ) -> dict[int, Position]:
        self._check_open()
        picked = self._cursors.pick(channels)
        return {c: self._cursors.seek_to(c, target(c), commit) for c in picked}

    def heads(self) -> dict[int, Position]:
        """Where this subscriber reads next.

        Returns:
            Per owned channel, the position of the next element it receives.

        Raises:
            SubscriberClosedError: the subscriber is closed.
        """
        return {c: self._topic.position(c, s.next) for c, s in self._states().items()}

    def tails(self) -> dict[int, Position]:
        """Where the owned channels end.

        Returns:
            Per owned channel, the last element's position (before the first if none).

        Raises:
            SubscriberClosedError: the subscriber is closed.
        """
        return {c: self._topic.position(c, s.tail) for c, s in self._states().items()}

    def last_committed(self) -> dict[int, Position]:
        """What this subscriber (or its group) committed.

        Returns:
            Per owned channel that has a commit, the last committed position.

        Raises:
            SubscriberClosedError: the subscriber is closed.
        """
        return {
            c: self._topic.position(c, s.committed)
            for c, s in self._states().items()
            if s.has_commit
        }

    def remaining_messages(self, channel: int | None = None) -> int:
        """How many elements are left to read (before filters).

        Args:
            channel: One channel (0 if not owned); None: every owned channel.

        Returns:
            Elements from the read position to the tail.

        Raises:
            InvalidArgumentError: no such channel.
            InvalidTypeError: ``channel`` is not an int.
            SubscriberClosedError: the subscriber is closed.
        """
        states = self._states()
        if channel is not None:
            channel = self._topic._check_channel(channel)
            states = {channel: states[channel]} if channel in states else {}
        return sum(max(0, s.tail - s.next + 1) for s in states.values())

    def _states(self) -> dict[int, CursorState]:
        self._check_open()
        return self._cursors.states()

    # -- committing ------------------------------------------------------------------------

    def commit(self, channel: int, position: Position) -> CommitResult:
        """Commit ``position`` and every earlier one of ``channel``.

        Never raises for ownership: the status says so. A resequencing member's
        commit goes no further than the hand-over mark of the element at
        ``position`` (see ``Element.commit``), which its host channel's session
        remembers for the latest 16,384 elements it handed over (one call more);
        for an element it does not know (handed over before the host restarted,
        or long ago) the commit is REJECTED and nothing moves: commit the
        Element itself (``element.commit()``, ``batch.commit()``) instead.

        Args:
            channel: The position's channel.
            position: The last position to commit.

        Returns:
            The result: COMMITTED, ALREADY_COMMITTED, NOT_OWNER or REJECTED; its
            ``position`` is the one committed (a resequencing member's may be lower).

        Raises:
            PositionMismatchError: a Position of another topic or channel.
            InvalidTypeError: ``position`` is not a Position.
            GroupModeError: a shared group's member (it acknowledges instead).
            SubscriberClosedError: the subscriber is closed.
        """
        return self._call(self.commit_async(channel, position))

    def commit_async(self, channel: int, position: Position) -> ray.ObjectRef[CommitResult]:
        """``commit`` without waiting (a resequencing member's waits for its mark).

        Args:
            channel: The position's channel.
            position: The last position to commit.

        Returns:
            An ObjectRef of the CommitResult.

        Raises:
            PositionMismatchError: as ``commit``.
            InvalidTypeError: as ``commit``.
            GroupModeError: as ``commit``.
            SubscriberClosedError: as ``commit``.
        """
        self._check_open()
        return self._cursors.commit(channel, position)

    # -- acknowledging (a shared group's member) ---------------------------------------------

    def ack(self, elements: Iterable[Element]) -> list[AckStatus]:
        """Acknowledge elements this subscriber received, each alone (see
        ``Element.ack``: in an owned group each is marked done, and the commit
        advances over the done prefix).

        One call per channel.

        Args:
            elements: Elements this subscriber received.

        Returns:
            Each element's status, in order: ACKED, or REJECTED when no longer
            held by this member under that delivery, or received before a reset
            (nothing changed for it), NOT_OWNER for one of a channel an owned
            group's member lost.

        Raises:
            ForeignElementError: an element this subscriber did not receive
                (nothing is acknowledged).
            InvalidTypeError: ``elements`` is not an iterable of Elements (None, a
                str, a dict, ...), or holds something else.
            SubscriberClosedError: the subscriber is closed.
        """
        return self._call(self.ack_async(elements))

    def ack_async(self, elements: Iterable[Element]) -> ray.ObjectRef[list[AckStatus]]:
        """``ack`` without waiting.

        Args:
            elements: Elements this subscriber received.

        Returns:
            An ObjectRef of each element's status, in order.

        Raises:
            ForeignElementError, InvalidTypeError, SubscriberClosedError: as ``ack``.
        """
        self._check_open()
        return self._acks.ack(elements)

    def nack(self, elements: Iterable[Element], delay: float | None = None) -> list[AckStatus]:
        """Give elements back to the group, to be delivered again (to any member).

        Past the group's ``max_deliveries`` they go to its dead-letter topic.

        Args:
            elements: Elements this subscriber received.
            delay: Seconds before they may be delivered again (None: at once;
                at most a year).

        Returns:
            Each element's status, in order: NACKED, or REJECTED as in ``ack``.

        Raises:
            InvalidArgumentError: a negative delay, or one over a year.
            ForeignElementError, GroupModeError, SubscriberClosedError: as ``ack``.
        """
        return self._call(self.nack_async(elements, delay))

    def nack_async(
        self, elements: Iterable[Element], delay: float | None = None
    ) -> ray.ObjectRef[list[AckStatus]]:
        """``nack`` without waiting.

        Args:
            elements: Elements this subscriber received.
            delay: Seconds before they may be delivered again (None: at once;
                at most a year).

        Returns:
            An ObjectRef of each element's status, in order.

        Raises:
            InvalidArgumentError: as ``nack``.
            ForeignElementError: as ``nack``.
            GroupModeError: as ``nack``.
            SubscriberClosedError: as ``nack``.
        """
        self._check_open()
        return self._acks.nack(elements, delay)

    def extend_lease(
        self, elements: Iterable[Element], seconds: float | None = None
    ) -> list[AckStatus]:
        """Keep holding elements a while longer: move their ack deadline.

        Args:
            elements: Elements this subscriber received.
            seconds: When their ack deadlines pass, from now (> 0 and at most a
                year; None: the group's ``ack_timeout``).

        Returns:
            Each element's status, in order: EXTENDED, or REJECTED for one no
            longer held.

        Raises:
            InvalidArgumentError: ``seconds`` is not above 0, or is over a year.
            ForeignElementError: as ``ack``.
            InvalidTypeError: as ``ack``.
            GroupModeError: as ``ack``.
            SubscriberClosedError: as ``ack``.
        """
        self._check_open()
        return self._call(self._acks.extend_hold(elements, seconds))

    # -- membership --------------------------------------------------------------------------

    @property
    def revoking(self) -> tuple[int, ...]:
        """Owned channels the group is moving to another member.

        A ``cooperative`` member still owns them (and may commit there) until it
        calls :meth:`release`; others lose such channels at once, so this is
        always ``()`` for them.

        Returns:
            The channels, in ascending order.

        Raises:
            SubscriberClosedError: the subscriber is closed, or its group was destroyed.
        """
        self._check_open()
        return self._member.revoking()

    def release(self, *channels: int) -> None:
        """Give back channels the group is moving away (a ``cooperative`` member): their
        new owners read them from now on, after this member's commits. Call it once
        every element handed out from them is committed; channels not being moved
        are ignored.

        Args:
            *channels: Channels of :attr:`revoking` (none: all of them).

        Raises:
            InvalidTypeError: a channel is not an int.
            SubscriberClosedError: the subscriber is closed, or its group was destroyed.
        """
        self._check_open()
        picked = tuple(check_int(channel, "channel") for channel in channels)
        self._member.release(picked or self._member.revoking())

    def heartbeat(self) -> None:
        """Tell the group this member is alive (a no-op for anonymous subscribers).

        A member that timed out rejoins here, with a new generation.

        Raises:
            SubscriberClosedError: the subscriber is closed, or its group was destroyed.
        """
        self._check_open()
        self._member.heartbeat()

    # -- closing -----------------------------------------------------------------------------

    def on_close(self, action: Callable[[], None]) -> None:
        """Run ``action`` when this subscriber closes.

        Args:
            action: Called with no arguments; what it raises is logged.

        Raises:
            InvalidTypeError: ``action`` is not callable.
        """
        if not callable(action):
            raise InvalidTypeError("on_close needs a callable")
        self._on_close.append(action)

    def close(self) -> None:
        """Leave the group (if any), end the sessions, complete waiting receives with None.

        The acks and commits this process sent for the subscriber without waiting
        (``ack_async``, ``commit_async``, ...) land first: it waits up to 5 s for
        their answers, so none is served after its channels were given up.
        Idempotent; every on_close action runs even if one raises. Failing to
        reach the coordinator is logged, not raised (a destroyed topic: not even logged).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._receives.stop()
        self._member.stop()
        before_leaving.wait(self._topic.topic_id, self._id)  # its acks and commits land first
        try:
            # Not a call to a coordinator known gone here: Ray would log its failure.
            check_topic(self._topic.topic_id, self._topic.name, self._topic._coordinator)
            self._member.leave()
            self._call(self._topic._coordinator.request.remote(CloseReader(self._id)))
        except TopicNotFoundError:
            pass  # the topic was destroyed: there is nothing left to leave
        except Exception as error:
            logger.warning("closing subscriber %s: %s", self._id, error)
        for action in self._on_close:
            try:
                action()
            except Exception:
                logger.exception("on_close action failed")

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        group = self._member.group
        kind = f"group={group!r}" if group else "anonymous"
        state = "closed" if self._closed else "active"
        return f"Subscriber({self._topic.name!r}, {kind}, {state})"

    # -- helpers -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SubscriberClosedError("the subscriber is closed")

    def _call(self, ref: ray.ObjectRef[Any]) -> Any:
        with topic_calls(self._topic.topic_id, self._topic.name):
            return ray.get(ref)


def _attached_subscriber(topic: Topic, options: SubscriberOptions, reader_id: str) -> Subscriber:
    """The subscriber a pickled one stands for, in this process."""
    subscriber = Subscriber.__new__(Subscriber)
    subscriber._assemble(topic, options, reader_id, attached=True)
    return subscriber
