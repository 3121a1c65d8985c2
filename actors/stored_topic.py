"""A channel's store through its topic's life: opened when the channel starts, begun
when its coordinator says so (the topic in it reopened, or wiped first), marked
destroyed and removed with the topic. No Ray.

A channel that starts (not a restart) opens its store and reads the record of the
topic it holds (``raytopic.core.topic_record``), writing nothing: the coordinator
compares every channel's record with the settings asked and either refuses the
topic (nothing was written) or tells each channel to begin (:meth:`StoredTopic.begin`).
A restarted channel begins at once, its topic having begun before, unless its store
says the topic was destroyed (a destroy under way: the coordinator's retried call
removes the store), or the cluster does (its store went, or is going: the channel
opens nothing, writes nothing and refuses every request but the life cycle's).

A channel takes the id of the topic its store holds: a reopened topic is the same
topic, and positions saved before its actors went name it still.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from raytopic.actors.channel_context import ChannelContext
from raytopic.actors.channel_parts import ChannelParts
from raytopic.actors.stores.base import ChannelStore
from raytopic.actors.stores.opening import open_store
from raytopic.core.errors import ChannelFailedError, StoreError, TopicError, TopicNotFoundError
from raytopic.core.topic_record import TopicRecord

logger = logging.getLogger(__name__)

__all__ = ["StoredTopic"]


class StoredTopic:
    """The store of one channel, through its topic's life.

    Args:
        context: The channel's identity (its config names the topic's id).
        parts: The channel's parts (loaded from the store when it begins).
        restarted: The channel's process restarted.
        destroyed: The cluster recorded this channel's topic destroyed before its
            store was removed (``raytopic.core.destroyed``): the restarted channel
            must not open a store that may be empty now, and so say nothing of it.
    """

    def __init__(
        self,
        context: ChannelContext,
        parts: ChannelParts,
        *,
        restarted: bool,
        destroyed: bool = False,
    ) -> None:
        self._context = context
        self._parts = parts
        self._restarted = restarted
        self._destroyed = destroyed
        self.store: ChannelStore | None = None
        """The store (None: the topic keeps its elements in memory)."""
        self.record: TopicRecord | None = None
        """What the store held when opened (None: nothing recorded)."""
        self._opening_error: TopicError | None = None

    def open(self) -> bool:
        """Open the store and read what it holds; a restarted channel also loads it.
        Returns whether the channel serves now (a new channel with a store waits for
        :meth:`begin`; one restarted without a store, for its coordinator's seed).

        Never raises (an actor whose ``__init__`` raises is dead for good, its name
        freed): a store that cannot be opened (``open_store``'s StoreError,
        InvalidArgumentError, InvalidTypeError), or a restart whose store says its
        topic was destroyed (TopicNotFoundError; the store is kept, for
        :meth:`remove`), fails the channel saying why (:attr:`opening_error`).
        """
        context = self._context
        if self._destroyed:  # a retried RemoveStore opens the store to remove what is left
            context.end_waits(f"topic {context.name!r} was destroyed")
            return False
        try:
            return self._open()
        except Exception as error:
            if isinstance(error, TopicError):
                self._opening_error = error
            if self._restarted:
                logger.exception("channel %d of %s cannot recover", context.channel, context.name)
            context.failure = (
                f"channel {context.channel} of topic {context.name!r} could not recover its "
                f"store: {error}"
            )
            return False

    @property
    def opening_error(self) -> TopicError | None:
        """Why the store could not be opened, as a typed error naming it (a failed
        channel's: a StoreError saying why it failed), or None."""
        if self._opening_error is None and self._context.failure is not None:
            return StoreError(self._context.failure)
        return self._opening_error

    def _open(self) -> bool:
        context = self._context
        store = open_store(context.config, context.channel, restarted=self._restarted)
        if store is None:
            return not self._restarted
        self.store = store
        self.record = TopicRecord.from_state(store.load_state() or {})
        if self.record is not None:
            self._adopt(self.record.topic_id)
        if not self._restarted:
            return False
        if self.record is not None and self.record.destroyed:
            raise TopicNotFoundError(f"topic {context.name!r} was destroyed")
        return self._parts.recover(store, restarted=True)

    async def begin(self, topic_id: str, wipe: bool) -> None:
        """Load the store under ``topic_id`` and write the new epoch (a new channel, once
        its coordinator compared every channel's store); ``wipe``: first remove what
        it holds (a destroyed topic's), and start empty. Once: a channel that began
        (or restarted meanwhile, and so began) changes nothing.

        Raises:
            ChannelFailedError: the channel has failed.
            StoreError: the store could not be wiped or written.
        """
        context = self._context
        if context.seeded.is_set() or self.store is None:
            return
        if context.failure is not None:
            raise ChannelFailedError(context.failure)
        self._adopt(topic_id)
        store = self.store
        if wipe:
            await asyncio.to_thread(store.destroy)
            reopened = self.store = open_store(context.config, context.channel)
            assert reopened is not None
            store = reopened
        self._parts.recover(store, restarted=False, fresh=wipe)
        context.seeded.set()

    async def mark_destroyed(self) -> None:
        """Record in the store, durably, that the topic was destroyed. From now on the
        channel refuses every request but the life cycle's with TopicNotFoundError
        (a channel restarted since the destroy ended its waits has not heard it):
        an append after this would meet the store removed under it.

        Raises:
            ChannelFailedError: the record could not be written.
        """
        self._context.end_waits(f"topic {self._context.name!r} was destroyed")
        await self._parts.state.mark_destroyed()

    async def remove(self) -> None:
        """Remove what the store holds; nothing is written to it afterwards (appends are
        refused: its store is closed).

        Raises:
            StoreError: the store could not be removed.
        """
        await self._parts.state.close()
        await self._parts.log.close()
        store = self.store
        if store is None and self._context.config.store is not None:
            # It could not be opened (a restart after its directory went): what a
            # crash left of it is removed all the same (opening writes nothing).
            store = open_store(self._context.config, self._context.channel)
        if store is not None:
            await asyncio.to_thread(store.destroy)

    def _adopt(self, topic_id: str) -> None:
        """The topic is the one the store holds: its id."""
        config = self._context.config
        if config.topic_id != topic_id:
            self._context.config = dataclasses.replace(config, topic_id=topic_id)
