"""An in-process fake Danube cluster for SDK tests: real gRPC servers on loopback port 0.

It is a test double of the *protocol*, kept faithful where the SDK depends on it:

- every broker serves Discovery; TopicLookup places an unknown topic (on ``place_on``) and
  answers the owner's URL (Connect if it is the asked broker, else Redirect);
  TopicPartitions answers ``[t]``, ``[t-part-0..]`` or ``[]``;
- a broker refuses producers/consumers/publishes for topics it does not own with
  UNAVAILABLE + ``x-danube-error-code: TOPIC_NOT_OWNED`` (+ ``x-danube-redirect``), through
  the same ErrorInterceptor the real servers use;
- PublishBatches answers every batch in order with first_offset/count, or with an
  ErrorDetail (e.g. MESSAGE_TOO_LARGE) without ending the stream; offsets are assigned
  only when a batch is accepted;
- subscriptions start at the tail; delivered-but-unacked messages of a consumer are
  redelivered when it opens a new stream; re-subscribing with the same name keeps the id.

Knobs for tests: ``ack_gate`` (clear it to hold PublishAcks: held batches are not\npublished), ``refuse_next``, ``move``,
``health_close``; observations: ``frames``, ``calls``, ``ack_batches``, topic logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc
import grpc.aio

from danube_common.errors import (
    ConsumerBusy,
    ConsumerNotFound,
    NamespaceNotFound,
    ProducerBusy,
    ProducerNotFound,
    SubscriptionTypeMismatch,
    TopicNotFound,
    TopicNotOwned,
)
from danube_common.grpc_util import bind, new_server
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.topic_name import TopicName

T = TypeVar("T")


class Signal:
    """Wake every waiter on each notify (a fresh event per generation)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    def waiter(self) -> asyncio.Event:
        return self._event


@dataclass
class FakeProducer:
    id: int
    name: str
    topic: str
    broker: int
    exclusive: bool


@dataclass
class FakeConsumer:
    id: int
    name: str
    topic: str
    subscription: str
    broker: int
    stream_gen: int = 0


@dataclass
class FakeSub:
    name: str
    sub_type: int
    cursor: int
    #: offset -> consumer id it was delivered to, until acked
    unacked: dict[int, int] = field(default_factory=dict)
    redeliver: deque[int] = field(default_factory=deque)
    acked: set[int] = field(default_factory=set)
    consumers: dict[str, int] = field(default_factory=dict)


@dataclass
class FakeTopic:
    name: str
    owner: int
    log: list[pb.StreamMessage] = field(default_factory=list)
    subs: dict[str, FakeSub] = field(default_factory=dict)
    changed: Signal = field(default_factory=Signal)


@dataclass
class Frame:
    """A PublishBatch as the broker saw it."""

    broker: int
    topic: str
    producer_id: int
    batch_seq: int
    messages: list[pb.StreamMessage]

    @property
    def count(self) -> int:
        return len(self.messages)


