"""``Topic.autoscale``: a group's members as Ray actors, as many as its lag asks for.

:func:`start_autoscaler` checks every argument on the caller's side (a bad one
starts nothing), makes sure the group exists, and starts the group's scaler
(``raytopic.autoscale.scaler_actor``: detached, so it outlives this driver, and
restartable); :class:`Autoscaler` is the picklable handle to it, found again
from any job with ``Topic.autoscaler(group)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import ray

from raytopic.autoscale.scaler_actor import ScalerActor
from raytopic.coordinator.launch import launch_topic, wait_released
from raytopic.core.config import check_name
from raytopic.core.dead_letters import dead_letter_topic_config
from raytopic.core.destroyed import check_topic, topic_calls
from raytopic.core.errors import GroupModeError, InvalidArgumentError, InvalidTypeError
from raytopic.core.naming import scaler_actor_name
from raytopic.core.scaling import AutoscalerStats, ScaleSettings
from raytopic.core.shared_group import SharedGroup
from raytopic.core.user_functions import pickle_function

if TYPE_CHECKING:
    from raytopic.client.topic import Topic

__all__ = ["Autoscaler", "find_autoscaler", "start_autoscaler"]

RESERVED_OPTIONS = frozenset(
    {
        "name",
        "namespace",
        "lifetime",
        "get_if_exists",
        "max_restarts",
        "max_task_retries",
        "max_concurrency",
        "concurrency_groups",
        "allow_out_of_order_execution",
    }
)
"""Ray actor options the autoscaler sets on its members itself."""

_SHARED_LIMITS = (
    "{name!r} is a shared group: its max_deliveries and dead_letter are the group's "
    "(rt.SharedGroup(..., max_deliveries=, dead_letter=)), not the autoscaler's"
)


class Autoscaler:
    """A handle to the autoscaler of one group (picklable; see ``Topic.autoscale``).

    **Delivery**: each element is handled once while no member crashes (a
    channel moves only after its member committed what it handed out); a
    member that dies has its uncommitted batch handled again, by another member.
    """

    def __init__(self, topic: Topic, group: str, actor: Any) -> None:
        self._topic = topic
        self._group = group
        self._actor = actor

    def __reduce__(self) -> tuple[Any, ...]:
        return (Autoscaler, (self._topic, self._group, self._actor))

    def __repr__(self) -> str:
        return f"Autoscaler({self._topic.name!r}, group={self._group!r})"

    @property
    def topic(self) -> Topic:
        """The topic whose group is scaled."""
        return self._topic

    @property
    def group(self) -> str:
        """The group's name."""
        return self._group

    @property
    def members(self) -> int:
        """The member count now (members still starting included).

        Raises:
            TopicNotFoundError: the topic was destroyed (its autoscalers with it).
        """
        return self._call(self._actor.member_count.remote())

    def describe(self) -> AutoscalerStats:
        """The members (id, pid, node), the desired count, the lag and the scale events.

        Raises:
            TopicNotFoundError: the topic was destroyed (its autoscalers with it).
        """
        return self._call(self._actor.describe.remote())

    def stop(self) -> None:
        """Stop scaling: every member finishes its batch and leaves, then the autoscaler
        ends. Idempotent; the group and its positions stay."""
        name = scaler_actor_name(self._topic.name, self._group)
        with contextlib.suppress(Exception):  # stopped already, or the topic is gone
            ray.get(self._actor.stop.remote())
        ray.kill(self._actor, no_restart=True)
        wait_released(name, self._topic.namespace, actor=self._actor)

    def _call(self, ref: ray.ObjectRef[Any]) -> Any:
        with topic_calls(self._topic.topic_id, self._topic.name):
            return ray.get(ref)


