"""Table views: the latest value of every key of a topic, kept live (``Topic.table()``).

A view is made in two steps, both in the process that asks for it:

1. **Bootstrap, in bulk** (in ``table()``): every channel's head and tail are
   asked at once, then every channel is read from its head to that tail by bulk
   range reads (``raytopic.client.bulk.ChannelReader``: up to ``READ_CALL_ROWS``
   elements per call, every channel at once, one call ahead), never element by
   element, and applied. On a compacted topic that is each key's survivor and
   little else; on any other topic it is every version (slower, still in bulk).
2. **Live** (on the view's thread, ``raytopic-table-<topic>``, started once the
   bootstrap is whole, stopped by ``close()``): an anonymous reader opens at the
   channels' tails, what was appended between the bootstrap's tails and its
   start is read in bulk, then the reader is followed, each element applied and
   told to the listeners. Opening a reader takes a few calls (through the
   coordinator): it is off the path of ``table()``, which returns as soon as the
   view is whole.

The content and what was applied per channel live in :mod:`raytopic.client.table_state`
(no Ray); this module is the handle and its thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import ray

from raytopic.client.bulk import ChannelRange, ChannelReader, ring_figures
from raytopic.client.table_state import AppliedMarks, Change, TableState
from raytopic.core.config import check_timeout
from raytopic.core.destroyed import check_topic, destroyed_error, is_destroyed, topic_calls
from raytopic.core.errors import (
    ClosedError,
    DataLossError,
    InvalidArgumentError,
    InvalidTypeError,
    StaleSequenceError,
    SubscriberClosedError,
)
from raytopic.core.payloads import decode_checked
from raytopic.core.steps import Get, Steps, run_blocking

if TYPE_CHECKING:
    from raytopic.client.subscriber import Subscriber
    from raytopic.client.topic import Topic
    from raytopic.core.element_batch import ElementBatch
    from raytopic.core.protocol import Chunk, RingFigures
    from raytopic.core.records import Position

logger = logging.getLogger(__name__)

__all__ = ["TableView", "reading_whole"]

LIVE_BATCH = 1000
"""Elements the live thread takes from its reader at most per batch."""

Listener = Callable[[Any, Any], Any]


class TableView:
    """The latest value of every key of a topic, kept live: a read-only mapping.

    Made by ``Topic.table()``. It is whole when it is returned: it holds the latest
    value of every key up to the tails the channels had when it was asked for,
    read in bulk. From then on a thread of the view applies what is published.

    **Ordering**: a key's changes are applied, and reach listeners, in the order of
    its channel (the order they were published in, per key).
    **Delivery**: every element after the bootstrap is applied once, across
    channel restarts too (the anonymous reader resumes; an element read again is
    recognised by its position). A delete (a value of None, ``Publisher.delete``)
    removes its key: deleted keys are never entries, and listeners hear
    ``(key, None)``. Elements without a key are not part of a table.
    **Freshness**: reads answer from this process's copy at once; ``refresh()``
    waits until everything published before it is applied.

    A view pickles: the copy unpickled in a task or an actor bootstraps its own
    view there (whole when unpickled; listeners stay with the process that added
    them). A view nobody refers to any more closes itself.

    Example:
        >>> with prices.table() as view:
        ...     view.get("a1")
        ...     view.listen(lambda key, value: print(key, value))
    """

    def __init__(self, topic: Topic, *, timeout: float | None = 60.0) -> None:
        """Open a view of ``topic`` (``Topic.table()`` is the way to make one).

        Raises:
            TimeoutError: the bootstrap was not whole within ``timeout``.
            TopicNotFoundError: the topic was destroyed.
            DataLossError: a channel's stored records in the bootstrap's range are
                damaged (named).
            InvalidArgumentError, InvalidTypeError: a bad ``timeout``.
        """
        timeout = check_timeout(timeout, "timeout")
        check_topic(topic.topic_id, topic.name, *topic._channel_actors)
        self._topic = topic
        self._timeout = timeout
        self._content = run_blocking(reading_whole(topic, timeout))
        self._follower = _Follower(topic, self._content)
        self._follower.start()
        # close() runs this; so does the collector, for a view nobody closed.
        self._close = weakref.finalize(self, self._follower.stop)
        self._close.atexit = False  # at exit Ray may be gone: nothing to close then

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopened_view, (self._topic, self._timeout))

    # -- reading -------------------------------------------------------------------------

    def get(self, key: Any, default: Any = None) -> Any:
        """The latest value of ``key``.

        Args:
            key: A key as published.
            default: What to return when the key has no value (never published, or
                deleted).

        Returns:
            Its value, or ``default``.

        Raises:
            ClosedError: the view is closed.
            TopicNotFoundError: the topic was destroyed.
        """
        with self._reading() as state:
            return state.get(key, default)

    def __getitem__(self, key: Any) -> Any:
        with self._reading() as state:
            value = state.get(key, _ABSENT)
        if value is _ABSENT:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        with self._reading() as state:
            return key in state

    def __len__(self) -> int:
        with self._reading() as state:
            return len(state)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())

    def keys(self) -> list[Any]:
        """Every key with a value, now (a copy).

        Raises:
            ClosedError, TopicNotFoundError: as ``get``.
        """
        with self._reading() as state:
            return state.keys()

    def values(self) -> list[Any]:
        """Every key's value, now (a copy).

        Raises:
            ClosedError, TopicNotFoundError: as ``get``.
        """
        with self._reading() as state:
            return state.values()

    def items(self) -> list[tuple[Any, Any]]:
        """Every (key, value), now (a copy); never a deleted key.

        Raises:
            ClosedError, TopicNotFoundError: as ``get``.
        """
        with self._reading() as state:
            return state.items()

    # -- freshness -----------------------------------------------------------------------

    def refresh(self, timeout: float | None = None) -> None:
        """Return once every element up to the channels' tails at this call is applied
        (and its listeners were told).

        Args:
            timeout: Seconds to wait at most (None: the view's own ``timeout``).

        Raises:
            TimeoutError: not applied within ``timeout`` (the channels behind are named).
            InvalidArgumentError: called by a listener (it would wait for itself), or a
                bad ``timeout``.
            InvalidTypeError: a ``timeout`` that is not a number.
            ClosedError, TopicNotFoundError: as ``get``.
        """
        timeout = self._timeout if timeout is None else check_timeout(timeout, "timeout")
        self._check()
        if self._follower.is_current_thread():
            raise InvalidArgumentError("refresh() in a listener would wait for itself")
        topic = self._topic
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            with topic_calls(topic.topic_id, topic.name):
                figures = ray.get(
                    [ring_figures(actor) for actor in topic._channel_actors], timeout=timeout
                )
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                f"table view of {topic.name!r}: the channels' tails not read within {timeout} s"
            ) from None
        tails = {channel: figure.tail for channel, figure in enumerate(figures)}
        content = self._content
        with content.changed:
            while not content.marks.covers(tails):
                self._check_locked()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    behind = content.marks.behind(tails)
                    raise TimeoutError(
                        f"table view of {topic.name!r}: not refreshed within {timeout} s "
                        f"(channel: (applied, tail) {behind})"
                    )
                content.changed.wait(remaining)
            self._check_locked()

    # -- listening -----------------------------------------------------------------------

    def listen(self, fn: Listener) -> None:
        """Call ``fn(key, value)`` for each later change, on the view's thread.

        A change is every value applied (the same value again too) and every delete
        of a key the view held (``value`` None). One key's changes come in order. A
        listener that raises is logged; the view and the other listeners go on.
        A slow listener delays the view (and ``refresh()``).

        Args:
            fn: Called with (key, value).

        Raises:
            InvalidTypeError: ``fn`` is not callable.
            ClosedError, TopicNotFoundError: as ``get``.
        """
        if not callable(fn):
            raise InvalidTypeError(f"listen needs a callable, got {type(fn).__name__}")
        with self._content.changed:
            self._check_locked()
            self._content.listeners.append(fn)

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the view: its thread ends, its reader closes. Idempotent; every later
        call but ``close()`` raises ClosedError."""
        self._close()

    @property
    def is_active(self) -> bool:
        """Whether the view is open (not closed, and its thread did not fail)."""
        content = self._content
        return (
            not content.closed
            and content.failure is None
            and not is_destroyed(self._topic.topic_id)
        )

    def __enter__(self) -> TableView:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "active" if self.is_active else "closed"
        return f"TableView({self._topic.name!r}, {len(self._content.state)} keys, {state})"

    # -- helpers -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _reading(self) -> Iterator[TableState]:
        """The content, locked, once checked."""
        with self._content.changed:
            self._check_locked()
            yield self._content.state

    def _check(self) -> None:
        with self._content.changed:
            self._check_locked()

    def _check_locked(self) -> None:
        """With the content's lock held: raise if the view cannot answer any more."""
        content = self._content
        if content.closed:
            raise ClosedError("the table view is closed")
        if is_destroyed(self._topic.topic_id):
            raise destroyed_error(self._topic.name)
        if content.failure is not None:
            raise content.failure.with_traceback(None)  # (each raise adds to it otherwise)


_ABSENT: Any = object()


def _reopened_view(topic: Topic, timeout: float | None) -> TableView:
    """The view a pickled one stands for: a new one of this process, bootstrapped here."""
    return TableView(topic, timeout=timeout)


class _Content:
    """What a view holds, shared by its handle and its thread; guarded by ``changed``."""

    def __init__(self, state: TableState, marks: AppliedMarks) -> None:
        self.state = state
        self.marks = marks
        self.changed = threading.Condition()
        """Notified whenever marks rise, the view closes or its thread fails."""
        self.listeners: list[Listener] = []
        self.failure: BaseException | None = None
        self.closed = False


# -- the bootstrap -------------------------------------------------------------------------


def reading_whole(topic: Topic, timeout: float | None) -> Steps[_Content]:
    """Every key's latest value up to the channels' tails now, read in bulk within
    ``timeout`` seconds (steps: a view's bootstrap runs them blocking; an async
    actor's control log, ``raytopic.client.control_log``, awaits them).

    Raises:
        TimeoutError: not whole within ``timeout``.
        DataLossError: a damaged stored record lies in the ranges.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        with topic_calls(topic.topic_id, topic.name):
            asked = [ring_figures(actor) for actor in topic._channel_actors]
            figures: list[RingFigures] = []
            for figure in asked:  # all asked at once; read in turn
                figures.append((yield Get(figure, _remaining(deadline))))
        state = TableState()
        # Every channel's first call goes out before any answer is waited for.
        reading = {
            channel: ChannelReader(topic, [ChannelRange(channel, figure.head, figure.tail + 1)])
            for channel, figure in enumerate(figures)
            if figure.tail >= figure.head
        }
        while reading:
            for channel, reader in list(reading.items()):
                chunks = yield from reader.fetching(_remaining(deadline))
                if chunks is None:
                    del reading[channel]
                    continue
                for chunk in chunks:
                    keys, values, _ = _decoded(chunk, topic.name, channel)
                    state.apply_all(keys, values)
    except TimeoutError:
        raise TimeoutError(f"table view of {topic.name!r}: not whole within {timeout} s") from None
    tails = {channel: figure.tail for channel, figure in enumerate(figures)}
    return _Content(state, AppliedMarks(tails))


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _decoded(chunk: Chunk, topic: str, channel: int) -> tuple[list[Any], list[Any], list[int]]:
    """A read chunk's keyed elements as (keys, values, positions); a value that cannot
    be decoded costs only itself (logged); no keys at all: nothing."""
    payload = chunk.payload
    keys = payload.keys
    if keys is None:
        return [], [], []  # no element here has a key: none is a table's
    values, failures = decode_checked(payload)
    positions = chunk.sequence_list()
    if failures:
        first = min(failures)
        logger.warning(
            "table view of %r: channel %d: %d value(s) from position %d cannot be "
            "decoded here and are left out: %s",
            topic,
            channel,
            len(failures),
            positions[first],
            failures[first],
        )
        kept = [index for index in range(len(values)) if index not in failures]
        keys = [keys[index] for index in kept]
        values = [values[index] for index in kept]
        positions = [positions[index] for index in kept]
    return keys, values, positions


# -- the live part ---------------------------------------------------------------------------


class _Follower:
    """The live part of a view: a thread that opens an anonymous reader, reads in bulk
    what was appended between the bootstrap and the reader's start, then applies
    what the reader receives.

    Started once by the view, stopped by ``stop()`` (the view's ``close()``, or its
    collection), which closes the reader: its waiting receives end, and so does the
    thread.
    """

    def __init__(self, topic: Topic, content: _Content) -> None:
        self._topic = topic
        self._content = content
        self._subscriber: Subscriber | None = None  # set by the thread, under the lock
        self._thread = threading.Thread(target=self._run, name=f"raytopic-table-{topic.name}")
        self._thread.daemon = True  # a process may end with views open

    def start(self) -> None:
        """Start the thread (once)."""
        self._thread.start()

    def is_current_thread(self) -> bool:
        """Whether the caller runs on this thread (a listener)."""
        return threading.current_thread() is self._thread

    def stop(self) -> None:
        """Close the reader and wait for the thread to end (idempotent)."""
        content = self._content
        with content.changed:
            content.closed = True
            content.changed.notify_all()
            subscriber = self._subscriber  # None: the thread closes it once it has one
        if subscriber is not None:
            subscriber.close()
        if not self.is_current_thread():
            self._thread.join()

    def _run(self) -> None:
        try:
            subscriber = self._topic.subscriber(on_poison="skip")  # at every channel's tail
            with self._content.changed:
                closed = self._content.closed
                self._subscriber = subscriber
            if closed:
                subscriber.close()
                return
            self._catch_up(subscriber.heads())
            self._follow(subscriber.iter_batches(LIVE_BATCH))
        except SubscriberClosedError:
            return  # closed
        except BaseException as error:  # the topic was destroyed, ...: every call says so
            self._fail(error)

    def _catch_up(self, starts: dict[int, Position]) -> None:
        """Apply, in bulk, what was appended between the bootstrap's tails and the
        reader's start (its changes are told: they came after the view was made)."""
        topic = self._topic
        marks = self._content.marks
        with self._content.changed:
            ranges = {
                channel: ChannelRange(channel, marks.mark(channel) + 1, start.sequence)
                for channel, start in starts.items()
                if start.sequence > marks.mark(channel) + 1
            }
        for channel, piece in ranges.items():
            reader = ChannelReader(topic, [piece])
            try:
                while (chunks := reader.next_chunks()) is not None:
                    for chunk in chunks:
                        keys, values, positions = _decoded(chunk, topic.name, channel)
                        self._apply(
                            (channel, position, key, value)
                            for key, value, position in zip(keys, values, positions, strict=True)
                        )
            except DataLossError as error:  # found since: lost, as for the reader
                logger.warning("table view of %r: %s", topic.name, error)
            with self._content.changed:
                self._content.marks.advance(channel, piece.stop - 1)
                self._content.changed.notify_all()

    def _follow(self, batches: Iterator[ElementBatch]) -> None:
        """Apply what the reader receives, until it is closed."""
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return  # closed
            except StaleSequenceError as error:
                # A channel restarted without a store, a stored record is damaged, or
                # the reader's next element was overwritten or expired: what is gone
                # cannot be applied; the reader goes on after it.
                logger.warning("table view of %r: %s", self._topic.name, error)
                continue
            read_again = self._apply((e.channel, e.sequence, e.key, e.value) for e in batch)
            if read_again:
                self._skip_applied(read_again)

    def _apply(self, elements: Iterable[tuple[int, int, Any, Any]]) -> set[int]:
        """Apply (channel, position, key, value) elements, in order per channel, and
        tell the listeners; return the channels where every element was applied
        already (read again after the channel restarted)."""
        content = self._content
        changes: list[Change] = []
        applied: dict[int, int] = {}
        read_again: set[int] = set()
        with content.changed:
            listeners = tuple(content.listeners)
            for channel, position, key, value in elements:
                if not content.marks.is_new(channel, position):
                    read_again.add(channel)  # its channel restarted: applied already
                    continue
                change = content.state.apply(key, value)
                applied[channel] = position
                if change is not None and listeners:
                    changes.append(change)
        for change in changes:
            for listener in listeners:
                _tell(listener, change, self._topic.name)
        with content.changed:
            for channel, position in applied.items():
                content.marks.advance(channel, position)
            content.changed.notify_all()
        return read_again - applied.keys()

    def _skip_applied(self, channels: set[int]) -> None:
        """Move the reader past what the view applied at ``channels``: a channel that
        restarted gives an anonymous reader back the cursor it was opened with, so
        it would read everything since again (skipped, one by one)."""
        subscriber, topic = self._subscriber, self._topic
        assert subscriber is not None  # following: the reader is open
        for channel in sorted(channels):
            with self._content.changed:
                mark = self._content.marks.mark(channel)
            try:
                subscriber.seek(channel, topic.position(channel, mark))
            except SubscriberClosedError:
                return  # closing
            except Exception as error:  # costs time only: what it reads again is skipped
                logger.warning("table view of %r: channel %d: %s", topic.name, channel, error)

    def _fail(self, error: BaseException) -> None:
        logger.debug("table view of %r stopped: %r", self._topic.name, error)
        content = self._content
        with content.changed:
            content.failure = error
            content.changed.notify_all()


def _tell(listener: Listener, change: Change, topic: str) -> None:
    """Call one listener; what it raises (even SystemExit, which would end the view's
    thread without a word) is logged and costs only itself."""
    try:
        listener(change.key, change.value)
    except BaseException:
        logger.exception(
            "table view of %r: listener %r failed on key %r", topic, listener, change.key
        )