class FakeCluster:
    def __init__(
        self,
        brokers: int = 1,
        *,
        max_message_size_bytes: int = 1024 * 1024,
        namespaces: tuple[str, ...] = ("default",),
    ) -> None:
        self.n_brokers = brokers
        self.max_message_size_bytes = max_message_size_bytes
        self.namespaces = set(namespaces)
        self.place_on = 0
        self.urls: list[str] = []
        self.topics: dict[str, FakeTopic] = {}
        self.partitioned: dict[str, int] = {}
        self.producers: dict[int, FakeProducer] = {}
        self.consumers: dict[int, FakeConsumer] = {}
        self._ids = itertools.count(1001)
        #: PublishAcks wait for this; clear it to hold acks (batches stay unpublished).
        self.ack_gate = asyncio.Event()
        self.ack_gate.set()
        #: ErrorDetails to answer the next batches with (FIFO), instead of publishing them.
        self.refuse_next: deque[pb.ErrorDetail] = deque()
        #: Ids whose next health check answers CLOSE.
        self.health_close: set[int] = set()
        self.frames: list[Frame] = []
        self.calls: list[tuple[int, str, object]] = []
        self.ack_batches: list[pb.AckBatchRequest] = []
        self.nacks: list[pb.NackRequest] = []
        #: Whether TOPIC_NOT_OWNED errors name the new owner (x-danube-redirect).
        self.redirects = True
        #: Notified on every ownership change; streams then check what they serve.
        self.moved = Signal()
        self._servers: list[grpc.aio.Server] = []

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> FakeCluster:
        for i in range(self.n_brokers):
            server = new_server()
            svc = _Broker(self, i)
            pb_grpc.add_DiscoveryServicer_to_server(svc, server)
            pb_grpc.add_ProducerServiceServicer_to_server(svc, server)
            pb_grpc.add_ConsumerServiceServicer_to_server(svc, server)
            pb_grpc.add_HealthCheckServicer_to_server(svc, server)
            port = bind(server, "127.0.0.1:0")
            await server.start()
            self._servers.append(server)
            self.urls.append(f"http://127.0.0.1:{port}")
        return self

    async def stop(self) -> None:
        for server in self._servers:
            await server.stop(grace=None)

    async def stop_broker(self, index: int) -> None:
        """Kill one broker: its streams break and its port refuses connections."""
        await self._servers[index].stop(grace=None)

    @property
    def service_url(self) -> str:
        return self.urls[0]

    # ------------------------------------------------------------------ test controls

    def create_topic(self, name: str, *, partitions: int = 0, owner: int | None = None) -> None:
        TopicName.parse(name)
        if partitions:
            self.partitioned[name] = partitions
            for i in range(partitions):
                self._topic(f"{name}-part-{i}", create=True, owner=owner)
        else:
            self._topic(name, create=True, owner=owner)

    def move(self, topic: str, to_broker: int) -> None:
        """Give ``topic`` to another broker: streams on the old one end with TOPIC_NOT_OWNED."""
        self.topics[topic].owner = to_broker
        self.moved.notify()

    def payloads(self, topic: str) -> list[bytes]:
        return [m.payload for m in self.topics[topic].log]

    def producers_by_name(self, name: str) -> list[FakeProducer]:
        return [p for p in self.producers.values() if p.name == name]

    def calls_of(self, method: str, broker: int | None = None) -> list[object]:
        return [req for b, m, req in self.calls if m == method and (broker is None or b == broker)]

    # ------------------------------------------------------------------ internals

    def next_id(self) -> int:
        return next(self._ids)

    def _topic(self, name: str, *, create: bool, owner: int | None = None) -> FakeTopic:
        topic = self.topics.get(name)
        if topic is None:
            parsed = TopicName.parse(name)
            if parsed.namespace not in self.namespaces:
                raise NamespaceNotFound(f"namespace {parsed.namespace} does not exist")
            if not create:
                raise TopicNotFound(f"topic {name} does not exist")
            topic = FakeTopic(name, self.place_on if owner is None else owner)
            self.topics[name] = topic
        return topic

    def _owned(self, name: str, broker: int, *, create: bool) -> FakeTopic:
        topic = self._topic(name, create=create)
        if topic.owner != broker:
            redirect = self.urls[topic.owner] if self.redirects else None
            raise TopicNotOwned(f"topic {name} is not served here", redirect=redirect)
        return topic


