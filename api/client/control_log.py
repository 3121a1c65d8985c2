"""Control state on raytopic's own log (docs/architecture.md, Control state): what
an integration must not forget (the newest incarnation of a transactional id, a
task's status and result) lives on a compacted topic keyed by what it is about, not
in an actor's memory.

The actor that decides (the transaction registry, a queue's task board) keeps a
copy in memory for its answers, reads the whole log back when it (re)starts, and
writes each change as the key's new record, answering only once the channel
acknowledged it: what an answer promised survives the restart of that actor and
of the log's channels (a stored topic: the channel reads its store back).

Records are plain data (dicts, lists, str, int, float, None): a durable format,
never a pickle of an internal class.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import ray

from raytopic.client.routing import channel_for_key
from raytopic.client.table import reading_whole
from raytopic.client.topic import Topic, opening
from raytopic.core.compaction import Compaction
from raytopic.core.config import TopicConfig
from raytopic.core.destroyed import topic_calls
from raytopic.core.payloads import PickledValues, dumps_value
from raytopic.core.protocol import (
    AppendUnless,
    ReadLatest,
    pack_request,
    pack_small,
    unpack_small,
)
from raytopic.core.records import PublishStatus
from raytopic.core.steps import Get, Steps, run_awaiting, run_blocking

__all__ = [
    "CONTROL_COMPACTION",
    "WRITE_TIMEOUT",
    "ControlLog",
    "ControlLogLoader",
    "LatestRead",
    "WriteUnless",
    "open_control_log",
    "opening_control_log",
    "session_store",
]

CONTROL_COMPACTION = Compaction(max_lag_s=60.0, tombstone_retention_s=3600.0)
"""How a control log compacts: a key's older records go within a minute; a deleted
key's tombstone stays an hour (a reader catching up still sees the delete)."""


WRITE_TIMEOUT = 60.0
"""Seconds a conditional write waits for room in the log's channel."""

LOAD_TIMEOUT = 60.0
"""Seconds a control log's whole read (:meth:`ControlLog.load`) takes at most."""


def session_store() -> str:
    """The directory a control log stores in when it is given none: one of this Ray
    session's, on the node of the process that makes the log (a channel restarted
    there reads it back; the next cluster starts afresh)."""
    return control_store_of(ray.get_runtime_context().get_session_name())


def control_store_of(session: str) -> str:
    """The directory of the control logs of the Ray session named ``session`` (what
    removes a finished session's files names it so)."""
    return os.path.join(tempfile.gettempdir(), "raytopic-control", session)


def opening_control_log(
    name: str, namespace: str, *, store: Any = None, channels: int = 1
) -> Steps[ControlLog]:
    """Create (or open) a control log's compacted topic, as steps (see
    :class:`ControlLog`; :func:`open_control_log` runs them blocking).

    Args:
        name: The topic's name.
        namespace: Its Ray namespace.
        store: Its store (as ``create_topic``'s); None: :func:`session_store`.
        channels: Its channels (made with the topic; a reopened one keeps its own).
    """
    config = TopicConfig.create(
        name,
        channels=channels,
        namespace=namespace,
        store=session_store() if store is None else store,
        # An fdatasync per write buys survival of an OS crash: the session's
        # directory is lost with its node anyway, so there a write counts once
        # written (it survives the kill of any process); a store of the user's
        # (shared disk: a node's loss) syncs each write.
        sync="write" if store is None else "always",
        compaction=CONTROL_COMPACTION,
    )
    return ControlLog((yield from opening(config, exist_ok=True)))


def open_control_log(
    name: str, namespace: str, *, store: Any = None, channels: int = 1
) -> ControlLog:
    """:func:`opening_control_log`, blocking (a driver's, a replica's)."""
    return run_blocking(opening_control_log(name, namespace, store=store, channels=channels))


