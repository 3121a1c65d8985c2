"""Where a receive session reads each channel: the read positions it owns. No Ray.

A channel keeps its readers' commits and a read position; the session decides where
it reads. Per channel it keeps a :class:`Place`: where it reads on, and where it
left the reader's read position at the channel (under the cursor's jump count).
Every take names both (``Take.from_sequence``, ``Take.stands``), so taking the same
position again gives the same elements, and nothing the channel hands out is lent:

- what a receive hands over moves where the session reads on (:meth:`handed`);
- a take that no receive hands over (the receive was cancelled, or a take beside
  it failed) changes nothing here: the session still reads from its first
  element, and a take of nothing moves the channel's read position back there
  at once (a session of the reader elsewhere may read there next);
- a fetch's offer leaves the channel's read position where it stood: the session's
  next take there moves it over what was handed over (and the session's pause,
  which hands every position to its channel: :meth:`to_hand_back`);
- a seek, a reset or a new owner makes the read position jump: the session's place
  is void (its jump count differs) and the channel reads on where it stands, which
  the reply tells. A reply older than one already heard is dropped.

A session whose host restarted with its reader's receives under way (``again``)
reads again after the commit at each channel before it answers anything: what its
lost predecessor took there may never have been handed over, and once it answers,
the reader may read those channels at other sessions and commit there.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray.exceptions import TaskCancelledError

from raytopic.core.protocol import STANDS_UNKNOWN, Delivery, Take

if TYPE_CHECKING:
    from raytopic.actors.receive.ports import ReaderPort
    from raytopic.core.protocol import ReaderLease

__all__ = ["Place", "Positions"]


@dataclass(slots=True)
class Place:
    """Where a session reads one channel."""

    read: int
    """The position the session reads on from."""
    stands: int
    """Where the session left the reader's read position at the channel."""
    jumps: int
    """The cursor's jump count then."""
    lease: ReaderLease
    """The lease the session read it under."""


