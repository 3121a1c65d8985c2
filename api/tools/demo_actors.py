"""The demo's consumers and their ledger: a group that totals order amounts per
customer, exactly once, through consumer crashes.

The ledger can also hold the consumers at a count (each with a batch received
and not yet committed), so the demo kills a consumer and a channel midway of
any run, however short.

A group delivers at least once: a consumer killed between its work and its
commit leaves its elements to be delivered again, to whoever takes its
channels. So, as with any Kafka consumer that must count each record once,
the consumers store their results together with the positions they cover:
the :class:`Ledger` keeps, per channel, the highest position counted, and
ignores what it has counted already. The totals are then exact whoever
consumed what, and a position the ledger never saw is a lost element.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np
import ray

if TYPE_CHECKING:
    from raytopic.client.topic import Topic

__all__ = ["Consumer", "Ledger"]

_BATCH = 4096
"""Elements a consumer asks for at once."""


class Ledger:
    """Totals per customer, and per channel the positions counted (contiguous from
    the channel's first)."""

    def __init__(self) -> None:
        self._totals: dict[int, float] = defaultdict(float)
        self._next: dict[int, int] = {}  # channel -> next position to count
        self._counted = 0
        self._repeated = 0
        self._gate: float = float("inf")

    def hold_at(self, count: float) -> None:
        """Let consumers record until ``count`` orders are counted, then hold them
        (the demo injects its faults at known points of the run)."""
        self._gate = count

    def is_open(self) -> bool:
        """Whether consumers may record now."""
        return self._counted < self._gate

    def record(
        self, channel: int, positions: np.ndarray, customers: np.ndarray, amounts: np.ndarray
    ) -> None:
        """Count the orders at ``positions`` of ``channel`` (ascending, as a member
        receives them) that are not counted yet.

        Raises:
            RuntimeError: a position was skipped (an element lost).
        """
        expected = self._next.setdefault(channel, int(positions[0]))
        fresh = positions >= expected
        self._repeated += int(len(positions) - fresh.sum())
        positions, customers, amounts = positions[fresh], customers[fresh], amounts[fresh]
        if not len(positions):
            return
        if positions[0] != expected or positions[-1] - positions[0] != len(positions) - 1:
            raise RuntimeError(f"channel {channel}: positions skipped after {expected - 1}")
        for customer, amount in zip(customers.tolist(), amounts.tolist(), strict=True):
            self._totals[customer] += amount
        self._counted += len(positions)
        self._next[channel] = int(positions[-1]) + 1

    def counted(self) -> int:
        """Distinct orders counted so far."""
        return self._counted

    def report(self) -> dict[str, Any]:
        """Totals, orders counted, orders seen again (redelivered) and next positions."""
        return {
            "totals": dict(self._totals),
            "counted": self._counted,
            "repeated": self._repeated,
            "next": dict(self._next),
        }


class Consumer:
    """One member of the group: receives, records in the ledger, commits."""

    def __init__(self, topic: Topic, group: str, ledger: Any) -> None:
        self._subscriber = topic.subscriber(group=group, complete_on_empty=True, timeout=5.0)
        self._ledger = ledger
        self._stopped = False
        self.taken = 0

    def run(self) -> int:
        """Consume until :meth:`stop`; return how many elements this member took."""
        subscriber = self._subscriber
        while not self._stopped:
            batch = ray.get(subscriber.receive_batch(_BATCH))
            if not batch:
                time.sleep(0.05)  # nothing now (its channels are empty, or moving)
                continue
            while not self._stopped and not ray.get(self._ledger.is_open.remote()):
                time.sleep(0.05)  # held, with the batch received and not committed
            by_channel: dict[int, list[Any]] = defaultdict(list)
            for element in batch:
                by_channel[element.channel].append(element)
            records = []
            for channel, elements in by_channel.items():
                values = [element.value for element in elements]
                records.append(
                    self._ledger.record.remote(
                        channel,
                        np.fromiter((e.position.sequence for e in elements), np.int64, len(values)),
                        np.fromiter((v["customer"] for v in values), np.int64, len(values)),
                        np.fromiter((v["amount"] for v in values), np.float64, len(values)),
                    )
                )
            ray.get(records)  # the results are stored: now the commits
            for channel, elements in by_channel.items():
                subscriber.commit(channel, elements[-1].position)
            self.taken += len(batch)
        return self.taken

    def channels(self) -> tuple[int, ...]:
        """The channels this member owns now."""
        return self._subscriber.channels

    def stop(self) -> None:
        """End :meth:`run` after its current batch, and leave the group."""
        self._stopped = True

    def close(self) -> None:
        """Leave the group."""
        self._subscriber.close()
