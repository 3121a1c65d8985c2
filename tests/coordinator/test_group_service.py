"""Unit tests of the coordinator's logic (no Ray): joins, rebalances, expiry, resets
with their compensating restore, channel restarts, and the fleet's one policy.

``FakeFleet`` is a test double of the coordinator's own port (``ChannelFleet``):
it records each request sent to each channel and answers canned replies, so
the services and the port's policy run as they do in the actor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from raytopic.coordinator.channel_restarts import ChannelRestarts
from raytopic.coordinator.fleet import ChannelFleet
from raytopic.coordinator.group_service import GroupService
from raytopic.core.errors import (
    GroupBusyError,
    GroupModeError,
    GroupNotFoundError,
    InvalidArgumentError,
    ResetInProgressError,
    TopicError,
)
from raytopic.core.protocol import (
    CloseReader,
    ControlRequest,
    DestroyGroup,
    EnsureGroup,
    Grant,
    GrantStream,
    Lease,
    OpenReader,
    ReadActivity,
    ReaderSpec,
    ReadGroupCursors,
    ResetGroup,
    RestoreGroup,
    StreamLogState,
    StreamRecord,
    UpdateViews,
)

CHANNELS = 3


class Clock:
    """Monotonic seconds the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class RayLikeError(Exception):
    """How Ray hands over an actor's error: a wrapper whose ``cause`` is the error."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class FakeFleet(ChannelFleet):
    """The port in memory: records what each channel was sent, answers canned replies.

    ``refusals[(channel, request type)]`` is raised instead of answering;
    ``gates[request type]`` is awaited before answering (a channel that is slow).
    """

    def __init__(self, size: int = CHANNELS) -> None:
        super().__init__(size)
        self.sent: list[tuple[int, ControlRequest]] = []
        self.refusals: dict[tuple[int, type], BaseException] = {}
        self.gates: dict[type, asyncio.Event] = {}
        self.seeds: list[tuple[int, tuple[Any, ...]]] = []
        self.seed_error: BaseException | None = None
        self.jumps = 7  # each channel's cursor jump count after a reset
        self.quiet: dict[int, dict[str, float]] = {}  # per channel, ReadActivity's answer

    async def _send(self, channel: int, request: ControlRequest) -> Any:
        self.sent.append((channel, request))
        gate = self.gates.get(type(request))
        if gate is not None:
            await gate.wait()
        refusal = self.refusals.get((channel, type(request)))
        if refusal is not None:
            raise refusal
        if isinstance(request, ResetGroup):
            return (10 * channel, {"previous": channel})  # position set, state before
        if isinstance(request, ReadGroupCursors):
            return {"g": {"jumps": self.jumps}}
        if isinstance(request, GrantStream):
            return StreamLogState(StreamRecord(request.lease), channel - 1)
        if isinstance(request, ReadActivity):
            quiet = self.quiet.get(channel, {})
            return {r: quiet[r] for r in request.readers if r in quiet}
        return None

    async def seed(self, channel: int, *state: Any) -> dict[str, Any]:
        self.seeds.append((channel, state))
        if self.seed_error is not None:
            raise self.seed_error
        return {"epoch": state[0] + 1, "state": "serving"}

    def of(self, kind: type) -> list[tuple[int, Any]]:
        """The (channel, request) pairs of one request type, in the order sent."""
        return [(channel, request) for channel, request in self.sent if isinstance(request, kind)]


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    """Run a test's body; then stop what it left running (the expiry loop)."""

    async def body() -> Any:
        try:
            return await main()
        finally:
            # Cancelled until done: Python 3.11's wait_for drops a cancellation
            # that comes as the loop is woken (a join wakes it).
            left = asyncio.all_tasks() - {asyncio.current_task()}
            while left:
                for task in left:
                    task.cancel()
                _, left = await asyncio.wait(left, timeout=0.1)

    return asyncio.run(body())


