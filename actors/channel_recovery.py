"""A channel's life as its requests see it: whether it serves, opens, recovers or has
failed (its identity says which), when a request is admitted meanwhile, and the
word a restarted channel sends its coordinator. No Ray (the word goes through a
port the channel gives).

A channel restarted without a store is "recovering" until its coordinator seeds
it (its groups and epoch): requests admitted as ``Admit.SEEDED`` wait for that,
telling the coordinator again now and then (the first word may have been lost);
``Admit.NOW`` ones are refused at once ("try again"). A failed channel refuses
both, typed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_dispatch import Admit
from raytopic.actors.channel_log import ChannelLog
from raytopic.core.errors import ChannelUnavailableError, TopicNotFoundError
from raytopic.core.protocol import ChannelRestarted

logger = logging.getLogger(__name__)

__all__ = ["ChannelRecovery"]

ANNOUNCE_AGAIN = 2.0
"""Seconds a request waiting for the seed waits before the channel tells its
coordinator again."""

SEED_TIMEOUT = 30.0
"""Seconds a request to a channel restarted without a store waits for the
coordinator's epoch and groups (then ChannelUnavailableError)."""


class ChannelRecovery:
    """A channel's state and admission (see the module docstring).

    Args:
        context: The channel's identity, health and ``seeded`` signal.
        log: The channel's log (whether it is durable, what is damaged).
        node_id: The Ray node the channel runs on (asked when its identity is).
        restarted: The channel's process restarted.
        announce: Sends the coordinator a ``ChannelRestarted`` (may raise: logged).
    """

    def __init__(
        self,
        context: ChannelContext,
        log: ChannelLog,
        *,
        node_id: Callable[[], str],
        restarted: bool,
        announce: Callable[[ChannelRestarted], None],
    ) -> None:
        self._context = context
        self._log = log
        self._node_id = node_id
        self.restarted = restarted
        self._announce = announce
        self._announced = 0.0  # when the coordinator was last told of a restart

    def identity(self) -> dict[str, Any]:
        """Where the channel runs, and its state (see ``ReadIdentity``)."""
        context = self._context
        seeded = context.seeded.is_set()
        state = "serving" if seeded else "opening"
        if self.restarted and not seeded:
            state = "recovering"
        if context.failure is not None:
            state = "failed"
        return {
            "channel": context.channel,
            "topic_id": context.config.topic_id,
            "epoch": context.epoch,
            "node_id": self._node_id(),
            "pid": os.getpid(),
            "state": state,
            "durable": self._log.store is not None,
            "failure": context.failure,
            "damaged": self._log.damaged_ranges,
        }

    def announce_restart(self) -> None:
        """Tell the coordinator the channel came back (it is not polled): it restores a
        channel without a store and tells the siblings. Never raises (this runs
        while the actor starts); a request waiting for the seed tells it again."""
        context = self._context
        self._announced = time.monotonic()
        try:
            self._announce(
                ChannelRestarted(context.config.topic_id, context.channel, self.identity())
            )
        except Exception as error:
            logger.warning("channel %d: could not tell its coordinator: %s", context.channel, error)

    async def admit(self, admit: Admit) -> None:
        """Admit a request to a channel failed, not serving yet or ended, as ``admit`` says.

        Raises:
            TopicNotFoundError: the topic is being destroyed (unless ``Admit.ALWAYS``).
            ChannelFailedError: the channel has failed (unless ``Admit.ALWAYS``).
            ChannelUnavailableError: it recovers (``Admit.NOW``: at once; else after
                ``SEED_TIMEOUT``).
        """
        context = self._context
        if admit is Admit.ALWAYS:
            return
        if context.ended is not None:
            raise TopicNotFoundError(context.ended)
        if admit is Admit.NOW or context.failure is not None:
            context.check_serving()
            return
        if not context.seeded.is_set():
            await self._wait_seeded()

    async def _wait_seeded(self) -> None:
        seeded = self._context.seeded
        deadline = time.monotonic() + SEED_TIMEOUT
        try:
            while not seeded.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(seeded.wait(), min(left, ANNOUNCE_AGAIN))
                if self.restarted and time.monotonic() - self._announced >= ANNOUNCE_AGAIN:
                    self.announce_restart()  # the first word may have been lost
        except TimeoutError:
            context = self._context
            raise ChannelUnavailableError(
                f"channel {context.channel} of {context.name!r} restarted without a store "
                f"and its coordinator has not restored its groups within {SEED_TIMEOUT:.0f} s"
            ) from None
