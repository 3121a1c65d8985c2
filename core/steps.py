"""One procedure on Ray, run blocking by a driver or awaited by an async actor.

Making a topic (``raytopic.coordinator.launch``) is a series of Ray calls and
waits. A driver's ``create_topic`` blocks on them; the coordinator, which makes a
shared group's dead-letter topic, is an async actor and must await them (a
``ray.get`` there stops its event loop). So the procedure is written once, as a
generator that *yields* what it waits for (:class:`Get`, :class:`Sleep`) and is
sent the result (or thrown the error) back; :func:`run_blocking` and
:func:`run_awaiting` do the waiting. Sub-procedures compose with ``yield from``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import ray

__all__ = ["Get", "Sleep", "Steps", "run_awaiting", "run_blocking"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Get:
    """Wait for an ObjectRef's value (its error is thrown into the procedure)."""

    ref: Any
    timeout: float | None = None
    """Seconds at most (None: no limit); then a TimeoutError is thrown in."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait a while."""

    seconds: float


Steps = Generator[Get | Sleep, Any, T]
"""A procedure that yields what it waits for and returns its result."""


def run_blocking(steps: Steps[T]) -> T:
    """Run ``steps`` in this thread, blocking on each wait (drivers, tasks, threads)."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(reply)
        except StopIteration as done:
            return done.value
        reply, error = None, None
        try:
            if isinstance(step, Get):
                reply = ray.get(step.ref, timeout=step.timeout)
            else:
                time.sleep(step.seconds)
        except Exception as failed:
            error = failed


async def run_awaiting(steps: Steps[T]) -> T:
    """Run ``steps`` on the running event loop, awaiting each wait (async actors)."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(reply)
        except StopIteration as done:
            return done.value
        reply, error = None, None
        try:
            if isinstance(step, Get):
                reply = await asyncio.wait_for(_value(step.ref), step.timeout)
            else:
                await asyncio.sleep(step.seconds)
        except Exception as failed:
            error = failed


async def _value(ref: Any) -> Any:
    return await ref
