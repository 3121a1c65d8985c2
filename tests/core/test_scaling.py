"""The autoscaler's rule (raytopic.core.scaling): desired members by lag. No Ray."""

from __future__ import annotations

import pytest

from raytopic.core.errors import InvalidArgumentError, InvalidTypeError
from raytopic.core.scaling import ScaleRule, ScaleSettings


def _rule(*, owned: bool = True, channels: int = 8, **settings: object) -> ScaleRule:
    return ScaleRule(ScaleSettings.create(**settings), owned=owned, channel_count=channels)


def _spread(lag: int, channels: int = 8) -> dict[int, int]:
    """``lag`` spread evenly over ``channels``."""
    base, extra = divmod(lag, channels)
    return {c: base + (1 if c < extra else 0) for c in range(channels)}


def test_desired_is_lag_over_target_within_bounds() -> None:
    rule = _rule(min_members=1, max_members=6, target_lag_per_member=100)
    assert rule.decide(_spread(0), 1, 0.0).desired == 1  # min_members
    assert rule.decide(_spread(250), 1, 0.0).desired == 3  # ceil(250 / 100)
    assert rule.decide(_spread(100_000), 3, 0.0).desired == 6  # max_members


def test_from_zero_only_at_the_activation_lag() -> None:
    rule = _rule(activation_lag=50, target_lag_per_member=10)
    assert rule.decide(_spread(49), 0, 0.0).desired == 0
    woken = rule.decide(_spread(50), 0, 0.0)
    assert woken.desired == 5
    assert "activation_lag" in woken.reason
    # Once running, the activation lag no longer matters: 49 asks for 5 members.
    assert rule.decide(_spread(49), 5, 1.0).desired == 5


def test_owned_group_is_capped_by_channels_with_lag_shared_is_not() -> None:
    lags = {0: 5000, 1: 5000, 2: 0, 3: 0}  # two channels hold the whole backlog
    owned = _rule(owned=True, channels=4, target_lag_per_member=100)
    shared = _rule(owned=False, channels=4, target_lag_per_member=100)
    assert owned.decide(lags, 0, 0.0).desired == 2
    assert shared.decide(lags, 0, 0.0).desired == 8  # beyond the 4 channels


def test_min_members_beyond_an_owned_groups_channels_is_cut_to_them() -> None:
    assert _rule(channels=2, min_members=5, max_members=8).decide({0: 0, 1: 0}, 0, 0).desired == 2
    shared = _rule(owned=False, channels=2, min_members=5, max_members=8)
    assert shared.decide({0: 0, 1: 0}, 0, 0).desired == 5


def test_scale_down_waits_until_fewer_were_wanted_for_the_whole_delay() -> None:
    rule = _rule(target_lag_per_member=100, scale_down_after_s=30.0)
    assert rule.decide(_spread(800), 0, 0.0).desired == 8
    assert rule.decide(_spread(300), 8, 10.0).desired == 8  # 3 wanted: wait
    assert rule.decide(_spread(500), 8, 25.0).desired == 8
    down = rule.decide(_spread(200), 8, 40.0)  # below 8 for 30 s: the highest of the window
    assert (down.desired, down.wanted) == (5, 2)
    assert "30 s" in down.reason
    # A further step down waits a whole window again.
    assert rule.decide(_spread(0), 5, 41.0).desired == 5
    assert rule.decide(_spread(0), 5, 71.0).desired == 0


def test_a_rise_during_the_delay_restarts_it() -> None:
    rule = _rule(target_lag_per_member=100, scale_down_after_s=10.0)
    assert rule.decide(_spread(100), 4, 0.0).desired == 4
    assert rule.decide(_spread(400), 4, 5.0).desired == 4  # as many as it has: no streak
    assert rule.decide(_spread(100), 4, 9.0).desired == 4
    assert rule.decide(_spread(100), 4, 18.0).desired == 4  # 9 s below, not 10
    assert rule.decide(_spread(100), 4, 19.0).desired == 1


def test_no_delay_scales_down_at_once() -> None:
    rule = _rule(target_lag_per_member=100, scale_down_after_s=0)
    assert rule.decide(_spread(0), 3, 0.0).desired == 0


def test_up_is_immediate_after_a_dip() -> None:
    rule = _rule(target_lag_per_member=100, scale_down_after_s=10.0)
    rule.decide(_spread(100), 4, 0.0)
    assert rule.decide(_spread(700), 4, 1.0).desired == 7


@pytest.mark.parametrize(
    ("settings", "error", "named"),
    [
        ({"min_members": -1}, InvalidArgumentError, "min_members"),
        ({"min_members": 1.5}, InvalidTypeError, "min_members"),
        ({"max_members": 0}, InvalidArgumentError, "max_members"),
        ({"max_members": True}, InvalidTypeError, "max_members"),
        ({"min_members": 3, "max_members": 2}, InvalidArgumentError, "min_members"),
        ({"target_lag_per_member": 0}, InvalidArgumentError, "target_lag_per_member"),
        ({"activation_lag": 0}, InvalidArgumentError, "activation_lag"),
        ({"poll_s": 0}, InvalidArgumentError, "poll_s"),
        ({"poll_s": float("nan")}, InvalidArgumentError, "poll_s"),
        ({"poll_s": "1"}, InvalidTypeError, "poll_s"),
        ({"scale_down_after_s": -1}, InvalidArgumentError, "scale_down_after_s"),
        ({"batch_size": 0}, InvalidArgumentError, "batch_size"),
        ({"max_deliveries": 0, "dead_letter": "dead"}, InvalidArgumentError, "max_deliveries"),
        ({"max_deliveries": "3", "dead_letter": "dead"}, InvalidTypeError, "max_deliveries"),
        ({"max_deliveries": 3}, InvalidArgumentError, "needs a dead_letter"),
        ({"dead_letter": "dead"}, InvalidArgumentError, "needs max_deliveries"),
        ({"max_deliveries": 3, "dead_letter": "no spaces"}, InvalidArgumentError, "dead_letter"),
        ({"max_deliveries": 3, "dead_letter": 7}, InvalidTypeError, "dead_letter"),
        ({"batch_size": 10**9}, InvalidArgumentError, "batch_size"),
    ],
)
def test_bad_settings_are_typed_errors_naming_the_setting(
    settings: dict[str, object], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        ScaleSettings.create(**settings)


def test_a_change_asked_again_before_it_is_made_is_no_news() -> None:
    # 1 member and 3 leaving (room for no new one): every look asks for 4 again
    # until the leaving ones are gone; only the first is an event.
    rule = _rule(target_lag_per_member=100, max_members=4)
    first = rule.decide(_spread(400), 1, 0.0)
    assert (first.desired, first.repeated) == (4, False)
    again = rule.decide(_spread(450), 1, 0.2)
    assert (again.desired, again.repeated) == (4, True)
    # Made in part (2 now): a new change, news again; and after none, too.
    assert not rule.decide(_spread(400), 2, 0.4).repeated
    assert not rule.decide(_spread(400), 4, 0.6).repeated
    assert not rule.decide(_spread(300), 1, 0.8).repeated
