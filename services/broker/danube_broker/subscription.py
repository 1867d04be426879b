"""A subscription: its type, its consumers (in attach order) and the router that splits batches.

The type is fixed by the first consumer. Attaching a consumer whose name is already attached
is a takeover: the same :class:`Consumer` (and id) is returned. Exclusive subscriptions refuse
a second consumer name while the first is attached (until it closes or expires).

On a reliable topic the subscription also has an ``engine``
(:class:`~danube_broker.dispatch.reliable.engine.SubscriptionEngine`) that delivers from the
log through the same router; it is told whenever the routable consumers change, and the
subscription is durable (never removed for being idle).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import islice
from typing import TYPE_CHECKING

from danube_broker.consumer import Consumer
from danube_broker.dispatch.base import Msg, Router, SubType
from danube_broker.dispatch.exclusive import ExclusiveRouter
from danube_broker.dispatch.failover import FailoverRouter
from danube_broker.dispatch.key_shared import KeySharedRouter, compile_key_filters
from danube_broker.dispatch.shared import SharedRouter
from danube_broker.stats import Counters, Rate, SubscriptionStats
from danube_common.errors import ConsumerBusy, SubscriptionTypeMismatch

if TYPE_CHECKING:
    from danube_broker.dispatch.reliable.engine import SubscriptionEngine


def new_router(sub_type: SubType) -> Router:
    if sub_type is SubType.EXCLUSIVE:
        return ExclusiveRouter()
    if sub_type is SubType.SHARED:
        return SharedRouter()
    if sub_type is SubType.FAILOVER:
        return FailoverRouter()
    return KeySharedRouter()


class Subscription:
    #: A reader's subscription (:mod:`danube_broker.reader`): in memory only, gone with its
    #: consumer, ignored by retention and by a move's drain.
    non_durable: bool = False
    #: Readers: the offset the reader was (re)positioned at by its latest Subscribe.
    reader_start: int = 0

    def __init__(
        self,
        *,
        topic_name: str,
        name: str,
        sub_type: SubType,
        queue_messages: int,
        on_space: Callable[[], None] | None,
        topic_counters: Counters,
        now: float,
    ) -> None:
        self.topic_name = topic_name
        self._topic_counters = topic_counters
        self.name = name
        self.sub_type = sub_type
        self.router = new_router(sub_type)
        #: Consumers by name; dict order is attach order (failover picks the first connected).
        self.consumers: dict[str, Consumer] = {}
        self._queue_messages = queue_messages
        self._on_space = on_space
        #: When the subscription last lost its last consumer (or was created).
        self.empty_since = now
        self.msgs_out = 0
        self.bytes_out = 0
        self.msgs_dropped = 0
        #: Acks and nacks received (no-ops on non-reliable topics, counted for visibility).
        self.acks = 0
        self.nacks = 0
        #: Reliable topics: the engine delivering from the log (set by the topic).
        self.engine: SubscriptionEngine | None = None
        self.rate_out = Rate()

    # ---- membership
    def attach(
        self,
        *,
        consumer_name: str,
        sub_type: SubType,
        key_filters: tuple[str, ...],
        new_id: int,
        now: float,
        window: int = 0,
    ) -> Consumer:
        """Attach (or take over) ``consumer_name``; ``new_id`` is used only for a new consumer.

        ``window``: reliable topics, the consumer's most unacked messages (0: non-reliable).
        """
        if sub_type is not self.sub_type:
            raise SubscriptionTypeMismatch(
                f"subscription {self.name!r} on {self.topic_name} is {self.sub_type.value}; "
                f"a consumer asked for {sub_type.value}. Use the same type, or another subscription name"
            )
        compiled = compile_key_filters(key_filters)
        existing = self.consumers.get(consumer_name)
        if existing is not None:
            if window:
                existing.set_window(window)
            changed = existing.resubscribed(now)
            if existing.key_filters != key_filters:
                existing.set_key_filters(key_filters, compiled)
                changed = True
            if changed:
                self.consumers_changed()
            return existing
        if self.sub_type is SubType.EXCLUSIVE and self.consumers:
            holder = next(iter(self.consumers.values()))
            raise ConsumerBusy(
                f"subscription {self.name!r} on {self.topic_name} is exclusive and consumer "
                f"{holder.name!r} is attached; use another subscription name, or a Shared, Failover "
                "or KeyShared subscription"
            )
        consumer = Consumer(
            consumer_id=new_id,
            name=consumer_name,
            subscription=self,
            key_filters=key_filters,
            key_filter_re=compiled,
            queue_messages=window or self._queue_messages,
            on_space=self._on_space,
            now=now,
            window=window,
        )
        self.consumers[consumer_name] = consumer
        self.consumers_changed()
        return consumer

    def detach(self, consumer: Consumer, now: float) -> None:
        """Forget ``consumer`` (already closed by the caller)."""
        if self.consumers.get(consumer.name) is consumer:
            del self.consumers[consumer.name]
            if not self.consumers:
                self.empty_since = now
            self.consumers_changed()

    def consumers_changed(self) -> None:
        """Re-feed the router with the routable consumers, in attach order."""
        self._topic_counters.changed()  # the load report counts consumers
        self.router.set_consumers([c for c in self.consumers.values() if c.routable])
        if self._on_space is not None:  # a newly connected consumer may unblock a publish
            self._on_space()
        if self.engine is not None:
            self.engine.on_consumers_changed()

    def idle_expired(self, now: float, idle_s: float) -> bool:
        if self.engine is not None:
            return False  # durable: removed only by unsubscribing
        return not self.consumers and now - self.empty_since > idle_s

    @property
    def active_consumer(self) -> Consumer | None:
        """Failover and exclusive: the consumer that receives; None for the other types."""
        if self.sub_type in (SubType.FAILOVER, SubType.EXCLUSIVE):
            return next((c for c in self.consumers.values() if c.routable), None)
        return None

    # ---- dispatch (non-reliable)
    def offer(self, batch: list[Msg], nbytes: int | None) -> list[Msg]:
        """Queue ``batch`` on the consumers; return what did not fit (consumer queues full).

        Messages no consumer can take are counted as dropped here. ``nbytes`` is the batch's
        payload size when known (saves a pass over the messages on the common path).
        """
        routing = self.router.route(batch)
        topic = self._topic_counters
        if routing.unroutable:
            self.msgs_dropped += routing.unroutable
            topic.msgs_dropped += routing.unroutable
        overflow = routing.overflow
        enqueued = 0
        delivered: list[list[Msg]] = []
        for target, msgs in routing.assignments:
            consumer: Consumer = target  # type: ignore[assignment]
            n = consumer.deliver(msgs)
            enqueued += n
            if n < len(msgs):
                overflow = [*overflow, *islice(msgs, n, None)]
                delivered.append(msgs[:n])
            else:
                delivered.append(msgs)
        if enqueued:
            if nbytes is None or enqueued != len(batch):
                nbytes = sum(len(m.payload) for msgs in delivered for m in msgs)
            self.msgs_out += enqueued
            self.bytes_out += nbytes
            self.rate_out.add(enqueued, time.monotonic())
            topic.msgs_out += enqueued
            topic.bytes_out += nbytes
            if topic.watch is not None:
                topic.moved()
        return overflow

    def drop(self, msgs: list[Msg]) -> None:
        """Give up on ``msgs`` (slow-consumer policy): count them as dropped."""
        self.msgs_dropped += len(msgs)
        self._topic_counters.msgs_dropped += len(msgs)

    def backlog(self) -> int:
        """Non-reliable: messages waiting in the consumer queues; reliable: published, not acked."""
        if self.engine is not None:
            return self.engine.backlog()
        return sum(len(c.queue) for c in self.consumers.values())

    def stats(self, now: float | None = None) -> SubscriptionStats:
        """A snapshot; ``now`` is the engine's clock (reliable), else the monotonic clock."""
        consumers = len(self.consumers)
        connected = sum(1 for c in self.consumers.values() if c.connected)
        e = self.engine
        if e is None:
            return SubscriptionStats(
                name=self.name,
                sub_type=self.sub_type.value,
                consumers=consumers,
                connected_consumers=connected,
                msgs_out=self.msgs_out,
                bytes_out=self.bytes_out,
                msgs_dropped=self.msgs_dropped,
                acks=self.acks,
                nacks=self.nacks,
                backlog=self.backlog(),
                msg_rate_out=self.rate_out.value(time.monotonic()),
            )
        return SubscriptionStats(
            name=self.name,
            sub_type=self.sub_type.value,
            consumers=consumers,
            connected_consumers=connected,
            msgs_out=self.msgs_out,
            bytes_out=self.bytes_out,
            msgs_dropped=e.dropped_total,
            acks=e.acks_total,
            nacks=e.nacks_total,
            backlog=self.backlog(),
            cursor=e.cursor if e.cursor >= 0 else None,
            unacked_in_flight=e.unacked_in_flight,
            pending_redeliveries=e.pending_redeliveries,
            delivered_total=e.delivered_total,
            redelivered_total=e.redelivered_total,
            dead_lettered_total=e.dead_lettered_total,
            dropped_total=e.dropped_total,
            blocked_at=e.blocked_at,
            msg_rate_out=e.rate_out.value(now if now is not None else time.monotonic()),
            read_error=e.read_error,
            skipped_total=e.skipped_total,
            delayed=e.delayed,
        )
