"""``raytopic bench``'s elastic-consumer cases (``raytopic bench --autoscale``).

Cases:
    autoscale   idle ``idle_s`` -> a burst of ``elements`` elements at ``work_s`` of
                work each (a sleep, as I/O-bound work is) -> idle ``idle_s``, on a
                topic of 8 channels, consumed by ``Topic.autoscale`` from 0
                members (max 8), by a fixed pool of 8 members and by one of 1
                (the same member actors, with min = max). Figures: the drain time
                (the burst's publish to its last element handled) against the pool
                of 8 (<= 1.3x) and of 1 (<= 0.25x); member-seconds over the run
                against the pool of 8 (<= 0.5x); the first element after the idle
                time handled within ``poll_s`` + one member's start (the pool of
                1's start measured in the same run).
    serve       ``tasks`` no-op tasks through Ray Serve's ``@task_consumer`` on
                ``raytopic.serve.TopicTaskAdapter``, against Ray's own
                ``CeleryTaskProcessorAdapter`` on a local ``redis-server`` (only
                where ``celery`` and ``redis-server`` are installed; the case
                says so when they are not): throughput (enqueue of the first to
                SUCCESS of the last, >= 1.0x) and enqueue -> SUCCESS p50 of tasks
                sent one at a time (<= 1.0x).
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import ray

from raytopic.client.topic import create_topic
from raytopic.tools.bench_common import Figure, _name, _percentile, at_least, at_most

__all__ = ["QUICK_AUTOSCALE", "AutoscaleSettings", "celery_missing", "run_autoscale_benchmarks"]

CHANNELS = 8
MAX_MEMBERS = 8
DRAIN_TARGET = at_most(1.3)
"""The autoscaled drain against a warm pool of 8."""
DRAIN_ONE_TARGET = at_most(0.25)
"""The autoscaled drain against a pool of 1."""
MEMBER_SECONDS_TARGET = at_most(0.5)
"""Member-seconds over the run against the pool of 8."""
FIRST_TARGET = at_most(1.0)
"""The first element after idle, against poll_s + one member's start."""
SERVE_RATE_TARGET = at_least(1.0)
SERVE_LATENCY_TARGET = at_most(1.0)
SAMPLE = 0.1
"""Seconds between samples of the autoscaled member count."""
POLL = 0.001
"""Seconds between a latency sample's status reads (either adapter's: a busy loop
would take a core from the replica on a small machine)."""


@dataclass(frozen=True, slots=True)
class AutoscaleSettings:
    """The counts of the cases (``QUICK_AUTOSCALE`` for test_bench and --quick)."""

    elements: int = 6000
    work_s: float = 0.010
    idle_s: float = 20.0
    poll_s: float = 1.0
    scale_down_after_s: float = 5.0
    target_lag_per_member: int = 500
    batch_size: int = 100
    tasks: int = 2000
    latency_tasks: int = 100
    max_members: int = MAX_MEMBERS
    """The autoscaler's max, and the large fixed pool's size."""
    channels: int = CHANNELS
    """Channels of the autoscale case's topic."""


QUICK_AUTOSCALE = AutoscaleSettings(
    elements=200, work_s=0.001, idle_s=1.0, poll_s=0.2, scale_down_after_s=1.0,
    target_lag_per_member=50, batch_size=20, tasks=50, latency_tasks=60,
)  # fmt: skip
"""``--quick``: small bursts; the Serve case's p50 over 60 tasks sent one at a time (10
gave p50s 2.9x and 3.2x Celery's from the same code minutes apart; 60 cost about half a
second a run, each side)."""


class _Clock:
    """When the handlers handled what (wall clock: one machine)."""

    def __init__(self) -> None:
        self.first = 0.0
        self.last = 0.0
        self.count = 0

    def handled(self, count: int, at: float) -> None:
        self.first = self.first or at
        self.last = max(self.last, at)
        self.count += count

    def read(self) -> tuple[int, float, float]:
        return self.count, self.first, self.last


class _Work:
    """The handler: ``work_s`` per element, then tell the clock."""

    def __init__(self, clock: Any, work_s: float) -> None:
        self.clock, self.work_s = clock, work_s

    def __call__(self, values: list[Any]) -> None:
        time.sleep(self.work_s * len(values))
        ray.get(self.clock.handled.remote(len(values), time.time()))


@dataclass(frozen=True, slots=True)
class _Run:
    drain: float
    """The burst's publish to its last element handled, seconds."""
    first: float
    """The burst's publish to its first element handled, seconds."""
    member_seconds: float
    started: float
    """Seconds the pool took to have every member running (fixed pools)."""


