"""Publisher: the write side of a topic.

``publish()`` pickles the value, picks its channel and adds it to that
channel's open batch. Batches go out as ONE actor call each: a full batch
(``batch_size`` values) at once, a partial one while fewer than
``PIPELINE`` calls of this publisher to its channel are out, and at most
``max_in_flight`` calls of a publisher are outstanding. So light traffic goes
out value by value (an idle publisher sends at once), and heavy traffic in
batches that grow with the load (what is published while a channel's calls
are out goes in its next call), with no timer on the hot path. ``linger``
holds a partial batch back until it is that old, for callers who prefer
fewer calls to latency. ``publish_batch(..., ref=False)`` parts wait in the
same queues (``raytopic.client.publish_accumulator``): a call carries up to a full
batch of whatever was published for its channel, in publish order (a partial one
holding parts goes only once its channel has no call out: ``PARTS_PIPELINE``).

Every piece a call carries (a batch of values, a part) is numbered per channel:
the channel appends one publisher's pieces in that order (several calls may be
in flight to one channel), and a retried piece is not appended twice. Calls are
submitted in the order they were numbered (``raytopic.client.submit_order``), whichever
thread numbered them: a channel waits only so long for a missing number. One thread
per publisher completes the calls as their replies come, and sends what waited for
them (``raytopic.client.publish_completion``).
"""

from __future__ import annotations

import atexit
import logging
import random
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
import ray

from raytopic.client.batch_parts import (
    check_keyed,
    encode_part,
    lead_last,
    no_key_error,
    part_layout,
    parts_of,
    route,
    routed_keys,
)
from raytopic.client.publish_accumulator import PIPELINE, ChannelQueue, Part, Piece, piece_count
from raytopic.client.publish_completion import Call, Completer, closed_error
from raytopic.client.publish_futures import BatchFuture, PublishBatch
from raytopic.client.routing import key_hash, stored_key
from raytopic.client.submit_order import SubmitOrder
from raytopic.core.config import (
    MAX_LINGER_SECONDS,
    RoundRobin,
    RoundRobinName,
    check_items,
    check_nonnegative_number,
    check_positive_int,
    check_seconds,
    check_timeout,
)
from raytopic.core.destroyed import check_topic, destroyed_error, is_destroyed
from raytopic.core.errors import (
    ChannelUnavailableError,
    InvalidArgumentError,
    InvalidTypeError,
    TopicFullError,
)
from raytopic.core.gather import Joined, JoinKind, send_joined
from raytopic.core.payloads import TOMBSTONE, Payload, PickledValues, fast_dumps
from raytopic.core.protocol import Append, AppendPieces, pack_request, pack_small
from raytopic.core.statuses import PublishStatuses
from raytopic.core.user_functions import call_user
from raytopic.core.waits import bounded_wait

if TYPE_CHECKING:
    from raytopic.client.topic import Topic
    from raytopic.core.errors import PublisherClosedError
    from raytopic.core.records import PublishStatus

