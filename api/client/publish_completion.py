"""Completing a publisher's calls: the thread that turns channels' replies into
completed futures.

A publisher submits each append call itself and hands its outcome here
(:meth:`Completer.post`): the reply's future once the channel answered, or the
error that kept the call from being submitted. One thread per publisher (the
:class:`Completer`'s, started with its first call) completes the futures of the
call's pieces from the channel's acks, has the publisher count the call completed
(``flush()`` waits on that count), and then has it send what may go now: what
waited for the call to return or, with ``linger``, what became old enough.

The publisher's interface to this part is the three callables it is built with
(``count``, ``send``, ``close``) and ``start``, ``post``, ``wake``, ``stop`` and
``failure``; this module holds none of the publisher's state, nor its lock.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raytopic.client.publish_futures import PublishBatch
from raytopic.core.destroyed import topic_calls
from raytopic.core.errors import PublisherClosedError
from raytopic.core.protocol import unpack_small
from raytopic.core.waits import bounded_wait

if TYPE_CHECKING:
    from concurrent.futures import Future

    from raytopic.client.publish_accumulator import ChannelQueue, Piece
    from raytopic.core.protocol import AppendAck

# The publisher's records, under the logger name its users already filter on.
logger = logging.getLogger("raytopic.client.publisher")

__all__ = ["Call", "Completer", "closed_error"]


@dataclass(slots=True)
class Call:
    """One append call on its way."""

    pipe: ChannelQueue
    number: int
    pieces: list[Piece] | None  # None: a publish_batch part whose caller holds the ref
    count: int


class Completer:
    """A publisher's background thread: completes its calls as their outcomes are
    posted, and after each (and, with ``linger``, at least every ``linger`` seconds)
    has the publisher send what may go.

    An error completing one call is logged and the thread goes on. A
    BaseException (``SystemExit`` from a future's done-callback) ends it, as
    Python means it to: ``close`` then closes the publisher and returns the pieces
    it had not sent, which fail with PublisherClosedError; calls still in flight
    are completed by whoever posts their outcome, so nothing waits forever.

    Args:
        name: The publisher's short id, for the thread's name and the logs.
        linger: The publisher's ``linger`` (0: none).
        topic_id: The id of the topic the calls append to (a dead channel's call
            fails with TopicNotFoundError, naming ``topic_name``).
        topic_name: Its name.
        count: Counts a completed call out of the publisher's calls in flight.
        send: Sends what may go now.
        close: Closes the publisher for the error that ended the thread; returns
            the pieces it had not sent.
    """

    def __init__(
        self,
        name: str,
        linger: float,
        *,
        topic_id: str,
        topic_name: str,
        count: Callable[[Call], None],
        send: Callable[[], None],
        close: Callable[[BaseException], list[Piece]],
    ) -> None:
        self._name = name
        self._topic = (topic_id, topic_name)
        self._linger = linger
        self._count = count
        self._send = send
        self._close = close
        self._events: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()
        self.failure: BaseException | None = None
        """What ended the thread (None: it runs, or never started, or was stopped)."""

    def start(self) -> None:
        """Start the thread, unless it was started."""
        if self._thread is not None:
            return
        with self._thread_lock:
            if self._thread is None:
                thread = threading.Thread(
                    target=self._run, name=f"raytopic-publisher-{self._name}", daemon=True
                )
                thread.start()
                self._thread = thread

    def post(self, call: Call, done: Future[Any] | None, error: BaseException | None) -> None:
        """Hand a call's outcome to the thread (``done``: its reply; ``error``: why it
        was not submitted); complete it here once the thread is gone."""
        self._events.put(("done", call, done, error))
        if self.failure is not None:  # set before the thread drains: no event is left
            self._drain()

    def wake(self) -> None:
        """Have the thread send what may go, even with no call returning."""
        self._events.put(("tick",))

    def stop(self) -> None:
        """End the thread once it completed what was posted before; return when it ended."""
        thread = self._thread
        if thread is not None:
            self._events.put(("stop",))
            thread.join()

    def _run(self) -> None:
        """The thread: complete returned calls, send what waited, honour linger."""
        try:
            while True:
                try:
                    # In slices: linger is checked against each batch's age anyway.
                    event = self._events.get(timeout=bounded_wait(self._linger or None))
                except queue.Empty:
                    event = ("tick",)
                if event[0] == "stop":
                    return
                try:
                    self._complete(event)
                    self._send()
                except Exception:
                    logger.exception("publisher %s: completing a call failed; going on", self._name)
        except BaseException as error:
            self._fail(error)

    def _complete(self, event: tuple[Any, ...]) -> None:
        """Complete the futures of a returned call (a "done" event), and count it completed."""
        if event[0] != "done":
            return
        _, call, done, error = event
        try:
            _complete_call(call, done, error, *self._topic)
        finally:  # counted even if a done-callback raised: flush() must not wait for it
            self._count(call)

    def _drain(self) -> None:
        """With the thread gone: complete the calls it would have completed."""
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            try:
                self._complete(event)
            except BaseException:  # a done-callback's SystemExit: the other calls still complete
                logger.exception("publisher %s: completing a call failed", self._name)

    def _fail(self, cause: BaseException) -> None:
        """The thread ends on ``cause``: the publisher closes and what waits fails.

        Values not sent yet fail with PublisherClosedError (nothing would send
        them); calls in flight complete as their replies come (:meth:`post`), so
        ``flush()`` and ``close()`` return; ``publish()`` raises.
        """
        logger.error(
            "publisher %s: its background thread ended on %r; the publisher is closed "
            "and the values it had not sent fail",
            self._name,
            cause,
            exc_info=cause,
        )
        self.failure = cause
        unsent = self._close(cause)
        error = closed_error(cause)
        for piece in unsent:
            try:
                _complete_piece(piece, None, error)
            except BaseException:  # a done-callback again: every piece still completes
                logger.exception("publisher %s: a done-callback raised", self._name)
        self._drain()


def closed_error(failure: BaseException | None) -> PublisherClosedError:
    """Why ``publish`` is refused: closed by ``close()`` (``failure`` None), or by the
    error that ended the thread."""
    if failure is None:
        return PublisherClosedError("the publisher is closed")
    error = PublisherClosedError(
        f"the publisher closed itself: its background thread ended on {failure!r}"
    )
    error.__cause__ = failure
    return error


def _complete_call(
    call: Call, done: Future[Any] | None, error: BaseException | None, topic_id: str, name: str
) -> None:
    """Complete a call's pieces from its outcome (a dead channel's call fails them
    with TopicNotFoundError: the topic was destroyed).

    Raises:
        BaseException: what a done-callback raised that is not an Exception
            (``SystemExit``), once every piece has completed.
    """
    if call.pieces is None:  # a publish_batch part: its caller holds the ObjectRef
        return
    acks: tuple[AppendAck, ...] | None = None
    if error is None and done is not None:
        try:
            with topic_calls(topic_id, name):
                acks = unpack_small(done.result())  # packed: see PACKED_REPLIES
        except Exception as failure:
            error = failure
    interrupted: BaseException | None = None
    for index, piece in enumerate(call.pieces):
        try:
            _complete_piece(piece, None if acks is None else acks[index], error)
        except BaseException as raised:  # SystemExit: the other pieces still complete
            interrupted = interrupted or raised
    if interrupted is not None:
        raise interrupted


def _complete_piece(piece: Piece, ack: AppendAck | None, error: BaseException | None) -> None:
    """Complete one piece: a batch of ``publish()``ed values' futures, or a part of a
    ``publish_batch``'s future."""
    if isinstance(piece, PublishBatch):
        piece.complete(ack, error)
    else:
        piece.batch.part_done(piece.index, ack, error)
