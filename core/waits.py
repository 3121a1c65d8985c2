"""How long a thread blocks in one wait: never longer than Python can wait.

Python's timed waits (``Event.wait``, ``Condition.wait``, ``queue.get``,
``Future.result``) raise ``OverflowError`` for a timeout past the platform's
limit (``threading.TIMEOUT_MAX``, an infinite one included), which ends the
thread that waits. raytopic's loops check their own deadline after every wait
(a linger, a heartbeat interval, a sweep interval), so they wait in slices of
at most :data:`LONGEST_WAIT` seconds: a longer setting still holds exactly
(the loop waits again), and no setting can end the thread.
"""

from __future__ import annotations

from typing import overload

__all__ = ["LONGEST_WAIT", "bounded_wait"]

LONGEST_WAIT = 3600.0
"""Seconds one wait of a raytopic loop lasts at most (far below any platform's
limit; a loop woken early finds its deadline not yet reached and waits again)."""


@overload
def bounded_wait(seconds: float) -> float: ...
@overload
def bounded_wait(seconds: None) -> None: ...
@overload
def bounded_wait(seconds: float | None) -> float | None: ...
def bounded_wait(seconds: float | None) -> float | None:
    """``seconds`` as a timeout no wait can refuse.

    Args:
        seconds: The time left to wait; None waits without a limit.

    Returns:
        ``seconds`` within ``[0, LONGEST_WAIT]`` (infinity and NaN: LONGEST_WAIT);
        None stays None (an untimed wait cannot overflow).
    """
    if seconds is None:
        return None
    if not seconds <= LONGEST_WAIT:  # also infinity and NaN
        return LONGEST_WAIT
    return max(0.0, seconds)
