"""Unit tests of SessionHost (no Ray): the group views and marks it keeps (older versions
ignored, marks only rise, a member set to None ends its session and is reported left),
the sessions it opens, its ports, and end_receives."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.cursors import Cursor
from raytopic.actors.reader_parts import Reader
from raytopic.actors.receive.ports import LocalPort, RemotePort
from raytopic.actors.session_host import SessionHost
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import SubscriberClosedError, TopicNotFoundError
from raytopic.core.protocol import CursorState, Lease, ReaderLease, ReaderSpec, Take

CONFIG = TopicConfig("t", "ns", "t0pic1d", 3, 100, True, None, Overflow.BLOCK, ())
OLD, NEW = Lease("m", 1), Lease("m", 2)


class _Host:
    """A SessionHost of channel 1 over a dict of readers, recording what it tells."""

    def __init__(self, siblings: list[Any] | None = None) -> None:
        self.context = ChannelContext(CONFIG, 1, ChannelMetrics("t", 1))
        self.readers: dict[str, Reader] = {}
        self.left: list[str] = []
        self.back: list[str] = []
        self.found: list[list[Any]] = []  # each time the host looked its siblings up
        self._siblings = siblings or []
        self.host = SessionHost(
            self.context,
            self._lookup,
            self._local_take,
            self._local_state,
            restarted=False,
            find_siblings=self._find_siblings,
        )

    def _find_siblings(self) -> list[Any]:
        self.found.append(self._siblings)
        return self._siblings

    def _lookup(self, reader_id: str) -> Reader:
        try:
            return self.readers[reader_id]
        except KeyError:
            raise SubscriberClosedError(reader_id) from None

    async def _local_take(self, take: Any) -> Any:
        return "served here"

    def _local_state(self, reader_id: str, lease: ReaderLease) -> CursorState:
        return CursorState(0, -1, -1, 0)

    def member(self, reader_id: str = "m", group: str = "g") -> Reader:
        reader = self.readers[reader_id] = Reader(reader_id, ReaderSpec(group, False), None)
        return reader

    def anonymous(self, reader_id: str = "a") -> Reader:
        reader = Reader(reader_id, ReaderSpec(None, False), Cursor.starting_at(0))
        self.readers[reader_id] = reader
        return reader

    def push(
        self,
        version: int,
        views: dict[str, dict[int, Lease] | None],
        generation: int = 0,
        group: str = "g",
    ) -> bool:
        return self.host.update_views(
            group, version, generation, views, self.left.append, self.back.append
        )


class _RecordingSession:
    """Stands in for a hosted session where only what the host calls on it matters."""

    def __init__(self) -> None:
        self.pokes: list[int | None] = []
        self.closed_with: list[Any] = []

    def poke(self, channel: int | None = None) -> None:
        self.pokes.append(channel)

    def close(self, error: Any = None) -> None:
        self.closed_with.append(error)


# -- views and marks -------------------------------------------------------------------------------


def test_a_newer_view_replaces_the_member_s_and_an_older_one_is_ignored() -> None:
    host = _Host()
    host.push(2, {"m": {1: OLD}})
    host.push(5, {"m": {1: NEW}})
    host.push(4, {"m": {1: OLD, 2: OLD}})  # arrived late
    host.push(5, {"m": {}})  # the same version again
    assert host.host.views["g"]["m"] == (5, {1: NEW})
    assert host.back == ["m", "m"]


def test_marks_rise_only_upward_in_both_version_and_generation() -> None:
    host = _Host()
    assert host.push(5, {}, generation=1)
    assert host.push(3, {}, generation=2)  # the generation rose: the version stays
    assert host.host.marks["g"] == (5, 2)
    assert not host.push(4, {}, generation=2)
    assert not host.push(5, {}, generation=1)
    assert host.host.marks["g"] == (5, 2)


def test_a_member_set_to_none_loses_its_view_and_session_and_is_reported_left() -> None:
    async def main() -> None:
        host = _Host()
        host.member()
        host.push(1, {"m": {1: OLD}})
        session = host.host.session("m", None)
        host.push(2, {"m": None})
        assert host.left == ["m"] and host.back == ["m"]
        assert "m" not in host.host.views["g"]
        assert "m" not in host.host.sessions and session.closed
        host.push(3, {"m": {1: NEW}})  # it rejoined
        assert host.back == ["m", "m"] and host.host.views["g"]["m"] == (3, {1: NEW})

    asyncio.run(main())


def test_a_member_back_after_a_timeout_meets_its_receive_numbering_mid_stream() -> None:
    # Its handle numbers receives on from before the timeout: the new session must
    # not wait the 5 s turn gap for numbers that went to the session that ended.
    async def main() -> None:
        host = _Host()
        host.member()
        host.member("fresh")
        host.push(1, {"m": {1: OLD}, "fresh": {}})
        assert not host.host.session("m", None).mid_stream
        host.push(2, {"m": None})  # timed out: its session ends
        host.push(3, {"m": {1: NEW}})  # back
        assert host.host.session("m", None).mid_stream
        assert not host.host.session("fresh", None).mid_stream  # a first session starts at 0
        host.host.reader_closed(host.readers["m"])  # closed: nothing carries over
        assert "m" not in host.host.sessions
        host.push(4, {"m": {1: NEW}})
        assert not host.host.session("m", None).mid_stream

    asyncio.run(main())


def test_a_leave_older_than_the_member_s_view_is_ignored() -> None:
    host = _Host()
    host.push(5, {"m": {1: NEW}})
    host.push(4, {"m": None})
    assert host.left == [] and host.host.views["g"]["m"] == (5, {1: NEW})


def test_a_pushed_view_reaches_the_member_s_open_session() -> None:
    async def main() -> None:
        host = _Host()
        host.member()
        session = host.host.session("m", None)
        assert session.view.leases == {}
        host.push(1, {"m": {0: OLD, 1: OLD}})
        assert session.view.leases == {0: OLD, 1: OLD}

    asyncio.run(main())


def test_forget_group_drops_its_views_and_marks() -> None:
    host = _Host()
    host.push(1, {"m": {1: OLD}}, generation=1)
    host.host.forget_group("g")
    assert "g" not in host.host.views and "g" not in host.host.marks


# -- sessions --------------------------------------------------------------------------------------


def test_a_session_opens_from_the_latest_pushed_view_unless_its_handle_s_is_newer() -> None:
    async def main() -> None:
        host = _Host()
        host.member("m")
        host.member("n")
        host.push(3, {"m": {1: NEW}, "n": {1: NEW}})
        lagging = host.host.session("m", (2, {1: OLD}))  # its handle lags behind
        assert lagging.view.leases == {1: NEW}
        ahead = host.host.session("n", (4, {1: OLD, 2: OLD}))
        assert ahead.view.leases == {1: OLD, 2: OLD}
        assert host.host.session("m", None) is lagging  # one session per reader

    asyncio.run(main())


def test_an_anonymous_reader_s_session_owns_every_channel() -> None:
    async def main() -> None:
        host = _Host()
        host.anonymous("a")
        session = host.host.session("a", None)
        assert session.view.leases == {0: None, 1: None, 2: None}
        with pytest.raises(SubscriberClosedError):
            host.host.session("closed", None)

    asyncio.run(main())


def test_a_closed_reader_loses_its_session_and_pushed_view() -> None:
    async def main() -> None:
        host = _Host()
        reader = host.member()
        host.push(1, {"m": {1: OLD}})
        session = host.host.session("m", None)
        host.host.reader_closed(reader)
        assert session.closed and "m" not in host.host.sessions
        assert "m" not in host.host.views["g"]

    asyncio.run(main())


def test_every_change_of_the_host_channel_pokes_its_sessions() -> None:
    host = _Host()
    session = host.host.sessions["x"] = _RecordingSession()  # type: ignore[assignment]
    host.context.notify()
    host.context.wake()  # this channel's own waiters only
    assert session.pokes == [1]


# -- ports -----------------------------------------------------------------------------------------


def test_link_makes_this_channel_local_and_the_siblings_remote() -> None:
    async def main() -> None:
        host = _Host()
        made: list[tuple[str, set[Any]]] = []

        def remote_caller(handle: str, in_flight: set[Any]) -> Any:
            made.append((handle, in_flight))

            async def call(*request: Any) -> Any:
                return f"served by {handle}"

            return call

        assert not host.host.linked
        host.host.link(["h0", "h1", "h2"], remote_caller)
        ports = host.host.ports
        assert host.host.linked and sorted(ports) == [0, 1, 2]
        assert [handle for handle, _ in made] == ["h0", "h2"]  # not this channel's own
        assert all(in_flight is host.host.sibling_calls for _, in_flight in made)
        assert isinstance(ports[1], LocalPort)
        assert isinstance(ports[0], RemotePort) and isinstance(ports[2], RemotePort)
        assert ports[1].state_in_place("r", None) is not None  # read in place
        assert ports[0].state_in_place("r", None) is None  # a sibling is watched instead
        assert await ports[1].take(Take("r", None, 1)) == "served here"  # in process
        assert await ports[2].watch("r", None, None) == "served by h2"

    asyncio.run(main())


# -- end_receives ----------------------------------------------------------------------------------


def test_a_host_not_linked_finds_its_siblings_when_it_opens_its_first_session() -> None:
    # A restarted channel: AttachChannels came to its earlier incarnation.
    async def main() -> None:
        host = _Host(siblings=["h0", "h1", "h2"])
        with pytest.raises(SubscriberClosedError):
            host.host.session("a", None)  # a closed reader: nothing is looked up
        assert host.found == []
        host.anonymous()
        host.host.session("a", None)
        assert host.found == [["h0", "h1", "h2"]] and host.host.linked
        assert isinstance(host.host.ports[0], RemotePort)
        host.anonymous("b")
        host.host.session("b", None)
        assert len(host.found) == 1  # linked once

    asyncio.run(main())


# -- receives paused, resumed, interrupted -----------------------------------------------------


def test_a_pause_opens_the_reader_s_session_only_for_receives_still_out() -> None:
    async def main() -> None:
        host = _Host(siblings=["h0", "h1", "h2"])
        host.anonymous()
        await host.host.pause("a", "s", -1, receives_out=False)
        assert "a" not in host.host.sessions
        await host.host.pause("closed", "s", -1, receives_out=True)  # nothing to open
        assert "closed" not in host.host.sessions
        await host.host.pause("a", "s", -1, receives_out=True)
        assert "a" in host.host.sessions
        host.host.resume("a")
        host.host.resume("closed")  # no session: nothing to resume

    asyncio.run(main())


def test_an_interrupt_opens_an_open_reader_s_session_and_ignores_a_closed_one() -> None:
    async def main() -> None:
        host = _Host(siblings=["h0", "h1", "h2"])
        host.host.interrupt("a", "s", 3)
        assert "a" not in host.host.sessions
        host.anonymous()
        host.host.interrupt("a", "s", 3)
        assert "a" in host.host.sessions
        assert host.host.hand_over_mark("closed", 0, 0) is None
        assert host.host.resequencer_stats("closed") is None

    asyncio.run(main())


def test_end_receives_closes_every_session_with_the_reason() -> None:
    host = _Host()
    session = host.host.sessions["x"] = _RecordingSession()  # type: ignore[assignment]
    host.host.end_receives("topic destroyed")
    (error,) = session.closed_with
    assert isinstance(error, TopicNotFoundError) and "topic destroyed" in str(error)


def test_a_receive_that_comes_after_end_receives_raises_the_reason_at_once() -> None:
    # Before: an anonymous reader's first receive that reached its host after the
    # destroy's EndReceives opened a session and waited, until the kill made it Ray's
    # ActorDiedError (1 run in 6 of test_topic's destroy script under load).
    async def main() -> None:
        host = _Host()
        host.anonymous("late")
        host.host.end_receives("topic 't' was destroyed")
        with pytest.raises(TopicNotFoundError, match="was destroyed"):
            await asyncio.wait_for(
                host.host.receive("late", "s", 1, 10, False, False, False, None), 1.0
            )
        assert "late" not in host.host.sessions

    asyncio.run(main())
