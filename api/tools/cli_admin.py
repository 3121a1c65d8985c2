"""The ``raytopic`` commands that look at and steer a running cluster's topics: list,
create, describe, tail, groups, reset-group, delete. Each takes the parsed
arguments (Ray already connected), prints, and returns its exit code; errors
are raised and become exit codes in ``raytopic.tools.cli``."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import ray

import raytopic as rt
from raytopic.core.config import DEFAULT_NAMESPACE
from raytopic.core.errors import GroupNotFoundError
from raytopic.tools.cli_tables import element_line, groups_table, to_json, topic_table

__all__ = ["COMMANDS"]

_TAIL_BATCH = 1000


def list_topics(args: argparse.Namespace) -> int:
    """Names of the namespace's topics, one a line (none: a note on stderr, so that
    stdout still lists exactly the topics)."""
    names = rt.list_topics(namespace=args.namespace)
    if args.json:
        print(to_json(names))
    elif names:
        print("\n".join(names))
    else:
        print(f"no topics in namespace {args.namespace or DEFAULT_NAMESPACE}", file=sys.stderr)
    return 0


def create(args: argparse.Namespace) -> int:
    """Make a topic (TopicExistsError: exit 1; bad compaction settings: exit 2, nothing
    made)."""
    topic = rt.create_topic(
        args.topic,
        channels=args.channels,
        capacity=args.capacity,
        retain=args.retain or None,  # unset: a compacted topic retains, a plain one not
        ttl=args.ttl,
        overflow=args.overflow,
        store=args.store,
        groups=args.group or (),
        namespace=args.namespace,
        compaction=_compaction(args),
    )
    settings = _settings(topic)
    if args.json:
        print(to_json({"name": topic.name, "topic_id": topic.topic_id, **settings}))
        return 0
    compaction = settings.pop("compaction")
    text = ", ".join(f"{key} {value}" for key, value in settings.items())
    if compaction is not None:
        text += (
            f"; compacted: min lag {compaction['min_lag_s']:g} s, max lag"
            f" {compaction['max_lag_s']:g} s, tombstone retention"
            f" {compaction['tombstone_retention_s']:g} s"
        )
    print(f"created topic {topic.name} ({text})")
    return 0


_COMPACTION_FLAGS = {
    "min_lag": "min_lag_s",
    "max_lag": "max_lag_s",
    "tombstone_retention": "tombstone_retention_s",
}
"""create's compaction options, each with the ``rt.Compaction`` setting it gives."""


def _compaction(args: argparse.Namespace) -> rt.Compaction | None:
    """The compaction ``--compact`` and its settings ask for (None: a plain topic).

    Raises:
        InvalidArgumentError: a setting without ``--compact``, or a bad value.
    """
    given = {
        setting: getattr(args, flag)
        for flag, setting in _COMPACTION_FLAGS.items()
        if getattr(args, flag) is not None
    }
    if not args.compact:
        if given:
            flags = ", ".join(f"--{flag.replace('_', '-')}" for flag in _COMPACTION_FLAGS)
            raise rt.InvalidArgumentError(
                f"{flags} are settings of a compacted topic: add --compact"
            )
        return None
    return rt.Compaction(**given)


def _settings(topic: rt.Topic) -> dict[str, Any]:
    config = topic.config
    return {
        "channels": config.channels,
        "capacity": config.capacity,
        "retain": config.retain,
        "ttl": config.ttl,
        "overflow": config.overflow.value,
        "compaction": None if config.compaction is None else config.compaction.to_state(),
        "groups": list(topic.groups()),
    }


def describe(args: argparse.Namespace) -> int:
    """A topic's channels and groups."""
    stats = _topic(args).describe()
    print(to_json(stats) if args.json else topic_table(stats))
    return 0


def groups(args: argparse.Namespace) -> int:
    """A topic's groups, one line each."""
    stats = _topic(args).describe()
    print(to_json(list(stats.groups.values())) if args.json else groups_table(stats))
    return 0


