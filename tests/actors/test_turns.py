"""Unit tests of Turns (no Ray): turn order per stream, gap skipping, duplicates, cancels."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from raytopic.actors.turns import DuplicateTurnError, Turns

GAP = 0.05  # a short gap timeout for the tests that wait one out
NEVER = 30.0  # a gap timeout no test waits out


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    """Run a coroutine function on a fresh event loop, with an overall guard."""

    async def guarded() -> Any:
        return await asyncio.wait_for(main(), 10.0)

    return asyncio.run(guarded())


async def take(
    turns: Turns,
    key: Any,
    number: int,
    log: list,
    hold: asyncio.Event | float | None = None,
) -> int:
    """Take ``number``'s turn on ``key``; log its start and end; hold it as told."""
    async with turns.turn(key, number):
        log.append(("start", key, number))
        if isinstance(hold, asyncio.Event):
            await hold.wait()
        elif hold:
            await asyncio.sleep(hold)
        log.append(("end", key, number))
    return number


def test_expected_starts_at_zero_and_follows_the_turns() -> None:
    async def main() -> None:
        turns = Turns(gap_timeout=NEVER)
        assert turns.expected("s") == 0
        log: list = []
        await take(turns, "s", 0, log)
        assert turns.expected("s") == 1
        await take(turns, "s", 1, log)
        assert turns.expected("s") == 2
        assert turns.expected("other") == 0

    run(main)


def test_turns_run_in_number_order_whatever_the_arrival_order() -> None:
    async def main() -> list:
        turns = Turns(gap_timeout=NEVER)
        log: list = []
        tasks = []
        for number in (3, 1, 4, 0, 2):
            tasks.append(asyncio.create_task(take(turns, "s", number, log, hold=0.001)))
            await asyncio.sleep(0)
        assert await asyncio.gather(*tasks) == [3, 1, 4, 0, 2]
        return log

    log = run(main)
    assert log == [(kind, "s", n) for n in range(5) for kind in ("start", "end")]


def test_one_turn_at_a_time_per_stream() -> None:
    async def main() -> None:
        turns = Turns(gap_timeout=NEVER)
        log: list = []
        release = asyncio.Event()
        first = asyncio.create_task(take(turns, "s", 0, log, hold=release))
        second = asyncio.create_task(take(turns, "s", 1, log))
        await asyncio.sleep(0.05)
        assert log == [("start", "s", 0)]
        release.set()
        await asyncio.gather(first, second)
        assert log == [("start", "s", 0), ("end", "s", 0), ("start", "s", 1), ("end", "s", 1)]

    run(main)


def test_streams_of_different_keys_are_independent() -> None:
    async def main() -> None:
        turns = Turns(gap_timeout=NEVER)
        log: list = []
        blocked = asyncio.create_task(take(turns, "a", 1, log))  # waits for a/0
        await take(turns, "b", 0, log)
        await take(turns, ("b", 2), 0, log)
        assert log == [
            ("start", "b", 0),
            ("end", "b", 0),
            ("start", ("b", 2), 0),
            ("end", ("b", 2), 0),
        ]
        assert not blocked.done()
        await take(turns, "a", 0, log)
        await blocked
        assert log[-2:] == [("start", "a", 1), ("end", "a", 1)]

    run(main)


def test_a_number_that_never_arrives_is_skipped_after_the_gap_timeout() -> None:
    async def main() -> float:
        turns = Turns(gap_timeout=GAP)
        log: list = []
        started = time.monotonic()
        await take(turns, "s", 2, log)  # 0 and 1 never arrive
        elapsed = time.monotonic() - started
        assert log == [("start", "s", 2), ("end", "s", 2)]
        assert turns.expected("s") == 3
        return elapsed

    assert run(main) >= GAP * 0.9


def test_skipped_numbers_that_arrive_later_are_duplicates() -> None:
    async def main() -> None:
        turns = Turns(gap_timeout=GAP)
        log: list = []
        await take(turns, "s", 2, log)
        for late in (0, 1, 2):
            with pytest.raises(DuplicateTurnError):
                await take(turns, "s", late, log)
        assert log == [("start", "s", 2), ("end", "s", 2)]
        await take(turns, "s", 3, log)
        assert log[-1] == ("end", "s", 3)

    run(main)


