"""A procedure on Ray gives the same result run blocking and awaited: values sent
back, errors thrown in (and caught there), sleeps, sub-procedures."""

from __future__ import annotations

import asyncio

import pytest
import ray

from raytopic.core.steps import Get, Sleep, Steps, run_awaiting, run_blocking


@ray.remote(num_cpus=0)
def _fails() -> None:
    raise KeyError("nope")


@ray.remote(num_cpus=0)
def _slow() -> int:
    import time

    time.sleep(30)
    return 1


def _double(ref: ray.ObjectRef) -> Steps[int]:
    value = yield Get(ref)
    return 2 * value


def _procedure() -> Steps[list[object]]:
    seen: list[object] = [(yield from _double(ray.put(21)))]
    try:
        yield Get(_fails.remote())
    except KeyError:  # Ray's wrapper is also the original class
        seen.append("caught")
    try:
        yield Get(_slow.remote(), timeout=0.05)
    except TimeoutError:
        seen.append("timeout")
    yield Sleep(0.01)
    return seen


@pytest.mark.parametrize("run", ["blocking", "awaiting"])
def test_a_procedure_runs_the_same_blocking_and_awaited(ray_session: None, run: str) -> None:
    if run == "blocking":
        result = run_blocking(_procedure())
    else:
        result = asyncio.run(run_awaiting(_procedure()))
    assert result == [42, "caught", "timeout"]


def test_an_error_the_procedure_does_not_catch_reaches_the_caller(ray_session: None) -> None:
    with pytest.raises(KeyError):
        run_blocking(_double(_fails.remote()))
    with pytest.raises(KeyError):
        asyncio.run(run_awaiting(_double(_fails.remote())))
