"""Tests of the fault tests' loss checker (tests/loss_checker.py), on hand-made histories."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from raytopic.core.errors import ChannelUnavailableError, TopicFullError

from tests.loss_checker import COUNT_FIELDS, LossChecker, LossReport, publish_outcome


def counts(report: LossReport) -> dict[str, int]:
    return {name: getattr(report, name) for name in COUNT_FIELDS}


def expected(**nonzero: int) -> dict[str, int]:
    """All counts 0 except those given."""
    assert set(nonzero) <= set(COUNT_FIELDS)
    return {name: nonzero.get(name, 0) for name in COUNT_FIELDS}


def clean_history() -> LossChecker:
    """Two members, two channels, everything acknowledged and delivered once, in order."""
    checker = LossChecker()
    for i in range(6):
        checker.published(f"v{i}", "acknowledged")
    checker.delivered("a", 0, 0, "v0")
    checker.delivered("a", 0, 1, "v1")
    checker.delivered("a", 0, 2, "v2")
    checker.delivered("b", 1, 0, "v3")
    checker.delivered("b", 1, 5, "v4")
    checker.delivered("b", 1, 6, "v5")
    checker.commit_accepted("a", 0, 3, stale=False)
    checker.commit_accepted("b", 1, 7, stale=False)
    return checker


def test_report_fields_are_the_documented_counts():
    names = [f.name for f in dataclasses.fields(LossReport)]
    assert names == [*COUNT_FIELDS, "details"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        LossReport().lost = 1  # type: ignore[misc]


def test_empty_history_is_all_zeros():
    report = LossChecker().report()
    assert counts(report) == expected()
    assert report.details == {}
    report.assert_safe()


def test_clean_history_reports_all_zeros():
    report = clean_history().report()
    assert counts(report) == expected(acknowledged=6, delivered=6)
    assert report.details == {}
    report.assert_safe()


def test_publish_outcomes_are_counted_by_distinct_payload():
    checker = LossChecker()
    checker.published("a", "acknowledged")
    checker.published("b", "acknowledged")
    checker.published("c", "failed")
    checker.published("d", "indeterminate")
    checker.published("e", "indeterminate")
    checker.published("f", "indeterminate")
    report = checker.report(expect_all=False)
    assert counts(report) == expected(acknowledged=2, failed=1, indeterminate=3)


def test_a_republished_payload_keeps_its_strongest_outcome():
    checker = LossChecker()
    checker.published("x", "indeterminate")
    checker.published("x", "acknowledged")  # the retry was acknowledged
    checker.published("x", "failed")  # a later failure does not undo that
    checker.published("y", "failed")
    checker.published("y", "indeterminate")
    report = checker.report(expect_all=False)
    assert (report.acknowledged, report.failed, report.indeterminate) == (1, 0, 1)


def test_unknown_outcome_is_rejected():
    with pytest.raises(ValueError, match="outcome"):
        LossChecker().published("x", "ok")


def test_lost_counts_acknowledged_payloads_never_delivered():
    checker = LossChecker()
    for i in range(5):
        checker.published(i, "acknowledged")
    checker.published("failed-1", "failed")  # never delivered: not lost
    checker.published("maybe-1", "indeterminate")  # never delivered: not lost
    checker.published("maybe-2", "indeterminate")
    checker.delivered("a", 0, 0, 0)
    checker.delivered("a", 0, 1, 2)
    checker.delivered("a", 0, 2, "maybe-2")  # an indeterminate publish may show up
    report = checker.report()
    assert counts(report) == expected(
        acknowledged=5, failed=1, indeterminate=2, delivered=3, lost=3
    )
    assert report.details["lost"] == [1, 3, 4]


def test_without_expect_all_nothing_is_lost():
    checker = LossChecker()
    checker.published("x", "acknowledged")
    report = checker.report(expect_all=False)
    assert report.lost == 0
    assert "lost" not in report.details
    assert checker.report().lost == 1


def test_delivery_before_the_publish_returns_is_not_lost_nor_unexpected():
    checker = LossChecker()
    checker.delivered("a", 0, 0, "early")
    checker.published("early", "acknowledged")
    assert counts(checker.report()) == expected(acknowledged=1, delivered=1)


def test_duplicates_in_log_count_payloads_at_two_or_more_places():
    checker = LossChecker()
    for payload in ("x", "y", "z"):
        checker.published(payload, "acknowledged")
    checker.delivered("a", 0, 0, "x")
    checker.delivered("a", 0, 1, "x")  # another position
    checker.delivered("a", 0, 2, "y")
    checker.delivered("b", 1, 2, "y")  # another channel
    checker.delivered("b", 1, 3, "y", epoch=1)  # a third place for the same payload
    checker.delivered("b", 2, 0, "z")
    checker.delivered("c", 2, 0, "z", epoch=1)  # same channel and position, another epoch
    report = checker.report()
    assert counts(report) == expected(acknowledged=3, delivered=7, duplicates_in_log=3)
    by_payload = {d["payload"]: d["places"] for d in report.details["duplicates_in_log"]}
    assert by_payload == {
        "x": [(0, 0, 0), (0, 1, 0)],
        "y": [(0, 2, 0), (1, 2, 0), (1, 3, 1)],
        "z": [(2, 0, 0), (2, 0, 1)],
    }


def test_redelivery_at_the_same_place_is_not_a_duplicate_in_the_log():
    checker = LossChecker()
    checker.published("x", "acknowledged")
    checker.delivered("a", 0, 7, "x")
    checker.delivered("b", 0, 7, "x")  # another member (another group) reads it too
    checker.ownership_changed("a")
    checker.delivered("a", 0, 7, "x")  # redelivered after a restart
    report = checker.report()
    assert counts(report) == expected(acknowledged=1, delivered=3)
    report.assert_safe()


def test_redelivery_without_an_ownership_change_is_non_monotonic():
    checker = LossChecker()
    checker.published("x", "acknowledged")
    checker.delivered("a", 0, 7, "x")
    checker.delivered("a", 0, 7, "x")
    report = checker.report()
    assert counts(report) == expected(acknowledged=1, delivered=2, non_monotonic=1)
    assert report.details["non_monotonic"] == [
        {"member": "a", "channel": 0, "previous": 7, "position": 7, "epoch": 0, "payload": "x"}
    ]
    report.assert_safe()  # at-least-once: allowed


def test_inconsistent_positions_count_places_with_different_payloads():
    checker = LossChecker()
    for payload in ("p", "q", "r", "s"):
        checker.published(payload, "acknowledged")
    checker.delivered("a", 0, 0, "p")
    checker.delivered("b", 0, 0, "q")  # same place, another payload
    checker.delivered("c", 0, 0, "p")  # the first again: still one inconsistent place
    checker.delivered("a", 1, 4, "r", epoch=2)
    checker.delivered("b", 1, 4, "s", epoch=2)
    checker.delivered("c", 1, 4, "s", epoch=3)  # another epoch: another place, consistent
    report = checker.report()
    assert counts(report) == expected(
        acknowledged=4, delivered=6, inconsistent_positions=2, duplicates_in_log=1
    )
    assert report.details["inconsistent_positions"] == [
        {"place": (0, 0, 0), "payloads": ["p", "q"]},
        {"place": (1, 4, 2), "payloads": ["r", "s"]},
    ]
    with pytest.raises(AssertionError, match="inconsistent_positions=2"):
        report.assert_safe()


def test_non_monotonic_is_per_member_and_channel():
    checker = LossChecker()
    for i in range(20):
        checker.published(i, "acknowledged")
    checker.delivered("a", 0, 5, 0)
    checker.delivered("a", 1, 1, 1)  # another channel: its own sequence
    checker.delivered("b", 0, 1, 2)  # another member: its own sequence
    checker.delivered("a", 0, 3, 3)  # lower: 1
    checker.delivered("a", 0, 4, 4)  # above the previous (3): fine
    checker.delivered("a", 0, 4, 5)  # equal: 2 (and an inconsistent position)
    checker.delivered("b", 0, 0, 6)  # lower: 3
    checker.delivered("a", 1, 2, 7)  # fine
    report = checker.report(expect_all=False)
    assert report.non_monotonic == 3
    assert report.inconsistent_positions == 1
    assert [
        (d["member"], d["previous"], d["position"]) for d in report.details["non_monotonic"]
    ] == [
        ("a", 5, 3),
        ("a", 4, 4),
        ("b", 1, 0),
    ]


def test_ownership_changed_resets_only_that_member():
    checker = LossChecker()
    for i in range(10):
        checker.published(i, "acknowledged")
    checker.delivered("a", 0, 5, 0)
    checker.delivered("a", 1, 5, 1)
    checker.delivered("b", 0, 5, 2)
    checker.ownership_changed("a")
    checker.delivered("a", 0, 2, 3)  # after the reset: fine
    checker.delivered("a", 1, 2, 4)  # every channel of the member was reset: fine
    checker.delivered("b", 0, 2, 5)  # b was not reset: non-monotonic
    checker.delivered("a", 0, 1, 6)  # tracking restarted at 2: non-monotonic
    checker.ownership_changed("nobody")  # an unknown member is fine
    assert checker.report(expect_all=False).non_monotonic == 2


def test_stale_commits_accepted_count_only_stale_ones():
    checker = clean_history()
    checker.commit_accepted("a", 1, 6, stale=True)
    checker.commit_accepted("b", 0, 3, stale=True)
    checker.commit_accepted("a", 0, 3, stale=False)
    report = checker.report()
    assert counts(report) == expected(acknowledged=6, delivered=6, stale_commits_accepted=2)
    assert report.details["stale_commits_accepted"] == [
        {"member": "a", "channel": 1, "position": 6},
        {"member": "b", "channel": 0, "position": 3},
    ]
    with pytest.raises(AssertionError, match="stale_commits_accepted=2"):
        report.assert_safe()


def test_unexpected_counts_delivered_payloads_never_published():
    checker = LossChecker()
    checker.published("ok", "acknowledged")
    checker.published("bad", "failed")  # published (failed): not unexpected
    checker.delivered("a", 0, 0, "ok")
    checker.delivered("a", 0, 1, "bad")
    checker.delivered("a", 0, 2, "ghost-1")
    checker.delivered("a", 0, 3, "ghost-2")
    checker.ownership_changed("a")
    checker.delivered("a", 0, 3, "ghost-2")  # redelivered: still one payload
    report = checker.report()
    assert counts(report) == expected(acknowledged=1, failed=1, delivered=5, unexpected=2)
    assert [d["payload"] for d in report.details["unexpected"]] == ["ghost-1", "ghost-2"]


def test_details_keep_at_most_ten_examples():
    checker = LossChecker()
    for i in range(25):
        checker.published(i, "acknowledged")
        checker.commit_accepted("a", 0, i, stale=True)
        checker.delivered("a", 0, 0, f"ghost-{i}")
    report = checker.report()
    assert counts(report) == expected(
        acknowledged=25,
        delivered=25,
        lost=25,
        inconsistent_positions=1,
        non_monotonic=24,
        stale_commits_accepted=25,
        unexpected=25,
    )
    for name in ("lost", "non_monotonic", "stale_commits_accepted", "unexpected"):
        assert len(report.details[name]) == 10, name
    assert report.details["lost"] == list(range(10))
    assert len(report.details["inconsistent_positions"][0]["payloads"]) == 25


def test_assert_safe_raises_on_loss_and_allows_what_is_allowed():
    checker = clean_history()
    checker.published("gone-1", "acknowledged")
    checker.published("gone-2", "acknowledged")
    report = checker.report()
    assert report.lost == 2
    with pytest.raises(AssertionError) as raised:
        report.assert_safe()
    message = str(raised.value)
    assert "lost=2 (allowed 0)" in message
    assert "'gone-1'" in message and "'gone-2'" in message
    with pytest.raises(AssertionError, match="lost=2 \\(allowed 1\\)"):
        report.assert_safe(allow_lost=1)
    report.assert_safe(allow_lost=2)


def test_assert_safe_raises_on_duplicates_in_log():
    checker = clean_history()
    checker.delivered("a", 0, 3, "v0")  # v0 again, at a new position
    with pytest.raises(AssertionError, match="duplicates_in_log=1"):
        checker.report().assert_safe()


def test_assert_safe_tolerates_non_monotonic_and_unseen_indeterminate():
    checker = clean_history()
    checker.published("maybe", "indeterminate")
    checker.delivered("a", 0, 1, "v1")  # redelivery: non-monotonic, allowed
    report = checker.report()
    assert report.non_monotonic == 1
    report.assert_safe()


def test_str_is_a_one_line_summary():
    checker = clean_history()
    checker.published("gone", "acknowledged")
    text = str(checker.report())
    assert "\n" not in text
    assert text == (
        "LossReport(acknowledged=7, failed=0, indeterminate=0, delivered=6, lost=1, "
        "duplicates_in_log=0, inconsistent_positions=0, non_monotonic=0, "
        "stale_commits_accepted=0, unexpected=0)"
    )


def test_report_is_a_snapshot():
    checker = clean_history()
    before = checker.report()
    checker.published("later", "acknowledged")
    assert before.acknowledged == 6
    assert checker.report().acknowledged == 7


def test_publish_outcome_mapping():
    assert publish_outcome(None) == "acknowledged"
    assert publish_outcome(TopicFullError("no room")) == "failed"
    assert publish_outcome(ChannelUnavailableError("restarting")) == "indeterminate"
    assert publish_outcome(RuntimeError("actor died")) == "indeterminate"
    assert publish_outcome(TimeoutError("no answer")) == "indeterminate"


def test_publish_outcome_survives_pickling_of_the_error():
    # Errors cross process boundaries inside Ray: the class decides, not identity.
    error = pickle.loads(pickle.dumps(TopicFullError("no room")))
    assert publish_outcome(error) == "failed"


def test_loss_checker_imports_no_ray():
    code = "import sys, tests.loss_checker; assert 'ray' not in sys.modules, 'ray imported'"
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, timeout=60)


THREADS = 10
PER_THREAD = 1000


def _run_threads(target) -> None:
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait()
            target(index)
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []


def test_thread_safety_exact_counts():
    checker = LossChecker()

    def record(index: int) -> None:
        for i in range(PER_THREAD):
            payload = (index, i)
            checker.published(payload, "acknowledged")
            checker.delivered(f"m{index}", index, i, payload)
            if i % 100 == 0:
                checker.commit_accepted(f"m{index}", index, i, stale=True)
            if i % 100 == 0:
                checker.report()  # reports while others record

    _run_threads(record)
    report = checker.report()
    assert counts(report) == expected(
        acknowledged=THREADS * PER_THREAD,
        delivered=THREADS * PER_THREAD,
        stale_commits_accepted=THREADS * PER_THREAD // 100,
    )


def test_thread_safety_shared_places_and_redeliveries():
    checker = LossChecker()
    for i in range(PER_THREAD):
        checker.published(i, "acknowledged")

    def record(index: int) -> None:
        # Every thread's member reads the whole channel 0; odd threads read it twice
        # (the second pass is redelivery: non-monotonic after the first position).
        for _ in range(1 + index % 2):
            for i in range(PER_THREAD // (1 + index % 2)):
                checker.delivered(f"m{index}", 0, i, i)

    _run_threads(record)
    report = checker.report(expect_all=False)
    odd = THREADS // 2
    assert counts(report) == expected(
        acknowledged=PER_THREAD,
        delivered=THREADS * PER_THREAD,
        # each odd member's second pass restarts at 0, at or below the previous delivery
        # (the first pass's last); the rest of the pass rises again.
        non_monotonic=odd,
    )
