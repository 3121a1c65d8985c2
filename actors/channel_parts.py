"""The parts of one channel, put together; and how they come back after a restart.
No Ray.

:class:`ChannelParts` builds the parts in the order they depend on each other,
tells the state where each section comes from, and restores them: from the
store (:meth:`ChannelParts.recover`) or, for a channel restarted without a
store, from what its coordinator remembers (:meth:`ChannelParts.seed`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raytopic.actors.channel_context import ChannelContext, fresh_start
from raytopic.actors.channel_log import ChannelLog
from raytopic.actors.channel_state import SECTIONS, ChannelState, Keep
from raytopic.actors.compactor import Compactor, NoCompaction, compactor_of
from raytopic.actors.cursors import Cursor
from raytopic.actors.dead_letters import DeadLetters
from raytopic.actors.direct_offers import OfferInbox
from raytopic.actors.owned_readers import GROUPS_FORMAT
from raytopic.actors.publisher_table import PUBLISHERS_FORMAT, PublisherTable
from raytopic.actors.readers import READERS_FORMAT, Readers
from raytopic.actors.ring_api import RingbufferApi
from raytopic.actors.session_host import SessionHost
from raytopic.actors.shared_cursor import SharedCursor
from raytopic.actors.shared_groups import SHARED_FORMAT
from raytopic.actors.stores.base import ChannelStore, StoredBatch
from raytopic.actors.stream_logs import STREAMS_FORMAT, StreamLogs
from raytopic.actors.transaction_table import TRANSACTIONS_FORMAT
from raytopic.actors.transactions import TransactionParticipant
from raytopic.core.errors import DataLossError
from raytopic.core.protocol import CursorState, Lease, ReaderLease, ReaderSpec
from raytopic.core.shared_group import SharedGroup

logger = logging.getLogger(__name__)

__all__ = ["ChannelParts"]


@dataclass(slots=True, eq=False)
class ChannelParts:
    """Every part of one channel."""

    context: ChannelContext
    log: ChannelLog
    state: ChannelState
    publishers: PublisherTable
    readers: Readers
    host: SessionHost
    dead_letters: DeadLetters
    ring_api: RingbufferApi
    transactions: TransactionParticipant
    streams: StreamLogs
    compactor: Compactor | NoCompaction

    @classmethod
    def build(
        cls,
        context: ChannelContext,
        *,
        restarted: bool,
        find_siblings: Callable[[], list[Any]] = list,
        offers: OfferInbox | None = None,
    ) -> ChannelParts:
        """The parts of a new (or restarted) channel, empty until recovered or seeded.

        Args:
            context: The channel's identity, wake-up signal and health.
            restarted: The channel's process restarted.
            find_siblings: The topic's channel actors, found by name (see
                :class:`SessionHost`).
            offers: The host's end of the direct offers (see :class:`SessionHost`).
        """
        log = ChannelLog(context)
        state = ChannelState(context, lambda: log.next_sequence, log.release)
        publishers = PublisherTable(
            context.channel, lambda pid: state.touch("publishers", pid, Keep.WITH_NEXT_WRITE)
        )
        readers: Readers
        host = SessionHost(
            context,
            lambda reader_id: readers.get(reader_id),
            lambda take: readers.take(take),
            lambda reader_id, lease: _cursor_in_process(context, readers, reader_id, lease),
            lambda take: readers.take_now(take),
            restarted=restarted,
            find_siblings=find_siblings,
            offers=offers,
        )
        readers = Readers(context, log, state, host.views, host.reader_closed)
        owned, shared = readers.owned, readers.shared
        state.provide("groups", owned.state_of, owned.state_keys, version=GROUPS_FORMAT)
        state.provide("shared", shared.state_of, shared.state_keys, version=SHARED_FORMAT)
        marks = host.marks
        state.provide("marks", lambda group: _listed(marks.get(group)), marks.keys)
        state.provide(
            "publishers", publishers.state_of, publishers.state_keys, version=PUBLISHERS_FORMAT
        )
        state.provide("readers", readers.state_of, readers.state_keys, version=READERS_FORMAT)
        transactions = TransactionParticipant(context, log, readers, state)
        table = transactions.table
        state.provide(
            "transactions", table.state_of, table.durable_keys, version=TRANSACTIONS_FORMAT
        )
        readers.owned.waits_for_commit = table.waits_for_commit
        streams = StreamLogs(context.channel)
        state.provide("streams", streams.state_of, streams.state_keys, version=STREAMS_FORMAT)
        return cls(
            context,
            log,
            state,
            publishers,
            readers,
            host,
            DeadLetters(context, log, state.save),
            RingbufferApi(context, log),
            transactions,
            streams,
            compactor_of(context, log, state),
        )

    def cursor_in_process(self, reader_id: str, lease: ReaderLease) -> CursorState:
        """The reader's cursor as reported, read in this process (what the sessions
        hosted here read of this channel), with the guard of a cursor read.

        Raises:
            ChannelFailedError: the channel has failed.
            ChannelUnavailableError: it is recovering (try again).
        """
        return _cursor_in_process(self.context, self.readers, reader_id, lease)

    def recover(self, store: ChannelStore, *, restarted: bool, fresh: bool = False) -> bool:
        """Load ``store`` (elements, groups, publishers, readers) under a new epoch, and
        write the new epoch before anything is served. Returns whether the channel
        serves now: False for a restarted channel whose store keeps no state (a
        user's, with the defaults): its elements are back, and its coordinator
        restores its groups and readers (:meth:`seed`). ``fresh``: nothing the store
        holds is this topic's (a destroyed topic's it could not remove): the
        channel starts empty, after it."""
        context, log, readers = self.context, self.log, self.readers
        saved = self.state.open(store)
        if fresh:
            log.open_after(store)
            self.state.write_snapshot()
            return True
        context.epoch = int(saved.get("epoch", 0)) + 1
        start, largest = log.open(store, int(saved.get("next_sequence", 0)))
        if restarted and not saved:
            log.load(start, largest, self._learn)
            self.transactions.recover({})  # nothing prepared was kept
            return False
        if not saved:  # a new channel's store
            saved = {section: {} for section in SECTIONS}
        self.publishers.restore_state(saved["publishers"])
        log.load(start, largest, self._learn)
        self.publishers.resume_turns()
        readers.owned.restore_state(saved["groups"])
        readers.shared.restore_state(saved["shared"])
        readers.commits_moved()
        marks = saved["marks"]
        self.host.marks.update({group: (int(v), int(n)) for group, (v, n) in marks.items()})
        readers.restore_state(saved["readers"])
        self.transactions.recover(saved["transactions"])
        self.streams.restore_state(saved["streams"])
        self.state.write_snapshot()
        log.release()
        self._log_recovered(restarted)
        return True

    def _learn(self, batch: StoredBatch) -> None:
        """A stored record seen at recovery: a transaction's, or a publisher's."""
        if not self.transactions.learn(batch):
            self.publishers.learn(batch)

    def _log_recovered(self, restarted: bool) -> None:
        context, log = self.context, self.log
        ring = log.ring
        if restarted or ring.size:
            logger.info(
                "channel %d of %s recovered: epoch %d, sequences %d..%d, %d groups",
                context.channel,
                context.name,
                context.epoch,
                ring.head,
                ring.tail,
                len(self.readers.owned.groups),
            )
        if log.damage:
            logger.error(
                "channel %d of %s: stored elements %s are damaged (checksum mismatch): "
                "lost; every reader that reaches them is told once (DataLossError)",
                context.channel,
                context.name,
                ", ".join(f"{first}..{last}" for first, last in log.damage.ranges),
            )

    def seed(
        self,
        old_epoch: int,
        groups: dict[str, tuple[Lease | None, int, int]],
        views: dict[str, dict[str, tuple[int, dict[int, Lease]]]],
        readers: dict[str, ReaderSpec],
        shared: dict[str, SharedGroup] | None,
    ) -> None:
        """Restore a channel restarted without a store (or with a store that keeps no
        state) from what its coordinator remembers: a new epoch whose positions
        follow every earlier one, each group's cursor at its start with the lease
        it had, and each reader told of the loss once (``DataLossError``) if the
        elements are gone. Arguments as in ``SeedChannel``."""
        context, log, opened = self.context, self.log, self.readers
        context.epoch = max(old_epoch + 1, 2)
        kept = log.store is not None  # a store without state: its elements are back
        first = log.ring.head if kept else fresh_start()
        if not kept:
            log.restart_at(first)
        for group, (lease, version, generation) in groups.items():
            self.host.marks[group] = (version, generation)
            if shared and group in shared:
                opened.shared.add(shared[group], SharedCursor.starting_at(first))
                continue
            cursor = opened.owned.groups[group] = Cursor.starting_at(first)
            cursor.owner = lease
        for group, members in views.items():
            self.host.views[group] = dict(members)
        for reader_id, spec in readers.items():
            opened.restore(reader_id, spec)
        # Handles drop deliveries whose jump count is below one they saw: this
        # incarnation's counts start above the old one's.
        for cursor in opened.all_cursors():
            cursor.jumps = fresh_start()
        opened.loss.unaware = set(opened.by_id)
        if kept:
            self.state.write_snapshot()  # the new epoch's whole state, versioned
            return
        opened.loss.error = DataLossError(
            f"channel {context.channel} of {context.name!r} restarted without a store "
            f"(epoch {old_epoch} -> {context.epoch}): the elements it held are lost; "
            f"continuing at {first}",
            head_sequence=first,
            channel=context.channel,
            old_epoch=old_epoch,
            new_epoch=context.epoch,
        )
        logger.warning("%s", opened.loss.error)


def _cursor_in_process(
    context: ChannelContext, readers: Readers, reader_id: str, lease: ReaderLease
) -> CursorState:
    context.check_serving()
    return readers.reported(reader_id, lease)


def _listed(mark: tuple[int, int] | None) -> list[int] | None:
    return None if mark is None else list(mark)
