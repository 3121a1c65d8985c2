"""Streams: a group of a topic as an unbounded source of micro-batches
(docs/guides/streams.md),
for Ray Data (``raytopic.data.stream``) and Spark (``raytopic.spark.stream``).

One batch, step by step:

1. **Plan** (the driver, in ``next()``): each channel's range starts where its
   last one ended and takes what the channel holds now (up to the tails seen
   when the stream opened, for ``"available_now"``), ``max_rows_per_batch``
   positions at most over all channels, shared fairly among them
   (:func:`split_rows`). Damaged stored records in the ranges follow
   ``fail_on_data_loss`` as in ``read_topic``.
2. **Record**: the batch (its id and every channel's range) goes into the offset
   log that each channel keeps beside the group's cursor
   (``raytopic.core.stream_log``), durably with a store, before it is handed out:
   one call to a lead channel, which records it at every channel
   (``raytopic.actors.stream_steps``).
3. **Read**: ``MicroBatch.dataset`` is a Ray Dataset of the ranges read by Ray
   Data tasks straight from the channel actors (``read_topic``'s datasource);
   ``MicroBatch.dataframe`` (the Spark form) a DataFrame read by Spark tasks.
4. **Commit**: when the iterator advances (or on ``MicroBatch.commit()``), every
   channel marks the batch committed and moves the group's commit to the end of
   its range, in one durable write: again one call to a lead channel.

Batches ahead while catching up (``"available_now"`` from the start, or once a
batch handed out was full): a thread of the stream plans the next batches, up to
``READ_AHEAD_BATCHES`` not taken by ``next()`` yet, each starting where the one
before it ends (step 1), and starts each one's read with ``read_ahead`` (step 3:
the Ray Data form reads it into the object store; the Spark form plans its
DataFrame) while the caller works on the batch in hand. ``next()`` takes the
first planned batch, waits for what is left of its read, commits the batch in
hand and records the planned one in one step (steps 4 and 2: one call to the
lead, one write at each channel, the commit first), and hands it out: the offset
log sees the same steps in the same order, one batch in flight, and nothing is
handed out before it is recorded. A planned batch is no promise: if the stream
ends first it was never recorded, and the next stream plans its own (a batch to
hand out again is read ahead too, as the first).

A stream that opens asks the coordinator for its group
(``raytopic.bridge.stream_claim``): the coordinator, which decides who consumes
every group, grants it a lease owning every channel (fencing any older stream of
the group; refused while the group has members), and answers with the channels'
offset logs: a batch recorded but committed nowhere is handed out first, as it
was; a batch committed at some channels only is committed at the others
(``raytopic.core.stream_log.recover``). The stream holds the group until it ends
(the iteration ends, or ``stop()``), or its process stops heartbeating for
longer than its ``timeout``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray

from raytopic.bridge.stream_claim import StreamClaim
from raytopic.client.bulk import ChannelRange, cut_ranges, ring_figures
from raytopic.client.topic import Topic
from raytopic.core.config import (
    Start,
    StartName,
    check_bool,
    check_instance,
    check_name,
    check_positive_int,
    check_seconds,
    check_timeout,
)
from raytopic.core.destroyed import topic_calls
from raytopic.core.errors import (
    DataLossError,
    InvalidArgumentError,
    InvalidTypeError,
)
from raytopic.core.protocol import (
    CommitMicroBatch,
    MicroBatchRecord,
    ReadIdentity,
    RecordMicroBatch,
    StreamRequest,
    pack_request,
)
from raytopic.core.stream_log import recover

if TYPE_CHECKING:
    from ray.data import Dataset

logger = logging.getLogger(__name__)

__all__ = [
    "AVAILABLE_NOW",
    "READ_AHEAD_BATCHES",
    "BatchReader",
    "MicroBatch",
    "ReadAhead",
    "Stream",
    "split_rows",
]

AVAILABLE_NOW = "available_now"
"""The trigger that reads what is there when the stream opens, then ends."""

BatchReader = Callable[[list[ChannelRange]], tuple["Dataset", Any]]
"""Makes a batch's ``(dataset, dataframe)`` from the pieces its ranges are read in
(the dataframe None in the Ray Data form)."""

ReadAhead = Callable[[list[ChannelRange]], Callable[[], tuple["Dataset", Any]] | None]
"""Starts reading a batch planned ahead (in the stream's thread, before the batch is
recorded) and returns what waits for the read and gives its ``(dataset,
dataframe)`` (called by the ``next()`` that hands the batch out, before it
records it); or None: the batch is not worth reading ahead, and is read as a
batch of a stream that caught up is (``BatchReader``, when handed out)."""

READ_AHEAD_BATCHES = 1
"""Batches a stream catching up holds planned (and read, or being read) and not yet
taken by ``next()``, at most; the next one is planned as soon as ``next()`` takes
one. A read of 100,000 rows by one task takes ~30 ms, a fraction of the caller's
Ray Data job on a batch (~100 ms): one ahead keeps the caller from waiting, and
holds no more of the object store."""


@dataclass(frozen=True, slots=True)
class _Planned:
    """A batch planned (not recorded yet): its record, the pieces its ranges are read
    in, and, when read ahead, what waits for its ``(dataset, dataframe)``."""

    record: MicroBatchRecord
    pieces: list[ChannelRange]
    read: Callable[[], tuple[Dataset, Any]] | None


def split_rows(backlog: Mapping[int, int], max_rows: int) -> dict[int, int]:
    """How many positions each channel gives a batch of at most ``max_rows``.

    All of every backlog if they fit; else each channel an equal share, a channel
    with less than its share giving all it has and the rest of its share going
    to the others (water filling), so no channel waits behind a busier one. What
    an equal split leaves over goes one each to the lowest channels.

    Args:
        backlog: Per channel, the positions waiting.
        max_rows: The batch's bound (>= 1).

    Returns:
        Per channel (every one in ``backlog``), the positions taken.
    """
    taken = dict.fromkeys(backlog, 0)
    waiting = sorted((rows, channel) for channel, rows in backlog.items() if rows > 0)
    left = max_rows
    while waiting and left > 0:
        share = left // len(waiting)
        rows, channel = waiting[0]
        if share and rows <= share:  # the smallest fits in its share: all of it
            taken[channel] = rows
            left -= rows
            waiting.pop(0)
            continue
        channels = sorted(channel for _, channel in waiting)
        for channel in channels:
            taken[channel] = share
        for channel in channels[: left - share * len(channels)]:
            taken[channel] += 1
        break
    return taken


class MicroBatch:
    """One micro-batch of a stream: a fixed position range of every channel, and
    its elements.

    Attributes:
        batch_id: The batch's number in its group: 0, 1, 2, ... (a replayed batch
            keeps its number: an idempotent sink overwrites by it).
        ranges: Per channel of the topic, ``(start, end)``, end excluded
            (``start == end``: nothing from that channel). A channel's ranges in
            successive batches follow each other with no gap and no overlap.
        rows: The elements of the ranges (fewer than the positions only where
            ``fail_on_data_loss=False`` read around lost ones).
        dataset: The elements as a Ray Dataset, read by Ray Data tasks straight
            from the channels when it runs, with ``read_topic``'s columns (the
            row's fields or ``value``, then ``channel``, ``position``,
            ``timestamp``).
        dataframe: The Spark form's DataFrame of the same rows (None in the Ray
            Data form).
    """

    __slots__ = ("_record", "_stream", "batch_id", "dataframe", "dataset", "ranges", "rows")

    def __init__(
        self,
        stream: Stream,
        record: MicroBatchRecord,
        rows: int,
        dataset: Dataset,
        dataframe: Any = None,
    ) -> None:
        self._stream = stream
        self._record = record
        self.batch_id = record.batch_id
        self.ranges: dict[int, tuple[int, int]] = {
            channel: (start, end) for channel, start, end in record.ranges
        }
        self.rows = rows
        self.dataset = dataset
        self.dataframe = dataframe

    def commit(self) -> None:
        """Commit the batch now (advancing the iterator does it too): the group's
        positions move to the ends of its ranges, durably with a store. Committing
        again changes nothing.

        Raises:
            NotOwnerError: the stream no longer holds its group (a newer stream on
                the group fenced this one, or its claim ended).
        """
        self._stream._commit(self._record)

    def __repr__(self) -> str:
        return f"MicroBatch(batch_id={self.batch_id}, ranges={self.ranges}, rows={self.rows})"


class Stream:
    """A group of a topic as a sequence of micro-batches (see
    ``raytopic.data.stream``). Iterate it; ``stop()`` ends it; also a context
    manager (leaving the block stops it).

    **Ordering**: batches come in id order; each channel's ranges follow each
    other with no gap and no overlap.
    **Delivery**: a batch is committed when the iterator advances past it (or by
    ``MicroBatch.commit()``); one handed out and not committed is handed out
    again, same id, same ranges, same rows, by the next stream on the group.
    With an idempotent sink (one that overwrites by batch id) the output is
    exactly once.
    **Durability**: with a store, the offset log and the commits survive
    channel, coordinator and driver SIGKILLs.
    **Ownership**: the stream is its group's only consumer, as its coordinator
    decides: members are refused (``GroupBusyError``) until the stream ends, is
    stopped, or its process stops heartbeating for longer than ``timeout``.
    """

    def __init__(
        self,
        topic: Topic,
        group: str,
        *,
        trigger: float | None,
        max_rows_per_batch: int,
        start_latest: bool,
        fail_on_data_loss: bool,
        reader: BatchReader,
        read_ahead: ReadAhead | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._topic = topic
        self._group = group
        self._trigger = trigger  # None: "available_now"
        self._max_rows = max_rows_per_batch
        self._fail_on_data_loss = fail_on_data_loss
        self._reader = reader
        self._read_ahead = read_ahead
        # The batches planned ahead, in order (their planning thread appends them).
        self._ahead: deque[Future[_Planned | None]] = deque()
        self._planning = False  # a thread plans ahead (it ends with False)
        self._planner = threading.Condition()  # guards _ahead and _planning
        self._channels = range(topic.channel_count)
        self._stop = threading.Event()
        self._ended = False
        self._stepping = False  # a next() runs: it gives the group back when it ends
        self._steps = threading.Lock()  # guards _stepping and the claim's end
        self._handed: MicroBatchRecord | None = None  # handed out, not committed yet
        self._due = 0.0  # monotonic time of the next planned batch (a timed trigger)
        self._open(start_latest, timeout)
        if self._trigger is None:  # catching up from the start: the first batch too
            self._plan_ahead()

    # -- opening ------------------------------------------------------------------------

    def _open(self, start_latest: bool, timeout: float) -> None:
        """Claim the group at its coordinator (fencing older streams) and find where
        its stream stopped (see ``raytopic.core.stream_log.recover``)."""
        topic, group = self._topic, self._group
        self._claim = claim = StreamClaim(topic, group, timeout, start_latest)
        try:
            self._resume(claim)
        except BaseException:
            claim.end()  # not opened: the group is free again
            raise
        logger.info(
            "stream %s on group %s of %s: next batch %d%s",
            claim.stream_id,
            group,
            topic.name,
            self._next_id,
            "" if self._replay is None else f" (batch {self._replay.batch_id} first, again)",
        )

    def _resume(self, claim: StreamClaim) -> None:
        """Where the group's stream stopped, from the offset logs the claim found."""
        states = claim.states
        recovery = recover([state.record for state in states])
        if recovery.finish is not None:
            self._step(CommitMicroBatch(self._group, claim.lease, recovery.finish))
        self._replay = recovery.replay
        self._next_id = recovery.next_batch_id
        replay = recovery.replay
        self._committed = (self._next_id if replay is None else replay.batch_id) - 1
        # Each channel goes on from the group's commit there, or from the end of the
        # batch in flight (replayed, or just committed).
        self._starts = {channel: states[channel].committed + 1 for channel in self._channels}
        pending = recovery.replay or recovery.finish
        if pending is not None:
            for channel, _, end in pending.ranges:
                self._starts[channel] = max(self._starts[channel], end)
        self._until: dict[int, int] | None = None
        if self._trigger is None:
            self._until = {channel: view[1] + 1 for channel, view in self._views().items()}

    # -- iterating ----------------------------------------------------------------------

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> MicroBatch:
        """Commit the batch handed out last, then the next batch: the uncommitted one
        of an earlier stream first, then new ones (waiting for the trigger).

        Raises:
            StopIteration: ``"available_now"`` read everything, or ``stop()``.
            NotOwnerError: a newer stream on the group fenced this one (the
                iteration ends with it).
            DataLossError: the next batch crosses lost elements and
                ``fail_on_data_loss`` (nothing of it is recorded or committed).
        """
        if self._ended:
            raise StopIteration
        with self._steps:
            self._stepping = True
        batch = None
        try:
            batch = self._next_batch()
        finally:
            if batch is None:
                self._ended = True  # the end, or an error: the group is given back
            with self._steps:
                self._stepping = False
                if self._ended:
                    self._claim.end()
                elif batch is not None and self._full(batch._record):
                    self._plan_ahead()
        if batch is None:
            raise StopIteration
        return batch

    def _next_batch(self) -> MicroBatch | None:
        """The batch in hand committed and the next one handed out: in one step when
        the next one was planned ahead, else the commit first (the next one is planned
        after it: a stream that caught up commits before it waits for the trigger)."""
        if self._stop.is_set():
            self._commit_handed()
            return None
        ahead = self._next_ahead()
        if ahead is not None:
            try:
                planned = ahead.result()
            except BaseException:
                self._commit_handed()  # done all the same
                raise
            if planned is None:  # the end: "available_now" read everything, or stop()
                self._commit_handed()
                return None
            return self._hand_out(planned)
        self._commit_handed()
        planned = self._planned(read=False)
        return None if planned is None else self._hand_out(planned)

    def _next_ahead(self) -> Future[_Planned | None] | None:
        """The first batch planned ahead (waiting for the thread planning it to add
        it), or None when none is and no thread plans ahead."""
        with self._planner:
            self._planner.wait_for(lambda: self._ahead or not self._planning)
            return self._ahead.popleft() if self._ahead else None

    def _full(self, record: MicroBatchRecord) -> bool:
        """Whether the stream is catching up after ``record`` (``"available_now"``,
        or a batch as full as ``max_rows_per_batch`` allows): then the batches after it
        are planned (and read) ahead. A stream that caught up plans each batch when
        ``next()`` asks, over the freshest tails, and hands it out unread (its rows
        sooner in hand)."""
        return self._trigger is None or record.width >= self._max_rows

    def _plan_ahead(self) -> None:
        """Plan (and with ``read_ahead`` start reading) the next batches in a thread of
        the stream while the caller works on the one in hand, up to
        ``READ_AHEAD_BATCHES`` not handed out, and while they are full (``stop()``
        ends the thread's wait for the trigger)."""
        with self._planner:
            if self._planning or self._stop.is_set():
                return
            self._planning = True
        threading.Thread(
            target=self._plan_batches, name="raytopic-stream-plan", daemon=True
        ).start()

    def _plan_batches(self) -> None:
        """The planning thread: each batch's future goes into ``_ahead`` before it is
        planned, so ``next()`` finds the batches in order (an error is raised by the
        ``next()`` that takes it, and ends the planning)."""
        more = True
        while more:
            with self._planner:
                if len(self._ahead) >= READ_AHEAD_BATCHES or self._stop.is_set():
                    break
                ahead: Future[_Planned | None] = Future()
                self._ahead.append(ahead)
                self._planner.notify_all()
            try:
                planned = self._planned(read=True)
            except BaseException as error:  # raised by the next() that takes it
                ahead.set_exception(error)
                break
            ahead.set_result(planned)
            more = planned is not None and self._full(planned.record)
        with self._planner:
            self._planning = False
            self._planner.notify_all()

    def _planned(self, *, read: bool) -> _Planned | None:
        """The next batch: the one to hand out again first, else one planned over what
        the channels hold once the trigger says it is due (None: ``"available_now"``
        read everything, or ``stop()``); with ``read``, its read started. The batches
        after it start where it ends.

        Raises:
            DataLossError: it crosses lost elements and ``fail_on_data_loss``.
        """
        record = self._replay
        if record is not None:  # planned by an earlier stream: its ranges are set
            self._replay = None
            return self._read(record, self._views(), read)
        while True:
            if self._trigger is not None:
                if self._stop.wait(max(0.0, self._due - time.monotonic())):
                    return None
                # The next one is due a trigger from now, or at once if this batch
                # takes longer than that.
                self._due = time.monotonic() + self._trigger
            views = self._views()
            record = self._plan(views)
            if record is not None:
                planned = self._read(record, views, read)
                self._next_id = record.batch_id + 1
                for channel, _, end in record.ranges:
                    self._starts[channel] = end
                return planned
            if self._trigger is None:
                return None  # "available_now": everything it saw is read

    def _read(
        self,
        record: MicroBatchRecord,
        views: dict[int, tuple[int, int, dict[str, Any]]],
        read: bool,
    ) -> _Planned:
        """``record`` planned: its pieces, and with ``read`` (and ``read_ahead``) its
        read started."""
        pieces = self._pieces(record, views)
        reader = self._read_ahead if read else None
        return _Planned(record, pieces, None if reader is None else reader(pieces))

    def _plan(self, views: dict[int, tuple[int, int, dict[str, Any]]]) -> MicroBatchRecord | None:
        """The next batch over what the channels hold (None: nothing new)."""
        backlog = {}
        for channel in self._channels:
            end = views[channel][1] + 1
            if self._until is not None:
                end = min(end, self._until[channel])
            backlog[channel] = max(0, end - self._starts[channel])
        taken = split_rows(backlog, self._max_rows)
        if not any(taken.values()):
            return None
        return MicroBatchRecord(
            self._next_id,
            tuple(
                (channel, self._starts[channel], self._starts[channel] + taken[channel])
                for channel in self._channels
            ),
        )

    def _hand_out(self, planned: _Planned) -> MicroBatch:
        """Record the batch in the offset log (durably, in one step with the commit of
        the batch in hand if there is one), then hand it out."""
        record, pieces = planned.record, planned.pieces
        dataset, dataframe = self._reader(pieces) if planned.read is None else planned.read()
        if self._handed is None or not self._commit(self._handed, then=record):
            self._step(RecordMicroBatch(self._group, self._claim.lease, record))
        self._handed = record
        rows = sum(piece.rows for piece in pieces)
        return MicroBatch(self, record, rows, dataset, dataframe)

    def _pieces(
        self, record: MicroBatchRecord, views: dict[int, tuple[int, int, dict[str, Any]]]
    ) -> list[ChannelRange]:
        """The pieces the batch's ranges are read in: around damaged stored records,
        and above elements a channel without a store no longer holds, as
        ``fail_on_data_loss`` says (raised before anything is recorded)."""
        wholes, lost = [], []
        for channel, start, end in record.ranges:
            head, _, identity = views[channel]
            if start < head and not identity["durable"] and start < end:
                lost.append((channel, start, min(end, head) - 1, identity["epoch"]))
                start = min(head, end)
            wholes.append(ChannelRange(channel, start, end))
        if lost and self._fail_on_data_loss:
            channel, first, last, epoch = lost[0]
            named = ", ".join(f"channel {c}: {f}..{la}" for c, f, la, _ in lost)
            raise DataLossError(
                f"batch {record.batch_id} of group {self._group!r} covers elements that are "
                f"gone (their channel restarted without a store, or they were overwritten "
                f"or expired): {named}; read on without them with fail_on_data_loss=False",
                head_sequence=last + 1,
                channel=channel,
                old_epoch=epoch,
                new_epoch=epoch,
                lost=(first, last),
            )
        for channel, first, last, _ in lost:
            logger.warning(
                "batch %d of group %s: channel %d no longer holds %d..%d: read without them",
                record.batch_id,
                self._group,
                channel,
                first,
                last,
            )
        identities = {channel: view[2] for channel, view in views.items()}
        return cut_ranges(wholes, identities, fail_on_data_loss=self._fail_on_data_loss)

    def _commit_handed(self) -> None:
        if self._handed is not None:
            self._commit(self._handed)

    def _commit(self, record: MicroBatchRecord, then: MicroBatchRecord | None = None) -> bool:
        """Commit ``record`` (and record ``then`` in the same step) unless it is
        committed already; returns whether it stepped."""
        if record.batch_id <= self._committed:
            return False
        self._step(CommitMicroBatch(self._group, self._claim.lease, record, next=then))
        self._committed = record.batch_id
        if self._handed == record:
            self._handed = None
        return True

    # -- the channels ---------------------------------------------------------------------

    def _step(self, request: StreamRequest) -> None:
        """``request`` at every channel, in one call: to a lead channel, which serves
        every channel's part (the lead changes with the batch, spreading the work)."""
        topic = self._topic
        lead = topic._channel_actors[request.batch.batch_id % topic.channel_count]
        with topic_calls(topic.topic_id, topic.name):
            ray.get(lead.request.remote(pack_request(request)))

    def _views(self) -> dict[int, tuple[int, int, dict[str, Any]]]:
        """Per channel: (head, tail, identity), asked of every channel at once."""
        topic = self._topic
        actors = topic._channel_actors
        with topic_calls(topic.topic_id, topic.name):
            answers = ray.get(
                [ring_figures(actor) for actor in actors]
                + [actor.control.remote(ReadIdentity()) for actor in actors]
            )
        count = len(actors)
        return {
            channel: (answers[channel].head, answers[channel].tail, answers[count + channel])
            for channel in self._channels
        }

    # -- life cycle ------------------------------------------------------------------------

    @property
    def group(self) -> str:
        """The group the stream reads."""
        return self._group

    @property
    def topic(self) -> Topic:
        """The topic the stream reads."""
        return self._topic

    def stop(self) -> None:
        """End the stream: a wait for the trigger ends at once, and the iteration ends
        (the next ``next()`` still commits the batch the loop is done with; nothing
        else is committed), and the group is given back (a member may join) once no
        batch is in hand. Idempotent; may be called from another thread."""
        self._stop.set()
        with self._steps:
            if not self._stepping and self._handed is None:
                self._end()

    def _end(self) -> None:
        """The iteration is over: give the group back (called holding ``_steps``)."""
        self._ended = True
        self._claim.end()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """The loop is left: the stream stops, and gives its group back (a batch in
        hand stays uncommitted: the next stream hands it out again)."""
        self._stop.set()
        with self._steps:
            if not self._stepping:
                self._end()

    def __repr__(self) -> str:
        return (
            f"Stream(topic={self._topic.name!r}, group={self._group!r}, next_batch={self._next_id})"
        )


