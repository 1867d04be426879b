"""The consumer side of the fake broker (tests/unit/sdk/fake_broker.py): a servicer mixin.

Faithful where the SDK depends on it:

- a new subscription starts at the tail (``Latest``) or at offset 0 (``Earliest``); an
  existing one keeps its position;
- delivered-but-unacked messages of a consumer are redelivered, first, when it opens a new
  stream, and after a nack; every delivery after the first carries ``redelivery_count``;
- ``AckBatch(cumulative=true)`` acknowledges everything up to its single offset (exclusive
  and failover subscriptions only, FAILED_PRECONDITION otherwise);
- ``Seek`` moves the cursor to an offset or to the first message published at or after a
  time, forgets the unacked/redelivery state, and answers the offset it continues from;
- a reader (``ConsumerRequest.reader``) is (re)positioned at its start on every attach, and the
  answer carries ``reader_start_offset``;
- ``read_compacted``: kept from the Subscribe that created a durable subscription, taken from
  every attach of a reader; such a subscription is given only :func:`compacted_view` below the
  topic's ``compaction_horizon`` (``FakeCluster.compact``), every message from it on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import grpc.aio

from danube_common.errors import (
    ConsumerBusy,
    ConsumerNotFound,
    FailedPrecondition,
    InvalidArgument,
    SubscriptionTypeMismatch,
)
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from tests.unit.sdk.fake_state import FakeConsumer, FakeSub, FakeTopic

if TYPE_CHECKING:
    from tests.unit.sdk.fake_broker import FakeCluster

T = TypeVar("T")

_CUMULATIVE_TYPES = (pb.ConsumerRequest.Exclusive, pb.ConsumerRequest.Failover)


class ConsumerSide(pb_grpc.ConsumerServiceServicer):
    c: FakeCluster
    i: int

    def _record(self, method: str, req: object) -> None:
        raise NotImplementedError

    async def _wait_for(self, aw: Awaitable[T], topics: set[str]) -> T:
        raise NotImplementedError

    async def Subscribe(self, request: pb.ConsumerRequest, context: object) -> pb.ConsumerResponse:
        self._record("Subscribe", request)
        topic = self.c._owned(request.topic_name, self.i, create=False)
        sub = topic.subs.get(request.subscription)
        if sub is None:
            earliest = request.initial_position == pb.ConsumerRequest.Earliest
            sub = FakeSub(
                request.subscription,
                request.subscription_type,
                cursor=0 if earliest else len(topic.log),
                read_compacted=request.read_compacted,
            )
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
        resp = pb.ConsumerResponse(
            request_id=request.request_id, consumer_id=cid, consumer_name=request.consumer_name
        )
        if request.HasField("reader"):
            sub.read_compacted = request.read_compacted
            sub.cursor = _reader_cursor(topic, request.reader)
            sub.unacked.clear()
            sub.redeliver.clear()
            resp.reader_start_offset = sub.cursor
        return resp

    async def ConsumeMux(
        self, request_iterator: AsyncIterator[pb.ConsumeMuxRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ConsumeMuxEvent]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this fake serves no ConsumeMux")
        yield pb.ConsumeMuxEvent()  # unreachable: abort raises

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
            horizon = topic.compaction_horizon if sub.read_compacted else 0
            view = compacted_view(topic.log, horizon) if horizon else set()
            offsets: list[int] = []
            while sub.redeliver and len(offsets) < limit:
                off = sub.redeliver.popleft()
                if off not in sub.acked and (off >= horizon or off in view):
                    offsets.append(off)
            while sub.cursor < len(topic.log) and len(offsets) < limit:
                off = sub.cursor
                sub.cursor += 1
                if off >= horizon or off in view:
                    offsets.append(off)
            if offsets:
                for off in offsets:
                    sub.unacked[off] = cons.id
                yield pb.MessageBatch(messages=[_delivery(topic, sub, o) for o in offsets])
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
        if request.cumulative:
            if sub.sub_type not in _CUMULATIVE_TYPES:
                raise FailedPrecondition("cumulative acks need an exclusive or failover subscription")
            if len(request.topic_offsets) != 1:
                raise InvalidArgument("a cumulative ack carries exactly one offset")
            upto = request.topic_offsets[0]
            for off in [o for o in sub.unacked if o <= upto]:
                del sub.unacked[off]
            sub.acked.update(range(upto + 1))
            return pb.AckResponse(request_id=request.request_id)
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

    async def Seek(self, request: pb.SeekRequest, context: object) -> pb.SeekResponse:
        self._record("Seek", request)
        self.c.seeks.append(request)
        topic, sub = self._sub_of(request.consumer_id)
        target_kind = request.WhichOneof("target")
        if target_kind == "offset":
            target = min(request.offset, len(topic.log))
        elif target_kind == "publish_time_ms":
            t = request.publish_time_ms
            target = next((o for o, m in enumerate(topic.log) if m.publish_time >= t), len(topic.log))
        else:
            raise InvalidArgument("seek needs an offset or a publish_time_ms")
        sub.cursor = target
        sub.unacked.clear()
        sub.redeliver.clear()
        sub.acked = {o for o in sub.acked if o < target}
        topic.changed.notify()
        return pb.SeekResponse(request_id=request.request_id, offset=target)

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


def compacted_view(log: Sequence[pb.StreamMessage], horizon: int) -> set[int]:
    """The offsets below ``horizon`` that compaction keeps: the newest message of each routing
    key (all the chunks of a chunked one: a message counts at its first chunk), unless its
    payload is empty (a tombstone); keyless messages are left out. A pack is one message."""
    newest: dict[str, list[int]] = {}
    chunked: dict[str, list[int]] = {}
    for off, m in enumerate(log[:horizon]):
        if not m.HasField("routing_key"):
            continue
        if m.HasField("chunk"):
            group = chunked.setdefault(m.chunk.message_uuid, [])
            group.append(off)
            if m.chunk.index == 0:
                newest[m.routing_key] = group
        else:
            newest[m.routing_key] = [off] if m.payload else []
    return {off for group in newest.values() for off in group}


def _reader_cursor(topic: FakeTopic, start: pb.ReaderStart) -> int:
    kind = start.WhichOneof("position")
    end = len(topic.log)
    if kind == "earliest":
        return 0
    if kind == "offset":
        return min(start.offset, end)
    if kind == "publish_time_ms":
        t = start.publish_time_ms
        return next((o for o, m in enumerate(topic.log) if m.publish_time >= t), end)
    return end


def _delivery(topic: FakeTopic, sub: FakeSub, offset: int) -> Any:
    """The stored message as delivered to ``sub`` now (with its redelivery count)."""
    count = sub.deliveries.get(offset, 0)
    sub.deliveries[offset] = count + 1
    stored = topic.log[offset]
    if count == 0:
        return stored
    msg = pb.StreamMessage()
    msg.CopyFrom(stored)
    msg.redelivery_count = count
    return msg
