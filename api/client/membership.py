"""A group member's knowledge of its group, and the thread that keeps it fresh.

:class:`KnownView` is pure (no Ray): the member's view (channels and their
leases, the view version, its generation) and the rule that turns one view
into the next as an :class:`OwnershipChange`. (A view's reset jump counts
and the leases it takes away are kept with the receives they stale:
``raytopic.client.receives.StaleReads``.)

:class:`Heartbeats` is its thin shell: one background thread that keeps a
``heartbeat`` call waiting at the coordinator (a long poll). The call reports
the member alive when it received since the last report (or a receive of it
waits for data), and it returns as soon as the group's view changes. So a
member learns of a rebalance, a reset or its own timeout within a round
trip, and its receives never ask the coordinator anything.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raytopic.core.errors import GroupNotFoundError, TopicNotFoundError, unwrap_ray_error
from raytopic.core.records import OwnershipChange
from raytopic.core.waits import bounded_wait

if TYPE_CHECKING:
    from raytopic.coordinator.groups import MemberView
    from raytopic.core.protocol import Lease

logger = logging.getLogger(__name__)

__all__ = ["Heartbeats", "KnownView"]


@dataclass(slots=True)
class KnownView:
    """What a member knows of its group's view. No Ray.

    **Ordering**: views apply in version order; an older one is ignored.
    """

    leases: dict[int, Lease] = field(default_factory=dict)
    """The channels owned now, with the lease of each."""
    version: int = -1
    """Version of the group view these come from (-1: none yet)."""
    generation: int = 0
    """This member's generation in the group."""
    timed_out: bool = False
    """The group dropped this member (it stopped heartbeating); it rejoins next."""
    revoking: frozenset[int] = frozenset()
    """Owned channels the group is moving away: a cooperative member releases them
    once it committed what it handed out."""

    @property
    def channels(self) -> tuple[int, ...]:
        """The channels owned now."""
        return tuple(sorted(self.leases))

    def request_view(self) -> tuple[int, dict[int, Lease]]:
        """(version, leases) as a receive carries them to a channel's session."""
        return self.version, dict(self.leases)

    def accepts(self, view: MemberView, *, rejoined: bool = False) -> bool:
        """Whether :meth:`apply` adopts ``view``: one not older than the view known,
        or the one a rejoin got (whatever its version). A timed-out member takes
        no view of the generation it lost: a poll answered before the group dropped
        it, adopted after, would give back leases the group took."""
        if rejoined:
            return True
        if self.timed_out and view.generation <= self.generation:
            return False
        return view.version >= self.version

    def apply(self, view: MemberView, *, rejoined: bool = False) -> OwnershipChange | None:
        """Adopt ``view``; return what changed for the listener (None: nothing to tell).

        The first view is told even when it assigns nothing, so a listener
        always hears where a member starts.
        """
        if not self.accepts(view, rejoined=rejoined):
            return None
        first = self.version < 0
        old, new = set(self.leases), set(view.leases)
        self.leases = dict(view.leases)
        self.revoking = view.revoking
        self.version = view.version
        self.generation = view.generation
        self.timed_out = False
        if not (first or old != new):
            return None
        change = OwnershipChange(
            frozenset(new - old), frozenset(old - new), frozenset(), frozenset(new)
        )
        return change if first or change.assigned or change.revoked else None

    def lose(self) -> OwnershipChange | None:
        """The group timed this member out: it owns nothing until it rejoins."""
        self.timed_out = True
        self.revoking = frozenset()
        lost = frozenset(self.leases)
        if not lost:
            return None  # told already, or it owned nothing
        self.leases = {}
        return OwnershipChange(frozenset(), frozenset(), lost, frozenset())


STALL_SLACK = 5.0
"""Seconds a wait may overrun before the process counts as stalled (stopped, or
starved of CPU or of the GIL) rather than kept waiting."""


def _no_answer_cause(stalled: float) -> str:
    """Why a heartbeat had no answer: this process stalled (its wait overran by
    ``stalled`` seconds), or the coordinator did not answer."""
    if stalled > STALL_SLACK:
        return (
            f"this process did not run for {stalled:.0f} s (stopped, or starved of CPU): "
            "the group may have timed this member out meanwhile"
        )
    return "no answer from the coordinator"


