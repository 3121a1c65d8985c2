"""A subscriber's place in its group, or its lack of one: one interface, three kinds.

- :class:`NoMembership`: an anonymous subscriber (the null object, as
  aiokafka's consumer holds a ``NoGroupCoordinator`` when it has no group).
  It owns every channel, holds no lease and never calls the coordinator.
- :class:`GroupMember`: a member of an owned group. It joins at the topic's
  coordinator, which assigns it channels with leases; its view is kept fresh
  by :class:`~raytopic.client.membership.Heartbeats` (never by a call on the receive
  path) and told to the ``on_ownership_change`` listener. It commits and
  seeks positions.
- :class:`SharedGroupMember`: a member of a shared group: it joins the same
  way, but acknowledges elements one by one and cannot commit or seek.

:func:`membership_for` is the one place that tells the kinds apart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

import ray

from raytopic.client.membership import Heartbeats, KnownView
from raytopic.client.receives import Ownership, StaleReads
from raytopic.core.destroyed import topic_calls
from raytopic.core.errors import (
    GroupModeError,
    GroupNotFoundError,
    NotOwnerError,
    SubscriberClosedError,
)
from raytopic.core.protocol import (
    DeclareGroup,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    Origin,
    ReaderSpec,
    ReleaseChannels,
)
from raytopic.core.shared_group import SharedGroup

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from raytopic.client.subscriber_options import SubscriberOptions
    from raytopic.client.topic import Topic
    from raytopic.coordinator.groups import MemberView
    from raytopic.core.protocol import Lease, ReaderLease
    from raytopic.core.records import OwnershipChange

logger = logging.getLogger(__name__)

__all__ = ["GroupMember", "Membership", "NoMembership", "SharedGroupMember", "membership_for"]

_COMMIT_INSTEAD = "only a shared group's members acknowledge elements: commit"


class Membership(Ownership, Protocol):
    """What a subscriber asks of its place in a group (anonymous ones included)."""

    @property
    def group(self) -> str | None:
        """The group's name; None for an anonymous subscriber."""
        ...

    @property
    def mode(self) -> str:
        """``"shared"`` for a shared group's member, else ``"owned"``."""
        ...

    def prepare(self, spec: ReaderSpec) -> ReaderSpec:
        """Make sure the group exists; return the spec the reader registers with."""
        ...

    def start(self, stale: StaleReads, *, attached: bool) -> None:
        """Join (``attached``: a copy of a member learns its view); the group's reset
        jump counts and the leases it takes away go to ``stale`` from now on."""
        ...

    def current_channels(self) -> tuple[int, ...]:
        """The channels owned now, asking the coordinator if the view may be stale."""
        ...

    def lease(self, channel: int, *, required: bool = False, refresh: bool = False) -> ReaderLease:
        """The lease on ``channel`` (None: none known, or anonymous)."""
        ...

    def leases_now(self) -> Mapping[int, ReaderLease]:
        """The channels owned and their leases as the coordinator holds them now."""
        ...

    def heartbeat(self) -> None:
        """Report alive; rejoin after a timeout."""
        ...

    def revoking(self) -> tuple[int, ...]:
        """Owned channels the group is moving away (a cooperative member's to release)."""
        ...

    def release(self, channels: tuple[int, ...]) -> None:
        """Give back ``channels`` the group is moving away (their new owners get them now)."""
        ...

    def check_positions(self, what: str) -> None:
        """Raise GroupModeError if this member cannot ``what`` (commit, seek) positions."""
        ...

    def check_acknowledging(self) -> None:
        """Raise GroupModeError if this member does not acknowledge elements."""
        ...

    def stop(self) -> None:
        """Stop the heartbeats; views that answer later tell nothing."""
        ...

    def leave(self) -> None:
        """Leave the group at the coordinator."""
        ...


