"""Unit tests of take planning (no Ray): scope, host first, round robin, shares, the window."""

from __future__ import annotations

import pytest

from raytopic.actors.receive.planner import (
    PARALLEL_SHARE,
    UNLIMITED,
    TakePlanner,
    in_scope,
    shares,
    take_groups,
    window_room,
)


def everywhere(channel: int) -> bool:
    return True


# -- scope -------------------------------------------------------------------------


def test_scope_puts_the_host_channel_first_and_the_others_in_order() -> None:
    assert in_scope({5, 1, 3, 0}, host=3, here_only=False) == [3, 0, 1, 5]


def test_scope_without_the_host_channel_is_the_owned_channels_in_order() -> None:
    assert in_scope({4, 2}, host=0, here_only=False) == [2, 4]


def test_scope_here_only_is_the_host_channel_alone_or_nothing() -> None:
    assert in_scope({0, 1, 2}, host=1, here_only=True) == [1]
    assert in_scope({0, 2}, host=1, here_only=True) == []


# -- the window --------------------------------------------------------------------


def test_room_is_the_window_less_what_is_unacknowledged() -> None:
    assert window_room(10, [3, 4]) == 3
    assert window_room(10, [6, 7]) == -3  # over: nothing may be taken
    assert window_room(None, [1_000_000]) == UNLIMITED


# -- order -------------------------------------------------------------------------


def test_a_batch_takes_from_host_first_while_it_may_have_data() -> None:
    planner = TakePlanner(host=2)
    for _ in range(3):
        assert planner.candidates([2, 0, 1], everywhere, (), local_first=True) == [2, 0, 1]


def test_single_receives_go_round_robin_so_no_channel_starves() -> None:
    planner = TakePlanner(host=0)
    firsts = [planner.candidates([0, 1, 2], everywhere, (), local_first=False)[0] for _ in range(6)]
    assert firsts == [0, 1, 2, 0, 1, 2]


def test_round_robin_order_lists_every_candidate_once_from_the_turn_on() -> None:
    planner = TakePlanner(host=0)
    planner.candidates([0, 1, 2, 3], everywhere, (), local_first=False)  # turn -> 1
    assert planner.candidates([0, 1, 2, 3], everywhere, (), local_first=False) == [1, 2, 3, 0]


def test_round_robin_skips_channels_known_empty_and_goes_on_after_the_one_chosen() -> None:
    planner = TakePlanner(host=0)
    has_data = {2, 3}.__contains__
    assert planner.candidates([0, 1, 2, 3], has_data, (), local_first=False) == [2, 3]
    assert planner.candidates([0, 1, 2, 3], has_data, (), local_first=False) == [3, 2]


def test_host_without_data_goes_round_robin_even_for_a_batch() -> None:
    planner = TakePlanner(host=0)
    assert planner.candidates([0, 1, 2], {1, 2}.__contains__, (), local_first=True) == [1, 2]


def test_a_channel_a_fetch_reads_is_no_candidate() -> None:
    planner = TakePlanner(host=0)
    assert planner.candidates([0, 1, 2], everywhere, {0, 1}, local_first=True) == [2]


def test_nothing_to_try_leaves_the_turn_where_it_was() -> None:
    planner = TakePlanner(host=0)
    assert planner.candidates([0, 1, 2], lambda c: False, (), local_first=False) == []
    assert planner.candidates([0, 1, 2], everywhere, (), local_first=False)[0] == 0


# -- how much from each --------------------------------------------------------------


def test_a_receive_that_does_not_spread_tries_one_channel_at_a_time() -> None:
    assert take_groups([3, 1, 2], 10_000, spread=False) == [[3], [1], [2]]


@pytest.mark.parametrize(
    ("max_count", "groups"),
    [
        (PARALLEL_SHARE - 1, [[0], [1], [2], [3]]),  # too small to split
        (2 * PARALLEL_SHARE, [[0, 1], [2, 3]]),
        (100 * PARALLEL_SHARE, [[0, 1, 2, 3]]),  # never wider than the candidates
    ],
)
def test_a_spread_receive_splits_only_while_each_share_stays_large(
    max_count: int, groups: list[list[int]]
) -> None:
    assert take_groups([0, 1, 2, 3], max_count, spread=True) == groups


def test_shares_add_up_to_the_receive_and_differ_by_at_most_one() -> None:
    assert shares(10, 3) == [4, 3, 3]
    assert shares(2, 4) == [1, 1, 0, 0]
    for total, parts in [(4000, 7), (1, 1), (999, 8)]:
        split = shares(total, parts)
        assert sum(split) == total and max(split) - min(split) <= 1
