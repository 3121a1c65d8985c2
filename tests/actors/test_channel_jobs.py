"""Unit tests of ChannelJobs (no Ray): one task per job at a time, a job runs in a context
of its own, and close() stops every job for good."""

from __future__ import annotations

import asyncio
import contextvars

from raytopic.actors.channel_jobs import ChannelJobs

REQUEST = contextvars.ContextVar("request", default="none")


def test_a_job_runs_once_at_a_time_and_again_after_it_ended() -> None:
    async def main() -> None:
        jobs = ChannelJobs()
        runs: list[int] = []
        release = asyncio.Event()

        async def work() -> None:
            runs.append(len(runs))
            await release.wait()

        jobs.start("w", work)
        jobs.start("w", work)  # runs already: not started twice
        await asyncio.sleep(0)
        assert runs == [0] and jobs.running("w")
        release.set()
        await asyncio.sleep(0.01)
        assert not jobs.running("w")
        jobs.start("w", work)  # ended: starts again
        await asyncio.sleep(0)
        assert runs == [0, 1]
        await jobs.close()

    asyncio.run(main())


def test_a_job_runs_in_a_context_of_its_own() -> None:
    async def main() -> None:
        jobs = ChannelJobs()
        seen: list[str] = []

        async def work() -> None:
            seen.append(REQUEST.get())

        REQUEST.set("the request that started it")
        jobs.start("w", work)
        await asyncio.sleep(0.01)
        assert seen == ["none"]

    asyncio.run(main())


def test_close_stops_every_job_for_good_and_is_idempotent() -> None:
    async def main() -> None:
        jobs = ChannelJobs()
        stopped: list[str] = []

        def forever(name: str):
            async def work() -> None:
                try:
                    await asyncio.Event().wait()
                finally:
                    stopped.append(name)

            return work

        jobs.start("a", forever("a"))
        jobs.start("b", forever("b"))
        await asyncio.sleep(0)
        await jobs.close()
        assert sorted(stopped) == ["a", "b"]
        assert not jobs.running("a") and not jobs.running("b")
        jobs.start("a", forever("again"))  # closed: nothing starts
        await asyncio.sleep(0)
        assert not jobs.running("a")
        await jobs.close()

    asyncio.run(main())