def service(fleet: FakeFleet, clock: Clock | None = None) -> GroupService:
    return GroupService("t", fleet.size, fleet, clock or Clock())


async def with_group(fleet: FakeFleet, clock: Clock | None = None) -> GroupService:
    groups = service(fleet, clock)
    await groups.ensure("g", start_latest=False)
    fleet.sent.clear()
    return groups


# -- joins and rebalances -------------------------------------------------------------


def test_a_join_grants_every_channel_before_it_pushes_the_view_and_returns() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        groups = await with_group(fleet)
        view = await groups.join("g", "a", timeout=30.0)
        lease = Lease("a", 1)
        assert view.leases == {0: lease, 1: lease, 2: lease}
        grants = fleet.of(Grant)
        assert sorted(grants) == [(c, Grant("g", lease)) for c in range(CHANNELS)]
        # Every grant was sent before any channel heard the new view.
        kinds = [type(request) for _, request in fleet.sent]
        assert kinds == [Grant] * CHANNELS + [UpdateViews] * CHANNELS
        assert [request for _, request in fleet.of(UpdateViews)] == [
            UpdateViews("g", 1, {"a": {0: lease, 1: lease, 2: lease}}, 1)
        ] * CHANNELS

    run(main)


def test_a_second_member_takes_channels_over_under_a_new_generation() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        groups = await with_group(fleet)
        await groups.join("g", "a", timeout=30.0)
        fleet.sent.clear()
        view = await groups.join("g", "b", timeout=30.0)
        moved = {channel: request.lease for channel, request in fleet.of(Grant)}
        assert set(view.leases) == set(moved) and moved
        assert all(lease == Lease("b", 2) for lease in moved.values())
        assert groups.group("g").generation == 2
        # Both members' views went to every channel.
        pushed = fleet.of(UpdateViews)
        assert sorted(channel for channel, _ in pushed) == list(range(CHANNELS))
        assert set(pushed[0][1].views) == {"a", "b"}

    run(main)


def test_a_member_that_leaves_hands_its_channels_to_the_others() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        groups = await with_group(fleet)
        await groups.join("g", "a", timeout=30.0)
        await groups.join("g", "b", timeout=30.0)
        fleet.sent.clear()
        await groups.leave("g", "b")
        assert groups.group("g").members.keys() == {"a"}
        assert {request.lease.reader_id for _, request in fleet.of(Grant)} == {"a"}
        assert {c for c in range(CHANNELS) if groups.group("g").owner(c) == "a"} == {0, 1, 2}
        assert fleet.of(UpdateViews)[0][1].views["b"] is None  # its sessions are dropped

    run(main)


def test_a_join_to_a_group_that_does_not_exist_sends_nothing() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        with pytest.raises(GroupNotFoundError):
            await service(fleet).join("nope", "a", timeout=30.0)
        assert fleet.sent == []

    run(main)


def test_a_group_a_channel_refuses_is_dropped_by_the_others_and_not_made() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        refusal = InvalidArgumentError("the filter does not load")
        fleet.refusals[(1, EnsureGroup)] = RayLikeError(refusal)
        groups = service(fleet)
        with pytest.raises(InvalidArgumentError) as raised:
            await groups.ensure("g", start_latest=False)
        assert raised.value is refusal  # typed: not in the wrapper
        assert fleet.of(DestroyGroup) == [(0, DestroyGroup("g")), (2, DestroyGroup("g"))]
        assert "g" not in groups.groups

    run(main)


def test_a_reader_a_channel_refuses_is_closed_on_the_others_and_not_remembered() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        groups = await with_group(fleet)
        fleet.refusals[(0, OpenReader)] = RayLikeError(InvalidArgumentError("bad converter"))
        spec = ReaderSpec("g", start_latest=False)
        with pytest.raises(InvalidArgumentError):
            await groups.open_reader("r", spec)
        assert fleet.of(CloseReader) == [(1, CloseReader("r")), (2, CloseReader("r"))]
        assert groups.readers == {}
        del fleet.refusals[(0, OpenReader)]
        await groups.open_reader("r", spec)
        assert groups.readers == {"r": spec}

    run(main)


