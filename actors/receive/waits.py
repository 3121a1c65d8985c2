"""A session's waits at the channels it cannot read in place (its host's siblings):
*watches* (until the cursor changes) and *fetches* (takes that wait for data, so an
element reaches a waiting receive in one hop from its channel).

A fetch takes the channel's next elements whenever they come, so no other take of
the session runs at that channel meanwhile (see ``busy``). What a fetch took is
lent until settled: used by the receive waiting now, or given back at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import ray

from raytopic.actors.receive.lending import LentTakes, log_failure
from raytopic.actors.receive.pause import SeekPause
from raytopic.actors.receive.ports import ReaderPort
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
        lent: The session's lent takes (tokens, settles, give-backs).
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
        lent: LentTakes,
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
        self._lent = lent
        self._pause = pause
        self._drop = drop
        self._tell_once = tell_once
        self._receiving = receiving
        self._poke = poke
        self._watches: dict[int, asyncio.Task[None]] = {}
        self._fetches: dict[int, tuple[str, asyncio.Future[Any]]] = {}  # channel -> (token, call)
        # What fetches brought for the receive waiting now: (delivery, fetch token).
        self._fetched: list[tuple[Delivery, str]] = []

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
        """Watch ``channel`` until its cursor differs from ``known`` (once at a time)."""
        if channel not in self._watches:
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
        token = self._lent.token()
        lease = self._view.lease_of(channel)
        returning = list(self._lent.returning)

        async def fetch() -> Delivery:
            await self._pause.before_take()  # a seek on its way: take nothing before it lands
            await self._lent.after_give_backs(returning)  # they must land before we take
            return await self._ports[channel].fetch(self._reader_id, lease, want, token, self._lent)

        call = asyncio.ensure_future(fetch())
        self._fetches[channel] = (token, call)
        call.add_done_callback(lambda done: self._fetch_done(channel, lease, done))

    def _fetch_done(self, channel: int, lease: ReaderLease, call: asyncio.Future[Any]) -> None:
        """A fetch came back: what it took goes to the receive waiting now, or is
        given back at once (the channel lends it until then)."""
        entry = self._fetches.get(channel)
        if entry is None or entry[1] is not call:
            return  # ended by end(), which settles it
        token = entry[0]
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
            self._tell_once(error)  # the channel moved the cursor: report it once
        elif isinstance(error, TopicNotFoundError):
            # The topic is being destroyed (the sibling heard it first): no failure;
            # this channel's own end of receives tells the waiting receive.
            view.forget(channel)
        elif error is not None:
            logger.warning("fetch from channel %d failed: %s", channel, error)
            view.forget(channel)
        else:
            delivery: Delivery = call.result()
            if view.holds(channel, lease):
                view.learn(delivery)
            if delivery.count:
                if self._receiving() and view.holds(channel, lease):
                    self._fetched.append((delivery, token))
                else:
                    self._lent.settle(delivery, token, delivery.first)
        self._poke()

    def use(self, room: int) -> list[Delivery]:
        """What fetches brought for the waiting receive, up to ``room`` elements
        (a delivery larger than what is left is split); the rest is given back."""
        used: list[Delivery] = []
        fetched, self._fetched = self._fetched, []
        for delivery, token in fetched:
            if room <= 0 or not self._view.holds(delivery.channel, delivery.origin.lease):
                self._lent.settle(delivery, token, delivery.first)
                continue
            if delivery.count > room:
                delivery, rest = delivery.split(room)
                self._lent.settle(delivery, token, rest.first)
            else:
                self._lent.settle_used(delivery, token)  # rides on the next take there
            used.append(delivery)
            room -= delivery.count
        return used

    def end_fetches(self) -> None:
        """Stop the fetches still waiting; what they (or the ones back but unused)
        took is given back; the settles waiting to ride go now."""
        self._lent.send_riding()
        for channel, (token, call) in list(self._fetches.items()):
            del self._fetches[channel]
            if not call.done():
                stop = asyncio.ensure_future(self._ports[channel].stop_fetch(token))
                stop.add_done_callback(log_failure)
            call.add_done_callback(lambda done, token=token: self._lent.settle_unused(done, token))
        for delivery, token in self._fetched:
            self._lent.settle(delivery, token, delivery.first)
        self._fetched = []
        self._poke()  # a receive still waiting looks again

    def close(self) -> None:
        """Stop every watch and fetch (what fetches took is given back)."""
        for watch in self._watches.values():
            watch.cancel()
        self._watches.clear()
        self.end_fetches()