def open_stream(
    topic: Topic,
    group: str,
    *,
    trigger: Any,
    max_rows_per_batch: int,
    start: Start | StartName,
    fail_on_data_loss: bool,
    reader: BatchReader,
    read_ahead: ReadAhead | None = None,
    timeout: float = 30.0,
) -> Stream:
    """A stream on ``group`` of ``topic`` whose batches ``reader`` reads, its arguments
    checked before anything is asked of the cluster (see ``raytopic.data.stream``).

    Raises:
        InvalidArgumentError, InvalidTypeError: a bad argument.
        GroupModeError: the group is shared.
        GroupBusyError: the group has members.
    """
    check_instance(topic, Topic, "topic")
    check_name(group, "group")
    every = _check_trigger(trigger)
    check_positive_int(max_rows_per_batch, "max_rows_per_batch")
    if not isinstance(start, str):
        raise InvalidTypeError(f"start must be a str, got {type(start).__name__}")
    if start not in ("earliest", "latest"):
        raise InvalidArgumentError(f"start must be 'earliest' or 'latest', got {start!r}")
    check_bool(fail_on_data_loss, "fail_on_data_loss")
    check_timeout(timeout, "timeout", allow_none=False)
    return Stream(
        topic,
        group,
        trigger=every,
        max_rows_per_batch=max_rows_per_batch,
        start_latest=start == "latest",
        fail_on_data_loss=fail_on_data_loss,
        reader=reader,
        read_ahead=read_ahead,
        timeout=timeout,
    )


def _check_trigger(trigger: Any) -> float | None:
    """Seconds between batches, or None for ``"available_now"``."""
    if isinstance(trigger, str):
        if trigger != AVAILABLE_NOW:
            raise InvalidArgumentError(
                f"trigger must be {AVAILABLE_NOW!r} or seconds > 0, got {trigger!r}"
            )
        return None
    return check_seconds(trigger, "trigger")
