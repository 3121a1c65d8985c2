"""Poison elements without Ray: a value that does not decode costs only itself, a pick
stops before (or skips) an element its filter or converter raises on, and a cursor
stops there, tells its reader once, and holds nothing more until it jumps."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import pytest

from raytopic.actors.cursors import Cursor
from raytopic.actors.reader_parts import pick
from raytopic.actors.segment_ring import SegmentRing
from raytopic.core.errors import PoisonElementError
from raytopic.core.payloads import UNDECODABLE, PickledList, PickledValues, decode_checked
from raytopic.core.protocol import Lease, Poison

from tests.actors.test_owned_readers import MEMBER, _Owned, _values


class _Missing:
    """Unpickles as a class that cannot be found (a consumer's version skew)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_not_there, ())


def _not_there() -> None:  # replaced by a name no module has, below
    raise AssertionError


_MISSING = pickle.dumps(_Missing()).replace(b"_not_there", b"_not_here_")


def _pickles(*values: Any) -> PickledValues:
    return PickledValues.from_pickles(
        [v if isinstance(v, bytes) else pickle.dumps(v) for v in values]
    )


def _explode_on_three(value: int) -> bool:
    return 1 / (value - 3) != 0


def test_a_value_that_does_not_decode_costs_only_itself() -> None:
    values, failures = decode_checked(_pickles(0, _MISSING, 2))
    assert values[0] == 0 and values[1] is UNDECODABLE and values[2] == 2
    assert list(failures) == [1] and isinstance(failures[1], AttributeError)
    assert decode_checked(_pickles(0, 1)) == ([0, 1], {})
    # A publish_batch part pickled as one list fails as a whole.
    listed = pickle.dumps([0, _Missing()]).replace(b"_not_there", b"_not_here_")
    values, failures = decode_checked(PickledList(listed, 2))
    assert values == [UNDECODABLE, UNDECODABLE] and sorted(failures) == [0, 1]


def test_a_pick_stops_before_a_poison_element_or_skips_it() -> None:
    ring = SegmentRing(100)
    ring.append(PickledValues.from_values(list(range(6))), False)
    runs = ring.read(0, 6)
    stopped = pick(runs, _explode_on_three, None, 10)
    assert [v for chunk in stopped.chunks for v in chunk.payload.decode()] == [0, 1, 2]
    assert stopped.next_sequence == 3 and stopped.poison is not None
    assert (stopped.poison.sequence, stopped.poison.cause_type) == (3, "ZeroDivisionError")
    skipped = pick(runs, _explode_on_three, None, 10, skip_poison=True)
    assert [v for chunk in skipped.chunks for v in chunk.payload.decode()] == [0, 1, 2, 4, 5]
    assert skipped.next_sequence == 6 and [p.sequence for p in skipped.skipped] == [3]


def test_a_converter_that_raises_stops_the_pick_after_what_it_converted() -> None:
    ring = SegmentRing(100)
    ring.append(PickledValues.from_values([5, 4, 3, 2]), False)
    picked = pick(ring.read(0, 4), None, lambda v: 10 // (v - 3), 10)
    assert [v for chunk in picked.chunks for v in chunk.payload.decode()] == [5, 10]
    assert picked.next_sequence == 2 and picked.poison.sequence == 2  # type: ignore[union-attr]


def test_a_cursor_stops_at_a_poison_element_until_it_jumps() -> None:
    cursor = Cursor.starting_at(0)
    cursor.delivered(5, 6)  # 0..5 handed out; 2 turns out to be poison
    jumps = cursor.jumps
    cursor.stop_at(Poison(2, "E", "bad"), reported=False)
    assert cursor.next == 2 and cursor.jumps == jumps + 1  # what came after is void
    assert not cursor.stopped  # not told yet: the next take tells
    cursor.poison.reported = True  # type: ignore[union-attr]
    assert cursor.stopped
    cursor.seek(2, 0, 10, commit=False)  # the reader skips it
    assert not cursor.stopped and cursor.poison_ahead() is None and cursor.next == 3


def test_a_member_is_told_once_then_its_channel_holds_nothing_until_it_seeks() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        reader = parts.member("m")
        reader.filter = _explode_on_three
        first = await parts.take("m", MEMBER, 10)
        assert _values(first) == [0, 1, 2] and not first.stopped
        with pytest.raises(PoisonElementError) as told:
            await parts.take("m", MEMBER, 10)
        assert (told.value.channel, told.value.position.sequence) == (0, 3)
        assert told.value.cause_type == "ZeroDivisionError"
        held = await parts.take("m", MEMBER, 10)  # told once: nothing more
        assert held.count == 0 and held.stopped and held.next == 3
        assert not parts.owned.has_data(reader, MEMBER)
        assert not parts.owned.state(reader, MEMBER).available
        assert parts.owned.state(reader, MEMBER).tail - 3 + 1 == 3  # still remaining
        parts.owned.seek(reader, MEMBER, 3, False, False)
        assert _values(await parts.take("m", MEMBER, 10)) == [4, 5]

    asyncio.run(main())


def test_a_new_owner_is_told_again() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        parts.member("m").filter = _explode_on_three
        with pytest.raises(PoisonElementError):
            await parts.take("m", MEMBER, 3) and await parts.take("m", MEMBER, 3)
        other = Lease("o", 2)
        parts.owned.grant("g", other)
        parts.readers["o"] = parts.readers.pop("m")
        parts.readers["o"].reader_id = "o"
        assert _values(await parts.take("o", other, 10)) == [0, 1, 2]
        with pytest.raises(PoisonElementError):
            await parts.take("o", other, 10)

    asyncio.run(main())


def test_a_reported_undecodable_element_rewinds_the_cursor_and_voids_later_takes() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        reader = parts.member("m")
        taken = await parts.take("m", MEMBER, 6)
        poison = Poison(2, "ModuleNotFoundError", "No module named 'x'")
        assert not parts.owned.report_poison(reader, MEMBER, taken.jumps - 1, poison, False)
        assert parts.owned.report_poison(reader, MEMBER, taken.jumps, poison, False)
        with pytest.raises(PoisonElementError):  # its next take tells it
            await parts.take("m", MEMBER, 6)
        assert (await parts.take("m", MEMBER, 6)).count == 0
        assert parts.owned.state(reader, MEMBER).next == 2
        # A skipping reader only counts it: nothing moves.
        parts.owned.seek(reader, MEMBER, 2, False, False)
        after = parts.owned.state(reader, MEMBER)
        assert parts.owned.report_poison(reader, MEMBER, after.jumps, Poison(4, "E", ""), True)
        assert parts.owned.state(reader, MEMBER) == after
        assert parts.context.metrics._counts["poison_skipped"] == 1

    asyncio.run(main())


def test_a_reported_element_of_a_fetchs_offer_moves_the_read_position_forward_to_it() -> None:
    # The offer moved nothing; its session handed all of it over and reads on after
    # it, but the reader kept only what came before the undecodable element.
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        reader = parts.member("m")
        offer = await parts.take("m", MEMBER, 6, 1.0)
        assert parts.owned.state(reader, MEMBER).next == 0
        poison = Poison(2, "ModuleNotFoundError", "No module named 'x'")
        assert parts.owned.report_poison(reader, MEMBER, offer.jumps, poison, False)
        assert parts.owned.state(reader, MEMBER).jumps == offer.jumps + 1
        with pytest.raises(PoisonElementError):  # not past it: its next take tells it
            await parts.take("m", MEMBER, 6, from_sequence=6, stands=0, jumps=offer.jumps)
        assert parts.owned.state(reader, MEMBER).next == 2

    asyncio.run(main())


def test_a_complete_on_empty_reader_is_told_again_rather_than_answered_empty() -> None:
    async def main() -> None:
        parts = _Owned()
        parts.append(range(6))
        parts.anonymous("a", filter=_explode_on_three, complete_on_empty=True)
        assert _values(await parts.take("a", None, 10)) == [0, 1, 2]
        for _ in range(2):
            with pytest.raises(PoisonElementError):
                await parts.take("a", None, 10)

    asyncio.run(main())
