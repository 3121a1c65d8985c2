"""Take planning: which owned channels a receive reads, in which order, and how much
each take asks for. Pure (no Ray, no asyncio); the session carries out the plan.

A receive reads its host channel first when that may have data (a batch is sent
where its handle expects data), otherwise the owned channels in turn, so no
channel starves. A large spread receive takes from several channels at once,
each up to its share, never more than the receive returns in total.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable

__all__ = ["PARALLEL_SHARE", "TakePlanner", "in_scope", "shares", "take_groups", "window_room"]

PARALLEL_SHARE = 250
"""Elements per channel below which a receive does not split over more channels."""

UNLIMITED = 1 << 30
"""Room of a session with no window."""


def in_scope(owned: Collection[int], host: int, here_only: bool) -> list[int]:
    """The owned channels a receive may read, the host channel first.

    Args:
        owned: The channels the reader owns now.
        host: The session's host channel.
        here_only: The receive reads the host channel alone.
    """
    if here_only:
        return [host] if host in owned else []
    others = sorted(c for c in owned if c != host)
    return [host, *others] if host in owned else others


def window_room(window: int | None, unacked: Iterable[int]) -> int:
    """Elements a receive may take: the window less what is received but not yet
    committed (``unacked``, per channel); without a window, no limit."""
    if window is None:
        return UNLIMITED
    return window - sum(unacked)


def take_groups(candidates: list[int], max_count: int, spread: bool) -> list[list[int]]:
    """The candidates in the groups a receive tries one after another: one channel
    at a time, or (``spread``) as many at once as ``max_count`` gives each at
    least PARALLEL_SHARE elements."""
    width = 1
    if spread:
        width = max(1, min(len(candidates), max_count // PARALLEL_SHARE))
    return [candidates[start : start + width] for start in range(0, len(candidates), width)]


def shares(max_count: int, parts: int) -> list[int]:
    """``max_count`` split over ``parts`` takes as evenly as it goes, the larger first."""
    share, extra = divmod(max_count, parts)
    return [share + (index < extra) for index in range(parts)]


class TakePlanner:
    """The order in which a receive tries its candidate channels (round robin).

    Args:
        host: The session's host channel.
    """

    __slots__ = ("_next", "host")

    def __init__(self, host: int) -> None:
        self.host = host
        self._next = 0  # where the round robin goes on

    def candidates(
        self,
        scope: list[int],
        maybe_available: Callable[[int], bool],
        busy: Container[int],
        *,
        local_first: bool,
    ) -> list[int]:
        """The channels of ``scope`` to try, in order: those that may have data and
        are not ``busy`` (a fetch reads them: a take beside it could overtake it);
        the host channel first if ``local_first`` and it may have data, else the
        next in turn first (which moves the turn on)."""
        candidates = [c for c in scope if maybe_available(c) and c not in busy]
        if not candidates or (local_first and candidates[0] == self.host):
            return candidates
        channels = sorted(scope)
        turn = self._next % len(channels)
        rotation = channels[turn:] + channels[:turn]
        ordered = [c for c in rotation if c in candidates]
        self._next = channels.index(ordered[0]) + 1
        return ordered