class Heartbeats:
    """The thread that keeps a member's view fresh and reports it alive.

    Started when the member joins (a copy of it: on its first receive),
    stopped by ``close()``. Between polls nothing runs: a member that neither
    receives nor waits is not reported, so the group times it out after its
    ``timeout``.

    An error in a poll is logged and the thread polls again. Should the thread
    end anyway (a listener raising ``SystemExit`` on it), :attr:`failed` says
    so (and it is logged): the member's view may be stale from then on, so the
    member reads it again before it uses it, and calls :meth:`restart`.

    Args:
        name: The thread's name.
        interval: Seconds a poll waits at the coordinator at most.
        poll: ``(known_version, touch, idle, wait) -> ObjectRef[MemberView | None]``.
        activity: ``() -> (last receive time, a receive waits now)``; None
            when Ray is down in this process or the subscriber is gone.
        timeout: The member's timeout: an idle member is not reported past it.
        apply: Adopts a poll's answer (None: the member timed out); a reader
            that catches up meanwhile waits until it is adopted.
        notify: Tells the listener what was adopted (called holding no lock).
        version: ``() -> the view version known now``.
        timed_out: ``() -> whether the member timed out`` (then it does not
            poll: its next receive or heartbeat rejoins).
        rejoin: Joins the group again; called when the member timed out while
            a receive of it waits (no next receive may come to rejoin).
    """

    def __init__(
        self,
        name: str,
        interval: float,
        poll: Callable[[int, bool, float, float], Any],
        activity: Callable[[], tuple[float, bool] | None],
        timeout: float,
        apply: Callable[[MemberView | None], None],
        notify: Callable[[], None],
        version: Callable[[], int],
        timed_out: Callable[[], bool],
        rejoin: Callable[[], None],
    ) -> None:
        self._interval = bounded_wait(interval)  # a long poll of an hour at most
        self._poll = poll
        self._activity = activity
        self._timeout = timeout
        self._apply = apply
        self._notify = notify
        self._version = version
        self._timed_out = timed_out
        self._rejoin = rejoin
        self._stop = threading.Event()
        # Held from taking a poll's answer to adopting it: a reader catching up
        # meanwhile waits, so it never reads the view the answer replaces.
        self._lock = threading.RLock()
        self._pending: Future[Any] | None = None
        self._reported = 0.0
        self._name = name
        self._failure: BaseException | None = None  # what ended the thread, if not stop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start polling (once: a later call changes nothing)."""
        if self._thread.ident is not None:
            return  # every receive asks: answered without the lock
        with self._lock:
            if self._thread.ident is None:
                self._thread.start()

    @property
    def failed(self) -> bool:
        """Whether the thread ended on an error (not by :meth:`stop`): views the
        group made since have not reached the member."""
        return self._failure is not None

    def restart(self) -> None:
        """Poll again on a new thread after the last one :attr:`failed` (else nothing)."""
        with self._lock:
            if self._failure is None or self._stop.is_set():
                return
            self._failure = None
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop polling (the poll in flight is left to end on its own)."""
        self._stop.set()

    def catch_up(self) -> None:
        """Apply the answer of the poll in flight if it has come (cheap: no call)."""
        pending = self._pending
        if pending is not None and pending.done():
            self._adopt_answer(pending)
            self._notify()

    def _adopt_answer(self, pending: Future[Any], stalled: float = 0.0) -> bool:
        """Adopt a poll's answer (once, and only once it came); False if it failed.
        ``stalled``: seconds this process did not run while it waited for it."""
        import ray
        import ray.exceptions

        with self._lock:  # taken and adopted in one step (see catch_up)
            if self._pending is not pending:
                return True  # adopted already
            self._pending = None
            if not pending.done():
                logger.warning("heartbeat: %s; polling again", _no_answer_cause(stalled))
                return False
            try:
                with unwrap_ray_error():
                    view = pending.result()
            except (GroupNotFoundError, TopicNotFoundError, ray.exceptions.ActorDiedError):
                self._stop.set()  # the group or the topic is gone: nothing to keep alive
                return False
            except Exception as error:
                if not ray.is_initialized():
                    self._stop.set()  # Ray was shut down in this process
                else:
                    logger.warning("heartbeat failed: %s", error)
                return False
            self._apply(view)
            return True

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    if not self._poll_once():
                        self._stop.wait(self._interval)  # do not hammer a failing coordinator
                except Exception:  # never let the member go deaf silently
                    logger.exception("heartbeat thread")
                    self._stop.wait(self._interval)
        except BaseException as error:  # SystemExit from the listener: the thread ends
            logger.error(
                "heartbeat thread %s ended on %r; the member reads its view again "
                "before it next uses it",
                self._name,
                error,
                exc_info=error,
            )
            self._failure = error

    def _poll_once(self) -> bool:
        """One long poll; False when the thread should pause before the next."""
        activity = self._activity()
        if activity is None:
            self._stop.set()  # Ray is down here, or the subscriber is gone
            return True
        last_active, waiting = activity
        if self._timed_out():
            if not waiting:
                return False  # the next receive or heartbeat rejoins
            # A receive sent on the view from before the timeout (its handle heard
            # of it later than the channels) waits at channels that no longer count
            # this member, and no next receive comes to rejoin: rejoin now (the new
            # view reaches that receive), as a member with a receive waiting is alive.
            self._rejoin()
            return True
        idle = 0.0 if waiting else time.monotonic() - last_active
        # A member is alive while it receives or one of its receives waits;
        # past its timeout it is not reported: the group times it out.
        touch = (waiting or last_active != self._reported) and idle < self._timeout
        if touch:
            self._reported = last_active
        pending: Future[Any] = self._poll(self._version(), touch, idle, self._interval).future()
        with self._lock:
            self._pending = pending
        wait = self._interval + 30.0
        asked = time.monotonic()
        with contextlib.suppress(Exception):  # _adopt_answer reports it
            pending.result(timeout=wait)
        stalled = time.monotonic() - asked - wait  # past the wait: this process did not run
        if stalled > STALL_SLACK and not pending.done():
            with contextlib.suppress(Exception):  # its answer may be on its way in
                pending.result(timeout=STALL_SLACK)
        adopted = self._adopt_answer(pending, stalled)
        self._notify()
        return adopted
