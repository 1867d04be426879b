"""The broker's domain state: the topics it owns, and every producer and consumer by id.

This is where requests meet ownership. A topic is served only while this broker owns it:
the assignment watch (:mod:`membership`) loads and unloads topics, and a request for a topic
not loaded yet checks etcd (the watch may lag): owned here -> load; unowned -> claim it
(``auto_create_topics``); owned elsewhere -> ``TopicNotOwned`` with the owner's URL.

Ids: producer and consumer ids come from one counter seeded from the clock, so an id is never
reused by this process nor, in practice, by the next one. Ids are guessable, so they prove
nothing: with auth on, each producer and consumer records the principal that created it
(``creator``), the app's handle resolver hands it to the AuthInterceptor for id-only calls, and
a CreateProducer or Subscribe that would take over another principal's producer or consumer by
name is checked here (``takeover_check``; :mod:`danube_common.security.handles`).

Reliable topics open their log and restore their subscriptions when their metadata is adopted:
at once when the assignment watch loads them (a background task per topic), or on the first
producer or consumer. Unloading closes them in the background (cursors written, log closed);
:meth:`BrokerRegistry.wait_closed` waits for that, and a reload of the same topic waits for
its previous close before opening the log again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Literal, TypeVar

from danube_broker import ownership_spans
from danube_broker import tracing as broker_tracing
from danube_broker.background import TopicTasks
from danube_broker.config import BrokerConfig
from danube_broker.consumer import Consumer, StreamSession
from danube_broker.dispatch.base import Msg, PublishDone, PublishResult, PublishStream, SubType
from danube_broker.dispatch.reliable.dead_letter import DeadLetterSink
from danube_broker.dispatch.reliable.maintenance import Maintenance
from danube_broker.dispatch.reliable.policy_watch import PolicyWatch
from danube_broker.metrics import BrokerEvents
from danube_broker.ns_limits import NamespaceLimits
from danube_broker.producer import Producer
from danube_broker.reader import ReaderStart
from danube_broker.reliable_topic import ReliableContext
from danube_broker.schema_gate import ProducerSchema, SchemaGate
from danube_broker.stats import TopicStats
from danube_broker.subscription import Subscription
from danube_broker.takeover import LogOpener
from danube_broker.tiering import Tiering
from danube_broker.topic import Topic, not_owned
from danube_common.errors import (
    ConsumerNotFound,
    DanubeError,
    FailedPrecondition,
    InvalidArgument,
    MessageTooLarge,
    ProducerNotFound,
    ServiceShuttingDown,
    SubscriptionNotFound,
    TopicNotFound,
    TopicNotOwned,
    Unavailable,
)
from danube_common.observability import tracing
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.records import Ownership, TopicRecord, check_dispatch
from danube_common.resources import Resources
from danube_common.security.handles import creator_of
from danube_common.security.principal import Principal
from danube_common.security.rbac import Resource
from danube_common.security.rules import Handle, HandleInfo
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)

#: How many ids of producers/consumers detached by a topic unload are remembered, so that
#: their next call is told "look the topic up again" rather than "unknown id".
_GONE_IDS_KEPT = 100_000
#: How many unassignment revisions are remembered (guards a load racing an unload).
_UNASSIGNED_KEPT = 100_000

ClientKind = Literal["producer", "consumer"]
#: (caller, the attached handle, its topic and creator, the name asked for) -> None, or
#: PermissionDenied: may the caller take the handle over by its name?
TakeoverCheck = Callable[[Principal, Handle, HandleInfo, str], None]


K = TypeVar("K")
V = TypeVar("V")


def _bounded_put(d: OrderedDict[K, V], key: K, value: V, cap: int) -> None:
    d[key] = value
    d.move_to_end(key)
    while len(d) > cap:
        d.popitem(last=False)


class BrokerRegistry:
    def __init__(
        self,
        cfg: BrokerConfig,
        resources: Resources,
        *,
        broker_url: str,
        clock: Callable[[], float] = time.monotonic,
        id_seed: int | None = None,
        open_log: LogOpener | None = None,
        events: BrokerEvents | None = None,
    ) -> None:
        """``open_log`` opens a reliable topic's log (default: the WAL under ``data_dir``);
        ``events`` is told of publishes, WAL commits and topics loaded (metrics; None: nobody)."""
        self._cfg = cfg
        self._res = resources
        self.broker_id = cfg.broker_id
        self.broker_url = broker_url
        self._clock = clock
        self._next_id = id_seed if id_seed is not None else time.time_ns() // 1000
        self.topics: dict[str, Topic] = {}
        #: Moves whenever a topic is loaded or unloaded (the load report's idle path checks it).
        self.topics_version = 0
        #: When :meth:`sweep` last walked the topics' subscriptions.
        self._subs_swept_at = float("-inf")
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self._gone: OrderedDict[int, str] = OrderedDict()
        self._unassigned_at: OrderedDict[str, int] = OrderedDict()
        self.shutting_down = False
        #: Set while no topic is loaded (the lame duck waits for it).
        self.no_topics = asyncio.Event()
        self.no_topics.set()
        #: Opening and closing topics in the background; the crash flag of topics' tasks.
        self.tasks = TopicTasks()
        self.reliable = ReliableContext(
            resources,
            clock,
            self.tasks.report_failure,
            Maintenance(
                resources.store,
                flush_interval_s=cfg.cursor_flush_interval_s,
                retention_interval_s=cfg.retention_check_interval_s,
                on_failure=self.tasks.report_failure,
            ),
            PolicyWatch(resources.store, resources.keys, on_failure=self.tasks.report_failure),
            open_log=open_log,
            wal_observer=events,
        )
        self.events = events
        #: Schema references and publish checks (set by the app; None: no registry view).
        self.schemas: SchemaGate | None = None
        #: Auth on: may a caller take over another principal's producer or consumer by name
        #: (set by the app; None: auth off, names are taken over freely as in Danube).
        self.takeover_check: TakeoverCheck | None = None
        #: Namespace policies applied to loaded topics (set by the app; None: no policies).
        self.ns_limits: NamespaceLimits | None = None

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def set_dead_letter(self, sink: DeadLetterSink) -> None:
        self.reliable.dead_letter = sink

    def set_tiering(self, tiering: Tiering) -> None:
        """Object storage and the WAL uploader for reliable topics opened from now on."""
        self.reliable.tiering = tiering
        if tiering.objects is not None:
            self.reliable.retention_gate = tiering.retention_gate

    # ------------------------------------------------------------------ ownership
    def on_assigned(self, topic: TopicName, epoch: int, *, traceparent: str = "") -> None:
        """The assignment watch saw ``topic`` assigned to us at ``epoch``; ``traceparent``: the
        context the assignment carries (its load is a span of that trace)."""
        name = str(topic)
        loaded = self.topics.get(name)
        if loaded is not None:
            loaded.epoch = max(loaded.epoch, epoch)
            return
        if self.shutting_down or self._unassigned_at.get(name, 0) >= epoch:
            return
        t = self._load(topic, epoch)
        self.tasks.open(t, self._activate(t, traceparent))

    async def _activate(self, topic: Topic, traceparent: str = "") -> None:
        """A topic the watch loaded: open it now if it is reliable (restores subscriptions)."""
        with ownership_spans.loading(
            topic.name, traceparent, epoch=topic.epoch, broker_id=self.broker_id
        ) as span:
            try:
                record = await self._res.get_topic(topic.topic_name)
                if record is not None and record.dispatch_strategy == "reliable":
                    await self._adopt(topic, record)
                ownership_spans.annotate(
                    span, {"danube.topic.dispatch": record.dispatch_strategy if record else None}
                )
            except DanubeError as exc:
                tracing.record_failure(span, exc)
                if not topic.closed:
                    log.warning(
                        "topic %s: could not open it yet (%s); the next client retries", topic.name, exc
                    )

    async def _adopt(
        self, topic: Topic, record: TopicRecord, requested: str | None = None, *, client: bool = False
    ) -> None:
        """Hand ``record`` to ``topic``, after the previous instance of the topic is closed.
        ``client``: for a client's request, which waits for the opening at most
        ``topic_open_client_wait_s`` (then gets a retryable error saying what it waits for)."""
        if record.dispatch_strategy == "reliable" and topic.reliable is None:
            await self.tasks.before_open(topic.name)
        await topic.adopt(record, requested, wait_s=self._cfg.topic_open_client_wait_s if client else None)
        if self.ns_limits is not None:
            self.ns_limits.refresh(topic)

    def on_unassigned(self, topic: TopicName, revision: int) -> None:
        """The assignment watch saw our assignment of ``topic`` deleted at ``revision``."""
        name = str(topic)
        _bounded_put(self._unassigned_at, name, revision, _UNASSIGNED_KEPT)
        loaded = self.topics.get(name)
        if loaded is not None and loaded.epoch < revision:
            self.unload(name, not_owned(name, "ownership moved or was released"))

    def sync_assignments(self, assigned: dict[str, tuple[TopicName, int]], revision: int) -> None:
        """A full listing of our assignments at ``revision`` (start-up, or after a compaction)."""
        for name in [n for n in self.topics if n not in assigned]:
            if self.topics[name].epoch < revision:
                self.unload(name, not_owned(name, "ownership moved or was released"))
        for topic, epoch in assigned.values():
            self.on_assigned(topic, epoch)

    def _load(self, topic: TopicName, epoch: int) -> Topic:
        name = str(topic)
        loaded = self.topics.get(name)
        if loaded is not None:
            return loaded
        if self._unassigned_at.get(name, 0) >= epoch:
            raise not_owned(name, "ownership was released while loading")
        t = Topic(
            topic,
            epoch=epoch,
            cfg=self._cfg,
            broker_url=self.broker_url,
            reliable_ctx=self.reliable,
            clock=self._clock,
        )
        self.topics[name] = t
        self.topics_version += 1
        if self.ns_limits is not None:
            self.ns_limits.refresh(t)
        self.no_topics.clear()
        if self.events is not None:
            self.events.acquired()
        log.info("topic %s loaded (epoch %d)", name, epoch)
        return t

    def unload(self, name: str, error: TopicNotOwned) -> None:
        """Stop serving ``name``: its producers' and consumers' streams end with ``error``."""
        topic = self.topics.pop(name, None)
        if topic is None:
            return
        self.topics_version += 1
        if not self.topics:
            self.no_topics.set()
        producers, consumers = topic.close(error)
        self._forget(producers, consumers, name)
        self.tasks.close(topic)
        log.info(
            "topic %s unloaded (%d producer(s), %d consumer(s) told to look it up again)",
            name,
            len(producers),
            len(consumers),
        )

    def seal(self, topic: Topic, error: TopicNotOwned) -> None:
        """Start handing ``topic`` over: its producers are told to look it up again."""
        producers = topic.begin_seal(error)
        self._forget(producers, (), topic.name)
        log.info(
            "topic %s sealed for a move (%d producer(s) told to look it up again)", topic.name, len(producers)
        )

    def _forget(self, producers: Iterable[Producer], consumers: Iterable[Consumer], topic: str) -> None:
        for p in producers:
            self.producers.pop(p.id, None)
            _bounded_put(self._gone, p.id, topic, _GONE_IDS_KEPT)
        for c in consumers:
            self.consumers.pop(c.id, None)
            _bounded_put(self._gone, c.id, topic, _GONE_IDS_KEPT)

    async def acquire(self, topic: TopicName, *, for_producer: bool) -> Topic:
        """The loaded topic, after making sure this broker owns it (claiming it if unowned)."""
        self._check_accepting()
        name = str(topic)
        loaded = self.topics.get(name)
        if loaded is not None:
            return loaded
        own = await self._res.get_owner(topic)
        if own is None:
            if for_producer:  # the namespace exists and its max_topics has room for a new topic
                await self._res.check_topic_quota(topic, unless_exists=True)
            elif await self._res.get_topic(topic) is None:
                raise self._topic_not_found(topic)
            if not self._cfg.auto_create_topics:
                raise TopicNotOwned(
                    f"topic {name} is not assigned to any broker yet; look it up (the lookup service places it)"
                )
            own = await self._res.assign_if_unowned(topic, self.broker_id)
            if own.broker_id == self.broker_id:
                log.info("claimed unowned topic %s (epoch %d)", name, own.epoch)
        if own.broker_id != self.broker_id:
            raise await self._owned_elsewhere(topic, own)
        self._check_accepting()
        return self._load(topic, own.epoch)

    async def _owned_elsewhere(self, topic: TopicName, own: Ownership) -> TopicNotOwned:
        broker = await self._res.get_broker(own.broker_id)
        where = f"broker {own.broker_id}" + (
            f" at {broker.advertised_url}" if broker else " (not registered)"
        )
        return TopicNotOwned(
            f"topic {topic} is owned by {where}; look it up again",
            redirect=broker.advertised_url if broker else None,
        )

    @staticmethod
    def _topic_not_found(topic: TopicName) -> TopicNotFound:
        return TopicNotFound(
            f"topic {topic} does not exist: create it by attaching a producer to it, "
            f"or with `danube-admin topics create {topic}`"
        )

    def _check_accepting(self) -> None:
        if self.shutting_down:
            raise ServiceShuttingDown(f"broker {self.broker_id} is shutting down; look the topic up again")

    def _check_takeover(
        self, principal: Principal | None, handle: Handle, creator: str | None, topic: str, name: str
    ) -> None:
        """A CreateProducer / Subscribe naming an attached producer or consumer: allowed to its
        creator (a reconnect), else as :attr:`takeover_check` decides (PermissionDenied)."""
        if self.takeover_check is None or principal is None or creator == creator_of(principal):
            return
        self.takeover_check(principal, handle, HandleInfo(Resource.topic(topic), creator), name)

    def handle_info(self, handle: Handle) -> HandleInfo | None:
        """The topic and creator of an attached producer or consumer; None if not attached here."""
        if handle.kind == "producer":
            producer = self.producers.get(handle.id)
            return HandleInfo(Resource.topic(producer.topic.name), producer.creator) if producer else None
        consumer = self.consumers.get(handle.id)
        return HandleInfo(Resource.topic(consumer.topic_name), consumer.creator) if consumer else None

    # ------------------------------------------------------------------ producers
    async def create_producer(
        self,
        topic_name: str,
        producer_name: str,
        *,
        exclusive: bool,
        dispatch_strategy: str,
        schema_ref: pb.SchemaReference | None = None,
        principal: Principal | None = None,
    ) -> Producer:
        """Attach ``producer_name`` (or take it over when attached: a reconnect). ``principal``:
        the authenticated caller, recorded as the creator of a new producer (None: auth off, or
        the broker itself)."""
        topic_id = TopicName.parse(topic_name)
        if not producer_name:
            raise InvalidArgument("producer_name is required (a name unique among the topic's producers)")
        check_dispatch(dispatch_strategy)
        topic = await self.acquire(topic_id, for_producer=True)
        record = topic.record
        if record is None:
            if self._cfg.auto_create_topics:
                record, created = await self._res.create_topic(
                    topic_id, dispatch_strategy=dispatch_strategy, exist_ok=True
                )
                if created:
                    log.info("created topic %s (%s)", topic_id, dispatch_strategy)
            else:
                record = await self._res.get_topic(topic_id)
                if record is None:
                    raise self._topic_not_found(topic_id)
        await self._adopt(topic, record, dispatch_strategy, client=True)
        schema = await self._producer_schema(topic.name, schema_ref)
        attached = topic.producers.get(producer_name)
        if attached is not None:  # no await from here to the attach: the check stays true
            self._check_takeover(
                principal, Handle("producer", attached.id), attached.creator, topic.name, producer_name
            )
        elif topic.limits is not None:
            topic.limits.check_producer(topic)
        producer, created = topic.attach_producer(
            producer_name, exclusive=exclusive, new_id=self.new_id(), now=self._clock()
        )
        producer.schema = schema
        if created:
            producer.creator = creator_of(principal) if principal is not None else None
            self.producers[producer.id] = producer
            log.info("producer %d (%s) attached to %s", producer.id, producer_name, topic.name)
        return producer

    async def _producer_schema(self, topic: str, ref: pb.SchemaReference | None) -> ProducerSchema | None:
        if self.schemas is not None:
            return await self.schemas.bind_producer(topic, ref)
        if ref is not None:
            raise FailedPrecondition(
                "this broker has no schema registry view: schema references are not accepted"
            )
        return None

    def producer(self, producer_id: int, *, topic_hint: str = "") -> Producer:
        """The live producer ``producer_id`` (``topic_hint``: the topic the client thinks it is on)."""
        p = self.producers.get(producer_id)
        if p is not None:
            return p
        gone_topic = self._gone.get(producer_id)
        if gone_topic is not None:
            raise not_owned(gone_topic, "the topic moved")
        if topic_hint and topic_hint not in self.topics:
            raise not_owned(topic_hint, "not served here")
        raise ProducerNotFound(
            f"producer {producer_id} is not attached to this broker (closed, or idle for more than "
            f"{self._cfg.producer_idle_timeout_s:g}s); create the producer again"
        )

    def publish_stream_opened(self, producer: Producer) -> None:
        """A PublishBatches stream is bound to ``producer`` (it cannot expire while open)."""
        producer.open_streams += 1

    def publish_stream_closed(self, producer: Producer) -> None:
        producer.open_streams -= 1
        producer.touch(self._clock())

    def close_producer(self, producer_id: int) -> None:
        """Detach at once (frees an exclusive slot). Closing an unknown id is a no-op."""
        p = self.producers.pop(producer_id, None)
        if p is not None:
            p.topic.detach_producer(p)
            log.info("producer %d (%s) closed on %s", p.id, p.name, p.topic_name)

    def payload_bytes(self, msgs: list[Msg]) -> int:
        """Total payload size of ``msgs``; MessageTooLarge if any payload is over the limit."""
        sizes = [len(m.payload) for m in msgs]
        limit = self._cfg.max_message_size_bytes
        if sizes and max(sizes) > limit:
            index = next(i for i, s in enumerate(sizes) if s > limit)
            where = f"message {index} of the batch" if len(sizes) > 1 else "the message"
            raise MessageTooLarge(
                f"{where} has a {sizes[index]}-byte payload; the broker accepts at most {limit} bytes "
                "(max_message_size_bytes)"
            )
        return sum(sizes)

    async def publish(
        self, producer: Producer, msgs: list[Msg], nbytes: int, *, stream: PublishStream | None = None
    ) -> PublishResult:
        """Publish ``msgs`` (sizes already checked); reliable topics return once durable.
        ``stream``: the order guard of the publish stream the batch came on."""
        if not producer.live:
            raise producer.detach_error or ProducerNotFound(f"producer {producer.id} was closed")
        arrived = time.perf_counter()
        producer.touch(self._clock())
        if self.schemas is not None:
            self.schemas.check_batch(producer.topic.name, producer.schema, msgs)
        limits = producer.topic.limits
        if limits is not None:
            await limits.admit(producer.topic, msgs, nbytes)
            if not producer.live:  # detached while the batch waited
                raise producer.detach_error or ProducerNotFound(f"producer {producer.id} was closed")
        if not tracing.ENABLED:
            result = await producer.topic.publish_batch(producer, msgs, nbytes, stream=stream)
        else:
            with broker_tracing.publishing(producer.topic.name, producer.name, msgs) as spans:
                try:
                    result = await producer.topic.publish_batch(producer, msgs, nbytes, stream=stream)
                except BaseException as exc:
                    if spans is not None:
                        spans.failed(exc)
                    raise
                if spans is not None:
                    spans.finished(result.offsets, result.first_offset)
        if self.events is not None:
            self.events.published(time.perf_counter() - arrived)
        return result

    def publish_now(
        self,
        producer: Producer,
        msgs: list[Msg],
        nbytes: int,
        stream: PublishStream,
        done: PublishDone,
    ) -> bool:
        """:meth:`publish` without a task, when nothing needs waiting for (see
        ``ReliableTopic.publish_now``): True once the batch is queued (``done`` gets the result
        or the error later, from a callback); False, having done nothing, otherwise."""
        topic = producer.topic
        if not producer.live or topic.limits is not None or tracing.ENABLED:
            return False
        if self.schemas is not None:
            try:
                self.schemas.check_batch(topic.name, producer.schema, msgs)
            except DanubeError:
                return False  # publish refuses it, with the same error
        events = self.events
        if events is not None:
            done = functools.partial(_timed, events, time.perf_counter(), done)
        if not topic.publish_now(producer, msgs, nbytes, stream, done):
            return False
        producer.touch(self._clock())
        return True

    @staticmethod
    def last_sequence(producer: Producer) -> int:
        """Reliable topics: the highest sequence id stored for the producer's name (0: none)."""
        reliable = producer.topic.reliable
        return reliable.last_sequence(producer.name) if reliable is not None else 0

    # ------------------------------------------------------------------ consumers
    async def subscribe(
        self,
        topic_name: str,
        *,
        subscription: str,
        consumer_name: str,
        sub_type: SubType,
        key_filters: tuple[str, ...] = (),
        initial_position: str = "latest",
        max_unacked: int = 0,
        principal: Principal | None = None,
        reader: ReaderStart | None = None,
        read_compacted: bool = False,
    ) -> Consumer:
        """Attach a consumer (or take it over when attached: a reconnect). ``reader``: a reader
        (:mod:`danube_broker.reader`) of a reliable topic starting there. Reliable topics: a
        new subscription starts at ``initial_position`` (``latest`` or ``earliest``) and the
        consumer holds at most ``max_unacked`` unacked messages (0: the broker default); other
        topics ignore both. ``principal``: the authenticated caller, recorded as the creator of
        a new consumer. ``read_compacted``: the subscription (when this creates it) or reader
        reads the topic's compacted view below its horizon (:mod:`danube_broker.compaction`)."""
        topic_id = TopicName.parse(topic_name)
        if not subscription:
            raise InvalidArgument("subscription is required (the name of the subscription to join)")
        if not consumer_name:
            raise InvalidArgument("consumer_name is required (a name unique within the subscription)")
        topic = await self.acquire(topic_id, for_producer=False)
        record = topic.record
        if record is None:
            record = await self._res.get_topic(topic_id)
            if record is None:
                raise self._topic_not_found(topic_id)
        await self._adopt(topic, record, client=True)
        if read_compacted and not topic.is_reliable:
            raise FailedPrecondition(
                f"topic {topic.name} is not reliable: only reliable topics have a compacted view "
                "(subscribe without read_compacted)"
            )
        sub = topic.subscriptions.get(subscription)
        attached = sub.consumers.get(consumer_name) if sub is not None else None
        if attached is not None:
            self._check_takeover(
                principal, Handle("consumer", attached.id), attached.creator, topic.name, consumer_name
            )
        elif topic.limits is not None:
            topic.limits.check_consumer(topic, subscription)  # a reader counts as one too
        if reader is not None:
            consumer = await self._subscribe_reader(
                topic,
                subscription,
                consumer_name,
                reader,
                max_unacked=max_unacked,
                read_compacted=read_compacted,
            )
        else:
            consumer = await topic.subscribe_any(
                subscription=subscription,
                consumer_name=consumer_name,
                sub_type=sub_type,
                key_filters=key_filters,
                new_id=self.new_id(),
                now=self._clock(),
                initial_position=initial_position,
                max_unacked=max_unacked,
                read_compacted=read_compacted,
            )
        if self.ns_limits is not None:
            self.ns_limits.subscribed(topic)
        if consumer.id in self.consumers:
            if attached is None:  # attached meanwhile, by a Subscribe running at the same time
                self._check_takeover(
                    principal, Handle("consumer", consumer.id), consumer.creator, topic.name, consumer_name
                )
        else:
            consumer.creator = creator_of(principal) if principal is not None else None
            self.consumers[consumer.id] = consumer
            log.info(
                "consumer %d (%s) attached to %s subscription %s (%s)",
                consumer.id,
                consumer_name,
                topic.name,
                subscription,
                sub_type.value,
            )
        return consumer

    async def _subscribe_reader(
        self,
        topic: Topic,
        subscription: str,
        consumer_name: str,
        start: ReaderStart,
        *,
        max_unacked: int,
        read_compacted: bool = False,
    ) -> Consumer:
        if not topic.is_reliable:
            raise FailedPrecondition(
                f"topic {topic.name} is not reliable: a reader replays a reliable topic's log "
                "(create it with --dispatch-strategy reliable), or subscribe to it instead"
            )
        rt = topic.reliable
        if rt is None:
            raise Unavailable(f"reliable topic {topic.name} is still opening; retry")
        return await rt.subscribe_reader(
            subscription=subscription,
            consumer_name=consumer_name,
            start=start,
            new_id=self.new_id(),
            now=self._clock(),
            max_unacked=max_unacked,
            read_compacted=read_compacted,
        )

    def consumer(self, consumer_id: int) -> Consumer:
        c = self.consumers.get(consumer_id)
        if c is not None:
            return c
        gone_topic = self._gone.get(consumer_id)
        if gone_topic is not None:
            raise not_owned(gone_topic, "the topic moved")
        raise ConsumerNotFound(
            f"consumer {consumer_id} is not attached to this broker (closed, or disconnected for more "
            f"than {self._cfg.consumer_reconnect_grace_s:g}s); subscribe again"
        )

    def consumer_for_stream(self, consumer_id: int) -> Consumer:
        """Like :meth:`consumer`, but an unknown id is UNAVAILABLE: Danube clients then retry
        and subscribe again, where NOT_FOUND would silently stop their receive loop."""
        try:
            return self.consumer(consumer_id)
        except ConsumerNotFound as exc:
            raise Unavailable(exc.message) from exc

    async def close_consumer(self, consumer_id: int, *, unsubscribe: bool) -> None:
        """Detach at once; ``unsubscribe`` also deletes the subscription (on a reliable topic:
        its cursor and metadata in etcd). Unknown ids: no-op."""
        c = self.consumers.get(consumer_id)
        if c is None:
            return
        topic = self.topics.get(c.topic_name)
        sub = c.subscription
        removed = list(sub.consumers.values()) if unsubscribe else [c]
        deleted = None
        if topic is not None:
            deleted = topic.remove_consumer(c, self._clock(), unsubscribe=unsubscribe)
        for r in removed:
            self.consumers.pop(r.id, None)
        if topic is not None and deleted is not None:
            await topic.delete_subscription(deleted)
        log.info(
            "consumer %d (%s) closed on %s%s",
            c.id,
            c.name,
            c.topic_name,
            " (unsubscribed)" if unsubscribe else "",
        )

    def stream_closed(self, consumer: Consumer, session: StreamSession) -> None:
        """A delivery stream ended: the consumer is disconnected (failover promotes at once)."""
        consumer.stream_closed(session, self._clock())

    # ------------------------------------------------------------------ acks and seek
    def ack(
        self, topic_name: str, subscription: str, offsets: list[int], *, cumulative: bool = False
    ) -> None:
        """Individual acks, or (``cumulative``) everything up to the one offset given."""
        sub = self.subscription_for_ack(topic_name, subscription)
        self.topics[topic_name].ack(sub, offsets, cumulative=cumulative)

    def nack(
        self, topic_name: str, subscription: str, offset: int, *, delay_ms: int | None, reason: str
    ) -> None:
        sub = self.subscription_for_ack(topic_name, subscription)
        self.topics[topic_name].nack(sub, offset, delay_ms=delay_ms, reason=reason)

    async def seek(self, consumer_id: int, *, offset: int | None, publish_time_ms: int | None) -> int:
        """Move the consumer's subscription; return the offset it continues from."""
        consumer = self.consumer(consumer_id)
        engine = consumer.subscription.engine
        if engine is None:
            raise FailedPrecondition(
                f"topic {consumer.topic_name} is not reliable: seek needs a reliable topic (a log to replay)"
            )
        if offset is not None:
            return engine.seek(offset)
        if publish_time_ms is not None:
            return await engine.seek_to_time(publish_time_ms)
        raise InvalidArgument("seek needs a target: an offset or a publish_time_ms")

    def subscription_for_ack(self, topic_name: str, subscription: str) -> Subscription:
        topic = self.topics.get(topic_name)
        if topic is None:
            TopicName.parse(topic_name)
            raise not_owned(topic_name, "not served here")
        sub = topic.subscriptions.get(subscription)
        if sub is None:
            raise SubscriptionNotFound(f"subscription {subscription!r} does not exist on topic {topic_name}")
        return sub

    # ------------------------------------------------------------------ health and expiry
    def health(self, kind: ClientKind, client_id: int) -> bool:
        """True if the producer/consumer is known and live here (a health check is activity)."""
        now = self._clock()
        if kind == "producer":
            p = self.producers.get(client_id)
            if p is not None and p.live:
                p.touch(now)
                return True
            return False
        c = self.consumers.get(client_id)
        if c is not None and not c.closed:
            c.touch(now)
            return True
        return False

    def sweep(self) -> None:
        """Expire idle producers, disconnected consumers and empty subscriptions.

        Walks the producers and consumers attached here, and the subscriptions of non-reliable
        topics (a reliable topic's subscriptions are durable: never idle-expired). The topics are
        walked at most every quarter of ``subscription_idle_timeout_s`` (an empty subscription
        goes within 1.25 timeouts), so thousands of idle topics cost the 1 s sweep nothing most
        of the time.
        """
        cfg = self._cfg
        now = self._clock()
        for p in [p for p in self.producers.values() if p.idle_expired(now, cfg.producer_idle_timeout_s)]:
            p.topic.detach_producer(p)
            self.producers.pop(p.id, None)
            log.info("producer %d (%s) on %s expired: idle", p.id, p.name, p.topic_name)
        for c in [c for c in self.consumers.values() if c.expired(now, cfg.consumer_reconnect_grace_s)]:
            topic = self.topics.get(c.topic_name)
            if topic is None:
                continue
            topic.remove_consumer(c, now)
            self.consumers.pop(c.id, None)
            log.info("consumer %d (%s) on %s expired: no stream", c.id, c.name, topic.name)
        if now - self._subs_swept_at < cfg.subscription_idle_timeout_s / 4:
            return
        self._subs_swept_at = now
        for topic in self.topics.values():
            if topic.is_reliable or not topic.subscriptions:
                continue
            for sub in [
                s
                for s in topic.subscriptions.values()
                if s.idle_expired(now, cfg.subscription_idle_timeout_s)
            ]:
                del topic.subscriptions[sub.name]
                log.info("subscription %s on %s removed: no consumers", sub.name, topic.name)

    # ------------------------------------------------------------------ shutdown and stats
    def begin_shutdown(self) -> None:
        self.shutting_down = True

    def close_all(self, why: str) -> list[Ownership]:
        """Unload every topic (streams end with TopicNotOwned); return the ownerships held.

        Reliable topics finish closing in the background: await :meth:`wait_closed`.
        """
        held = [Ownership(name, self.broker_id, t.epoch) for name, t in self.topics.items()]
        for name in list(self.topics):
            self.unload(name, not_owned(name, why))
        return held

    async def wait_closed(self) -> None:
        """Wait for unloaded topics to close (cursors written, logs closed); cancel openings.
        With no topic left, the broker-wide maintenance loop and policy watch stop too (the
        next reliable topic starts them again)."""
        await self.tasks.wait()
        if not self.topics:
            await self.reliable.maintenance.aclose()
            await self.reliable.policy_watch.aclose()

    def stats(self) -> dict[str, TopicStats]:
        return {name: t.stats() for name, t in self.topics.items()}


def _timed(
    events: BrokerEvents,
    arrived: float,
    done: PublishDone,
    result: PublishResult | None,
    error: BaseException | None,
) -> None:
    if error is None:
        events.published(time.perf_counter() - arrived)
    done(result, error)