def _pool_run(settings: AutoscaleSettings, members: int | None, *, idle: bool = True) -> _Run:
    """One run: ``members`` fixed (min = max), or None: autoscaled from 0 to 8."""
    topic = create_topic(_name("autoscale"), channels=settings.channels)
    clock: Any = ray.remote(_Clock).options(num_cpus=0).remote()
    fixed: dict[str, Any] = {"min_members": members, "max_members": members} if members else {}
    try:
        begun = time.monotonic()
        scaler = topic.autoscale(
            "work",
            _Work(clock, settings.work_s),
            **({"max_members": settings.max_members} | fixed),
            target_lag_per_member=settings.target_lag_per_member,
            poll_s=settings.poll_s,
            scale_down_after_s=settings.scale_down_after_s,
            batch_size=settings.batch_size,
        )
        while members and len(scaler.describe().members) < members:
            time.sleep(0.05)
        started = time.monotonic() - begun
        with _member_seconds(scaler) as counted:
            if idle:
                time.sleep(settings.idle_s)
            burst = time.time()
            ray.get(topic.publisher().publish_batch([{"n": n} for n in range(settings.elements)]))
            while ray.get(clock.read.remote())[0] < settings.elements:
                time.sleep(0.02)
            _, first, last = ray.get(clock.read.remote())
            if idle:
                time.sleep(settings.idle_s)
        scaler.stop()
        seconds = counted() if members is None else 0.0
        return _Run(last - burst, first - burst, seconds, started)
    finally:
        topic.destroy()


@contextlib.contextmanager
def _member_seconds(scaler: Any) -> Iterator[Callable[[], float]]:
    """Integrate the scaler's member count (starting members count) over the block."""
    total = [0.0]
    stop = threading.Event()

    def sample() -> None:
        last = time.monotonic()
        while not stop.wait(SAMPLE):
            count = scaler.members
            now = time.monotonic()
            total[0] += count * (now - last)
            last = now

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield lambda: total[0]
    finally:
        stop.set()
        thread.join()


def autoscale_figures(settings: AutoscaleSettings) -> list[Figure]:
    """The autoscale case: the autoscaled run against the pools of 8 and of 1."""
    auto = _pool_run(settings, None)
    eight = _pool_run(settings, settings.max_members)
    one = _pool_run(settings, 1, idle=False)  # only its drain counts
    large = settings.max_members
    run_seconds = eight.drain + 2 * settings.idle_s
    work = f"{settings.elements:,} x {settings.work_s * 1e3:g} ms"
    return [
        Figure(f"autoscale: drain {work}, from 0 (max {large})", auto.drain, "s"),
        Figure(f"autoscale: drain {work}, pool of {large}", eight.drain, "s"),
        Figure(f"autoscale: drain {work}, pool of 1", one.drain, "s"),
        Figure(
            f"autoscale: drain, autoscaled / pool of {large}",
            auto.drain,
            "s",
            f"pool of {large}",
            eight.drain,
            target=DRAIN_TARGET,
        ),
        Figure(
            "autoscale: drain, autoscaled / pool of 1",
            auto.drain,
            "s",
            "pool of 1",
            one.drain,
            target=DRAIN_ONE_TARGET,
        ),
        Figure(
            f"autoscale: member-seconds over idle {settings.idle_s:g} s + burst + idle",
            auto.member_seconds,
            "member-s",
            f"pool of {large}",
            large * run_seconds,
            target=MEMBER_SECONDS_TARGET,
        ),
        Figure(
            "autoscale: first element after idle handled",
            auto.first,
            "s",
            "poll_s + 1 start",
            settings.poll_s + one.started,
            target=FIRST_TARGET,
        ),
    ]


# -- Serve: TopicTaskAdapter against Celery on redis ------------------------------------


def celery_missing() -> str | None:
    """What the Celery comparison lacks here (None: celery, redis and redis-server)."""
    missing = [name for name in ("celery", "redis") if importlib.util.find_spec(name) is None] + (
        [] if shutil.which("redis-server") else ["redis-server"]
    )
    return ", ".join(missing) or None


