"""What a session's takes at other channels hold there (*lent*) until settled, and
the give-backs of takes no receive returned. No Ray.

A take or fetch at another channel carries a *token*: what it takes stays lent at the
sibling (no other take of the reader runs there) until the session settles the
token, saying how much it used; the rest is read again. A token names the host
channel and the session: when the host restarts, the channels take back what
they lent its sessions at once (see ``Cursor.relayed_by``).

A take whose elements no receive returns (its receive was cancelled, or a take
beside it failed) is given back. Takes decided after a give-back wait for it: one
that moved the cursor first would have the give-back refused.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from raytopic.core.protocol import Delivery, SettleTake

if TYPE_CHECKING:
    from raytopic.actors.receive.ports import ReaderPort

__all__ = ["RIDE_WAIT", "LentTakes", "log_failure"]

logger = logging.getLogger(__name__)

RIDE_WAIT = 0.02
"""Seconds a settle waits to ride on the session's next take at its channel before it
goes in a call of its own (meanwhile the channel lends no other take of the reader)."""


class LentTakes:
    """One session's lent takes at the channels and its give-backs on their way.

    Args:
        reader_id: The reader the channels know.
        host: The session's host channel (named in every token).
        ports: How the session reads each channel.
        lease_of: The reader's lease at a channel now (None: not owned, or anonymous).
    """

    def __init__(
        self,
        reader_id: str,
        host: int,
        ports: Mapping[int, ReaderPort],
        lease_of: Callable[[int], Any],
    ) -> None:
        self._reader_id = reader_id
        self._ports = ports
        self._lease_of = lease_of
        session_id = uuid.uuid4().hex[:8]
        self._tokens = (f"{host}:{session_id}-{n}" for n in itertools.count())
        self.returning: list[asyncio.Future[Any]] = []
        """Give-backs on their way: a take decided now waits for these first."""
        # channel -> the settle waiting to ride on the next take there, and its timer
        self._riding: dict[int, tuple[SettleTake, asyncio.TimerHandle]] = {}

    def token(self) -> str:
        """A new lent take's token."""
        return next(self._tokens)

    async def after_give_backs(self, returning: list[asyncio.Future[Any]] | None = None) -> None:
        """Return once the give-backs ``returning`` (default: those on their way now) landed."""
        pending = self.returning if returning is None else returning
        if pending:  # rare (a cancelled take): no copy on the common path
            await asyncio.wait(list(pending))

    # -- settling ----------------------------------------------------------------------

    def settle(self, delivery: Delivery, token: str, give_back_from: int | None) -> None:
        """Tell the channel of ``delivery`` what of the take lent under ``token`` was used: the rest
        from ``give_back_from`` (None: nothing) is read again."""
        settled = asyncio.ensure_future(
            self._ports[delivery.channel].settle(
                self._reader_id, delivery.origin.lease, token, give_back_from
            )
        )
        settled.add_done_callback(log_failure)

    def settle_used(self, delivery: Delivery, token: str) -> None:
        """All of what was lent under ``token`` was used (nothing taken: nothing to settle).

        The settle rides on the session's next take at that channel (a receive that
        keeps reading settles with no call of its own), or goes alone after
        RIDE_WAIT."""
        if not delivery.count:
            return
        channel = delivery.channel
        self.send_riding(channel)  # at most one rides per channel
        settle = SettleTake(
            reader_id=self._reader_id, lease=delivery.origin.lease, token=token, give_back_from=None
        )
        timer = asyncio.get_running_loop().call_later(RIDE_WAIT, self.send_riding, channel)
        self._riding[channel] = (settle, timer)

    def riding(self, channel: int) -> SettleTake | None:
        """The settle a take at ``channel`` carries now (None: none waits)."""
        riding = self._riding.pop(channel, None)
        if riding is None:
            return None
        riding[1].cancel()
        return riding[0]

    def send_riding(self, channel: int | None = None) -> None:
        """Send the settle waiting to ride at ``channel`` (None: at every channel) in a
        call of its own."""
        for each in list(self._riding) if channel is None else [channel]:
            settle = self.riding(each)
            if settle is not None:
                sent = asyncio.ensure_future(
                    self._ports[each].settle(
                        settle.reader_id, settle.lease, settle.token, settle.give_back_from
                    )
                )
                sent.add_done_callback(log_failure)

    def settle_unused(self, call: asyncio.Future[Any], token: str) -> None:
        """Nothing of what the finished ``call`` took under ``token`` was used."""
        if not call.cancelled() and call.exception() is None and call.result().count:
            delivery = call.result()
            self.settle(delivery, token, delivery.first)

    # -- giving back -------------------------------------------------------------------

    def give_back_when_done(self, call: asyncio.Future[Any], token: str) -> None:
        """The take ``call`` (lent under ``token``) reaches no receive: once it is done,
        it is settled and what it took given back."""

        def settle(done: asyncio.Future[Any]) -> None:
            # At once, not riding: the give-back that follows needs the loan settled.
            if not done.cancelled() and done.exception() is None and done.result().count:
                self.settle(done.result(), token, None)

        call.add_done_callback(settle)
        self.return_when_done(call)

    def return_when_done(self, take: asyncio.Future[Any]) -> None:
        """Give back whatever ``take`` delivers. Takes decided from now on wait for
        it: one that moved the cursor first would have the give-back refused."""

        async def give_back_after() -> None:
            try:
                delivery = await take
            except BaseException:
                return  # nothing was taken
            if isinstance(delivery, Delivery) and delivery.count:
                await self.give_back(delivery)

        returning = asyncio.ensure_future(give_back_after())
        returning.add_done_callback(log_failure)
        self.returning.append(returning)
        returning.add_done_callback(self.returning.remove)

    async def give_back(self, delivery: Delivery) -> None:
        """Undo a take whose elements no receive returned (refused if the cursor
        moved on since: a seek, a reset, a new owner)."""
        channel = delivery.channel
        port = self._ports.get(channel)
        lease = self._lease_of(channel)
        if port is None or lease != delivery.origin.lease:
            return  # no longer ours: the new owner resumes after the last commit
        await port.give_back(self._reader_id, lease, delivery)  # False if refused


def log_failure(task: asyncio.Future[Any]) -> None:
    """Log what a call made in passing (a settle, a give-back, a stop) failed with."""
    if not task.cancelled() and task.exception() is not None:
        logger.warning("could not hand back or stop a take: %s", task.exception())
