"""Whether the running actor process is a restart of one that ran before (Ray's
answer, without the warning Ray prints while giving it)."""

from __future__ import annotations

import warnings

import ray

__all__ = ["was_restarted"]


def was_restarted() -> bool:
    """Whether this actor process is a restart (False outside an actor or Ray)."""
    if not ray.is_initialized():  # an actor class used in-process (tests)
        return False
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:  # in a driver (tests that ran Ray before)
        return False
    with warnings.catch_warnings():
        # Ray 2.60's property reads its own deprecated ``actor_id``: without this,
        # every channel and coordinator prints a RayDeprecationWarning as it starts.
        warnings.simplefilter("ignore", DeprecationWarning)
        return bool(context.was_current_actor_reconstructed)