class Positions:
    """One session's places at the channels, and its takes in flight.

    Args:
        reader_id: The reader the channels know.
        again: The session replaces one lost with its host (see the module docstring).
        unhanded: Called with each delivery no receive hands over (the session
            looks at its channel again; a shared group's delivery it keeps for its
            next receive: its hold, not a position, is the record).
        passed: Called as ``passed(channel, first, last)`` with the done positions a
            reply says its take read past (``Delivery.passed``), whatever becomes of
            the reply, unless a reply heard before it has a higher jump count: they
            are never delivered again.
    """

    def __init__(
        self,
        reader_id: str,
        *,
        again: bool,
        unhanded: Callable[[Delivery], None],
        passed: Callable[[int, int, int], None] | None = None,
    ) -> None:
        self._reader_id = reader_id
        self._again = again
        self._unhanded = unhanded
        self._passed = passed
        self._places: dict[int, Place] = {}
        self._read_again: set[int] = set()  # channels a take read again at (``again``)
        # Channels whose first take's reply Ray dropped (see _heard_back): with no
        # place to read from, the next take there reads again after the commit.
        self._lost_first: set[int] = set()
        self._tickets = itertools.count()
        self._heard: dict[int, int] = {}  # channel -> ticket of the latest reply heard
        self._in_flight: dict[int, set[asyncio.Future[Any]]] = {}  # takes, not fetches
        self._ports: dict[int, ReaderPort] = {}  # where each channel was read

    def request(
        self,
        channel: int,
        lease: ReaderLease,
        max_count: int,
        wait: float = 0.0,
        *,
        unseen: bool = False,
    ) -> Take:
        """The take of up to ``max_count`` elements at ``channel`` under ``lease``
        (``unseen``: see ``Take.unseen``)."""
        place = self._places.get(channel)
        again = (self._again and channel not in self._read_again) or channel in self._lost_first
        if place is None or place.lease != lease:
            return Take(self._reader_id, lease, max_count, wait, again=again)
        return Take(
            self._reader_id,
            lease,
            max_count,
            wait,
            place.read,
            place.stands,
            place.jumps,
            again,
            unseen,
        )

    async def take(
        self,
        port: ReaderPort,
        lease: ReaderLease,
        max_count: int,
        wait: float = 0.0,
        *,
        unseen: bool = False,
    ) -> Delivery:
        """Take at ``port``'s channel; what the reply says is heard even if the caller
        is cancelled meanwhile (nothing of it is then handed over). A take waits
        for the takes of this session still on their way there; a fetch
        (``wait``) waits for none and holds none back."""
        channel = port.channel
        self._ports[channel] = port
        in_flight = self._in_flight.setdefault(channel, set())
        while in_flight and not wait:
            await asyncio.wait(list(in_flight))
        ticket = next(self._tickets)
        request = self.request(channel, lease, max_count, wait, unseen=unseen)
        if port.in_process and not wait:  # the common path: no task, nothing to shield
            delivery = await port.take(request)
            self._hear(channel, ticket, delivery)
            return delivery
        call = asyncio.ensure_future(port.take(request))
        if not wait:
            in_flight.add(call)
            call.add_done_callback(in_flight.discard)
        call.add_done_callback(lambda done: self._heard_back(channel, ticket, done, wait))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            call.add_done_callback(self._unhanded_reply)  # its receive is gone
            raise

    def take_now(self, port: ReaderPort, lease: ReaderLease, max_count: int) -> Delivery | None:
        """Take at ``port``'s channel at once where the port serves it without a wait
        (the host channel, with data; no take of this session on its way there);
        else None, and nothing changed. The reply is heard as :meth:`take`'s."""
        channel = port.channel
        if self._in_flight.get(channel):
            return None
        ticket = next(self._tickets)
        delivery = port.take_now(self.request(channel, lease, max_count))
        if delivery is not None:
            self._ports[channel] = port
            self._hear(channel, ticket, delivery)
        return delivery

    def _unhanded_reply(self, call: asyncio.Future[Any]) -> None:
        if not call.cancelled() and call.exception() is None:
            self.unhanded(call.result())

    def _heard_back(
        self, channel: int, ticket: int, call: asyncio.Future[Any], wait: float
    ) -> None:
        if call.cancelled():
            return
        error = call.exception()
        if error is None:
            self._hear(channel, ticket, call.result())
        elif isinstance(error, TaskCancelledError) and not wait:
            # The user's ray.cancel of the receive reached this take (a child call):
            # Ray may have dropped a reply the channel sent, after the take moved the
            # read position there. The next take reads from where the session reads on.
            place = self._places.get(channel)
            if place is not None:
                place.stands = STANDS_UNKNOWN
            else:
                self._lost_first.add(channel)

    def _hear(self, channel: int, ticket: int, delivery: Delivery) -> None:
        """A take's reply: the channel's read position and jump count are as it says,
        and the session still reads from its first element until it is handed over."""
        # A fact, even in a reply void here, unless the read position jumped since the
        # take (a reply heard under a higher count): a reset gives them again. (Still
        # done, the next take past them says so again, under the new count.)
        place = self._places.get(channel)
        if (
            delivery.passed is not None
            and self._passed is not None
            and (place is None or delivery.jumps >= place.jumps)
        ):
            self._passed(channel, *delivery.passed)
        if ticket < self._heard.get(channel, -1):
            return  # older than a reply heard (a fetch ended meanwhile): void
        self._heard[channel] = ticket
        self._read_again.add(channel)
        self._lost_first.discard(channel)
        self._places[channel] = Place(
            delivery.first, delivery.stands, delivery.jumps, delivery.origin.lease
        )

    def handed(self, delivery: Delivery, read_on: int | None = None) -> None:
        """``delivery`` was handed over (up to ``read_on``: a part of it): the session
        reads on after it, if it still reads from its first element."""
        place = self._places.get(delivery.channel)
        if place is not None and (place.read, place.jumps) == (delivery.first, delivery.jumps):
            place.read = delivery.next if read_on is None else read_on

    def reads_from(self, delivery: Delivery) -> bool:
        """Whether the session still reads ``delivery``'s channel from its first element,
        under its jump count: an offer for any other position is stale (the session
        read past it meanwhile, or the read position jumped), dropped, never handed
        over (a shared group's elements are held, not read by position: always)."""
        if delivery.origin.shared:
            return True
        place = self._places.get(delivery.channel)
        return place is not None and (place.read, place.jumps) == (delivery.first, delivery.jumps)

    def unhanded(self, delivery: Delivery) -> asyncio.Future[Any] | None:
        """``delivery`` (a take's or a fetch's) reaches no receive: the session still
        reads from its first element. Where a take moved the read position over
        them, a take of nothing moves it back at once (another session of the
        reader may read there next); returns that take, or None."""
        if not delivery.count:
            return None
        self._unhanded(delivery)
        port = self._ports.get(delivery.channel)
        if delivery.origin.shared or delivery.stands == delivery.first or port is None:
            return None
        return self._move_back(port, delivery.origin.lease)

    def read_again(
        self, channel: int, first: int, jumps: int, lease: ReaderLease
    ) -> asyncio.Future[Any] | None:
        """A receive whose reply never reached its handle began at ``first`` of
        ``channel`` (under ``jumps`` and ``lease``): the session reads on from there
        again, if it read past it under the same jump count and lease (a seek, a reset
        or a new owner placed the read position anew since: nothing to do), and a take
        of nothing moves the channel's read position back at once (another session of
        the reader may read there next) and stops its commits below ``first`` until
        it is served again (``Take.unseen``). Returns that take (None: none)."""
        place = self._places.get(channel)
        if place is None or (place.jumps, place.lease) != (jumps, lease) or place.read <= first:
            return None
        place.read = first
        port = self._ports.get(channel)
        return None if port is None else self._move_back(port, lease, unseen=True)

    def _move_back(
        self, port: ReaderPort, lease: ReaderLease, *, unseen: bool = False
    ) -> asyncio.Future[Any]:
        """A take of nothing at ``port``'s channel: its read position moves to where
        the session reads on (if it still stands where the session left it)."""
        back = asyncio.ensure_future(self.take(port, lease, 0, unseen=unseen))
        back.add_done_callback(_no_failure)
        return back

    def to_read_again(self, channels: list[int]) -> list[int]:
        """Those of ``channels`` a session that replaces a lost one (``again``) has not
        read again at yet ([] at once for any other session)."""
        if not self._again:
            return []
        return [channel for channel in channels if channel not in self._read_again]

    def forget(self, channel: int) -> None:
        """Nothing is known of ``channel`` (a told-once error moved its cursor)."""
        self._places.pop(channel, None)

    def reads_at(self, channel: int) -> int | None:
        """Where the session reads on at ``channel`` (None: it does not know)."""
        place = self._places.get(channel)
        return None if place is None else place.read

    def to_hand_back(self, held: Callable[[int], ReaderLease]) -> list[tuple[int, ReaderLease]]:
        """The channels still held under the lease ``held(channel)`` whose read
        position stands elsewhere than where the session reads on, with that lease:
        a take of nothing at each moves it there (a pause sends them, so whatever
        reads the reader's channels next reads on exactly where this session
        stopped)."""
        return [
            (channel, place.lease)
            for channel, place in self._places.items()
            if place.read != place.stands and held(channel) == place.lease
        ]


def _no_failure(call: asyncio.Future[Any]) -> None:
    """A take of nothing that failed leaves the read position where it stands (a
    channel lost meanwhile is read on there by its new owner)."""
    if not call.cancelled():
        call.exception()
