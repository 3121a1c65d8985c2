"""Publishers' batches into a channel's log: each publisher's in the order it numbered
them, a retry answered with the ack it got, durable before the ack. No Ray.

The channel serves ``Append``, ``AppendPieces`` and ``AppendOnce`` here; the log
(``raytopic.actors.channel_log``) stores, the publisher table
(``raytopic.actors.publisher_table``) keeps the turns and the acks to answer
retries with.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.publisher_table import PublisherTable
from raytopic.actors.ring_api import check_payload
from raytopic.core.config import Overflow
from raytopic.core.errors import InvalidArgumentError
from raytopic.core.payloads import Payload
from raytopic.core.protocol import Append, AppendAck, AppendOnce, AppendPieces, StatusBatch

__all__ = ["Appends"]


class Appends:
    """A channel's appends (see the module docstring).

    **Ordering**: one publisher's batches are appended in its batch order.

    **Back-pressure**: with overflow ``"block"`` an append waits for room up to
    the publisher's timeout. A batch that may go in pieces meanwhile is open
    (``PublisherTable.open``) until its append ends: if the channel restarts, Ray's
    retry of it appends the rest under the same number, before the publisher's
    later batches, and is answered for the whole batch.

    Args:
        context: The channel's identity and metrics.
        log: The channel's log.
        publishers: The publishers' turns and acks.
        checkpoint: Makes the state's changes so far durable (an open batch is
            known open before its first piece is stored, and closed before its
            answer).
    """

    def __init__(
        self,
        context: ChannelContext,
        log: ChannelLog,
        publishers: PublisherTable,
        checkpoint: Callable[[], Awaitable[None]],
    ) -> None:
        self._context = context
        self._log = log
        self._publishers = publishers
        self._checkpoint = checkpoint
        self._once: dict[tuple[str, int], asyncio.Event] = {}
        """The ``append_once`` versions appending now: set when the append ends."""

    async def append(
        self, request: Append, payload: Payload, *, rerun: bool = False
    ) -> AppendAck | StatusBatch:
        """Append one publisher batch, in the publisher's batch order.

        A batch number seen before returns the ack it got then (a retry after
        a lost reply appends nothing twice). With ``statuses``, the reply is the
        batch's statuses (``publish_batch``) instead of an ack. With ``rerun`` (an
        ``append_once`` version), a batch that ends short stays open: running it
        again appends the rest.

        Raises:
            InvalidArgumentError: a stale or duplicate batch number, or not a payload.
            TopicError: with ``statuses``, why the batch was not appended.
        """
        arrived = time.perf_counter()
        payload = check_payload(payload)
        ack, change, fresh = await self._append_batch(
            request.publisher_id,
            request.batch,
            payload,
            Overflow.parse(request.overflow),
            request.timeout,
            whole=request.statuses,
            each=request.each,
            rerun=rerun,
        )
        # Outside the turn: the publisher's next batch is written meanwhile, and
        # one fdatasync covers both.
        await self._log.durable(change)
        if fresh:
            self._appended(arrived, request.publisher_id, request.batch, ack)
        return self._ack_reply(ack, request.statuses)

    async def append_pieces(
        self, request: AppendPieces, payloads: tuple[Payload, ...]
    ) -> tuple[AppendAck, ...]:
        """Append a publisher's pieces as its consecutive batches (see ``AppendPieces``):
        what one publisher sent one channel while its calls were in flight, in one call.

        Raises:
            InvalidArgumentError: a stale or duplicate batch number, or not one
                payload per piece.
        """
        arrived = time.perf_counter()
        if not isinstance(payloads, tuple) or len(payloads) != len(request.whole):
            raise InvalidArgumentError(f"{len(request.whole)} pieces need as many payloads")
        pieces = [check_payload(payload) for payload in payloads]
        policy = Overflow.parse(request.overflow)
        acks: list[tuple[AppendAck, bool]] = []
        last_change = None
        for index, (payload, whole) in enumerate(zip(pieces, request.whole, strict=True)):
            ack, change, fresh = await self._append_batch(
                request.publisher_id,
                request.batch + index,
                payload,
                policy,
                request.timeout,
                whole=whole,
                each=not whole,
            )
            acks.append((ack, fresh))
            last_change = change if change is not None else last_change
        await self._log.durable(last_change)  # one fdatasync covers every piece
        for index, (ack, fresh) in enumerate(acks):
            if fresh:
                self._appended(arrived, request.publisher_id, request.batch + index, ack)
        return tuple(ack for ack, _ in acks)

    async def append_once(self, request: AppendOnce, payload: Payload) -> AppendAck:
        """Append a writer's ``version`` unless this channel has it already: exactly once
        across re-runs of a Spark micro-batch and across restarts with a store (the
        pair is in the record). Answers an empty ack for a version it has; a version
        appending now (Spark ran the task again while the first run waits for room)
        waits for that append to end. A version that ended short (its rest timed out
        or was refused) is not had: its re-run appends exactly the rest, and is then
        answered for the whole version."""
        writer_id, version = request.writer_id, request.version
        key = (writer_id, version)
        while (running := self._once.get(key)) is not None:
            await running.wait()
            count = len(check_payload(payload))
            ack = self._publishers.earlier_ack(writer_id, version, count)
            if ack is not None:
                return ack
        if self._publishers.has_version(writer_id, version):
            return AppendAck(-1, 0, 0.0)
        append = Append(
            publisher_id=writer_id,
            batch=version,
            overflow=request.overflow,
            timeout=request.timeout,
        )
        self._once[key] = ended = asyncio.Event()
        try:
            return await self.append(append, payload, rerun=True)  # type: ignore[return-value]
        finally:
            del self._once[key]
            ended.set()

    async def _append_batch(
        self,
        publisher_id: str,
        batch: int,
        payload: Payload,
        policy: Overflow,
        timeout: float | None,
        *,
        whole: bool,
        each: bool,
        rerun: bool = False,
    ) -> tuple[AppendAck, int | None, bool]:
        """Append one publisher batch in its turn (a batch seen before: the ack it got
        then, appending nothing twice; one open: its rest). With ``rerun``, a batch
        that ends short stays open (see :meth:`append`).
        Returns the ack, the change to make durable before answering, and whether it
        is new (not a retry's).

        Raises:
            InvalidArgumentError: a stale or duplicate batch number, or fewer values
                than the open batch stored.
        """
        publishers = self._publishers
        ack = publishers.earlier_ack(publisher_id, batch, len(payload))
        if ack is not None:  # a retry (a lost reply, or a restart in between)
            return ack, None, False
        stored = publishers.stored(publisher_id, batch)
        if stored is not None and stored.accepted > len(payload):
            raise InvalidArgumentError(
                f"batch {batch} of {publisher_id!r} came again with {len(payload)} values, "
                f"fewer than the {stored.accepted} of it stored: a retry carries the same values"
            )

        async with publishers.turn(publisher_id, batch):
            before = publishers.stored(publisher_id, batch)
            done = 0 if before is None else before.accepted
            rest = payload.slice(done, len(payload)) if done else payload
            opened = publishers.is_open(publisher_id, batch)
            if not opened and publisher_id and self._in_pieces(rest, policy, each=each):
                publishers.open(publisher_id, batch)
                await self._checkpoint()  # known open before its first piece is stored
                opened = True
            left = len(rest)

            async def piece(first: int, count: int, stamp: float) -> None:
                nonlocal left
                publishers.piece(publisher_id, batch, first, count, stamp)
                left -= count
                if opened and left:
                    # Known before the rest waits: a restart resumes after it, though
                    # readers may trim it meanwhile (or later pieces push it past
                    # what a restart reloads). The last piece goes with the close.
                    await self._checkpoint()

            ack, change = await self._log.append(
                rest,
                policy,
                timeout,
                whole=whole,
                each=each,
                publisher_id=publisher_id,
                batch=batch,
                on_piece=piece if publisher_id else None,
                stored=done,
            )
        if before is not None:
            ack = before.then(ack)
        short = rerun and ack.accepted < len(payload)
        if opened or short:  # closed (or open, short) once its part is durable, before its answer
            await self._log.durable(change)
            if short:
                publishers.open(publisher_id, batch)
            else:
                publishers.close(publisher_id, batch)
            await self._checkpoint()
        return ack, change, True

    def _in_pieces(self, payload: Payload, policy: Overflow, *, each: bool) -> bool:
        """Whether a "block" append may store part of ``payload`` and wait for room for
        the rest: it does not fit now, and its values were published one by one or
        it is larger than the capacity (else it waits to go in at once)."""
        count = len(payload)
        if policy is not Overflow.BLOCK or self._log.room() >= count:
            return False
        return each or count > self._log.ring.capacity

    def _appended(self, arrived: float, publisher_id: str, batch: int, ack: AppendAck) -> None:
        """Count a durable append and keep its ack for a retry of ``batch``."""
        self._context.metrics.appended(time.perf_counter() - arrived)
        self._publishers.remember(publisher_id, batch, ack)

    def _ack_reply(self, ack: AppendAck, statuses: bool) -> AppendAck | StatusBatch:
        if statuses:
            if ack.error is not None:
                # Raised here, not in the caller's deserialization, so the
                # ObjectRef fails with the typed error itself.
                raise ack.error
            return StatusBatch(self._context.config.topic_id, self._context.channel, ack)
        return ack
