"""A channel's upkeep: which background jobs its state needs, and when. No Ray.

After each request the channel asks :meth:`ChannelUpkeep.tend` to start the jobs
its state needs now (each runs once at a time, see
:class:`~raytopic.actors.channel_jobs.ChannelJobs`):

- ``shared``: while shared groups exist, their holds are tended (ack deadlines,
  redeliveries, dead letters; :meth:`SharedGroups.tend`);
- ``transactions``: while a transaction here is undecided or unfinished;
- ``metrics``: from the first publish or transaction step on, the counts and
  group gauges are handed to Ray's metrics every few seconds;
- ``compaction``: while a compacted channel has something to compact.

:meth:`ChannelUpkeep.close` stops them and the log's periodic sync; nothing
starts again after it.
"""

from __future__ import annotations

import asyncio

from raytopic.actors.channel_jobs import ChannelJobs
from raytopic.actors.channel_metrics import REFRESH_INTERVAL
from raytopic.actors.channel_parts import ChannelParts

__all__ = ["ChannelUpkeep"]


class ChannelUpkeep:
    """The background jobs of one channel, started where its state needs them.

    Args:
        parts: The channel's parts (what the jobs tend).
    """

    def __init__(self, parts: ChannelParts) -> None:
        self._parts = parts
        self._jobs = ChannelJobs()
        self._reporting = False  # metrics are reported from the first publish or transaction

    def report_from_now(self) -> None:
        """A publish or a transaction step came: the channel's metrics are reported
        from now on."""
        self._reporting = True

    def tend(self) -> None:
        """Start the jobs the channel's state needs now (the one place they start)."""
        parts, jobs = self._parts, self._jobs
        if parts.readers.has_shared_groups:
            jobs.start("shared", self._tend_shared_groups)
        if parts.transactions.needs_tending:
            jobs.start("transactions", parts.transactions.tend)
        if self._reporting:
            jobs.start("metrics", self._report_metrics)
        if parts.compactor.needs_tending:
            jobs.start("compaction", parts.compactor.tend)

    def running(self, job: str) -> bool:
        """Whether ``job`` runs now."""
        return self._jobs.running(job)

    async def close(self) -> None:
        """Stop the jobs and the log's periodic sync; no job starts again. Idempotent."""
        await self._jobs.close()
        await self._parts.log.close()

    async def _report_metrics(self) -> None:
        log, readers, metrics = self._parts.log, self._parts.readers, self._parts.context.metrics
        while True:
            figures = log.figures()
            metrics.report(readers.lag(figures.head, figures.tail))
            await asyncio.sleep(REFRESH_INTERVAL)

    async def _tend_shared_groups(self) -> None:
        context = self._parts.context
        await self._parts.readers.tend_shared_groups(
            self._parts.dead_letters.send, lambda: context.failure is None
        )
