"""The Resequencer as a Ray actor, fed by many producers at once.

:class:`ResequencerActor` is an undecorated class holding one
:class:`raytopic.core.resequencer.Resequencer`; :func:`make_resequencer_actor`
creates it as a Ray actor. Releases go either into a callback run inside the
actor or into a sink object with a ``publish(value)`` method (a raytopic
``Publisher``, for example), so a reordered stream can be republished.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import ray
from ray.util.metrics import Counter

from raytopic.core.config import check_int
from raytopic.core.errors import InvalidArgumentError, InvalidTypeError
from raytopic.core.resequencer import (
    ReleaseCallback,
    Resequencer,
    ResequencerStats,
    _check_correlation_id,
    _check_seq,
    _check_settings,
)
from raytopic.core.user_functions import pickle_function

if TYPE_CHECKING:
    from ray.actor import ActorHandle

__all__ = ["DEFAULT_MAX_CONCURRENCY", "ResequencerActor", "make_resequencer_actor"]

DEFAULT_MAX_CONCURRENCY = 16
"""Concurrent calls a resequencer actor serves (its thread pool size)."""

_MAX_GAPS = 10_000
_SWEEPER_JOIN_TIMEOUT_S = 10.0


class ResequencerActor:
    """A :class:`Resequencer` inside an actor; producers call ``accept`` remotely.

    The sweeper (timeout releases) runs on a background thread of the actor,
    started in ``__init__`` and stopped by :meth:`stop`.

    **Ordering.** Each stream is released in sequence order, whatever order
    the producers' calls arrive in; the callback or ``sink.publish`` is called
    one value at a time (never concurrently), from the thread of the
    ``accept`` call that made the release, or from the sweeper thread.

    **Delivery.** Exactly once per accepted, non-late message, as far as the
    actor lives: held messages are in memory only and die with the actor.
    Call :meth:`flush` before killing it to release what is held.

    Args:
        name: The resequencer's name (logs, metrics tag).
        sink: An object with ``publish(value)``; each released payload is
            published to it. Exactly one of ``sink`` and ``on_release``.
        on_release: A picklable ``on_release(seq, payload, correlation_id)``
            run inside the actor for every release.
        timeout_ms: Hold window in milliseconds (0 to a year).
        capacity: Per-stream buffer cap that forces the head out; 0 is unbounded.
        reap_interval_ms: How often the sweeper runs (1 ms to a year).
        start: First expected sequence number of every stream, or None.
        max_gaps: How many recent gaps :meth:`gaps` keeps.

    Raises:
        InvalidArgumentError: A bad value, or not exactly one of sink/on_release.
        InvalidTypeError: A bad type, or a sink without a callable ``publish``.
    """

    def __init__(
        self,
        name: str,
        *,
        sink: Any = None,
        on_release: ReleaseCallback | None = None,
        timeout_ms: int = 1000,
        capacity: int = 0,
        reap_interval_ms: int = 1000,
        start: int | None = None,
        max_gaps: int = _MAX_GAPS,
    ) -> None:
        _check_target(sink, on_release)
        check_int(max_gaps, "max_gaps", minimum=0)
        self._sink = sink
        self._on_release = on_release
        self._gaps: deque[tuple[int, Hashable | None]] = deque(maxlen=max_gaps)
        tags = {"resequencer": name}
        self._released_metric = _counter(
            "raytopic_resequencer_released", "Messages released in order by a resequencer."
        )
        self._gaps_metric = _counter(
            "raytopic_resequencer_gaps", "Sequence numbers skipped by a resequencer."
        )
        self._late_metric = _counter(
            "raytopic_resequencer_late", "Late messages dropped by a resequencer."
        )
        for metric in (self._released_metric, self._gaps_metric, self._late_metric):
            metric.set_default_tags(tags)
        self._resequencer = Resequencer(
            name,
            timeout_ms=timeout_ms,
            capacity=capacity,
            reap_interval_ms=reap_interval_ms,
            on_release=self._release,
            on_gap=self._gap,
            on_late=self._late,
            start=start,
        )
        self._sweeper = threading.Thread(
            target=self._resequencer.start, name=f"resequencer-{name}-sweeper", daemon=True
        )
        self._sweeper.start()

    def accept(self, seq: int, payload: Any, correlation_id: Hashable | None = None) -> None:
        """Feed one message; see :meth:`Resequencer.accept`."""
        self._resequencer.accept(seq, payload, correlation_id)

    def accept_batch(self, items: Sequence[tuple[int, Any, Hashable | None]]) -> None:
        """Feed several messages, in list order.

        Args:
            items: A list of ``(seq, payload, correlation_id)`` tuples; ``(seq,
                payload)`` means the default stream.

        Raises:
            InvalidArgumentError: An item is not a 2- or 3-tuple; nothing is accepted.
            InvalidTypeError: ``items`` is not a list or tuple, an item's seq is not an
                int or its correlation id is not hashable; nothing is accepted.
        """
        if not isinstance(items, list | tuple):
            raise InvalidTypeError(
                f"items must be a list of (seq, payload[, correlation_id]) tuples, "
                f"not {type(items).__name__}"
            )
        checked: list[tuple[int, Any, Hashable | None]] = []
        for index, item in enumerate(items):
            if not isinstance(item, tuple | list) or len(item) not in (2, 3):
                raise InvalidArgumentError(
                    f"items[{index}] must be a (seq, payload[, correlation_id]) tuple"
                )
            seq, payload, correlation_id = item if len(item) == 3 else (*item, None)
            _check_seq(seq)
            _check_correlation_id(correlation_id)
            checked.append((seq, payload, correlation_id))
        for seq, payload, correlation_id in checked:
            self._resequencer.accept(seq, payload, correlation_id)

    def flush(self) -> ResequencerStats:
        """Release everything held (reporting gaps), then flush the sink if it can.

        Returns:
            The counters after the flush.
        """
        self._resequencer.flush()
        flush_sink = getattr(self._sink, "flush", None)
        if callable(flush_sink):
            flush_sink()
        return self._resequencer.stats

    def stats(self) -> ResequencerStats:
        """The counters: released, gaps, late, held."""
        return self._resequencer.stats

    def gaps(self) -> list[tuple[int, Hashable | None]]:
        """The most recent skipped numbers as ``(seq, correlation_id)``, oldest first."""
        return list(self._gaps)

    def sink(self) -> Any:
        """A copy of the sink (or the ``on_release`` callable) releases go to.

        How a caller reads state the sink keeps, e.g. a collector in a test.
        """
        return self._sink if self._sink is not None else self._on_release

    def is_running(self) -> bool:
        """True while the sweeper thread runs."""
        return self._resequencer.is_running

    def pause(self) -> None:
        """Pause the timeout sweeps; accept still releases successors."""
        self._resequencer.pause()

    def resume(self) -> None:
        """Resume the timeout sweeps."""
        self._resequencer.resume()

    def stop(self) -> None:
        """Stop the sweeper and wait for its thread; idempotent.

        Held messages stay held (:meth:`flush` releases them); ``accept``
        keeps working without timeout releases.
        """
        self._resequencer.stop()
        if self._sweeper.is_alive() and self._sweeper is not threading.current_thread():
            self._sweeper.join(timeout=_SWEEPER_JOIN_TIMEOUT_S)

    # -- callbacks, run by the Resequencer one at a time ---------------------

    def _release(self, seq: int, payload: Any, correlation_id: Hashable | None) -> None:
        # Counted first: a raising sink still counts as released, as in the
        # pure class (which logs the error).
        self._released_metric.inc()
        if self._sink is not None:
            self._sink.publish(payload)
        else:
            self._on_release(seq, payload, correlation_id)  # type: ignore[misc]

    def _gap(self, seq: int, correlation_id: Hashable | None) -> None:
        self._gaps_metric.inc()
        self._gaps.append((seq, correlation_id))

    def _late(self, seq: int, payload: Any, correlation_id: Hashable | None) -> None:
        self._late_metric.inc()


def make_resequencer_actor(
    name: str,
    *,
    sink: Any = None,
    on_release: ReleaseCallback | None = None,
    timeout_ms: int = 1000,
    capacity: int = 0,
    reap_interval_ms: int = 1000,
    start: int | None = None,
    actor_options: dict[str, Any] | None = None,
) -> ActorHandle:
    """Create a :class:`ResequencerActor`; arguments are checked here first.

    The actor is threaded (``max_concurrency``, default
    :data:`DEFAULT_MAX_CONCURRENCY`): ``accept`` is thread-safe and the
    Resequencer orders the callbacks itself, so producers' calls need not
    queue one behind the other; and while a slow sink blocks one ``accept``
    (a Publisher waiting for room), ``stats``, ``gaps``, ``pause`` and
    ``stop`` are still served. An async actor would be wrong here: ``accept``
    blocks on locks and runs the sink synchronously. It reserves no CPU
    (``num_cpus=0``): it mostly waits.

    Args:
        name: The resequencer's name (logs, metrics tag); not the Ray actor
            name (pass ``actor_options={"name": ...}`` for a named actor).
        sink: An object with ``publish(value)`` receiving each released payload.
        on_release: A picklable ``on_release(seq, payload, correlation_id)``
            run inside the actor. Exactly one of ``sink`` and ``on_release``.
        timeout_ms: Hold window in milliseconds (0 to a year).
        capacity: Per-stream buffer cap that forces the head out; 0 is unbounded.
        reap_interval_ms: How often the sweeper runs (1 ms to a year).
        start: First expected sequence number of every stream, or None.
        actor_options: Extra ``.options(...)`` for the actor; they override
            the defaults ``num_cpus=0`` and ``max_concurrency``.

    Returns:
        The actor's handle; call ``accept.remote(seq, payload, cid)``.

    Raises:
        InvalidArgumentError: A bad value (the message names it).
        InvalidTypeError: A bad type (the message names it), or a ``sink`` or
            ``on_release`` that cannot be pickled (no actor is made).

    Example:
        ::

            reseq = make_resequencer_actor("orders", sink=topic.publisher(),
                                           timeout_ms=500, start=0)
            ray.get([producer.remote(reseq, part) for part in parts])
            ray.get(reseq.flush.remote())
    """
    _check_settings(name, timeout_ms, capacity, reap_interval_ms, start)
    _check_target(sink, on_release)
    # Checked here: Ray would refuse it with a TypeError of its own.
    if sink is not None:
        pickle_function(sink, "sink")
    else:
        pickle_function(on_release, "on_release")
    if actor_options is not None and not isinstance(actor_options, dict):
        raise InvalidTypeError(
            f"actor_options must be a dict or None, got {type(actor_options).__name__}"
        )
    options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": DEFAULT_MAX_CONCURRENCY}
    options.update(actor_options or {})
    # Ray types what .remote() makes as "a handle or the class" (for its methods'
    # signatures); it is a handle, whose methods a caller calls with .remote().
    handle: Any = (
        ray.remote(ResequencerActor)
        .options(**options)
        .remote(
            name,
            sink=sink,
            on_release=on_release,
            timeout_ms=timeout_ms,
            capacity=capacity,
            reap_interval_ms=reap_interval_ms,
            start=start,
        )
    )
    return handle


def _check_target(sink: Any, on_release: Callable[..., Any] | None) -> None:
    if (sink is None) == (on_release is None):
        raise InvalidArgumentError("exactly one of sink and on_release must be given")
    if sink is not None and not callable(getattr(sink, "publish", None)):
        raise InvalidTypeError(
            f"sink must have a callable publish(value), got {type(sink).__name__}"
        )
    if on_release is not None and not callable(on_release):
        raise InvalidTypeError(f"on_release must be callable, got {type(on_release).__name__}")


def _counter(name: str, description: str) -> Counter:
    return Counter(name, description=description, tag_keys=("resequencer",))
