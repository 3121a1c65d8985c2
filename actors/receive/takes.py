"""Carrying out a take plan: take from one channel, or from several at once. No Ray.

A take names the position it reads from (``raytopic.actors.receive.positions``):
what a receive does not hand over (it was cancelled, or a take beside it failed)
is simply read again by the session's next take there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from raytopic.actors.receive.planner import shares, take_groups
from raytopic.actors.receive.ports import ReaderPort
from raytopic.actors.receive.positions import Positions
from raytopic.actors.receive.view import OwnedView
from raytopic.actors.receive.waits import TOLD_ONCE
from raytopic.core.errors import NotOwnerError, SubscriberClosedError
from raytopic.core.protocol import Delivery

__all__ = ["Takes"]


class Takes:
    """One session's takes.

    Args:
        ports: How the session reads each channel.
        view: The owned channels and what is known of them.
        positions: Where the session reads each channel.
        drop: Drops a channel that is no longer ours.
        tell_once: Reports an error to a later receive (skipped elements, a poison
            element) when this one delivers elements of other channels.
    """

    def __init__(
        self,
        ports: Mapping[int, ReaderPort],
        view: OwnedView,
        positions: Positions,
        *,
        drop: Callable[[int], None],
        tell_once: Callable[[BaseException], None],
    ) -> None:
        self._ports = ports
        self._view = view
        self._positions = positions
        self._drop = drop
        self._tell_once = tell_once

    async def take_from(
        self, candidates: list[int], max_count: int, spread: bool
    ) -> list[Delivery]:
        """Take from the first of ``candidates`` with data, or (``spread``) from several
        at once, ``max_count`` in all (see ``take_groups``).

        Raises:
            StaleSequenceError, PoisonElementError: told once by a channel, when no
                other channel delivered (else the next receive reports it).
            TopicError: a take failed (what the others took is read again).
        """
        for planned in take_groups(candidates, max_count, spread):
            group = [c for c in planned if self._view.owns(c)]  # (revoked meanwhile)
            if not group:
                continue
            if len(group) == 1:  # the common case: no task, no extra loop turn
                try:
                    outcomes: list[Any] = [await self.take(group[0], max_count)]
                except TOLD_ONCE as error:
                    outcomes = [error]
            else:
                outcomes = await self._take_several(group, max_count)
            deliveries = [o for o in outcomes if isinstance(o, Delivery) and o.count]
            errors = [o for o in outcomes if isinstance(o, BaseException)]
            failures = [e for e in errors if not isinstance(e, TOLD_ONCE)]
            if failures:
                # Nobody sees what the others took: their read positions go back first.
                backs = [self._positions.unhanded(delivery) for delivery in deliveries]
                await asyncio.gather(*(b for b in backs if b is not None), return_exceptions=True)
                raise failures[0]
            if errors:
                if not deliveries:
                    for told in errors[1:]:
                        self._tell_once(told)
                    raise errors[0]
                # Elements were taken elsewhere: deliver them; the skipped
                # elements are reported by the next receives.
                for told in errors:
                    self._tell_once(told)
            if deliveries:
                return deliveries
        return []

    async def _take_several(self, group: list[int], max_count: int) -> list[Any]:
        """Take from every channel of ``group`` at once, ``max_count`` in all."""
        takes = [
            asyncio.ensure_future(self.take(channel, share))
            for channel, share in zip(group, shares(max_count, len(group)), strict=True)
        ]
        try:
            await asyncio.wait(takes)
        except asyncio.CancelledError:
            for take in takes:  # what they take reaches no receive
                take.add_done_callback(self._unhanded)
            raise
        return [take.exception() or take.result() for take in takes]

    def _unhanded(self, take: asyncio.Future[Any]) -> None:
        if not take.cancelled() and isinstance(take.exception() or take.result(), Delivery):
            self._positions.unhanded(take.result())

    async def take(self, channel: int, max_count: int) -> Delivery | None:
        """Take from one channel; None: the channel is no longer ours."""
        view = self._view
        if not view.owns(channel):
            return None  # revoked since the candidates were chosen
        lease = view.lease_of(channel)
        try:
            delivery = await self._positions.take(self._ports[channel], lease, max_count)
        except (NotOwnerError, SubscriberClosedError):
            # Lost the channel, or the reader is being closed there (close(),
            # destroy_group): the host's own close ends this receive with None.
            # (A newer lease for the channel may have arrived meanwhile: keep it.)
            if view.holds(channel, lease):
                self._drop(channel)
            return None
        except TOLD_ONCE:
            self._forget(channel)
            raise
        view.learn(delivery)
        return delivery

    def take_now(self, channel: int, max_count: int) -> Delivery | None:
        """Take from one channel at once where its port serves it without a wait (the
        host channel, with data); None: it would wait, or the channel is not ours.

        Raises:
            NotOwnerError, SubscriberClosedError: the channel was lost, or the reader is
                being closed there (nothing is dropped: the caller's receive finds out).
            StaleSequenceError, PoisonElementError: told once, as by :meth:`take`.
        """
        port = self._ports.get(channel)
        if port is None or not self._view.owns(channel):
            return None
        try:
            delivery = self._positions.take_now(port, self._view.lease_of(channel), max_count)
        except TOLD_ONCE:
            self._forget(channel)
            raise
        if delivery is not None:
            self._view.learn(delivery)
        return delivery

    def _forget(self, channel: int) -> None:
        """A take told its reader once: the channel moved the cursor (look at it again,
        and read on where it stands)."""
        self._view.forget(channel)
        self._positions.forget(channel)