class _Broker(
    pb_grpc.DiscoveryServicer,
    pb_grpc.ProducerServiceServicer,
    pb_grpc.ConsumerServiceServicer,
    pb_grpc.HealthCheckServicer,
):
    def __init__(self, cluster: FakeCluster, index: int) -> None:
        self.c = cluster
        self.i = index

    def _record(self, method: str, req: object) -> None:
        self.c.calls.append((self.i, method, req))

    # ------------------------------------------------------------------ Discovery

    async def TopicLookup(self, request: pb.TopicLookupRequest, context: object) -> pb.TopicLookupResponse:
        self._record("TopicLookup", request)
        topic = self.c._topic(request.topic, create=True)
        url = self.c.urls[topic.owner]
        kind = pb.TopicLookupResponse.Connect if topic.owner == self.i else pb.TopicLookupResponse.Redirect
        return pb.TopicLookupResponse(
            request_id=request.request_id, response_type=kind, connect_url=url, broker_url=url
        )

    async def TopicPartitions(
        self, request: pb.TopicLookupRequest, context: object
    ) -> pb.TopicPartitionsResponse:
        self._record("TopicPartitions", request)
        name = str(TopicName.parse(request.topic))
        if name in self.c.partitioned:
            parts = [f"{name}-part-{i}" for i in range(self.c.partitioned[name])]
        elif name in self.c.topics:
            parts = [name]
        else:
            parts = []
        return pb.TopicPartitionsResponse(request_id=request.request_id, partitions=parts)

    # ------------------------------------------------------------------ producers

    async def CreateProducer(self, request: pb.ProducerRequest, context: object) -> pb.ProducerResponse:
        self._record("CreateProducer", request)
        topic = self.c._owned(request.topic_name, self.i, create=True)
        exclusive = request.producer_access_mode == pb.Exclusive
        for p in list(self.c.producers.values()):
            if p.topic != topic.name or p.broker != self.i:
                continue
            if p.name == request.producer_name:
                del self.c.producers[p.id]  # the same producer reconnecting
            elif exclusive or p.exclusive:
                raise ProducerBusy(f"topic {topic.name} has an exclusive producer")
        prod = FakeProducer(self.c.next_id(), request.producer_name, topic.name, self.i, exclusive)
        self.c.producers[prod.id] = prod
        return pb.ProducerResponse(
            request_id=request.request_id,
            producer_id=prod.id,
            producer_name=prod.name,
            max_message_size_bytes=self.c.max_message_size_bytes,
        )

    async def CloseProducer(
        self, request: pb.CloseProducerRequest, context: object
    ) -> pb.CloseProducerResponse:
        self._record("CloseProducer", request)
        self.c.producers.pop(request.producer_id, None)
        return pb.CloseProducerResponse(request_id=request.request_id)

    async def PublishBatches(
        self, request_iterator: AsyncIterator[pb.PublishBatch], context: object
    ) -> AsyncIterator[pb.PublishAck]:
        inbox: asyncio.Queue[pb.PublishBatch | None] = asyncio.Queue()

        async def pump() -> None:
            async for req in request_iterator:
                prod = self.c.producers.get(req.producer_id)
                topic = prod.topic if prod is not None else "?"
                self.c.frames.append(Frame(self.i, topic, req.producer_id, req.batch_seq, list(req.messages)))
                await inbox.put(req)
            await inbox.put(None)

        pump_task = asyncio.create_task(pump())
        topics: set[str] = set()
        try:
            while True:
                req = await self._wait_for(inbox.get(), topics)
                if req is None:
                    return
                prod = self.c.producers.get(req.producer_id)
                if prod is None or prod.broker != self.i:
                    raise ProducerNotFound(f"no producer {req.producer_id} here")
                topics.add(prod.topic)
                topic = self.c._owned(prod.topic, self.i, create=False)
                if not self.c.ack_gate.is_set():
                    await self._wait_for(self.c.ack_gate.wait(), topics)
                yield self._publish(topic, req)
        finally:
            pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump_task

    async def _wait_for(self, aw: Awaitable[T], topics: set[str]) -> T:
        """Await ``aw``, ending the stream (TOPIC_NOT_OWNED) if one of ``topics`` moves away."""
        work = asyncio.ensure_future(aw)
        try:
            while True:
                moved = asyncio.create_task(self.c.moved.waiter().wait())
                try:
                    await asyncio.wait({work, moved}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    moved.cancel()
                for name in topics:
                    self.c._owned(name, self.i, create=False)
                if work.done():
                    return work.result()
        finally:
            work.cancel()

    def _publish(self, topic: FakeTopic, req: pb.PublishBatch) -> pb.PublishAck:
        if self.c.refuse_next:
            return pb.PublishAck(batch_seq=req.batch_seq, error=self.c.refuse_next.popleft())
        for m in req.messages:
            if len(m.payload) > self.c.max_message_size_bytes:
                return pb.PublishAck(
                    batch_seq=req.batch_seq,
                    error=pb.ErrorDetail(
                        code="MESSAGE_TOO_LARGE",
                        grpc_code=grpc.StatusCode.INVALID_ARGUMENT.value[0],
                        message=f"payload of {len(m.payload)} bytes is over the limit",
                        retryable=False,
                    ),
                )
        first = len(topic.log)
        for i, m in enumerate(req.messages):
            stored = pb.StreamMessage()
            stored.CopyFrom(m)
            stored.msg_id.producer_id = req.producer_id
            stored.msg_id.topic_name = topic.name
            stored.msg_id.broker_addr = self.c.urls[self.i]
            stored.msg_id.topic_offset = first + i
            topic.log.append(stored)
        topic.changed.notify()
        return pb.PublishAck(batch_seq=req.batch_seq, first_offset=first, count=len(req.messages))

    # ------------------------------------------------------------------ consumers

    async def Subscribe(self, request: pb.ConsumerRequest, context: object) -> pb.ConsumerResponse:
        self._record("Subscribe", request)
        topic = self.c._owned(request.topic_name, self.i, create=False)
        sub = topic.subs.get(request.subscription)
        if sub is None:
            sub = FakeSub(request.subscription, request.subscription_type, cursor=len(topic.log))
            topic.subs[sub.name] = sub
        elif sub.sub_type != request.subscription_type:
            raise SubscriptionTypeMismatch(f"subscription {sub.name} has another type")
        cid = sub.consumers.get(request.consumer_name)
        if cid is None:
            if sub.sub_type == pb.ConsumerRequest.Exclusive and sub.consumers:
                raise ConsumerBusy(f"subscription {sub.name} is exclusive and has a consumer")
            cid = self.c.next_id()
            sub.consumers[request.consumer_name] = cid
        self.c.consumers[cid] = FakeConsumer(cid, request.consumer_name, topic.name, sub.name, self.i)
        return pb.ConsumerResponse(
            request_id=request.request_id, consumer_id=cid, consumer_name=request.consumer_name
        )

    async def ReceiveBatches(
        self, request: pb.ReceiveBatchRequest, context: object
    ) -> AsyncIterator[pb.MessageBatch]:
        self._record("ReceiveBatches", request)
        cons = self.c.consumers.get(request.consumer_id)
        if cons is None or cons.broker != self.i:
            raise ConsumerNotFound(f"no consumer {request.consumer_id} here")
        cons.stream_gen += 1
        gen = cons.stream_gen
        topic = self.c._owned(cons.topic, self.i, create=False)
        sub = topic.subs[cons.subscription]
        # A new stream: what this consumer had but did not ack comes again, first.
        for off in sorted(o for o, c in sub.unacked.items() if c == cons.id):
            del sub.unacked[off]
            sub.redeliver.append(off)
        limit = request.max_messages_per_frame or 100
        while True:
            changed = topic.changed.waiter()
            self.c._owned(topic.name, self.i, create=False)
            if cons.stream_gen != gen or cons.id not in self.c.consumers:
                return
            offsets: list[int] = []
            while sub.redeliver and len(offsets) < limit:
                off = sub.redeliver.popleft()
                if off not in sub.acked:
                    offsets.append(off)
            while sub.cursor < len(topic.log) and len(offsets) < limit:
                offsets.append(sub.cursor)
                sub.cursor += 1
            if offsets:
                for off in offsets:
                    sub.unacked[off] = cons.id
                yield pb.MessageBatch(messages=[topic.log[o] for o in offsets])
                continue
            await self._wait_for(changed.wait(), {topic.name})

    def _sub_of(self, consumer_id: int, topic_name: str | None = None) -> tuple[FakeTopic, FakeSub]:
        cons = self.c.consumers.get(consumer_id)
        if cons is None or cons.broker != self.i:
            raise ConsumerNotFound(f"no consumer {consumer_id} here")
        if topic_name is not None and topic_name != cons.topic:
            raise ConsumerNotFound(f"consumer {consumer_id} is not on {topic_name}")
        topic = self.c._owned(cons.topic, self.i, create=False)
        return topic, topic.subs[cons.subscription]

    async def AckBatch(self, request: pb.AckBatchRequest, context: object) -> pb.AckResponse:
        self._record("AckBatch", request)
        self.c.ack_batches.append(request)
        _, sub = self._sub_of(request.consumer_id, request.topic_name)
        for off in request.topic_offsets:
            sub.unacked.pop(off, None)
            sub.acked.add(off)
        return pb.AckResponse(request_id=request.request_id)

    async def Ack(self, request: pb.AckRequest, context: object) -> pb.AckResponse:
        self._record("Ack", request)
        topic = self.c._owned(request.msg_id.topic_name, self.i, create=False)
        sub = topic.subs[request.subscription_name]
        sub.unacked.pop(request.msg_id.topic_offset, None)
        sub.acked.add(request.msg_id.topic_offset)
        return pb.AckResponse(request_id=request.request_id)

    async def Nack(self, request: pb.NackRequest, context: object) -> pb.NackResponse:
        self._record("Nack", request)
        self.c.nacks.append(request)
        topic = self.c._owned(request.msg_id.topic_name, self.i, create=False)
        sub = topic.subs[request.subscription_name]
        off = request.msg_id.topic_offset
        if sub.unacked.pop(off, None) is not None:
            sub.redeliver.append(off)
            topic.changed.notify()
        return pb.NackResponse(request_id=request.request_id)

    async def CloseConsumer(
        self, request: pb.CloseConsumerRequest, context: object
    ) -> pb.CloseConsumerResponse:
        self._record("CloseConsumer", request)
        cons = self.c.consumers.pop(request.consumer_id, None)
        if cons is not None:
            topic = self.c.topics[cons.topic]
            sub = topic.subs.get(cons.subscription)
            if sub is not None:
                sub.consumers.pop(cons.name, None)
                for off in sorted(o for o, c in sub.unacked.items() if c == cons.id):
                    del sub.unacked[off]
                    sub.redeliver.append(off)
                if request.unsubscribe:
                    del topic.subs[cons.subscription]
            topic.changed.notify()
        return pb.CloseConsumerResponse(request_id=request.request_id)

    # ------------------------------------------------------------------ health

    async def HealthCheck(self, request: pb.HealthCheckRequest, context: object) -> pb.HealthCheckResponse:
        self._record("HealthCheck", request)
        if request.id in self.c.health_close:
            self.c.health_close.discard(request.id)
            return pb.HealthCheckResponse(status=pb.HealthCheckResponse.CLOSE)
        return pb.HealthCheckResponse(status=pb.HealthCheckResponse.OK)
