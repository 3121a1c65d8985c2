"""Unit tests of the sticky, balanced channel assignment (no Ray), with hypothesis properties."""

from __future__ import annotations

from collections import Counter
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from raytopic.coordinator.assignment import assign

POOL = [f"m{i}" for i in range(12)]

channel_counts = st.integers(1, 40)
member_sets = st.sets(st.sampled_from(POOL), min_size=1, max_size=12)


@st.composite
def situations(draw: st.DrawFn) -> tuple[int, dict[int, str | None], set[str]]:
    """A channel count, an arbitrary current assignment, and a member set."""
    count = draw(channel_counts)
    owners = st.one_of(st.none(), st.sampled_from([*POOL, "gone-1", "gone-2"]))
    current = draw(st.dictionaries(st.integers(0, count + 3), owners))
    return count, current, draw(member_sets)


def counts(result: dict[int, str | None], members: set[str]) -> dict[str, int]:
    held = Counter(owner for owner in result.values())
    return {member: held[member] for member in members}


def check_complete_and_balanced(
    result: dict[int, str | None], count: int, members: set[str]
) -> None:
    assert list(result) == list(range(count))
    assert set(result.values()) <= members
    per_member = counts(result, members)
    assert sum(per_member.values()) == count
    assert max(per_member.values()) - min(per_member.values()) <= 1
    assert set(per_member.values()) <= {count // len(members), -(-count // len(members))}


def best_kept(count: int, current: dict[int, str | None], members: set[str]) -> int:
    """Most channels a balanced assignment can leave with their current (live) owner."""
    held = Counter(current.get(c) for c in range(count) if current.get(c) in members)
    holdings = sorted((held[m] for m in members), reverse=True)
    base, extra = divmod(count, len(members))
    return sum(min(h, base + (1 if rank < extra else 0)) for rank, h in enumerate(holdings))


# -- examples ------------------------------------------------------------------


def test_no_members_leaves_every_channel_unowned() -> None:
    assert assign(4, {0: "a", 1: "b"}, []) == {0: None, 1: None, 2: None, 3: None}
    assert assign(1, {}, set()) == {0: None}


def test_first_members_split_the_channels_in_order() -> None:
    assert assign(4, {}, ["a"]) == {0: "a", 1: "a", 2: "a", 3: "a"}
    assert assign(5, {}, ["b", "a"]) == {0: "a", 1: "a", 2: "a", 3: "b", 4: "b"}


def test_a_join_takes_only_what_the_newcomer_needs_example() -> None:
    before = {0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "b"}
    after = assign(6, before, ["a", "b", "c"])
    moved = {c for c in range(6) if after[c] != before[c]}
    assert {after[c] for c in moved} == {"c"}
    assert len(moved) == 2
    assert counts(after, {"a", "b", "c"}) == {"a": 2, "b": 2, "c": 2}


def test_a_leave_moves_only_the_leavers_channels_example() -> None:
    before = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    after = assign(6, before, ["a", "c"])
    assert {c: after[c] for c in (0, 1, 4, 5)} == {0: "a", 1: "a", 4: "c", 5: "c"}
    assert sorted(after[c] for c in (2, 3)) == ["a", "c"]


def test_the_members_holding_most_keep_the_larger_shares() -> None:
    # 3 channels, 2 members: "b" holds two, so "b" (not "a") gets the larger share.
    assert assign(3, {0: "b", 1: "b", 2: "a"}, ["a", "b"]) == {0: "b", 1: "b", 2: "a"}
    # 5 channels, 3 members holding 3/1/1: "c" keeps two, gives one up.
    after = assign(5, {0: "c", 1: "c", 2: "c", 3: "a", 4: "b"}, ["a", "b", "c"])
    assert after == {0: "c", 1: "c", 2: "a", 3: "a", 4: "b"}


def test_members_beyond_the_channel_count_own_nothing() -> None:
    result = assign(2, {}, ["a", "b", "c", "d"])
    assert sorted(result.values()) == ["a", "b"]
    assert counts(result, {"a", "b", "c", "d"}) == {"a": 1, "b": 1, "c": 0, "d": 0}


def test_unknown_owners_and_out_of_range_channels_are_ignored() -> None:
    result = assign(3, {0: "gone", 1: "a", 7: "b", -1: "b"}, ["a", "b"])
    # "a" keeps channel 1 and, holding most, gets the larger share.
    assert result == {0: "b", 1: "a", 2: "a"}


# -- properties ----------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(situations())
def test_every_channel_owned_once_and_counts_balanced(
    situation: tuple[int, dict[int, str | None], set[str]],
) -> None:
    count, current, members = situation
    check_complete_and_balanced(assign(count, current, members), count, members)


@settings(max_examples=100, deadline=None)
@given(situations(), st.randoms(use_true_random=False))
def test_assignment_is_deterministic(
    situation: tuple[int, dict[int, str | None], set[str]], random: object
) -> None:
    count, current, members = situation
    result = assign(count, current, members)
    shuffled = sorted(members)
    random.shuffle(shuffled)  # type: ignore[attr-defined]
    reordered_current = dict(reversed(list(current.items())))
    assert assign(count, reordered_current, shuffled) == result
    assert assign(count, MappingProxyType(current), iter(shuffled + shuffled)) == result
    assert list(assign(count, current, members).items()) == list(result.items())


@settings(max_examples=150, deadline=None)
@given(situations())
def test_assignment_keeps_as_many_current_owners_as_balance_allows(
    situation: tuple[int, dict[int, str | None], set[str]],
) -> None:
    count, current, members = situation
    result = assign(count, current, members)
    kept = sum(1 for c in range(count) if current.get(c) in members and result[c] == current[c])
    assert kept == best_kept(count, current, members)


@settings(max_examples=150, deadline=None)
@given(channel_counts, member_sets, st.sampled_from(POOL))
def test_a_join_moves_only_the_channels_the_newcomer_gets(
    count: int, members: set[str], newcomer: str
) -> None:
    members = members - {newcomer}
    before = assign(count, {}, members) if members else dict.fromkeys(range(count))
    after = assign(count, before, members | {newcomer})
    check_complete_and_balanced(after, count, members | {newcomer})
    moved = [c for c in range(count) if after[c] != before[c]]
    assert all(after[c] == newcomer for c in moved)
    size = len(members) + 1
    assert len(moved) in {count // size, -(-count // size)}


@settings(max_examples=150, deadline=None)
@given(channel_counts, member_sets, st.data())
def test_a_leave_moves_only_the_leavers_channels(
    count: int, members: set[str], data: st.DataObject
) -> None:
    leaver = data.draw(st.sampled_from(sorted(members)))
    before = assign(count, {}, members)
    after = assign(count, before, members - {leaver})
    moved = {c for c in range(count) if after[c] != before[c]}
    assert moved == {c for c in range(count) if before[c] == leaver}
    if members - {leaver}:
        check_complete_and_balanced(after, count, members - {leaver})
    else:
        assert set(after.values()) == {None}


@settings(max_examples=100, deadline=None)
@given(
    channel_counts,
    st.lists(st.tuples(st.booleans(), st.sampled_from(POOL)), min_size=1, max_size=30),
)
def test_joins_and_leaves_in_sequence_stay_sticky_and_balanced(
    count: int, steps: list[tuple[bool, str]]
) -> None:
    members: set[str] = set()
    state = assign(count, {}, members)
    for joining, member in steps:
        if joining == (member in members):
            continue  # a join of a member, or a leave of a non-member: no change
        new_members = members | {member} if joining else members - {member}
        new_state = assign(count, state, new_members)
        moved = {c for c in range(count) if new_state[c] != state[c]}
        if joining:
            assert all(new_state[c] == member for c in moved)
            assert len(moved) == counts(new_state, new_members)[member]
        else:
            assert moved == {c for c in range(count) if state[c] == member}
        if new_members:
            check_complete_and_balanced(new_state, count, new_members)
        else:
            assert set(new_state.values()) == {None}
        # Applying the same membership again changes nothing.
        assert assign(count, new_state, new_members) == new_state
        members, state = new_members, new_state
