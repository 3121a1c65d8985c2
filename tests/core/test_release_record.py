"""The release record (no Ray): which numbers a source sent back releases again."""

from __future__ import annotations

from raytopic.core.release_record import ReleaseRecord


def test_a_source_sent_back_gives_the_numbers_it_released_from_there_on_per_key() -> None:
    record = ReleaseRecord()
    record.released("a", 0, "A", 0)
    record.released("b", 0, "A", 1)
    record.released("a", 1, "B", 0)
    record.released("a", 2, "A", 2)
    record.released("b", 1, "B", 1)
    assert record.rewound("a", 1) == {"B": [0], "A": [2]}
    assert len(record) == 3
    # Forgotten once given: sent back again, nothing more until released again.
    assert record.rewound("a", 0) == {"A": [0]}
    assert record.rewound("a", 0) == {}
    assert record.rewound("b", 5) == {}
    assert record.rewound("c", 0) == {}


def test_the_numbers_of_a_key_come_ascending_whatever_the_release_order() -> None:
    record = ReleaseRecord()
    for position, number in enumerate((5, 3, 9, 4)):
        record.released("a", position, None, number)
    assert record.rewound("a", 0) == {None: [3, 4, 5, 9]}


def test_released_again_after_a_rewind_is_remembered_again() -> None:
    record = ReleaseRecord()
    record.released("a", 0, None, 0)
    assert record.rewound("a", 0) == {None: [0]}
    record.released("a", 0, None, 0)
    assert record.rewound("a", 0) == {None: [0]}


def test_a_source_sent_back_past_what_is_remembered_says_so_and_starts_afresh() -> None:
    record = ReleaseRecord(kept=3)
    for position in range(5):  # positions 0 and 1 of "a" are forgotten
        record.released("a", position, None, position)
    record.released("b", 0, None, 10)  # and so is position 2 of "a"
    assert len(record) == 3
    assert record.rewound("a", 3) == {None: [3, 4]}  # after the forgotten ones: known
    assert record.rewound("b", 0) == {None: [10]}
    assert record.rewound("a", 2) is None  # position 2 was forgotten
    assert len(record) == 0
    assert record.rewound("a", 0) == {}  # afresh: nothing known, nothing forgotten


def test_numbers_sent_back_whose_positions_were_passed_over_stay_released() -> None:
    record = ReleaseRecord()
    for position, number in enumerate((0, 1, 2, 3)):
        record.released("a", position, "A", number)
    record.released("b", 0, "A", 9)
    assert record.rewound("a", 1) == {"A": [1, 2, 3]}
    # Positions 2..3 were done (a committed transaction consumed them): not coming.
    assert record.passed("a", 2, 5) == {"A": [2, 3]}
    assert record.passed("a", 2, 5) == {}  # told once
    assert record.passed("b", 0, 0) == {}  # never sent back
    record.released("a", 1, "A", 1)  # came again
    assert record.passed("a", 1, 1) == {}
    # Those passed stay released: remembered, so a source sent back again gives them.
    assert record.rewound("a", 0) == {"A": [0, 1, 2, 3]}
