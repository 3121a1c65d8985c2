"""A loss checker for fault tests, after the checker of Jepsen's Kafka workload.

A fault test records what it did and what it saw into a :class:`LossChecker`
(from any number of threads), then asks for a :class:`LossReport`:

* ``published(payload, outcome)``: the publish of ``payload`` ended
  ``"acknowledged"``, ``"failed"`` (definitely not written) or
  ``"indeterminate"`` (a crash or a timeout: it may or may not have been
  written). :func:`publish_outcome` maps the error a publish raised to one of
  these.
* ``delivered(member, channel, position, payload, epoch=...)``: a subscriber
  (group member) received ``payload`` at ``position`` of ``channel`` in the
  channel incarnation ``epoch``. The triple ``(channel, position, epoch)`` is
  the payload's *place* in the log.
* ``ownership_changed(member)``: the member's deliveries start over (it gained
  or lost channels, it seeked, it got a ``DataLossError``); its monotonic
  tracking is reset.
* ``commit_accepted(member, channel, position, stale=...)``: the topic
  accepted a commit; ``stale=True`` when the test knows the member no longer
  owned the channel.

The report counts:

* ``acknowledged``, ``failed``, ``indeterminate``: distinct payloads by
  publish outcome (a payload published more than once keeps its strongest
  outcome: acknowledged over indeterminate over failed).
* ``delivered``: the ``delivered`` calls recorded (redeliveries included).
* ``lost``: acknowledged payloads never delivered to anyone (only counted with
  ``expect_all``, when the test read everything there was to read).
* ``duplicates_in_log``: payloads seen at two or more different places. The
  same payload delivered again at the *same* place (a group redelivering after
  a restart) is not a duplicate in the log.
* ``inconsistent_positions``: places at which two or more different payloads
  were delivered.
* ``non_monotonic``: deliveries whose position was lower than or equal to the
  previous one delivered to the same member on the same channel since that
  member's last ``ownership_changed`` (a redelivery of the same position
  counts).
* ``stale_commits_accepted``: ``commit_accepted`` calls with ``stale=True``.
* ``unexpected``: distinct delivered payloads never published (with any
  outcome).

DESIGN 8: lost, inconsistent positions and stale commits accepted must be 0.
:meth:`LossReport.assert_safe` checks that (allowing a given number of lost
payloads where a test injects loss on purpose), and also that there are no
duplicates in the log. Non-monotonic deliveries and indeterminate publishes
are reported but allowed: at-least-once delivery may redeliver, and an
indeterminate publish may legitimately be absent or present.

This module does not import Ray, so the checker itself is tested without a
cluster.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OUTCOMES", "LossChecker", "LossReport", "publish_outcome"]

ACKNOWLEDGED = "acknowledged"
FAILED = "failed"
INDETERMINATE = "indeterminate"

OUTCOMES = (ACKNOWLEDGED, FAILED, INDETERMINATE)
"""The publish outcomes :meth:`LossChecker.published` takes."""

MAX_EXAMPLES = 10
"""At most this many examples per category in :attr:`LossReport.details`."""

# When a payload is published more than once, the strongest outcome wins.
_OUTCOME_STRENGTH = {FAILED: 0, INDETERMINATE: 1, ACKNOWLEDGED: 2}

COUNT_FIELDS = (  # the LossReport counts, in its order
    "acknowledged",
    "failed",
    "indeterminate",
    "delivered",
    "lost",
    "duplicates_in_log",
    "inconsistent_positions",
    "non_monotonic",
    "stale_commits_accepted",
    "unexpected",
)

Place = tuple[int, int, int]
"""Where a payload sits in the log: ``(channel, position, epoch)``."""


def publish_outcome(error: BaseException | None) -> str:
    """The outcome of a publish, from the error it ended with.

    Args:
        error: What the publish raised (``future.result()``, ``ray.get``), or
            ``None`` when it was acknowledged.

    Returns:
        ``"acknowledged"`` for ``None``; ``"failed"`` for a raytopic
        ``TopicError`` other than ``ChannelUnavailableError`` (and its
        subclasses): the topic refused the element, so it was not written;
        ``"indeterminate"`` for anything else (``ChannelUnavailableError``, a
        ``RayActorError``, a timeout, ...): the element may or may not have
        been written.
    """
    if error is None:
        return ACKNOWLEDGED
    from raytopic.core.errors import ChannelUnavailableError, TopicError

    if isinstance(error, TopicError) and not isinstance(error, ChannelUnavailableError):
        return FAILED
    return INDETERMINATE


@dataclass(frozen=True)
class LossReport:
    """The counts of one history; see the module docstring for their meaning.

    Attributes:
        acknowledged: Distinct payloads whose publish was acknowledged.
        failed: Distinct payloads whose publish definitely failed.
        indeterminate: Distinct payloads whose publish outcome is unknown.
        delivered: Deliveries recorded (redeliveries included).
        lost: Acknowledged payloads never delivered (0 unless ``expect_all``).
        duplicates_in_log: Payloads delivered at two or more different places.
        inconsistent_positions: Places at which different payloads were delivered.
        non_monotonic: Deliveries at or below the member's previous position
            on that channel since its last ownership change.
        stale_commits_accepted: Commits accepted from a member that no longer
            owned the channel.
        unexpected: Distinct delivered payloads that were never published.
        details: Up to ``MAX_EXAMPLES`` examples per non-zero category, keyed
            by the count's name.
    """

    acknowledged: int = 0
    failed: int = 0
    indeterminate: int = 0
    delivered: int = 0
    lost: int = 0
    duplicates_in_log: int = 0
    inconsistent_positions: int = 0
    non_monotonic: int = 0
    stale_commits_accepted: int = 0
    unexpected: int = 0
    details: dict[str, list] = field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        return "LossReport(" + ", ".join(f"{n}={getattr(self, n)}" for n in COUNT_FIELDS) + ")"

    def violations(self, *, allow_lost: int = 0) -> list[str]:
        """What makes this history unsafe, one readable line each (empty when safe).

        Args:
            allow_lost: How many lost payloads to tolerate.

        Returns:
            One line per violated condition, with examples from ``details``.
        """
        problems = []
        if self.lost > allow_lost:
            problems.append(("lost", f"lost={self.lost} (allowed {allow_lost})"))
        for name in ("inconsistent_positions", "stale_commits_accepted", "duplicates_in_log"):
            if getattr(self, name):
                problems.append((name, f"{name}={getattr(self, name)}"))
        return [f"{line}; e.g. {self.details.get(name, [])!r}" for name, line in problems]

    def assert_safe(self, *, allow_lost: int = 0) -> None:
        """Fail unless the history is safe (DESIGN 8).

        Safe: at most ``allow_lost`` lost payloads, and no inconsistent
        positions, no stale commits accepted, no duplicates in the log.

        Args:
            allow_lost: How many lost payloads to tolerate (a test that injects
                loss on purpose, e.g. a restart without a store).

        Raises:
            AssertionError: With the summary and examples of each violation.
        """
        problems = self.violations(allow_lost=allow_lost)
        if problems:
            raise AssertionError(
                f"unsafe history: {self}\n" + "\n".join(f"  - {p}" for p in problems)
            )


class LossChecker:
    """Records a fault test's publishes, deliveries and commits; thread-safe.

    Every method may be called from any thread; :meth:`report` may be called
    at any time and reflects everything recorded before it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcomes: dict[Hashable, str] = {}
        # payload -> its places (a dict as an insertion-ordered set), and back.
        self._places: dict[Hashable, dict[Place, None]] = {}
        self._payloads_at: dict[Place, dict[Hashable, None]] = {}
        self._delivered = 0
        # member -> channel -> the last position delivered since ownership changed.
        self._last_position: dict[str, dict[int, int]] = {}
        self._non_monotonic = 0
        self._non_monotonic_examples: list[dict[str, Any]] = []
        self._stale_commits = 0
        self._stale_commit_examples: list[dict[str, Any]] = []

    def published(self, payload: Hashable, outcome: str) -> None:
        """Record how the publish of ``payload`` ended.

        Args:
            payload: The published value (unique per publish in a test); it
                must be hashable and compare equal to what is delivered.
            outcome: ``"acknowledged"``, ``"failed"`` or ``"indeterminate"``
                (see :func:`publish_outcome`). Publishing a payload again keeps
                the strongest outcome.

        Raises:
            ValueError: ``outcome`` is not one of the three.
        """
        if outcome not in _OUTCOME_STRENGTH:
            raise ValueError(f"outcome must be one of {OUTCOMES}, not {outcome!r}")
        with self._lock:
            previous = self._outcomes.get(payload)
            if previous is None or _OUTCOME_STRENGTH[outcome] > _OUTCOME_STRENGTH[previous]:
                self._outcomes[payload] = outcome

    def delivered(
        self, member: str, channel: int, position: int, payload: Hashable, *, epoch: int = 0
    ) -> None:
        """Record that ``member`` received ``payload`` at a place in the log.

        Args:
            member: The receiving subscriber (group member) name.
            channel: The channel the element came from.
            position: Its position (sequence) in the channel.
            payload: The element's value.
            epoch: The channel incarnation that served it.
        """
        place = (channel, position, epoch)
        with self._lock:
            self._delivered += 1
            self._places.setdefault(payload, {})[place] = None
            self._payloads_at.setdefault(place, {})[payload] = None
            last = self._last_position.setdefault(member, {})
            previous = last.get(channel)
            if previous is not None and position <= previous:
                self._non_monotonic += 1
                if len(self._non_monotonic_examples) < MAX_EXAMPLES:
                    self._non_monotonic_examples.append(
                        {
                            "member": member,
                            "channel": channel,
                            "previous": previous,
                            "position": position,
                            "epoch": epoch,
                            "payload": payload,
                        }
                    )
            last[channel] = position

    def ownership_changed(self, member: str) -> None:
        """Reset ``member``'s monotonic tracking on every channel.

        Call it when the member's deliveries may legitimately start over: it
        gained or lost channels, it seeked, or it got a ``DataLossError``.

        Args:
            member: The subscriber (group member) name.
        """
        with self._lock:
            self._last_position.pop(member, None)

    def commit_accepted(self, member: str, channel: int, position: int, *, stale: bool) -> None:
        """Record a commit the topic accepted.

        Args:
            member: The committing subscriber (group member) name.
            channel: The committed channel.
            position: The committed position.
            stale: True when the test knows ``member`` no longer owned
                ``channel`` (the commit should have been refused).
        """
        if not stale:
            return
        with self._lock:
            self._stale_commits += 1
            if len(self._stale_commit_examples) < MAX_EXAMPLES:
                self._stale_commit_examples.append(
                    {"member": member, "channel": channel, "position": position}
                )

    def report(self, *, expect_all: bool = True) -> LossReport:
        """The counts of everything recorded so far.

        Args:
            expect_all: Count acknowledged payloads never delivered as lost
                (the test read everything there was to read). With False,
                ``lost`` is 0.

        Returns:
            The :class:`LossReport`.
        """
        with self._lock:
            by_outcome = dict.fromkeys(OUTCOMES, 0)
            for outcome in self._outcomes.values():
                by_outcome[outcome] += 1

            lost = []
            if expect_all:
                lost = [
                    p
                    for p, o in self._outcomes.items()
                    if o == ACKNOWLEDGED and p not in self._places
                ]

            duplicates = [
                {"payload": p, "places": list(places)}
                for p, places in self._places.items()
                if len(places) > 1
            ]
            inconsistent = [
                {"place": place, "payloads": list(payloads)}
                for place, payloads in self._payloads_at.items()
                if len(payloads) > 1
            ]
            # A delivery may be recorded before its publish returns: decide now.
            unexpected = [
                {"payload": p, "places": list(places)}
                for p, places in self._places.items()
                if p not in self._outcomes
            ]

            details: dict[str, list] = {}
            for name, examples in (
                ("lost", lost),
                ("duplicates_in_log", duplicates),
                ("inconsistent_positions", inconsistent),
                ("non_monotonic", self._non_monotonic_examples),
                ("stale_commits_accepted", self._stale_commit_examples),
                ("unexpected", unexpected),
            ):
                if examples:
                    details[name] = list(examples[:MAX_EXAMPLES])

            return LossReport(
                acknowledged=by_outcome[ACKNOWLEDGED],
                failed=by_outcome[FAILED],
                indeterminate=by_outcome[INDETERMINATE],
                delivered=self._delivered,
                lost=len(lost),
                duplicates_in_log=len(duplicates),
                inconsistent_positions=len(inconsistent),
                non_monotonic=self._non_monotonic,
                stale_commits_accepted=self._stale_commits,
                unexpected=len(unexpected),
                details=details,
            )
