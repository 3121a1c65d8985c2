"""The channel actor's class run in-process (no Ray): bookkeeping that a test
against a real actor could not see."""

from __future__ import annotations

import asyncio
import inspect
import logging
import pickle
import re
import time
from collections.abc import Callable
from typing import Any

import cloudpickle
import pyarrow as pa
import pytest

from raytopic.actors import channel as channel_module
from raytopic.actors.channel import ChannelActor
from raytopic.actors.channel_dispatch import SERVED, Admit
from raytopic.actors.receive.ports import LocalPort, RemotePort
from raytopic.actors.receive_session import ReceiveSession
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import (
    ChannelFailedError,
    ChannelUnavailableError,
    InvalidArgumentError,
    PoisonElementError,
    StaleSequenceError,
    StoreError,
    TopicNotFoundError,
)
from raytopic.core.payloads import ArrowRows, PickledValues
from raytopic.core.protocol import (
    CHANNEL_REQUESTS,
    CONTROL_REQUESTS,
    STREAM_REQUESTS,
    TRANSACTION_REQUESTS,
    Append,
    AppendOnce,
    ChannelRequest,
    Commit,
    EndReceives,
    EnsureGroup,
    Grant,
    Lease,
    OpenReader,
    PauseReceives,
    ReadCursor,
    ReaderSpec,
    ReadGroupCursors,
    ReadMany,
    ReadOpeningError,
    ReadRange,
    ReadReaderSpecs,
    ReadRingFigures,
    Receive,
    Seek,
    Take,
    UpdateViews,
    pack_request,
)
from raytopic.core.shared_group import SharedGroup

from tests.actors.channel_calls import TWO_CHANNELS, ask

CONFIG = TopicConfig("t", "ns", "t0pic1d", 1, 100_000, True, None, Overflow.BLOCK, ())
MEMBER = Lease("m", 1)


def _in_process(actor: ChannelActor, reply_delay: float = 0.0) -> Callable[..., Any]:
    """A sibling link: the call runs at the sibling at once (through its entry, as Ray
    would make it); its reply takes a while."""

    async def call(request: ChannelRequest) -> Any:
        result = await ask(actor, request)
        if reply_delay:
            await asyncio.sleep(reply_delay)
        return result

    return call


def _host_port(actor: ChannelActor) -> LocalPort:
    """The host channel's port: its readers' take, in process (as ``SessionHost.link``
    makes it)."""
    readers = actor._readers
    return LocalPort(actor._channel, readers.take, actor._parts.cursor_in_process, readers.take_now)


def _wired(config: TopicConfig, reply_delay: float = 0.0) -> list[ChannelActor]:
    """Every channel of ``config`` in-process; channel 0 is the home, linked to the rest."""
    channels = [ChannelActor(config, c) for c in range(config.channels)]
    home = channels[0]
    home._host.ports = {0: _host_port(home)}
    for sibling in channels[1:]:
        call = _in_process(sibling, reply_delay)
        home._host.ports[sibling._channel] = RemotePort(sibling._channel, call)
    return channels


async def _group_member(
    channels: list[ChannelActor], granted: list[ChannelActor], window: int | None = None
) -> None:
    """Member "m" of group "g" on every channel, holding the lease on ``granted``."""
    for channel in channels:
        await channel.control(EnsureGroup("g", False))
        await channel.control(OpenReader("m", ReaderSpec("g", False, window=window)))
        if channel in granted:
            await channel.control(Grant("g", MEMBER))


async def _anonymous_pair(
    config: TopicConfig = TWO_CHANNELS, *, reply_delay: float = 0.0, keep: Any = None
) -> tuple[ChannelActor, ChannelActor]:
    """Home channel 0 and sibling 1 in-process, hosting anonymous reader "a"."""
    home, sibling = _wired(config, reply_delay)
    spec = ReaderSpec(
        None,
        False,
        filter=None if keep is None else cloudpickle.dumps(keep),
        complete_on_empty=True,
    )
    for channel in (home, sibling):
        await channel.control(OpenReader("a", spec))
    return home, sibling


def _values(batch: Any) -> list[tuple[int, int, int]]:
    return [(d.channel, d.first, d.count) for d in batch.deliveries]


def _payloads(values: Any) -> PickledValues:
    return PickledValues.from_values(values)


async def _member_with_a_full_window(home_owned: bool) -> tuple[ChannelActor, ReceiveSession]:
    """Home channel 0 and sibling 1, both in-process; a group member whose window
    of 3 is filled by channel 1 alone."""
    home, sibling = _wired(TWO_CHANNELS)
    await _group_member([home, sibling], [home, sibling] if home_owned else [sibling], window=3)
    owned = {0: MEMBER, 1: MEMBER} if home_owned else {1: MEMBER}
    home._host.session("m", (1, owned))
    await ask(sibling, Append("publisher", 0, "block", 1.0, False), _payloads(range(3)))
    received = await ask(home, Receive("m", "s", 0, 3, False))
    assert sum(d.count for d in received.deliveries) == 3
    return home, home._host.sessions["m"]