def start_autoscaler(
    topic: Topic,
    group: str | SharedGroup,
    handler: Callable[[list[Any]], Any],
    *,
    member_options: Mapping[str, Any] | None,
    **settings: Any,
) -> Autoscaler:
    """Check everything, make sure the group exists, start its autoscaler (see
    ``Topic.autoscale``).

    Raises:
        InvalidArgumentError, InvalidTypeError: a bad argument (nothing started).
        GroupModeError: a ``SharedGroup`` whose name is an owned group's.
        TopicNotFoundError: the topic was destroyed.
    """
    name = group.name if isinstance(group, SharedGroup) else check_name(group, "group")
    if not callable(handler):
        raise InvalidTypeError(f"handler must be callable, got {type(handler).__name__}")
    pickled = pickle_function(handler, "handler")
    checked = ScaleSettings.create(**settings)
    if isinstance(group, SharedGroup) and checked.max_deliveries is not None:
        raise InvalidArgumentError(_SHARED_LIMITS.format(name=name))
    options = _member_options(member_options)
    check_topic(topic.topic_id, topic.name, *topic._channel_actors)
    actor_name = scaler_actor_name(topic.name, name)
    try:
        ray.get_actor(actor_name, namespace=topic.namespace)
    except ValueError:
        pass  # not autoscaled yet
    else:
        raise InvalidArgumentError(
            f"group {name!r} of topic {topic.name!r} is autoscaled already "
            "(topic.autoscaler(group) finds its autoscaler)"
        )
    mode = _ensure_group(topic, group)
    if checked.dead_letter is not None:
        if mode == "shared":  # an existing shared group named by a string: nothing made
            raise InvalidArgumentError(_SHARED_LIMITS.format(name=name))
        launch_topic(dead_letter_topic_config(checked.dead_letter, topic.namespace), exist_ok=True)
    actor: Any = (  # (Ray types the handle's methods as plain functions)
        ray.remote(ScalerActor)
        .options(
            name=actor_name,
            namespace=topic.namespace,
            lifetime="detached",
            max_restarts=-1,
            max_task_retries=3,
            max_concurrency=4,
            num_cpus=0,
        )
        .remote(topic, group, mode, pickled, checked, options)
    )
    scaler = Autoscaler(topic, name, actor)
    scaler._call(actor.ready.remote())
    return scaler


def find_autoscaler(topic: Topic, group: str) -> Autoscaler | None:
    """The autoscaler of ``group``, started by any job; None if it has none.

    Raises:
        InvalidArgumentError, InvalidTypeError: not a valid group name.
    """
    check_name(group, "group")
    try:
        actor = ray.get_actor(scaler_actor_name(topic.name, group), namespace=topic.namespace)
    except ValueError:
        return None
    return Autoscaler(topic, group, actor)


def _ensure_group(topic: Topic, group: str | SharedGroup) -> str:
    """Create the group if it is missing; return its mode (a name names an existing
    shared group too; a new one is owned)."""
    try:
        topic.create_group(group)
    except GroupModeError:
        if isinstance(group, SharedGroup):
            raise
        return "shared"
    return "shared" if isinstance(group, SharedGroup) else "owned"


def _member_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The members' Ray actor options, checked as Ray checks them (before anything starts).

    Raises:
        InvalidTypeError: not a mapping, or an option of the wrong type.
        InvalidArgumentError: an unknown option, or one the autoscaler sets itself.
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise InvalidTypeError(
            f"member_options must be a dict of Ray actor options, got {type(options).__name__}"
        )
    checked = dict(options)
    reserved = sorted(RESERVED_OPTIONS.intersection(checked))
    if reserved:
        raise InvalidArgumentError(f"member_options may not set {reserved}: the autoscaler does")
    from ray._common.ray_option_utils import validate_actor_options

    try:
        validate_actor_options(checked, in_options=True)
    except TypeError as error:
        raise InvalidTypeError(f"member_options: {error}") from None
    except ValueError as error:
        raise InvalidArgumentError(f"member_options: {error}") from None
    return checked
