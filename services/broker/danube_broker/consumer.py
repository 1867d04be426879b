"""A consumer: its bounded queue, its one delivery stream at a time, and its liveness.

A consumer is *connected* while it has an open ReceiveMessages/ReceiveBatches stream. It is
*routable* (messages are routed to it) while connected, and also between a Subscribe and the
stream that follows it, so that what is published right after Subscribe returns is queued for
it. A stream ending makes it unroutable at once (failover promotes the next consumer) until it
opens a stream or subscribes again. Opening a second stream ends the first (one stream per
consumer). The stream handler waits in :meth:`Consumer.next_batch`, which returns queued
messages, ``None`` when the stream was ended normally (consumer closed), or raises the
error the stream must end with (topic moved, broker stopping, replaced by a newer stream).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from danube_broker.dispatch.base import Msg, SubType
from danube_broker.dispatch.queue import BoundedBatchQueue
from danube_common.errors import ConsumerBusy, DanubeError

if TYPE_CHECKING:
    from danube_broker.subscription import Subscription


#: Skipped ranges remembered per consumer until its next frame (the oldest are dropped).
_SKIPPED_KEPT = 64


class StreamSession:
    """One open delivery stream of a consumer."""

    __slots__ = ("_wake", "end_error", "ended", "notify")

    def __init__(self, notify: Callable[[], None] | None = None) -> None:
        self._wake = asyncio.Event()
        self.ended = False
        self.end_error: DanubeError | None = None
        #: Called on every wake and on the end (a multiplexed stream serving many consumers
        #: from one task learns which ones have something for it).
        self.notify = notify

    def end(self, error: DanubeError | None = None) -> None:
        """End the stream: normally (``None``) or with ``error``. Idempotent."""
        if not self.ended:
            self.ended = True
            self.end_error = error
            self._wake.set()
            if self.notify is not None:
                self.notify()

    def wake(self) -> None:
        self._wake.set()
        if self.notify is not None:
            self.notify()


class Consumer:
    def __init__(
        self,
        *,
        consumer_id: int,
        name: str,
        subscription: Subscription,
        key_filters: tuple[str, ...],
        key_filter_re: re.Pattern[str] | None,
        queue_messages: int,
        on_space: Callable[[], None] | None,
        now: float,
        window: int = 0,
    ) -> None:
        self.id = consumer_id
        self.name = name
        #: The principal that subscribed it (``danube_common.security.handles.creator_of``);
        #: None with auth off. With auth on, id-only calls are its creator's (see the README).
        self.creator: str | None = None
        self.subscription = subscription
        self.key_filters = key_filters
        self._key_filter_re = key_filter_re
        self.queue: BoundedBatchQueue[Msg] = BoundedBatchQueue(queue_messages, on_space=on_space)
        self._session: StreamSession | None = None
        #: Subscribed (or subscribed again) and its stream not open yet.
        self._awaiting_stream = True
        #: When the consumer last showed life without a stream (subscribe, stream end, health
        #: check); a disconnected consumer expires ``consumer_reconnect_grace_s`` after this.
        self.last_seen = now
        self.closed = False
        self.msgs_delivered = 0
        #: Reliable topics: most delivered-but-unacked messages it may hold (0: non-reliable,
        #: where only the queue bounds it). The reliable engine fills ``unacked``.
        self.window = window
        self.unacked: set[int] = set()
        #: Offsets the subscription skipped (gone from the log), not told to this consumer yet.
        self.skipped: list[tuple[int, int]] = []

    # ---- identity as routers see it
    @property
    def topic_name(self) -> str:
        return self.subscription.topic_name

    @property
    def sub_type(self) -> SubType:
        return self.subscription.sub_type

    @property
    def free(self) -> int:
        """Messages it can take now: its window's room (reliable) or its queue's room."""
        if self.window:
            return self.window - len(self.unacked)
        return self.queue.free

    def note_skipped(self, start: int, end: int) -> None:
        """The subscription skipped ``[start, end)``: tell the consumer with its next frame."""
        if self.skipped and self.skipped[-1][1] == start:
            self.skipped[-1] = (self.skipped[-1][0], end)
        else:
            self.skipped.append((start, end))
            del self.skipped[:-_SKIPPED_KEPT]

    def take_skipped(self) -> list[tuple[int, int]]:
        out, self.skipped = self.skipped, []
        return out

    def set_window(self, window: int) -> None:
        """Reliable topics: a new window (takeover); the queue always fits the window."""
        self.window = window
        self.queue.capacity = max(self.queue.capacity, window)

    def accepts(self, key: str) -> bool:
        return self._key_filter_re is None or self._key_filter_re.match(key) is not None

    def set_key_filters(self, filters: tuple[str, ...], compiled: re.Pattern[str] | None) -> None:
        self.key_filters = filters
        self._key_filter_re = compiled

    # ---- liveness
    @property
    def connected(self) -> bool:
        return self._session is not None

    @property
    def routable(self) -> bool:
        """Routers send to it: it is streaming, or has just subscribed and is about to."""
        return self._session is not None or self._awaiting_stream

    def resubscribed(self, now: float) -> bool:
        """Subscribe again (takeover): routable until its next stream; True if that changed."""
        self.last_seen = now
        if self.routable:
            return False
        self._awaiting_stream = True
        return True

    def touch(self, now: float) -> None:
        self.last_seen = now

    def expired(self, now: float, grace_s: float) -> bool:
        return not self.closed and self._session is None and now - self.last_seen > grace_s

    # ---- delivery
    def deliver(self, msgs: list[Msg]) -> int:
        """Queue as many of ``msgs`` as fit (a prefix); return how many."""
        n = self.queue.offer(msgs)
        if n:
            self.msgs_delivered += n
            if self._session is not None:
                self._session.wake()
        return n

    def open_stream(self, notify: Callable[[], None] | None = None) -> StreamSession:
        """Start a delivery stream; a stream already open for this consumer is ended.
        ``notify``: see :attr:`StreamSession.notify`."""
        if self.closed:
            raise AssertionError(f"consumer {self.id} is closed")
        was_routable = self.routable
        old = self._session
        session = StreamSession(notify)
        self._session = session
        self._awaiting_stream = False
        if old is not None:
            old.end(ConsumerBusy(f"consumer {self.id} ({self.name}) is now served by a newer stream"))
            engine = self.subscription.engine
            if engine is not None:
                # What went out on the old stream may never have arrived: deliver it again.
                engine.reclaim(self)
        if not was_routable:
            self.subscription.consumers_changed()
        return session

    def stream_closed(self, session: StreamSession, now: float) -> None:
        """The handler of ``session`` is done (client went away, or the stream was ended)."""
        session.end()
        if self._session is session:
            self._session = None
            self._awaiting_stream = False
            self.last_seen = now
            if not self.closed:
                self.subscription.consumers_changed()

    def poll_batch(self, session: StreamSession, max_messages: int) -> list[Msg] | None:
        """:meth:`next_batch` without waiting: queued messages (``[]`` if none yet), None when
        the stream was ended normally; raises its end error otherwise."""
        if session.ended:
            if session.end_error is not None:
                raise session.end_error
            return None
        return self.queue.take(max_messages)

    async def next_batch(self, session: StreamSession, max_messages: int) -> list[Msg] | None:
        """Wait for queued messages (up to ``max_messages``, at least one).

        Returns None when the stream was ended normally; raises its end error otherwise.
        """
        while True:
            if session.ended:
                if session.end_error is not None:
                    raise session.end_error
                return None
            batch = self.queue.take(max_messages)
            if batch:
                return batch
            session._wake.clear()
            await session._wake.wait()

    def close(self, error: DanubeError | None = None) -> int:
        """Detach for good: end the stream (with ``error``, if given) and drop what is queued.

        Returns how many queued messages were discarded. The caller removes the consumer
        from its subscription and from the broker's id index. On a reliable topic the queue is
        left for the subscription's engine, which takes its messages back for redelivery.
        """
        self.closed = True
        self._awaiting_stream = False
        if self._session is not None:
            self._session.end(error)
            self._session = None
        if self.window:
            return 0
        return self.queue.clear()