# -- streams --------------------------------------------------------------------------


def test_a_stream_is_granted_every_channel_before_its_claim_returns() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        groups = await with_group(fleet)
        lease, states = await groups.claim_stream("g", "s", timeout=5.0)
        assert lease == Lease("s", 1)
        assert sorted(fleet.of(GrantStream)) == [(c, GrantStream("g", lease)) for c in range(3)]
        # Each channel's offset log, in channel order.
        assert [state.committed for state in states] == [-1, 0, 1]
        # The marks go to every channel (a restarted coordinator continues above).
        assert [r for _, r in fleet.of(UpdateViews)] == [UpdateViews("g", 1, {}, 1)] * 3
        with pytest.raises(GroupBusyError, match="consumed by stream s"):
            await groups.join("g", "m", timeout=30.0)
        assert fleet.of(Grant) == []
        assert (await groups.describe())["g"]["stream"] == "s"

    run(main)


def test_a_stream_on_a_group_with_members_or_a_shared_one_is_refused_and_sends_nothing() -> None:
    async def main() -> None:
        from raytopic.core.shared_group import SharedGroup

        fleet = FakeFleet()
        groups = await with_group(fleet)
        await groups.join("g", "m", timeout=30.0)
        await groups.ensure("work", False, SharedGroup("work"))
        fleet.sent.clear()
        with pytest.raises(GroupBusyError, match="has members"):
            await groups.claim_stream("g", "s", timeout=5.0)
        with pytest.raises(GroupModeError, match="shared"):
            await groups.claim_stream("work", "s", timeout=5.0)
        assert fleet.sent == [] and groups.group("g").stream is None

    run(main)


def test_a_claim_a_channel_refuses_is_given_back_everywhere() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        groups = await with_group(fleet)
        fleet.refusals[(2, GrantStream)] = RayLikeError(GroupNotFoundError("gone"))
        with pytest.raises(GroupNotFoundError):
            await groups.claim_stream("g", "s", timeout=5.0)
        assert groups.group("g").stream is None
        assert sorted(fleet.of(Grant)) == [(c, Grant("g", None)) for c in range(3)]
        await groups.join("g", "m", timeout=30.0)  # the group is free

    run(main)


def test_a_stream_that_ends_or_stops_heartbeating_frees_the_group() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        clock = Clock()
        groups = await with_group(fleet, clock)
        await groups.claim_stream("g", "s", timeout=5.0)
        clock.now += 4.0
        assert groups.stream_heartbeat("g", "s", 5.0)
        clock.now += 4.0
        await groups.expire()  # 4 s since its heartbeat
        assert groups.group("g").stream is not None
        fleet.sent.clear()
        clock.now += 2.0
        await groups.expire()
        assert groups.group("g").stream is None
        assert sorted(fleet.of(Grant)) == [(c, Grant("g", None)) for c in range(3)]
        assert not groups.stream_heartbeat("g", "s", 5.0)  # it hears it lost the group
        await groups.claim_stream("g", "t", timeout=5.0)
        fleet.sent.clear()
        await groups.end_stream("g", "s")  # not the holder: nothing
        assert fleet.sent == []
        await groups.end_stream("g", "t")
        assert sorted(fleet.of(Grant)) == [(c, Grant("g", None)) for c in range(3)]
        await groups.join("g", "m", timeout=30.0)

    run(main)


# -- expiry ---------------------------------------------------------------------------


