"""Carrying out a take plan: take from one channel, or from several at once, and
deliver what came (or give it back when a take beside it failed). No Ray.

A take is the only thing that moves a cursor. A take whose elements no receive
returns (its receive was cancelled, or a take beside it failed) is given back, and
the takes decided after it wait for that give-back (see ``LentTakes``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from raytopic.actors.receive.lending import LentTakes
from raytopic.actors.receive.planner import shares, take_groups
from raytopic.actors.receive.ports import ReaderPort
from raytopic.actors.receive.view import OwnedView
from raytopic.actors.receive.waits import TOLD_ONCE
from raytopic.core.errors import NotOwnerError, SubscriberClosedError
from raytopic.core.protocol import Delivery

__all__ = ["Takes"]


class Takes:
    """One session's takes.

    Args:
        reader_id: The reader the channels know.
        ports: How the session reads each channel.
        view: The owned channels and what is known of them.
        lent: The session's lent takes (tokens, settles, give-backs).
        drop: Drops a channel that is no longer ours.
        tell_once: Reports an error to a later receive (skipped elements, a poison
            element) when this one delivers elements of other channels.
    """

    def __init__(
        self,
        reader_id: str,
        ports: Mapping[int, ReaderPort],
        view: OwnedView,
        lent: LentTakes,
        *,
        drop: Callable[[int], None],
        tell_once: Callable[[BaseException], None],
    ) -> None:
        self._reader_id = reader_id
        self._ports = ports
        self._view = view
        self._lent = lent
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
            TopicError: a take failed (what the others took is given back).
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
                # Nobody will see what the other channels handed over: give it back.
                await asyncio.gather(*(self._lent.give_back(d) for d in deliveries))
                raise failures[0]
            if errors:
                if not deliveries:
                    for error in errors[1:]:
                        self._tell_once(error)
                    raise errors[0]
                # Elements were taken elsewhere: deliver them; the skipped
                # elements are reported by the next receives.
                for error in errors:
                    self._tell_once(error)
            if deliveries:
                return deliveries
        return []

    async def _take_several(self, group: list[int], max_count: int) -> list[Any]:
        """Take from every channel of ``group`` at once, ``max_count`` in all.

        If this receive is cancelled meanwhile, what the takes still deliver is
        given back, so the next receive reads it.
        """
        returning = list(self._lent.returning)  # now: a give-back made later may wait for these
        takes = [
            asyncio.ensure_future(self.take(channel, share, returning))
            for channel, share in zip(group, shares(max_count, len(group)), strict=True)
        ]
        try:
            await asyncio.wait(takes)
        except asyncio.CancelledError:
            for take in takes:
                self._lent.return_when_done(take)
            raise
        return [take.exception() or take.result() for take in takes]

    async def take(
        self, channel: int, max_count: int, returning: list[asyncio.Future[Any]] | None = None
    ) -> Delivery | None:
        """Take from one channel, after the give-backs still on their way (``returning``:
        those registered when the take was decided; default: now). None: the
        channel is no longer ours."""
        await self._lent.after_give_backs(returning)
        view = self._view
        if not view.owns(channel):
            return None  # revoked since the candidates were chosen
        lease = view.lease_of(channel)
        try:
            delivery = await self._ports[channel].take(
                self._reader_id, lease, max_count, self._lent
            )
        except (NotOwnerError, SubscriberClosedError):
            # Lost the channel, or the reader is being closed there (close(),
            # destroy_group): the host's own close ends this receive with None.
            # (A newer lease for the channel may have arrived meanwhile: keep it.)
            if view.holds(channel, lease):
                self._drop(channel)
            return None
        except TOLD_ONCE:
            view.forget(channel)
            raise
        view.learn(delivery)
        return delivery