def membership_for(topic: Topic, options: SubscriberOptions, reader_id: str) -> Membership:
    """The membership a subscriber holds: none, in an owned group, or in a shared one.

    Args:
        topic: The subscriber's topic.
        options: The subscriber's checked options (group, mode, timeout,
            listener, a shared group's definition, cooperative).
        reader_id: The subscriber's id.

    Returns:
        A :class:`NoMembership`, :class:`GroupMember` or :class:`SharedGroupMember`.
    """
    if options.group is None:
        return NoMembership(topic.channel_count)
    if options.mode == "shared":
        return SharedGroupMember(
            topic,
            options.group,
            reader_id,
            options.timeout,
            options.listener,
            options.definition,
            create_group=options.create_group,
        )
    return GroupMember(
        topic,
        options.group,
        reader_id,
        options.timeout,
        options.listener,
        cooperative=options.cooperative,
        create_group=options.create_group,
    )


class NoMembership:
    """An anonymous subscriber's membership: every channel, no lease, no coordinator.
    No Ray."""

    group = None
    mode = "owned"

    def __init__(self, channel_count: int) -> None:
        self._channels = tuple(range(channel_count))

    def prepare(self, spec: ReaderSpec) -> ReaderSpec:
        return spec

    def start(self, stale: StaleReads, *, attached: bool) -> None:
        pass  # no group: no view, no reset, no lease

    def owned(self, *, catch_up: bool = True) -> tuple[int, ...]:
        return self._channels

    def current_channels(self) -> tuple[int, ...]:
        return self._channels

    def lease(self, channel: int, *, required: bool = False, refresh: bool = False) -> None:
        return None  # an anonymous cursor is its own: nothing fences it

    def leases_now(self) -> dict[int, None]:
        return dict.fromkeys(self._channels)

    def before_receive(self) -> None:
        return None  # the receive carries no view

    def track(self, ref: ray.ObjectRef[Any]) -> None:
        pass  # no heartbeats to keep it alive for

    def heartbeat(self) -> None:
        pass

    def revoking(self) -> tuple[int, ...]:
        return ()  # nothing is ever moved away from an anonymous subscriber

    def release(self, channels: tuple[int, ...]) -> None:
        pass

    def check_positions(self, what: str) -> None:
        pass

    def check_acknowledging(self) -> None:
        raise GroupModeError(_COMMIT_INSTEAD)

    def stop(self) -> None:
        pass

    def leave(self) -> None:
        pass


