"""Direct offers over a real local socket (no Ray): a sibling's port hears a fetch's
offer from the sibling's process ahead of the Ray reply, the Ray reply when no offer
comes (another node, no line yet), nothing for a token it is not waiting on, the
offer a note names, and a failed fetch (nothing heard) when the note's line broke."""

from __future__ import annotations

import asyncio
import secrets
import socket

import pytest

from raytopic.actors.direct_offers import (
    FRAME,
    LARGEST_OFFER,
    LINE_ID,
    OfferInbox,
    OfferLost,
    OfferOutbox,
)
from raytopic.actors.receive.ports import RemotePort
from raytopic.core.protocol import ChannelRequest, DirectLine, OfferSent, Take, Watch, pack_small

from tests.actors.receive.fake_channels import FakeChannel, run, turns

FETCH = Take("r", None, 5, wait=5.0, from_sequence=10, stands=10)


async def _inbox(node: str = "n1") -> OfferInbox:
    """An inbox whose socket is up."""
    inbox = OfferInbox(lambda: node)
    while inbox.open() is None:
        await asyncio.sleep(0.01)
    return inbox


async def _connected(outbox: OfferOutbox, inbox: OfferInbox) -> None:
    """Offer on a line no fetch waits on until the outbox has connected it."""
    line, offered = inbox.open()
    inbox.close_line(line)
    stray = FETCH._replace(direct=line._replace(token=secrets.token_bytes(16)))
    while outbox.offer(stray, b"not a pickle: read by no one") is None:
        await asyncio.sleep(0.01)
    assert not offered.done()


class _Sibling:
    """A sibling's end of a port: it serves a take (a ``FakeChannel``), offers the
    packed reply through ``outbox``, then answers the Ray call once ``answer`` is set
    (or raises ``fail`` then)."""

    def __init__(self, outbox: OfferOutbox) -> None:
        self.channel = FakeChannel(1)
        self.outbox = outbox
        self.answer = asyncio.Event()
        self.fail: BaseException | None = None
        self.offered: list[bool] = []

    async def __call__(self, request: ChannelRequest) -> object:
        reply = pack_small(await self.channel(request))
        self.offered.append(self.outbox.offer(request, reply) is not None)
        await self.answer.wait()
        if self.fail is not None:
            raise self.fail
        return reply


def test_a_fetch_hears_the_direct_offer_while_the_ray_reply_is_still_out() -> None:
    async def main() -> None:
        inbox = await _inbox()
        outbox = OfferOutbox(lambda: "n1")
        await _connected(outbox, inbox)
        sibling = _Sibling(outbox)
        sibling.fail = RuntimeError("the Ray reply, lost after the offer")
        delivery = await RemotePort(1, sibling, inbox).take(FETCH)
        assert (delivery.first, delivery.count) == (10, 2)
        assert sibling.offered == [True]
        (sent,) = sibling.channel.sent(Take)
        assert sent.direct is not None and sent.direct.node_id == "n1"
        assert sent._replace(direct=None) == FETCH
        sibling.answer.set()  # the reply heard second (an error here) is dropped
        await turns()
        outbox.close()
        inbox.close()

    run(main)


def test_the_ray_reply_is_heard_when_no_offer_comes() -> None:
    async def main() -> None:
        inbox = await _inbox()
        for outbox in (OfferOutbox(lambda: "n2"), OfferOutbox(lambda: "n1")):
            # another node's sibling never writes; this node's has no line yet
            sibling = _Sibling(outbox)
            sibling.answer.set()
            delivery = await RemotePort(1, sibling, inbox).take(FETCH)
            assert (delivery.first, delivery.count) == (10, 2)
            assert sibling.offered == [False]
            outbox.close()
        inbox.close()

    run(main)


def test_only_a_fetch_names_a_line() -> None:
    async def main() -> None:
        inbox = await _inbox()
        sibling = _Sibling(OfferOutbox(lambda: "n1"))
        sibling.answer.set()
        port = RemotePort(1, sibling, inbox)
        await port.take(FETCH._replace(wait=0.0))
        await port.watch("r", None, None)
        assert [t.direct for t in sibling.channel.sent(Take)] == [None]
        inbox.close()
        assert inbox.open() is None  # closed: Ray's replies alone from now on

    run(main)


