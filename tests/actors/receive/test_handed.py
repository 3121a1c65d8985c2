"""Unit tests of what a session remembers of its answers (no Ray): a receive whose
reply the handle never got (Ray dropped it under a ``ray.cancel``) is read again from
where it began, or (a resequencing session) what it released is put back, whether the
handle's report comes after the answer or before it."""

from __future__ import annotations

from typing import Any

from raytopic.actors.receive.handed import KEPT, RELEASED_KEPT, HandedReceives

from tests.actors.receive.fake_channels import run
from tests.actors.receive.test_positions import Session


def _handed(session: Session) -> tuple[HandedReceives, list[int]]:
    looked: list[int] = []
    return HandedReceives(session.positions, looked.append, lambda: None, _no_put_back), looked


def _no_put_back(items: object) -> None:
    raise AssertionError("a session that does not resequence puts nothing back")


def _released(count: int) -> tuple[HandedReceives, list[list[Any]]]:
    """A resequencing session's record, and each put back; ``count`` answers of two
    released items each, answer n with (n, 0) and (n, 1)."""
    put_back: list[list[Any]] = []
    handed = HandedReceives(
        Session().positions, _no_look, lambda: None, lambda items: put_back.append(list(items))
    )
    for number in range(count):
        handed.released("s", number, [(number, 0), (number, 1)])  # type: ignore[list-item]
    return handed, put_back


def _no_look(channel: int) -> None:
    raise AssertionError("a resequencing session's lost answer reads no channel again")


def test_a_lost_answer_is_read_again_from_where_it_began() -> None:
    async def main() -> None:
        session = Session(available=6)
        handed, looked = _handed(session)
        for number in range(2):
            delivery = await session.take(2)
            session.positions.handed(delivery)
            handed.answered("s", number, [delivery])
        assert session.positions.reads_at(1) == 14
        handed.lost("s", [1])  # the second answer (12, 13) never reached its handle
        assert session.positions.reads_at(1) == 12 and looked == [1]
        again = await session.take(2)
        assert (again.first, again.count) == (12, 2)
        handed.lost("s", [1])  # told twice: nothing more to read again
        assert looked == [1]

    run(main)


def test_a_report_that_overtakes_its_answer_reads_it_again_when_it_answers() -> None:
    async def main() -> None:
        session = Session(available=4)
        handed, looked = _handed(session)
        handed.lost("s", [0])  # Ray failed the ref while the session still served it
        delivery = await session.take(2)
        session.positions.handed(delivery)
        handed.answered("s", 0, [delivery])
        assert session.positions.reads_at(1) == 10 and looked == [1]
        later = await session.take(2)
        session.positions.handed(later)
        handed.answered("s", 1, [later])  # a later answer: nothing is read again
        assert session.positions.reads_at(1) == 12 and looked == [1]

    run(main)


def test_a_read_position_that_jumped_since_is_left_where_it_is() -> None:
    async def main() -> None:
        session = Session(available=4)
        handed, _ = _handed(session)
        delivery = await session.take(2)
        session.positions.handed(delivery)
        handed.answered("s", 0, [delivery])
        session.channel.jump(10)  # a seek landed: the lost answer's place is void
        jumped = await session.take(2)
        session.positions.handed(jumped)
        handed.lost("s", [0])
        assert session.positions.reads_at(1) == jumped.next

    run(main)


def test_what_a_lost_resequenced_answer_released_is_put_back_oldest_first() -> None:
    handed, put_back = _released(4)
    handed.lost("s", [2, 1])
    assert put_back == [[(1, 0), (1, 1), (2, 0), (2, 1)]]
    handed.lost("s", [1, 2])  # told twice: nothing more to put back
    handed.lost("s", [5])  # not answered yet: put back once it answers
    handed.released("s", 5, [(5, 0)])  # type: ignore[list-item]
    assert put_back == [[(1, 0), (1, 1), (2, 0), (2, 1)], [(5, 0)]]
    handed.released("s", 6, [(6, 0)])  # type: ignore[list-item]
    assert len(put_back) == 2


def test_a_resequencing_session_keeps_a_bounded_count_of_released_elements() -> None:
    # Each answer keeps its elements alive: the oldest are forgotten past the bound
    # (a handle reports a lost receive with its next call, long before).
    handed, put_back = _released(KEPT)
    handed.lost("s", [0])
    assert put_back == [[(0, 0), (0, 1)]]
    big = [(KEPT, i) for i in range(RELEASED_KEPT + 1)]
    handed.released("s", KEPT, big)  # type: ignore[arg-type]
    handed.lost("s", [1])  # forgotten: only the newest answer is kept past the bound
    handed.lost("s", [KEPT])
    assert put_back == [[(0, 0), (0, 1)], big]
