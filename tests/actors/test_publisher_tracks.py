"""Unit tests of publisher tracks (no Ray): acks kept for retries, through the state file."""

from __future__ import annotations

import json

from raytopic.actors.publisher_tracks import ACKS_KEPT, PublisherTrack
from raytopic.core.protocol import AppendAck


def test_the_last_acks_are_kept_for_retries_and_older_ones_go() -> None:
    track = PublisherTrack()
    for batch in range(ACKS_KEPT + 5):
        track.remember(batch, AppendAck(batch * 10, 10, 1.5))
    assert track.last_batch == ACKS_KEPT + 4
    assert sorted(track.acks) == list(range(5, ACKS_KEPT + 5))
    assert track.acks[7] == AppendAck(70, 10, 1.5)


def test_runs_learned_from_a_store_merge_into_one_ack_once() -> None:
    track = PublisherTrack()
    track.add_run(3, 100, 4, 2.0)  # a "block" batch larger than the capacity: two records
    track.add_run(3, 104, 2, 2.5)
    track.add_run(3, 104, 2, 2.5)  # known already (state file, then the record)
    ack = track.acks[3]
    assert (ack.first, ack.accepted, ack.runs) == (100, 6, ((100, 4, 2.0), (104, 2, 2.5)))
    assert track.last_batch == 3


def test_a_track_survives_the_state_file_as_json() -> None:
    track = PublisherTrack()
    track.remember(0, AppendAck(0, 5, 1.0))
    track.remember(1, AppendAck(5, 3, 1.1, None, ((5, 2, 1.1), (7, 1, 1.2))))
    track.remember(2, AppendAck(-1, 0, 0.0))  # nothing appended: nothing to answer a retry with
    again = PublisherTrack.from_state(json.loads(json.dumps(track.to_state())))
    assert again.last_batch == 2
    assert again.acks == {0: AppendAck(0, 5, 1.0), 1: track.acks[1]}


def test_an_open_batch_survives_the_state_file_until_a_later_batch_goes_in() -> None:
    track = PublisherTrack()
    track.remember(0, AppendAck(0, 5, 1.0))
    track.open = 1
    track.add_run(1, 5, 2, 1.1)  # its first piece: still open
    state = json.loads(json.dumps(track.to_state()))
    again = PublisherTrack.from_state(state)
    assert (again.open, again.acks[1], again.resumable()) == (1, AppendAck(5, 2, 1.1), True)
    assert PublisherTrack.from_state(state[:2]).open == -1  # a state of before: none open
    again.add_run(2, 7, 1, 1.2)  # a record of a later batch: the open one had ended
    assert (again.open, again.resumable()) == (-1, False)
    assert len(again.to_state()) == 2  # nothing open: the state as before