def test_an_outbox_writes_only_a_fetchs_packed_reply_of_a_bounded_size() -> None:
    async def main() -> None:
        inbox = await _inbox()
        outbox = OfferOutbox(lambda: "n1")
        await _connected(outbox, inbox)
        line, offered = inbox.open()
        fetch = FETCH._replace(direct=line)
        assert not outbox.offer(Watch("r", None, None, 1.0), b"x")
        assert not outbox.offer(FETCH, b"x")  # no line named
        assert not outbox.offer(fetch, ["not", "packed"])
        assert not outbox.offer(fetch, bytes(LARGEST_OFFER + 1))
        assert outbox.offer(fetch, b"the offer")
        assert await asyncio.wait_for(offered, 5.0) == b"the offer"
        outbox.close()
        inbox.close()

    run(main)


def test_a_frame_for_a_token_no_fetch_waits_on_is_dropped_unread() -> None:
    async def main() -> None:
        inbox = await _inbox()
        line, offered = inbox.open()
        _reader, writer = await asyncio.open_unix_connection(path=None, sock=_socket(line))
        writer.write(secrets.token_bytes(LINE_ID))  # the line's id
        garbage = b"\x80not a pickle"
        writer.write(FRAME.pack(len(garbage), secrets.token_bytes(16)) + garbage)
        writer.write(FRAME.pack(5, line.token) + b"offer")
        await writer.drain()
        assert await asyncio.wait_for(offered, 5.0) == b"offer"
        writer.write(FRAME.pack(5, line.token) + b"again")  # its fetch heard it: dropped
        await writer.drain()
        writer.close()
        inbox.close()

    run(main)


def test_a_fetch_whose_ray_reply_is_a_note_hears_the_offer_on_the_line() -> None:
    async def main() -> None:
        inbox = await _inbox()
        outbox = OfferOutbox(lambda: "n1")
        await _connected(outbox, inbox)
        channel = FakeChannel(1)
        replies: list[object] = []

        async def sibling(request: ChannelRequest) -> object:
            replies.append(await outbox.reply(request, pack_small(await channel(request))))
            return replies[-1]

        delivery = await RemotePort(1, sibling, inbox).take(FETCH)
        assert (delivery.first, delivery.count) == (10, 2)
        await turns()
        while not replies:  # the note, held NOTE_DELAY after the offer
            await asyncio.sleep(0.01)
        assert type(replies[0]) is OfferSent
        outbox.close()
        inbox.close()

    run(main)


@pytest.mark.parametrize("broken", ["before the note", "after the note"])
def test_a_fetch_fails_when_the_line_its_note_names_breaks_first(broken: str) -> None:
    """The offer never came on its line: the fetch fails (its session looks at the
    channel again, and the offer moved nothing there), and the offer, should it come
    after all, is heard by no one: nothing lost, nothing heard twice."""

    async def main() -> None:
        inbox = await _inbox()
        line_id = secrets.token_bytes(LINE_ID)
        _reader, writer = await asyncio.open_unix_connection(sock=_socket(inbox.open()[0]))
        writer.write(line_id)
        await writer.drain()
        noted = asyncio.Event()
        sent: list[Take] = []

        async def sibling(request: ChannelRequest) -> object:
            assert isinstance(request, Take)
            sent.append(request)
            if broken == "before the note":
                writer.close()
                while line_id not in inbox._gone:  # the host read the line's end
                    await asyncio.sleep(0.01)
            noted.set()
            return OfferSent(line_id)

        fetch = asyncio.ensure_future(RemotePort(1, sibling, inbox).take(FETCH))
        await noted.wait()
        if broken == "after the note":
            await turns()
            assert not fetch.done()  # waiting for the offer on its line
            writer.close()
        with pytest.raises(OfferLost):
            await asyncio.wait_for(fetch, 5.0)
        (take,) = sent
        assert take.direct is not None and take.direct.token not in inbox._waiting
        inbox.close()

    run(main)


def _socket(line: DirectLine) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(line.address)
    sock.setblocking(False)
    return sock