@contextlib.contextmanager
def _redis_server() -> Iterator[str]:
    """A throwaway redis-server on a free loopback port (no persistence)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", folder],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}"
        finally:
            server.terminate()
            server.wait(10)


def _serve_run(config: Any, tasks: int, latency_tasks: int) -> tuple[float, float]:
    """(tasks/s over ``tasks`` no-op tasks enqueued at once, p50 seconds of enqueue
    -> SUCCESS over ``latency_tasks`` sent one at a time) for one adapter."""
    from ray import serve
    from ray.serve.task_consumer import instantiate_adapter_from_config, task_consumer, task_handler

    @serve.deployment(
        num_replicas=1, ray_actor_options={"num_cpus": 0}, graceful_shutdown_wait_loop_s=0.1
    )
    @task_consumer(task_processor_config=config)
    class NoOp:
        @task_handler(name="noop")
        def noop(self, n: int) -> int:
            return n

    app = config.queue_name
    serve.start(proxy_location="Disabled")
    serve.run(NoOp.bind(), name=app, route_prefix=None)  # type: ignore[attr-defined]  # (a deployment)
    try:
        producer = instantiate_adapter_from_config(config)
        begun = time.monotonic()
        pending = [producer.enqueue_task_sync("noop", args=[n]).id for n in range(tasks)]
        while pending:
            pending = [i for i in pending if producer.get_task_status_sync(i).status != "SUCCESS"]
        rate = tasks / (time.monotonic() - begun)
        latencies = []
        for n in range(latency_tasks):
            sent = time.monotonic()
            task_id = producer.enqueue_task_sync("noop", args=[n]).id
            while producer.get_task_status_sync(task_id).status != "SUCCESS":
                time.sleep(POLL)
            latencies.append(time.monotonic() - sent)
        return rate, _percentile(latencies, 50)
    finally:
        serve.delete(app)


def serve_figures(settings: AutoscaleSettings) -> list[Figure]:
    """TopicTaskAdapter against CeleryTaskProcessorAdapter on redis, same run."""
    from ray.serve.schema import CeleryAdapterConfig, TaskProcessorConfig

    from raytopic.serve import TopicAdapterConfig, TopicTaskAdapter

    queue = _name("serve")
    ours = TaskProcessorConfig(
        queue_name=queue, adapter=TopicTaskAdapter, adapter_config=TopicAdapterConfig()
    )
    try:
        rate, p50 = _serve_run(ours, settings.tasks, settings.latency_tasks)
    finally:
        _drop_queue(queue)
    figures = [
        Figure(f"serve: {settings.tasks:,} no-op tasks, TopicTaskAdapter", rate, "tasks/s"),
        Figure("serve: enqueue -> SUCCESS p50, TopicTaskAdapter", p50 * 1e3, "ms"),
    ]
    missing = celery_missing()
    if missing:
        figures.append(Figure(f"serve: Celery on redis not measured (missing: {missing})", 0, ""))
        return figures
    with _redis_server() as redis:
        celery = TaskProcessorConfig(
            queue_name=_name("celery"),
            adapter_config=CeleryAdapterConfig(broker_url=f"{redis}/0", backend_url=f"{redis}/1"),
        )
        celery_rate, celery_p50 = _serve_run(celery, settings.tasks, settings.latency_tasks)
    figures += [
        Figure(f"serve: {settings.tasks:,} no-op tasks, Celery on redis", celery_rate, "tasks/s"),
        Figure(
            "serve: tasks/s, TopicTaskAdapter / Celery",
            rate,
            "tasks/s",
            "celery",
            celery_rate,
            target=SERVE_RATE_TARGET,
        ),
        Figure("serve: enqueue -> SUCCESS p50, Celery on redis", celery_p50 * 1e3, "ms"),
        Figure(
            "serve: enqueue -> SUCCESS p50, TopicTaskAdapter / Celery",
            p50 * 1e3,
            "ms",
            "celery",
            celery_p50 * 1e3,
            target=SERVE_LATENCY_TARGET,
        ),
    ]
    return figures


def _drop_queue(queue: str) -> None:
    """Destroy a TopicTaskAdapter queue's topic, task log and task board."""
    from raytopic.client.topic import get_topic
    from raytopic.core.config import DEFAULT_NAMESPACE
    from raytopic.serve.adapter import board_name
    from raytopic.serve.board_actor import task_log_name

    for name in (queue, task_log_name(queue)):
        with contextlib.suppress(Exception):
            get_topic(name).destroy()
    with contextlib.suppress(Exception):
        ray.kill(ray.get_actor(board_name(queue), namespace=DEFAULT_NAMESPACE))


def run_autoscale_benchmarks(
    settings: AutoscaleSettings = AutoscaleSettings(),
    *,
    serve: bool = True,
    report: Callable[[Figure], None] = lambda figure: None,
) -> list[Figure]:
    """The autoscale case, then (``serve``) the Serve case; ``report`` hears of each
    figure as it is measured."""
    figures = []
    for figure in autoscale_figures(settings) + (serve_figures(settings) if serve else []):
        figures.append(figure)
        report(figure)
    return figures
