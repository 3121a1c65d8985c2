"""Unit tests of SeekPause (no Ray): fetches hold back until the seek lands, and a seek
waits for the receives sent before it (unless they wait for data, or never came)."""

from __future__ import annotations

import asyncio

import pytest

from raytopic.actors.receive import pause as pause_module
from raytopic.actors.receive.pause import SeekPause

from tests.actors.receive.fake_channels import run, turns


def test_a_take_goes_at_once_without_a_seek() -> None:
    async def main() -> None:
        await asyncio.wait_for(SeekPause().before_take(), 0.5)

    run(main)


def test_a_take_waits_for_the_seek_to_land() -> None:
    async def main() -> None:
        pause = SeekPause()
        pause.begin()
        take = asyncio.ensure_future(pause.before_take())
        await turns()
        assert not take.done()
        pause.end()
        await asyncio.wait_for(take, 0.5)

    run(main)


def test_a_seek_that_never_lands_holds_takes_back_for_the_gap_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pause_module, "PAUSE_GAP", 0.05)

    async def main() -> None:
        pause = SeekPause()
        pause.begin()
        await asyncio.wait_for(pause.before_take(), 1.0)

    run(main)


def _after_earlier(upto: int, state: dict[str, int | None], closed: bool = False) -> asyncio.Future:
    return asyncio.ensure_future(
        SeekPause.after_earlier(
            upto,
            expected=lambda: state["expected"],
            waiting=lambda: state["waiting"],
            started=lambda: state["started"],
            closed=lambda: closed,
        )
    )


def test_a_seek_waits_for_a_running_receive_until_it_finishes_or_waits() -> None:
    async def main() -> None:
        state: dict[str, int | None] = {"expected": 3, "waiting": None, "started": 3}
        done = _after_earlier(4, state)
        await asyncio.sleep(0.02)
        assert not done.done()  # receive 3 runs
        state["waiting"] = 3  # it waits for data: it has taken nothing
        await asyncio.wait_for(done, 0.5)
        state.update(expected=5, waiting=None, started=4)
        await asyncio.wait_for(_after_earlier(4, state), 0.5)  # all up to 4 finished

    run(main)


def test_a_seek_gives_up_on_a_receive_that_never_arrives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pause_module, "PAUSE_GAP", 0.05)

    async def main() -> None:
        state: dict[str, int | None] = {"expected": 3, "waiting": None, "started": 2}
        await asyncio.wait_for(_after_earlier(4, state), 1.0)

    run(main)
