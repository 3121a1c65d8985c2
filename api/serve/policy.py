"""LagPolicy: a Ray Serve autoscaling policy by a topic group's lag."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

from raytopic.client.topic import getting
from raytopic.core.config import check_name, check_timeout
from raytopic.core.errors import InvalidTypeError
from raytopic.core.protocol import ReadTopicLag
from raytopic.core.scaling import ScaleRule, ScaleSettings
from raytopic.core.steps import run_awaiting
from raytopic.serve.adapter import CONSUMER_GROUP

logger = logging.getLogger(__name__)

__all__ = ["LagPolicy"]


class LagPolicy:
    """A Ray Serve autoscaling policy by a topic group's lag (docs/guides/autoscaling.md).

    Give it as ``AutoscalingPolicy(policy_function=LagPolicy, policy_kwargs={...})``.
    The desired replica count follows :class:`~raytopic.core.scaling.ScaleRule`
    (ceil(lag / target), from 0 at ``activation_lag``, down after
    ``scale_down_after_s``) within the deployment's min and max replicas. The lag
    is read from the topic's coordinator in one light call (not ``describe``), at
    most every ``refresh_s`` seconds, in a one-shot task beside Serve's control
    loop (not a broker polled every 10 s); the control loop never waits for it.

    Args:
        topic: The topic's name.
        group: The group whose lag counts (a TopicTaskAdapter's queue:
            ``"serve-consumers"``).
        target_lag_per_replica: Lag one replica is meant to carry.
        activation_lag: Lag that wakes a deployment at 0 replicas.
        scale_down_after_s: Seconds fewer replicas must be wanted before they go.
        refresh_s: Seconds between reads of the lag.
        namespace: The topic's Ray namespace.
        shared: The group is shared (not capped by channels with lag).
    """

    def __init__(
        self,
        topic: str,
        group: str = CONSUMER_GROUP,
        target_lag_per_replica: int = 100,
        activation_lag: int = 1,
        scale_down_after_s: float = 30.0,
        refresh_s: float = 0.5,
        namespace: str | None = None,
        shared: bool = True,
    ) -> None:
        self._topic_name = check_name(topic, "topic")
        self._group = check_name(group, "group")
        self._namespace = None if namespace is None else check_name(namespace, "namespace")
        self._refresh = check_timeout(refresh_s, "refresh_s", allow_none=False)
        self._settings = ScaleSettings.create(
            max_members=10_000,
            target_lag_per_member=target_lag_per_replica,
            activation_lag=activation_lag,
            scale_down_after_s=scale_down_after_s,
        )
        if not isinstance(shared, bool):
            raise InvalidTypeError(f"shared must be a bool, got {type(shared).__name__}")
        self._shared = shared
        self._rule: ScaleRule | None = None
        self._topic: Any = None
        self._lags: dict[int, int] = {}
        self._read_at = -math.inf
        self._reading: asyncio.Task[None] | None = None

    def __call__(self, ctx: Any) -> tuple[int, dict[str, Any]]:
        """Serve's control loop asks: the desired replica count, and state to keep."""
        self._refresh_lag()
        if self._rule is None:
            return ctx.current_num_replicas, {"lag": None}
        decision = self._rule.decide(self._lags, ctx.current_num_replicas, time.monotonic())
        low, high = ctx.capacity_adjusted_min_replicas, ctx.capacity_adjusted_max_replicas
        return max(low, min(high, decision.desired)), {"lag": decision.lag}

    def _refresh_lag(self) -> None:
        if self._reading is not None and not self._reading.done():
            return
        if time.monotonic() - self._read_at < self._refresh:
            return
        self._read_at = time.monotonic()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called outside an event loop (a test, a script): read now
            asyncio.run(self._read_lag())
            return
        self._reading = loop.create_task(self._read_lag())

    async def _read_lag(self) -> None:
        try:
            if self._topic is None:
                self._topic = await run_awaiting(getting(self._topic_name, self._namespace))
                self._rule = ScaleRule(
                    self._settings,
                    owned=not self._shared,
                    channel_count=self._topic.channel_count,
                )
            lags = await self._topic._coordinator.request.remote(ReadTopicLag(self._group))
            self._lags = {**self._lags, **lags}  # a channel not heard keeps its last lag
        except Exception as error:  # the topic or group is not there yet, or restarting
            logger.warning("LagPolicy: no lag for %s: %s", self._topic_name, error)
