"""How an autoscaled owned group's member retries (raytopic.core.retries): the pause
between tries, the deliveries counted per element, the dead ones past the limit,
an error in one line. No Ray."""

from __future__ import annotations

from raytopic.core.retries import RETRY_MOST, Deliveries, describe_error, retry_pause


def test_the_pause_doubles_from_a_second_to_at_most_a_minute() -> None:
    assert [retry_pause(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert retry_pause(10_000) == RETRY_MOST  # no overflow after days of failures


def test_elements_die_per_channel_up_to_the_last_one_at_the_limit() -> None:
    deliveries = Deliveries(max_deliveries=3)
    first = [(0, 10), (0, 11), (1, 5)]
    assert deliveries.failed(first) == (1, {})
    assert deliveries.failed(first) == (2, {})
    # The third call got two new elements: only those handed over three times die
    # (a channel's oldest: a commit past them commits nothing newer).
    most, dead = deliveries.failed([*first, (0, 12), (1, 6)])
    assert (most, dead) == (3, {0: 11, 1: 5})
    assert deliveries.count(0, 11) == 3 and deliveries.count(0, 12) == 1
    deliveries.forget([(0, 10), (0, 11), (1, 5)])
    assert deliveries.count(0, 11) == 0 and len(deliveries) == 2


def test_without_a_limit_nothing_dies_and_moved_channels_are_forgotten() -> None:
    deliveries = Deliveries(max_deliveries=None)
    for _ in range(100):
        most, dead = deliveries.failed([(0, 1), (2, 7)])
    assert (most, dead) == (100, {})
    deliveries.keep_channels([0])
    assert len(deliveries) == 1 and deliveries.count(2, 7) == 0


def _raise() -> None:
    raise ValueError("cannot handle 13")


def test_an_error_is_one_line_with_where_it_was_raised() -> None:
    try:
        _raise()
    except ValueError as error:
        described = describe_error(error)
    assert described.startswith("ValueError: cannot handle 13 (test_retries.py:")
    assert "\n" not in described
    assert describe_error(KeyboardInterrupt()) == "KeyboardInterrupt"