class ControlLogLoader:
    """An async actor's control log, made and read back whole on the actor's first call
    that needs it: not in ``__init__``, where an error during a restart would end the
    actor for good; an open or a read that failed is tried again by the next call.

    Args:
        name, namespace, store: As :func:`opening_control_log`'s.
        restore: Given every key's latest record once, before :meth:`loaded` hands the
            log out (only :meth:`loaded` needs it: an actor that follows the log's
            changes itself uses :meth:`opened`).
    """

    def __init__(
        self,
        name: str,
        namespace: str,
        store: Any,
        restore: Callable[[dict[Any, Any]], object] = lambda _: None,
    ) -> None:
        self._name = name
        self._namespace = namespace
        self._store = store
        self._restore = restore
        self._log: ControlLog | None = None  # read back and restored
        self._opened: ControlLog | None = None
        self._loading = asyncio.Lock()
        self._opening = asyncio.Lock()

    async def loaded(self) -> ControlLog:
        """The log, once its records were read back and restored (awaited, never
        blocking the actor's event loop)."""
        if self._log is not None:
            return self._log
        async with self._loading:
            if self._log is None:
                log = await self.opened()
                self._restore(await run_awaiting(log.loading()))
                self._log = log
        return self._log

    async def opened(self) -> ControlLog:
        """The log, made or opened, not read back (an actor that follows its changes
        reads it itself: ``ControlLog.changing``)."""
        async with self._opening:  # one open: a second would leave a publisher behind
            if self._opened is None:
                self._opened = await run_awaiting(
                    opening_control_log(self._name, self._namespace, store=self._store)
                )
        return self._opened


@dataclass(slots=True)
class LatestRead:
    """What :meth:`ControlLog.read` answers."""

    latest: dict[Any, Any]
    """The latest record of each key asked that has one."""
    marks: dict[int, tuple[str, int]]
    """Per channel, the mark to read the next changes since."""
    reset: bool
    """Whether what the reader learnt of changes before is to be dropped (a channel
    restarted, or the reader fell too far behind)."""
    changed: list[tuple[Any, Any]]
    """(key, its latest record or None: deleted) of the keys changed since the marks."""


class WriteUnless:
    """A conditional write sent (:meth:`ControlLog.send_unless`), its answer to read."""

    def __init__(self, topic: Any, calls: list[tuple[tuple[Any, ...], ray.ObjectRef]]) -> None:
        self._topic = topic
        self._calls = calls

    def refused(self, timeout: float | None = None) -> dict[Any, Any]:
        """The keys refused, with the latest record that refused each (see
        :meth:`ControlLog.write_unless`), once what was written is held.

        Raises:
            TopicError: the write failed (a typed raytopic error).
            ray.exceptions.GetTimeoutError: no answer within ``timeout``.
        """
        refusing = {}
        with topic_calls(self._topic.topic_id, self._topic.name):
            for keys, call in self._calls:
                replies = unpack_small(ray.get(call, timeout=timeout))
                for key, latest in zip(keys, replies, strict=True):
                    if latest is not None:
                        refusing[key] = latest
        return refusing


