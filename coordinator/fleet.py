"""The coordinator's port to a topic's channels: every call it makes to them.

``ChannelFleet`` holds the one timeout and error policy of those calls; a
subclass says only how one request reaches one channel (``RayChannelFleet``:
the channel actors' ``control`` entry; the coordinator's unit tests: an
in-memory fake). The policy:

- A channel's refusal is raised as its own typed error (a raytopic error as
  itself, not in Ray's wrapper, so the coordinator's caller unwraps it once).
- A call that must land (``ask``, ``ask_each``, ``ask_outcomes``,
  ``all_or_nothing``) waits as long as its channel takes: a restarting
  channel's calls wait for it (Ray retries them), and a group change must not
  go on before its channels hold it.
- A notice (``tell``) is best effort: a channel that refuses it is logged, and
  one that does not answer within ``NOTICE_TIMEOUT`` is not waited for (the
  call still reaches it). Views are a notice that waits as calls do
  (``tell(..., timeout=None)``): members are woken only once the channels
  that host their sessions have the view. A destroy's notice waits longer
  (``END_NOTICE_TIMEOUT``): the kill that follows would leave what waits at a
  channel slow to hear it unanswered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Any

import ray

from raytopic.core.errors import ChannelUnavailableError, TopicError
from raytopic.core.protocol import (
    AttachChannels,
    ControlRequest,
    DescribeChannel,
    ReadIdentity,
    SeedChannel,
)

logger = logging.getLogger(__name__)

__all__ = ["END_NOTICE_TIMEOUT", "NOTICE_TIMEOUT", "ChannelFleet", "RayChannelFleet", "typed_error"]

NOTICE_TIMEOUT = 2.0
"""Seconds a notice (and a channel's ``describe``) is waited for."""

END_NOTICE_TIMEOUT = 30.0
"""Seconds a destroy waits for each channel to end the calls waiting there (each then
answers TopicNotFoundError) before it kills the channels: a channel busy for more
than ``NOTICE_TIMEOUT`` on a loaded machine was killed with a receive unanswered,
which then raised Ray's ActorDiedError; one hung for longer is killed all the same."""

_ATTACH_TIMEOUT = 30.0
"""Seconds new channels have to start and meet each other when a topic is made (a
process start and its imports: a few seconds on a loaded machine)."""


class ChannelFleet:
    """A topic's channels as the coordinator calls them (the policy; see the module).

    Subclasses implement ``_send`` (one control request to one channel) and
    ``kill``, and hold the channels' ``handles`` (what ``attach`` introduces).
    """

    handles: tuple[Any, ...] = ()

    def __init__(self, size: int) -> None:
        self.size = size

    # -- what a subclass provides ---------------------------------------------------

    def _send(self, channel: int, request: ControlRequest) -> Awaitable[Any]:
        """Send ``request`` to ``channel``'s ``control`` entry; its reply."""
        raise NotImplementedError

    def kill(self) -> None:
        """Kill the channels (the topic is destroyed, or was never made); the
        fleet is empty from then on."""
        raise NotImplementedError

    # -- the policy -------------------------------------------------------------------

    def channels(self) -> list[int]:
        """Every channel."""
        return list(range(self.size))

    async def attach(self, topic: str) -> list[dict[str, Any]]:
        """Introduce new channels to each other; their identities.

        Raises:
            ChannelUnavailableError: a channel of ``topic`` did not answer within
                ``_ATTACH_TIMEOUT`` (it did not start); the message names it.
            TopicError: a channel's refusal.
        """
        attach = AttachChannels(tuple(self.handles))
        outcomes = await self.ask_outcomes(dict.fromkeys(self.channels(), attach), _ATTACH_TIMEOUT)
        # Ours only: a channel's own TimeoutError arrives in Ray's wrapper, a subclass.
        silent = [c for c, outcome in outcomes.items() if type(outcome) is TimeoutError]
        if silent:
            which = f"channel {silent[0]}" if len(silent) == 1 else f"channels {silent}"
            raise ChannelUnavailableError(
                f"topic {topic!r} was not made: {which} did not answer within "
                f"{_ATTACH_TIMEOUT:.0f} s (its actor did not start)"
            )
        identities = []
        for outcome in outcomes.values():
            if isinstance(outcome, BaseException):
                raise outcome
            identities.append(outcome)
        return identities

    async def identities(self) -> list[dict[str, Any]]:
        """Each channel's identity (epoch, state, pid, ...)."""
        return await self.ask_each(ReadIdentity())

    async def seed(self, channel: int, *state: Any) -> dict[str, Any]:
        """Give a channel that restarted without a store its state; its identity."""
        return await self.ask(channel, SeedChannel(*state))

    async def describe(self, channel: int) -> dict[str, Any]:
        """A channel's figures (within ``NOTICE_TIMEOUT``, else it raises)."""
        return await asyncio.wait_for(self.ask(channel, DescribeChannel()), NOTICE_TIMEOUT)

    async def ask(self, channel: int, request: ControlRequest) -> Any:
        """One channel's reply; its refusal raised typed."""
        try:
            return await self._send(channel, request)
        except Exception as error:
            raise typed_error(error) from None

    async def ask_each(
        self, request: ControlRequest, channels: Iterable[int] | None = None
    ) -> list[Any]:
        """Each channel's reply (every channel by default), in order; the first
        refusal raised typed."""
        targets = self.channels() if channels is None else list(channels)
        return list(await asyncio.gather(*(self.ask(channel, request) for channel in targets)))

    async def ask_outcomes(
        self, requests: Mapping[int, ControlRequest], timeout: float | None = None
    ) -> dict[int, Any | BaseException]:
        """Per channel, its reply to its own request or its typed refusal (all answer;
        with ``timeout``, one silent that long answers ``TimeoutError``)."""
        outcomes = await asyncio.gather(
            *(
                asyncio.wait_for(self.ask(channel, request), timeout)
                for channel, request in requests.items()
            ),
            return_exceptions=True,
        )
        return dict(zip(requests, outcomes, strict=True))

    async def all_or_nothing(self, request: ControlRequest, undo: ControlRequest) -> None:
        """``request`` on every channel: if one refuses, ``undo`` on those that took
        it, and the first refusal is raised."""
        outcomes = await self.ask_outcomes(dict.fromkeys(self.channels(), request))
        failed = [outcome for outcome in outcomes.values() if isinstance(outcome, BaseException)]
        if failed:
            took = [c for c, outcome in outcomes.items() if not isinstance(outcome, BaseException)]
            await self.ask_outcomes(dict.fromkeys(took, undo))
            raise failed[0]

    async def tell(
        self,
        request: ControlRequest,
        channels: Sequence[int] | None = None,
        *,
        timeout: float | None = NOTICE_TIMEOUT,
    ) -> None:
        """A notice to each channel (every one by default): refusals are logged; one
        that does not answer within ``timeout`` seconds (None: as long as it takes)
        is not waited for."""
        targets = self.channels() if channels is None else list(channels)
        outcomes = await asyncio.gather(
            *(asyncio.wait_for(self.ask(channel, request), timeout) for channel in targets),
            return_exceptions=True,
        )
        for channel, outcome in zip(targets, outcomes, strict=True):
            if isinstance(outcome, Exception):
                logger.warning(
                    "channel %d did not take %s: %s", channel, type(request).__name__, outcome
                )


def typed_error(error: BaseException) -> BaseException:
    """A channel's error as the coordinator raises it: a raytopic error as itself
    (not in Ray's wrapper, so the caller unwraps it once)."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, TopicError) else error


class RayChannelFleet(ChannelFleet):
    """The channel actors of a topic (the coordinator's only holder of their handles)."""

    def __init__(self, handles: Sequence[Any]) -> None:
        super().__init__(len(handles))
        self.handles = tuple(handles)

    def _send(self, channel: int, request: ControlRequest) -> Awaitable[Any]:
        return self.handles[channel].control.remote(request)

    def kill(self) -> None:
        for handle in self.handles:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(handle, no_restart=True)
        self.handles = ()
        self.size = 0