class GroupMember:
    """A member of an owned group: its view, kept fresh, and the calls that change it.

    **Ordering**: views apply in version order; the listener hears each change
    once, in order, holding no lock of the member's.

    Args:
        topic: The subscriber's topic.
        group: The group's name.
        reader_id: The subscriber's id.
        timeout: Seconds without a heartbeat before the group drops the member.
        listener: Called with each change of the channels owned.
        cooperative: The member keeps a channel its group moves away until it
            calls :meth:`release` (after committing what it handed out), or its
            timeout passes: no element goes to two members' hands.
        create_group: Make the group if it does not exist (False: joining a
            missing group raises GroupNotFoundError).
    """

    mode = "owned"

    def __init__(
        self,
        topic: Topic,
        group: str,
        reader_id: str,
        timeout: float,
        listener: Callable[[OwnershipChange], None] | None,
        *,
        cooperative: bool = False,
        create_group: bool = True,
    ) -> None:
        self._topic = topic
        self.group = group
        self._create_group = create_group
        self._id = reader_id
        self._timeout = timeout
        self._cooperative = cooperative
        self._listener = listener
        self._view = KnownView()
        self._stale: StaleReads  # set by start(): what makes the receives' reads stale
        self._stopped = False
        self._join_lock = threading.RLock()  # one rejoin at a time
        self._view_lock = threading.RLock()  # the membership's view
        self._notifying = threading.RLock()  # listener calls, one at a time
        self._changes: deque[OwnershipChange] = deque()  # to tell the listener, in order
        self._last_active = time.monotonic()  # last receive, for the heartbeats
        self._outstanding: deque[ray.ObjectRef[Any]] = deque()  # receives, for the heartbeats
        self._heartbeats = self._make_heartbeats()

    @property
    def version(self) -> int:
        """Version of the group view known now (-1: none yet)."""
        return self._view.version

    def prepare(self, spec: ReaderSpec) -> ReaderSpec:
        """Make sure the group exists; a new one only if every channel can open
        this member's reader (a refused subscriber leaves no group behind)."""
        coordinator = self._topic._coordinator
        self._call(
            coordinator.request.remote(
                DeclareGroup(self.group, spec.start_latest, reader=spec, create=self._create_group)
            )
        )
        return spec

    def start(self, stale: StaleReads, *, attached: bool) -> None:
        self._stale = stale
        if attached:
            # The same member: learn its view; its heartbeats start on its first
            # receive (a copy handed to a task may never receive).
            self._refresh(touch=True)
            return
        # Synchronous: the assignment is in force when this returns.
        coordinator = self._topic._coordinator
        joined = coordinator.request.remote(
            JoinGroup(self.group, self._id, self._timeout, self._cooperative, _origin())
        )
        self._apply_view(self._call(joined))
        self._heartbeats.start()

    # -- ownership -----------------------------------------------------------------

    def owned(self, *, catch_up: bool = True) -> tuple[int, ...]:
        """The channels owned now; first (``catch_up``) apply view news that came,
        which may call the listener: never with a receive's lock held."""
        if catch_up:
            if self._heartbeats.failed and not self._stopped:
                self._recover_heartbeats()
            self._heartbeats.catch_up()
        return self._view.channels

    def current_channels(self) -> tuple[int, ...]:
        """The channels owned now. Answered from the view, which the heartbeats keep
        fresh; a member silent for longer than its timeout may have timed out a
        moment ago: that one asks the coordinator (no other read does)."""
        silent = time.monotonic() - self._last_active > self._timeout
        if silent and not self._view.timed_out:
            self._refresh(touch=False)
        return self.owned()

    def lease(self, channel: int, *, required: bool = False, refresh: bool = False) -> ReaderLease:
        """This member's lease on ``channel``; not known here (with ``required`` or
        ``refresh``): ask the coordinator, as a channel may be ours before the
        heartbeats have told us.

        Raises:
            NotOwnerError: ``required``, and the channel is not this member's.
        """
        self.owned()  # applies news that has arrived
        lease = self._view.leases.get(channel)
        if lease is None and (required or refresh):
            self._refresh(touch=False)
            lease = self._view.leases.get(channel)
            if lease is None and required:
                raise NotOwnerError(f"channel {channel} is not owned by this subscriber")
        return lease

    def leases_now(self) -> dict[int, Lease]:
        """This member's channels and leases as the coordinator holds them now (one
        call). The view may lag them: the coordinator grants a lease at the channels,
        whose receive sessions read under it at once, before the member's heartbeats
        bring it (a slow listener, a starved process); and it answers once the grants
        it is making have landed. The view learns them too; the listener hears of the
        change with the next heartbeat, not on this thread (an aborting transaction
        runs no user code, nor waits for it).

        Raises:
            SubscriberClosedError: the group was destroyed.
        """
        view = self._read_view(touch=False)
        self._adopt_view(view)
        return {} if view is None else dict(view.leases)

    def check_positions(self, what: str) -> None:
        pass

    def check_acknowledging(self) -> None:
        raise GroupModeError(_COMMIT_INSTEAD)

    # -- liveness ------------------------------------------------------------------

    def before_receive(self) -> tuple[int, dict[int, Lease]]:
        """Record activity (for the heartbeats), rejoin if timed out; return the view
        the receive carries."""
        self._last_active = time.monotonic()
        self._heartbeats.start()
        self._rejoin_if_needed()
        return self._view.request_view()

    def track(self, ref: ray.ObjectRef[Any]) -> None:
        self._outstanding.append(ref)  # a waiting receive keeps its member alive

    def heartbeat(self) -> None:
        """Report alive now; a member that timed out rejoins, with a new generation."""
        self._last_active = time.monotonic()
        self._refresh(touch=True)
        self._rejoin_if_needed()

    def stop(self) -> None:
        self._stopped = True
        self._heartbeats.stop()

    def leave(self) -> None:
        self._call(self._topic._coordinator.request.remote(LeaveGroup(self.group, self._id)))

    # -- cooperative hand-over ---------------------------------------------------------

    def revoking(self) -> tuple[int, ...]:
        """Owned channels the group is moving away (news that came is applied first)."""
        owned = self.owned()
        return tuple(channel for channel in owned if channel in self._view.revoking)

    def release(self, channels: tuple[int, ...]) -> None:
        """Give back ``channels`` the group is moving away: they go to their new owners
        at once (call it after committing what was handed out from them). Others
        are ignored.

        Raises:
            SubscriberClosedError: the group was destroyed.
        """
        coordinator = self._topic._coordinator
        try:
            view = self._call(
                coordinator.request.remote(ReleaseChannels(self.group, self._id, tuple(channels)))
            )
        except GroupNotFoundError as error:
            raise SubscriberClosedError(f"group {self.group!r} was destroyed") from error
        self._apply_view(view)

    def _refresh(self, touch: bool) -> None:
        """Read this member's view at the coordinator now (``touch``: report it alive),
        and tell the listener what changed.

        Raises:
            SubscriberClosedError: the group was destroyed.
        """
        self._apply_view(self._read_view(touch))

    def _read_view(self, touch: bool) -> MemberView | None:
        """This member's view at the coordinator now (None: it timed out).

        Raises:
            SubscriberClosedError: the group was destroyed.
        """
        coordinator = self._topic._coordinator
        version = self._view.version
        try:
            return self._call(
                coordinator.request.remote(Heartbeat(self.group, self._id, version, touch))
            )
        except GroupNotFoundError as error:
            raise SubscriberClosedError(f"group {self.group!r} was destroyed") from error

    def _rejoin_if_needed(self) -> None:
        """Join again after a timeout (a new generation; it resumes after the commits)."""
        known = self._view
        self.owned()  # applies news that has arrived
        if not known.timed_out:
            return
        coordinator = self._topic._coordinator
        with self._join_lock:
            if not known.timed_out:
                return
            try:
                view = self._call(
                    coordinator.request.remote(
                        JoinGroup(self.group, self._id, self._timeout, self._cooperative, _origin())
                    )
                )
            except GroupNotFoundError as error:
                raise SubscriberClosedError(f"group {self.group!r} was destroyed") from error
            self._adopt_view(view, rejoined=True)
        self._tell_listener()

    # -- views -----------------------------------------------------------------------

    def _apply_view(self, view: MemberView | None) -> None:
        """Adopt a view from the coordinator (None: this member timed out), and tell
        the listener."""
        self._adopt_view(view)
        self._tell_listener()

    def _adopt_view(self, view: MemberView | None, *, rejoined: bool = False) -> None:
        """Adopt a view; queue the change for the listener.

        Under the view's own lock, never a receive's: the heartbeat thread adopts
        while a receive (holding the receives' lock) may wait to read the view.
        """
        known = self._view
        with self._view_lock:
            if self._stopped:
                return  # a poll answered after close() (it left): nothing to tell
            held = dict(known.leases)
            if view is None:
                change = known.lose()
            else:
                if known.accepts(view, rejoined=rejoined):
                    self._stale.raise_all(view.jumps)
                change = known.apply(view, rejoined=rejoined)
            # A lease gone from the view went to another member (or to none) at its
            # channel first: what was read under it is that owner's after the commit.
            for channel, lease in held.items():
                if known.leases.get(channel) != lease:
                    self._stale.lose(channel, lease)
            if change is not None:
                self._changes.append(change)

    def _tell_listener(self) -> None:
        """Tell the listener the queued changes, one at a time, in order, holding no
        lock of the member's (it may call the subscriber, or wait on a thread
        that does)."""
        with self._notifying:
            while self._changes:
                self._notify(self._changes.popleft())

    def _notify(self, change: OwnershipChange) -> None:
        if self._listener is None:
            return
        try:
            self._listener(change)
        except Exception:
            logger.exception("on_ownership_change listener failed")

    # -- heartbeats ------------------------------------------------------------------

    def _make_heartbeats(self) -> Heartbeats:
        known = self._view
        coordinator, group, member = self._topic._coordinator, self.group, self._id

        cooperative = self._cooperative

        def poll(version: int, touch: bool, idle: float, wait: float) -> Any:
            return coordinator.request.remote(
                Heartbeat(group, member, version, touch, idle, wait, cooperative)
            )

        # Weak: a subscriber dropped without close() (a copy a task was handed)
        # ends its thread instead of being kept alive by it.
        activity = weakref.WeakMethod(self._activity)
        adopt, tell = weakref.WeakMethod(self._adopt_view), weakref.WeakMethod(self._tell_listener)
        rejoin = weakref.WeakMethod(self._rejoin_if_needed)
        return Heartbeats(
            name=f"raytopic-heartbeat-{self._id[:8]}",
            interval=max(0.05, self._timeout / 4),
            poll=poll,
            activity=lambda: _call_if_alive(activity),
            timeout=self._timeout,
            apply=lambda view: _call_if_alive(adopt, view),
            notify=lambda: _call_if_alive(tell),
            version=lambda: known.version,
            timed_out=lambda: known.timed_out,
            rejoin=lambda: _call_if_alive(rejoin),
        )

    def _recover_heartbeats(self) -> None:
        """The heartbeat thread ended (it logged why): views made since never reached
        this member. Read the view at the coordinator before anything uses it, then
        poll again on a new thread.

        Raises:
            SubscriberClosedError: the group was destroyed.
        """
        self._refresh(touch=False)  # a read, not a sign of life
        self._heartbeats.restart()

    def _activity(self) -> tuple[float, bool] | None:
        """(time of the last receive, whether a receive waits for data now); None
        when Ray is down in this process."""
        pending = list(self._outstanding)
        if not pending:
            return self._last_active, False
        try:
            ready, waiting = ray.wait(pending, num_returns=len(pending), timeout=0)
        except Exception as error:
            if not ray.is_initialized():
                return None
            logger.warning("heartbeat: could not check waiting receives: %s", error)
            return self._last_active, False
        for ref in ready:
            with contextlib.suppress(ValueError):
                self._outstanding.remove(ref)
        return self._last_active, bool(waiting)

    def _call(self, ref: ray.ObjectRef[Any]) -> Any:
        with topic_calls(self._topic.topic_id, self._topic.name):
            return ray.get(ref)


