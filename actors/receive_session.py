"""A subscriber's receive session at one channel actor (the session's *home*).

Why sessions: ``receive()`` must return the ObjectRef of ONE actor call that
the subscriber's own process submits, yet complete when an element arrives
on ANY channel the subscriber owns. A subscriber sends each receive to one
channel actor, which serves a stream of receives one at a time in the order
the subscriber numbered them (so futures complete in order per channel). The
session takes from its own channel in-process first, from sibling channels
by actor call when its own has nothing, and when nothing is available
anywhere waits on all of them at once: a sibling's wait is a *fetch*, a take
that waits at the sibling until data comes and returns it ("take in watch"),
so an element reaches a waiting receive in one hop from its channel.

A receive can also be scoped to its home channel alone (``here_only``): an
iteration reads every owned channel that way, directly and in parallel, so
no element is relayed through another channel.

The session holds no positions: each channel keeps the reader's cursor, so a
receive that is cancelled, or a session that goes away, never leaves
elements taken but unseen (a take or fetch whose elements no receive
returns is handed back). What a fetch takes stays *lent* at its channel
until the session settles it (used, or given back, within a round trip):
meanwhile no other take of the reader runs there, so the reader's order per
channel holds however many sessions it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import ray

from raytopic.actors.receive.lending import LentTakes, log_failure
from raytopic.actors.receive.planner import (
    TakePlanner,
    in_scope,
    shares,
    take_groups,
    window_room,
)
from raytopic.actors.receive.ports import ReaderPort
from raytopic.actors.turns import Turns
from raytopic.core.errors import (
    NotOwnerError,
    PoisonElementError,
    StaleSequenceError,
    SubscriberClosedError,
    TopicError,
)
from raytopic.core.protocol import CursorState, Delivery, ReceivedBatch
from raytopic.core.resequencer import Resequence, ResequencedStream, ResequencerStats

logger = logging.getLogger(__name__)

__all__ = ["ReceiveSession", "SessionSpec"]

_SETTLE_POLL = 0.002
"""Seconds between looks while a seek waits for earlier receives to finish."""

_SETTLE_GAP = 5.0
"""Seconds a seek waits for an earlier receive that has not reached the session."""

_NOT_OWNED = object()

_TOLD_ONCE = (StaleSequenceError, PoisonElementError)
"""What a take raises to tell its reader once (skipped elements, a poison element),
after which the channel serves the reader on: reported by the next receive when
other channels' takes delivered meanwhile."""

RESEQUENCE_PULL = 4000
"""Elements a resequencing session takes at once to feed its resequencer."""


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """How a subscriber receives, given when its session opens."""

    reader_id: str
    """The reader the channels know (its cursor, or its group's cursor)."""
    complete_on_empty: bool
    """A receive with nothing to deliver completes with None / [] at once."""
    window: int | None
    """Most received-but-uncommitted elements, or None."""
    resequence: Resequence | None = None
    """Release what this session receives in sequence order (``_receive_resequenced``)."""


_MID_STREAM_TURN_WAIT = 0.2
"""Seconds the first receive of a stream waits for lower numbers in a session that
handles meet mid-stream (a restarted channel, a member back after a timeout)."""