__all__ = ["Publisher"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Calls:
    """Calls numbered together, and the ticket they are submitted under (None: no calls)."""

    ticket: int | None
    calls: list[Call]


class Publisher:
    """Publishes values to a topic.

    **Ordering**: values with the same key go to the same channel, in publish
    order. Without a key (and without ``ordering``) values go to the channels
    in turn, value by value; with ``round_robin="batch"`` a ``publish_batch``'s
    keyless values go to one channel (in their order), the next batch's to the next.

    **Delivery**: each ``publish()`` returns a Future that resolves to the
    value's PublishStatus once the channel appended it, or fails with the
    reason (TopicFullError, or TopicNotFoundError if the topic was destroyed).
    ``flush()`` waits for every earlier value.

    **Background thread**: one thread per publisher completes the channels'
    replies (and sends what ``linger`` held back). An error there is logged and
    it goes on. Should it end anyway (a future's done-callback raising
    ``SystemExit`` on it), the publisher closes itself: the values it had not
    sent fail with PublisherClosedError (naming the cause), those in flight
    still complete, ``flush`` and ``close`` return, and ``publish`` raises
    PublisherClosedError.

    **Back-pressure**: with overflow "block" a full channel appends what fits
    and holds the rest until there is room; a value fails with TopicFullError
    once it waited ``block_timeout`` seconds with no room at all (the values
    after it wait behind it: per-key order holds). At most ``max_buffered``
    values wait here; beyond that ``publish()`` itself waits (up to
    ``block_timeout``).

    **At exit**: the interpreter's exit flushes every publisher not closed, each
    for up to its ``block_timeout`` (a warning says what was still unacknowledged
    then), so a script that ends right after ``publish()`` loses nothing to
    ``linger`` or to a channel's restart. A ``ray.shutdown()`` of the script's own
    before the end leaves nothing to flush with: close publishers before it.

    A Publisher pickles: the copy in another process is a new publisher
    (own id, own buffers) with the same settings.

    Example:
        >>> with topic.publisher() as publisher:
        ...     future = publisher.publish({"order": 1}, key="customer-7")
        ...     status = future.result()
    """

    def __init__(
        self,
        topic: Topic,
        *,
        ordering: Callable[[Any], Any] | None = None,
        block_timeout: float = 60.0,
        batch_size: int = 1000,
        linger: float = 0.0,
        max_in_flight: int = 2,
        max_buffered: int = 200_000,
        round_robin: RoundRobinName | RoundRobin = "value",
    ) -> None:
        if ordering is not None and not callable(ordering):
            raise InvalidTypeError("ordering must be None or a callable value -> key")
        self._topic = topic
        self._ordering = ordering
        self._block_timeout = check_timeout(block_timeout, "block_timeout")
        self._batch_size = check_positive_int(batch_size, "batch_size")
        self._linger = check_nonnegative_number(linger, "linger", maximum=MAX_LINGER_SECONDS)
        self._max_in_flight = check_positive_int(max_in_flight, "max_in_flight")
        self._max_buffered = check_positive_int(max_buffered, "max_buffered")
        self._round_robin = RoundRobin.parse(round_robin)
        self._id = uuid.uuid4().hex
        self._topic_id = topic.topic_id
        self._overflow = topic.config.overflow.value
        self._compacted = topic.config.compaction is not None
        self._lock = threading.Lock()
        self._completed = threading.Condition(self._lock)
        self._order = SubmitOrder()  # calls go out in the order they were numbered
        self._pipes = [
            ChannelQueue(channel, actor, PublishBatch(self._topic_id, channel))
            for channel, actor in enumerate(topic._channel_actors)
        ]
        # Batch by batch, publishers made at once (one per task) start apart, not all
        # on channel 0 (Kafka's sticky partitioner starts at a random partition too).
        self._next_channel = (
            random.randrange(len(self._pipes)) if self._round_robin is RoundRobin.BATCH else 0
        )
        self._next_lead = 0  # the turn of the next publish_batch's lead (lead_last)
        self._in_flight = 0
        self._pending = 0  # values buffered or in flight
        self._closed = False
        self._completer = Completer(  # the background thread: it completes the calls
            self._id[:8],
            self._linger,
            topic_id=self._topic_id,
            topic_name=topic.name,
            count=self._count_completed,
            send=partial(self._send, force=False),
            close=self._close_on,
        )
        _flushed_at_exit(self)

    def __reduce__(self) -> tuple[Any, ...]:
        settings = {
            "ordering": self._ordering,
            "block_timeout": self._block_timeout,
            "batch_size": self._batch_size,
            "linger": self._linger,
            "max_in_flight": self._max_in_flight,
            "max_buffered": self._max_buffered,
            "round_robin": self._round_robin,
        }
        return (_new_publisher, (self._topic, settings))

    @property
    def publisher_id(self) -> str:
        """This publisher's id (every append carries it)."""
        return self._id

    # -- publishing ------------------------------------------------------------

    def publish(self, value: Any, *, key: Any = None) -> Future[PublishStatus]:
        """Publish one value; return a Future of its PublishStatus.

        Args:
            value: Any picklable value except None and ObjectRefs.
            key: Values with the same key go to the same channel, in order.
                Defaults to ``ordering(value)`` if the publisher has one.

        Returns:
            A Future of the value's PublishStatus; it fails with TopicFullError
            (no room in time) or the channel's error.

        Raises:
            InvalidTypeError: the value is None, an ObjectRef, cannot be
                pickled, or the key has an unsupported type (nothing is sent).
            InvalidArgumentError: the topic is compacted and the value has no key, an
                int key past 64 bits, or ``ordering`` raised (anything, SystemExit
                too); nothing is sent.
            PublisherClosedError: the publisher was closed.
            TopicNotFoundError: the topic was destroyed.
        """
        payload = fast_dumps(value)  # the snapshot: later changes to value do not count
        if key is None:
            if self._ordering is not None:
                key = call_user(self._ordering, "ordering", value)
            if key is None and self._compacted:
                raise no_key_error(self._topic.name)
        return self._enqueue(payload, key)

    def delete(self, key: Any) -> Future[PublishStatus]:
        """Delete ``key`` from a compacted topic: append a tombstone, an element of
        that key whose value is None (a table view drops the key; compaction
        removes the key's earlier elements, and the tombstone itself
        ``tombstone_retention_s`` after it became eligible).

        Args:
            key: The key to delete (a str, bytes, int or bool).

        Returns:
            A Future of the tombstone's PublishStatus (as ``publish``'s).

        Raises:
            InvalidArgumentError: the topic is not compacted (a None value would
                surprise its readers), or ``key`` is None; nothing is sent.
            InvalidTypeError: the key has an unsupported type (nothing is sent).
            PublisherClosedError: the publisher was closed.
            TopicNotFoundError: the topic was destroyed.
        """
        if not self._compacted:
            raise InvalidArgumentError(
                f"topic {self._topic.name!r} is not compacted: delete(key) appends a None "
                "value, which only a compacted topic's readers expect"
            )
        if key is None:
            raise InvalidArgumentError("delete needs the key to delete, got None")
        return self._enqueue(TOMBSTONE, key)

    def _enqueue(self, payload: bytes, key: Any) -> Future[PublishStatus]:
        """Add one pickled value, with its key (None: round robin), to its channel's batch."""
        if key is None:
            hashed = channel = None
        else:
            hashed = key_hash(key)
            channel = hashed % len(self._pipes)
            if type(key) is not str:
                key = stored_key(key)
        with self._lock:
            if self._closed:
                raise self._closed_error()
            if is_destroyed(self._topic_id):  # as this process knows (a set lookup)
                raise destroyed_error(self._topic.name)
            if channel is None:
                channel = self._next_channel
                self._next_channel = (channel + 1) % len(self._pipes)
            room = self._room() if self._pending >= self._max_buffered else None
            if room is not None:
                return _failed_future(room)
            pipe = self._pipes[channel]
            future = pipe.add_value(payload, key, None, self._batch_size)
            self._pending += 1
            # (Attributes, not ChannelQueue.size: this runs once a published value.)
            waiting = pipe.waiting_values + len(pipe.open.payloads)
            calls = (
                self._calls_to_make(force=False)
                if (waiting >= self._batch_size or pipe.in_flight < PIPELINE)
                and self._in_flight < self._max_in_flight
                else None
            )
        if calls is not None and calls.calls:
            self._make(calls)
        elif self._linger:
            self._completer.start()  # it sends the batch once it is linger old
        return future

    @overload
    def publish_batch(
        self,
        values: Iterable[Any],
        *,
        keys: Sequence[Any] | None = None,
        ref: Literal[True] = True,
    ) -> ray.ObjectRef[Sequence[PublishStatus]]: ...

    @overload
    def publish_batch(
        self, values: Iterable[Any], *, keys: Sequence[Any] | None = None, ref: Literal[False]
    ) -> Future[Sequence[PublishStatus]]: ...

    def publish_batch(
        self, values: Iterable[Any], *, keys: Sequence[Any] | None = None, ref: bool = True
    ) -> ray.ObjectRef[Sequence[PublishStatus]] | Future[Sequence[PublishStatus]]:
        """Publish many values: each channel's share of them as one part.

        Values this publisher published before go out first, so per-key order
        holds across ``publish`` and ``publish_batch``.

        Each channel's part is pickled once, as one list where every value is
        an object of its own (else value by value): values are snapshots taken
        here, and a part shared between two values of one call (one list in
        two dicts) stays shared for readers, as with ``ray.put`` of the list.

        Each channel's part goes in whole (consecutive positions, one time
        stamp) or not at all: with overflow "block" it waits up to
        ``block_timeout`` for room for all of it (a part larger than the
        capacity goes in pieces as room frees); with "fail" it is refused at
        once. A part refused makes the result raise TopicFullError naming
        its channel, which appended nothing of it (other channels' parts may
        have gone in).

        With ``ref`` (the default) every part goes at once, one call per channel (no task:
        one channel's call joins the others' statuses, each batch the next channel's); a
        publisher made with ``round_robin="batch"`` sends a keyless batch as one part to
        one channel, one call whatever the channel count. A part waits (the call
        returns later) while 16 of this publisher's batches are out at its channel
        (the acks a restarted channel keeps to answer retries with). With
        ``ref=False`` the parts wait in the channels' queues like ``publish()``'s values:
        while a channel's calls are in flight, the parts of successive batches for it
        coalesce, so a call carries up to ``batch_size`` values whatever the channel count;
        at most ``max_buffered`` values wait (beyond that the call waits up to
        ``block_timeout``, as ``publish()`` does).

        Args:
            values: Picklable values except None and ObjectRefs.
            keys: One key per value (None entries: ``ordering(value)`` or round
                robin), or None.
            ref: Return an ObjectRef (True) or a Future (False) of the statuses.

        Returns:
            The values' statuses in input order: a PublishStatuses, a compact
            sequence (length, index, iteration, equality with a list) whose items
            are built when read; as an ``ObjectRef`` (owned by this process), or
            with ``ref=False`` a ``concurrent.futures.Future``.

        Raises:
            InvalidTypeError, InvalidArgumentError: a bad value or key, ``values``
                or ``keys`` that is not a list of them (a str, a dict, None),
                ``keys`` of another length, a value without a key for a
                compacted topic, a ``ref`` that is not a bool, or an ``ordering``
                that raised; nothing is sent.
            PublisherClosedError: the publisher was closed.
            TopicNotFoundError: the topic was destroyed.
        """
        if type(ref) is not bool:
            raise InvalidTypeError(f"ref must be True or False, got {type(ref).__name__}")
        values = check_items(values, "values")
        if keys is not None:
            keys = check_items(keys, "keys")
        if keys is not None and len(keys) != len(values):
            raise InvalidArgumentError(f"keys has {len(keys)} entries for {len(values)} values")
        keys, hashes = self._keys_of(values, keys)
        if self._compacted:
            check_keyed(self._topic.name, keys, len(values))
        with self._lock:
            if self._closed:
                raise self._closed_error()
            layout = self._route_batch(len(values), hashes)
        # Pickled outside the lock (publish() on other threads goes on), and all
        # of it before anything is sent: a bad value sends nothing.
        parts = {
            channel: encode_part(values, keys, indices)
            for channel, indices in parts_of(layout).items()
        }
        # Before anything is sent: a dead channel's ref would raise Ray's ActorDiedError.
        check_topic(self._topic_id, self._topic.name, *(self._pipes[c].actor for c in parts))
        if not ref:
            return self._queue_parts(parts, layout)
        self._lock.acquire()
        try:
            while True:
                if self._closed:
                    raise self._closed_error()
                for channel in parts:  # what was published before goes first
                    self._pipes[channel].close_open()
                queued = self._calls_to_make(force=True, only=set(parts))
                if all(not self._pipes[c].size and self._pipes[c].room() > 0 for c in parts):
                    break
                # BATCHES_OUT: what went first returns before the rest (and the parts) go.
                self._lock.release()
                try:
                    self._make(queued)
                finally:
                    self._lock.acquire()
                self._completed.wait(0.05)
            parts = lead_last(parts, self._next_lead)
            self._next_lead += 1
            ticket = self._order.ticket() if queued.ticket is None else queued.ticket
            own: list[Call] = []
            for channel, payload in parts.items():
                pipe = self._pipes[channel]
                own.append(Call(pipe, pipe.sent(1), None, len(payload)))
                self._in_flight += 1
                self._pending += len(payload)
        finally:
            self._lock.release()
        with self._order.turn(ticket):
            for call in queued.calls:
                self._make_one(call, None)
            if not own:
                return ray.put(PublishStatuses())
            return self._send_parts(own, parts, layout)

    def _send_parts(
        self, own: list[Call], parts: dict[int, Payload], layout: np.ndarray
    ) -> ray.ObjectRef[Sequence[PublishStatus]]:
        """In its turn: submit a publish_batch's parts, one call per channel."""
        # One call per channel, no task: the lead's channel (lead_last) joins the others'
        # statuses into its reply (raytopic.core.gather). It answers once every part
        # has, so its reply alone completes them all: one callback a batch, not one a part.
        sent: list[Call] = []
        sends = [
            partial(self._make_part, call, parts[call.pipe.channel], own, sent) for call in own
        ]
        try:
            return send_joined(sends, part_layout(layout, list(parts)), JoinKind.STATUSES)
        except Exception:
            # The lead never went, so nothing will complete the parts: those sent and
            # those never sent are completed now (the failed one was, where it failed).
            failed = own[len(sent)]
            for call in own:
                if call is not failed:
                    self._completer.post(call, None, ChannelUnavailableError("not completed"))
            raise

    def _queue_parts(
        self, parts: dict[int, Payload], layout: np.ndarray
    ) -> Future[Sequence[PublishStatus]]:
        """``publish_batch(ref=False)``: each part waits in its channel's queue, after
        what was published before; the calls that carry them complete the future."""
        channels = list(parts)
        future = BatchFuture(
            self._topic_id,
            channels,
            [len(part) for part in parts.values()],
            part_layout(layout, channels) if len(channels) > 1 else None,
        )
        with self._lock:
            if self._closed:
                raise self._closed_error()
            room = self._room()
            if room is not None:
                future.set_exception(room)
                return future
            now = time.monotonic()
            for index, (channel, payload) in enumerate(parts.items()):
                self._pipes[channel].add_part(Part(payload, future, index), now)
                self._pending += len(payload)
            calls = self._calls_to_make(force=False)
        if calls.calls:
            self._make(calls)
        else:
            self._completer.start()  # it sends the parts once their channels' calls return
        return future

    def _room(self) -> TopicFullError | None:
        """With the lock held: wait while ``max_buffered`` values are pending. Returns
        why new values fail (no room within ``block_timeout``), or None.

        Raises:
            PublisherClosedError: closed while it waited (nothing would send them).
        """
        if self._pending < self._max_buffered:
            return None
        if not self._wait_for_room():
            return TopicFullError(
                f"{self._pending} values still buffered after "
                f"{self._block_timeout} s: the topic does not keep up"
            )
        if self._closed:
            raise self._closed_error()
        return None

    def _make_part(
        self, call: Call, part: Payload, own: list[Call], sent: list[Call], joined: Joined | None
    ) -> ray.ObjectRef[Any]:
        """Submit one channel's part of a publish_batch (``joined``: as the lead, whose
        reply completes every part of ``own``); ``sent`` gains it once submitted.

        Raises:
            ChannelUnavailableError: the call could not even be submitted (the
                parts sent before it may have gone in).
        """
        ref = self._make_one(call, part, joined, own if call is own[-1] else [])
        if ref is None:
            raise ChannelUnavailableError(
                f"channel {call.pipe.channel} could not be called; the batch's parts "
                "sent before it may have gone in"
            )
        sent.append(call)
        return ref

    def _keys_of(
        self, values: list[Any], keys: Sequence[Any] | None
    ) -> tuple[list[Any] | None, list[int | None] | None]:
        """Each value's key (``keys``, else ``ordering(value)``) and its hash (None: no
        key); (None, None) when no value can have a key."""
        if keys is None and self._ordering is None:
            return None, None
        if self._ordering is not None:
            keys = [
                call_user(self._ordering, "ordering", value)
                if keys is None or keys[index] is None
                else keys[index]
                for index, value in enumerate(values)
            ]
        return routed_keys(keys)

    def _route_batch(self, count: int, hashes: list[int | None] | None) -> np.ndarray:
        """With the lock held: each value's channel (keyed values by key, the rest in turn)."""
        layout, self._next_channel = route(
            count,
            hashes,
            len(self._pipes),
            self._next_channel,
            by_batch=self._round_robin is RoundRobin.BATCH,
        )
        return layout

    # -- batching ------------------------------------------------------------------

    def _calls_to_make(self, *, force: bool, only: set[int] | None = None) -> _Calls:
        """With the lock held: the calls that go now, fullest channel first, numbered,
        with the ticket to submit them under (``_make``).

        Without ``force`` at most ``max_in_flight`` calls are outstanding, and a
        partial batch waits until fewer than PIPELINE calls to its channel are
        out and it is ``linger`` old (see ``ChannelQueue.due``).
        """
        calls: list[Call] = []
        now = time.monotonic()
        batch_size, linger = self._batch_size, self._linger
        while force or self._in_flight < self._max_in_flight:
            pick, pick_size = None, 0
            for pipe in self._pipes:
                if only is not None and pipe.channel not in only:
                    continue
                size = pipe.due(batch_size, force=force, linger=linger, now=now)
                if size > pick_size:
                    pick, pick_size = pipe, size
            if pick is None:
                break
            number, pieces = pick.take(batch_size)
            calls.append(Call(pick, number, pieces, piece_count(pieces)))
            self._in_flight += 1
        return _Calls(self._order.ticket() if calls else None, calls)

    def _make(self, calls: _Calls) -> None:
        """Submit ``calls`` (outside the lock) once the calls numbered before them went."""
        if calls.ticket is None:
            return
        with self._order.turn(calls.ticket):
            for call in calls.calls:
                self._make_one(call, None)

    def _make_one(
        self,
        call: Call,
        part: Payload | None,
        joined: Joined | None = None,
        completes: list[Call] | None = None,
    ) -> Any:
        """Submit one append call (outside the lock); its reply is completed by the completer.
        ``part``: a publish_batch part's values (a ref's: its call is the part alone);
        ``joined``: the other parts' replies this part's call joins (see
        ``raytopic.core.gather``); ``completes``: the calls its reply completes
        (default: itself; a publish_batch's lead completes every part)."""
        if call.pieces is None:
            assert part is not None
            request: Any = Append(
                publisher_id=self._id,
                batch=call.number,
                overflow=self._overflow,
                timeout=self._block_timeout,
                statuses=True,
            )
            payload: Any = part
        else:
            request = AppendPieces(
                publisher_id=self._id,
                batch=call.number,
                overflow=self._overflow,
                timeout=self._block_timeout,
                whole=tuple(type(piece) is Part for piece in call.pieces),
            )
            payload = tuple(_payload_of(piece) for piece in call.pieces)
        try:
            ref = call.pipe.actor.request.remote(
                pack_request(request), pack_small(payload), *(() if joined is None else (joined,))
            )
        except Exception as error:  # could not even be submitted
            self._completer.start()
            self._completer.post(call, None, error)
            return None
        completer = self._completer
        completer.start()
        completed = [call] if completes is None else completes
        if completed:

            def post_done(done: Any) -> None:
                for each in completed:
                    completer.post(each, done, None)

            ref.future().add_done_callback(post_done)
        return ref

    # -- what the completer's thread asks of the publisher ----------------------------

    def _count_completed(self, call: Call) -> None:
        """Count a completed call out of the calls in flight (``flush()`` waits on it)."""
        with self._lock:
            self._in_flight -= 1
            call.pipe.returned(call.number)
            self._pending -= call.count
            self._completed.notify_all()

    def _send(self, *, force: bool) -> None:
        """Send what may go now (everything, with ``force``)."""
        with self._lock:
            calls = self._calls_to_make(force=force)
        self._make(calls)

    def _close_on(self, cause: BaseException) -> list[Piece]:
        """The completer's thread ended on ``cause``: close, and return the pieces not
        sent (they fail; ``publish()`` raises, ``flush()`` and ``close()`` return)."""
        with self._lock:
            self._closed = True
            unsent = [piece for pipe in self._pipes for piece in pipe.take_all()]
            self._pending -= piece_count(unsent)
            self._completed.notify_all()
        return unsent

    def _closed_error(self) -> PublisherClosedError:
        """Why ``publish`` is refused: closed by ``close()``, or by a failure."""
        return closed_error(self._completer.failure)

    def _wait_for_room(self) -> bool:
        """With the lock held: wait until fewer than max_buffered values are pending."""
        deadline = time.monotonic() + (self._block_timeout or 0)
        self._completer.start()
        self._completer.wake()  # its thread sends what may go
        while self._pending >= self._max_buffered:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._completed.wait(bounded_wait(left))
        return True

    # -- flush and close -----------------------------------------------------------

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered and wait until every value published so far is
        acknowledged or failed (failures surface on the values' futures, not here).

        Args:
            timeout: Seconds to wait at most (None: no limit; 0 to at most a year).

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
            InvalidArgumentError, InvalidTypeError: a bad ``timeout``.
        """
        timeout = check_seconds(timeout, "timeout", allow_none=True, allow_zero=True)
        deadline = None if timeout is None else time.monotonic() + timeout
        self._send(force=True)
        with self._lock:
            while self._pending:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"{self._pending} values still unacknowledged")
                self._completed.wait(bounded_wait(left))

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop. Idempotent; ``publish`` afterwards raises PublisherClosedError.

        A publisher that closed itself (its background thread ended) waits for
        its calls in flight, as a flush does.

        Args:
            timeout: Seconds the flush may wait at most (None: no limit; 0 to at
                most a year).

        Raises:
            TimeoutError: values were still unacknowledged after ``timeout``
                seconds (the publisher is then not closed).
            InvalidArgumentError, InvalidTypeError: a bad ``timeout``.
        """
        check_seconds(timeout, "timeout", allow_none=True, allow_zero=True)
        if self._closed and self._completer.failure is None:
            return
        self.flush(timeout)
        with self._lock:
            self._closed = True
        self._completer.stop()

    @property
    def is_closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_unclosed: weakref.WeakSet[Publisher] = weakref.WeakSet()
_exit_hook = threading.Lock()
_exit_hooked = False


def _flushed_at_exit(publisher: Publisher) -> None:
    """Have the interpreter's exit flush ``publisher`` if it is not closed by then. The
    hook is registered with the first publisher, after ``ray.init`` registered its
    shutdown (a publisher needs Ray), so it runs first: hooks run in reverse order."""
    global _exit_hooked
    _unclosed.add(publisher)
    if _exit_hooked:
        return
    with _exit_hook:
        if not _exit_hooked:
            atexit.register(_flush_at_exit)
            _exit_hooked = True


def _flush_at_exit() -> None:
    """Flush every publisher not closed (the interpreter is exiting: what ``linger``
    holds back, or a call retrying at a restarting channel, would be lost with its
    thread), each for up to its ``block_timeout``."""
    for publisher in list(_unclosed):
        if publisher.is_closed or not ray.is_initialized():
            continue
        try:
            publisher.flush(publisher._block_timeout)
        except Exception as error:  # the exit goes on; what is left is said
            logger.warning("at exit, a publisher to topic %r: %s", publisher._topic.name, error)


def _payload_of(piece: Piece) -> Payload:
    """A piece's values as the channel takes them."""
    if isinstance(piece, PublishBatch):
        return PickledValues.from_pickles(piece.payloads, piece.keys)
    return piece.payload


def _failed_future(error: BaseException) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_exception(error)
    return future


def _new_publisher(topic: Topic, settings: dict[str, Any]) -> Publisher:
    return Publisher(topic, **settings)
