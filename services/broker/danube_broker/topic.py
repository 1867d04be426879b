"""A topic owned by this broker: offsets, producers, subscriptions, and the publish path.

Publishing is batch-first: a batch gets consecutive offsets, each message's ``msg_id`` is
stamped once (producer id, exact topic name, this broker's URL, offset), and the same list of
message objects is handed to every subscription. Offsets start at 0 each time the topic is
loaded here (non-reliable topics keep nothing across moves).

Everything here is synchronous bookkeeping except :meth:`Topic.publish`, which awaits only
under the ``block`` slow-consumer policy. Metadata (etcd) is the registry's business.
"""

from __future__ import annotations

import asyncio
import logging
import time

from danube_broker.config import BrokerConfig
from danube_broker.consumer import Consumer
from danube_broker.dispatch.base import Msg, SubType
from danube_broker.dispatch.non_reliable import NonReliableDispatch
from danube_broker.producer import Producer
from danube_broker.stats import Counters, TopicStats
from danube_broker.subscription import Subscription
from danube_common.errors import DanubeError, DispatchStrategyMismatch, ProducerBusy, TopicNotOwned
from danube_common.resources import TopicRecord
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)


class Topic:
    def __init__(self, name: TopicName, *, epoch: int, cfg: BrokerConfig, broker_url: str) -> None:
        self.topic_name = name
        self.name = str(name)
        #: Ownership epoch (owner key's mod_revision) this broker holds the topic at.
        self.epoch = epoch
        self.broker_url = broker_url
        self._cfg = cfg
        #: Topic metadata from etcd, once read (None: not read yet, or the topic has none yet).
        self.record: TopicRecord | None = None
        self.next_offset = 0
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.counters = Counters()
        self.closed_error: DanubeError | None = None
        self._dispatch = NonReliableDispatch(
            lambda: self.subscriptions,
            block=cfg.slow_consumer_policy == "block",
            block_timeout_s=cfg.slow_consumer_block_timeout_s,
        )
        #: Serialises publishes under the block policy, so a blocked batch cannot be overtaken.
        self._order = asyncio.Lock()
        self._warned_reliable = False

    @property
    def closed(self) -> bool:
        return self.closed_error is not None

    def check_open(self) -> None:
        if self.closed_error is not None:
            raise self.closed_error

    # ---- metadata
    def accept_record(self, record: TopicRecord, requested: str | None = None) -> None:
        """Adopt the topic's metadata; ``requested`` is a producer's dispatch strategy."""
        if requested is not None and record.dispatch_strategy != requested:
            raise DispatchStrategyMismatch(
                f"topic {self.name} is {record.dispatch_strategy}; the producer asked for {requested}. "
                f"Create the producer with dispatch strategy {record.dispatch_strategy}, or use another topic"
            )
        self.record = record
        if record.dispatch_strategy == "reliable" and not self._warned_reliable:
            self._warned_reliable = True
            log.warning(
                "topic %s is reliable, but reliable dispatch is not implemented yet: it is served "
                "non-reliably (in memory, at-most-once) until the WAL lands",
                self.name,
            )

    # ---- producers
    def attach_producer(
        self, name: str, *, exclusive: bool, new_id: int, now: float
    ) -> tuple[Producer, bool]:
        """Attach ``name`` (or return it if attached: takeover); (producer, created)."""
        self.check_open()
        existing = self.producers.get(name)
        others = [p for p in self.producers.values() if p.name != name]
        holder = next((p for p in others if p.exclusive), None)
        if holder is not None:
            raise ProducerBusy(
                f"topic {self.name} has an exclusive producer ({holder.name!r}); "
                "no other producer can attach until it closes"
            )
        if exclusive and others:
            raise ProducerBusy(
                f"topic {self.name} already has {len(others)} other producer(s) "
                f"(e.g. {others[0].name!r}); an exclusive producer needs the topic to itself"
            )
        if existing is not None:
            existing.exclusive = exclusive
            existing.touch(now)
            return existing, False
        producer = Producer(producer_id=new_id, name=name, topic=self, exclusive=exclusive, now=now)
        self.producers[name] = producer
        return producer, True

    def detach_producer(self, producer: Producer, error: DanubeError | None = None) -> None:
        producer.detach(error)
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]

    # ---- consumers
    def subscribe(
        self,
        *,
        subscription: str,
        consumer_name: str,
        sub_type: SubType,
        key_filters: tuple[str, ...],
        new_id: int,
        now: float,
    ) -> Consumer:
        self.check_open()
        sub = self.subscriptions.get(subscription)
        if sub is None:
            sub = Subscription(
                topic_name=self.name,
                name=subscription,
                sub_type=sub_type,
                queue_messages=self._cfg.consumer_queue_messages,
                on_space=self._dispatch.on_space,
                topic_counters=self.counters,
                now=now,
            )
            consumer = sub.attach(
                consumer_name=consumer_name,
                sub_type=sub_type,
                key_filters=key_filters,
                new_id=new_id,
                now=now,
            )
            self.subscriptions[subscription] = sub
            return consumer
        return sub.attach(
            consumer_name=consumer_name, sub_type=sub_type, key_filters=key_filters, new_id=new_id, now=now
        )

    def remove_consumer(
        self, consumer: Consumer, now: float, *, unsubscribe: bool = False, error: DanubeError | None = None
    ) -> None:
        consumer.close(error)
        sub = consumer.subscription
        sub.detach(consumer, now)
        if unsubscribe and self.subscriptions.get(sub.name) is sub:
            for other in list(sub.consumers.values()):
                other.close(error)
                sub.detach(other, now)
            del self.subscriptions[sub.name]

    def consumers(self) -> list[Consumer]:
        return [c for sub in self.subscriptions.values() for c in sub.consumers.values()]

    # ---- publish
    async def publish(self, producer: Producer, msgs: list[Msg], nbytes: int) -> int:
        """Assign offsets to ``msgs``, stamp them and dispatch; return the first offset."""
        if self._dispatch.block:
            async with self._order:
                self.check_open()
                first = self._stamp(producer, msgs, nbytes)
                await self._dispatch.dispatch(msgs, nbytes)
                return first
        self.check_open()
        first = self._stamp(producer, msgs, nbytes)
        await self._dispatch.dispatch(msgs, nbytes)
        return first

    def _stamp(self, producer: Producer, msgs: list[Msg], nbytes: int) -> int:
        first = self.next_offset
        self.next_offset = first + len(msgs)
        offset = first
        pid, name, url, pname = producer.id, self.name, self.broker_url, producer.name
        now_ms = 0
        for m in msgs:
            mid = m.msg_id
            mid.producer_id = pid
            mid.topic_name = name
            mid.broker_addr = url
            mid.topic_offset = offset
            offset += 1
            if not m.producer_name:
                m.producer_name = pname
            if not m.publish_time:
                now_ms = now_ms or int(time.time() * 1000)
                m.publish_time = now_ms
        counters = self.counters
        counters.msgs_in += len(msgs)
        counters.bytes_in += nbytes
        return first

    # ---- lifecycle
    def close(self, error: DanubeError) -> tuple[list[Producer], list[Consumer]]:
        """Stop serving: every producer and consumer is detached, their streams end with ``error``.

        Returns what was detached so the caller can drop it from its indexes.
        """
        if self.closed_error is not None:
            return [], []
        self.closed_error = error
        producers = list(self.producers.values())
        consumers = self.consumers()
        for p in producers:
            p.detach(error)
        for c in consumers:
            c.close(error)
        self.producers.clear()
        self.subscriptions.clear()
        self._dispatch.notify_space()  # a publish blocked on a consumer gives up at once
        return producers, consumers

    def stats(self) -> TopicStats:
        subs = {name: sub.stats() for name, sub in self.subscriptions.items()}
        c = self.counters
        return TopicStats(
            topic=self.name,
            dispatch_strategy=self.record.dispatch_strategy if self.record else "non_reliable",
            msgs_in=c.msgs_in,
            bytes_in=c.bytes_in,
            msgs_out=c.msgs_out,
            bytes_out=c.bytes_out,
            msgs_dropped=c.msgs_dropped,
            producers=len(self.producers),
            consumers=sum(s.consumers for s in subs.values()),
            subscriptions=len(subs),
            next_offset=self.next_offset,
            per_subscription=subs,
        )


def not_owned(topic: str, why: str) -> TopicNotOwned:
    return TopicNotOwned(f"topic {topic} is no longer served by this broker ({why}); look it up again")