def test_no_gap_is_skipped_while_a_turn_of_the_stream_is_running() -> None:
    async def main() -> None:
        turns = Turns(gap_timeout=GAP)
        log: list = []
        release = asyncio.Event()
        ending: list[float] = []

        async def long_turn() -> None:
            async with turns.turn("s", 0):
                log.append(("start", "s", 0))
                await release.wait()
                # Read before the turn ends: a stall of this process (a busy
                # machine) can then only lengthen the gap measured below.
                ending.append(time.monotonic())
                log.append(("end", "s", 0))

        running = asyncio.create_task(long_turn())
        await asyncio.sleep(0)
        waiter = asyncio.create_task(take(turns, "s", 2, log))  # 1 never arrives
        await asyncio.sleep(GAP * 6)  # many gap timeouts pass while 0 runs
        assert log == [("start", "s", 0)]
        assert not waiter.done()
        release.set()
        await running
        await waiter
        # 1 is skipped only after a gap timeout with nothing running.
        assert time.monotonic() - ending[0] >= GAP * 0.9
        assert log == [("start", "s", 0), ("end", "s", 0), ("start", "s", 2), ("end", "s", 2)]

    run(main)


def test_a_number_that_arrives_late_but_before_its_gap_is_skipped_still_runs_first() -> None:
    # 0 never arrives; 2 arrives, then 1. Only 0 is missing: 1 must not be skipped.
    async def main() -> None:
        turns = Turns(gap_timeout=GAP)
        log: list = []
        two = asyncio.create_task(take(turns, "s", 2, log))
        await asyncio.sleep(GAP * 0.4)
        one = asyncio.create_task(take(turns, "s", 1, log))
        assert await asyncio.gather(one, two) == [1, 2]
        assert log == [("start", "s", 1), ("end", "s", 1), ("start", "s", 2), ("end", "s", 2)]

    run(main)


def test_a_repeated_number_raises_duplicate_turn_error() -> None:
    async def main() -> None:
        turns = Turns(gap_timeout=NEVER)
        log: list = []
        await take(turns, "s", 0, log)
        await take(turns, "s", 1, log)
        with pytest.raises(DuplicateTurnError, match="call 0 of 's' already ran"):
            await take(turns, "s", 0, log)
        with pytest.raises(DuplicateTurnError):
            await take(turns, "s", 1, log)
        assert turns.expected("s") == 2
        await take(turns, "s", 2, log)
        assert log[-1] == ("end", "s", 2)

    run(main)


def test_a_rewound_number_runs_again_and_later_numbers_wait_for_it() -> None:
    """A call that ended short runs again for its rest (``append_once``)."""

    async def main() -> None:
        turns = Turns(gap_timeout=NEVER)
        log: list = []
        turns.resume("s", 3)
        await take(turns, "s", 3, log)
        turns.rewind("s", 3)
        assert turns.expected("s") == 3
        later = asyncio.create_task(take(turns, "s", 4, log))
        await asyncio.sleep(0.02)
        assert not later.done()  # 4 waits for 3's second run
        await take(turns, "s", 3, log)
        await later
        assert log[2:] == [("start", "s", 3), ("end", "s", 3), ("start", "s", 4), ("end", "s", 4)]
        turns.rewind("s", 9)  # never forward
        assert turns.expected("s") == 5

    run(main)


def test_a_duplicate_of_the_running_number_raises_once_it_ends() -> None:
    async def main() -> None:
        turns = Turns(gap_timeout=NEVER)
        log: list = []
        release = asyncio.Event()
        running = asyncio.create_task(take(turns, "s", 0, log, hold=release))
        await asyncio.sleep(0)
        duplicate = asyncio.create_task(take(turns, "s", 0, log))
        await asyncio.sleep(0.02)
        assert not duplicate.done()
        release.set()
        await running
        with pytest.raises(DuplicateTurnError):
            await duplicate
        assert log == [("start", "s", 0), ("end", "s", 0)]

    run(main)


def test_a_cancelled_waiter_does_not_block_later_numbers() -> None:
    async def main() -> None:
        turns = Turns(gap_timeout=NEVER)
        log: list = []
        release = asyncio.Event()
        zero = asyncio.create_task(take(turns, "s", 0, log, hold=release))
        await asyncio.sleep(0)
        one = asyncio.create_task(take(turns, "s", 1, log))
        two = asyncio.create_task(take(turns, "s", 2, log))
        three = asyncio.create_task(take(turns, "s", 3, log))
        await asyncio.sleep(0.01)
        one.cancel()
        two.cancel()
        with pytest.raises(asyncio.CancelledError):
            await one
        with pytest.raises(asyncio.CancelledError):
            await two
        release.set()
        # With a gap timeout never reached, 3 runs only if 1 and 2 are passed over.
        assert await asyncio.wait_for(three, 2.0) == 3
        await zero
        assert log == [("start", "s", 0), ("end", "s", 0), ("start", "s", 3), ("end", "s", 3)]
        assert turns.expected("s") == 4
        with pytest.raises(DuplicateTurnError):
            await take(turns, "s", 1, log)

    run(main)


