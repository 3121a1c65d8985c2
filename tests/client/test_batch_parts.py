"""Unit tests of how a batch's values are routed to channels (no Ray)."""

from __future__ import annotations

from raytopic.client.batch_parts import route


def _route(
    count: int, hashes: list[int | None] | None, start: int, *, by_batch: bool
) -> tuple[list[int], int]:
    layout, turn = route(count, hashes, 3, start, by_batch=by_batch)
    return layout.tolist(), turn


def test_value_by_value_keyless_values_take_a_turn_each() -> None:
    assert _route(4, None, 2, by_batch=False) == ([2, 0, 1, 2], 0)
    assert _route(3, [None, 7, None], 1, by_batch=False) == ([1, 1, 2], 0)  # 7 % 3 == 1


def test_batch_by_batch_keyless_values_share_one_channel_and_one_turn() -> None:
    assert _route(4, None, 2, by_batch=True) == ([2, 2, 2, 2], 0)
    assert _route(3, [None, 7, None], 0, by_batch=True) == ([0, 1, 0], 1)  # a key still decides


def test_batch_by_batch_a_batch_without_keyless_values_takes_no_turn() -> None:
    assert _route(2, [4, 5], 1, by_batch=True) == ([1, 2], 1)
    assert _route(0, None, 1, by_batch=True) == ([], 1)
