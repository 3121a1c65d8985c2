"""What a task queue's topics hold (pure): the task record a producer publishes, and
the entries of the failed- and unprocessable-task queues.

A task record is a plain dict whose arguments travel pickled apart (``payload``),
so a replica can always read the task's id and name: a task whose arguments it
cannot load (a class it cannot import, ...) is told REJECTED under its id and
moved to the unprocessable-task queue, not lost as an element nobody can read.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import cloudpickle

from raytopic.client.routing import stored_key
from raytopic.core.errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "ENQUEUE_OPTIONS",
    "UnreadableTask",
    "check_task",
    "load_arguments",
    "make_task",
    "queue_entry",
    "stray_entry",
]

ENQUEUE_OPTIONS = frozenset({"key", "task_id"})
"""The options ``enqueue_task_sync`` takes."""

_FIELDS = frozenset({"id", "name", "key", "created_at", "payload"})


class UnreadableTask(Exception):
    """A queue element that is no task record, or whose arguments do not load."""


def make_task(task_name: object, args: object, kwargs: object, options: dict[str, Any]) -> dict:
    """The record ``enqueue_task_sync(task_name, args, kwargs, **options)`` publishes.

    Raises:
        InvalidTypeError: a task name that is not a str, args that are not a list or
            tuple, kwargs that are not a mapping with str keys, a task_id that is not
            a str, a key that is not a str, bytes, int or bool, arguments that cannot
            be pickled.
        InvalidArgumentError: an empty task name or task_id, an unknown option.
    """
    if not isinstance(task_name, str):
        raise InvalidTypeError(f"task_name must be a str, got {type(task_name).__name__}")
    if not task_name:
        raise InvalidArgumentError("task_name must not be empty")
    if args is not None and not isinstance(args, list | tuple):
        raise InvalidTypeError(f"args must be a list or tuple, got {type(args).__name__}")
    if kwargs is not None and not (
        isinstance(kwargs, Mapping) and all(isinstance(name, str) for name in kwargs)
    ):
        raise InvalidTypeError("kwargs must be a mapping of str to values")
    unknown = set(options) - ENQUEUE_OPTIONS
    if unknown:
        raise InvalidArgumentError(
            f"unknown enqueue options {sorted(unknown)} (known: {sorted(ENQUEUE_OPTIONS)})"
        )
    task_id = options.get("task_id")
    if task_id is None:
        task_id = str(uuid.uuid4())
    elif not isinstance(task_id, str):
        raise InvalidTypeError(f"task_id must be a str, got {type(task_id).__name__}")
    elif not task_id:
        raise InvalidArgumentError("task_id must not be empty")
    key = options.get("key")
    if key is not None:
        key = stored_key(key)  # refused here, by name, not as an unpicklable task record
    try:
        payload = cloudpickle.dumps((list(args or ()), dict(kwargs or {})))
    except BaseException as error:  # SystemExit too: a user's __reduce__ raised it
        raise InvalidTypeError(f"the task's arguments cannot be pickled: {error!r}") from None
    return {
        "id": task_id,
        "name": task_name,
        "key": key,
        "created_at": time.time(),
        "payload": payload,
    }


def check_task(value: object) -> dict:
    """``value`` if it is a task record, else raise UnreadableTask."""
    if not isinstance(value, dict) or not value.keys() >= _FIELDS:
        raise UnreadableTask(f"not a task record: {type(value).__name__}")
    return value


def load_arguments(task: dict) -> tuple[list[Any], dict[str, Any]]:
    """The task's (args, kwargs); UnreadableTask if they do not load here."""
    try:
        args, kwargs = cloudpickle.loads(task["payload"])
    except BaseException as error:  # SystemExit too: it costs its task, not the consumer
        raise UnreadableTask(f"its arguments do not load: {error!r}") from None
    return args, kwargs


def queue_entry(task: dict, error: object, attempts: int) -> dict[str, Any]:
    """A failed- or unprocessable-task queue's entry: ``{"id", "name", "args",
    "kwargs", "error", "attempts"}`` (args and kwargs None when they do not load
    here; ``payload`` keeps them pickled, to enqueue the task again by hand)."""
    args: list[Any] | None
    kwargs: dict[str, Any] | None
    try:
        args, kwargs = load_arguments(task)
    except UnreadableTask:
        args = kwargs = None
    return {
        "id": task["id"],
        "name": task["name"],
        "args": args,
        "kwargs": kwargs,
        "error": str(error),
        "attempts": attempts,
        "payload": task["payload"],
    }


def stray_entry(value: object, error: object, attempts: int) -> dict[str, Any]:
    """The unprocessable-task queue's entry for an element that is no task record
    (published to the queue by something else): the entry's fields, None, and
    the element as ``value``."""
    return {
        "id": None,
        "name": None,
        "args": None,
        "kwargs": None,
        "error": str(error),
        "attempts": attempts,
        "payload": None,
        "value": value,
    }