class ControlLog:
    """One compacted topic of control state: ``load()`` at start, ``write`` each change.

    Made by :func:`open_control_log` (blocking) or :func:`opening_control_log` (steps
    an async actor awaits: a ``ray.get`` there stops its event loop, and one in a
    thread of its process still makes Ray warn).

    **Durability**: a write counts once its future completes: the channel holds it,
    written to the store (it survives the kill of any process), and with a store
    of the caller's also synced (an OS crash, the loss of a node). A key's records
    are applied in the order they were written (one publisher, keyed).

    Args:
        topic: The compacted topic.
    """

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self._publisher = topic.publisher()

    def load(self, timeout: float | None = LOAD_TIMEOUT) -> dict[Any, Any]:
        """Every key's latest record (deleted keys left out), read in bulk.

        Raises:
            TimeoutError: not read whole within ``timeout`` seconds.
            TopicError: the read failed (a typed raytopic error).
        """
        return run_blocking(self.loading(timeout))

    def loading(self, timeout: float | None = LOAD_TIMEOUT) -> Steps[dict[Any, Any]]:
        """:meth:`load` as steps (an async actor awaits them)."""
        content = yield from reading_whole(self.topic, timeout)
        return dict(content.state.items())

    def write(self, key: Any, record: Any) -> Future[PublishStatus]:
        """Append ``record`` as ``key``'s latest; the future completes once it is held."""
        return self._publisher.publish(record, key=key)

    def write_unless(
        self,
        records: dict[Any, Any],
        field: str,
        refused: frozenset[Any],
        timeout: float | None = None,
    ) -> dict[Any, Any]:
        """Write each key's record unless the key's latest record (a dict) has
        ``field`` in ``refused``: decided and written at the key's channel in one
        step (``AppendUnless``). Returns the keys refused, with the latest record that
        refused each; returns once what was written is held.

        Raises:
            TopicError: the write failed (a typed raytopic error).
            ray.exceptions.GetTimeoutError: no answer within ``timeout``.
        """
        return self.send_unless(records, field, refused).refused(timeout)

    def send_unless(
        self, records: dict[Any, Any], field: str, refused: frozenset[Any]
    ) -> WriteUnless:
        """Send :meth:`write_unless`'s calls, not waiting for them: the caller's later
        calls to these channels come after them; its answer is read with
        ``refused()``."""
        request = pack_request(AppendUnless(field, tuple(refused), WRITE_TIMEOUT))
        calls = []
        for keys in self._by_channel(records).values():
            payload = PickledValues.from_pickles(
                [dumps_value(records[k]) for k in keys], list(keys)
            )
            calls.append(
                (keys, self._channel_of(keys[0]).request.remote(request, pack_small(payload)))
            )
        return WriteUnless(self.topic, calls)

    def read(
        self,
        keys: list[Any],
        timeout: float | None = None,
        marks: dict[int, tuple[str, int]] | None = None,
        most: int = 0,
        until: tuple[str, frozenset[Any], float] | None = None,
    ) -> LatestRead:
        """The latest record of each key that has one (``ReadLatest``), as held, and
        (``most``) up to ``most`` keys changed at each asked channel since ``marks``
        (the last read's). ``until`` (field, values, seconds): while each asked key's
        record has ``field`` in those values, a channel answers once one of them
        changes, or after those seconds.

        Raises:
            TopicError: the read failed (a typed raytopic error).
            ray.exceptions.GetTimeoutError: no answer within ``timeout``.
        """
        marks = marks or {}
        field, waiting, wait = until or ("", (), 0.0)
        calls = []
        for channel, group in self._by_channel(dict.fromkeys(keys)).items():
            asked = ReadLatest(group, marks.get(channel), most, field, tuple(waiting), wait)
            request = pack_request(asked)
            calls.append(
                (channel, group, self.topic._channel_actors[channel].request.remote(request))
            )
        return run_blocking(self._answers(calls, marks, timeout))

    def changing(self, marks: dict[int, tuple[str, int]], most: int) -> Steps[LatestRead]:
        """Up to ``most`` keys changed at every channel since ``marks`` (see :meth:`read`),
        as steps (an async actor following the log awaits them).

        Raises:
            TopicError: the read failed (a typed raytopic error).
            TimeoutError: no answer within ``LOAD_TIMEOUT``.
        """
        calls = [
            (
                channel,
                (),
                actor.request.remote(pack_request(ReadLatest((), marks.get(channel), most))),
            )
            for channel, actor in enumerate(self.topic._channel_actors)
        ]
        return (yield from self._answers(calls, marks, LOAD_TIMEOUT))

    def _answers(
        self,
        calls: list[tuple[int, tuple[Any, ...], ray.ObjectRef]],
        marks: dict[int, tuple[str, int]],
        timeout: float | None,
    ) -> Steps[LatestRead]:
        """The ``ReadLatest`` replies of ``calls`` (channel, keys asked, call), as one read."""
        read = LatestRead({}, dict(marks), False, [])
        with topic_calls(self.topic.topic_id, self.topic.name):
            for channel, group, call in calls:
                values, mark, reset, changed = unpack_small((yield Get(call, timeout)))
                read.latest.update(
                    (key, record) for key, record in zip(group, values, strict=True) if record
                )
                read.marks[channel] = mark
                read.reset = read.reset or reset
                read.changed.extend(changed)
        return read

    def _by_channel(self, keyed: dict[Any, Any]) -> dict[int, tuple[Any, ...]]:
        count = self.topic.channel_count
        channels: dict[int, list[Any]] = {}
        for key in keyed:
            channels.setdefault(channel_for_key(key, count), []).append(key)
        return {channel: tuple(keys) for channel, keys in channels.items()}

    def _channel_of(self, key: Any) -> Any:  # (a Ringbuffer reaches its channel so too)
        return self.topic._channel_actors[channel_for_key(key, self.topic.channel_count)]

    def delete(self, key: Any) -> Future[PublishStatus]:
        """Delete ``key`` (a tombstone); the future completes once it is held."""
        return self._publisher.delete(key)

    async def written(self, future: Future[PublishStatus]) -> None:
        """Wait for a write from an event loop (an async actor's)."""
        await asyncio.wrap_future(future)

    def close(self) -> None:
        """Stop writing (what was written stays)."""
        self._publisher.close()