def _fail_on_spinning(session: ReceiveSession) -> None:
    """Make a receive loop that never yields fail instead of hanging the test."""
    room = session.view.room
    calls = 0

    def counted() -> int:
        nonlocal calls
        calls += 1
        if calls > 10_000:
            raise RuntimeError("the receive loop spins without waiting")
        return room()

    session.view.room = counted  # type: ignore[method-assign]


async def _home_goes_to_another_member(home: ChannelActor) -> None:
    await home.control(Grant("g", Lease("other", 2)))  # the coordinator grants the new owner first


async def _home_is_newly_assigned(home: ChannelActor) -> None:
    lease = Lease("m", 2)
    await home.control(Grant("g", lease))
    await home.control(UpdateViews("g", 5, {"m": {0: lease, 1: MEMBER}}))


@pytest.mark.parametrize(
    ("home_owned", "move", "owns_home_after"),
    [(True, _home_goes_to_another_member, False), (False, _home_is_newly_assigned, True)],
)
def test_a_full_window_waits_while_the_host_channel_changes_owner(
    home_owned: bool, move: Callable[[ChannelActor], None], owns_home_after: bool
) -> None:
    async def main() -> None:
        home, session = await _member_with_a_full_window(home_owned)
        _fail_on_spinning(session)
        waiting = asyncio.ensure_future(ask(home, Receive("m", "s", 1, 1, True)))
        await asyncio.sleep(0.05)
        await move(home)
        await asyncio.sleep(0.05)
        assert not waiting.done()  # still waiting for a commit, not spinning
        assert session.view.owns(0) is owns_home_after
        session.close()
        await asyncio.wait_for(waiting, 2.0)

    asyncio.run(main())


def test_a_filtered_reader_with_a_window_is_not_held_by_the_misses() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        keep = cloudpickle.dumps(lambda value: value >= 100)
        spec = ReaderSpec(None, False, filter=keep, complete_on_empty=True, window=5)
        await channel.control(OpenReader("r", spec))
        await ask(channel, Append("publisher", 0, "block", 1.0, False), _payloads(range(20)))
        nothing = await ask(channel, Receive("r", "s", 0, 1, True))
        assert [d.count for d in nothing.deliveries] == []
        assert (await ask(channel, ReadCursor("r"))).unacked == 0
        await ask(channel, Append("publisher", 1, "block", 1.0, False), _payloads([500]))
        match = await asyncio.wait_for(ask(channel, Receive("r", "s", 1, 1, True)), 2.0)
        assert [d.count for d in match.deliveries] == [1]
        assert (await ask(channel, ReadCursor("r"))).unacked == 1

    asyncio.run(main())


# -- nothing taken is lost -----------------------------------------------------------


def _refuse_poison(value: Any) -> bool:
    if value == "poison":
        raise ValueError("a filter that fails on one value")
    return True


def test_a_failing_take_moves_back_what_the_other_channels_took_before_it_answers() -> None:
    async def main() -> None:
        home, sibling = await _anonymous_pair()
        await ask(home, Append("p", 0, "block", 1.0, False), _payloads(range(600)))
        await ask(sibling, Append("p", 0, "block", 1.0, False), _payloads(["x"]))

        async def failed(request: ChannelRequest) -> Any:  # as a failed sibling's guard answers
            raise ChannelFailedError("its store failed")

        home._host.ports[1] = RemotePort(1, failed)
        with pytest.raises(ChannelFailedError, match="its store failed"):
            await ask(home, Receive("a", "s", 0, 4000, False, True))  # an iteration's receive
        assert (await ask(home, ReadCursor("a"))).next == 0  # the 600 are back

    asyncio.run(main())


def test_a_poison_element_at_a_sibling_is_told_after_what_the_others_handed_over() -> None:
    async def main() -> None:
        home, sibling = await _anonymous_pair(keep=_refuse_poison)
        await ask(home, Append("p", 0, "block", 1.0, False), _payloads(range(600)))
        await ask(sibling, Append("p", 0, "block", 1.0, False), _payloads(["poison", "after"]))
        taken = await ask(home, Receive("a", "s", 0, 4000, False, True))  # an iteration's receive
        assert _values(taken) == [(0, 0, 600)]
        with pytest.raises(PoisonElementError, match="fails on one value") as told:
            await ask(home, Receive("a", "s", 1, 4000, False, True))
        assert (told.value.channel, told.value.position.sequence) == (1, 0)
        assert (await ask(sibling, ReadCursor("a"))).next == 0  # it stays before the poison

    asyncio.run(main())


def test_a_channel_revoked_while_an_iteration_takes_is_skipped_not_fatal() -> None:
    async def main() -> None:
        home, sibling = _wired(TWO_CHANNELS)
        await _group_member([home, sibling], granted=[home, sibling])
        for channel in (home, sibling):
            await ask(channel, Append("p", 0, "block", 1.0, False), _payloads(range(600)))
        home._host.session("m", (1, {0: MEMBER, 1: MEMBER}))
        await sibling.control(Grant("g", Lease("other", 2)))  # the rebalance, then the view ...
        receiving = asyncio.ensure_future(ask(home, Receive("m", "s", 0, 4000, False, True)))
        view = {"m": {0: MEMBER}}
        asyncio.get_running_loop().call_soon(
            lambda: asyncio.ensure_future(home.control(UpdateViews("g", 5, view)))
        )
        assert _values(await receiving) == [(0, 0, 600)]  # ... lands mid-receive

    asyncio.run(main())


