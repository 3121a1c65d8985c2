"""Unit tests of the reader ports (no Ray): the host port reads in place and serves a take
in process; a sibling's port watches and takes by actor call; both carry the take as
the session built it (no token, nothing to settle)."""

from __future__ import annotations

import pytest

from raytopic.actors.receive.ports import LocalPort, ReaderPort, RemotePort
from raytopic.core.protocol import ChannelRequest, CursorState, Take, Watch, pack_small

from tests.actors.receive.fake_channels import FakeChannel, run

STATE = CursorState(4, 3, 9, 0)


def test_both_ports_are_reader_ports() -> None:
    ports: list[ReaderPort] = [
        LocalPort(0, FakeChannel(0), lambda r, f: STATE),
        RemotePort(1, FakeChannel(1)),
    ]
    assert [port.channel for port in ports] == [0, 1]


def test_the_host_port_reads_in_place_serves_takes_in_process_and_is_never_watched() -> None:
    async def main() -> None:
        host = FakeChannel(0)
        port = LocalPort(0, host, lambda reader, lease: STATE)
        assert port.state_in_place("r", None) is STATE
        take = Take("r", None, 5, from_sequence=10, stands=10)
        assert (await port.take(take)).count == 2
        assert host.sent(Take) == [take]
        with pytest.raises(TypeError):
            port.watch("r", None, None)

    run(main)


def test_a_sibling_is_watched_not_read_in_place_and_takes_by_call() -> None:
    async def main() -> None:
        sibling = FakeChannel(1)
        port = RemotePort(1, sibling)
        assert port.state_in_place("r", None) is None
        assert (await port.watch("r", None, None)).next == 10
        take = Take("r", None, 5)
        assert (await port.take(take)).count == 2
        assert [w.known for w in sibling.sent(Watch)] == [None]
        assert sibling.sent(Take) == [take]

    run(main)


def test_a_sibling_port_unpacks_the_packed_replies_of_its_calls() -> None:
    async def main() -> None:
        sibling = FakeChannel(1)

        async def call(request: ChannelRequest) -> object:
            return pack_small(await sibling(request))

        port = RemotePort(1, call)
        assert (await port.watch("r", None, None)).next == 10
        assert (await port.take(Take("r", None, 5))).count == 2

    run(main)
