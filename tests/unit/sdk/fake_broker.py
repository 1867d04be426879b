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
- idempotent producers: a message whose ``sequence_id`` is not above the last one stored
  for its producer name on the topic is dropped, and the ack lists every message's offset
  (``offsets``, the first storage's offset for a duplicate) with ``duplicates`` counted;
  CreateProducer answers ``last_sequence_id``;
- the consumer side (subscriptions, redelivery, cumulative acks, seek) is in fake_consumer.py;
- it serves no multiplexed streams: PublishMux and ConsumeMux answer UNIMPLEMENTED, as a broker
  without them does, so these tests run the SDK's per-topic streams (its fallback); the mux
  path is tested against real brokers (tests/integration/test_sdk_mux.py).

Knobs for tests: ``ack_gate`` (clear it to hold PublishAcks: held batches are not
published), ``refuse_next`` (after a retryable refusal, the stream's later batches are refused
too, as the real broker's order guard does), ``break_after_publish`` (store the next batches, then end the
stream with UNAVAILABLE instead of acking: a lost ack), ``move``, ``health_close``, ``compact``
(read_compacted subscriptions then get the compacted view), ``append`` (store a message directly);
observations: ``frames``, ``calls``, ``ack_batches``, ``nacks``, ``seeks``, topic logs,
``unknown_duplicates`` (sequence ids dropped as duplicates that were never stored: must stay
empty).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import TypeVar

import grpc
import grpc.aio

from danube_common.errors import (
    NamespaceNotFound,
    ProducerBusy,
    ProducerNotFound,
    TopicNotFound,
    TopicNotOwned,
    Unavailable,
)
from danube_common.grpc_util import bind, new_server
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.pb import SchemaRegistry_pb2_grpc as spb_grpc
from danube_common.topic_name import TopicName
from tests.unit.sdk.fake_consumer import ConsumerSide
from tests.unit.sdk.fake_registry import FakeRegistry
from tests.unit.sdk.fake_state import FakeConsumer, FakeProducer, FakeTopic, Frame, Signal

T = TypeVar("T")


class FakeCluster:
    def __init__(
        self,
        brokers: int = 1,
        *,
        max_message_size_bytes: int = 1024 * 1024,
        namespaces: tuple[str, ...] = ("default",),
        server_credentials: grpc.ServerCredentials | None = None,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    ) -> None:
        self.n_brokers = brokers
        #: Serve TLS with these (URLs are then https://127.0.0.1:port); None: plaintext.
        self.server_credentials = server_credentials
        self.interceptors = tuple(interceptors)
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
        self.seeks: list[pb.SeekRequest] = []
        #: Store the next N batches, then end the stream (UNAVAILABLE) instead of acking them.
        self.break_after_publish = 0
        #: (topic, producer name, sequence id) dropped as duplicates but never stored.
        self.unknown_duplicates: list[tuple[str, str, int]] = []
        #: Whether TOPIC_NOT_OWNED errors name the new owner (x-danube-redirect).
        self.redirects = True
        #: Notified on every ownership change; streams then check what they serve.
        self.moved = Signal()
        #: The schema registry, served on the service URL (broker 0) as the lookup serves it.
        self.registry = FakeRegistry()
        self._servers: list[grpc.aio.Server] = []

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> FakeCluster:
        for i in range(self.n_brokers):
            server = new_server(self.interceptors)
            svc = _Broker(self, i)
            pb_grpc.add_DiscoveryServicer_to_server(svc, server)
            pb_grpc.add_ProducerServiceServicer_to_server(svc, server)
            pb_grpc.add_ConsumerServiceServicer_to_server(svc, server)
            pb_grpc.add_HealthCheckServicer_to_server(svc, server)
            if i == 0:
                spb_grpc.add_SchemaRegistryServicer_to_server(self.registry, server)
            if self.server_credentials is None:
                port = bind(server, "127.0.0.1:0")
                url = f"http://127.0.0.1:{port}"
            else:
                port = server.add_secure_port("127.0.0.1:0", self.server_credentials)
                url = f"https://127.0.0.1:{port}"
            await server.start()
            self._servers.append(server)
            self.urls.append(url)
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

    def compact(self, topic: str, horizon: int | None = None) -> None:
        """Compact ``topic`` below ``horizon`` (default: its log end): read_compacted
        subscriptions are then given only the compacted view below it (fake_consumer.py)."""
        t = self.topics[topic]
        t.compaction_horizon = len(t.log) if horizon is None else horizon

    def append(self, topic: str, payload: bytes, *, key: str | None = None, notify: bool = True) -> int:
        """Store a message as a producer's publish would; return its offset. ``notify=False``:
        streams are not woken (they see it after their next wake-up, or on a new attach)."""
        t = self.topics[topic]
        offset = len(t.log)
        m = pb.StreamMessage(payload=payload, publish_time=offset + 1, producer_name="fake")
        if key is not None:
            m.routing_key = key
        m.msg_id.topic_name = topic
        m.msg_id.topic_offset = offset
        t.log.append(m)
        if notify:
            t.changed.notify()
        return offset

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
    ConsumerSide,
    pb_grpc.DiscoveryServicer,
    pb_grpc.ProducerServiceServicer,
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

    async def NamespaceTopics(
        self, request: pb.NamespaceTopicsRequest, context: object
    ) -> pb.NamespaceTopicsResponse:
        self._record("NamespaceTopics", request)
        prefix = f"/{request.namespace}/"
        listed = []
        for name in sorted(self.c.topics):
            if name.startswith(prefix):
                base = TopicName.parse(name).base
                of = str(base) if str(base) in self.c.partitioned else ""
                listed.append(pb.NamespaceTopic(name=name, partition_of=of))
        return pb.NamespaceTopicsResponse(request_id=request.request_id, topics=listed)

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
            last_sequence_id=topic.sequences.get(prod.name, 0),
        )

    async def CloseProducer(
        self, request: pb.CloseProducerRequest, context: object
    ) -> pb.CloseProducerResponse:
        self._record("CloseProducer", request)
        self.c.producers.pop(request.producer_id, None)
        return pb.CloseProducerResponse(request_id=request.request_id)

    async def PublishMux(
        self, request_iterator: AsyncIterator[pb.PublishBatch], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.PublishAck]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this fake serves no PublishMux")
        yield pb.PublishAck()  # unreachable: abort raises

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
        refused: pb.ErrorDetail | None = None  # the broker's order guard, as the real one keeps it
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
                if refused is not None:
                    # A batch behind a refused one is refused too: it must not overtake it.
                    yield pb.PublishAck(batch_seq=req.batch_seq, error=refused)
                    continue
                ack = self._publish(topic, prod.name, req)
                if ack.HasField("error") and ack.error.retryable:
                    refused = ack.error
                if self.c.break_after_publish > 0 and not ack.HasField("error"):
                    self.c.break_after_publish -= 1
                    raise Unavailable("connection reset (fake: the ack was lost)")
                yield ack
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

    def _publish(self, topic: FakeTopic, producer_name: str, req: pb.PublishBatch) -> pb.PublishAck:
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
        offsets: list[int] = []
        duplicates = 0
        for m in req.messages:
            seq = m.sequence_id
            if seq and seq <= topic.sequences.get(producer_name, 0):
                duplicates += 1
                first_time = topic.seq_offsets.get((producer_name, seq))
                if first_time is None:
                    self.c.unknown_duplicates.append((topic.name, producer_name, seq))
                    first_time = 2**64 - 1
                offsets.append(first_time)
                continue
            stored = pb.StreamMessage()
            stored.CopyFrom(m)
            stored.msg_id.producer_id = req.producer_id
            stored.msg_id.topic_name = topic.name
            stored.msg_id.broker_addr = self.c.urls[self.i]
            stored.msg_id.topic_offset = len(topic.log)
            offsets.append(len(topic.log))
            topic.log.append(stored)
            if seq:
                topic.sequences[producer_name] = seq
                topic.seq_offsets[(producer_name, seq)] = offsets[-1]
        topic.changed.notify()
        first = offsets[0] if offsets else len(topic.log)
        ack = pb.PublishAck(batch_seq=req.batch_seq, first_offset=first, count=len(req.messages))
        if duplicates:
            ack.offsets.extend(offsets)
            ack.duplicates = duplicates
        return ack

    # ------------------------------------------------------------------ health

    async def HealthCheck(self, request: pb.HealthCheckRequest, context: object) -> pb.HealthCheckResponse:
        self._record("HealthCheck", request)
        if request.id in self.c.health_close:
            self.c.health_close.discard(request.id)
            return pb.HealthCheckResponse(status=pb.HealthCheckResponse.CLOSE)
        return pb.HealthCheckResponse(status=pb.HealthCheckResponse.OK)
