"""A topic owned by this broker: producers, subscriptions, sealing and closing, stamping.

Publishing is batch-first: a batch gets consecutive offsets, each message's ``msg_id`` is
stamped once (producer id, exact topic name, this broker's URL, offset).

Where offsets come from and how batches reach subscriptions is the topic's storage strategy
(:mod:`danube_broker.topic_storage`), chosen once from its metadata:

- **Non-reliable** topics (:class:`~danube_broker.topic_storage.InMemoryStorage`) hand the
  same list of message objects to every subscription. Offsets start at 0 each time the topic is
  loaded here (they keep nothing across moves).
- **Reliable** topics (metadata ``dispatch_strategy == "reliable"``,
  :class:`~danube_broker.topic_storage.ReliableStorage`) open a
  :class:`~danube_broker.reliable_topic.ReliableTopic` when their metadata is adopted
  (:meth:`Topic.adopt`): the log, the durable subscriptions and their engines live there.

Topic metadata is read by the registry and handed over with :meth:`Topic.adopt`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from danube_broker.config import BrokerConfig
from danube_broker.consumer import Consumer
from danube_broker.dispatch.base import Msg, PublishDone, PublishResult, PublishStream, SubType
from danube_broker.producer import Producer
from danube_broker.reliable_topic import ReliableContext, ReliableTopic
from danube_broker.stats import Counters, LoadFigures, Rate, TopicStats
from danube_broker.subscription import Subscription
from danube_broker.topic_storage import InMemoryStorage, ReliableStorage, TopicStorage
from danube_common.errors import (
    DanubeError,
    DispatchStrategyMismatch,
    FailedPrecondition,
    ProducerBusy,
    TopicNotOwned,
)
from danube_common.records import TopicRecord
from danube_common.topic_name import TopicName

if TYPE_CHECKING:
    from danube_broker.ns_limits import TopicLimits

log = logging.getLogger(__name__)


class Topic:
    def __init__(
        self,
        name: TopicName,
        *,
        epoch: int,
        cfg: BrokerConfig,
        broker_url: str,
        reliable_ctx: ReliableContext | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic_name = name
        self.name = str(name)
        #: Ownership epoch (owner key's mod_revision) this broker holds the topic at.
        self.epoch = epoch
        self.broker_url = broker_url
        self._cfg = cfg
        #: Topic metadata from etcd, once read (None: not read yet, or the topic has none yet).
        self.record: TopicRecord | None = None
        #: The record says ``reliable`` (kept with ``record``: the sweep and the load report read
        #: it for every topic).
        self.is_reliable = False
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.counters = Counters()
        self.closed_error: DanubeError | None = None
        #: Set while the topic is being handed to another broker: producers are refused (and
        #: told to look the topic up again), consumers keep draining what is stored.
        self.sealing_error: DanubeError | None = None
        self._clock = clock
        self.rate_in = Rate()
        self.bytes_rate_in = Rate()
        self._reliable_ctx = reliable_ctx
        #: Offsets and dispatch: in memory until a reliable record is accepted (then for good).
        self.storage: TopicStorage = InMemoryStorage(self, cfg)
        #: Namespace policy limits in force (None: none; set by the registry's NamespaceLimits).
        self.limits: TopicLimits | None = None
        #: What :meth:`close` took out of service, for :meth:`aclose`.
        self._closed_subscriptions: list[Subscription] = []

    @property
    def closed(self) -> bool:
        return self.closed_error is not None

    def check_open(self) -> None:
        if self.closed_error is not None:
            raise self.closed_error

    def check_accepting(self) -> None:
        """Open, and not being handed over: producers may attach and publish."""
        self.check_open()
        if self.sealing_error is not None:
            raise self.sealing_error

    def begin_seal(self, error: DanubeError) -> list[Producer]:
        """Refuse producers from now on; detach those attached (their streams end with ``error``)."""
        self.sealing_error = error
        producers = list(self.producers.values())
        for p in producers:
            p.detach(error)
        self.producers.clear()
        return producers

    def end_seal(self) -> None:
        """The hand-over was abandoned: accept producers again."""
        self.sealing_error = None

    # ---- metadata
    @property
    def reliable(self) -> ReliableTopic | None:
        """Reliable topics: the log and durable subscriptions, once open (else None)."""
        return self.storage.reliable

    def accept_record(self, record: TopicRecord, requested: str | None = None) -> None:
        """Adopt the topic's metadata; ``requested`` is a producer's dispatch strategy."""
        if requested is not None and record.dispatch_strategy != requested:
            raise DispatchStrategyMismatch(
                f"topic {self.name} is {record.dispatch_strategy}; the producer asked for {requested}. "
                f"Create the producer with dispatch strategy {record.dispatch_strategy}, or use another topic"
            )
        self.record = record
        self.is_reliable = record.dispatch_strategy == "reliable"
        if record.dispatch_strategy == "reliable" and isinstance(self.storage, InMemoryStorage):
            self.storage = ReliableStorage(self, self._cfg, self._reliable_ctx)

    async def adopt(
        self, record: TopicRecord, requested: str | None = None, *, wait_s: float | None = None
    ) -> None:
        """:meth:`accept_record`, then have the storage open what it needs (a reliable topic:
        its log and subscriptions, once; see :meth:`ReliableStorage.open
        <danube_broker.topic_storage.ReliableStorage.open>`, which ``wait_s`` bounds)."""
        self.accept_record(record, requested)
        await self.storage.open(record, wait_s=wait_s)

    # ---- producers
    def attach_producer(
        self, name: str, *, exclusive: bool, new_id: int, now: float
    ) -> tuple[Producer, bool]:
        """Attach ``name`` (or return it if attached: takeover); (producer, created)."""
        self.check_accepting()
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
        self.counters.changed()
        return producer, True

    def detach_producer(self, producer: Producer, error: DanubeError | None = None) -> None:
        producer.detach(error)
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
            self.counters.changed()

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
        """Non-reliable topics: attach a consumer at once (any topic: :meth:`subscribe_any`)."""
        return self._in_memory().add_consumer(
            subscription=subscription,
            consumer_name=consumer_name,
            sub_type=sub_type,
            key_filters=key_filters,
            new_id=new_id,
            now=now,
        )

    async def subscribe_any(
        self,
        *,
        subscription: str,
        consumer_name: str,
        sub_type: SubType,
        key_filters: tuple[str, ...],
        new_id: int,
        now: float,
        initial_position: str = "latest",
        max_unacked: int = 0,
        read_compacted: bool = False,
    ) -> Consumer:
        """:meth:`subscribe`, or on a reliable topic a durable subscription (created in etcd)."""
        return await self.storage.subscribe(
            subscription=subscription,
            consumer_name=consumer_name,
            sub_type=sub_type,
            key_filters=key_filters,
            new_id=new_id,
            now=now,
            initial_position=initial_position,
            max_unacked=max_unacked,
            read_compacted=read_compacted,
        )

    def remove_consumer(
        self, consumer: Consumer, now: float, *, unsubscribe: bool = False, error: DanubeError | None = None
    ) -> Subscription | None:
        """Detach ``consumer``; with ``unsubscribe`` also its subscription, which is returned
        (a reliable one must then be deleted with :meth:`delete_subscription`)."""
        consumer.close(error)
        sub = consumer.subscription
        sub.detach(consumer, now)
        if sub.non_durable and not sub.consumers and self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]  # a reader's subscription goes with its consumer
            rt = self.reliable
            if rt is not None:
                rt.drop_reader(sub)
            return None
        if unsubscribe and self.subscriptions.get(sub.name) is sub:
            for other in list(sub.consumers.values()):
                other.close(error)
                sub.detach(other, now)
            del self.subscriptions[sub.name]
            return sub
        return None

    async def delete_subscription(self, sub: Subscription) -> None:
        """The durable part of unsubscribing (reliable topics): engine, metadata, cursor."""
        await self.storage.delete_subscription(sub)

    def consumers(self) -> list[Consumer]:
        return [c for sub in self.subscriptions.values() for c in sub.consumers.values()]

    # ---- publish
    async def publish_batch(
        self, producer: Producer, msgs: list[Msg], nbytes: int, *, stream: PublishStream | None = None
    ) -> PublishResult:
        """Publish ``msgs`` (sizes already checked) through the topic's storage."""
        return await self.storage.publish(producer, msgs, nbytes, stream=stream)

    def publish_now(
        self,
        producer: Producer,
        msgs: list[Msg],
        nbytes: int,
        stream: PublishStream,
        done: PublishDone,
    ) -> bool:
        """:meth:`publish_batch` without a task, when the storage can (see its ``publish_now``)."""
        return self.storage.publish_now(producer, msgs, nbytes, stream, done)

    async def publish(self, producer: Producer, msgs: list[Msg], nbytes: int) -> int:
        """Non-reliable topics: assign offsets to ``msgs``, stamp them and dispatch; return the
        first offset (any topic: :meth:`publish_batch`)."""
        return await self._in_memory().dispatch(producer, msgs, nbytes)

    def _in_memory(self) -> InMemoryStorage:
        storage = self.storage
        if not isinstance(storage, InMemoryStorage):
            raise FailedPrecondition(f"topic {self.name} is reliable: publish and subscribe through its log")
        return storage

    def stamp(self, producer: Producer, msgs: list[Msg], first: int, now_ms: int) -> None:
        """Fill each message's ``msg_id`` (offsets from ``first``), and its producer name and
        publish time when the producer left them empty (``now_ms``: 0 = read the clock)."""
        offset = first
        pid, name, url, pname = producer.id, self.name, self.broker_url, producer.name
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

    def count_in(self, msgs: int, nbytes: int) -> None:
        counters = self.counters
        counters.msgs_in += msgs
        counters.bytes_in += nbytes
        if counters.watch is not None:
            counters.moved()
        now = self._clock()
        self.rate_in.add(msgs, now)
        self.bytes_rate_in.add(nbytes, now)

    # ---- acks
    def ack(self, sub: Subscription, offsets: list[int], *, cumulative: bool = False) -> None:
        """Individual acks, or (``cumulative``: exclusive and failover subscriptions only)
        everything up to the one offset given. Non-reliable topics only count them."""
        self.counters.changed()  # the backlog moves
        if cumulative:
            if sub.sub_type not in (SubType.EXCLUSIVE, SubType.FAILOVER):
                raise FailedPrecondition(
                    f"subscription {sub.name!r} on {self.name} is {sub.sub_type.value}: cumulative acks "
                    "need an Exclusive or Failover subscription (ack each message instead)"
                )
            if len(offsets) != 1:
                raise FailedPrecondition(
                    f"a cumulative ack takes exactly one offset (every message up to it), got {len(offsets)}"
                )
        if sub.engine is None:
            sub.acks += len(offsets)
        elif cumulative:
            sub.engine.ack_through(offsets[0])
        else:
            sub.engine.ack(offsets)

    def nack(self, sub: Subscription, offset: int, *, delay_ms: int | None, reason: str) -> None:
        self.counters.changed()
        if sub.engine is None:
            sub.nacks += 1
        else:
            sub.engine.nack(offset, delay_ms=delay_ms, reason=reason)

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
        self.storage.stop()
        for p in producers:
            p.detach(error)
        for c in consumers:
            c.close(error)
        self.producers.clear()
        self._closed_subscriptions = list(self.subscriptions.values())
        self.subscriptions.clear()
        return producers, consumers

    async def aclose(self) -> None:
        """After :meth:`close`: write the cursors and close the log (reliable topics).

        Waits for an opening in progress (it closes what it opened when it sees the topic closed).
        """
        await self.storage.aclose(self._closed_subscriptions)
        self._closed_subscriptions = []

    def traffic(self) -> int:
        """Messages in plus messages out so far: it moves whenever the topic carries anything (the
        load report reads a topic's full figures only when this moved, or at a full refresh)."""
        c = self.counters
        return c.msgs_in + c.msgs_out

    def watch_traffic(self, woken: set[str]) -> None:
        """Add this topic's name to ``woken`` (once) when it next carries a message, or an ack or a
        nack comes, or a producer or consumer comes or goes (the load report's idle path)."""
        self.counters.watch = (woken, self.name)

    def load_figures(self) -> LoadFigures:
        """What the load report takes from this topic, without a :meth:`stats` snapshot (the
        report reads every topic each interval): counters, backlog, producers, consumers."""
        c = self.counters
        backlog = consumers = 0
        for sub in self.subscriptions.values():
            backlog += sub.backlog()
            consumers += len(sub.consumers)
        return (c.msgs_in, c.bytes_in, c.msgs_out, c.bytes_out, backlog, len(self.producers), consumers)

    def stats(self) -> TopicStats:
        now = self._clock()
        subs = {name: sub.stats(now) for name, sub in self.subscriptions.items()}
        c = self.counters
        st = self.storage.stats()
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
            next_offset=st.next_offset,
            per_subscription=subs,
            msg_rate_in=self.rate_in.value(now),
            bytes_rate_in=self.bytes_rate_in.value(now),
            msg_rate_out=sum(s.msg_rate_out for s in subs.values()),
            durability=st.durability,
            first_offset=st.first_offset,
            local_first_offset=st.local_first_offset,
            wal_bytes=st.wal_bytes,
            wal_segments=st.wal_segments,
            tiered=st.tiered,
            log_stint=st.log_stint,
            state=st.state,
            accepted_gaps=st.accepted_gaps,
        )


def not_owned(topic: str, why: str) -> TopicNotOwned:
    return TopicNotOwned(f"topic {topic} is no longer served by this broker ({why}); look it up again")
