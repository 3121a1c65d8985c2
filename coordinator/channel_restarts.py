"""Channels that restart, as the coordinator handles them, over a ``ChannelFleet``.

A channel that comes back after its process died says so itself
(``restarted``; idle channels are never polled). One without a store gets
its groups, leases, views and readers back (a seed), and the channels whose
groups lost an owner that way get one. (What its old receive sessions had
taken from its siblings needs no word to them: the sessions that replace
them read again after the commit, see ``raytopic.actors.receive.positions``.)
No Ray: the unit tests run it against a fake fleet.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raytopic.coordinator.fleet import ChannelFleet
    from raytopic.coordinator.group_service import GroupService

logger = logging.getLogger(__name__)

__all__ = ["ChannelRestarts"]


class ChannelRestarts:
    """The channels' identities (epoch, state, pid, ...) and their restarts.

    Args:
        topic: The topic's name (for logs).
        fleet: The topic's channels.
        groups: The topic's groups (a seed carries them).
        identities: Each channel's identity as last known.
    """

    def __init__(
        self,
        topic: str,
        fleet: ChannelFleet,
        groups: GroupService,
        identities: list[dict[str, Any]],
    ) -> None:
        self._topic = topic
        self._fleet = fleet
        self._groups = groups
        self.identities = identities

    async def recover(self) -> None:
        """A rebuilt coordinator seeds the channels that restarted while it was down
        and gives their unowned channels to members."""
        for channel, identity in enumerate(self.identities):
            if identity["state"] == "recovering":  # it restarted while the coordinator was down
                with contextlib.suppress(Exception):  # it asks again while calls wait
                    self.identities[channel] = await self._seed(channel)
        await self._groups.assign_unowned()

    async def restarted(self, channel: int, identity: dict[str, Any]) -> None:
        """Channel ``channel`` came back with ``identity``: seed it if it has no store."""
        if identity["state"] == "recovering":
            try:
                identity = await self._seed(channel)
            except Exception as error:  # it asks again while calls wait for it
                logger.warning("channel %d could not be restored yet: %s", channel, error)
                return
            await self._groups.assign_unowned()
        self.identities[channel] = identity

    def known(self, channel: int) -> dict[str, Any]:
        """What is known of a channel (its last identity; empty if none)."""
        return self.identities[channel] if channel < len(self.identities) else {}

    async def _seed(self, channel: int) -> dict[str, Any]:
        """Give a channel that restarted without a store its groups and leases back."""
        old_epoch = int(self.identities[channel].get("epoch", 1))
        identity = await self._fleet.seed(channel, old_epoch, *self._groups.seed_state(channel))
        logger.warning(
            "channel %d of %s restarted without a store: epoch %d -> %d, its elements are lost",
            channel,
            self._topic,
            old_epoch,
            identity["epoch"],
        )
        return identity
