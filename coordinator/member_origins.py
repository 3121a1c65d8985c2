"""Where each group member runs, and whether Ray says that process is gone.

A member tells the coordinator at its join where it runs (its ``Origin``): the
job of the driver or task it lives in, or the actor it lives in (an actor may
outlive its job: a detached one). Ray's GCS knows when a job ended (its driver
exited or was killed) and when an actor died or is restarting; the coordinator
asks it about its members' origins about once a second (``DEAD_CHECK_INTERVAL``),
so a member whose process is gone leaves its group at once instead of holding
its channels until its ``timeout`` runs out. A member whose origin is not known
(joined before a coordinator restart) still times out as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from raytopic.core.protocol import Origin

logger = logging.getLogger(__name__)

__all__ = ["DEAD_CHECK_INTERVAL", "MemberOrigins"]

DEAD_CHECK_INTERVAL = 1.0
"""Seconds between asking Ray about the members' origins (while there are any)."""


class MemberOrigins:
    """The origins of the topic's group members, by (group, member)."""

    def __init__(self) -> None:
        self._origins: dict[tuple[str, str], Origin] = {}

    def __bool__(self) -> bool:
        return bool(self._origins)

    def note(self, group: str, reader_id: str, origin: Origin | None) -> None:
        """Remember where a member that joined runs (None: not known)."""
        if origin is None:
            self._origins.pop((group, reader_id), None)
        else:
            self._origins[(group, reader_id)] = origin

    def keep_only(self, members: Iterable[tuple[str, str]]) -> None:
        """Forget the members not in ``members`` (they left, timed out, or their
        group is gone)."""
        live = set(members)
        for key in [key for key in self._origins if key not in live]:
            del self._origins[key]

    async def gone(self) -> list[tuple[str, str, str]]:
        """(group, member, why) of each member whose process Ray says is gone. A
        question Ray does not answer counts as alive (the timeout still holds)."""
        if not self._origins:
            return []
        try:
            dead = await asyncio.to_thread(_dead, set(self._origins.values()))
        except Exception as error:  # the GCS restarting: ask again next time
            logger.debug("could not ask Ray about members' processes: %s", error)
            return []
        return [
            (group, reader_id, dead[origin])
            for (group, reader_id), origin in self._origins.items()
            if origin in dead
        ]


def _dead(origins: set[Origin]) -> dict[Origin, str]:
    """Of ``origins``, those Ray says are gone, with why (one call to the GCS for
    the jobs, one per actor)."""
    import ray._private.state

    state = ray._private.state.state
    dead: dict[Origin, str] = {}
    jobs = {origin.id for origin in origins if origin.kind == "job"}
    if jobs:
        ended = {job["JobID"] for job in state.job_table() if job["IsDead"]}
        dead.update(
            (origin, f"its job {origin.id} ended")
            for origin in origins
            if origin.kind == "job" and origin.id in ended
        )
    for origin in origins:
        if origin.kind == "actor":
            actor = state.actor_table(origin.id)
            if actor.get("State") in ("DEAD", "RESTARTING"):
                dead[origin] = f"its actor {origin.id} is {actor['State'].lower()}"
    return dead
