"""Direct offers: a fetch's reply written straight to its session's host process. No Ray.

A value published to a sibling of the channel where a receive waits reaches the
user in three Ray calls: the publish, the sibling's reply to the host's fetch, the
host's reply to the receive. The middle one costs as much as either of the others
(a Ray reply is about 0.9 ms on a loaded 2-core machine), yet it only carries
bytes between two processes of one node. So a host names, in each fetch, a local
socket of its process and a token for that fetch (``DirectLine``); a sibling on
the same node writes its packed reply there as well as returning it to Ray
(:class:`OfferOutbox`), and the host's port hears it (:class:`OfferInbox`).

**Ray's reply is then only a note** (``OfferSent``): the full reply arriving at the
host as it answers its receive cost it 1.8 ms more on a loaded 2-core machine (the
reply is unpacked under the GIL beside the host's own step), so a sibling that wrote
the offer whole into the line's socket returns which line it went on, after a short
hold (``NOTE_DELAY``) that keeps even the note off the host's step. Bytes the kernel
took reach the host unless the line breaks first, and the host knows when it does:
a fetch whose note names a line that broke, before its offer came, fails (and is
looked at again by its session, as any failed fetch). A fetch's offer moves nothing
at the channel, so a failed fetch loses nothing, and an offer heard after its fetch
ended is dropped unread (its token is closed): nothing is heard twice.

Ray's reply carries the offer itself, and the port hears whichever comes first, when
the offer was not written whole: a sibling on another node, a line not connected yet
or backed up (the rest still in the sibling's buffer), an offer over
``LARGEST_OFFER``, a host that restarted (its new process has a new socket).
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

from raytopic.core.protocol import DirectLine, OfferSent, Take

__all__ = ["BACKLOG_LIMIT", "LARGEST_OFFER", "NOTE_DELAY", "OfferInbox", "OfferLost", "OfferOutbox"]

logger = logging.getLogger(__name__)

FRAME = struct.Struct("!I16s")
"""A frame's head: the offer's length, then the fetch's token."""
LARGEST_OFFER = 1 << 20
"""Bytes of the largest offer written directly (a larger one goes by Ray alone)."""
BACKLOG_LIMIT = 4 << 20
"""Bytes a line may hold unsent before its offers go by Ray alone (a stalled host)."""
MOST_LINES = 64
"""Lines a sibling keeps open (the least recently used one is closed past it)."""
NOTE_DELAY = 0.005
"""Seconds a sibling holds its note (``OfferSent``) after writing the offer: the host
hears the offer and answers its receive before Ray's reply reaches it."""
OFFER_TIMEOUT = 30.0
"""Seconds a host waits, after the note, for an offer on a line that never breaks
(a safeguard: the kernel holds the bytes, so only a broken line loses them)."""
LINE_ID = 16
"""Bytes of a line's id, the first a sibling writes on it."""
GONE_KEPT = 256
"""Broken lines a host remembers (for a note that comes after its line broke)."""
_UCRED = struct.Struct("3i")  # pid, uid, gid (SO_PEERCRED)


class OfferLost(ConnectionError):
    """A fetch's offer went on a line that broke before the host read it: the fetch
    fails, and its session looks at the channel again (the offer moved nothing)."""


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
        self._noted: dict[bytes, set[bytes]] = {}  # line id -> tokens noted sent on it
        self._gone: collections.OrderedDict[bytes, None] = collections.OrderedDict()
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

    async def sent(
        self, line: DirectLine, offered: asyncio.Future[bytes], note: OfferSent
    ) -> bytes:
        """The offer of the fetch on ``line``, which its sibling notes it wrote on the
        line ``note`` names.

        Raises:
            OfferLost: that line broke (or this inbox closed) before the offer came.
        """
        if not offered.done():
            if note.line in self._gone or self._closed:
                raise OfferLost("the line of a fetch's offer broke before it came")
            noted = self._noted.setdefault(note.line, set())
            noted.add(line.token)
            try:
                await asyncio.wait_for(asyncio.shield(offered), OFFER_TIMEOUT)
            except TimeoutError:
                raise OfferLost("a fetch's offer did not come on its line") from None
            finally:
                noted.discard(line.token)
        return offered.result()

    def _broke(self, line_id: bytes) -> None:
        """A sibling's line ended: a fetch noted sent on it and still waiting fails."""
        self._gone[line_id] = None
        while len(self._gone) > GONE_KEPT:
            self._gone.popitem(last=False)
        for token in self._noted.pop(line_id, ()):
            offered = self._waiting.get(token)
            if offered is not None and not offered.done():
                offered.set_exception(OfferLost("the line of a fetch's offer broke before it came"))

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
        line_id = b""
        try:
            if not _same_user(writer):
                return
            line_id = await reader.readexactly(LINE_ID)
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
            if line_id:
                self._broke(line_id)

    def close(self) -> None:
        """Stop listening (the fetches still waiting hear Ray's replies; those whose
        offer was noted sent fail)."""
        self._closed = True
        if self._server is not None:
            self._server.close()
        self._address = None
        for line_id in list(self._noted):
            self._broke(line_id)


class OfferOutbox:
    """A sibling's end: its lines to the hosts on its node.

    Args:
        node_id: The Ray node the channel runs on (asked at its first fetch's offer).
    """

    def __init__(self, node_id: Callable[[], str]) -> None:
        self._node_id = node_id
        self._node: str | None = None
        self._lines: collections.OrderedDict[str, tuple[asyncio.StreamWriter, bytes]] = (
            collections.OrderedDict()
        )
        self._connecting: dict[str, asyncio.Future[None]] = {}  # address -> its connect

    async def reply(self, request: Any, reply: Any) -> Any:
        """The Ray reply to ``request``: ``reply``, or a note that it went whole on
        the host's line (:meth:`offer`), sent ``NOTE_DELAY`` later."""
        line_id = self.offer(request, reply)
        if line_id is None:
            return reply
        await asyncio.sleep(NOTE_DELAY)
        return OfferSent(line_id)

    def offer(self, request: Any, reply: Any) -> bytes | None:
        """Write ``reply`` to ``request``'s host too, if it is a fetch's packed reply
        (bytes) that names a line on this node and the line is up. Returns the line's
        id if the kernel took the whole offer (it then reaches the host unless the
        line breaks), else None (a part still buffered here, or nothing written: Ray's
        reply must carry it). A line not connected yet is connected for the next fetch."""
        if not isinstance(request, Take) or request.direct is None or type(reply) is not bytes:
            return None
        line: DirectLine = request.direct
        if self._node is None:
            self._node = self._node_id()
        if line.node_id != self._node or len(reply) > LARGEST_OFFER:
            return None
        if line.address not in self._lines:
            self._connect_soon(line.address)
            return None
        writer, line_id = self._lines[line.address]
        if writer.is_closing():
            del self._lines[line.address]
            self._connect_soon(line.address)
            return None
        if writer.transport.get_write_buffer_size() > BACKLOG_LIMIT:
            return None
        self._lines.move_to_end(line.address)
        writer.writelines((FRAME.pack(len(reply), line.token), reply))
        return line_id if writer.transport.get_write_buffer_size() == 0 else None

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
        line_id = secrets.token_bytes(LINE_ID)
        writer.write(line_id)
        self._lines[address] = (writer, line_id)
        while len(self._lines) > MOST_LINES:
            _, (oldest, _) = self._lines.popitem(last=False)
            oldest.close()

    def close(self) -> None:
        """Close every line."""
        for writer, _ in self._lines.values():
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