def test_a_cancelled_receive_gives_back_before_the_next_receive_takes() -> None:
    async def main() -> None:
        home, sibling = await _anonymous_pair(reply_delay=0.02)
        await ask(sibling, Append("p", 0, "block", 1.0, False), _payloads(range(20)))
        first = asyncio.ensure_future(ask(home, Receive("a", "s", 0, 10, False)))
        second = asyncio.ensure_future(ask(home, Receive("a", "s", 1, 10, False)))
        await asyncio.sleep(0.005)  # the first take ran at the sibling; its reply is on the way
        first.cancel()  # what ray.cancel does to an async actor call
        assert _values(await second) == [(1, 0, 10)]  # 0..9 again, not 10..19
        third = await ask(home, Receive("a", "s", 2, 10, False))
        assert _values(third) == [(1, 10, 10)]

    asyncio.run(main())


def test_a_give_back_after_a_seek_does_not_undo_the_seek() -> None:
    async def main() -> None:
        home, sibling = await _anonymous_pair(reply_delay=0.02)
        await ask(sibling, Append("p", 0, "block", 1.0, False), _payloads(range(10)))
        taking = asyncio.ensure_future(ask(home, Receive("a", "s", 0, 10, False)))
        await asyncio.sleep(0.005)  # 0..9 taken at the sibling; the reply is on the way
        taking.cancel()
        await asyncio.sleep(0)
        await ask(home, PauseReceives("a", "s", 0))
        await ask(sibling, Seek("a", None, 1 << 62, False, False))  # seek_to_tail: next stays 10
        await asyncio.sleep(0.1)  # the give-back arrives, and is refused
        assert (await ask(sibling, ReadCursor("a"))).next == 10
        await ask(sibling, Append("p", 1, "block", 1.0, False), _payloads(["after"]))
        after = await asyncio.wait_for(ask(home, Receive("a", "s", 1, 10, False)), 2.0)
        assert _values(after) == [(1, 10, 1)]

    asyncio.run(main())


def test_a_fetch_that_came_back_to_a_cancelled_receive_is_never_handed_over_again() -> None:
    # The cancel lands in the loop turn between a fetch's reply and the wake-up of the
    # receive it came for: the reply is kept for "the waiting receive", which is gone.
    # The next receive reads the same elements again at the sibling; a later one
    # that waits must not hand the kept reply over as well (a reply for a position
    # the session has read past is dropped).
    async def main() -> None:
        home, sibling = _wired(TWO_CHANNELS)
        for channel in (home, sibling):
            await channel.control(OpenReader("a", ReaderSpec(None, False)))
        waiting = asyncio.ensure_future(ask(home, Receive("a", "s", 0, 10, False)))
        deadline = time.monotonic() + 30.0
        while "a" not in home._host.sessions or 1 not in home._host.sessions["a"]._waits.busy:
            assert time.monotonic() < deadline, "no fetch went out to the sibling"
            await asyncio.sleep(0.001)
        fetch = home._host.sessions["a"]._waits.busy[1]
        fetch.add_done_callback(lambda _: waiting.cancel())  # what ray.cancel does, then
        await ask(sibling, Append("p", 0, "block", 1.0, False), _payloads(range(20)))
        with pytest.raises(asyncio.CancelledError):
            await waiting  # its fetch brought 0..9, and 10.. are known to be there
        assert _values(await ask(home, Receive("a", "s", 1, 10, False))) == [(1, 0, 10)]
        assert _values(await ask(home, Receive("a", "s", 2, 10, False))) == [(1, 10, 10)]
        await ask(sibling, Append("p", 1, "block", 1.0, False), _payloads(range(20, 23)))
        after = await asyncio.wait_for(ask(home, Receive("a", "s", 3, 10, False)), 30.0)
        assert _values(after) == [(1, 20, 3)]  # not 0..9 a second time

    asyncio.run(main())


def test_a_pause_opens_a_session_only_for_receives_still_out() -> None:
    # A channel with no session of the reader (a restarted host) opens one for a pause
    # only when the handle's receives had not answered: they may still come, retried,
    # and the pause waits for them; none out, a new session would wait for nothing.
    async def main() -> None:
        home, _ = await _anonymous_pair()
        await asyncio.wait_for(ask(home, PauseReceives("a", "s", 0)), 2.0)
        assert "a" not in home._host.sessions
        pausing = asyncio.ensure_future(ask(home, PauseReceives("a", "s", 0, True)))
        await asyncio.sleep(0.05)
        assert "a" in home._host.sessions and not pausing.done()  # waits for receive 0
        assert _values(await ask(home, Receive("a", "s", 0, 10, False))) == []
        await asyncio.wait_for(pausing, 2.0)

    asyncio.run(main())


