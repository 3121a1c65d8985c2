"""Unit tests of group commit (no Ray): shared flushes, covered marks, failures, prepare."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from raytopic.actors.stores.group_sync import GroupSync


class Disk:
    """A flush that counts its runs and records what each one covered."""

    def __init__(self, seconds: float = 0.01, failures: int = 0) -> None:
        self.seconds = seconds
        self.failures = failures
        self.calls = 0
        self.covered: list[Any] = []  # what prepare returned, for each flush that succeeded
        self.threads: set[int] = set()

    def flush(self, prepared: Any) -> None:
        self.calls += 1
        self.threads.add(threading.get_ident())
        time.sleep(self.seconds)
        if self.failures:
            self.failures -= 1
            raise OSError("fdatasync failed")
        self.covered.append(prepared)


def test_many_waiters_after_their_marks_share_one_flush() -> None:
    disk = Disk()

    async def main() -> None:
        marks: list[int] = []
        group = GroupSync(disk.flush, lambda: len(marks))  # marks made when a flush starts
        marks.extend(group.mark() for _ in range(50))
        await asyncio.gather(*(group.wait(mark) for mark in marks))

    asyncio.run(main())
    assert disk.calls == 1
    assert disk.covered == [50]


def test_waiters_marking_as_they_go_share_at_most_two_flushes() -> None:
    disk = Disk()
    served: list[tuple[int, int]] = []

    async def main() -> None:
        made: list[int] = []
        group = GroupSync(disk.flush, lambda: len(made))  # marks made when a flush starts

        async def append() -> None:
            mark = group.mark()
            made.append(mark)
            await group.wait(mark)
            served.append((mark, max(disk.covered)))

        await asyncio.gather(*(append() for _ in range(50)))

    asyncio.run(main())
    assert disk.calls <= 2
    assert len(served) == 50
    # every waiter returned after a flush that started once its mark was made
    assert all(covered >= mark for mark, covered in served)


def test_waves_of_waiters_get_at_most_two_flushes_per_wave() -> None:
    disk = Disk(seconds=0.005)

    async def main() -> None:
        group = GroupSync(disk.flush)

        async def append() -> None:
            await group.wait(group.mark())

        for _ in range(5):
            await asyncio.gather(*(append() for _ in range(20)))

    asyncio.run(main())
    assert 5 <= disk.calls <= 10


def test_a_covered_mark_returns_without_a_flush() -> None:
    disk = Disk()

    async def main() -> None:
        group = GroupSync(disk.flush)
        await group.wait()  # nothing marked: nothing to flush
        assert disk.calls == 0
        first = group.mark()
        second = group.mark()
        await group.wait(first)
        assert disk.calls == 1  # covers both marks
        await group.wait(second)
        await group.wait(first)
        await group.wait()
        assert disk.calls == 1
        await group.wait(group.mark())
        assert disk.calls == 2

    asyncio.run(main())


def test_wait_without_a_mark_waits_for_the_latest() -> None:
    disk = Disk()

    async def main() -> None:
        made: list[int] = []
        group = GroupSync(disk.flush, lambda: len(made))
        made.append(group.mark())
        made.append(group.mark())
        await group.wait()
        assert disk.covered == [2]

    asyncio.run(main())


def test_a_failed_flush_reaches_every_waiter_it_covers_and_every_later_one() -> None:
    # After a failed fdatasync a second one may "succeed" with the writes lost:
    # nothing is acknowledged after a failure.
    disk = Disk(failures=1)
    outcomes: list[BaseException | None] = []

    async def main() -> None:
        group = GroupSync(disk.flush)
        marks = [group.mark() for _ in range(10)]
        outcomes.extend(
            await asyncio.gather(*(group.wait(mark) for mark in marks), return_exceptions=True)
        )
        with pytest.raises(OSError, match="fdatasync failed"):
            await group.wait(group.mark())

    asyncio.run(main())
    assert all(isinstance(outcome, OSError) for outcome in outcomes), outcomes
    assert disk.calls == 1


def test_prepare_runs_on_the_loop_before_each_flush_and_feeds_it() -> None:
    disk = Disk()
    order: list[str] = []
    loop_threads: set[int] = set()

    def prepare() -> int:
        loop_threads.add(threading.get_ident())
        order.append(f"prepare {disk.calls + 1}")
        return disk.calls + 1

    def flush(prepared: int) -> None:
        order.append(f"flush {prepared}")
        disk.flush(prepared)

    async def main() -> None:
        group = GroupSync(flush, prepare)
        await group.wait(group.mark())
        await group.wait(group.mark())
        await group.wait(group.mark())

    asyncio.run(main())
    assert order == ["prepare 1", "flush 1", "prepare 2", "flush 2", "prepare 3", "flush 3"]
    assert disk.covered == [1, 2, 3]
    assert loop_threads == {threading.get_ident()}  # asyncio.run's loop is on this thread
    assert threading.get_ident() not in disk.threads  # the flush runs off the loop


def test_a_cancelled_waiter_neither_cuts_the_flush_short_nor_breaks_the_sync() -> None:
    # ray.cancel of a publish cancels its wait; the others' flush goes on.
    release = threading.Event()
    flushed: list[int] = []

    def slow_flush(_: object) -> None:
        release.wait(5)
        flushed.append(1)

    async def main() -> None:
        group = GroupSync(slow_flush)
        mark = group.mark()
        cancelled = asyncio.ensure_future(group.wait(mark))
        await asyncio.sleep(0.05)  # the flush is running
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        release.set()
        await group.wait(mark)  # covered by the flush that went on: no new one
        assert flushed == [1]
        await group.wait(group.mark())  # and the sync still works
        assert flushed == [1, 1]

    asyncio.run(main())
