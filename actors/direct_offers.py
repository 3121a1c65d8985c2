"""Direct offers: a fetch's reply written straight to its session's host process. No Ray.

A value published to a sibling of the channel where a receive waits reaches the
user in three Ray calls: the publish, the sibling's reply to the host's fetch, the
host's reply to the receive. The middle one costs as much as either of the others
(a Ray reply is about 0.9 ms on a loaded 2-core machine), yet it only carries
bytes between two processes of one node. So a host names, in each fetch, a local
socket of its process and a token for that fetch (``DirectLine``); a sibling on
the same node writes its packed reply there as well as returning it to Ray
(:class:`OfferOutbox`), and the host's port hears whichever comes first
(:class:`OfferInbox`). A fetch's offer moves nothing at the channel, so both carry
the same offer: the one heard second is dropped, and nothing depends on the socket.
A sibling on another node, a line not connected yet or backed up, a host that
restarted (its new process has a new socket) leave the offer to Ray's reply alone.
Measured on bare Ray actors (``raytopic bench --latency``'s shape, 2-core machine):
a value relayed this way costs what one answered directly does (0.95x Queue's
put -> waiting get, against 1.58x for a relay by Ray reply).

**Who may write**: the socket is a Linux abstract Unix socket (no file to clean up;
it goes with the process). A connection from another user is closed unread
(``SO_PEERCRED``), and a frame is only unpacked for a token the host issued and
still waits on (16 random bytes it sent by Ray): whoever else connects cannot
make the host unpickle anything, nor answer a fetch.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import socket
import struct
from collections.abc import Callable
from typing import Any

from raytopic.core.protocol import DirectLine, Take

__all__ = ["BACKLOG_LIMIT", "LARGEST_OFFER", "OfferInbox", "OfferOutbox"]

logger = logging.getLogger(__name__)

FRAME = struct.Struct("!I16s")
"""A frame's head: the offer's length, then the fetch's token."""
LARGEST_OFFER = 1 << 20
"""Bytes of the largest offer written directly (a larger one goes by Ray alone)."""
BACKLOG_LIMIT = 4 << 20
"""Bytes a line may hold unsent before its offers go by Ray alone (a stalled host)."""
MOST_LINES = 64
"""Lines a sibling keeps open (the least recently used one is closed past it)."""
_UCRED = struct.Struct("3i")  # pid, uid, gid (SO_PEERCRED)


class OfferInbox:
    """The host's end: its socket and the fetches waiting on it.

    Args:
        node_id: The Ray node the host runs on (asked once, when the socket is up).
    """

    def __init__(self, node_id: Callable[[], str]) -> None:
        self._node_id = node_id
        self._node = ""
        self._address: str | None = None
        self._starting: asyncio.Future[None] | None = None
        self._server: asyncio.AbstractServer | None = None
        self._waiting: dict[bytes, asyncio.Future[bytes]] = {}
        self._closed = False

    def open(self) -> tuple[DirectLine, asyncio.Future[bytes]] | None:
        """A line for one fetch and the future its offer completes; None while the
        socket is not up yet (the first call starts it) or could not be."""
        if self._address is None:
            if self._starting is None and not self._closed:
                self._starting = asyncio.ensure_future(self._start())
            return None
        token = secrets.token_bytes(FRAME.size - 4)
        offered: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiting[token] = offered
        return DirectLine(node_id=self._node, address=self._address, token=token), offered

    def close_line(self, line: DirectLine) -> None:
        """The fetch on ``line`` ended: an offer for it is dropped unread."""
        self._waiting.pop(line.token, None)

    async def _start(self) -> None:
        address = f"\0raytopic-offers-{secrets.token_hex(12)}"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(address)
            listener.listen(MOST_LINES)
            listener.setblocking(False)
            self._server = await asyncio.start_unix_server(self._read, sock=listener)
        except OSError as error:  # stays down: every fetch goes by Ray alone
            listener.close()
            logger.info("no direct offers at this channel: %s", error)
            return
        if self._closed:
            self._server.close()
            return
        self._node = self._node_id()
        self._address = address

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One sibling's line: offers for the fetches still waiting, the rest dropped."""
        try:
            if not _same_user(writer):
                return
            while True:
                size, token = FRAME.unpack(await reader.readexactly(FRAME.size))
                if size > LARGEST_OFFER:
                    return
                offer = await reader.readexactly(size)
                offered = self._waiting.pop(token, None)
                if offered is not None and not offered.done():
                    offered.set_result(offer)
        except (asyncio.IncompleteReadError, OSError):
            pass  # the sibling went away: its next fetches' offers come by Ray
        finally:
            writer.close()

    def close(self) -> None:
        """Stop listening (the fetches still waiting hear Ray's replies)."""
        self._closed = True
        if self._server is not None:
            self._server.close()
        self._address = None


class OfferOutbox:
    """A sibling's end: its lines to the hosts on its node.

    Args:
        node_id: The Ray node the channel runs on (asked at its first fetch's offer).
    """

    def __init__(self, node_id: Callable[[], str]) -> None:
        self._node_id = node_id
        self._node: str | None = None
        self._lines: collections.OrderedDict[str, asyncio.StreamWriter] = collections.OrderedDict()
        self._connecting: dict[str, asyncio.Future[None]] = {}  # address -> its connect

    def offer(self, request: Any, reply: Any) -> bool:
        """Write ``reply`` to ``request``'s host too, if it is a fetch's packed reply
        (bytes) that names a line on this node and the line is up; whether it was
        written. A line not connected yet is connected for the next fetch."""
        if not isinstance(request, Take) or request.direct is None or type(reply) is not bytes:
            return False
        line: DirectLine = request.direct
        if self._node is None:
            self._node = self._node_id()
        if line.node_id != self._node or len(reply) > LARGEST_OFFER:
            return False
        writer = self._lines.get(line.address)
        if writer is None:
            self._connect_soon(line.address)
            return False
        if writer.is_closing():
            del self._lines[line.address]
            self._connect_soon(line.address)
            return False
        if writer.transport.get_write_buffer_size() > BACKLOG_LIMIT:
            return False
        self._lines.move_to_end(line.address)
        writer.writelines((FRAME.pack(len(reply), line.token), reply))
        return True

    def _connect_soon(self, address: str) -> None:
        if address not in self._connecting:
            self._connecting[address] = asyncio.ensure_future(self._connect(address))

    async def _connect(self, address: str) -> None:
        line = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        line.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(line, address)
            _, writer = await asyncio.open_unix_connection(sock=line)
        except OSError as error:  # a host gone (its fetches end with it)
            line.close()
            logger.debug("no direct line to a host: %s", error)
            return
        finally:
            self._connecting.pop(address, None)
        self._lines[address] = writer
        while len(self._lines) > MOST_LINES:
            _, oldest = self._lines.popitem(last=False)
            oldest.close()

    def close(self) -> None:
        """Close every line."""
        for writer in self._lines.values():
            writer.close()
        self._lines.clear()


def _same_user(writer: asyncio.StreamWriter) -> bool:
    """Whether the process at the other end of a line runs as this one's user."""
    line = writer.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):
        _, uid, _ = _UCRED.unpack(
            line.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        )
        return uid == os.getuid()
    return False