class ReceiveSession:
    """One subscriber's receives at one channel actor (its home here).

    **Ordering**: receives run one at a time in the subscriber's numbering;
    within a channel elements come in sequence order; across channels the
    session goes round robin so no channel starves.

    **Delivery**: a take is the only thing that moves a cursor, and a take
    that the subscriber can no longer see (cancelled mid-call) is given back.
    """

    def __init__(
        self,
        spec: SessionSpec,
        ports: Mapping[int, ReaderPort],
        owned: Mapping[int, Any],
        home: int,
        *,
        mid_stream: bool = False,
    ) -> None:
        self.spec = spec
        self.home = home
        self.mid_stream = mid_stream
        self._ports = ports
        self._owned: dict[int, Any] = dict(owned)  # channel -> fence (None: anonymous)
        self._view_version = -1
        self._known: dict[int, CursorState] = {}
        self._watchers: dict[int, asyncio.Task[None]] = {}
        self._fetches: dict[int, tuple[str, asyncio.Future[Any]]] = {}  # channel -> (token, call)
        # What fetches brought for the receive waiting now: (delivery, fetch token).
        self._fetched: list[tuple[Delivery, str]] = []
        self._fetch_pause = 0.0  # loop time until which no fetch starts (a seek comes)
        self._seek_landed = asyncio.Event()  # set when the seek a pause waits for lands
        self._lent = LentTakes(
            spec.reader_id, home, ports, lambda channel: self._owned.get(channel)
        )
        self._resequenced: ResequencedStream | None = None
        if spec.resequence is not None:
            loop = asyncio.get_running_loop()
            self._resequenced = ResequencedStream(
                spec.resequence,
                spec.reader_id[:8],
                on_ready=lambda: loop.call_soon_threadsafe(self._poke),
            )
        self._wake = asyncio.Event()
        self._end_error: TopicError | None = None  # what receives raise once closed
        # Handles may come with their receive numbering under way (``mid_stream``:
        # the channel restarted, or the reader's last session here ended when its
        # group timed it out): a stream's first number is taken after a short wait
        # for lower ones, not the 5 s a gap waits for a call that never came.
        self._turns = Turns(unknown_start=_MID_STREAM_TURN_WAIT if mid_stream else None)
        self._planner = TakePlanner(home)
        self._stale: list[BaseException] = []  # StaleSequenceErrors still to report
        self._interrupted: dict[str, int] = {}  # stream -> receives up to it stop waiting
        self._waiting: dict[str, int] = {}  # stream -> its receive now waiting for a change
        self._started: dict[str, int] = {}  # stream -> the last receive that got its turn
        self.closed = False

    # -- control -------------------------------------------------------------

    def update_view(self, version: int, owned: Mapping[int, Any]) -> None:
        """Adopt a newer set of owned channels (and their fences)."""
        if version <= self._view_version:
            return
        self._view_version = version
        before, self._owned = self._owned, dict(owned)
        for channel in list(self._known):
            if self._owned.get(channel, _NOT_OWNED) != before.get(channel, _NOT_OWNED):
                del self._known[channel]  # lost, or granted anew: its cursor moved
        # A new view may come with a reset: what fetches hold may be from before it.
        self._end_fetches()

    def poke(self, channel: int | None = None) -> None:
        """Something changed at ``channel`` (or anywhere): look again.

        The home channel pokes on every change of its own; its cursor state is
        read in-process right away, so commits count for the window at once.
        """
        if channel is not None:
            if channel in self._owned and channel in self._ports:
                self._read_in_place(channel)
            else:
                self._known.pop(channel, None)
        self._poke()

    def _read_in_place(self, channel: int) -> CursorState | None:
        """Read a channel's cursor state without a call where its port can (the home
        channel), else forget what is known of it; drop the channel if it is no
        longer ours (the coordinator grants the new owner before it tells us)."""
        try:
            state = self._ports[channel].state_in_place(
                self.spec.reader_id, self._owned.get(channel)
            )
        except (NotOwnerError, SubscriberClosedError):
            self._drop(channel)
            return None
        if state is None:
            self._known.pop(channel, None)
        else:
            self._known[channel] = state
        return state

    def interrupt(self, stream: str, upto: int) -> None:
        """Receives of ``stream`` numbered up to ``upto`` stop waiting and complete
        with what there is now (its handle abandons them; ``ray.cancel`` would be
        unsafe: it can drop the reply of a receive that already took elements)."""
        if upto > self._interrupted.get(stream, -1):
            self._interrupted[stream] = upto
        self._poke()

    def close(self, error: TopicError | None = None) -> None:
        """End the session: waiting receives complete empty (or raise ``error``: the
        topic is being destroyed), watchers and fetches stop."""
        self.closed = True
        self._end_error = error
        for task in self._watchers.values():
            task.cancel()
        self._watchers.clear()
        self._end_fetches()
        if self._resequenced is not None:
            self._resequenced.close()
        self._poke()

    @property
    def resequencer_stats(self) -> ResequencerStats | None:
        """With ``resequence``: released, gaps, late and held counts; else None."""
        return None if self._resequenced is None else self._resequenced.stats

    # -- receiving -----------------------------------------------------------

    async def receive(
        self,
        stream: str,
        number: int,
        max_count: int,
        single: bool,
        spread: bool = False,
        here_only: bool = False,
    ) -> ReceivedBatch:
        """Serve one receive: up to ``max_count`` elements from one owned channel
        (this one first), or (``spread``) from several channels at once, or
        (``here_only``) from this channel alone."""
        async with self._turns.turn(stream, number):
            self._started[stream] = number  # running while it is still the stream's turn
            if self._resequenced is not None and not here_only:
                return await self._receive_resequenced(stream, number, max_count, single)
            return await self._receive(stream, number, max_count, single, spread, here_only)

    async def _receive_resequenced(
        self, stream: str, number: int, max_count: int, single: bool
    ) -> ReceivedBatch:
        """A receive of a resequencing subscriber: what the resequencer releases.

        It takes from the owned channels (as much as there is), feeds the
        resequencer, and returns once something is released: at once when
        elements come in order, after the hold window past a gap. With
        ``complete_on_empty`` it returns empty once the channels are empty
        and nothing is held.
        """
        resequenced = self._resequenced
        assert resequenced is not None
        while not self.closed:
            released = resequenced.take(1 if single else max_count)
            if released:
                return ReceivedBatch(released, single)
            if number <= self._interrupted.get(stream, -1):
                break
            pulled = await self._receive(
                stream, number, RESEQUENCE_PULL, False, True, False, until=lambda: resequenced.ready
            )
            if pulled.deliveries:
                resequenced.feed(
                    pair for delivery in pulled.deliveries for pair in delivery.one_by_one()
                )
            elif self.spec.complete_on_empty and not resequenced.ready:
                if not resequenced.held:
                    break
                # Only the hold window can release what is held now.
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), resequenced.poll_interval)
        return ReceivedBatch((), single)

    async def _receive(
        self,
        stream: str,
        number: int,
        max_count: int,
        single: bool,
        spread: bool,
        here_only: bool,
        until: Callable[[], bool] | None = None,
    ) -> ReceivedBatch:
        rechecked = False
        if self._stale:
            raise self._stale.pop(0)
        while not self.closed and not (until is not None and until()):
            room = self._room()
            if room > 0:
                deliveries = await self._take_any(
                    min(max_count, room), spread, here_only, local_first=not single
                )
                if deliveries:
                    return ReceivedBatch(deliveries, single)
                if self._known_available(here_only):
                    # A filter skipped everything read so far: read on, but
                    # let the actor's other calls run in between.
                    await asyncio.sleep(0)
                    continue
            if self.spec.complete_on_empty and not self._maybe_available(here_only):
                if room > 0 and not rechecked:
                    # What this session knows may be stale (no watcher keeps
                    # it fresh between receives): look at every owned
                    # channel once before answering "empty".
                    rechecked = True
                    deliveries = await self._take_from(
                        self._scope(here_only), min(max_count, room), spread
                    )
                    if deliveries:
                        return ReceivedBatch(deliveries, single)
                    continue
                break
            if number <= self._interrupted.get(stream, -1):
                break  # abandoned by its handle: nothing to wait for
            self._waiting[stream] = number
            try:
                await self._wait_for_change(room, min(max_count, room), here_only)
            finally:
                self._waiting.pop(stream, None)
            fetched = self._use_fetched(min(max_count, max(room, 0)))
            if fetched:
                return ReceivedBatch(fetched, single)
        if self.closed and self._end_error is not None:
            raise self._end_error
        return ReceivedBatch((), single)

    async def settle(self, stream: str, upto: int) -> None:
        """Return once every receive of ``stream`` numbered up to ``upto`` has finished,
        or waits for data (it has taken nothing, and those after it have not run).

        A seek calls this first, so receives sent before it complete before it
        takes effect, and only receives that found nothing see the new position.
        """
        loop = asyncio.get_running_loop()
        absent_since = None
        # What fetches took before the seek must not be handed out after it, and
        # none may take until the seek has landed (resume_fetches, or a while).
        self._fetch_pause = loop.time() + _SETTLE_GAP
        self._seek_landed.clear()
        self._end_fetches()
        while not self.closed:
            turn = self._turns.expected(stream)
            if turn > upto or self._waiting.get(stream) == turn:
                return
            if self._started.get(stream) == turn:
                absent_since = None  # running: it finishes or comes to wait
            elif absent_since is None:
                absent_since = loop.time()
            elif loop.time() - absent_since > _SETTLE_GAP:
                return  # never arrived (cancelled on its way): do not wait for it
            await asyncio.sleep(_SETTLE_POLL)

    def _room(self) -> int:
        known = self._known
        return window_room(self.spec.window, (known[c].unacked for c in self._owned if c in known))

    def _scope(self, here_only: bool) -> list[int]:
        """The owned channels a receive may read: this one first."""
        return in_scope(self._owned, self.home, here_only)

    def _known_available(self, here_only: bool = False) -> bool:
        known = self._known
        return any(c in known and known[c].available for c in self._scope(here_only))

    def _maybe_available(self, here_only: bool = False) -> bool:
        known = self._known
        return any(c not in known or known[c].available for c in self._scope(here_only))

    async def _take_any(
        self, max_count: int, spread: bool, here_only: bool, local_first: bool
    ) -> list[Delivery]:
        """Take from the owned channels that may have data, next in turn first (so
        no channel starves), or (``local_first``) this channel first when it may
        have data: a batch is sent where its handle expects data.

        A receive takes from one channel. A large ``spread`` receive takes from
        several channels at once, each up to its share of ``max_count`` (never
        more in total, so nothing is taken that this receive does not return):
        a relayed batch from one sibling does not hold up the others.
        """
        known = self._known
        candidates = self._planner.candidates(
            self._scope(here_only),
            lambda c: c not in known or known[c].available,
            self._fetches,
            local_first=local_first,
        )
        if not candidates:
            return []
        return await self._take_from(candidates, max_count, spread)

    async def _take_from(
        self, candidates: list[int], max_count: int, spread: bool
    ) -> list[Delivery]:
        """Take from the first of ``candidates`` with data, or from several at once."""
        for planned in take_groups(candidates, max_count, spread):
            group = [c for c in planned if c in self._owned]  # (revoked meanwhile)
            if not group:
                continue
            if len(group) == 1:  # the common case: no task, no extra loop turn
                try:
                    outcomes: list[Any] = [await self._take(group[0], max_count)]
                except _TOLD_ONCE as error:
                    outcomes = [error]
            else:
                outcomes = await self._take_several(group, max_count)
            deliveries = [o for o in outcomes if isinstance(o, Delivery) and o.count]
            errors = [o for o in outcomes if isinstance(o, BaseException)]
            failures = [e for e in errors if not isinstance(e, _TOLD_ONCE)]
            if failures:
                # Nobody will see what the other channels handed over: give it back.
                await asyncio.gather(*(self._lent.give_back(d) for d in deliveries))
                raise failures[0]
            if errors:
                if not deliveries:
                    self._stale.extend(errors[1:])
                    raise errors[0]
                # Elements were taken elsewhere: deliver them; the skipped
                # elements are reported by the next receives.
                self._stale.extend(errors)
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
            asyncio.ensure_future(self._take(channel, share, returning))
            for channel, share in zip(group, shares(max_count, len(group)), strict=True)
        ]
        try:
            await asyncio.wait(takes)
        except asyncio.CancelledError:
            for take in takes:
                self._lent.return_when_done(take)
            raise
        return [take.exception() or take.result() for take in takes]

    async def _take(
        self, channel: int, max_count: int, returning: list[asyncio.Future[Any]] | None = None
    ) -> Delivery | None:
        """Take from one channel, after the give-backs still on their way (``returning``:
        those registered when the take was decided; default: now)."""
        await self._lent.after_give_backs(returning)
        port = self._ports[channel]
        if channel not in self._owned:
            return None  # revoked since the candidates were chosen
        fence = self._owned[channel]
        try:
            delivery = await port.take(self.spec.reader_id, fence, max_count, self._lent)
        except (NotOwnerError, SubscriberClosedError):
            # Lost the channel, or the reader is being closed there (close(),
            # destroy_group): the home's own close ends this receive with None.
            # (A newer lease for the channel may have arrived meanwhile: keep it.)
            if self._owned.get(channel) == fence:
                self._drop(channel)
            return None
        except _TOLD_ONCE:
            self._known.pop(channel, None)
            raise
        self._learn(delivery)
        return delivery

    def _learn(self, delivery: Delivery) -> None:
        """Remember the cursor state a delivery reports."""
        self._known[delivery.channel] = CursorState(
            delivery.next,
            delivery.committed,
            delivery.tail,
            delivery.jumps,
            unacked=delivery.unacked,
            stopped=delivery.stopped,
        )

    def _drop(self, channel: int) -> None:
        self._owned.pop(channel, None)
        self._known.pop(channel, None)
        watcher = self._watchers.pop(channel, None)
        if watcher is not None:
            watcher.cancel()

    # -- waiting -------------------------------------------------------------

    async def _wait_for_change(self, room: int, want: int, here_only: bool) -> None:
        """Wait until something may let a receive go on: data on an owned channel
        (a fetch may bring it along), a commit that frees the window, a new view,
        an interrupt or the close."""
        self._wake.clear()  # before looking: a poke from here on is not lost
        window_full = room <= 0
        for channel in self._scope(here_only):
            try:
                in_place = self._ports[channel].state_in_place(
                    self.spec.reader_id, self._owned.get(channel)
                )
            except (NotOwnerError, SubscriberClosedError):
                self._drop(channel)
                continue
            if in_place is not None:
                # Read in place, never watched: the channel pokes this session on
                # every change (and with the window full no take would refresh a
                # watched state: this loop would spin).
                self._known[channel] = in_place
                if in_place.available and not window_full:
                    return  # takeable now: look again
                continue
            known = self._known.get(channel)
            if known is not None and known.available and not window_full:
                continue  # takeable now; no need to wait on it
            if window_full or self.spec.window is not None:
                # A window counts what fetches take: only watch, take on a change.
                if channel not in self._watchers:
                    self._watchers[channel] = asyncio.ensure_future(self._watch(channel, known))
            elif channel not in self._fetches:
                self._start_fetch(channel, want)
        if self.closed or self._fetched:
            return
        await self._wake.wait()

    def _start_fetch(self, channel: int, want: int) -> None:
        """Wait at a sibling for data and take it there ("take in watch")."""
        token = self._lent.token()
        fence = self._owned.get(channel)
        returning = list(self._lent.returning)

        async def fetch() -> Delivery:
            pause = self._fetch_pause - asyncio.get_running_loop().time()
            if pause > 0:  # a seek is on its way: take nothing before it lands
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._seek_landed.wait(), pause)
            if returning:  # a give-back still on its way must land before we take
                await asyncio.wait(returning)
            return await self._ports[channel].fetch(self.spec.reader_id, fence, want, token)

        call = asyncio.ensure_future(fetch())
        self._fetches[channel] = (token, call)
        call.add_done_callback(lambda done: self._fetch_done(channel, fence, done))

    def _fetch_done(self, channel: int, fence: Any, call: asyncio.Future[Any]) -> None:
        """A fetch came back: what it took goes to the receive waiting now, or is
        given back at once (the channel lends it until then: see ``settle_take``)."""
        entry = self._fetches.get(channel)
        if entry is None or entry[1] is not call:
            return  # ended by _end_fetches, which settles it
        token = entry[0]
        del self._fetches[channel]
        if call.cancelled():
            return
        error = call.exception()
        if isinstance(error, NotOwnerError | SubscriberClosedError):
            if self._owned.get(channel) == fence:
                self._drop(channel)
        elif isinstance(error, _TOLD_ONCE):
            self._known.pop(channel, None)
            self._stale.append(error)  # the channel moved the cursor: report it once
        elif error is not None:
            logger.warning("fetch from channel %d failed: %s", channel, error)
            self._known.pop(channel, None)
        else:
            delivery: Delivery = call.result()
            if self._owned.get(channel) == fence:
                self._learn(delivery)
            if delivery.count:
                if self._waiting and self._owned.get(channel) == fence:
                    self._fetched.append((delivery, token))
                else:
                    self._lent.settle(delivery, token, delivery.first)
        self._poke()

    def _use_fetched(self, room: int) -> list[Delivery]:
        """What fetches brought for the waiting receive, up to ``room`` elements
        (a delivery larger than what is left is split); the rest is given back."""
        used: list[Delivery] = []
        fetched, self._fetched = self._fetched, []
        for delivery, token in fetched:
            if room <= 0 or self._owned.get(delivery.channel) != delivery.origin.fence:
                self._lent.settle(delivery, token, delivery.first)
                continue
            if delivery.count > room:
                delivery, rest = delivery.split(room)
                self._lent.settle(delivery, token, rest.first)
            else:
                self._lent.settle(delivery, token, None)
            used.append(delivery)
            room -= delivery.count
        return used

    def _end_fetches(self) -> None:
        """Stop the fetches still waiting; what they (or the ones back but unused)
        took is given back."""
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

    def resume_fetches(self) -> None:
        """The seek a settle announced has landed: fetches may take again."""
        self._fetch_pause = 0.0
        self._seek_landed.set()  # a fetch paused for it takes now, not when the pause ends
        self._poke()

    async def _watch(self, channel: int, known: CursorState | None) -> None:
        fence = self._owned.get(channel)
        try:
            state = await self._ports[channel].watch(self.spec.reader_id, fence, known)
        except asyncio.CancelledError:
            raise
        except NotOwnerError:
            if self._owned.get(channel) == fence:
                self._drop(channel)
        except ray.exceptions.TaskCancelledError:
            self._known.pop(channel, None)
        except TopicError as error:
            logger.warning("watch of channel %d failed: %s", channel, error)
            self._known.pop(channel, None)
        except Exception:
            logger.exception("watch of channel %d failed", channel)
            await asyncio.sleep(0.5)  # do not spin on a channel that keeps failing
            self._known.pop(channel, None)
        else:
            if self._owned.get(channel) == fence:
                self._known[channel] = state
        finally:
            if self._watchers.get(channel) is asyncio.current_task():
                del self._watchers[channel]
        self._poke()

    def _poke(self) -> None:
        self._wake.set()