class SharedGroupMember(GroupMember):
    """A member of a shared group: it acknowledges elements instead of committing or
    seeking positions.

    Args:
        topic: The subscriber's topic.
        group: The group's name.
        reader_id: The subscriber's id.
        timeout: Seconds without a heartbeat before the group drops the member.
        listener: Called with each change of the channels owned.
        definition: The group's definition, if the subscriber gave one (used
            only if the group does not exist yet).
        create_group: Make the group if it does not exist.
    """

    mode = "shared"

    def __init__(
        self,
        topic: Topic,
        group: str,
        reader_id: str,
        timeout: float,
        listener: Callable[[OwnershipChange], None] | None,
        definition: SharedGroup | None = None,
        *,
        create_group: bool = True,
    ) -> None:
        super().__init__(topic, group, reader_id, timeout, listener, create_group=create_group)
        self._definition = definition

    def prepare(self, spec: ReaderSpec) -> ReaderSpec:
        """Join (or create) the shared group: its filter must be this member's, if it
        gives one (the group applies it, not this reader); the window defaults
        to the group's, then the topic's. A new group is made only if every
        channel can load its filter and open this member's reader; its
        dead-letter topic (made by the coordinator) only once the group exists."""
        reader = dataclasses.replace(spec, filter=None)
        definition: SharedGroup = self._call(
            self._topic._coordinator.request.remote(
                DeclareGroup(
                    self.group,
                    spec.start_latest,
                    "shared",
                    self._definition,
                    spec.filter,
                    reader,
                    self._create_group,
                )
            )
        )
        window = spec.window or definition.window or self._topic.config.default_window
        return dataclasses.replace(reader, window=window)

    def check_positions(self, what: str) -> None:
        raise GroupModeError(
            f"a shared group's member acknowledges elements (ack, nack) and cannot {what}"
        )

    def check_acknowledging(self) -> None:
        pass


def _origin() -> Origin:
    """Where this process runs, as the coordinator asks Ray about it: its actor (an
    actor may outlive its job), else its job (a driver, or a task of the job)."""
    context = ray.get_runtime_context()
    actor = context.get_actor_id()
    return Origin("actor", actor) if actor else Origin("job", context.get_job_id())


def _call_if_alive(method: weakref.WeakMethod[Any], *args: Any) -> Any:
    """Call a weakly held method; None when its member is gone."""
    bound = method()
    return None if bound is None else bound(*args)