def test_a_silent_member_expires_and_its_channels_move_to_the_live_one() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        clock = Clock()
        groups = await with_group(fleet, clock)
        await groups.join("g", "a", timeout=5.0)
        await groups.join("g", "b", timeout=5.0)
        clock.now += 4.0
        assert await groups.heartbeat("g", "b", 0, True, 0.0, 0.0, False) is not None
        await groups.expire()  # nobody is silent for more than 5 s yet
        assert groups.group("g").members.keys() == {"a", "b"}
        fleet.sent.clear()
        clock.now += 2.0  # a: 6 s silent; b: 2 s
        await groups.expire()
        assert groups.group("g").members.keys() == {"b"}
        assert {c: groups.group("g").owner(c) for c in range(CHANNELS)} == {0: "b", 1: "b", 2: "b"}
        assert {request.lease.reader_id for _, request in fleet.of(Grant)} == {"b"}
        assert fleet.of(UpdateViews)[0][1].views["a"] is None
        # The expired member hears that it must rejoin.
        assert await groups.heartbeat("g", "a", 0, True, 0.0, 0.0, False) is None

    run(main)


def test_a_member_heard_at_a_channel_is_alive_until_that_plus_its_timeout() -> None:
    # It extended, acked or nacked there (a task holding its elements, say) and sent
    # the coordinator nothing.
    async def main() -> None:
        fleet = FakeFleet()
        clock = Clock()
        groups = await with_group(fleet, clock)
        await groups.join("g", "a", timeout=5.0)
        await groups.join("g", "b", timeout=5.0)
        clock.now += 6.0
        fleet.quiet = {1: {"a": 1.0}, 2: {"a": 3.0, "b": 5.5}}  # b: 5.5 s ago: past it
        fleet.refusals[(0, ReadActivity)] = RayLikeError(TopicError("restarting"))
        await groups.expire()
        assert groups.group("g").members.keys() == {"a"}  # before: none was left
        asked = {request.readers for _, request in fleet.of(ReadActivity)}
        assert asked == {("a", "b")}
        fleet.sent.clear()
        clock.now += 3.0  # a: 4 s after the channel heard it
        await groups.expire()
        assert fleet.of(ReadActivity) == []  # nobody is overdue: the channels are not asked
        fleet.quiet = {}
        clock.now += 1.5
        await groups.expire()
        assert groups.group("g").members == {}

    run(main)


def test_a_member_idle_on_its_own_count_expires_by_that() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        clock = Clock()
        groups = await with_group(fleet, clock)
        await groups.join("g", "a", timeout=5.0)
        clock.now += 3.0
        # Its handle reports 4 s without a receive: last seen at now - 4.
        await groups.heartbeat("g", "a", 0, True, 4.0, 0.0, False)
        clock.now += 2.5  # 5.5 s after its join; 2.5 s after that heartbeat
        await groups.expire()
        assert groups.group("g").members == {}

    run(main)


# -- reset ----------------------------------------------------------------------------


def test_a_reset_moves_each_channel_then_reads_its_jumps_and_pushes_the_views() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        groups = await with_group(fleet)
        await groups.join("g", "a", timeout=30.0)
        version = groups.group("g").version
        fleet.sent.clear()
        positions = await groups.reset("g", {0: "earliest", 2: 5})
        assert positions == {0: 0, 2: 20}
        assert fleet.of(ResetGroup) == [(0, ResetGroup("g", "earliest")), (2, ResetGroup("g", 5))]
        assert fleet.of(RestoreGroup) == []
        assert groups.group("g").jumps == {0: 7, 2: 7}
        assert groups.group("g").version == version + 1
        assert len(fleet.of(UpdateViews)) == CHANNELS

    run(main)


def test_a_reset_a_channel_refuses_is_undone_on_the_channels_that_moved() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        groups = await with_group(fleet)
        await groups.join("g", "a", timeout=30.0)
        version = groups.group("g").version
        refusal = InvalidArgumentError("no such time stamp")
        fleet.refusals[(1, ResetGroup)] = RayLikeError(refusal)
        fleet.sent.clear()
        with pytest.raises(InvalidArgumentError) as raised:
            await groups.reset("g", {0: 1, 1: 1.5, 2: 3})
        assert raised.value is refusal
        # Each channel that moved is restored to the state its reset answered.
        assert fleet.of(RestoreGroup) == [
            (0, RestoreGroup("g", {"previous": 0})),
            (2, RestoreGroup("g", {"previous": 2})),
        ]
        assert (groups.group("g").version, groups.group("g").jumps) == (version, {})
        assert fleet.of(UpdateViews) == [] and fleet.of(ReadGroupCursors) == []
        assert not groups.group("g").resetting  # the next reset may run

    run(main)


