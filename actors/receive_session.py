"""A subscriber's receive session at one channel actor (the session's *host*).

Why sessions: ``receive()`` must return the ObjectRef of ONE actor call that
the subscriber's own process submits, yet complete when an element arrives
on ANY channel the subscriber owns. A subscriber sends each receive to one
channel actor, which serves a stream of receives one at a time in the order
the subscriber numbered them (so futures complete in order per channel). The
session takes from its own channel in process first, from sibling channels
by actor call when its own has nothing, and when nothing is available
anywhere waits on all of them at once: a sibling's wait is a *fetch*, a take
that waits at the sibling until data comes and returns it ("take in watch"),
so an element reaches a waiting receive in one hop from its channel.

A receive can also be scoped to its host channel alone (``here_only``): an
iteration reads every owned channel that way, directly and in parallel, so
no element is relayed through another channel.

The session owns its reader's read positions (:class:`Positions`): every take
names the position it reads from, so what a receive does not hand over (it was
cancelled, a take beside it failed, a fetch came back to no receive) is simply
read again, and nothing a channel hands out is lent or given back. A channel
keeps the reader's commit and where its read position stands; a session that
knows no position there reads on from it.

This module composes the session from its parts (``raytopic.actors.receive``):
the view of the owned channels (:class:`OwnedView`), its positions, the take
planner (:class:`TakePlanner`) and the takes that carry out its plan
(:class:`Takes`), the ports the channels are read through (:class:`ReaderPort`),
the watches and fetches at the siblings (:class:`SiblingWaits`) and a pause
(:class:`SeekPause`). What is left here is a receive itself: its turn, take or
wait, and the window and resequencing around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raytopic.actors.receive.handed import HandedReceives
from raytopic.actors.receive.handover import HandOver
from raytopic.actors.receive.pause import SeekPause
from raytopic.actors.receive.planner import TakePlanner
from raytopic.actors.receive.ports import ReaderPort
from raytopic.actors.receive.positions import Positions
from raytopic.actors.receive.takes import Takes
from raytopic.actors.receive.view import OwnedView
from raytopic.actors.receive.waits import SiblingWaits
from raytopic.actors.timers import call_when
from raytopic.actors.turns import DuplicateTurnError, Turns
from raytopic.core.errors import (
    NotOwnerError,
    ReceivePassedOverError,
    SubscriberClosedError,
    TopicError,
)
from raytopic.core.protocol import CursorState, Delivery, ReceivedBatch
from raytopic.core.resequenced_stream import ResequencedStream
from raytopic.core.resequencer import Resequence, ResequencerStats

if TYPE_CHECKING:
    from raytopic.core.protocol import ReaderLease

logger = logging.getLogger(__name__)

__all__ = ["ReceiveSession", "SessionSpec"]

RESEQUENCE_PULL = 4000
"""Elements a resequencing session takes at once to feed its resequencer."""

_LOOK_PAUSE = 0.005
"""Seconds between a look's takes when the last ones brought nothing (see ``_look``)."""


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
    """One subscriber's receives at one channel actor (its host here).

    **Ordering**: receives run one at a time in the subscriber's numbering;
    within a channel elements come in sequence order; across channels the
    session goes round robin so no channel starves.

    **Delivery**: what a receive does not hand over (cancelled mid-call, a
    take beside it failed) is read again by the session's next take there; a
    shared group's element is kept for the session's next receive (its hold,
    not a position, is the record).

    Args:
        spec: How the subscriber receives.
        ports: How to read each channel of the topic (index = channel).
        owned: The channels the reader owns now, with its lease at each.
        host: The channel hosting this session.
        mid_stream: Handles meet this session with their numbering under way (its
            host restarted, or the reader's last session here ended): its first
            take at each channel reads again after the commit.
    """

    def __init__(
        self,
        spec: SessionSpec,
        ports: Mapping[int, ReaderPort],
        owned: Mapping[int, ReaderLease],
        host: int,
        *,
        mid_stream: bool = False,
    ) -> None:
        self.spec = spec
        self.host = host
        self.mid_stream = mid_stream
        self.view = OwnedView(owned, host, spec.window)
        self._ports = ports
        self._planner = TakePlanner(host)
        self._pause = SeekPause()
        self._positions = Positions(
            spec.reader_id, again=mid_stream, unhanded=self._unhanded, passed=self._passed
        )
        self._held: list[Delivery] = []  # a shared group's elements no receive handed over
        # The fast path (``take_for_waiting``): what the receive waiting now takes from
        # the host channel when it changes (None: it takes for itself), whether it
        # changed since, and what was taken for it, not yet handed over.
        self._wants: int | None = None
        self._host_changed = False
        self._offered: Delivery | None = None
        self._takes = Takes(
            ports, self.view, self._positions, drop=self._drop, tell_once=self._tell_once
        )
        self._waits = SiblingWaits(
            spec.reader_id,
            ports,
            self.view,
            self._positions,
            self._pause,
            drop=self._drop,
            tell_once=self._tell_once,
            receiving=lambda: bool(self._waiting),
            poke=self._poke,
        )
        self._resequenced: ResequencedStream | None = None
        self.handover = HandOver()
        """What a resequencing session took and has not handed over: each element's
        hand-over mark, and how far commits may go (its marks and floors)."""
        self.handed = HandedReceives(
            self._positions, self.view.forget, self._poke, put_back=self._put_back
        )
        """Where recent answers began: a reply Ray dropped is read again from there."""
        if spec.resequence is not None:
            loop = asyncio.get_running_loop()
            self._resequenced = ResequencedStream(
                spec.resequence,
                spec.reader_id[:8],
                on_ready=lambda: loop.call_soon_threadsafe(self._poke),
                on_late=lambda item: self.handover.late(item.channel, item.first),
                origin=lambda item: (item.channel, item.first),
            )
        self._fed_jumps: dict[int, int] = {}  # channel -> jump count of what was fed last
        # What was known of each channel when the resequencer's look began (see _look).
        self._known_before_look: dict[int, CursorState] = {}
        self._told_pinned = False  # a window full of held elements passed a gap (logged)
        # A seek may have landed (a pause ended, a new view came): a resequencing
        # session looks at every channel's jump count before it hands anything over.
        self._look_again = False
        self._wake = asyncio.Event()
        self._end_error: TopicError | None = None  # what receives raise once closed
        # Handles may come with their receive numbering under way (``mid_stream``:
        # the channel restarted, or the reader's last session here ended when its
        # group timed it out): a stream's first number is taken after a short wait
        # for lower ones, not the 5 s a gap waits for a call that never came.
        self._turns = Turns(unknown_start=_MID_STREAM_TURN_WAIT if mid_stream else None)
        self._stale: list[BaseException] = []  # what takes told once, still to report
        self._interrupted: dict[str, int] = {}  # stream -> receives up to it stop waiting
        self._waiting: dict[str, int] = {}  # stream -> its receive now waiting for a change
        self._started: dict[str, int] = {}  # stream -> the last receive that got its turn
        self.closed = False

    # -- control -------------------------------------------------------------

    def update_view(self, version: int, owned: Mapping[int, ReaderLease]) -> None:
        """Adopt a newer set of owned channels (and their leases)."""
        if self.view.update(version, owned):
            # A new view may come with a reset: what fetches hold may be from before it.
            self._drop_offer()
            self._waits.end_fetches()
            self._look_again = True

    def poke(self, channel: int | None = None) -> bool:
        """Something changed at ``channel`` (or anywhere): look again. Returns whether
        a receive was waiting for a change.

        The host channel pokes on every change of its own; its cursor state is
        read in place right away, so commits count for the window at once (a
        receive waiting with no window only learns that it changed: the request
        that changed it then takes for it, see :meth:`take_for_waiting`).
        """
        if channel == self.host and self._wants is not None:
            self._host_changed = True
            self.view.forget(channel)
            self._poke()
            return True
        if channel is not None and (
            not self.view.owns(channel)
            or channel not in self._ports
            or self._read_in_place(channel) is None
        ):
            self.view.forget(channel)  # (a sibling's state takes a call: look again)
        self._poke()
        return bool(self._waiting)

    def take_for_waiting(self) -> None:
        """The fast path from a publish to the receive waiting for it: once the request
        that changed the host channel is done (and durable), and before the receive it
        woke runs, take for that receive in place, from the session's position (no
        state read, no plan, no task); the receive hands it over when it resumes. A
        take that would wait, or finds nothing, is left to the receive (it looks
        again), and so is every receive in a pause, a window or a resequencer."""
        want, changed, self._host_changed = self._wants, self._host_changed, False
        if want is None or not changed or self._offered is not None or self._pause.holding():
            return
        try:
            delivery = self._takes.take_now(self.host, want)
        except (NotOwnerError, SubscriberClosedError):
            return  # the receive finds out, taking for itself
        except Exception as error:  # told once, or raised: the receive raises it, not the
            self._tell_once(error)  # publish (which is done)
            return
        if delivery is not None and delivery.count:
            self._offered = delivery

    def _use_offered(self, room: int) -> list[Delivery]:
        """What :meth:`take_for_waiting` took for the receive that resumes now (none if
        it lost the channel meanwhile, or may take fewer: read again)."""
        offered, self._offered = self._offered, None
        if offered is None:
            return []
        if offered.count > room or not self.view.holds(offered.channel, offered.origin.lease):
            self._positions.unhanded(offered)
            return []
        return [offered]

    def _drop_offer(self) -> None:
        """What was taken for a waiting receive reaches none (the session still reads
        from its first element)."""
        offered, self._offered = self._offered, None
        if offered is not None:
            self._positions.unhanded(offered)

    def interrupt(self, stream: str, upto: int) -> None:
        """Receives of ``stream`` numbered up to ``upto`` stop waiting and complete
        with what there is now (its handle abandons them; ``ray.cancel`` would be
        unsafe: it can drop the reply of a receive that already took elements)."""
        if upto > self._interrupted.get(stream, -1):
            self._interrupted[stream] = upto
        self._poke()

    async def pause(self, stream: str, upto: int) -> None:
        """A seek (or a reading elsewhere: an iteration) is on its way: return once
        every receive of ``stream`` numbered up to ``upto`` has finished, or waits for
        data (it has taken nothing, and those after it have not run), and the
        reader's read position at each channel stands where this session reads
        on; no fetch takes until :meth:`resume` (or a while).

        So receives sent before the seek complete before it takes effect, only
        receives that found nothing see the new position, and whatever reads the
        reader's channels next reads on exactly where this session stopped.
        """
        # What fetches bring before the seek must not be handed out after it.
        self._pause.begin()
        self._drop_offer()
        self._waits.end_fetches()
        await self._pause.after_earlier(
            upto,
            expected=lambda: self._turns.expected(stream),
            waiting=lambda: self._waiting.get(stream),
            started=lambda: self._started.get(stream),
            closed=lambda: self.closed,
        )
        await self._read_again_first()
        await asyncio.gather(
            *(
                self._positions.take(self._ports[channel], lease, 0)
                for channel, lease in self._positions.to_hand_back(self.view.lease_of)
            ),
            return_exceptions=True,  # a channel lost meanwhile reads on where it stands
        )

    async def _read_again_first(self) -> None:
        """A session that replaces one lost with its host (``mid_stream``) reads again
        after the commit at every owned channel before it answers a receive or a
        pause: what its predecessor took there may never have been handed over, and
        once this session answers, the reader may read those channels at their own
        sessions (the next batch in turn, an iteration) and commit past it there.
        Once per channel (a channel that failed is tried again next time)."""
        channels = self._positions.to_read_again(self.view.scope(False))
        if channels:
            await asyncio.gather(
                *(
                    self._positions.take(self._ports[channel], self.view.lease_of(channel), 0)
                    for channel in channels
                    if channel in self._ports
                ),
                return_exceptions=True,  # not ours any more, or lost: read on as told
            )

    def resume(self) -> None:
        """The seek a pause announced has landed: fetches may take again."""
        self._pause.end()
        self._look_again = True
        self._poke()

    def close(self, error: TopicError | None = None) -> None:
        """End the session: waiting receives complete empty (or raise ``error``: the
        topic is being destroyed), watches and fetches stop."""
        self.closed = True
        self._end_error = error
        self._held = []  # their holds end (the channels release a closed member's)
        self._drop_offer()
        self._waits.close()
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
        (``here_only``) from this channel alone.

        Raises:
            ReceivePassedOverError: a later receive of ``stream`` ran here before this
                one came; this one took nothing.
        """
        try:
            async with self._turns.turn(stream, number):
                self._started[stream] = number  # running while it is still the stream's turn
                await self._read_again_first()
                if self._resequenced is not None and not here_only:
                    released = await self._receive_resequenced(stream, number, max_count, single)
                    self.handed.released(stream, number, released)
                    return ReceivedBatch([self._hand_over(item) for item in released], single)
                batch = await self._receive(stream, number, max_count, single, spread, here_only)
                self.handed.answered(stream, number, batch.deliveries)
                return batch
        except DuplicateTurnError:
            # A later receive of the stream ran before this one came (Ray delivered it
            # to a restarted host after one sent later, or it came past the gap): what
            # this one took would come out of order, so it takes nothing and says so.
            raise ReceivePassedOverError(
                f"receive {number} of {stream!r} came to channel {self.host} after a "
                "later one had run there: it took nothing"
            ) from None

    async def _receive_resequenced(
        self, stream: str, number: int, max_count: int, single: bool
    ) -> list[Delivery]:
        """A receive of a resequencing subscriber: what the resequencer releases.

        It takes from the owned channels (as much as there is), feeds the
        resequencer, and returns once something is released: at once when
        elements come in order; past a gap once a head's hold window ended and
        the session then read every owned channel up to where it ended (see
        :meth:`_look`). With ``complete_on_empty`` it returns empty once the
        channels are empty and nothing is held. Each element goes out stamped
        with its hand-over mark (see ``raytopic.actors.receive.handover``).
        """
        resequenced = self._resequenced
        assert resequenced is not None
        while not self.closed:
            if self._look_again:
                # What was released before a seek must not be handed over after it.
                self._look_again = False
                await asyncio.shield(self._take_back(resequenced, []))
            released = resequenced.take(1 if single else max_count)
            if released:
                return released
            if number <= self._interrupted.get(stream, -1):
                break
            if resequenced.look_due(time.monotonic()):
                if not await self._look(resequenced):
                    # The window is full and the member's commits can free it: the
                    # look waits for them, as any receive at the window does.
                    await self._receive(
                        stream,
                        number,
                        0,
                        False,
                        True,
                        False,
                        until=lambda: resequenced.ready or self.view.room() > 0,
                    )
                continue
            due = resequenced.due()
            timers: list[asyncio.TimerHandle] = []
            if due is not None:  # a poke when the first hold window ends: look then
                call_when(due, self._poke, timers)
            try:
                pulled = await self._receive(
                    stream,
                    number,
                    RESEQUENCE_PULL,
                    False,
                    True,
                    False,
                    until=lambda: resequenced.ready or resequenced.look_due(time.monotonic()),
                )
            finally:
                for timer in timers:
                    timer.cancel()
            if pulled.deliveries:
                await self._feed_pulled(resequenced, pulled.deliveries)
            elif self.spec.complete_on_empty and not resequenced.ready:
                due = resequenced.due()
                if due is None:
                    if not resequenced.held:
                        break
                    continue  # a look is due
                # Only the hold window can release what is held now.
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(due - time.monotonic(), 0.0))
        return []

    async def _look(self, resequenced: ResequencedStream) -> bool:
        """A held head's hold window ended: read every owned channel before it goes out
        past its gap. Only what the session looked at counts: the window goes on between
        receives, and a number stored in its channel in time but not read yet (the
        user's loop was slow to receive again) would come after its successor went
        out, dropped as late. The fetches out end (none reads beside the look), and the
        look takes from every owned channel not read since it began or not up to where
        it ended then, until none is left (see ``ResequencedStream.looked``), or
        something is released (handed over first: the look goes on with the next
        receive).

        With the member's window full the look reads nothing and waits, as a receive
        at the window does, while a commit of what the member was handed can free room
        (returns False: the look goes on once there is room). Only a window full of what
        the resequencer itself holds, which no commit frees, ends it past the gaps: the
        window bounds what the resequencer holds, as ``capacity`` does.

        Returns:
            Whether the look ended or something was released (False: it waits for room).
        """
        if resequenced.look(time.monotonic()):
            self._waits.end_fetches()
            self._known_before_look = dict(self.view.known)
        idle = False
        counted = False  # whether the window's count was read at every channel
        while not self.closed and not resequenced.ready:
            room = max(self.view.room(), 0)
            if room == 0 and not counted:
                # Commits go to the channels themselves: what the session knows of the
                # window may be stale. A take of nothing at each tells it afresh.
                counted = True
                await self._takes.take_from(self.view.scope(False), 0, False)
                continue
            reads = {
                c: self._read_since_look(c) for c in self.view.scope(False) if c in self._ports
            }
            pinned = room == 0 and not self._commits_free_room()
            unread = resequenced.looked(reads, blocked=pinned)
            if not unread:
                if pinned and resequenced.ready:
                    self._tell_pinned()
                return True
            if room == 0:
                return False
            if idle:  # the last takes brought nothing, yet left a channel unread
                await asyncio.sleep(_LOOK_PAUSE)
            deliveries = await self._takes.take_from(unread, min(RESEQUENCE_PULL, room), True)
            idle = not deliveries
            counted = counted and not deliveries
            for delivery in deliveries:  # the session's now: it reads on after them
                self._positions.handed(delivery)
            await self._feed_pulled(resequenced, deliveries)
        return True

    def _commits_free_room(self) -> bool:
        """Whether a commit of an element the session handed over frees room in the
        window: it moves the commit of a channel with elements received, not committed
        (a commit goes no further than its element's hand-over mark)."""
        return any(
            state.unacked > 0 and self.handover.commits_past(channel, state.committed)
            for channel, state in self.view.known.items()
            if self.view.owns(channel)
        )

    def _tell_pinned(self) -> None:
        """Log, once per session, that a window full of held elements passed a gap."""
        if not self._told_pinned:
            self._told_pinned = True
            logger.warning(
                "reader %s: its window (%s) is full of elements the resequencer holds, "
                "which no commit frees: heads whose hold window ended went out past their "
                "gaps (a number still to read there is dropped as late). A window above "
                "the most elements a key holds out of order keeps them in order.",
                self.spec.reader_id[:8],
                self.spec.window,
            )

    def _read_since_look(self, channel: int) -> tuple[int, int] | None:
        """Where the session reads ``channel`` (next, last stored) as a take since the
        look began told (None: none did); a cursor stopped before a poison element is
        read to its end (nothing past it can be read)."""
        known = self.view.known.get(channel)
        if known is None or known is self._known_before_look.get(channel):
            return None
        return (known.next if known.available else known.tail + 1), known.tail

    async def _feed_pulled(
        self, resequenced: ResequencedStream, deliveries: Sequence[Delivery]
    ) -> None:
        """Feed what a take brought, taking back first what a jump sent back."""
        if any(self._jumped(delivery) for delivery in deliveries):
            # Shielded: what the pull took is the session's now (it reads on after
            # it), so it is fed even if this receive is cancelled meanwhile.
            await asyncio.shield(self._take_back(resequenced, deliveries))
        elif deliveries:
            self._feed(resequenced, deliveries)

    def _feed(self, resequenced: ResequencedStream, deliveries: Sequence[Delivery]) -> None:
        """Feed what a pull took into the resequencer."""
        for delivery in deliveries:
            self._fed_jumps[delivery.channel] = delivery.jumps
        pairs = [pair for delivery in deliveries for pair in delivery.one_by_one()]
        for _, item in pairs:
            self.handover.taken(item.channel, item.first)
        resequenced.feed(pairs)

    async def _take_back(
        self, resequenced: ResequencedStream, deliveries: Sequence[Delivery]
    ) -> None:
        """A channel whose read position jumped since this session last fed from it
        (a seek, a group reset, an aborted transaction's rewind, a new owner, its
        restart) delivers again from the delivery's first position: the resequencer
        takes back what it holds or released from it there on, so each comes
        again, in order (see ``Resequencer.rewind``). The jump count comes with every
        take's reply, so the session learns of a jump before it feeds anything read
        after it, whoever made the jump. A jump seldom comes alone (a seek to the
        commit, a reset, an abort move every channel): the other owned channels are
        looked at first (a take of nothing), or the numbers of one channel would be
        released again before those of another whose jump is not known yet. Then
        ``deliveries`` (none: only a look after a seek) are fed."""
        fed = {delivery.channel for delivery in deliveries}
        others = [  # (a channel never fed from has nothing to take back)
            c
            for c in self.view.scope(False)
            if c not in fed and c in self._fed_jumps and c in self._ports
        ]
        looks = await asyncio.gather(
            *(self._positions.take(self._ports[c], self.view.lease_of(c), 0) for c in others),
            return_exceptions=True,  # not ours any more, or lost: read on as told
        )
        for delivery in [*deliveries, *(d for d in looks if isinstance(d, Delivery))]:
            if self._jumped(delivery):
                for item in resequenced.rewind(delivery.channel, delivery.first):
                    self.handover.dropped(item.channel, item.first)
                self.handover.rewound(delivery.channel, delivery.first)
            self._fed_jumps[delivery.channel] = delivery.jumps
        self._feed(resequenced, deliveries)

    def _passed(self, channel: int, first: int, last: int) -> None:
        """A take at ``channel`` read past done positions ``first..last`` (a committed
        transaction consumed them above its commit): after a jump back, what the
        resequencer released from there stays released (it never comes again)."""
        if self._resequenced is not None:
            self._resequenced.passed(channel, first, last)

    def _jumped(self, delivery: Delivery) -> bool:
        """Whether the read position at ``delivery``'s channel jumped since this session
        last fed from there (never: nothing fed from there yet)."""
        seen = self._fed_jumps.get(delivery.channel)
        return seen is not None and seen != delivery.jumps

    def _put_back(self, items: Sequence[Delivery]) -> None:
        """Released elements whose receive's reply Ray dropped go out again first;
        until they do, no commit passes them (their hand-over marks stay below)."""
        assert self._resequenced is not None
        for item in items:
            self.handover.put_back(item.channel, item.first)
        self._resequenced.put_back(items)

    def _hand_over(self, item: Delivery) -> Delivery:
        """``item`` (one released element) stamped with its hand-over mark."""
        mark = self.handover.handed(item.channel, item.first)
        return dataclasses.replace(item, origin=dataclasses.replace(item.origin, handed_upto=mark))

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
        while not self.closed and not (until is not None and until()):
            if self._stale:  # told once by a take, or by a fetch while this one waited
                raise self._stale.pop(0)
            room = self.view.room()
            if room > 0:
                deliveries = self._take_held(min(max_count, room), here_only)
                if not deliveries:
                    deliveries = await self._take_any(
                        min(max_count, room), spread, here_only, local_first=not single
                    )
                if deliveries:
                    return self._hand_over_all(deliveries, single)
                if self.view.known_available(here_only):
                    # A filter skipped everything read so far: read on, but
                    # let the actor's other calls run in between.
                    await asyncio.sleep(0)
                    continue
            if self.spec.complete_on_empty and not self.view.any_maybe_available(here_only):
                if not rechecked:
                    # What this session knows may be stale (no watcher keeps
                    # it fresh between receives): look at every owned
                    # channel once before answering "empty". The window's
                    # count too: commits and seeks sent to a channel itself
                    # (element.commit, an abort's rewind) free room there
                    # unseen, so a window known full takes nothing, only looks.
                    rechecked = True
                    deliveries = await self._takes.take_from(
                        self.view.scope(here_only), max(min(max_count, room), 0), spread
                    )
                    if deliveries:
                        return self._hand_over_all(deliveries, single)
                    continue
                break
            if number <= self._interrupted.get(stream, -1):
                break  # abandoned by its handle: nothing to wait for
            self._waiting[stream] = number
            want = min(max_count, room)
            if self._resequenced is None and self.spec.window is None:
                self._wants = want  # the host channel's next change takes for it
            try:
                await self._wait_for_change(room, want, here_only)
            except BaseException:
                self._drop_offer()
                raise
            finally:
                self._waiting.pop(stream, None)
                self._wants, self._host_changed = None, False
            # What was taken for it here, and what fetches brought, up to its count
            # (the rest of a fetch is read again).
            offered = self._use_offered(want)
            for delivery in offered:
                self._positions.handed(delivery)
            taken = sum(delivery.count for delivery in offered)
            fetched = self._waits.use(min(max_count, max(room, 0)) - taken)
            if offered or fetched:
                return ReceivedBatch([*offered, *fetched], single)
        if self.closed and self._end_error is not None:
            raise self._end_error
        return ReceivedBatch((), single)

    async def _take_any(
        self, max_count: int, spread: bool, here_only: bool, local_first: bool
    ) -> list[Delivery]:
        """Take from the owned channels that may have data, in the planner's order
        (``local_first``: this channel first when it may have data; else round robin)."""
        candidates = self._planner.candidates(
            self.view.scope(here_only),
            self.view.maybe_available,
            self._waits.busy,
            local_first=local_first,
        )
        if not candidates:
            return []
        return await self._takes.take_from(candidates, max_count, spread)

    # -- waiting -------------------------------------------------------------

    async def _wait_for_change(self, room: int, want: int, here_only: bool) -> None:
        """Wait until something may let a receive go on: data on an owned channel
        (a fetch may bring it along), a commit that frees the window, a new view,
        an interrupt or the close."""
        self._wake.clear()  # before looking: a poke from here on is not lost
        window_full = room <= 0
        for channel in self.view.scope(here_only):
            in_place = self._read_in_place(channel)
            if in_place is not None:
                # Never watched: its channel pokes this session on every change (and
                # with the window full no take would refresh a watched state: this
                # loop would spin).
                if in_place.available and not window_full:
                    return  # takeable now: look again
                continue
            if not self.view.owns(channel):
                continue  # dropped just now
            known = self.view.known.get(channel)
            if known is not None and known.available and not window_full:
                continue  # takeable now; no need to wait on it
            if window_full or self.spec.window is not None:
                # A window counts what fetches take: only watch, take on a change.
                self._waits.watch(channel, known)
            else:
                self._waits.fetch(channel, want)
        if self.closed or self._waits.fetched or self._held:
            return
        await self._wake.wait()

    def _read_in_place(self, channel: int) -> CursorState | None:
        """The channel's cursor state if its port reads it without a call (the host
        channel), remembered; else None. Drops the channel if it is no longer ours
        (the coordinator grants the new owner before it tells us)."""
        try:
            state = self._ports[channel].state_in_place(
                self.spec.reader_id, self.view.lease_of(channel)
            )
        except (NotOwnerError, SubscriberClosedError):
            self._drop(channel)
            return None
        if state is not None:
            self.view.known[channel] = state
        return state

    def _hand_over_all(self, deliveries: list[Delivery], single: bool) -> ReceivedBatch:
        """The receive's reply: the session reads on after what it hands over."""
        for delivery in deliveries:
            self._positions.handed(delivery)
        return ReceivedBatch(deliveries, single)

    def _unhanded(self, delivery: Delivery) -> None:
        """``delivery`` reached no receive: look at its channel again. A shared group's
        elements wait here for the next receive (they are the member's holds)."""
        self.view.forget(delivery.channel)
        if delivery.origin.shared and not self.closed:
            self._held.append(delivery)
            self._poke()

    def _take_held(self, max_count: int, here_only: bool) -> list[Delivery]:
        """Up to ``max_count`` of the shared group's elements that reached no receive
        before (those of a channel no longer held under their lease are dropped:
        their holds end)."""
        if not self._held:
            return []
        scope = set(self.view.scope(here_only))
        taken: list[Delivery] = []
        kept: list[Delivery] = []
        for delivery in self._held:
            if not self.view.holds(delivery.channel, delivery.origin.lease):
                continue
            if max_count <= 0 or delivery.channel not in scope:
                kept.append(delivery)
                continue
            if delivery.count > max_count:
                delivery, rest = delivery.split(max_count)
                kept.append(rest)
            taken.append(delivery)
            max_count -= delivery.count
        self._held = kept
        return taken

    def _drop(self, channel: int) -> None:
        self.view.drop(channel)
        self._waits.stop_watch(channel)

    def _tell_once(self, error: BaseException) -> None:
        self._stale.append(error)

    def _poke(self) -> None:
        self._wake.set()