def test_every_channel_that_skipped_overwritten_elements_is_reported() -> None:
    async def main() -> None:
        small = TopicConfig("t", "ns", "t0pic1d", 2, 300, True, None, Overflow.OVERWRITE, ())
        home, sibling = await _anonymous_pair(small)
        for channel in (home, sibling):
            await ask(channel, Append("p", 0, "overwrite", None, False), _payloads(range(1000)))
        reported, delivered = [], []
        for number in range(4):
            try:
                delivered += _values(await ask(home, Receive("a", "s", number, 4000, False, True)))
            except StaleSequenceError as error:
                reported.append(error.skipped)
        assert reported == [700, 700]
        assert sorted(delivered) == [(0, 700, 300), (1, 700, 300)]

    asyncio.run(main())


def test_an_iteration_receive_never_takes_more_than_asked() -> None:
    async def main() -> None:
        four = TopicConfig("t", "ns", "t0pic1d", 4, 10_000, True, None, Overflow.BLOCK, ())
        channels = _wired(four)
        home = channels[0]
        for channel in channels:
            await channel.control(OpenReader("a", ReaderSpec(None, False)))
            await ask(channel, Append("p", 0, "block", 1.0, False), _payloads(range(1000)))
        batch = await ask(home, Receive("a", "s", 0, 1001, False, True))
        assert sum(count for _, _, count in _values(batch)) == 1001

    asyncio.run(main())


# -- Arrow rows ------------------------------------------------------------------------


def _rows(ids: range) -> ArrowRows:
    return ArrowRows(
        pa.RecordBatch.from_pydict({"id": list(ids), "user": [f"u{i % 3}" for i in ids]})
    )


def test_arrow_rows_append_through_the_publish_path_and_read_back_one_position_per_row() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        await channel.control(OpenReader("a", ReaderSpec(None, False, complete_on_empty=True)))
        await ask(channel, Append("p", 0, "block", 1.0, False), _payloads(["before"]))
        packed = pack_request(
            Append(publisher_id="spark", batch=0, overflow="block", timeout=1.0, statuses=True)
        )
        status = await channel.request(packed, _rows(range(5)))
        assert [s.position.sequence for s in status.statuses()] == [1, 2, 3, 4, 5]
        batch = await ask(channel, Receive("a", "s", 0, 100, False))
        elements = pickle.loads(pickle.dumps(batch))
        assert [(e.value, e.sequence) for e in elements[:2]] == [
            ("before", 0),
            ({"id": 0, "user": "u0"}, 1),
        ]
        assert [e.sequence for e in elements] == list(range(6))
        rows = elements[1:]
        assert {e.stamp for e in rows} == {status.statuses()[0].timestamp.timestamp()}
        assert [e.value["id"] for e in rows] == [0, 1, 2, 3, 4]
        # A ring buffer read of the same rows: dicts, with their sequences.
        result = pickle.loads(pickle.dumps(await ask(channel, ReadMany(2, 1, 3, None))))
        assert list(result) == [
            {"id": 1, "user": "u1"},
            {"id": 2, "user": "u2"},
            {"id": 3, "user": "u0"},
        ]
        assert [result.get_sequence(i) for i in range(3)] == [2, 3, 4]

    asyncio.run(main())


def test_a_filter_and_a_converter_see_arrow_rows_as_dicts() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        keep = cloudpickle.dumps(lambda row: row["user"] == "u1")
        convert = cloudpickle.dumps(lambda row: f"{row['user']}#{row['id']}")
        kept_spec = ReaderSpec(None, False, filter=keep, complete_on_empty=True)
        await channel.control(OpenReader("kept", kept_spec))
        both_spec = ReaderSpec(None, False, keep, convert, complete_on_empty=True)
        await channel.control(OpenReader("both", both_spec))
        await ask(channel, Append("p", 0, "block", 1.0, False), _rows(range(10)))
        kept = pickle.loads(pickle.dumps(await ask(channel, Receive("kept", "s", 0, 100, False))))
        assert [(e.value, e.sequence) for e in kept] == [
            ({"id": 1, "user": "u1"}, 1),
            ({"id": 4, "user": "u1"}, 4),
            ({"id": 7, "user": "u1"}, 7),
        ]
        both = pickle.loads(pickle.dumps(await ask(channel, Receive("both", "s", 0, 2, False))))
        assert [(e.value, e.sequence) for e in both] == [("u1#1", 1), ("u1#4", 4)]
        both_cursor = await ask(channel, ReadCursor("both"))
        assert both_cursor.next == 5  # read up to the last match taken

    asyncio.run(main())


# -- where reads go ---------------------------------------------------------------------


