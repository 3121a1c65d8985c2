"""A member actor of an autoscaled group: receive a batch, call the handler, finish the batch.

An autoscaler (``raytopic.autoscale.scaler_actor``) starts and stops these. Each holds
one group member (a :class:`~raytopic.Subscriber`) and runs one loop:

1. give back the channels the group is moving to another member (an owned
   group's member is *cooperative*: it keeps such a channel until it has
   committed what it handed to the handler, so the new owner starts after
   those commits and no element reaches two handlers);
2. receive up to ``batch_size`` elements;
3. call ``handler(values)``;
4. commit the batch (an owned group) or acknowledge it (a shared group). A
   handler that raises: a shared group's member nacks the batch (delivered
   again, dead letters as the group says); an owned group's member goes back
   to its last commit and tries again after a pause that doubles with each
   failure in a row (``raytopic.core.retries``); with ``max_deliveries``, the
   elements handed to the handler that many times go to the dead-letter topic
   and the member commits past them. Either way one line is logged per
   failure, and the autoscaler counts it (``Autoscaler.describe()``).

``stop()`` ends the loop after the batch in hand is finished, then leaves the
group: its channels go to the other members, after its commits.

A member is made *parked* (its process started, its handler loaded, no group
joined: it holds no channel, and reserves no CPU if its options ask for none) and
joins when ``join()`` is called: an autoscaler keeps a few parked so that a burst
does not wait for new worker processes. A stopped member is parked again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import ray

from raytopic.coordinator.launch import launch_topic
from raytopic.core.dead_letters import (
    dead_letter,
    dead_letter_append,
    dead_letter_topic_config,
    dead_letter_writer,
)
from raytopic.core.element_batch import ElementBatch
from raytopic.core.errors import (
    NotOwnerError,
    SubscriberClosedError,
    TopicError,
    TopicNotFoundError,
)
from raytopic.core.naming import scaler_actor_name
from raytopic.core.payloads import PickledValues
from raytopic.core.records import CommitStatus, Element
from raytopic.core.retries import Deliveries, describe_error, retry_pause
from raytopic.core.scaling import HandlerFailure
from raytopic.core.shared_group import GroupModeName
from raytopic.core.user_functions import load_pickled, name_of

if TYPE_CHECKING:
    from raytopic.client.subscriber import Subscriber
    from raytopic.client.topic import Topic
    from raytopic.core.scaling import ScaleSettings
    from raytopic.core.shared_group import SharedGroup

logger = logging.getLogger(__name__)

__all__ = ["MEMBER_TIMEOUT", "ScaledMemberActor", "back_to_commit"]

MEMBER_TIMEOUT = 10.0
"""Seconds a member may go unheard before its group drops it (a member whose process
died, while its autoscaler is down to say so); also how long a hand-over waits
for a member stuck in its handler."""

RETRY_PAUSE = 1.0
"""Seconds a member waits after a call of its own failed (a channel or the coordinator
restarting) before it tries again."""

IDLE_FIRST = 0.01
IDLE_MOST = 0.2
"""Seconds an idle member waits before it looks again: from the first, doubling to
the most (a receive that finds nothing returns at once)."""


class ScaledMemberActor:
    """One member of an autoscaled group (a threaded Ray actor: ``stop`` and
    ``identity`` answer while the loop runs).

    Args:
        topic: The topic.
        group: The group's name, or its ``SharedGroup`` definition.
        mode: ``"owned"`` or ``"shared"``.
        handler: The cloudpickled ``handler(values)``.
        settings: The autoscaler's settings (``batch_size``, ``max_deliveries``,
            ``dead_letter``).
    """

    def __init__(
        self,
        topic: Topic,
        group: str | SharedGroup,
        mode: GroupModeName,
        handler: bytes,
        settings: ScaleSettings,
    ) -> None:
        self._handler = load_pickled(handler, "handler")
        self._name = name_of(self._handler)
        self._topic = topic
        self._group_spec = group
        self._group = group if isinstance(group, str) else group.name
        self._mode = mode
        self._batch_size = settings.batch_size
        self._shared = mode == "shared"
        self._deliveries = Deliveries(settings.max_deliveries)
        self._max_deliveries = settings.max_deliveries
        self._dead_letter = settings.dead_letter
        self._dead_letter_channels: tuple[Any, ...] = ()
        self._failures = 0  # failed handler calls in a row
        self._retry_at = 0.0  # monotonic time before which no batch is received
        self._scaler: Any = None  # found when a failure is first reported
        self._lock = threading.Lock()  # join and stop
        self._subscriber: Subscriber | None = None  # None: parked
        self._stopping = threading.Event()
        self._finished = threading.Event()
        self._loop: threading.Thread | None = None
        self._keepalive: threading.Thread | None = None

    def join(self) -> tuple[str, int, str]:
        """Join the group (a parked member; a joined one changes nothing); returns
        :meth:`identity`."""
        with self._lock:
            if self._subscriber is None:
                self._subscriber = self._topic.subscriber(
                    group=self._group_spec,
                    mode=self._mode,
                    complete_on_empty=True,
                    timeout=MEMBER_TIMEOUT,
                    cooperative=not self._shared,
                )
                self._deliveries = Deliveries(self._max_deliveries)  # a new member's count
                self._failures, self._retry_at = 0, 0.0
                self._stopping = threading.Event()
                self._finished = threading.Event()
                self._loop = threading.Thread(target=self._run, name="raytopic-member", daemon=True)
                self._keepalive = threading.Thread(
                    target=self._beat,
                    args=(self._subscriber, self._finished),
                    name="raytopic-beat",
                    daemon=True,
                )
        return self.identity()  # type: ignore[return-value]

    def identity(self) -> tuple[str, int, str] | None:
        """(member id in the group, process id, node id); None while parked."""
        subscriber = self._subscriber
        if subscriber is None:
            return None
        node = ray.get_runtime_context().get_node_id()
        return subscriber.subscriber_id, os.getpid(), node

    def start(self) -> None:
        """Start the loop of a joined member (once: a restarted autoscaler that adopts
        this member calls it again, which changes nothing)."""
        with self._lock:
            if self._loop is not None and self._loop.ident is None:
                self._loop.start()
                self._keepalive.start()  # type: ignore[union-attr]

    def wait_stopped(self) -> None:
        """Return once the loop has ended (the autoscaler keeps this call waiting: it
        fails with Ray's actor error when the member dies)."""
        self._finished.wait()

    def stop(self) -> None:
        """End the loop after the batch in hand is finished, then leave the group: the
        member is parked (it may ``join`` again)."""
        with self._lock:
            subscriber, loop = self._subscriber, self._loop
            self._stopping.set()
        if subscriber is None:
            return
        if loop is not None and loop.ident is not None:
            self._finished.wait()
        subscriber.close()
        with self._lock:
            self._subscriber = self._loop = self._keepalive = None

    # -- the loop ----------------------------------------------------------------------

    def _run(self) -> None:
        idle = IDLE_FIRST
        try:
            while not self._stopping.is_set():
                if self._backing_off():
                    continue
                try:
                    batch = self._next_batch()
                    if batch:
                        self._handle(batch)
                except (SubscriberClosedError, TopicNotFoundError):
                    logger.warning("member %s: its group or topic is gone", self._member_id)
                    return
                except Exception as error:  # a channel or the coordinator restarting, say
                    logger.warning("member %s: %r; trying again", self._member_id, error)
                    self._stopping.wait(RETRY_PAUSE)
                    continue
                if batch:
                    idle = IDLE_FIRST
                else:
                    self._stopping.wait(idle)
                    idle = min(2 * idle, IDLE_MOST)
        finally:
            self._finished.set()

    def _backing_off(self) -> bool:
        """Wait a little while a failed batch's pause runs (giving back channels the
        group moves meanwhile: the batch went back to the last commit); True until
        it has run out."""
        left = self._retry_at - time.monotonic()
        if left <= 0:
            return False
        try:
            if self._joined.revoking:
                self._joined.release()
        except TopicError as error:  # the next receive says what is wrong
            logger.debug("member %s: release failed: %s", self._member_id, error)
        self._stopping.wait(min(left, IDLE_MOST))
        return True

    @property
    def _joined(self) -> Subscriber:
        """The member's subscriber: its loop runs only while it is in the group."""
        assert self._subscriber is not None, "a parked member has no subscriber"
        return self._subscriber

    def _next_batch(self) -> ElementBatch:
        """Release the channels being moved away (everything handed out from them is
        committed by now), then receive."""
        subscriber = self._joined
        if subscriber.revoking:
            subscriber.release()
        return ray.get(subscriber.receive_batch(self._batch_size))

    def _handle(self, batch: ElementBatch) -> None:
        try:
            self._handler(batch.values)
        except BaseException as error:  # SystemExit too: it costs its batch, not the member
            self._failed(batch, error)
            return
        self._failures = 0
        if not self._shared:
            self._deliveries.forget((e.channel, e.sequence) for e in batch)
        try:
            if self._shared:
                batch.ack()
            else:
                self._commit(batch)
        except TopicError as error:  # handled, not finished: delivered again (at least once)
            logger.warning("member %s: could not finish a batch: %s", self._member_id, error)

    def _commit(self, batch: ElementBatch) -> None:
        for channel, result in batch.commit().items():
            if result.status is CommitStatus.NOT_OWNER:
                # Its channel moved without our release (a hand-over that ran out):
                # the new owner handles the batch again.
                logger.warning(
                    "member %s: channel %d moved before its commit", self._member_id, channel
                )

    def _failed(self, batch: ElementBatch, error: BaseException) -> None:
        """A handler call raised: log it in one line, tell the autoscaler, and give the
        batch back (a shared group's member nacks it; an owned one goes back to its
        last commit, after sending what reached ``max_deliveries`` to the dead-letter
        topic and committing past it), then pause before the next receive."""
        self._failures += 1
        pause = retry_pause(self._failures)
        described = describe_error(error)
        limit = ""
        if self._shared:
            attempt, dead = max(e.delivery_count for e in batch), 0
            then = f"nacked, next try in {pause:g} s"
        else:
            attempt, upto = self._deliveries.failed((e.channel, e.sequence) for e in batch)
            limit = f" of {self._max_deliveries}" if self._max_deliveries else ""
            dead = self._send_dead(batch, upto, described) if upto else 0
            then = f"back to the last commit, next try in {pause:g} s"
        if dead:  # what is left of the batch is new work: no pause
            self._failures, pause = 0, 0.0
            then = f"{dead} values sent to dead-letter topic {self._dead_letter!r}"
        logger.warning(
            "member %s: handler %s failed on %d values (delivery %d%s): %s; %s",
            self._member_id,
            self._name,
            len(batch),
            attempt,
            limit,
            described,
            then,
        )
        self._report(
            HandlerFailure(
                datetime.now(UTC),
                self._joined.subscriber_id,
                len(batch),
                attempt,
                described,
                dead,
            )
        )
        try:
            if self._shared:
                batch.nack()
            else:
                self._back_to_commit(batch)
        except (TopicError, ray.exceptions.RayError) as problem:  # tried again after the pause
            logger.warning("member %s: could not give a batch back: %s", self._member_id, problem)
        self._retry_at = time.monotonic() + pause

    def _back_to_commit(self, batch: ElementBatch) -> None:
        """Read the batch's channels again from their last commit; forget the delivery
        counts of channels no longer owned."""
        self._deliveries.keep_channels(back_to_commit(self._joined, batch))

    def _send_dead(self, batch: ElementBatch, upto: dict[int, int], error: str) -> int:
        """Send the batch's elements up to ``upto`` (per channel, the last one past
        ``max_deliveries``) to the dead-letter topic, then commit them; return how
        many went (0 when the dead-letter topic refused them: tried again later).

        Each channel's letters are one ``append_once`` of the group's writer for
        that channel, versioned by their last position: a send tried again, or
        the same batch sent by the next member after this one died before its
        commit, is appended once."""
        dead = ElementBatch(e for e in batch if e.sequence <= upto.get(e.channel, -1))
        try:
            channels = self._dead_letter_targets()
            for channel, last in dead.last_per_channel().items():
                letters = [self._letter(e, error) for e in dead if e.channel == channel]
                writer = dead_letter_writer(self._topic.topic_id, f"group={self._group}", channel)
                target = channels[channel % len(channels)]
                ack = ray.get(
                    target.request.remote(
                        dead_letter_append(writer, last.sequence),
                        PickledValues.from_values(letters),
                    )
                )
                if ack.error is not None:
                    raise ack.error
            self._commit(dead)
        except (TopicError, ray.exceptions.RayError) as problem:
            self._dead_letter_channels = ()  # found (or made) again at the next try
            logger.warning(
                "member %s: dead letters not sent to %s (%s); trying again",
                self._member_id,
                self._dead_letter,
                problem,
            )
            return 0
        self._deliveries.forget((e.channel, e.sequence) for e in dead)
        return len(dead)

    def _letter(self, element: Element, error: str) -> dict[str, Any]:
        deliveries = self._deliveries.count(element.channel, element.sequence)
        return dead_letter(
            element.value,
            reason=f"handler failed {deliveries} times: {error}",
            deliveries=deliveries,
            topic=self._topic.name,
            position=element.position,
        )

    def _dead_letter_targets(self) -> tuple[Any, ...]:
        """The dead-letter topic's channel actors; the topic is made again if it is
        missing (destroyed since the autoscaler made it)."""
        if not self._dead_letter_channels:
            assert self._dead_letter is not None
            config = dead_letter_topic_config(self._dead_letter, self._topic.namespace)
            _, info = launch_topic(config, exist_ok=True)
            self._dead_letter_channels = tuple(info.channels)
        return self._dead_letter_channels

    def _report(self, failure: HandlerFailure) -> None:
        """Tell the autoscaler (it counts failures for ``describe()``); not waited for."""
        try:
            if self._scaler is None:
                name = scaler_actor_name(self._topic.name, self._group)
                self._scaler = ray.get_actor(name, namespace=self._topic.namespace)
            self._scaler.handler_failed.remote(failure)
        except Exception as error:  # stopped meanwhile: nobody asks any more
            logger.debug("member %s: failure not reported: %s", self._member_id, error)

    def _beat(self, subscriber: Subscriber, finished: threading.Event) -> None:
        """Report this member alive while its loop runs (a handler may take longer than
        the group's timeout; a receive only reports it when it is sent)."""
        while not finished.wait(MEMBER_TIMEOUT / 4):
            try:
                subscriber.heartbeat()
            except (SubscriberClosedError, TopicNotFoundError):
                return
            except Exception as error:  # the coordinator restarting: the next beat counts
                logger.debug("member %s: heartbeat failed: %s", self._member_id, error)

    @property
    def _member_id(self) -> str:
        subscriber = self._subscriber
        return "parked" if subscriber is None else subscriber.subscriber_id[:8]

    def __repr__(self) -> str:
        return f"ScaledMemberActor({self._subscriber!r})"


def back_to_commit(member: Subscriber, batch: ElementBatch) -> tuple[int, ...]:
    """Read ``batch``'s channels (a failed handler call's) again from their last
    commits; return the channels ``member`` owns now.

    Every channel of the batch, not those of the member's view: the view may lag
    the leases its receives were served under (the channels hear of a rebalance
    before its heartbeats bring it), and ``seek_to_committed`` reads them at the
    coordinator. A channel that moved on since is passed over (its new owner reads
    it again from the commit); every channel is tried before an error is raised.
    The view has learnt the leases by then, so the channels returned name each
    one the member still owns (its delivery counts are kept).

    Args:
        member: An owned group's member, which received ``batch``.
        batch: The elements handed to the handler.

    Returns:
        The channels owned now (their delivery counts are kept).

    Raises:
        TopicError, ray.exceptions.RayError: a channel could not be moved back (the
            first such error).
    """
    channels = sorted({element.channel for element in batch})
    # A NotOwnerError comes only once every other channel went back (any other error
    # first): that channel moved on, and its new owner reads it again from the commit.
    with contextlib.suppress(NotOwnerError):
        if channels:  # (none named would send back every channel owned)
            member.seek_to_committed(*channels)
    return member.channels
