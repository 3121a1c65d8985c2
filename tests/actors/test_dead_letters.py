"""Unit tests of DeadLetters (no Ray): the letters it builds from a shared group's dead
elements (value, why, how often delivered, topic, channel, position), what it skips,
and the batches it takes (at most BATCH, numbered, saved before anything is sent).

Appending the letters to the dead-letter topic is an actor call, left to the Ray tests;
a batch whose elements all went meanwhile needs no call and is tested here.
"""

from __future__ import annotations

import asyncio

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.channel_metrics import ChannelMetrics
from raytopic.actors.dead_letters import BATCH, DeadLetters
from raytopic.actors.shared_cursor import SharedCursor
from raytopic.core.config import Overflow, TopicConfig
from raytopic.core.payloads import PickledValues
from raytopic.core.records import Position
from raytopic.core.shared_group import SharedGroup

CHANNEL = 2
SPEC = SharedGroup("work", max_deliveries=3, dead_letter="work-dead")


class _Parts:
    """Channel 2's log and its DeadLetters, recording each save and what was being sent."""

    def __init__(self, capacity: int = 100) -> None:
        config = TopicConfig("orders", "ns", "t0pic1d", 4, capacity, True, None, Overflow.BLOCK, ())
        self.context = ChannelContext(config, CHANNEL, ChannelMetrics("orders", CHANNEL))
        self.log = ChannelLog(self.context)
        self.cursor = SharedCursor.starting_at(0)
        self.saved: list[tuple[int, list[int]] | None] = []
        self.letters = DeadLetters(self.context, self.log, self._save)

    async def _save(self) -> None:
        sending = self.cursor.sending
        self.saved.append(None if sending is None else (sending[0], list(sending[1])))

    def append(self, values: list[object]) -> None:
        self.log.ring.append(PickledValues.from_values(values), overwrite=True)

    def die(self, *sequences: int, deliveries: int = 3) -> None:
        for sequence in sequences:
            self.cursor.dead[sequence] = (deliveries, f"nacked after {deliveries} deliveries")
        self.cursor.next = max(self.cursor.next, max(sequences) + 1)


def test_a_letter_carries_the_value_why_it_died_and_where() -> None:
    parts = _Parts()
    parts.append([{"order": n} for n in range(5)])
    parts.die(1)
    parts.die(3, deliveries=4)
    letters = parts.letters._letters(parts.cursor, [1, 3])
    assert letters == [
        {
            "value": {"order": 1},
            "reason": "nacked after 3 deliveries",
            "deliveries": 3,
            "topic": "orders",
            "channel": CHANNEL,
            "position": "t0pic1d:2:1",
        },
        {
            "value": {"order": 3},
            "reason": "nacked after 4 deliveries",
            "deliveries": 4,
            "topic": "orders",
            "channel": CHANNEL,
            "position": "t0pic1d:2:3",
        },
    ]
    assert Position.parse(letters[1]["position"]) == Position("t0pic1d", CHANNEL, 3)


def test_elements_gone_meanwhile_or_no_longer_dead_get_no_letter() -> None:
    parts = _Parts(capacity=4)
    parts.append(list(range(6)))  # 0 and 1 overwritten: the head is 2
    parts.die(1, 3, 5)
    del parts.cursor.dead[5]  # settled meanwhile (a reset, a purge)
    letters = parts.letters._letters(parts.cursor, [1, 3, 5])
    assert [letter["value"] for letter in letters] == [3]


def test_a_value_the_channel_cannot_load_is_sent_as_why() -> None:
    parts = _Parts()
    # A pickle of a class whose module the channel's process does not have.
    unloadable = PickledValues.from_pickles([b"cno_such_module_here\nThing\n."])
    parts.log.ring.append(unloadable, overwrite=True)
    parts.die(0)
    (letter,) = parts.letters._letters(parts.cursor, [0])
    assert letter["value"].startswith("<not decodable in the channel:")
    assert "no_such_module_here" in letter["value"]
    assert letter["position"] == "t0pic1d:2:0" and letter["deliveries"] == 3


def test_a_send_takes_at_most_batch_elements_under_a_new_version_saved_first() -> None:
    async def main() -> None:
        parts = _Parts(capacity=10)
        parts.append(list(range(BATCH + 500)))  # the head is far above the dead ones
        dead = range(BATCH + 200)
        parts.die(*dead)
        # Every dead element was overwritten: nothing to append, no call to make.
        await parts.letters.send("work", parts.cursor, SPEC)
        assert parts.saved == [(1, list(range(BATCH)))]  # the batch was durable first
        cursor = parts.cursor
        assert sorted(cursor.dead) == list(range(BATCH, BATCH + 200))
        assert (cursor.sending, cursor.dead_lettered, cursor.floor) == (None, BATCH, BATCH - 1)
        await parts.letters.send("work", cursor, SPEC)
        assert parts.saved[1] == (2, list(range(BATCH, BATCH + 200)))
        assert cursor.dead == {} and cursor.dead_lettered == BATCH + 200
        assert cursor.floor == BATCH + 199

    asyncio.run(main())


def test_a_send_under_way_at_a_restart_is_sent_again_as_it_was() -> None:
    async def main() -> None:
        parts = _Parts(capacity=2)
        parts.append(list(range(10)))
        parts.die(0, 1, 2, 3)
        parts.cursor.sending = (7, [1, 2])  # kept in the state across the restart
        parts.cursor.dead_serial = 7
        await parts.letters.send("work", parts.cursor, SPEC)
        assert parts.saved == [(7, [1, 2])]  # the same version, the same elements
        assert sorted(parts.cursor.dead) == [0, 3] and parts.cursor.dead_lettered == 2
        await parts.letters.send("work", parts.cursor, SPEC)
        assert parts.saved[1] == (8, [0, 3])

    asyncio.run(main())