def test_a_waiter_cancelled_as_its_turn_comes_runs_in_full_or_passes_the_turn_on() -> None:
    async def main() -> None:
        turns = Turns(gap_timeout=NEVER)
        log: list = []
        release = asyncio.Event()
        tasks: dict[int, asyncio.Task] = {}

        async def zero() -> None:
            async with turns.turn("s", 0):
                log.append(("start", "s", 0))
                await release.wait()
            tasks[1].cancel()  # the turn just passed to 1, which has not resumed yet

        tasks[0] = asyncio.create_task(zero())
        await asyncio.sleep(0)
        tasks[1] = asyncio.create_task(take(turns, "s", 1, log))
        tasks[2] = asyncio.create_task(take(turns, "s", 2, log))
        await asyncio.sleep(0.01)
        release.set()
        results = await asyncio.gather(*tasks.values(), return_exceptions=True)
        assert results[2] == 2
        if isinstance(results[1], asyncio.CancelledError):
            assert log == [("start", "s", 0), ("start", "s", 2), ("end", "s", 2)]
        else:  # the cancel came too late to stop 1 (asyncio.wait_for keeps the result)
            assert log == [
                ("start", "s", 0),
                ("start", "s", 1),
                ("end", "s", 1),
                ("start", "s", 2),
                ("end", "s", 2),
            ]
        assert turns.expected("s") == 3

    run(main)


def test_a_turn_that_raises_still_passes_the_turn_on() -> None:
    async def main() -> None:
        turns = Turns(gap_timeout=NEVER)
        log: list = []
        with pytest.raises(RuntimeError, match="boom"):
            async with turns.turn("s", 0):
                raise RuntimeError("boom")
        assert turns.expected("s") == 1
        await take(turns, "s", 1, log)
        assert log == [("start", "s", 1), ("end", "s", 1)]

    run(main)


def test_a_turn_cancelled_while_running_passes_the_turn_on() -> None:
    async def main() -> None:
        turns = Turns(gap_timeout=NEVER)
        log: list = []
        zero = asyncio.create_task(take(turns, "s", 0, log, hold=asyncio.Event()))
        one = asyncio.create_task(take(turns, "s", 1, log))
        await asyncio.sleep(0.01)
        zero.cancel()
        assert await asyncio.wait_for(one, 2.0) == 1
        assert log == [("start", "s", 0), ("start", "s", 1), ("end", "s", 1)]

    run(main)


def test_forget_drops_the_stream() -> None:
    async def main() -> None:
        turns = Turns(gap_timeout=NEVER)
        log: list = []
        await take(turns, "s", 0, log)
        await take(turns, "s", 1, log)
        turns.forget("s")
        assert turns.expected("s") == 0
        await take(turns, "s", 0, log)  # a new sender with the same key starts over
        assert log[-1] == ("end", "s", 0)
        turns.forget("unknown")  # no error

    run(main)


def test_forget_keeps_a_stream_with_a_call_running_or_waiting() -> None:
    async def main() -> None:
        turns = Turns(gap_timeout=NEVER)
        log: list = []
        hold = asyncio.Event()
        zero = asyncio.create_task(take(turns, "s", 0, log, hold=hold))
        two = asyncio.create_task(take(turns, "s", 2, log))
        await asyncio.sleep(0.01)
        assert turns.forget("s") is False  # 0 runs, 2 waits
        assert turns.expected("s") == 0
        hold.set()
        await zero
        await take(turns, "s", 1, log)
        await asyncio.wait_for(two, 2.0)
        assert [entry[2] for entry in log if entry[0] == "end"] == [0, 1, 2]
        assert turns.forget("s") is True
        assert turns.expected("s") == 0

    run(main)


def test_after_a_restart_a_stream_may_start_mid_way_but_lower_numbers_still_go_first() -> None:
    # A restarted actor meets a sender at its 7th call: no 5 s wait for 0..6, yet
    # 6, sent just before 7 and arriving after it, still runs first.
    async def main() -> tuple[list[int], float]:
        turns = Turns(gap_timeout=NEVER, unknown_start=0.2)
        order: list[int] = []

        async def call(number: int) -> None:
            async with turns.turn("s", number):
                order.append(number)

        started = time.monotonic()
        seventh = asyncio.ensure_future(call(7))
        await asyncio.sleep(0.05)
        await call(6)
        await seventh
        await call(8)  # started now: the usual rule (no wait, it is next)
        return order, time.monotonic() - started

    order, took = run(main)
    assert order == [6, 7, 8]
    assert took < 5.0
    with pytest.raises(TimeoutError):
        # Without unknown_start the same stream waits for 0..5 (the gap timeout).
        run(lambda: asyncio.wait_for(_first_call(Turns(gap_timeout=NEVER), 6), 0.3))


async def _first_call(turns: Turns, number: int) -> None:
    async with turns.turn("s", number):
        pass
