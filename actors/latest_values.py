"""The latest value of each key of a compacted channel, for a conditional append and
a read by key (``AppendUnless``, ``ReadLatest``). No Ray.

A task queue's task log (``raytopic.serve``) keeps each task's status under its
id; a replica starts a task only if its status is not finished, a producer cancels
it only if it has not started. The check and the write are one step here, at the
channel that holds the log, so no actor between them has to decide, and no
restart of one can let two writers pass the same check.

Each key's latest element is found in the log once, on the first request that
needs it (the whole log: the store, then the ring, then the appends waiting for a
sync), and from then on in every append, whichever request made it (a publisher's
delete too); it is kept as the log holds it (a view of the appended payload, which
the ring keeps too) and decoded when a request needs its value: a task's result
is not held a second time, decoded. A purge forgets them; the next request reads
the log again.

A read may wait for a change (``ReadLatest.wait``): a poller of a pending or started
task is answered when its outcome is appended, not at its next poll. It waits for an
append of one of its keys whose value leaves ``waiting`` (a task's start does not wake
its poller; its outcome does), and the append that woke it answers after it: the
poller waits for its answer, the replica that appended does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from collections.abc import Mapping
from itertools import islice
from typing import Any

from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.ring_api import check_payload
from raytopic.core.config import Overflow
from raytopic.core.errors import InvalidArgumentError
from raytopic.core.payloads import Payload
from raytopic.core.protocol import READ_WAIT_MOST, AppendUnless, ReadLatest

__all__ = ["LatestValues"]

READ_PIECE = 10_000
"""Elements read from the log per step while the values are first decoded."""

CHANGES_KEPT = 10_000
"""Changed keys remembered for readers catching up (``ReadLatest.since``)."""

Read = tuple[tuple[Any, ...], tuple[str, int], bool, list[tuple[Any, Any]]]
"""A ``ReadLatest``'s reply (see there)."""


