"""What one channel holds of transactions: staged elements kept apart from the ring,
prepared ones kept durable, and finished ones' outcomes. No Ray, no I/O.

A transaction touches a channel in up to three steps (see
``raytopic.actors.transactions`` for who calls them)::

    staged    elements published in the transaction arrived; they hold room
              and no reader sees them. Not durable: a restart drops them, and
              the transaction's prepare then fails (the holder sent a count).
    prepared  the holder is about to commit: the staged elements (one payload)
              and the consumed commits here were checked and are durable.
    done      the outcome: "commit" (the elements were appended as one record,
              the commits applied) or "abort" (dropped). Kept until the holder
              says every participant finished, so a retried call or a
              participant asking the transaction's lead gets the same answer.

The lead of a transaction is one of its participants; its "done" entry IS the
transaction's decision.

What a store keeps of an entry (``TransactionEntry.to_state``) is a dict of
builtins, JSON-ready, in format ``TRANSACTIONS_FORMAT`` (the channel's state
records each section's format and refuses another with ``StoreError``: see
``raytopic.actors.channel_state``). A prepared entry's elements are one record
in the store's own checksummed record format (``raytopic.actors.stores.frames``),
base64-encoded: nothing of raytopic's classes is pickled.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from raytopic.actors.stores.base import StoredBatch
from raytopic.actors.stores.frames import (
    CorruptRecord,
    TornRecord,
    decode_record,
    encode_record,
    read_frame,
)
from raytopic.core.errors import (
    InvalidArgumentError,
    StoreError,
    TransactionAbortedError,
    TransactionFencedError,
)
from raytopic.core.payloads import Payload, encode_values
from raytopic.core.protocol import FENCED, Address, ConsumedCommit, Outcome, ReaderLease

__all__ = [
    "TransactionEntry",
    "TransactionTable",
    "aborted_error",
    "epoch_of",
    "transactional_id_of",
]

TRANSACTIONS_FORMAT = 1
"""The format version of what a store keeps of a transaction (``TransactionEntry.to_state``:
the channel state's ``transactions`` section)."""

KEEP_DONE = 10_000
"""Finished transactions a channel remembers (the oldest are forgotten first); a
holder forgets each one as soon as every participant finished it."""


@dataclass(slots=True, eq=False)
class TransactionEntry:
    """One transaction at this channel."""

    key: str
    transactional_id: str
    deadline: float
    """Wall-clock time after which an unfinished transaction is aborted."""
    began: float
    """Wall-clock time it first touched this channel."""
    payloads: list[Payload] = field(default_factory=list)
    staged: int = 0
    phase: str = "staged"
    lead: Address | None = None
    commits: tuple[ConsumedCommit, ...] = ()
    outcome: Outcome | None = None
    reason: str = ""
    runs: tuple[tuple[int, int], ...] = ()
    """(first, count) of the elements appended here, once committed."""

    @property
    def done(self) -> bool:
        return self.phase == "done"

    def payload(self) -> Payload | None:
        """The staged elements as one payload (one record when appended)."""
        payloads = self.payloads
        if not payloads:
            return None
        if len(payloads) == 1:
            return payloads[0]
        values: list[Any] = []
        keys: list[Any] = []
        for part in payloads:
            values.extend(part.decode())
            part_keys = part.keys
            keys.extend([None] * len(part) if part_keys is None else part_keys)
        keyed = any(key is not None for key in keys)
        return encode_values(values, keys if keyed else None)

    def to_state(self) -> dict[str, Any]:
        """What a store keeps of a prepared or finished transaction (JSON-ready)."""
        state: dict[str, Any] = {
            "id": self.transactional_id,
            "deadline": self.deadline,
            "began": self.began,
            "phase": self.phase,
        }
        if self.done:
            state.update(
                outcome=self.outcome, reason=self.reason, runs=[list(r) for r in self.runs]
            )
            return state
        payload = self.payload()
        state.update(
            staged=self.staged,
            lead=None if self.lead is None else list(self.lead),
            commits=[commit.to_state() for commit in self.commits],
            payload=None if payload is None else _payload_state(payload),
        )
        return state

    @classmethod
    def from_state(cls, key: str, state: dict[str, Any]) -> TransactionEntry:
        """The entry a store kept (``to_state``).

        Raises:
            StoreError: its elements are damaged.
        """
        entry = cls(key, state["id"], float(state["deadline"]), float(state["began"]))
        entry.phase = state["phase"]
        if entry.done:
            entry.outcome, entry.reason = Outcome(state["outcome"]), state.get("reason", "")
            entry.runs = tuple((int(first), int(count)) for first, count in state["runs"])
            return entry
        payload = state.get("payload")
        if payload is not None:
            entry.payloads = [_payload_of(key, payload)]
        entry.staged = int(state["staged"])
        lead = state.get("lead")
        entry.lead = None if lead is None else Address(lead[0], lead[1], lead[2], int(lead[3]))
        entry.commits = tuple(ConsumedCommit.from_state(c) for c in state["commits"])
        return entry


def _payload_state(payload: Payload) -> str:
    """The elements as one record of the store's format, base64-encoded."""
    record = b"".join(bytes(part) for part in encode_record(StoredBatch(0, 0.0, payload)))
    return base64.b64encode(record).decode()


def _payload_of(key: str, text: str) -> Payload:
    """The elements ``_payload_state`` wrote.

    Raises:
        StoreError: the record is damaged.
    """
    try:
        frame = read_frame(memoryview(base64.b64decode(text)), 0)
        return decode_record(frame).payload
    except (ValueError, TornRecord, CorruptRecord) as error:
        raise StoreError(
            f"the stored elements of transaction {key} are damaged: {error}"
        ) from error


def epoch_of(key: str) -> int:
    """The incarnation a transaction key belongs to (keys are ``id@epoch.number``)."""
    return int(key.rsplit("@", 1)[1].split(".", 1)[0])


def transactional_id_of(key: str) -> str:
    """The transactional id a transaction key belongs to (keys are ``id@epoch.number``)."""
    return key.rsplit("@", 1)[0]


def aborted_error(entry: TransactionEntry, channel: int) -> TransactionAbortedError:
    """The error a call about an aborted transaction raises."""
    if entry.reason == FENCED:
        return TransactionFencedError(
            f"transaction {entry.key} was aborted: a newer holder of transactional id "
            f"{entry.transactional_id!r} exists",
            FENCED,
        )
    return TransactionAbortedError(
        f"transaction {entry.key} was aborted (at channel {channel}): {entry.reason}",
        entry.reason,
    )


class TransactionTable:
    """The transactions one channel knows, and the room their staged elements hold."""

    def __init__(self) -> None:
        self.entries: dict[str, TransactionEntry] = {}
        self._open: dict[str, TransactionEntry] = {}  # not done: what takes look at
        self._done: OrderedDict[str, TransactionEntry] = OrderedDict()  # oldest first
        self.reserved = 0
        """Elements staged or prepared here: room the ring keeps for them."""
        self.fenced: dict[str, int] = {}
        """Transactional id -> its oldest incarnation not fenced (in memory: a
        restart drops staged elements anyway)."""

    def get(self, key: str) -> TransactionEntry | None:
        return self.entries.get(key)

    def open_entries(self) -> Iterator[TransactionEntry]:
        """The transactions not finished here (staged or prepared)."""
        return iter(list(self._open.values()))

    @property
    def has_open(self) -> bool:
        return bool(self._open)

    def for_staging(
        self, key: str, transactional_id: str, deadline: float, now: float, channel: int
    ) -> TransactionEntry:
        """The entry that takes more staged elements (made on first use).

        Raises:
            TransactionAbortedError: it was aborted (TransactionFencedError: fenced).
            InvalidArgumentError: it is already committing or committed.
        """
        entry = self.entries.get(key)
        if entry is None and epoch_of(key) < self.fenced.get(transactional_id, 0):
            entry = self._add(TransactionEntry(key, transactional_id, deadline, now))
            self.finish(entry, Outcome.ABORT, FENCED)
        if entry is None:
            return self._add(TransactionEntry(key, transactional_id, deadline, now))
        if entry.outcome == Outcome.ABORT:
            raise aborted_error(entry, channel)
        if entry.phase != "staged":
            raise InvalidArgumentError(
                f"transaction {key} is already {entry.phase}: publish nothing more in it"
            )
        return entry

    def stage(self, entry: TransactionEntry, payload: Payload) -> None:
        """Keep ``payload`` in ``entry``, holding room for it."""
        entry.payloads.append(payload)
        entry.staged += len(payload)
        self.reserved += len(payload)

    def prepare(
        self, entry: TransactionEntry, lead: Address, commits: tuple[ConsumedCommit, ...]
    ) -> None:
        """``entry`` is checked and about to be made durable: one payload from now on."""
        payload = entry.payload()
        entry.payloads = [] if payload is None else [payload]
        entry.lead, entry.commits, entry.phase = lead, commits, "prepared"

    def finish(
        self,
        entry: TransactionEntry,
        outcome: Outcome,
        reason: str = "",
        runs: tuple[tuple[int, int], ...] = (),
    ) -> None:
        """``entry`` is done: its room is free, its elements appended (runs) or dropped."""
        if not entry.done:
            self.reserved -= entry.staged
            del self._open[entry.key]
        entry.payloads, entry.commits = [], ()
        entry.phase, entry.outcome, entry.reason, entry.runs = "done", outcome, reason, runs
        self._done[entry.key] = entry
        while len(self._done) > KEEP_DONE:  # the oldest finished go first
            del self.entries[self._done.popitem(last=False)[0]]

    def record(
        self, key: str, transactional_id: str, deadline: float, now: float
    ) -> TransactionEntry:
        """An entry for a transaction this channel never saw staged (made on first use)."""
        entry = self.entries.get(key)
        if entry is None:
            entry = self._add(TransactionEntry(key, transactional_id, deadline, now))
        return entry

    def _add(self, entry: TransactionEntry) -> TransactionEntry:
        self.entries[entry.key] = entry
        (self._done if entry.done else self._open)[entry.key] = entry
        return entry

    def forget(self, key: str) -> bool:
        """Drop a finished transaction; True if it was known and done."""
        entry = self.entries.get(key)
        if entry is None or not entry.done:
            return False
        del self.entries[key], self._done[key]
        return True

    def fence(self, transactional_id: str, epoch: int) -> list[TransactionEntry]:
        """Incarnations of the id below ``epoch`` are fenced; returns their staged
        transactions here (to abort). Prepared ones wait for their lead's word."""
        if epoch <= self.fenced.get(transactional_id, 0):
            return []
        self.fenced[transactional_id] = epoch
        if len(self.fenced) > KEEP_DONE:
            del self.fenced[next(iter(self.fenced))]
        return [
            entry
            for entry in self.open_entries()
            if entry.transactional_id == transactional_id
            and entry.phase == "staged"
            and epoch_of(entry.key) < epoch
        ]

    def waits_for_commit(self, group: str, lease: ReaderLease) -> bool:
        """Whether ``group``'s cursor here waits for a prepared transaction's commit:
        only the member that made it reads on meanwhile (another would read again
        what the transaction may commit). ``lease`` None: whether any member's commit
        is prepared (a seek to the commit waits for it)."""
        for entry in self._open.values():
            if entry.phase == "prepared":
                for commit in entry.commits:
                    if commit.group == group and commit.lease != lease:
                        return True
        return False

    def expired(self, now: float) -> list[TransactionEntry]:
        """Staged transactions past their deadline (their holder is gone or late)."""
        return [e for e in self.open_entries() if e.phase == "staged" and e.deadline <= now]

    def in_doubt(self, now: float, grace: float) -> list[TransactionEntry]:
        """Prepared transactions whose outcome has not come for ``grace`` seconds."""
        return [e for e in self.open_entries() if e.phase == "prepared" and e.began + grace <= now]

    def restore(self, saved: dict[str, Any]) -> None:
        """Load what a store kept (prepared and finished transactions)."""
        for key, state in saved.items():
            entry = self._add(TransactionEntry.from_state(key, state))
            if not entry.done:
                self.reserved += entry.staged

    def state_of(self, key: str) -> dict[str, Any] | None:
        """What a store keeps of ``key`` (None: nothing: gone, or only staged)."""
        entry = self.entries.get(key)
        if entry is None or entry.phase == "staged":
            return None
        return entry.to_state()

    def durable_keys(self) -> list[str]:
        return [key for key, entry in self.entries.items() if entry.phase != "staged"]

    def describe(self, now: float) -> list[dict[str, Any]]:
        """The open transactions here: id, key, phase, age (seconds), staged elements."""
        return [
            {
                "id": entry.transactional_id,
                "key": entry.key,
                "phase": entry.phase,
                "age": round(max(0.0, now - entry.began), 3),
                "staged": entry.staged,
            }
            for entry in self.open_entries()
        ]