def tail(args: argparse.Namespace) -> int:
    """Print elements, one JSON line each, without joining any group (an anonymous
    subscriber, placed where ``--from`` or the group's commits say)."""
    topic = _topic(args)
    start = args.start  # "earliest", "latest" or a datetime (parsed by raytopic.tools.cli)
    at = start if isinstance(start, datetime) else None
    if args.group is not None and args.group not in topic.groups():
        raise GroupNotFoundError.of(topic.name, args.group)
    subscriber = topic.subscriber(
        start="latest" if start == "latest" else "earliest",
        complete_on_empty=not args.follow,
    )
    try:
        with _sigterm_as_ctrl_c():
            _print_elements(args, topic, subscriber, at)
    except KeyboardInterrupt:
        pass
    finally:
        subscriber.close()
    return 0


def _print_elements(
    args: argparse.Namespace, topic: rt.Topic, subscriber: rt.Subscriber, at: datetime | None
) -> int:
    """tail's loop: place the subscriber, print until ``-n`` or (without
    ``--follow``) the end; returns how many it printed."""
    if args.group is not None:
        for channel, stats in enumerate(topic.describe().groups[args.group].channels):
            subscriber.seek(channel, stats.committed)
    elif at is not None:
        for channel in range(topic.channel_count):
            subscriber.seek(channel, at)
    printed = 0
    while args.n is None or printed < args.n:
        wanted = _TAIL_BATCH if args.n is None else min(_TAIL_BATCH, args.n - printed)
        batch = ray.get(subscriber.receive_batch(wanted))
        if not batch and not args.follow:
            break
        for element in batch[:wanted]:
            print(element_line(element, full=args.json), flush=args.follow)
            printed += 1
    return printed


@contextlib.contextmanager
def _sigterm_as_ctrl_c() -> Iterator[None]:
    """While the block runs, SIGTERM (``kill``, a supervisor stopping the command)
    ends it as Ctrl-C does (KeyboardInterrupt): Ray's own handler, which
    ``ray.init`` installed, prints a C++ stack dump. Signals reach the main
    thread only: elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:  # None: Ray's handler, set from C, which Python cannot put back
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def reset_group(args: argparse.Namespace) -> int:
    """Move a group's positions (Topic.reset_group); a CH:SEQ outside the channel's
    elements is clamped, and the line says so."""
    topic = _topic(args)
    to = args.to  # "earliest", "latest", a datetime or {channel: sequence} (raytopic.tools.cli)
    asked = to if isinstance(to, dict) else {}
    if isinstance(to, dict):
        to = {channel: topic.position(channel, sequence) for channel, sequence in to.items()}
    positions = topic.reset_group(args.group, to)
    if args.json:
        print(to_json({str(channel): p.sequence for channel, p in positions.items()}))
    else:
        for channel, position in sorted(positions.items()):
            print(
                f"channel {channel}: next after {position.sequence}"
                + _clamped(asked.get(channel), position.sequence)
            )
    return 0


def _clamped(asked: int | None, set_to: int) -> str:
    """What a reset line adds when the channel's position is not the one asked."""
    if asked is None or asked == set_to:
        return ""
    where = "its tail" if asked > set_to else "before its head"
    return f" (asked {asked}: clamped to {where})"


def delete(args: argparse.Namespace) -> int:
    """Destroy a topic, after ``--yes`` or the name typed at a terminal."""
    topic = _topic(args)
    if not args.yes:
        if not sys.stdin.isatty():
            print("raytopic: not deleting without --yes (no terminal to ask)", file=sys.stderr)
            return 2
        answer = input(f"type {topic.name} to delete it and everything in it: ")
        if answer.strip() != topic.name:
            print("raytopic: not deleted", file=sys.stderr)
            return 1
    topic.destroy()
    print(f"deleted topic {topic.name}")
    return 0


def _topic(args: argparse.Namespace) -> rt.Topic:
    return rt.get_topic(args.topic, namespace=args.namespace)


COMMANDS = {
    "list": list_topics,
    "create": create,
    "describe": describe,
    "tail": tail,
    "groups": groups,
    "reset-group": reset_group,
    "delete": delete,
}
"""Each command's function, by name."""