def _snake(name: str) -> str:
    """``SettleTake`` -> ``settle_take``: a request type named as its call."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _counting(
    channels: list[ChannelActor], requests: dict[int, list[Any]] | None = None
) -> dict[int, list[str]]:
    """Give every channel ports to all the others that record each call made (its
    request, in ``requests`` if given)."""
    calls: dict[int, list[str]] = {c._channel: [] for c in channels}
    for channel in channels:
        ports: dict[int, Any] = {}
        for other in channels:
            if other is channel:
                ports[other._channel] = _host_port(channel)
                continue

            async def call(request: ChannelRequest, _to: ChannelActor = other) -> Any:
                calls[_to._channel].append(_snake(type(request).__name__))
                if requests is not None:
                    requests.setdefault(_to._channel, []).append(request)
                return await ask(_to, request)

            ports[other._channel] = RemotePort(other._channel, call)
        channel._host.ports = ports
    return calls


def test_bulk_reads_on_eight_channels_take_where_the_data_is_with_no_relay() -> None:
    async def main() -> None:
        eight = TopicConfig("t", "ns", "t0pic1d", 8, 10_000, True, None, Overflow.BLOCK, ())
        channels = [ChannelActor(eight, c) for c in range(8)]
        calls = _counting(channels)
        for channel in channels:
            await channel.control(OpenReader("a", ReaderSpec(None, False, complete_on_empty=True)))
            await ask(channel, Append("p", 0, "block", 1.0, False), _payloads(range(600)))
        # An iteration's receives: one per channel, each scoped to its channel.
        taken = [await ask(c, Receive("a", "i", 0, 500, False, False, True)) for c in channels]
        assert [_values(batch) for batch in taken] == [[(c, 0, 500)] for c in range(8)]
        # A batch receive sent to a channel that has data takes it there.
        batch = await ask(channels[3], Receive("a", "b", 0, 1000, False))
        assert _values(batch) == [(3, 500, 100)]
        assert calls == {c: [] for c in range(8)}  # no channel called another

    asyncio.run(main())


def test_a_waiting_receive_gets_a_siblings_element_in_one_fetch() -> None:
    async def main() -> None:
        home, sibling = _wired(TWO_CHANNELS)
        calls = _counting([home, sibling])
        for channel in (home, sibling):
            await channel.control(OpenReader("a", ReaderSpec(None, False)))
        waiting = asyncio.ensure_future(ask(home, Receive("a", "s", 0, 10, False)))
        await asyncio.sleep(0.05)
        # A look (empty), then a fetch that waits at the sibling.
        assert not waiting.done() and calls[1] == ["take", "take"]
        await ask(sibling, Append("p", 0, "block", 1.0, False), _payloads(["x", "y"]))
        batch = await asyncio.wait_for(waiting, 2.0)
        assert _values(batch) == [(1, 0, 2)]
        await asyncio.sleep(0.05)
        # The fetch brought the elements as an offer: no call after it.
        assert calls[1] == ["take", "take"]
        assert (await ask(sibling, ReadCursor("a"))).next == 0  # an offer moved nothing
        # A pause (before a seek, an iteration, a cursor read) moves it over them.
        await ask(home, PauseReceives("a", "s", 0))
        assert calls[1] == ["take", "take", "take"]
        assert (await ask(sibling, ReadCursor("a"))).next == 2  # used: not read again
        home._host.sessions["a"].close()

    asyncio.run(main())


def test_each_relayed_value_costs_one_call_between_channels_and_nothing_follows() -> None:
    async def main() -> None:
        home, sibling = _wired(TWO_CHANNELS)
        sent: dict[int, list[Any]] = {}
        calls = _counting([home, sibling], sent)
        for channel in (home, sibling):
            await channel.control(OpenReader("a", ReaderSpec(None, False)))
        for number in range(6):
            waiting = asyncio.ensure_future(ask(home, Receive("a", "s", number, 10, True)))
            while len(calls[1]) < number + 2:  # its fetch waits at the sibling
                await asyncio.sleep(0.005)
            await ask(sibling, Append("p", number, "block", 1.0, False), _payloads([number]))
            batch = await asyncio.wait_for(waiting, 2.0)
            assert _values(batch) == [(1, number, 1)]
        # A look (empty), then one fetch per value, each moving the read position
        # over the one before.
        assert calls[1] == ["take"] * 7
        assert [t.from_sequence for t in sent[1]] == [None, 0, 1, 2, 3, 4, 5]
        await asyncio.sleep(0.05)
        assert calls[1] == ["take"] * 7  # nothing follows the last
        assert (await ask(sibling, ReadCursor("a"))).next == 5  # the last fetch moved it
        home._host.sessions["a"].close()

    asyncio.run(main())


def test_a_shared_members_element_no_receive_took_waits_in_its_session_for_the_next() -> None:
    # Its hold is the record: it is not given back, and not read again.
    async def main() -> None:
        three = TopicConfig("t", "ns", "t0pic1d", 3, 1000, True, None, Overflow.BLOCK, ())
        home, one, two = _wired(three)
        calls = _counting([home, one, two])
        worker = Lease("w", 1)
        for channel in (home, one, two):
            await channel.control(EnsureGroup("s", False, SharedGroup("s")))
            await channel.control(OpenReader("w", ReaderSpec("s", False)))
            await channel.control(UpdateViews("s", 1, {"w": {0: worker, 1: worker, 2: worker}}))
        waiting = asyncio.ensure_future(ask(home, Receive("w", "s", 0, 1, True)))
        while len(calls[1]) < 2 or len(calls[2]) < 2:  # a look, then a fetch, at each
            await asyncio.sleep(0.005)
        await asyncio.gather(
            ask(one, Append("p", 0, "block", 1.0, False), _payloads(["x"])),
            ask(two, Append("p", 0, "block", 1.0, False), _payloads(["y"])),
        )
        first = await asyncio.wait_for(waiting, 2.0)
        await asyncio.sleep(0.05)  # the other fetch comes back to no receive
        made = len(calls[1]) + len(calls[2])
        second = await asyncio.wait_for(ask(home, Receive("w", "s", 1, 1, True)), 2.0)
        assert {d.channel for d in (*first.deliveries, *second.deliveries)} == {1, 2}
        assert len(calls[1]) + len(calls[2]) == made  # handed out from the session
        home._host.sessions["w"].close()

    asyncio.run(main())


# -- takes by position: nothing lent ------------------------------------------------------


def _at(first: int, stands: int, jumps: int = 0) -> dict[str, int]:
    """A take's position fields: the session reads from ``first``, and left the read
    position at ``stands`` (under ``jumps``)."""
    return {"from_sequence": first, "stands": stands, "jumps": jumps}


def test_a_fetchs_offer_moves_nothing_and_the_next_take_moves_over_what_was_used() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        await channel.control(OpenReader("a", ReaderSpec(None, False)))
        await ask(channel, Append("p", 0, "block", 1.0, False), _payloads(range(5)))
        offer = await ask(channel, Take("a", None, 2, 1.0))  # a fetch: offers 0 and 1
        assert (offer.first, offer.count, offer.stands) == (0, 2, 0)
        assert (await ask(channel, ReadCursor("a"))).next == 0  # nothing lent, nothing moved
        # Another session of the reader reads the same elements: nothing waits.
        other = await asyncio.wait_for(ask(channel, Take("a", None, 1)), 2.0)
        assert (other.first, other.count) == (0, 1)
        # The fetch's session used 0 and 1: its next take names where it reads on, but
        # the read position no longer stands where it left it: it reads on from there.
        stale = await ask(channel, Take("a", None, 10, **_at(2, 0)))
        assert (stale.first, stale.count) == (1, 4)
        # Taken again at the position it names, a take gives the same elements.
        again = await ask(channel, Take("a", None, 10, **_at(1, 5)))
        assert (again.first, again.count) == (1, 4)

    asyncio.run(main())


def test_a_waiting_fetch_whose_read_position_moves_takes_nothing() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        await channel.control(OpenReader("a", ReaderSpec(None, False)))
        waiting = asyncio.ensure_future(ask(channel, Take("a", None, 10, 5.0)))
        await asyncio.sleep(0.05)
        await ask(channel, Append("p", 0, "block", 1.0, False), _payloads(["x"]))
        assert (await ask(channel, Take("a", None, 10))).count == 1  # another session's take
        await ask(channel, Append("p", 1, "block", 1.0, False), _payloads(["y"]))
        moved = await asyncio.wait_for(waiting, 2.0)
        assert (moved.count, moved.stands) in ((0, 1), (1, 0))  # took nothing, or offered x
        assert (await ask(channel, Take("a", None, 10))).first == 1  # "y" is still there

    asyncio.run(main())


def test_a_take_named_before_a_seek_reads_from_where_the_seek_left_the_read_position() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        await channel.control(OpenReader("a", ReaderSpec(None, False)))
        await ask(channel, Append("p", 0, "block", 1.0, False), _payloads(range(5)))
        taken = await ask(channel, Take("a", None, 2))
        _, jumps = await ask(channel, Seek("a", None, 3, False, False))  # next is 4
        assert jumps == taken.jumps + 1
        # Reading 0 and 1 again (they reached no receive) is void after the jump.
        after = await ask(channel, Take("a", None, 10, **_at(0, 2, taken.jumps)))
        assert (after.first, after.jumps) == (4, jumps)
        assert (await ask(channel, ReadCursor("a"))).next == 5

    asyncio.run(main())


def test_a_take_of_nothing_moves_the_read_position_only_where_it_still_stands() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        await channel.control(OpenReader("a", ReaderSpec(None, False)))
        await ask(channel, Append("p", 0, "block", 1.0, False), _payloads(range(5)))
        taken = await ask(channel, Take("a", None, 3))  # 0..2: no receive hands them over
        assert (await ask(channel, Take("a", None, 0, **_at(0, 3)))).next == 0
        assert (await ask(channel, ReadCursor("a"))).next == 0  # back: read again
        await ask(channel, Take("a", None, 1))  # the reader's read position moves on
        assert (await ask(channel, Take("a", None, 0, **_at(0, 3)))).next == 1  # refused
        assert taken.count == 3

    asyncio.run(main())


def test_a_member_whose_host_was_lost_reads_again_after_the_commit() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        await _group_member([channel], granted=[channel])
        await ask(channel, Append("p", 0, "block", 1.0, False), _payloads(range(6)))
        await ask(channel, Take("m", MEMBER, 2))
        await ask(channel, Commit("m", 1, MEMBER))
        await ask(channel, Take("m", MEMBER, 3))  # 2..4: in a reply that died with its host
        again = await ask(channel, Take("m", MEMBER, 10, again=True))
        assert (again.first, again.count) == (2, 4)
        # An anonymous reader with no commit has nowhere to go back to: it reads on.
        await channel.control(OpenReader("a", ReaderSpec(None, False)))
        await ask(channel, Take("a", None, 2))
        assert (await ask(channel, Take("a", None, 10, again=True))).first == 2

    asyncio.run(main())


# -- bulk reads and exactly-once appends -------------------------------------------------


def test_read_range_returns_held_payloads_up_to_stop_and_never_waits() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        await ask(channel, Append("p", 0, "block", 1.0, False), _payloads(["a", "b"]))
        await ask(channel, Append("spark", 0, "block", 1.0, False), _rows(range(4)))
        chunks = await ask(channel, ReadRange(1, 5, 100))
        assert [(c.first, len(c.payload)) for c in chunks] == [(1, 1), (2, 3)]
        assert isinstance(chunks[1].payload, ArrowRows)  # Arrow stays Arrow
        assert [c.first for c in (await ask(channel, ReadRange(0, 100, 2)))] == [0]  # max_count
        assert sum(len(c.payload) for c in (await ask(channel, ReadRange(0, 100, 2)))) == 2
        assert (await ask(channel, ReadRange(6, 10, 100))) == ()  # past the tail: empty, no wait
        assert (await ask(channel, ReadRange(3, 3, 100))) == ()

    asyncio.run(main())


def test_read_range_below_the_head_without_a_store_is_a_stale_sequence() -> None:
    async def main() -> None:
        small = TopicConfig("t", "ns", "t0pic1d", 1, 3, True, None, Overflow.OVERWRITE, ())
        (channel,) = _wired(small)
        await ask(channel, Append("p", 0, "overwrite", 1.0, False), _payloads(list("abcde")))
        with pytest.raises(StaleSequenceError) as caught:
            (await ask(channel, ReadRange(0, 5, 10)))
        assert caught.value.head_sequence == 2

    asyncio.run(main())


def test_append_once_appends_each_version_of_a_writer_once_with_gaps_allowed() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        first = await ask(channel, AppendOnce("once:q", 3, "block", 1.0), _rows(range(2)))
        assert (first.first, first.accepted) == (0, 2)
        again = await ask(channel, AppendOnce("once:q", 3, "block", 1.0), _rows(range(2)))
        assert again.accepted == 0  # nothing appended twice
        older = await ask(channel, AppendOnce("once:q", 1, "block", 1.0), _rows(range(9)))
        assert older.accepted == 0
        # A later version after a gap goes in at once (no wait for 4..6).
        later = await asyncio.wait_for(
            ask(channel, AppendOnce("once:q", 7, "block", 1.0), _rows(range(3))), 1.0
        )
        assert (later.first, later.accepted) == (2, 3)
        assert (await ask(channel, ReadRingFigures())).tail == 4
        # Far older than the kept acks: still nothing appended.
        for version in range(8, 8 + 20):
            await ask(channel, AppendOnce("once:q", version, "block", 1.0), _rows(range(1)))
        seven = await ask(channel, AppendOnce("once:q", 7, "block", 1.0), _rows(range(3)))
        assert seven.accepted == 0
        assert (await ask(channel, ReadRingFigures())).tail == 24

    asyncio.run(main())


# -- the entries: Ray's view of the channel -----------------------------------------


def test_ray_sees_a_few_entries_each_behind_the_guard() -> None:
    entries = {
        name
        for name, member in inspect.getmembers(ChannelActor, inspect.isfunction)
        if not name.startswith("_")
    }
    assert len(entries) <= 15, sorted(entries)
    assert entries == {"request", "control"}  # every call is a typed request
    unguarded = {name for name in entries if not hasattr(getattr(ChannelActor, name), "__admits__")}
    assert not unguarded
    # The typed entries serve every request type, each with its own admission.
    assert set(SERVED) == set(CHANNEL_REQUESTS) | set(CONTROL_REQUESTS) | set(
        TRANSACTION_REQUESTS
    ) | set(STREAM_REQUESTS)
    assert all(admit is not Admit.BY_REQUEST for _, admit in SERVED.values())


def test_a_failed_channel_refuses_data_path_and_control_requests_typed() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        await channel.control(OpenReader("a", ReaderSpec(None, False)))
        channel._context.fail("its disk broke")
        with pytest.raises(ChannelFailedError, match="its disk broke"):
            await ask(channel, Take("a", None, 1))
        with pytest.raises(ChannelFailedError):
            await ask(channel, ReadCursor("a"))
        with pytest.raises(ChannelFailedError):
            await channel.control(Grant("g", None))
        # What a coordinator asks to rebuild itself or report the failure is answered.
        assert isinstance(await channel.control(ReadOpeningError()), StoreError)
        assert sorted(await channel.control(ReadReaderSpecs())) == ["a"]

    asyncio.run(main())


def test_a_recovering_channel_holds_data_path_requests_and_refuses_reads_at_once() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        await channel.control(OpenReader("a", ReaderSpec(None, False)))
        await ask(channel, Append("p", 0, "block", 1.0, False), _payloads(["x"]))
        channel._seeded.clear()  # as if restarted without a store, not yet seeded
        channel._recovery._announced = time.monotonic()  # (it told its coordinator just now)
        with pytest.raises(ChannelUnavailableError, match="try again"):
            await ask(channel, ReadCursor("a"))
        taking = asyncio.ensure_future(ask(channel, Take("a", None, 1)))
        await asyncio.sleep(0.05)
        assert not taking.done()  # it waits for the coordinator's seed
        channel._seeded.set()
        assert (await asyncio.wait_for(taking, 2.0)).count == 1

    asyncio.run(main())


def test_each_entry_serves_only_its_own_requests() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        with pytest.raises(InvalidArgumentError):
            await channel.control(Take("a", None, 1))  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            await channel.request(pack_request(Grant("g", None)))
        assert await channel.control(ReadGroupCursors()) == {}  # nothing was changed

    asyncio.run(main())


def test_background_jobs_start_where_the_state_needs_them_and_close_stops_them() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        assert not channel._upkeep.running("shared")
        await channel.control(EnsureGroup("s", False, SharedGroup("s")))
        assert channel._upkeep.running("shared")  # a shared group's holds are tended
        await channel._close()
        assert not channel._upkeep.running("shared")
        await channel.control(EnsureGroup("t", False, SharedGroup("t")))
        assert not channel._upkeep.running("shared")  # closed: nothing starts again
        await channel._close()

    asyncio.run(main())


@pytest.mark.parametrize("window", [None, 5])  # a windowed session watches instead
def test_a_fetch_the_destroyed_topic_ends_at_a_sibling_is_no_failure(
    caplog: pytest.LogCaptureFixture, window: int | None
) -> None:
    async def main() -> None:
        home, sibling = _wired(TWO_CHANNELS)
        for channel in (home, sibling):
            await channel.control(OpenReader("a", ReaderSpec(None, False, window=window)))
        waiting = asyncio.ensure_future(ask(home, Receive("a", "s", 0, 10, False, True)))
        await asyncio.sleep(0.2)  # the receive waits, with a fetch waiting at the sibling
        await sibling.control(EndReceives("topic 't' was destroyed"))  # it hears it first
        await asyncio.sleep(0.1)
        await home.control(EndReceives("topic 't' was destroyed"))
        with pytest.raises(TopicNotFoundError, match="destroyed"):
            await waiting

    with caplog.at_level(logging.INFO):
        asyncio.run(main())
    assert "failed" not in caplog.text


def test_a_destroy_waits_for_a_receive_awaiting_a_slow_sibling_to_answer() -> None:
    # The coordinator kills the actors once every channel answered EndReceives: a
    # receive still unanswered then reaches its handle as Ray's ActorDiedError. Before,
    # the channel waited a second at most, and a sibling slow to answer a take (load
    # ~25 in the suite) outlasted it (2 of 3 full runs failed in test_topic or
    # test_destroyed).
    async def main() -> None:
        home, sibling = _wired(TWO_CHANNELS, reply_delay=1.5)
        for channel in (home, sibling):
            await channel.control(OpenReader("a", ReaderSpec(None, False)))
        waiting = asyncio.ensure_future(ask(home, Receive("a", "s", 0, 10, False, True)))
        await asyncio.sleep(0.2)  # the receive awaits the sibling's reply to its take
        assert not waiting.done()
        await sibling.control(EndReceives("topic 't' was destroyed"))
        await home.control(EndReceives("topic 't' was destroyed"))
        assert waiting.done()  # answered before the actor can be killed
        with pytest.raises(TopicNotFoundError, match="destroyed"):
            waiting.result()

    asyncio.run(main())


def test_a_destroy_waits_for_the_calls_its_sessions_sent_to_siblings_then_gives_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(channel_module, "END_RECEIVES_TIMEOUT", 0.5)

    async def main() -> None:
        (channel,) = _wired(CONFIG)
        channel._host.sibling_calls.add("a call under way")
        asyncio.get_running_loop().call_later(0.1, channel._host.sibling_calls.clear)
        started = time.monotonic()
        await channel.control(EndReceives("topic destroyed"))
        assert 0.09 <= time.monotonic() - started < 0.5
        channel._host.sibling_calls.add("never answered")
        started = time.monotonic()
        await channel.control(EndReceives("topic destroyed"))
        assert 0.5 <= time.monotonic() - started < 1.0

    asyncio.run(main())


def test_the_end_of_receives_a_destroyed_topic_sends_also_stops_the_background_jobs() -> None:
    async def main() -> None:
        (channel,) = _wired(CONFIG)
        await channel.control(EnsureGroup("s", False, SharedGroup("s")))
        assert channel._upkeep.running("shared")
        await channel.control(EndReceives("topic destroyed"))
        assert not channel._upkeep.running("shared")  # the actor is killed next: no work left

    asyncio.run(main())
