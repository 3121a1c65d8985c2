"""The autoscaler of one group: a detached actor that starts and stops member actors
by the group's lag (``Topic.autoscale``; docs/guides/autoscaling.md).

**What it reads**: every ``poll_s`` seconds, or as soon as a member starts,
ends or dies, the group's lag per channel (elements not yet committed or
acknowledged, as ``Topic.describe`` counts them), in one light call to the
topic's coordinator (``group_lag``).

**When it decides**: :class:`~raytopic.core.scaling.ScaleRule` turns the lag
into a desired count (up at once; down only after the scale-down delay). It
starts the missing members (all at once; their loops start together once
they have joined, so they do not hand channels to each other one after the
other), or stops the newest ones (each finishes its batch, then leaves).

**How a channel moves without a duplicate**: members of an owned group are
*cooperative* (``raytopic.autoscale.scaled_member``): a join does not take a channel
from a member with a batch in hand; that member commits the batch, then
releases the channel, and only then is it granted to its new owner, which
reads after that commit. A member leaving commits (acknowledges) first. A
member that dies is told to the group at once (its channels move to the
others from its last commit: its uncommitted batch is handled again) and
replaced at the next decision.

**Warm members**: a new member is a new Ray worker process, which takes seconds to
start; a burst would wait for them. So the scaler keeps *parked* members: member
actors made ahead (process started, handler loaded) that have not joined the
group, so they hold no channel and, as Ray's actors by default, no CPU
(``raytopic.autoscale.scaled_member``). A scale-up takes parked members first (they join
and start at once) and makes new ones only for the rest; a member stopped by a
scale-down is parked again. It keeps as many as the next scale-up could take
(``max_members`` less the members running, at most ``WARM_MEMBERS``), and none
when ``member_options`` reserve resources (a parked member would hold them) or a
parked member failed to start (its handler cannot load: members then start when
needed and report why).

**Restarts**: the actor is detached and restartable; Ray runs ``__init__``
again with the same settings, and it adopts the member actors still alive
(they are detached and named after the group), so members and settings
survive its death.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import ray

from raytopic.autoscale.scaled_member import ScaledMemberActor
from raytopic.core.naming import scaled_member_name, scaled_member_prefix
from raytopic.core.protocol import CloseReader, LeaveGroup, ReadTopicLag
from raytopic.core.scaling import (
    EVENTS_KEPT,
    AutoscalerStats,
    HandlerFailure,
    ScaledMember,
    ScaleEvent,
    ScaleRule,
    ScaleSettings,
)
from raytopic.core.shared_group import GroupModeName

if TYPE_CHECKING:
    from raytopic.client.topic import Topic
    from raytopic.core.shared_group import SharedGroup

logger = logging.getLogger(__name__)

__all__ = ["ScalerActor"]

STARTUP_GRACE = 2.0
"""Seconds members started together wait for the slowest of them before the ready
ones begin (a member may wait longer for resources: Ray's autoscaler adding a node)."""

CALL_TIMEOUT = 10.0
"""Seconds a call of the scaler's may take (a coordinator restarting answers later)."""

STOP_TIMEOUT = 120.0
"""Seconds a stopping member has to finish its batch and leave."""

WARM_MEMBERS = 8
"""Parked members a scaler keeps at most (each is an idle worker process)."""

WARM_STARTING = 2
"""Parked members starting at once at most: Ray starts a node's worker processes a
few at a time, and a burst soon after the start should find some ready rather
than all half-started (its members take the ready ones first)."""

RESERVING_OPTIONS = ("num_cpus", "num_gpus", "memory", "resources", "accelerator_type")
"""Member options that reserve resources for as long as the actor lives: members made
with any of them set are not parked."""


@dataclass(slots=True)
class _Member:
    """A member actor as the scaler tracks it."""

    uid: str
    handle: Any
    ready: Any  # ObjectRef of its identity (member id, pid, node)
    since: float  # when it was made or joined; while it leaves, when its stop() was sent
    identity: ScaledMember | None = None
    ended: Any = None  # ObjectRef of its wait_stopped(): done when it ends or dies
    started: bool = field(default=False)
    stop: Any = None  # ObjectRef of its stop(), while it leaves


class ScalerActor:
    """The autoscaler of one group (a threaded actor: its control loop is a thread).

    Args:
        topic: The topic.
        group: The group's name, or its ``SharedGroup`` definition.
        mode: ``"owned"`` or ``"shared"``.
        handler: The cloudpickled ``handler(values)``.
        settings: The checked settings.
        member_options: Ray actor options for the members (resources, ...).
    """

    def __init__(
        self,
        topic: Topic,
        group: str | SharedGroup,
        mode: GroupModeName,
        handler: bytes,
        settings: ScaleSettings,
        member_options: dict[str, Any],
    ) -> None:
        self._topic = topic
        self._group = group
        self._name = group if isinstance(group, str) else group.name
        self._mode = mode
        self._handler = handler
        self._settings = settings
        self._member_options = member_options
        self._rule = ScaleRule(settings, owned=mode == "owned", channel_count=topic.channel_count)
        self._lock = threading.RLock()  # the members, events and figures
        self._members: dict[str, _Member] = {}
        self._parked: dict[str, _Member] = {}  # ready: its identity() (None) or stop()
        # Stopped, finishing their batch: finished with by the loop (parked, or killed) once
        # their stop() answers, never waited for under the lock (describe() answers).
        self._leaving: dict[str, _Member] = {}
        self._warming = not any(member_options.get(key) for key in RESERVING_OPTIONS)
        self._events: deque[ScaleEvent] = deque(maxlen=EVENTS_KEPT)
        self._lags: dict[int, int] = {}
        self._desired = 0
        self._failures = 0
        self._dead_lettered = 0
        self._last_failure: HandlerFailure | None = None
        self._stopping = threading.Event()
        self._gauge = _desired_gauge(topic.name, self._name)
        self._adopt_members()  # after a restart: the members still alive (else none)
        self._thread = threading.Thread(target=self._run, name="raytopic-scaler", daemon=True)
        self._thread.start()

    # -- calls -------------------------------------------------------------------------

    def ready(self) -> bool:
        """Answered once the actor is up."""
        return True

    def member_count(self) -> int:
        """Members now (started, starting)."""
        with self._lock:
            return len(self._members)

    def describe(self) -> AutoscalerStats:
        """The members, the desired count, the lag and the events."""
        with self._lock:
            members = tuple(m.identity for m in self._members.values() if m.identity is not None)
            return AutoscalerStats(
                members,
                self._desired,
                sum(self._lags.values()),
                tuple(self._events),
                self._failures,
                self._dead_lettered,
                self._last_failure,
                len(self._parked),
            )

    def handler_failed(self, failure: HandlerFailure) -> None:
        """A member's handler call raised (counted for ``describe()``)."""
        with self._lock:
            self._failures += 1
            self._dead_lettered += failure.dead_lettered
            self._last_failure = failure

    def stop(self) -> None:
        """Stop deciding, and stop every member after its batch (idempotent)."""
        self._stopping.set()
        self._thread.join()
        with self._lock:
            count = len(self._members)
            self._remove(list(self._members.values()))
            for parked in self._parked.values():
                ray.kill(parked.handle, no_restart=True)
            self._parked.clear()
            if count:
                self._event(count, 0, "stop()")
            self._desired = 0
            stops = [m.stop for m in self._leaving.values()]
        with contextlib.suppress(Exception):  # one that died meanwhile is gone anyway
            ray.wait(stops, num_returns=len(stops), timeout=STOP_TIMEOUT)
        with self._lock:
            self._finish_leaving(everyone=True)
        self._gauge.set(0)

    # -- the control loop --------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._wait_for_news()
                if self._stopping.is_set():
                    return
                with self._lock:
                    self._finish_leaving()
                    self._tend_members()
                    self._decide()
                    self._keep_warm()
            except Exception:  # never let the scaler go deaf silently
                logger.exception("autoscaler of %s/%s", self._topic.name, self._name)
                self._stopping.wait(self._settings.poll_s)

    def _wait_for_news(self) -> None:
        """Wait ``poll_s``, or less when a member joins, ends or dies (and only a
        little while members are starting: they begin together)."""
        with self._lock:
            ended = [m.ended for m in self._members.values() if m.started]
            joining = [m.ready for m in self._members.values() if not m.started]
            stops = [m.stop for m in self._leaving.values()]
        timeout = self._settings.poll_s if not joining else min(self._settings.poll_s, 0.1)
        if joining:
            _, joining = ray.wait(joining, num_returns=len(joining), timeout=0)
        if stops:
            _, stops = ray.wait(stops, num_returns=len(stops), timeout=0)
        refs = ended + joining + stops
        if refs:
            ray.wait(refs, num_returns=1, timeout=timeout)
        else:
            self._stopping.wait(timeout)

    def _decide(self) -> None:
        lags = self._read_lags()
        current = len(self._members)
        decision = self._rule.decide(lags, current, time.monotonic())
        self._desired = decision.desired
        self._gauge.set(decision.desired)
        if decision.desired > current:
            # Members still leaving count against max_members until they are gone.
            room = self._settings.max_members - current - len(self._leaving)
            self._add(min(decision.desired - current, room))
        elif decision.desired < current:
            newest = sorted(self._members.values(), key=lambda m: (m.started, -m.since))
            self._remove(newest[: current - decision.desired])
        if decision.desired != current and not decision.repeated:
            self._event(current, decision.desired, decision.reason)

    def _read_lags(self) -> dict[int, int]:
        """The group's lag per channel (the last known while the topic does not answer)."""
        try:
            # A channel that did not answer in time keeps its last known lag.
            self._lags = {
                **self._lags,
                **ray.get(
                    self._topic._coordinator.request.remote(ReadTopicLag(self._name)),
                    timeout=CALL_TIMEOUT,
                ),
            }
        except Exception as error:
            logger.warning("autoscaler of %s: no lag (%s); using the last", self._name, error)
        return self._lags

    # -- members -----------------------------------------------------------------------

    def _add(self, count: int) -> None:
        """Add ``count`` members (if any): parked ones first (started already), then
        new ones."""
        parked = list(self._parked.values())
        if parked:  # the ones done starting first
            done, _ = ray.wait([m.ready for m in parked], num_returns=len(parked), timeout=0)
            parked.sort(key=lambda m: m.ready not in done)
        for _ in range(count):
            member = self._parked.pop(parked.pop(0).uid) if parked else self._new_member()
            member.ready = member.handle.join.remote()
            member.since = time.monotonic()
            self._members[member.uid] = member

    def _new_member(self) -> _Member:
        """A new member actor, parked (its process starting)."""
        topic = self._topic
        uid = uuid.uuid4().hex[:12]
        handle: Any = (  # (Ray types the handle's methods as plain functions)
            ray.remote(ScaledMemberActor)
            .options(
                name=scaled_member_name(topic.name, self._name, uid),
                namespace=topic.namespace,
                lifetime="detached",
                max_restarts=0,
                max_concurrency=8,
                **self._member_options,
            )
            .remote(topic, self._group, self._mode, self._handler, self._settings)
        )
        return _Member(uid, handle, handle.identity.remote(), time.monotonic())

    def _warm_target(self) -> int:
        """Parked members to keep: as many as the next scale-up could take."""
        if not self._warming or self._stopping.is_set():
            return 0
        room = self._settings.max_members - len(self._members)
        return max(0, min(WARM_MEMBERS, room))

    def _keep_warm(self) -> None:
        """Make parked members up to the target; stop warming if one failed to start."""
        parked = list(self._parked.values())
        done: list[Any] = []
        if parked:
            done, _ = ray.wait([m.ready for m in parked], num_returns=len(parked), timeout=0)
            for member in (m for m in parked if m.ready in done):
                try:
                    ray.get(member.ready)
                except Exception as error:  # its handler cannot load there, say
                    logger.warning(
                        "autoscaler of %s: a parked member could not start (%s); members "
                        "start when needed from now on",
                        self._name,
                        error,
                    )
                    self._warming = False
                    del self._parked[member.uid]
        starting = len(parked) - len(done)
        # A leaving member is parked once it has left: made now, the new ones would
        # take its place and it would go (a process started in vain).
        wanted = self._warm_target() - len(self._parked) - len(self._leaving)
        for _ in range(min(wanted, WARM_STARTING - starting)):
            member = self._new_member()
            self._parked[member.uid] = member

    def _tend_members(self) -> None:
        """Start the members that joined (together, see ``STARTUP_GRACE``); forget the
        ones that ended, telling the group at once of those that died."""
        members = list(self._members.values())
        starting = [m for m in members if not m.started]
        if starting:
            done, _ = ray.wait([m.ready for m in starting], num_returns=len(starting), timeout=0)
            ready = [m for m in starting if m.ready in done]
            waited = time.monotonic() - min(m.since for m in starting)
            if len(ready) == len(starting) or waited > STARTUP_GRACE:
                for member in ready:
                    self._begin(member)
        running = [m for m in members if m.started]
        if running:
            done, _ = ray.wait([m.ended for m in running], num_returns=len(running), timeout=0)
            for member in (m for m in running if m.ended in done):
                self._ended(member)

    def _begin(self, member: _Member) -> None:
        try:
            member_id, pid, node = ray.get(member.ready)
        except Exception as error:  # its handler cannot load there, say
            logger.error("autoscaled member of %s could not start: %s", self._name, error)
            del self._members[member.uid]
            self._event(len(self._members) + 1, len(self._members), f"member failed: {error}")
            return
        member.identity = ScaledMember(member_id, pid, node)
        member.handle.start.remote()
        member.ended = member.handle.wait_stopped.remote()
        member.started = True

    def _ended(self, member: _Member) -> None:
        del self._members[member.uid]
        try:
            ray.get(member.ended)
            reason = "member ended (its group or topic is gone)"
            ray.kill(member.handle, no_restart=True)
        except Exception:
            reason = f"member {member.identity.member_id[:8]} died"  # type: ignore[union-attr]
            self._evict(member)
        self._event(len(self._members) + 1, len(self._members), reason)

    def _evict(self, member: _Member) -> None:
        """A dead member leaves its group now (not after its timeout): its channels go
        to the others from its last commit, and what it held is delivered again."""
        assert member.identity is not None
        coordinator, member_id = self._topic._coordinator, member.identity.member_id
        with contextlib.suppress(Exception):  # the coordinator restarting: its timeout
            ray.get(
                [
                    coordinator.request.remote(LeaveGroup(self._name, member_id)),
                    coordinator.request.remote(CloseReader(member_id)),
                ],
                timeout=CALL_TIMEOUT,
            )

    def _remove(self, members: list[_Member]) -> None:
        """Stop ``members``: each finishes its batch and leaves (finished with later by
        ``_finish_leaving``); one still starting goes at once."""
        for member in members:
            del self._members[member.uid]
            if member.started:
                member.stop, member.since = member.handle.stop.remote(), time.monotonic()
                self._leaving[member.uid] = member
            else:
                ray.kill(member.handle, no_restart=True)

    def _finish_leaving(self, everyone: bool = False) -> None:
        """Finish with the leaving members whose stop answered (``everyone``: all, and the
        ones that did not are stuck) or ran past ``STOP_TIMEOUT``: each is parked (up
        to the warm target) or its actor goes, and one that died stopping or got stuck
        leaves its group at once."""
        leaving = list(self._leaving.values())
        if not leaving:
            return
        done, _ = ray.wait([m.stop for m in leaving], num_returns=len(leaving), timeout=0)
        overdue = time.monotonic() - STOP_TIMEOUT
        for member in leaving:
            if not (everyone or member.stop in done or member.since < overdue):
                continue
            del self._leaving[member.uid]
            stopped = _succeeded(member.stop)
            if stopped and len(self._parked) < self._warm_target():
                member.ready, member.identity, member.ended = member.stop, None, None
                member.started, member.stop = False, None
                self._parked[member.uid] = member
            else:
                ray.kill(member.handle, no_restart=True)
                if not stopped:  # died stopping, or stuck
                    self._evict(member)

    def _adopt_members(self) -> None:
        """After a restart: take back the member actors still alive."""
        prefix = scaled_member_prefix(self._topic.name, self._name)
        namespace = self._topic.namespace
        for actor in ray.util.list_named_actors(all_namespaces=True):
            if actor.get("namespace") != namespace or not actor["name"].startswith(prefix):
                continue
            try:
                handle = ray.get_actor(actor["name"], namespace=namespace)
                member = _Member(actor["name"][len(prefix) :], handle, None, time.monotonic())
                member.ready = handle.identity.remote()
                joined = ray.get(member.ready, timeout=CALL_TIMEOUT)
            except Exception as error:  # gone meanwhile
                logger.warning("autoscaler of %s: not adopting %s: %s", self._name, actor, error)
                continue
            if joined is None:
                self._parked[member.uid] = member
                continue
            self._members[member.uid] = member
            self._begin(member)  # start() again changes nothing for a running member
        if self._members:
            self._event(0, len(self._members), "autoscaler restarted: members adopted")

    def _event(self, before: int, after: int, reason: str) -> None:
        lag = sum(self._lags.values())
        self._events.append(ScaleEvent(datetime.now(UTC), before, after, lag, reason))
        logger.info("autoscaler of %s: %d -> %d members (%s)", self._name, before, after, reason)


def _succeeded(ref: Any) -> bool:
    """Whether a finished call returned (rather than raised)."""
    done, _ = ray.wait([ref], timeout=0)
    if not done:
        return False
    try:
        ray.get(ref)
    except Exception:
        return False
    return True


def _desired_gauge(topic: str, group: str) -> Any:
    """``raytopic_group_desired_members`` (a Ray metric tagged topic and group): what
    the rule asks for, for autoscalers outside Ray (KEDA, a cluster's own)."""
    from ray.util.metrics import Gauge

    gauge = Gauge(
        "raytopic_group_desired_members",
        description="Members an autoscaled group's rule asks for",
        tag_keys=("topic", "group"),
    )
    gauge.set_default_tags({"topic": topic, "group": group})
    return gauge
