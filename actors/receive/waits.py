"""A session's waits at the channels it cannot read in place (its host's siblings):
*watches* (until the cursor changes) and *fetches* (takes that wait for data, so an
element reaches a waiting receive in one hop from its channel).

A fetch reads at the session's position there whenever elements come, so no other
take of the session runs at that channel meanwhile (see ``busy``). What it brings
is an offer that moves nothing at the channel: the receive waiting now hands it
over (``use``), or it reaches none and the session reads it again (see
``raytopic.actors.receive.positions``). A fetch that is no longer wanted is simply
left to end: nothing of it needs undoing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import ray

from raytopic.actors.receive.pause import SeekPause
from raytopic.actors.receive.ports import WATCH_TIMEOUT, ReaderPort
from raytopic.actors.receive.positions import Positions
from raytopic.actors.receive.view import OwnedView
from raytopic.core.errors import (
    NotOwnerError,
    PoisonElementError,
    StaleSequenceError,
    SubscriberClosedError,
    TopicError,
    TopicNotFoundError,
)
from raytopic.core.protocol import CursorState, Delivery, ReaderLease

__all__ = ["TOLD_ONCE", "SiblingWaits"]

logger = logging.getLogger(__name__)

TOLD_ONCE = (StaleSequenceError, PoisonElementError)
"""What a take raises to tell its reader once (skipped elements, a poison element),
after which the channel serves the reader on."""


class SiblingWaits:
    """The watches and fetches of one session.

    Args:
        reader_id: The reader the channels know.
        ports: How the session reads each channel.
        view: The owned channels and what is known of them.
        positions: Where the session reads each channel.
        pause: Holds fetches back while a seek is on its way.
        drop: Drops a channel that is no longer ours.
        tell_once: Reports an error a fetch raised to the next receive.
        receiving: Whether a receive is waiting now (it gets what fetches bring).
        poke: Wakes the waiting receive.
    """

    def __init__(
        self,
        reader_id: str,
        ports: Mapping[int, ReaderPort],
        view: OwnedView,
        positions: Positions,
        pause: SeekPause,
        *,
        drop: Callable[[int], None],
        tell_once: Callable[[BaseException], None],
        receiving: Callable[[], bool],
        poke: Callable[[], None],
    ) -> None:
        self._reader_id = reader_id
        self._ports = ports
        self._view = view
        self._positions = positions
        self._pause = pause
        self._drop = drop
        self._tell_once = tell_once
        self._receiving = receiving
        self._poke = poke
        self._watches: dict[int, asyncio.Task[None]] = {}
        self._watched: dict[int, CursorState | None] = {}  # channel -> what its watch knew
        self._fetches: dict[int, asyncio.Future[Any]] = {}  # channel -> its fetch
        self._fetched: list[Delivery] = []  # what fetches brought for the waiting receive

    @property
    def busy(self) -> Mapping[int, Any]:
        """The channels a fetch reads now: a take beside it could overtake it."""
        return self._fetches

    @property
    def fetched(self) -> bool:
        """Whether fetches brought something for the waiting receive."""
        return bool(self._fetched)

    # -- watches -----------------------------------------------------------------------

    def watch(self, channel: int, known: CursorState | None) -> None:
        """Watch ``channel`` until its cursor differs from ``known`` (once at a time).

        A watch still out for an older state is replaced: the state it waits to
        change from may be the one the channel is back at (a shared group's
        elements taken since, then acknowledged), so it would wait its whole
        timeout while the window counts holds that are gone.
        """
        out = self._watches.get(channel)
        if out is not None:
            if self._watched[channel] == known:
                return
            out.cancel()  # its caller stops waiting; the channel ends it at its timeout
        self._watched[channel] = known
        self._watches[channel] = asyncio.ensure_future(self._watch(channel, known))

    def stop_watch(self, channel: int) -> None:
        watch = self._watches.pop(channel, None)
        if watch is not None:
            watch.cancel()

    async def _watch(self, channel: int, known: CursorState | None) -> None:
        view = self._view
        lease = view.lease_of(channel)
        try:
            state = await self._ports[channel].watch(self._reader_id, lease, known)
        except asyncio.CancelledError:
            raise
        except NotOwnerError:
            if view.holds(channel, lease):
                self._drop(channel)
        except (ray.exceptions.TaskCancelledError, TopicNotFoundError):
            # Stopped, or the topic is being destroyed (as for a fetch: no failure).
            view.forget(channel)
        except TopicError as error:
            logger.warning("watch of channel %d failed: %s", channel, error)
            view.forget(channel)
        except Exception:
            logger.exception("watch of channel %d failed", channel)
            await asyncio.sleep(0.5)  # do not spin on a channel that keeps failing
            view.forget(channel)
        else:
            if view.holds(channel, lease):
                view.known[channel] = state
        finally:
            if self._watches.get(channel) is asyncio.current_task():
                del self._watches[channel]
        self._poke()

    # -- fetches -----------------------------------------------------------------------

    def fetch(self, channel: int, want: int) -> None:
        """Wait at ``channel`` for data and take up to ``want`` there (once at a time)."""
        if channel in self._fetches:
            return
        lease = self._view.lease_of(channel)

        async def fetch() -> Delivery:
            await self._pause.before_take()  # a seek on its way: take nothing before it lands
            return await self._positions.take(self._ports[channel], lease, want, WATCH_TIMEOUT)

        call = asyncio.ensure_future(fetch())
        self._fetches[channel] = call
        call.add_done_callback(lambda done: self._fetch_done(channel, lease, done))

    def _fetch_done(self, channel: int, lease: ReaderLease, call: asyncio.Future[Any]) -> None:
        """A fetch came back: what it brought goes to the receive waiting now, or
        reaches none (read again)."""
        if self._fetches.get(channel) is not call:
            if not call.cancelled() and call.exception() is None:
                self._positions.unhanded(call.result())  # ended by end_fetches()
            return
        del self._fetches[channel]
        if call.cancelled():
            return
        view = self._view
        error = call.exception()
        if isinstance(error, NotOwnerError | SubscriberClosedError):
            if view.holds(channel, lease):
                self._drop(channel)
        elif isinstance(error, TOLD_ONCE):
            view.forget(channel)
            self._positions.forget(channel)
            self._tell_once(error)  # the channel moved the cursor: report it once
        elif isinstance(error, TopicNotFoundError | ray.exceptions.TaskCancelledError):
            # The topic is being destroyed (the sibling heard it first), or the user
            # cancelled the receive (ray.cancel cancels its calls to the siblings too):
            # no failure; this channel's own end of receives tells the waiting receive.
            view.forget(channel)
        elif error is not None:
            logger.warning("fetch from channel %d failed: %s", channel, error)
            view.forget(channel)
        else:
            delivery: Delivery = call.result()
            if view.holds(channel, lease):
                view.learn(delivery)
            if delivery.count and self._receiving() and view.holds(channel, lease):
                self._fetched.append(delivery)
            else:
                self._positions.unhanded(delivery)
        self._poke()

    def use(self, room: int) -> list[Delivery]:
        """Hand over what fetches brought for the waiting receive, up to ``room``
        elements (a delivery larger than what is left is split: the rest is read
        again). An offer for a position the session no longer reads from is dropped:
        one kept for a receive that was cancelled as it came, whose elements the
        session's next takes read again."""
        used: list[Delivery] = []
        fetched, self._fetched = self._fetched, []
        positions = self._positions
        for delivery in fetched:
            if not positions.reads_from(delivery):
                self._view.forget(delivery.channel)  # (look at it again)
                continue
            if room <= 0 or not self._view.holds(delivery.channel, delivery.origin.lease):
                positions.unhanded(delivery)
                continue
            if delivery.count > room:
                delivery, rest = delivery.split(room)
                positions.handed(delivery, rest.first)
                positions.unhanded(rest)
            else:
                positions.handed(delivery)
            used.append(delivery)
            room -= delivery.count
        return used

    def end_fetches(self) -> None:
        """Leave the fetches still waiting to end on their own (what they bring reaches
        no receive); what came back unused reaches none either."""
        self._fetches.clear()
        for delivery in self._fetched:
            self._positions.unhanded(delivery)
        self._fetched = []
        self._poke()  # a receive still waiting looks again

    def close(self) -> None:
        """Stop every watch and fetch."""
        for watch in self._watches.values():
            watch.cancel()
        self._watches.clear()
        self.end_fetches()