class LatestValues:
    """The latest value of each key of one channel's log (see the module docstring).

    Args:
        log: The channel's log (it tells this part of every append).
        compacted: Whether the channel's topic is compacted (only such a topic's
            keys have one latest value: other channels refuse the requests).
    """

    def __init__(self, log: ChannelLog, *, compacted: bool) -> None:
        self._log = log
        self._compacted = compacted
        # key -> (its latest element, as the log holds it; the append's change)
        self._values: dict[Any, tuple[Payload, int | None]] | None = None
        self._id = ""  # a reader's marks hold for these values only (decoded anew: another)
        self._changed: deque[Any] = deque(maxlen=CHANGES_KEPT)  # keys, oldest change first
        self._changes = 0  # ever appended to _changed
        self._deciding = asyncio.Lock()  # one conditional append at a time: check, then write
        # key -> the waiting reads of it: (woken when, field, the values it waits under)
        self._readers: dict[Any, list[tuple[asyncio.Future[None], str, tuple[Any, ...]]]] = {}
        self._woke = False  # an append woke a read: the appender answers after it
        if compacted:  # another channel refuses the requests: its appends need no watching
            log.watch(self._appended)

    async def append_unless(self, request: AppendUnless, payload: Payload) -> tuple[Any, ...]:
        """Append each keyed value unless its key's latest value refuses it (see
        ``AppendUnless``); answered once what it appended, and the latest values that
        refused the rest, are durable.

        Raises:
            InvalidArgumentError: not a compacted channel, not a keyed payload.
            TopicFullError, StoreError: the append failed (nothing appended).
        """
        payload = check_payload(payload)
        keys = payload.keys
        if type(keys) is not list or None in keys:  # (a store keeps a list of keys)
            raise InvalidArgumentError("a conditional append needs a key for every value")
        async with self._deciding:
            values = self._known()
            taken: dict[Any, Any] = {}  # keys this request appends, with their values
            replies: list[Any] = []
            appended: list[int] = []
            for index, (key, value) in enumerate(zip(keys, _decoded(payload), strict=True)):
                latest = taken[key] if key in taken else _value(values.get(key))
                if _field(latest, request.field) in request.refused:
                    replies.append(latest)
                else:
                    replies.append(None)
                    appended.append(index)
                    taken[key] = value
            change = None
            if appended:
                part = payload if len(appended) == len(keys) else payload.take(appended)
                ack, change = await self._log.append(
                    part, Overflow.BLOCK, request.timeout, whole=True
                )
                if ack.error is not None:
                    raise ack.error
        if self._woke:  # the reads it woke resume in the next turn, and answer first
            self._woke = False
            await asyncio.sleep(0)
        await self._log.durable(self._newest_change([*taken, *keys], change))
        return tuple(replies)

    async def read(self, request: ReadLatest) -> Read:
        """The latest value of each key (None: none) and the keys changed since the
        reader's mark (see ``ReadLatest``), once durable.

        Raises:
            InvalidArgumentError: not a compacted channel, a bad ``wait``.
        """
        most = request.most
        async with self._deciding:  # not halfway through a conditional append
            values = self._known()
        if request.wait:
            values = await self._until_changed(request, values)
        oldest = self._changes - len(self._changed)
        since = request.since
        fresh = since is not None and since[0] == self._id and oldest <= since[1] <= self._changes
        mark = since[1] if since is not None and fresh else None  # where the reader stands
        start = max(oldest if mark is None else mark, self._changes - most)
        changed = list(dict.fromkeys(islice(self._changed, start - oldest, None)))
        reply = (
            tuple(_value(values.get(key)) for key in request.keys),
            (self._id, self._changes),
            mark is None or start > mark,  # the reader drops what it knew
            [(key, _value(values.get(key))) for key in changed],
        )
        await self._log.durable(self._newest_change([*request.keys, *changed], None))
        return reply

    async def _until_changed(
        self, request: ReadLatest, values: dict[Any, tuple[Payload, int | None]]
    ) -> dict[Any, tuple[Payload, int | None]]:
        """The latest values once one of the keys is no longer ``waiting``, or at the
        end of the wait (see ``ReadLatest``)."""
        wait = request.wait
        if type(wait) not in (int, float) or not 0 <= wait <= READ_WAIT_MOST:
            raise InvalidArgumentError(
                f"a read's wait must be a number of seconds from 0 to {READ_WAIT_MOST:g}, "
                f"got {wait!r}"
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        keys, field, waiting = request.keys, request.field, request.waiting
        while keys and all(_field(_value(values.get(key)), field) in waiting for key in keys):
            left = deadline - loop.time()
            if left <= 0:
                break
            woken: asyncio.Future[None] = loop.create_future()
            reader = (woken, field, waiting)
            for key in keys:
                self._readers.setdefault(key, []).append(reader)
            try:
                # Not wait_for: its task around the wait would cost the woken read
                # two more turns of the loop, after the appender's answer.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await woken
            finally:
                for key in keys:
                    readers = self._readers.get(key)
                    if readers is not None:
                        readers.remove(reader)
                        if not readers:
                            del self._readers[key]
            async with self._deciding:
                values = self._known()  # (a purge forgot them: read again)
        return values

    def _known(self) -> dict[Any, tuple[Payload, int | None]]:
        """Every key's latest element, found in the log on first use."""
        if not self._compacted:
            raise InvalidArgumentError(
                "only a compacted topic has a latest value per key (create it with compaction)"
            )
        if self._values is None:
            self._values = {}
            self._id = uuid.uuid4().hex
            self._changed.clear()
            self._changes = 0
            for payload, change in self._log.everything(READ_PIECE):
                # A run read from the store is a view of a whole segment's bytes: what
                # is kept of it is a copy of the run (the ring's runs are its own).
                self._appended(payload.owned(), change)
        return self._values

    def _appended(self, payload: Payload | None, change: int | None) -> None:
        """The log took ``payload`` (None: it dropped every element)."""
        if self._readers:
            self._wake(payload)
        if payload is None:
            self._values = None
            return
        values = self._values
        if values is None or payload.keys is None:
            return
        deleted = payload.tombstones()
        for index, (key, gone) in enumerate(zip(payload.keys, deleted, strict=True)):
            if gone:
                values.pop(key, None)
            else:
                values[key] = (payload.slice(index, index + 1), change)
            self._changed.append(key)
            self._changes += 1

    def _wake(self, payload: Payload | None) -> None:
        """Wake the reads waiting for a key of ``payload`` whose new value leaves what
        they wait under (every read: a purge, or a payload without keys)."""
        keys = None if payload is None else payload.keys
        if keys is None:
            woken = [reader for readers in self._readers.values() for reader in readers]
        else:
            assert payload is not None
            woken, deleted = [], None
            for index, key in enumerate(keys):
                readers = self._readers.get(key)
                if not readers:
                    continue
                if deleted is None:
                    deleted = payload.tombstones()
                # Decoded once for every read of its key.
                value = None if deleted[index] else _value((payload.slice(index, index + 1), None))
                woken += [reader for reader in readers if _field(value, reader[1]) not in reader[2]]
        for future, _, _ in woken:
            if not future.done():
                future.set_result(None)
                self._woke = True

    def _newest_change(self, keys: Any, change: int | None) -> int | None:
        """The newest append (``change``, or the latest value of one of ``keys``) to
        wait for: an answer rests only on what a restart keeps."""
        values = self._values or {}
        changes = [values[key][1] for key in keys if key in values] + [change]
        known = [mark for mark in changes if mark is not None]
        return max(known, default=None)


def _decoded(payload: Payload) -> list[Any]:
    """A conditional append's values.

    Raises:
        InvalidArgumentError: they do not decode here.
    """
    try:
        return payload.decode()
    except Exception as error:
        raise InvalidArgumentError(
            f"a conditional append's values must decode: {error!r}"
        ) from None


def _value(latest: tuple[Payload, int | None] | None) -> Any:
    """A key's latest value, decoded (None: none; a value that does not decode has
    no field)."""
    if latest is None:
        return None
    decoded, _ = latest[0].decode_each()
    return decoded[0]


def _field(value: Any, field: str) -> Any:
    """``value[field]`` of a mapping, else None."""
    return value.get(field) if isinstance(value, Mapping) else None
