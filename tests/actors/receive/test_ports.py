"""Unit tests of the reader ports and a session's lent takes (no Ray): the host port reads in
place and lends nothing; a sibling's take is lent, settled when back, and given back
when its receive is cancelled; a give-back goes only while the channel is still ours."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from raytopic.actors.receive.lending import RIDE_WAIT, LentTakes
from raytopic.actors.receive.ports import LocalPort, ReaderPort, RemotePort
from raytopic.core.protocol import (
    ChannelRequest,
    CursorState,
    Delivery,
    GiveBack,
    ReaderLease,
    SettleTake,
    StopTake,
    Take,
    Watch,
)
from raytopic.core.records import _Origin

STATE = CursorState(4, 3, 9, 0)


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(main(), 10.0)

    return asyncio.run(guarded())


def delivery(channel: int, first: int, count: int, lease: ReaderLease = None) -> Delivery:
    origin = _Origin("t", "topic", "ns", "r", lease, 0)
    return Delivery(channel, first, count, (), 0, first + count, first + count, -1, origin)


class Channel:
    """A channel's end of a port: records each request; a take answers with
    ``delivered`` once ``release`` is set."""

    def __init__(self, channel: int, delivered: int = 2) -> None:
        self.channel = channel
        self.requests: list[ChannelRequest] = []
        self.delivered = delivered
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, request: ChannelRequest) -> Any:
        self.requests.append(request)
        if isinstance(request, Take):
            await self.release.wait()
            return delivery(self.channel, 10, self.delivered)
        if isinstance(request, Watch):
            return STATE
        return True

    def sent(self, kind: type) -> list[Any]:
        return [r for r in self.requests if isinstance(r, kind)]


def lent_over(ports: dict[int, ReaderPort], leases: dict[int, Any] | None = None) -> LentTakes:
    owned = dict.fromkeys(ports) if leases is None else leases
    return LentTakes("r", 0, ports, lambda channel: owned.get(channel, "not owned"))


async def settled() -> None:
    for _ in range(5):  # the settles and give-backs run as tasks of their own
        await asyncio.sleep(0)


def test_both_ports_are_reader_ports() -> None:
    ports: list[ReaderPort] = [
        LocalPort(0, Channel(0), lambda r, f: STATE),
        RemotePort(1, Channel(1)),
    ]
    assert [port.channel for port in ports] == [0, 1]


def test_the_host_port_reads_in_place_and_takes_without_lending() -> None:
    async def main() -> None:
        host = Channel(0)
        port = LocalPort(0, host, lambda reader, lease: STATE)
        assert port.state_in_place("r", None) is STATE
        taken = await port.take("r", None, 5, lent_over({0: port}))
        await settled()
        assert taken.count == 2
        assert [(t.max_count, t.token) for t in host.sent(Take)] == [(5, None)]
        assert host.sent(SettleTake) == [] and host.sent(GiveBack) == []

    run(main)


def test_a_sibling_is_watched_not_read_in_place() -> None:
    async def main() -> None:
        sibling = Channel(1)
        port = RemotePort(1, sibling)
        assert port.state_in_place("r", None) is None
        assert await port.watch("r", None, None) is STATE
        await port.stop_fetch("tok")
        assert [w.known for w in sibling.sent(Watch)] == [None]
        assert [s.token for s in sibling.sent(StopTake)] == ["tok"]

    run(main)


def test_a_siblings_take_is_lent_under_a_token_and_settled_alone_after_the_ride_wait() -> None:
    async def main() -> None:
        sibling = Channel(1)
        port = RemotePort(1, sibling)
        taken = await port.take("r", None, 5, lent_over({1: port}))
        await settled()
        assert taken.count == 2
        (take,) = sibling.sent(Take)
        assert take.token is not None and take.token.startswith("0:")  # names its host
        assert take.settles is None and sibling.sent(SettleTake) == []  # waits to ride
        await asyncio.sleep(2 * RIDE_WAIT)  # no take came: it goes alone
        assert [(s.token, s.give_back_from) for s in sibling.sent(SettleTake)] == [
            (take.token, None)
        ]
        assert sibling.sent(GiveBack) == []

    run(main)


def test_the_settle_of_a_take_rides_on_the_next_take_or_fetch_at_its_channel() -> None:
    async def main() -> None:
        sibling, other = Channel(1), Channel(2)
        ports: dict[int, ReaderPort] = {1: RemotePort(1, sibling), 2: RemotePort(2, other)}
        lent = lent_over(ports)
        await ports[1].take("r", None, 5, lent)
        await ports[2].take("r", None, 5, lent)  # another channel's take carries nothing of 1
        await ports[1].fetch("r", None, 5, "tok", lent)
        first, fetch = sibling.sent(Take)
        assert fetch.settles is not None and fetch.settles.token == first.token
        assert fetch.settles.give_back_from is None
        assert other.sent(Take)[0].settles is None
        await asyncio.sleep(2 * RIDE_WAIT)
        assert sibling.sent(SettleTake) == []  # it rode: no call of its own
        assert [s.token for s in other.sent(SettleTake)] == [other.sent(Take)[0].token]

    run(main)


def test_ending_a_session_sends_the_settles_waiting_to_ride() -> None:
    async def main() -> None:
        sibling = Channel(1)
        port = RemotePort(1, sibling)
        lent = lent_over({1: port})
        await port.take("r", None, 5, lent)
        lent.send_riding()
        await settled()
        assert len(sibling.sent(SettleTake)) == 1 and lent.riding(1) is None

    run(main)


def test_an_empty_take_at_a_sibling_has_nothing_to_settle() -> None:
    async def main() -> None:
        sibling = Channel(1, delivered=0)
        port = RemotePort(1, sibling)
        await port.take("r", None, 5, lent_over({1: port}))
        await settled()
        assert sibling.sent(SettleTake) == []

    run(main)


def test_a_cancelled_take_at_a_sibling_is_settled_and_given_back_when_it_lands() -> None:
    async def main() -> None:
        sibling = Channel(1)
        sibling.release.clear()
        port = RemotePort(1, sibling)
        lent = lent_over({1: port})
        receive = asyncio.ensure_future(port.take("r", None, 5, lent))
        await settled()
        receive.cancel()
        await settled()
        assert len(lent.returning) == 1  # takes decided now wait for the give-back
        sibling.release.set()
        await lent.after_give_backs()
        await settled()
        assert lent.returning == []
        (take,) = sibling.sent(Take)
        assert [s.token for s in sibling.sent(SettleTake)] == [take.token]
        assert [(g.first, g.expected_next) for g in sibling.sent(GiveBack)] == [(10, 12)]

    run(main)


def test_a_give_back_goes_only_while_the_channel_is_ours_under_the_same_lease() -> None:
    async def main() -> None:
        sibling = Channel(1)
        port = RemotePort(1, sibling)
        lent = lent_over({1: port}, leases={1: ("m", 2)})
        await lent.give_back(delivery(1, 10, 2, lease=("m", 1)))  # an older lease
        await lent.give_back(delivery(1, 10, 2, lease=("m", 2)))
        assert [g.lease for g in sibling.sent(GiveBack)] == [("m", 2)]

    run(main)


def test_unused_fetched_elements_are_settled_from_their_first() -> None:
    async def main() -> None:
        sibling = Channel(1)
        port = RemotePort(1, sibling)
        lent = lent_over({1: port})
        call = asyncio.ensure_future(port.fetch("r", None, 5, "tok", lent))
        await call
        lent.settle_unused(call, "tok")
        await settled()
        assert [(s.token, s.give_back_from) for s in sibling.sent(SettleTake)] == [("tok", 10)]

    run(main)


def test_tokens_are_unique_per_session() -> None:
    ports: dict[int, ReaderPort] = {}
    first, second = lent_over(ports), lent_over(ports)
    tokens = {first.token(), first.token(), second.token()}
    assert len(tokens) == 3
