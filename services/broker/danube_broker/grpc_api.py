"""gRPC servicers: protobuf in, domain calls, protobuf out. No broker logic lives here.

Errors are raised as DanubeError and turned into a status with trailing metadata
(``x-danube-error-code``) by the server's ErrorInterceptor. A refused batch on
PublishBatches (and PublishMux) is the one exception: it is answered in-band
(PublishAck.error) and the stream goes on. The multiplexed streams live in
:mod:`danube_broker.mux` (PublishMux) and :mod:`danube_broker.mux_consume` (ConsumeMux).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc.aio
from opentelemetry.trace import Span

from danube_broker import tracing as broker_tracing
from danube_broker.config import BrokerConfig
from danube_broker.consumer import Consumer
from danube_broker.dispatch.base import Msg, PublishStream, SubType
from danube_broker.mux import PublishMux, error_detail, publish_one
from danube_broker.mux_consume import ConsumeMux
from danube_broker.producer import Producer
from danube_broker.reader import ReaderStart
from danube_broker.registry import BrokerRegistry
from danube_common.aio import cancel_and_wait
from danube_common.errors import DanubeError, InvalidArgument
from danube_common.grpc_util import MAX_GRPC_MESSAGE_BYTES
from danube_common.observability import tracing
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.security.interceptor import current_principal

_SUB_TYPES = {
    pb.ConsumerRequest.Exclusive: SubType.EXCLUSIVE,
    pb.ConsumerRequest.Shared: SubType.SHARED,
    pb.ConsumerRequest.Failover: SubType.FAILOVER,
    pb.ConsumerRequest.KeyShared: SubType.KEY_SHARED,
}
_DISPATCH = {pb.NonReliable: "non_reliable", pb.Reliable: "reliable"}
_POSITIONS = {pb.ConsumerRequest.Latest: "latest", pb.ConsumerRequest.Earliest: "earliest"}
_ACCESS_MODES = {pb.Shared: False, pb.Exclusive: True}
#: Batches of one PublishBatches stream being published at once (acks still go in order), and
#: their encoded size: the stream reads no further batch while either is reached.
_PUBLISH_PIPELINE_DEPTH = 64
_PUBLISH_PIPELINE_BYTES = 8 * 1024 * 1024
#: The same bounds for a PublishMux stream, across all its producers: larger, since it carries
#: the producers of a whole client connection (each of which the SDK holds to
#: ``max_inflight_batches``); at 64 a reliable topic's fsync wait would hold back the others.
_MUX_PIPELINE_DEPTH = 4096
_MUX_PIPELINE_BYTES = 64 * 1024 * 1024
#: Messages taken from a consumer queue at a time on the one-message-per-frame stream.
_RECEIVE_MESSAGES_CHUNK = 64
#: A delivery frame must stay under gRPC's message limit (headroom for framing).
_FRAME_LIMIT_BYTES = MAX_GRPC_MESSAGE_BYTES - 64 * 1024


def _enum(table: Mapping[Any, Any], value: int, what: str) -> Any:
    try:
        return table[value]
    except KeyError:
        raise InvalidArgument(f"unknown {what} {value}; allowed: {sorted(table)}") from None


class ProducerApi(pb_grpc.ProducerServiceServicer):
    def __init__(self, registry: BrokerRegistry, cfg: BrokerConfig) -> None:
        self._reg = registry
        self._cfg = cfg

    async def CreateProducer(
        self, request: pb.ProducerRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProducerResponse:
        producer = await self._reg.create_producer(
            request.topic_name,
            request.producer_name,
            exclusive=_enum(_ACCESS_MODES, request.producer_access_mode, "producer access mode"),
            dispatch_strategy=_enum(_DISPATCH, request.dispatch_strategy, "dispatch strategy"),
            schema_ref=request.schema_ref if request.HasField("schema_ref") else None,
            principal=current_principal(),
        )
        return pb.ProducerResponse(
            request_id=request.request_id,
            producer_id=producer.id,
            producer_name=producer.name,
            max_message_size_bytes=(
                producer.topic.limits.max_message_bytes
                if producer.topic.limits is not None
                else self._cfg.max_message_size_bytes
            ),
            last_sequence_id=self._reg.last_sequence(producer),
        )

    async def SendMessage(
        self, request: pb.StreamMessage, context: grpc.aio.ServicerContext
    ) -> pb.MessageResponse:
        producer = self._reg.producer(request.msg_id.producer_id, topic_hint=request.msg_id.topic_name)
        msgs = [request]
        nbytes = self._reg.payload_bytes(msgs)
        await self._reg.publish(producer, msgs, nbytes)
        return pb.MessageResponse(request_id=request.request_id)

    async def PublishBatches(
        self, request_iterator: AsyncIterator[pb.PublishBatch], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.PublishAck]:
        """Batches are published as they arrive, up to ``_PUBLISH_PIPELINE_DEPTH`` batches or
        ``_PUBLISH_PIPELINE_BYTES`` at a time (so one stream's batches share the WAL's group
        commits), and acked in arrival order. Each batch enters its topic in arrival order (the
        publish path keeps call order) and is answered on its own: a refused batch does not
        refuse its neighbours, except that a failed WAL commit fails every batch in it or
        queued behind it."""
        requests = aiter(request_iterator)
        batch = await anext(requests, None)
        if batch is None:
            return
        producer = self._reg.producer(batch.producer_id)
        self._reg.publish_stream_opened(producer)
        order = PublishStream()
        detached = asyncio.create_task(producer.detached.wait(), name=f"producer-{producer.id}-detached")
        reader: asyncio.Task[pb.PublishBatch | None] | None = None
        inflight: collections.deque[asyncio.Task[pb.PublishAck]] = collections.deque()
        sizes: collections.deque[int] = collections.deque()
        inflight_bytes = 0
        try:
            inflight.append(self._start_publish(producer, batch, order))
            sizes.append(size := batch.ByteSize())
            inflight_bytes += size
            reader = asyncio.create_task(_next(requests), name=f"producer-{producer.id}-read")
            while inflight or reader is not None:
                waits: set[asyncio.Future[Any]] = set()
                if inflight:
                    waits.add(inflight[0])
                if (
                    reader is not None
                    and len(inflight) < _PUBLISH_PIPELINE_DEPTH
                    and inflight_bytes < _PUBLISH_PIPELINE_BYTES
                ):
                    waits.add(reader)
                if producer.live:
                    waits.add(detached)
                if waits:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                while inflight and inflight[0].done():
                    inflight_bytes -= sizes.popleft()
                    yield inflight.popleft().result()
                if not producer.live:
                    # Answer what is already being published, read nothing more.
                    if reader is not None:
                        reader.cancel()
                        reader = None
                    continue
                if reader is not None and reader.done():
                    batch = reader.result()
                    reader = None
                    if batch is not None:
                        inflight.append(self._start_publish(producer, batch, order))
                        sizes.append(size := batch.ByteSize())
                        inflight_bytes += size
                        reader = asyncio.create_task(_next(requests), name=f"producer-{producer.id}-read")
            if not producer.live and producer.detach_error is not None:
                raise producer.detach_error
        finally:
            self._reg.publish_stream_closed(producer)
            await cancel_and_wait(reader, detached, *inflight)

    def _start_publish(
        self, producer: Producer, batch: pb.PublishBatch, order: PublishStream
    ) -> asyncio.Task[pb.PublishAck]:
        return asyncio.create_task(
            self._publish_batch(producer, batch, order),
            name=f"producer-{producer.id}-batch-{batch.batch_seq}",
        )

    async def _publish_batch(
        self, producer: Producer, batch: pb.PublishBatch, order: PublishStream
    ) -> pb.PublishAck:
        if batch.producer_id not in (0, producer.id):
            err: DanubeError = InvalidArgument(
                f"this stream publishes for producer {producer.id}; open another stream for "
                f"producer {batch.producer_id}, or use PublishMux"
            )
            return pb.PublishAck(batch_seq=batch.batch_seq, error=error_detail(err))
        return await publish_one(self._reg, producer, batch, order)

    async def PublishMux(
        self, request_iterator: AsyncIterator[pb.PublishBatch], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.PublishAck]:
        """Batches of many producers on one stream (:mod:`danube_broker.mux`)."""
        events = self._reg.events
        mux = PublishMux(
            self._reg,
            depth=_MUX_PIPELINE_DEPTH,
            max_bytes=_MUX_PIPELINE_BYTES,
            on_open_close=(lambda d: events.mux_stream("publish", d)) if events is not None else None,
        )
        async for ack in mux.run(request_iterator):
            yield ack

    async def CloseProducer(
        self, request: pb.CloseProducerRequest, context: grpc.aio.ServicerContext
    ) -> pb.CloseProducerResponse:
        self._reg.close_producer(request.producer_id)
        return pb.CloseProducerResponse(request_id=request.request_id)


async def _next(requests: AsyncIterator[pb.PublishBatch]) -> pb.PublishBatch | None:
    return await anext(requests, None)


class ConsumerApi(pb_grpc.ConsumerServiceServicer):
    def __init__(self, registry: BrokerRegistry, cfg: BrokerConfig) -> None:
        self._reg = registry
        self._cfg = cfg

    async def Subscribe(
        self, request: pb.ConsumerRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumerResponse:
        consumer = await self._reg.subscribe(
            request.topic_name,
            subscription=request.subscription,
            consumer_name=request.consumer_name,
            sub_type=_enum(_SUB_TYPES, request.subscription_type, "subscription type"),
            key_filters=tuple(request.key_filters),
            initial_position=_enum(_POSITIONS, request.initial_position, "initial position"),
            max_unacked=request.max_unacked_messages,
            principal=current_principal(),
            reader=ReaderStart.from_proto(request.reader) if request.HasField("reader") else None,
            read_compacted=request.read_compacted,
        )
        return pb.ConsumerResponse(
            request_id=request.request_id,
            consumer_id=consumer.id,
            consumer_name=consumer.name,
            reader_start_offset=consumer.subscription.reader_start,
        )

    async def ReceiveMessages(
        self, request: pb.ReceiveRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamMessage]:
        consumer = self._reg.consumer_for_stream(request.consumer_id)
        subscription = consumer.subscription.name
        session = consumer.open_stream()
        try:
            while True:
                batch = await consumer.next_batch(session, _RECEIVE_MESSAGES_CHUNK)
                if batch is None:
                    return
                spans = _deliveries(consumer, batch) if tracing.ENABLED else None
                try:
                    for msg in batch:
                        out = pb.StreamMessage()
                        out.CopyFrom(msg)
                        out.subscription_name = subscription
                        if not out.request_id:
                            out.request_id = request.request_id
                        yield out
                finally:  # also when the client ends the stream as the frame goes out
                    broker_tracing.end_all(spans)
        finally:
            self._reg.stream_closed(consumer, session)

    async def ReceiveBatches(
        self, request: pb.ReceiveBatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.MessageBatch]:
        consumer = self._reg.consumer_for_stream(request.consumer_id)
        limit = self._cfg.max_messages_per_frame
        per_frame = min(request.max_messages_per_frame or limit, limit)
        session = consumer.open_stream()
        try:
            while True:
                batch = await consumer.next_batch(session, per_frame)
                if batch is None:
                    return
                spans = _deliveries(consumer, batch) if tracing.ENABLED else None
                try:
                    frames = _frames(batch)
                    for start, end in consumer.take_skipped():
                        frames[0].skipped.add(start_offset=start, next_offset=end)
                    for frame in frames:
                        yield frame
                finally:  # also when the client ends the stream as the frame goes out
                    broker_tracing.end_all(spans)
        finally:
            self._reg.stream_closed(consumer, session)

    async def Ack(self, request: pb.AckRequest, context: grpc.aio.ServicerContext) -> pb.AckResponse:
        mid = request.msg_id
        self._reg.ack(mid.topic_name, request.subscription_name, [mid.topic_offset])
        return pb.AckResponse(request_id=request.request_id)

    async def Nack(self, request: pb.NackRequest, context: grpc.aio.ServicerContext) -> pb.NackResponse:
        mid = request.msg_id
        self._reg.nack(
            mid.topic_name,
            request.subscription_name,
            mid.topic_offset,
            delay_ms=request.delay_ms if request.HasField("delay_ms") else None,
            reason=request.reason,
        )
        return pb.NackResponse(request_id=request.request_id)

    async def AckBatch(
        self, request: pb.AckBatchRequest, context: grpc.aio.ServicerContext
    ) -> pb.AckResponse:
        consumer = self._reg.consumer(request.consumer_id)
        self._reg.ack(
            request.topic_name or consumer.topic_name,
            request.subscription_name or consumer.subscription.name,
            list(request.topic_offsets),
            cumulative=request.cumulative,
        )
        return pb.AckResponse(request_id=request.request_id)

    async def ConsumeMux(
        self, request_iterator: AsyncIterator[pb.ConsumeMuxRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ConsumeMuxEvent]:
        """Deliveries and acks of many consumers on one stream (:mod:`danube_broker.mux_consume`)."""
        events = self._reg.events
        mux = ConsumeMux(
            self._reg,
            max_messages_per_frame=self._cfg.max_messages_per_frame,
            frame_limit_bytes=_FRAME_LIMIT_BYTES,
            on_open_close=(lambda d: events.mux_stream("consume", d)) if events is not None else None,
        )
        async for event in mux.run(request_iterator):
            yield event

    async def Seek(self, request: pb.SeekRequest, context: grpc.aio.ServicerContext) -> pb.SeekResponse:
        target = request.WhichOneof("target")
        offset = await self._reg.seek(
            request.consumer_id,
            offset=request.offset if target == "offset" else None,
            publish_time_ms=request.publish_time_ms if target == "publish_time_ms" else None,
        )
        return pb.SeekResponse(request_id=request.request_id, offset=offset)

    async def CloseConsumer(
        self, request: pb.CloseConsumerRequest, context: grpc.aio.ServicerContext
    ) -> pb.CloseConsumerResponse:
        await self._reg.close_consumer(request.consumer_id, unsubscribe=request.unsubscribe)
        return pb.CloseConsumerResponse(request_id=request.request_id)


def _deliveries(consumer: Consumer, batch: list[Msg]) -> list[Span] | None:
    return broker_tracing.start_deliveries(
        consumer.topic_name, consumer.subscription.name, consumer.name, batch
    )


def _frames(batch: list[Msg]) -> list[pb.MessageBatch]:
    """One MessageBatch, or several if one would pass gRPC's message size limit."""
    frame = pb.MessageBatch(messages=batch)
    if len(batch) == 1 or frame.ByteSize() <= _FRAME_LIMIT_BYTES:
        return [frame]
    half = len(batch) // 2
    return _frames(batch[:half]) + _frames(batch[half:])


class HealthApi(pb_grpc.HealthCheckServicer):
    _KINDS = {pb.HealthCheckRequest.Producer: "producer", pb.HealthCheckRequest.Consumer: "consumer"}

    def __init__(self, registry: BrokerRegistry) -> None:
        self._reg = registry

    async def HealthCheck(
        self, request: pb.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> pb.HealthCheckResponse:
        kind = _enum(self._KINDS, request.client, "health check client type")
        ok = self._reg.health(kind, request.id)
        status = pb.HealthCheckResponse.OK if ok else pb.HealthCheckResponse.CLOSE
        return pb.HealthCheckResponse(status=status)
