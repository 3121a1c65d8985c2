"""Unit tests of SharedGroups (no Ray), the part's own job over the shared cursor: member
checks against the pushed views, takes and fetches (each a hold: the at-least-once
record), ack/nack/extend statuses (REJECTED for a stale epoch or a closed member),
release when a member leaves, the expiry round, reset/restore, and the state kept across
a restart."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import pytest

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.channel_state import ChannelState
from raytopic.actors.reader_parts import LossNotice, Reader
from raytopic.actors.shared_groups import SharedGroups, definition_from_state, definition_state
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.errors import (
    DataLossError,
    GroupModeError,
    InvalidArgumentError,
    NotOwnerError,
    SubscriberClosedError,
)
from raytopic.core.payloads import DamagedElements, PickledValues
from raytopic.core.protocol import Delivery, Lease, ReaderSpec, Take
from raytopic.core.records import AckStatus
from raytopic.core.shared_group import SharedGroup

CONFIG = TopicConfig("t", "ns", "t0pic1d", 2, 100, True, None, Overflow.BLOCK, ())
EPOCH = 3
A, B = Lease("a", 1), Lease("b", 1)


class _Shared:
    """SharedGroups of channel 1 (epoch 3) with members "a" and "b" of group "s"."""

    def __init__(self, spec: SharedGroup | None = None) -> None:
        self.context = ChannelContext(CONFIG, 1, ChannelMetrics("t", 1), epoch=EPOCH)
        self.log = ChannelLog(self.context)
        self.state = ChannelState(self.context, lambda: self.log.next_sequence, lambda: None)
        self.views: dict[str, dict[str, tuple[int, dict[int, Lease]]]] = {
            "s": {"a": (1, {1: A}), "b": (1, {1: B})}
        }
        self.readers: dict[str, Reader] = {}
        self.moved = 0
        self.loss = LossNotice()
        self.groups = SharedGroups(
            self.context, self.log, self.loss, self.state, self.views, self._lookup, self._moved
        )
        self.groups.start(spec or SharedGroup("s"), start_latest=False)
        for member in ("a", "b"):
            self.readers[member] = Reader(member, ReaderSpec("s", False), None)

    def _lookup(self, reader_id: str) -> Reader:
        try:
            return self.readers[reader_id]
        except KeyError:
            raise SubscriberClosedError(reader_id) from None

    def _moved(self) -> None:
        self.moved += 1

    def append(self, values: Sequence[Any]) -> None:
        self.log.ring.append(PickledValues.from_values(values), overwrite=True)

    async def take(self, member: str, count: int, wait: float = 0.0) -> Delivery:
        lease = {"a": A, "b": B}.get(member)
        return await self.groups.take(self._lookup(member), Take(member, lease, count, wait))

    @property
    def cursor(self) -> Any:
        return self.groups.cursor("s")


def _values(delivery: Delivery) -> list[Any]:
    return [value for chunk in delivery.chunks for value in chunk.payload.decode()]


def _ids(delivery: Delivery, epoch: int = EPOCH) -> tuple[tuple[int, int, int], ...]:
    """The delivery ids a member acknowledges."""
    return tuple((sequence, count, epoch) for sequence, count in delivery.entries())


# -- members ---------------------------------------------------------------------------------------


def test_a_take_needs_the_member_s_lease_of_this_channel_in_its_latest_view() -> None:
    async def main() -> None:
        parts = _Shared()
        parts.append(range(3))
        with pytest.raises(NotOwnerError, match="stale lease"):
            await parts.groups.take(parts.readers["a"], Take("a", Lease("a", 0), 1))
        with pytest.raises(NotOwnerError, match="not a member"):
            await parts.groups.take(parts.readers["a"], Take("a", None, 1))
        parts.views["s"]["a"] = (2, {0: A, 1: Lease("a", 2)})  # a newer view pushed
        with pytest.raises(NotOwnerError):
            await parts.groups.take(parts.readers["a"], Take("a", A, 1))
        assert _values(
            await parts.groups.take(parts.readers["a"], Take("a", Lease("a", 2), 1))
        ) == [0]

    asyncio.run(main())


def test_a_member_that_left_is_refused_and_what_it_held_goes_back_until_it_rejoins() -> None:
    async def main() -> None:
        parts = _Shared()
        parts.append(range(4))
        held = await parts.take("a", 2)
        parts.groups.member_left("s", "a")
        assert parts.cursor.held_by("a") == 0 and sorted(parts.cursor.waiting) == [0, 1]
        with pytest.raises(NotOwnerError):
            await parts.take("a", 1)
        assert parts.groups.ack("a", _ids(held)) == [AckStatus.REJECTED] * 2
        redelivered = await parts.take("b", 2)
        assert redelivered.entries() == ((0, 2), (1, 2))  # their second delivery
        parts.groups.member_back("s", "a")
        assert _values(await parts.take("a", 5)) == [2, 3]

    asyncio.run(main())


def test_a_closed_member_s_elements_go_back_and_its_acks_are_rejected() -> None:
    async def main() -> None:
        parts = _Shared()
        parts.append(range(2))
        held = await parts.take("a", 2)
        parts.groups.member_closed("s", "a")
        del parts.readers["a"]
        assert parts.cursor.unacked == 0 and sorted(parts.cursor.waiting) == [0, 1]
        assert parts.groups.ack("a", _ids(held)) == [AckStatus.REJECTED] * 2
        assert parts.groups.extend("a", _ids(held), 5.0) == [AckStatus.REJECTED] * 2

    asyncio.run(main())


# -- takes, loans, give-backs ----------------------------------------------------------------------


def test_members_are_handed_disjoint_elements_and_their_state_shows_what_they_hold() -> None:
    async def main() -> None:
        parts = _Shared()
        parts.append(range(5))
        a = await parts.take("a", 2)
        b = await parts.take("b", 2)
        assert (_values(a), _values(b)) == ([0, 1], [2, 3])
        assert a.origin.shared and a.origin.epoch == EPOCH
        state = parts.groups.state(parts.readers["a"], A)
        assert (state.committed, state.unacked, state.tail) == (2, 2, 4)
        assert state.available  # 4 is still to hand out
        await parts.take("b", 5)
        assert not parts.groups.state(parts.readers["a"], A).available

    asyncio.run(main())


def test_a_fetch_waits_for_something_for_its_member_and_holds_what_it_takes() -> None:
    async def main() -> None:
        parts = _Shared()
        fetch = asyncio.ensure_future(parts.take("a", 4, wait=5.0))
        await asyncio.sleep(0.05)
        assert not fetch.done()
        parts.append(range(2))
        parts.context.notify()
        taken = await asyncio.wait_for(fetch, 1.0)
        assert _values(taken) == [0, 1] and parts.cursor.held_by("a") == 2
        assert (await parts.take("a", 4, wait=0.05)).count == 0  # nothing more: empty

    asyncio.run(main())


def test_a_hold_no_receive_hands_over_comes_back_when_its_ack_deadline_passes() -> None:
    # Nothing is lent: a reply nobody reads (a cancelled receive, a host that died)
    # leaves holds, and a hold is the at-least-once record.
    async def main() -> None:
        parts = _Shared(SharedGroup("s", ack_timeout=0.05))
        parts.append(range(2))
        await parts.take("a", 2)  # the reply goes nowhere
        await asyncio.sleep(0.06)
        assert parts.cursor.expire(time.monotonic(), None) == [0, 1]
        assert (await parts.take("b", 5)).entries() == ((0, 2), (1, 2))

    asyncio.run(main())


def test_a_group_that_reaches_a_damaged_range_is_told_once_and_settles_it() -> None:
    async def main() -> None:
        parts = _Shared()
        parts.append([0])
        parts.log.ring.append(DamagedElements(2), overwrite=True)  # 1..2, as recovered
        parts.log.damage.add(1, 2)
        parts.append([3])
        assert _values(await parts.take("a", 10)) == [0]  # stops before the damage
        with pytest.raises(DataLossError) as lost:
            await parts.take("a", 10)
        assert lost.value.lost == (1, 2) and parts.moved == 1
        assert parts.cursor.next == 3 and parts.cursor.floor == -1
        assert _values(await parts.take("a", 10)) == [3]

    asyncio.run(main())


def test_a_group_filter_settles_the_misses_and_tells_that_the_floor_moved() -> None:
    async def main() -> None:
        parts = _Shared(SharedGroup("s", filter=lambda value: value % 2 == 1))
        parts.append(range(4))
        assert _values(await parts.take("a", 10)) == [1, 3]
        assert parts.cursor.floor == 0 and parts.moved == 1  # 0 is settled: room for appends

    asyncio.run(main())


# -- acknowledgements ------------------------------------------------------------------------------


def test_ack_nack_and_extend_apply_to_the_holder_s_current_delivery_only() -> None:
    async def main() -> None:
        parts = _Shared()
        parts.append(range(4))
        held = _ids(await parts.take("a", 4))
        zero, one, two, three = held
        assert parts.groups.ack("a", (zero,)) == [AckStatus.ACKED]
        assert parts.groups.ack("a", (zero,)) == [AckStatus.REJECTED]  # settled already
        assert parts.groups.ack("b", (one,)) == [AckStatus.REJECTED]  # not b's
        assert parts.groups.extend("a", (one,), None) == [AckStatus.EXTENDED]
        assert parts.groups.nack("a", (two,), 0.0) == [AckStatus.NACKED]
        assert parts.groups.ack("a", (two,)) == [AckStatus.REJECTED]  # that delivery is over
        stale_epoch = (three[0], three[1], EPOCH - 1)
        assert parts.groups.ack("a", (stale_epoch,)) == [AckStatus.REJECTED]
        assert parts.groups.ack("a", (three,)) == [AckStatus.ACKED]
        assert parts.cursor.floor == 0
        assert (await parts.take("b", 5)).entries() == ((2, 2),)

    asyncio.run(main())


def test_acknowledgements_refuse_bad_arguments_and_readers_outside_a_shared_group() -> None:
    async def main() -> None:
        parts = _Shared()
        parts.readers["o"] = Reader("o", ReaderSpec("owned", False), None)
        with pytest.raises(GroupModeError):
            parts.groups.ack("o", ((0, 1, EPOCH),))
        with pytest.raises(InvalidArgumentError, match="delay"):
            parts.groups.nack("a", ((0, 1, EPOCH),), -1.0)
        with pytest.raises(InvalidArgumentError):
            parts.groups.ack("a", ((-1, 1, EPOCH),))
        with pytest.raises(InvalidArgumentError):
            parts.groups.ack("a", "0,1")  # type: ignore[arg-type]

    asyncio.run(main())


def test_an_entry_that_is_not_a_delivery_id_is_refused_as_invalid_argument() -> None:
    async def main() -> None:
        parts = _Shared()
        parts.append([0])
        await parts.take("a", 1)
        with pytest.raises(InvalidArgumentError):
            parts.groups.ack("a", ((0, 1),))  # type: ignore[arg-type]

    asyncio.run(main())


def test_a_malformed_entry_is_refused_before_any_entry_of_the_call_applies() -> None:
    async def main() -> None:
        parts = _Shared()
        parts.append(range(2))
        held = _ids(await parts.take("a", 2))
        with pytest.raises(InvalidArgumentError):
            parts.groups.ack("a", (held[0], (-1, 1, EPOCH)))
        assert parts.cursor.holdings() == {"a": 2}

    asyncio.run(main())


def test_a_nack_with_a_delay_is_not_delivered_again_before_it_ends() -> None:
    async def main() -> None:
        parts = _Shared()
        parts.append([0])
        held = _ids(await parts.take("a", 1))
        assert parts.groups.nack("a", held, 0.1) == [AckStatus.NACKED]
        assert (await parts.take("b", 1)).count == 0
        await asyncio.sleep(0.15)
        assert (await parts.take("b", 1)).entries() == ((0, 2),)

    asyncio.run(main())


# -- the background round --------------------------------------------------------------------------


def test_expire_round_sends_expired_leases_back_and_names_groups_with_dead_letters() -> None:
    async def main() -> None:
        # A second of ack timeout (a round's tick is a tenth of it): the round right after
        # the take must find nothing expired, and 50 ms was less than a busy machine's
        # stall once (a full run at load 50-60 found the take's holds already expired).
        spec = SharedGroup("s", ack_timeout=1.0, max_deliveries=2, dead_letter="dead")
        parts = _Shared(spec)
        parts.append(range(2))
        await parts.take("a", 2)
        assert await parts.groups.expire_round() == (False, [])  # not yet expired
        await asyncio.sleep(1.05)
        assert await parts.groups.expire_round() == (True, [])
        assert sorted(parts.cursor.waiting) == [0, 1]
        second = await parts.take("b", 2)
        assert second.entries() == ((0, 2), (1, 2))
        assert parts.groups.extend("b", _ids(second)[:1], 10.0) == [AckStatus.EXTENDED]
        await asyncio.sleep(1.05)
        changed, dead = await parts.groups.expire_round()
        assert changed and dead == ["s"]  # 1 reached max_deliveries
        assert list(parts.cursor.dead) == [1] and list(parts.cursor.held) == [0]

    asyncio.run(main())


def test_expire_round_returns_at_once_when_woken() -> None:
    async def main() -> None:
        parts = _Shared(SharedGroup("s", ack_timeout=30.0))  # a tick of a second
        parts.groups.wake.set()
        assert await asyncio.wait_for(parts.groups.expire_round(), 0.5) == (False, [])
        assert not parts.groups.wake.is_set()

    asyncio.run(main())


# -- the coordinator's calls and the durable state -------------------------------------------------


def test_a_reset_voids_what_members_hold_and_restore_brings_it_back() -> None:
    async def main() -> None:
        parts = _Shared()
        parts.append(range(5))
        held = _ids(await parts.take("a", 3))
        position, previous = parts.groups.reset("s", 1)
        assert position == 1 and (parts.cursor.next, parts.cursor.floor) == (2, 1)
        assert parts.groups.ack("a", held[2:]) == [AckStatus.REJECTED]
        assert parts.groups.reset("s", 99)[0] == 4  # clamped to the tail
        parts.groups.restore("s", previous)
        # Restored from its saved form: what was held is to deliver again.
        assert parts.cursor.next == 3 and sorted(parts.cursor.waiting) == [0, 1, 2]

    asyncio.run(main())


def test_the_state_kept_brings_the_group_back_with_its_held_elements_to_deliver_again() -> None:
    async def main() -> None:
        spec = SharedGroup("s", ack_timeout=5.0, max_deliveries=2, dead_letter="dead")
        parts = _Shared(spec)
        parts.append(range(4))
        first = _ids(await parts.take("a", 2))
        parts.groups.ack("a", first[:1])
        parts.groups.nack("a", first[1:], 0.0)
        await parts.take("b", 2)  # 1 (second delivery) and 2
        saved = {"s": parts.groups.state_of("s")}
        assert parts.groups.state_of("gone") is None

        restarted = _Shared()
        restarted.groups.destroy("s")
        restarted.append(range(4))
        restarted.groups.restore_state(saved)
        cursor = restarted.cursor
        assert restarted.groups.groups["s"].spec == spec
        assert (cursor.floor, cursor.next) == (0, 3)
        assert list(cursor.dead) == [1]  # held at its second delivery of two: dead
        assert {s: w.count for s, w in cursor.waiting.items()} == {2: 1}
        assert (await restarted.take("a", 5)).entries() == ((2, 2), (3, 1))

    asyncio.run(main())


def test_destroy_forgets_the_group_and_the_figures_follow_the_cursor() -> None:
    async def main() -> None:
        parts = _Shared()
        parts.append(range(5))
        await parts.take("a", 2)
        assert parts.groups.lowest_floor() == -1
        assert list(parts.groups.lag(4)) == [("s", 5, 3)]
        described = parts.groups.describe()["s"]
        assert described["holdings"] == {"a": 2} and described["mode"] == "shared"
        state, created = parts.groups.ensure_group(SharedGroup("s"), True)
        assert not created and state.next == 2
        parts.groups.destroy("s")
        assert "s" not in parts.groups and parts.groups.lowest_floor() is None

    asyncio.run(main())


def test_a_shared_group_s_definition_is_kept_as_named_plain_fields() -> None:
    spec = SharedGroup(
        "s",
        max_deliveries=3,
        dead_letter="dead",
        ack_timeout=2.5,
        window=4,
        ordering="key",
        filter=lambda v: v % 2 == 0,
    )
    kept = definition_state(spec)
    assert json.loads(json.dumps(kept)) == kept  # plain JSON: no class of ours pickled
    assert (kept["name"], kept["max_deliveries"], kept["dead_letter"]) == ("s", 3, "dead")
    back = definition_from_state(json.loads(json.dumps(kept)))
    assert back == spec and back.load_filter()(4) and not back.load_filter()(3)
    assert definition_from_state(definition_state(SharedGroup("plain"))) == SharedGroup("plain")
