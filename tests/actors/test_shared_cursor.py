"""The shared cursor's rules, without Ray: hand-outs, acks, nacks, leases, key order,
dead letters, the low watermark, and what a restart keeps."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from raytopic.actors.shared_cursor import Candidate, SharedCursor

LEASE = 30.0


def offer(*sequences: int, keys: dict[int, int] | None = None, misses: set[int] = frozenset()):
    keys = keys or {}
    return [Candidate(s, keys.get(s), s not in misses) for s in sequences]


def take(cursor: SharedCursor, member: str, count: int, tail: int, now: float = 0.0, **keys):
    """What a take from a ring of 0..tail offers: ready waiting ones, then new ones."""
    candidates = [Candidate(s, keys.get("keys", {}).get(s)) for s in cursor.ready(now)]
    candidates += [Candidate(s, keys.get("keys", {}).get(s)) for s in range(cursor.next, tail + 1)]
    return cursor.choose(member, candidates, count, now, LEASE, key_order=bool(keys.get("keys")))


def test_members_take_disjoint_elements_and_acks_move_the_floor():
    cursor = SharedCursor.starting_at(0)
    a = take(cursor, "a", 3, tail=9)
    b = take(cursor, "b", 3, tail=9)
    assert a == [(0, 1), (1, 1), (2, 1)]
    assert b == [(3, 1), (4, 1), (5, 1)]
    assert cursor.holdings() == {"a": 3, "b": 3}
    assert cursor.depth(9) == 4 and cursor.unacked == 6
    assert cursor.ack(3, "b", 1) and cursor.ack(4, "b", 1)
    assert cursor.floor == -1  # 0..2 still held: nothing below them is released
    assert all(cursor.ack(s, "a", 1) for s in (0, 1, 2))
    assert cursor.floor == 4 and cursor.done == set()


def test_ack_from_another_member_or_an_old_delivery_is_rejected():
    cursor = SharedCursor.starting_at(0)
    take(cursor, "a", 1, tail=0)
    assert not cursor.ack(0, "b", 1)  # not the holder
    assert not cursor.ack(0, "a", 2)  # not this delivery
    assert cursor.nack(0, "a", 1, 0.0, None)
    assert take(cursor, "b", 1, tail=0) == [(0, 2)]
    assert not cursor.ack(0, "a", 1)  # a's delivery is over: b holds delivery 2
    assert cursor.held[0].member == "b" and cursor.redelivered == 1


def test_expired_leases_go_back_and_a_late_ack_is_rejected():
    cursor = SharedCursor.starting_at(0)
    take(cursor, "a", 2, tail=1, now=0.0)
    assert cursor.extend(1, "a", 1, 100.0)
    assert cursor.expire(LEASE + 1, None) == [0]  # 1 was extended
    assert not cursor.ack(0, "a", 1)
    assert cursor.waiting[0].count == 1 and cursor.floor == -1
    assert take(cursor, "b", 5, tail=1, now=LEASE + 1) == [(0, 2)]


def test_nack_delay_holds_the_element_until_its_time():
    cursor = SharedCursor.starting_at(0)
    take(cursor, "a", 1, tail=0)
    cursor.nack(0, "a", 1, 5.0, None)
    assert take(cursor, "a", 1, tail=0, now=4.0) == []
    assert take(cursor, "a", 1, tail=0, now=5.0) == [(0, 2)]


def test_max_deliveries_moves_an_element_to_the_dead_letters():
    cursor = SharedCursor.starting_at(0)
    for delivery in (1, 2):
        assert take(cursor, "a", 1, tail=0) == [(0, delivery)]
        cursor.nack(0, "a", delivery, 0.0, 2)
    assert cursor.dead == {0: (2, "negatively acknowledged after 2 deliveries")}
    assert take(cursor, "a", 1, tail=0) == [] and cursor.depth(0) == 1
    cursor.dead_lettered_now([0])
    assert cursor.floor == 0 and cursor.dead_lettered == 1 and cursor.depth(0) == 0


def test_release_of_a_member_returns_only_its_elements():
    cursor = SharedCursor.starting_at(0)
    take(cursor, "a", 2, tail=3)
    take(cursor, "b", 2, tail=3)
    assert cursor.release("a", None, "gone") == [0, 1]
    assert cursor.holdings() == {"b": 2}
    assert take(cursor, "b", 9, tail=3) == [(0, 2), (1, 2)]


def test_filter_misses_are_settled_not_kept():
    cursor = SharedCursor.starting_at(0)
    chosen = cursor.choose("a", offer(0, 1, 2, 3, misses={0, 2}), 10, 0.0, LEASE)
    assert chosen == [(1, 1), (3, 1)]
    cursor.ack(1, "a", 1)
    assert cursor.floor == 2  # 0 and 2 never belonged to the group


def test_key_order_gives_a_key_to_one_member_at_a_time():
    cursor = SharedCursor.starting_at(0)
    keys = {0: 7, 1: 8, 2: 7, 3: 9, 4: 7}
    a = take(cursor, "a", 1, tail=4, keys=keys)
    assert a == [(0, 1)]  # a holds key 7
    b = take(cursor, "b", 10, tail=4, keys=keys)
    assert b == [(1, 1), (3, 1)]  # 2 and 4 (key 7) wait for a
    assert take(cursor, "c", 10, tail=4, keys=keys) == []
    cursor.ack(0, "a", 1)
    assert take(cursor, "c", 10, tail=4, keys=keys) == [(2, 1), (4, 1)]  # in order


def test_key_order_keeps_a_nacked_elements_key_waiting_behind_it():
    cursor = SharedCursor.starting_at(0)
    keys = {0: 7, 1: 7}
    take(cursor, "a", 1, tail=1, keys=keys)
    cursor.nack(0, "a", 1, 10.0, None)  # delayed: 1 must not overtake it
    assert take(cursor, "b", 10, tail=1, now=1.0, keys=keys) == []
    assert not cursor.has_work("b", 1, 1.0, key_order=True)
    assert take(cursor, "b", 10, tail=1, now=10.0, keys=keys) == [(0, 2), (1, 1)]


def test_drop_below_forgets_what_a_purge_removed():
    cursor = SharedCursor.starting_at(0)
    take(cursor, "a", 2, tail=5)
    cursor.nack(1, "a", 1, 0.0, None)
    assert cursor.drop_below(4) == 4  # 0 held, 1 waiting, 2 and 3 never delivered
    assert cursor.floor == 3 and cursor.next == 4 and not cursor.held and not cursor.waiting
    assert not cursor.ack(0, "a", 1)
    assert take(cursor, "a", 9, tail=5) == [(4, 1), (5, 1)]


def test_state_round_trip_keeps_acks_and_counts_and_returns_what_was_held():
    cursor = SharedCursor.starting_at(0)
    take(cursor, "a", 4, tail=5)
    cursor.ack(2, "a", 1)
    cursor.nack(1, "a", 1, 0.0, None)
    take(cursor, "b", 1, tail=5)  # 1 again, delivery 2
    back = SharedCursor.from_state(cursor.to_state())
    assert back.floor == -1 and back.next == 4 and back.done == {2}
    assert not back.held  # a restarted channel delivers held elements again, counted
    assert {s: w.count for s, w in back.waiting.items()} == {0: 1, 1: 2, 3: 1}
    assert take(back, "c", 9, tail=5) == [(0, 2), (1, 3), (3, 2), (4, 1), (5, 1)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abc"), st.sampled_from(["take", "ack", "nack"])), max_size=60
    )
)
def test_every_element_is_acked_once_and_never_lost(steps):
    """Whatever members do, each element is held by one member at a time, and
    once all is acked the floor is at the tail."""
    tail = 19
    cursor = SharedCursor.starting_at(0)
    acked: set[int] = set()
    for member, action in steps:
        mine = sorted((s, h.count) for s, h in cursor.held.items() if h.member == member)
        if action == "take":
            take(cursor, member, 3, tail)
        elif mine and action == "ack":
            assert cursor.ack(mine[0][0], member, mine[0][1])
            assert mine[0][0] not in acked
            acked.add(mine[0][0])
        elif mine:
            cursor.nack(mine[0][0], member, mine[0][1], 0.0, None)
    while cursor.floor < tail:
        for member in {held.member for held in cursor.held.values()}:
            cursor.release(member, None, "drained")
        for sequence, _ in take(cursor, "z", 100, tail):
            assert sequence not in acked
        for sequence, held in list(cursor.held.items()):
            assert cursor.ack(sequence, "z", held.count)
            acked.add(sequence)
    assert acked == set(range(tail + 1))


def test_a_dead_letter_append_under_way_is_sent_again_under_its_version_after_a_restart():
    cursor = SharedCursor.starting_at(0)
    for sequence in range(3):
        take(cursor, "a", 1, tail=sequence)
        cursor.nack(sequence, "a", 1, 0.0, 1)
    assert cursor.dead_batch(2) == (1, [0, 1])
    back = SharedCursor.from_state(cursor.to_state())  # crashed before the answer
    assert back.dead_batch(2) == (1, [0, 1])  # the same append: skipped if it landed
    back.dead_lettered_now([0, 1])
    assert back.dead_batch(2) == (2, [2])
    back.dead_letter_failed()  # refused: a version once answered is spent
    assert back.dead_batch(2) == (3, [2])


def test_elements_held_at_the_limit_when_the_channel_restarted_go_to_the_dead_letters():
    cursor = SharedCursor.starting_at(0)
    take(cursor, "a", 2, tail=1)
    cursor.nack(1, "a", 1, 0.0, 3)
    take(cursor, "a", 1, tail=1)  # 1 again: delivery 2
    back = SharedCursor.from_state(cursor.to_state())
    back.enforce_limit(2, "held when its channel restarted")
    assert back.dead == {1: (2, "held when its channel restarted after 2 deliveries")}
    assert set(back.waiting) == {0} and back.life == cursor.life
    assert SharedCursor.starting_at(0).life != cursor.life  # a reset numbers anew
