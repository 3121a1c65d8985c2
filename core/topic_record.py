"""What a channel's store says of the topic it holds, and how a topic's channels open
their stores from what all of them hold. No Ray.

Each channel's state keeps a record of its topic (the state's ``"topic"``): the
topic's id, its settings fixed at creation (:data:`raytopic.core.config.FIXED_SETTINGS`)
and whether it was destroyed. A channel writes it with every whole state (each
new epoch) and marks it destroyed before its data is removed. The coordinator
reads every channel's record when a topic is made over a store, and
:func:`opening` decides: the topic in the store is reopened (its id and everything
it kept come back), refused (other settings: nothing is written), or, if it was
destroyed, wiped first (a destroy that stopped midway is finished, never half
undone).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from raytopic.core.config import TopicConfig, fixed_settings, settings_differences
from raytopic.core.errors import TopicSettingsError

__all__ = ["Opening", "TopicRecord", "opening"]


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """The topic a channel's store holds."""

    topic_id: str
    """The topic's id (positions name it)."""
    settings: dict[str, Any]
    """Its fixed settings, as :func:`raytopic.core.config.fixed_settings` gives them."""
    destroyed: bool = False
    """The topic was destroyed: its data goes (or went) with it."""

    @classmethod
    def of(cls, config: TopicConfig) -> TopicRecord:
        """The record of ``config``'s topic."""
        return cls(config.topic_id, fixed_settings(config))

    def state(self) -> dict[str, Any]:
        """As the channel's state keeps it (JSON)."""
        return {"id": self.topic_id, "settings": self.settings, "destroyed": self.destroyed}

    @classmethod
    def from_state(cls, saved: dict[str, Any]) -> TopicRecord | None:
        """The record in a channel's saved state (None: a state written before records
        were kept, or no state)."""
        kept = saved.get("topic")
        if not isinstance(kept, dict):
            return None
        return cls(str(kept["id"]), dict(kept["settings"]), bool(kept.get("destroyed", False)))


@dataclass(frozen=True, slots=True)
class Opening:
    """How every channel of a topic opens its store."""

    topic_id: str
    """The topic's id: the stored topic's, or the new one's."""
    wipe: bool
    """Remove what the stores hold first (the topic in them was destroyed)."""


def opening(config: TopicConfig, records: Sequence[TopicRecord | None]) -> Opening:
    """How ``config``'s channels open their stores, given what each holds (None: nothing
    recorded: a new store, or one written before records were kept).

    A record marked destroyed anywhere means the stored topic was being destroyed
    when its actors went: every channel wipes its store and the topic is new.
    Otherwise the stored topic is reopened under its id, if every record agrees on
    it and holds ``config``'s fixed settings.

    Raises:
        TopicSettingsError: the stores hold the topic with other fixed settings (each
            named, with what is stored and what was asked), or hold different topics.
    """
    kept = [record for record in records if record is not None]
    if any(record.destroyed for record in kept):
        return Opening(config.topic_id, wipe=True)
    if not kept:
        return Opening(config.topic_id, wipe=False)
    ids = sorted({record.topic_id for record in kept})
    if len(ids) > 1:
        raise TopicSettingsError(
            f"the stores of topic {config.name!r}'s channels hold different topics "
            f"(ids {', '.join(ids)}): they were not made together",
            {},
        )
    differences: dict[str, tuple[Any, Any]] = {}
    for record in kept:
        differences.update(settings_differences(record.settings, config))
    if differences:
        stored = ", ".join(f"{name}={kept!r}" for name, (kept, _) in differences.items())
        asked = ", ".join(f"{name}={asked!r}" for name, (_, asked) in differences.items())
        raise TopicSettingsError(
            f"topic {config.name!r} in its store was made with {stored}; create_topic "
            f"asked {asked}: reopen it with the settings it was made with (or destroy it)",
            differences,
        )
    return Opening(ids[0], wipe=False)
