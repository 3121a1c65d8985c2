"""Cheap ``concurrent.futures.Future``s for published values.

``publish()`` must cost microseconds, but a stock ``Future()`` builds a
``threading.Condition`` and two lists: about 7 us under the garbage collector
here, more than everything else ``publish()`` does. So the values of one
channel batch share one ``_Batch`` (one Condition, one reply), and each
value's future is a thin ``Future`` subclass whose state, result and
exception are read from its batch; completing a batch of a thousand values
is one assignment and one ``notify_all``. The lists stock futures need for
``wait``/``as_completed``/``add_done_callback`` are made on first use.

This leans on ``concurrent.futures.Future``'s private attribute names
(``_condition``, ``_state``, ``_result``, ``_exception``, ``_waiters``,
``_done_callbacks``), unchanged since Python 3.2; ``tests/client/
test_publish_futures.py`` checks every public Future behaviour on them.

A ``publish_batch`` that rides the accumulator gets one stock Future of its own
(:class:`BatchFuture`), completed once each channel's part of it is acknowledged.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, RUNNING
from typing import TYPE_CHECKING, Any

from raytopic.core.errors import TopicFullError
from raytopic.core.protocol import AppendAck
from raytopic.core.records import Position, PublishStatus, stamp_to_datetime
from raytopic.core.statuses import PublishStatuses, combine_statuses

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

__all__ = ["BatchFuture", "PublishBatch", "PublishFuture"]


class PublishBatch:
    """The values one publisher sends to one channel in one call."""

    __slots__ = (
        "ack",
        "channel",
        "condition",
        "error",
        "keys",
        "payloads",
        "state",
        "topic_id",
        "watched",
    )

    def __init__(self, topic_id: str, channel: int) -> None:
        self.topic_id = topic_id
        self.channel = channel
        self.payloads: list[bytes] = []
        self.keys: list[Any] | None = None  # the values' keys, once one has a key
        self.condition = threading.Condition()
        self.state = RUNNING
        self.ack: AppendAck | None = None
        self.error: BaseException | None = None
        self.watched: list[PublishFuture] = []  # futures someone waits on or called back

    def add(self, payload: bytes, key: Any = None) -> PublishFuture:
        """Take one more value.

        Args:
            payload: The value, pickled.
            key: Its key (``raytopic.client.routing.stored_key``), or None.

        Returns:
            The value's future, resolved when the batch completes.
        """
        payloads = self.payloads
        future = PublishFuture(self, len(payloads))
        if key is not None and self.keys is None:
            self.keys = [None] * len(payloads)
        if self.keys is not None:
            self.keys.append(key)
        payloads.append(payload)
        return future

    def complete(self, ack: AppendAck | None, error: BaseException | None = None) -> None:
        """Finish every future of the batch.

        Args:
            ack: The channel's ack (None when the call failed).
            error: Why the call failed (None: it did not).

        Raises:
            BaseException: what a done-callback raised that is not an Exception
                (``SystemExit``), once every future has called back.
        """
        with self.condition:
            self.ack = ack
            self.error = error
            self.state = FINISHED
            # A future both waited on and called back is listed twice: notify it once.
            watched = list(dict.fromkeys(self.watched))
            for future in watched:
                failure = future._exception
                for waiter in future._waiter_list or ():
                    if failure is None:
                        waiter.add_result(future)
                    else:
                        waiter.add_exception(future)
            self.condition.notify_all()
        self.payloads = []  # the channel has them now
        self.keys = None
        interrupted: BaseException | None = None
        for future in watched:
            try:
                # Future's own (untyped) helper; it logs what a callback raises, but this:
                future._invoke_callbacks()  # type: ignore[attr-defined]
            except BaseException as error:  # SystemExit: the other futures still call back
                interrupted = interrupted or error
        if interrupted is not None:
            raise interrupted


class PublishFuture(Future):
    """The future of one published value (what ``Publisher.publish`` returns).

    A ``concurrent.futures.Future``: ``result(timeout)`` returns the value's
    ``PublishStatus`` (or raises the typed error that refused it), and
    ``add_done_callback``, ``done``, ``exception`` and ``concurrent.futures.wait``
    work as for any Future. Its state lives in its batch: a thousand futures of
    one call cost one lock, not a thousand.
    """

    __slots__ = ("_batch", "_callback_list", "_index", "_own_state", "_status", "_waiter_list")

    def __init__(self, batch: PublishBatch, index: int) -> None:  # no super(): see module doc
        self._batch = batch
        self._index = index
        self._own_state: str | None = None
        self._status: PublishStatus | None = None
        self._waiter_list: list[Any] | None = None
        self._callback_list: list[Any] | None = None

    # -- state, result and exception come from the batch ----------------------

    @property  # Future's attribute, kept in the batch (see the module doc)
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        return self._batch.condition

    @property
    def _state(self) -> str:
        return self._own_state or self._batch.state

    @_state.setter
    def _state(self, value: str) -> None:
        self._own_state = value

    @property
    def _exception(self) -> BaseException | None:
        batch = self._batch
        if batch.state != FINISHED:
            return None
        if batch.error is not None:
            return batch.error
        ack = batch.ack
        if ack is not None and self._index >= ack.accepted:
            # Never a silent success for a value the channel did not append.
            return ack.error or TopicFullError(f"channel {batch.channel}: value not appended")
        return None

    @_exception.setter
    def _exception(self, value: BaseException | None) -> None:
        # Only reached through Future.set_exception, which publishers never call.
        self._batch.error = value

    @property
    def _result(self) -> PublishStatus | None:
        if self._status is not None:
            return self._status
        batch = self._batch
        ack = batch.ack
        if batch.state != FINISHED or ack is None or self._index >= ack.accepted:
            return None
        sequence, stamp = ack.locate(self._index)
        position = Position(batch.topic_id, batch.channel, sequence)
        self._status = PublishStatus(batch.channel, position, stamp_to_datetime(stamp))
        return self._status

    @_result.setter
    def _result(self, value: Any) -> None:
        self._status = value

    # -- made on first use ------------------------------------------------------

    @property  # Future's attribute, made on first use
    def _waiters(self) -> list[Any]:  # type: ignore[override]
        if self._waiter_list is None:
            self._waiter_list = []
            self._watch()
        return self._waiter_list

    @property
    def _done_callbacks(self) -> list[Any]:
        if self._callback_list is None:
            self._callback_list = []
            self._watch()
        return self._callback_list

    def _watch(self) -> None:
        # Called with the batch condition held (Future takes it before touching
        # _waiters / _done_callbacks), so it cannot race with complete().
        self._batch.watched.append(self)

    def __repr__(self) -> str:
        return f"<PublishFuture channel={self._batch.channel} state={self._state}>"


class BatchFuture(Future):
    """The future of one ``publish_batch``'s statuses, in input order (a compact
    PublishStatuses), assembled here from its parts' acks as they come: a part
    refused fails it with that part's error (TopicFullError naming its channel,
    which appended none of it; other channels' parts may have gone in).

    Args:
        topic_id: The topic's id.
        channels: Each part's channel, in part order.
        counts: Each part's number of values.
        layout: ``layout[i]``: the part holding value ``i`` (None: at most one part).
    """

    def __init__(
        self,
        topic_id: str,
        channels: Sequence[int],
        counts: Sequence[int],
        layout: np.ndarray | None,
    ) -> None:
        super().__init__()
        self._topic_id = topic_id
        self._channels = channels
        self._counts = counts
        self._layout = layout
        self._parts: list[PublishStatuses | BaseException | None] = [None] * len(channels)
        self._left = len(channels)
        if not channels:
            self.set_result(PublishStatuses())

    def part_done(self, index: int, ack: AppendAck | None, error: BaseException | None) -> None:
        """Part ``index`` was acknowledged (``ack``) or failed (``error``); the last
        part's outcome completes the future. Called by one thread at a time."""
        channel, count = self._channels[index], self._counts[index]
        if error is None and ack is not None and ack.error is None and ack.accepted == count:
            runs = ack.runs or ((ack.first, ack.accepted, ack.stamp),)
            self._parts[index] = PublishStatuses.of_channel(self._topic_id, channel, runs)
        else:  # never a silent success for a value the channel did not append
            self._parts[index] = (
                error
                or (ack.error if ack is not None else None)
                or TopicFullError(f"channel {channel}: {count} values not appended")
            )
        self._left -= 1
        if self._left:
            return
        failures = [part for part in self._parts if isinstance(part, BaseException)]
        if failures:
            self.set_exception(failures[0])
        elif self._layout is None:
            self.set_result(self._parts[0])
        else:
            self.set_result(combine_statuses(self._layout, *self._parts))  # type: ignore[arg-type]
