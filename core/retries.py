"""How an autoscaled owned group's member retries what its handler failed on. No Ray.

A failed handler call counts one delivery of every element it got (by channel
and position; the member goes back to its last commit and receives them again).
Past ``max_deliveries`` deliveries, the elements that reached it (per channel,
everything up to the last of them: a commit covers every earlier position) go
to the dead-letter topic and the member commits past them. Retries back off:
1 s after the first failure in a row, doubling, at most a minute.

The counts are the member's: a channel that moves to another member starts
counting there again (a batch is tried at most ``max_deliveries`` times per
member that owns its channel).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterable

__all__ = ["RETRY_FIRST", "RETRY_MOST", "Deliveries", "describe_error", "retry_pause"]

RETRY_FIRST = 1.0
"""Seconds before the first retry of a failed batch."""

RETRY_MOST = 60.0
"""Longest pause between retries."""


def retry_pause(failures: int) -> float:
    """Seconds to wait after ``failures`` (>= 1) failed handler calls in a row:
    1, 2, 4, ... at most ``RETRY_MOST``."""
    return min(RETRY_FIRST * 2 ** min(failures - 1, 16), RETRY_MOST)


def describe_error(error: BaseException) -> str:
    """An exception in one line: its type, message and where it was raised."""
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        last = frames[-1]
        text += f" ({os.path.basename(last.filename)}:{last.lineno})"
    return text


class Deliveries:
    """How many times each element was handed to a handler that failed, per member.

    Args:
        max_deliveries: Deliveries after which an element is dead (None: never).
    """

    def __init__(self, max_deliveries: int | None) -> None:
        self._max = max_deliveries
        self._counts: dict[tuple[int, int], int] = {}  # (channel, sequence) -> deliveries

    def __len__(self) -> int:
        return len(self._counts)

    def failed(self, elements: Iterable[tuple[int, int]]) -> tuple[int, dict[int, int]]:
        """Count a failed call on ``elements`` ((channel, sequence) pairs).

        Returns:
            The most deliveries any of them has had now, and per channel the last
            sequence that reached ``max_deliveries`` (every element of the call
            up to it is dead; none where no element reached it).
        """
        most, dead = 0, dict[int, int]()
        for channel, sequence in elements:
            count = self._counts.get((channel, sequence), 0) + 1
            self._counts[channel, sequence] = count
            most = max(most, count)
            if self._max is not None and count >= self._max:
                dead[channel] = max(dead.get(channel, sequence), sequence)
        return most, dead

    def count(self, channel: int, sequence: int) -> int:
        """Deliveries of one element so far (0: none failed)."""
        return self._counts.get((channel, sequence), 0)

    def forget(self, elements: Iterable[tuple[int, int]]) -> None:
        """Forget elements that are done (handled, or sent to the dead-letter topic)."""
        for element in elements:
            self._counts.pop(element, None)

    def keep_channels(self, channels: Iterable[int]) -> None:
        """Forget the elements of channels this member no longer owns."""
        owned = set(channels)
        self._counts = {key: n for key, n in self._counts.items() if key[0] in owned}