def test_a_reset_refused_by_an_untyped_error_is_a_topic_error() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        groups = await with_group(fleet)
        fleet.refusals[(0, ResetGroup)] = RuntimeError("channel died")
        with pytest.raises(TopicError, match="nothing changed"):
            await groups.reset("g", {0: 1, 1: 1})
        assert fleet.of(RestoreGroup) == [(1, RestoreGroup("g", {"previous": 1}))]

    run(main)


def test_a_second_reset_of_a_group_fails_at_once_while_one_runs() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        groups = await with_group(fleet)
        gate = fleet.gates[ResetGroup] = asyncio.Event()
        first = asyncio.ensure_future(groups.reset("g", {0: 1}))
        await asyncio.sleep(0)
        with pytest.raises(ResetInProgressError):  # at once: not after the first
            await asyncio.wait_for(groups.reset("g", {1: 1}), 5.0)
        gate.set()
        assert await first == {0: 0}
        assert [channel for channel, _ in fleet.of(ResetGroup)] == [0]

    run(main)


def test_a_reset_of_a_channel_that_does_not_exist_sends_nothing() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        groups = await with_group(fleet)
        with pytest.raises(InvalidArgumentError):
            await groups.reset("g", {0: 1, CHANNELS: 1})
        assert fleet.sent == []

    run(main)


# -- channel restarts -----------------------------------------------------------------


def restarts(fleet: FakeFleet, groups: GroupService) -> ChannelRestarts:
    identities = [{"epoch": 1, "state": "serving"} for _ in range(CHANNELS)]
    return ChannelRestarts("t", fleet, groups, identities)


def test_a_channel_back_without_a_store_is_seeded_and_its_siblings_are_told_nothing() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        groups = await with_group(fleet)
        await groups.join("g", "a", timeout=30.0)
        spec = ReaderSpec("g", start_latest=False)
        await groups.open_reader("r", spec)
        channels = restarts(fleet, groups)
        fleet.sent.clear()
        await channels.restarted(1, {"epoch": 2, "state": "recovering"})
        [(channel, state)] = fleet.seeds
        lease = Lease("a", 1)
        assert channel == 1
        assert state == (
            1,  # its old epoch
            {"g": (lease, 1, 1)},  # the group's lease of it, version, generation
            {"g": {"a": (1, {0: lease, 1: lease, 2: lease})}},  # members' views
            {"r": spec},  # the open readers
            {},  # no shared group
        )
        assert channels.identities[1] == {"epoch": 2, "state": "serving"}
        # What its lost sessions took at the siblings needs no word: the sessions that
        # replace them read again after the commit.
        assert fleet.sent == []

    run(main)


def test_a_channel_back_with_its_store_is_not_seeded_and_nobody_is_told() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        channels = restarts(fleet, await with_group(fleet))
        fleet.sent.clear()
        await channels.restarted(0, {"epoch": 2, "state": "serving"})
        assert fleet.seeds == [] and fleet.sent == []
        assert channels.identities[0]["epoch"] == 2

    run(main)


def test_a_channel_that_cannot_be_seeded_yet_is_left_as_it_was() -> None:
    async def main() -> None:
        fleet = FakeFleet()
        channels = restarts(fleet, await with_group(fleet))
        fleet.seed_error = RuntimeError("not yet")
        await channels.restarted(2, {"epoch": 2, "state": "recovering"})
        assert channels.identities[2] == {"epoch": 1, "state": "serving"}

    run(main)
