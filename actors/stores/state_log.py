"""A channel's state in sections, changed a few keys at a time, and the log of changes. No I/O.

The state a store keeps for a channel is a dict of sections, all JSON-ready::

    {"epoch": 7, "next_sequence": 1200,             # scalar sections
     "groups": {name: cursor}, "shared": {...},      # keyed sections
     "marks": {...}, "publishers": {id: track}, "readers": {id: ...}}

A commit changes one key of one section, so a store need not rewrite the
whole state for it: it appends the change (a :class:`StateChange`) to a log
and rewrites the whole state only now and then (the embedded store's
compaction). Replaying the log onto the last whole state
(:func:`apply_changes`) gives the state back.

A log is a sequence of records, one per :func:`encode_changes` call (one
batch of changes, applied all or not at all)::

    magic    4 bytes  b"RTS1"
    length   u32      bytes of the body
    crc32c   u32      CRC32C of the body
    body     UTF-8 JSON: a list of changes, each [section, key, value] (set)
             or [section, key] (delete); key null: the section itself

The prefix is the segment records' (:mod:`raytopic.actors.stores.frames`)
with another magic, so neither kind of record is ever taken for the other.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from raytopic.actors.stores.frames import (
    CorruptRecord,
    TornRecord,
    encode_frame,
    find_frame,
    read_frame,
)
from raytopic.core.errors import StoreError

__all__ = [
    "STATE_MAGIC",
    "DecodedLog",
    "StateChange",
    "apply_changes",
    "decode_log",
    "encode_changes",
    "with_changes",
]

STATE_MAGIC = b"RTS1"
"""The magic of a state-log record."""
_MIN_BODY = 2
"""The shortest body: ``[]``."""


@dataclass(frozen=True, slots=True)
class StateChange:
    """One change to a channel's state: a key of a section set or deleted.

    Example::

        StateChange("groups", "billing", {"next": 5, "committed": 4})  # set a key
        StateChange("publishers", "p-1", None, deleted=True)  # delete a key
        StateChange("epoch", None, 8)  # a scalar section

    Raises:
        TypeError: ``section`` is not a string, or ``key`` neither a string nor
            None (JSON object keys are strings: any other key would come back
            from the log as another key).
    """

    section: str
    """The section changed: ``"groups"``, ``"publishers"``, ``"epoch"``, ..."""
    key: str | None
    """The key changed in the section; None: the section itself is the value (a scalar)."""
    value: Any = None
    """The new value (JSON-ready); ignored when ``deleted``."""
    deleted: bool = False
    """True: the key is removed from the section (key None: the section is removed)."""

    def __post_init__(self) -> None:
        if type(self.section) is not str:
            raise TypeError(f"a state section is named by a str, not {self.section!r}")
        if self.key is not None and type(self.key) is not str:
            raise TypeError(f"a state key is a str or None, not {self.key!r}")


def apply_changes(state: dict[str, Any], changes: Iterable[StateChange]) -> None:
    """Apply ``changes`` to ``state`` in place, in order.

    A change with a key sets (or deletes) that key of its section, creating the
    section if it is missing; deleting a missing key is no error (a replayed
    log may delete twice). A change without a key sets (or removes) the
    section itself. Values are kept, not copied.

    Args:
        state: The state to change.
        changes: The changes, oldest first.

    Raises:
        StoreError: a keyed change meets a section that is not a dict (the
            changes do not fit this state).
    """
    for change in changes:
        if change.key is None:
            if change.deleted:
                state.pop(change.section, None)
            else:
                state[change.section] = change.value
            continue
        section = state.get(change.section)
        if section is None:
            section = state[change.section] = {}
        elif not isinstance(section, dict):
            raise StoreError(
                f"state section {change.section!r} holds a {type(section).__name__}, "
                f"not keys: the change of {change.key!r} does not fit it"
            )
        if change.deleted:
            section.pop(change.key, None)
        else:
            section[change.key] = change.value


def with_changes(state: dict[str, Any], changes: Sequence[StateChange]) -> dict[str, Any]:
    """A new state: ``state`` with ``changes`` applied, ``state`` left as it was.

    Only the sections changed are copied (shallowly): the rest, and every value,
    are shared with ``state``. So a store that was handed ``state`` may keep it
    as it is while the next one is built, at a cost in proportion to the
    sections changed rather than to the whole state.

    Raises:
        StoreError: as :func:`apply_changes`.
    """
    changed = dict(state)
    for section in {change.section for change in changes if change.key is not None}:
        current = changed.get(section)
        if isinstance(current, dict):
            changed[section] = dict(current)
    apply_changes(changed, changes)
    return changed


def encode_changes(changes: Sequence[StateChange]) -> bytes:
    """One log record holding ``changes`` (one batch: replayed all or not at all).

    Raises:
        TypeError: a value is not JSON-ready (ValueError: it refers to itself).
    """
    entries = [
        [change.section, change.key]
        if change.deleted
        else [change.section, change.key, change.value]
        for change in changes
    ]
    body = json.dumps(entries, separators=(",", ":")).encode()
    return encode_frame(body, magic=STATE_MAGIC)


@dataclass(frozen=True, slots=True)
class DecodedLog:
    """What a state log holds, as :func:`decode_log` read it."""

    batches: list[list[StateChange]]
    """The batches of changes of its whole records, oldest first."""
    end: int
    """Bytes of whole records: a torn tail starts here (the log's length if none)."""


def decode_log(data: bytes | memoryview) -> DecodedLog:
    """The batches of changes in a state log's bytes.

    A record cut short or damaged at the end, with no whole record after it,
    is a write a crash interrupted: its batch was never acknowledged (a store
    acknowledges a batch once its record is synced), so reading stops there,
    silently (``end`` says where; a store cuts the file back to it before it
    appends again). A whole record *after* a damaged one means the damage is
    in the middle: what it held was acknowledged and is lost, so the log is
    refused rather than replayed without it.

    Args:
        data: The bytes of the log file.

    Returns:
        The batches, and where the whole records end.

    Raises:
        StoreError: a damaged record is followed by a whole one, or a whole
            record does not hold changes (it was not written by
            :func:`encode_changes`).
    """
    view = memoryview(data)
    batches: list[list[StateChange]] = []
    offset = 0
    while offset < len(view):
        try:
            frame = read_frame(view, offset, magic=STATE_MAGIC, min_length=_MIN_BODY)
        except (TornRecord, CorruptRecord) as error:
            following = find_frame(view, offset + 1, magic=STATE_MAGIC, min_length=_MIN_BODY)
            if following is None:
                break  # a torn tail
            raise StoreError(
                f"the state log is damaged at byte {offset} ({error}) and a whole record "
                f"follows at byte {following}: acknowledged state changes are lost"
            ) from error
        batches.append(_decode_body(frame.body, offset))
        offset += frame.size
    return DecodedLog(batches, offset)


def _decode_body(body: memoryview, offset: int) -> list[StateChange]:
    """The changes of one checked record body (at ``offset`` of its log)."""
    try:
        entries = json.loads(bytes(body))
        if not isinstance(entries, list):
            raise TypeError("not a list of changes")
        changes = []
        for entry in entries:
            if not isinstance(entry, list) or len(entry) not in (2, 3):
                raise TypeError(f"{entry!r} is not a change")
            if len(entry) == 2:
                changes.append(StateChange(entry[0], entry[1], deleted=True))
            else:
                changes.append(StateChange(entry[0], entry[1], entry[2]))
    except (ValueError, TypeError) as error:
        raise StoreError(
            f"the state log's record at byte {offset} is unreadable: {error}"
        ) from error
    return changes
