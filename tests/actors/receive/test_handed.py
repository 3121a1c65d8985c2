"""Unit tests of what a session remembers of its answers (no Ray): a receive whose
reply the handle never got (Ray dropped it under a ``ray.cancel``) is read again from
where it began, whether the handle's report comes after the answer or before it."""

from __future__ import annotations

from raytopic.actors.receive.handed import HandedReceives

from tests.actors.receive.fake_channels import run
from tests.actors.receive.test_positions import Session


def _handed(session: Session) -> tuple[HandedReceives, list[int]]:
    looked: list[int] = []
    return HandedReceives(session.positions, looked.append, lambda: None), looked


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
