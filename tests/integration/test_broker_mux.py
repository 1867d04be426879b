"""PublishMux and ConsumeMux on an in-process broker against real etcd, with raw grpc.aio stubs:
per-producer ack order, refusals and detaches confined to their producer, unknown ids answered
in-band, deliveries tagged per consumer with credits, ack results."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from danube_common.keys import Keys
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from tests.integration.test_broker_grpc import (
    MAX_SIZE,
    Broker,
    batch_of,
    broker,  # noqa: F401  (fixture)
    create_producer,
    subscribe,
)
from tests.support import unique, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class Pipe:
    """A mux stream: write requests, read the acks / events of its responses (a deadline each)."""

    def __init__(self, call: Any, *, publish: bool) -> None:
        self.call = call
        self.publish = publish
        self._buffered: list[Any] = []

    async def send(self, *reqs: Any) -> None:
        """PublishMux: the batches go in one request; ConsumeMux: one request each."""
        if self.publish:
            await self.call.write(pb.PublishMuxRequest(batches=list(reqs)))
            return
        for r in reqs:
            await self.call.write(r)

    async def read(self, n: int = 1) -> list[Any]:
        while len(self._buffered) < n:
            item = await asyncio.wait_for(self.call.read(), 10)
            assert item is not grpc.aio.EOF, await self.call.details()
            self._buffered.extend(item.acks if self.publish else item.events)
        out, self._buffered = self._buffered[:n], self._buffered[n:]
        return out


@pytest.fixture
async def pub(broker: Broker) -> AsyncIterator[Pipe]:  # noqa: F811
    call = broker.producers.PublishMux()
    yield Pipe(call, publish=True)
    call.cancel()


def mux_batch(pid: int, seq: int, payloads: list[bytes], session: int = 1) -> pb.PublishBatch:
    b = batch_of(pid, seq, payloads)
    b.session = session
    return b


async def test_batches_of_many_producers_share_one_stream_acked_in_order_per_producer(
    broker: Broker,  # noqa: F811
    pub: Pipe,
) -> None:
    topics = [f"/default/{unique('mux')}" for _ in range(3)]
    pids = [await create_producer(broker, t, name=f"p{i}") for i, t in enumerate(topics)]
    await pub.send(*(pb.PublishBatch(producer_id=p, session=1) for p in pids))  # bind frames: no answer
    for seq in range(1, 6):
        await pub.send(*(mux_batch(p, seq, [b"x%d" % seq, b"y"]) for p in pids))
    acks = await pub.read(15)
    assert broker.registry.events is not None and broker.registry.events.mux_open["publish"] == 1
    for p in pids:
        mine = [a for a in acks if a.producer_id == p]
        assert [a.batch_seq for a in mine] == [1, 2, 3, 4, 5]
        assert [a.first_offset for a in mine] == [0, 2, 4, 6, 8]
        assert not any(a.HasField("error") for a in mine)
        assert broker.registry.producers[p].open_streams == 1


async def test_a_refused_batch_and_an_unknown_id_touch_only_their_producer(
    broker: Broker,  # noqa: F811
    pub: Pipe,
) -> None:
    a = await create_producer(broker, f"/default/{unique('mux')}", name="a")
    b = await create_producer(broker, f"/default/{unique('mux')}", name="b")
    await pub.send(
        mux_batch(a, 1, [b"a0"]),
        mux_batch(b, 1, [b"z" * (MAX_SIZE + 1)]),  # refused in-band
        mux_batch(987654321, 1, [b"nobody"]),  # unknown id: in-band, retryable
        mux_batch(a, 2, [b"a1"]),
        mux_batch(b, 2, [b"b-after"]),
    )
    acks = {(x.producer_id, x.batch_seq): x for x in await pub.read(5)}
    assert acks[(b, 1)].error.code == "MESSAGE_TOO_LARGE"
    assert acks[(987654321, 1)].error.retryable and acks[(987654321, 1)].error.grpc_code == 14
    assert not acks[(a, 1)].HasField("error") and not acks[(a, 2)].HasField("error")
    assert acks[(a, 2)].first_offset == 1
    assert not acks[(b, 2)].HasField("error") and acks[(b, 2)].first_offset == 0


async def test_a_detached_producer_gets_its_event_and_the_others_go_on(
    broker: Broker,  # noqa: F811
    pub: Pipe,
    etcd_resources: Resources,
    keys: Keys,
) -> None:
    moved_topic, kept_topic = f"/default/{unique('moved')}", f"/default/{unique('kept')}"
    moved = await create_producer(broker, moved_topic, name="m")
    kept = await create_producer(broker, kept_topic, name="k")
    await pub.send(mux_batch(moved, 1, [b"m"]), mux_batch(kept, 1, [b"k"]))
    assert len(await pub.read(2)) == 2
    # The assignment goes away (as when a topic is moved off this broker): the topic unloads.
    await etcd_resources.store.delete(
        keys.assignment(broker.info.extra["broker_id"], TopicName.parse(moved_topic))
    )
    (event,) = await pub.read(1)
    assert event.producer_id == moved and event.batch_seq == 0
    assert event.error.code == "TOPIC_NOT_OWNED" and event.error.retryable
    await pub.send(mux_batch(kept, 2, [b"k2"]), mux_batch(moved, 2, [b"late"]))
    acks = {x.producer_id: x for x in await pub.read(2)}
    assert not acks[kept].HasField("error") and acks[kept].first_offset == 1
    assert acks[moved].error.code == "TOPIC_NOT_OWNED"


async def test_consume_mux_tags_deliveries_honours_credits_and_answers_acks(broker: Broker) -> None:  # noqa: F811
    t1, t2 = f"/default/{unique('cmux')}", f"/default/{unique('cmux')}"
    p1, p2 = await create_producer(broker, t1, name="p1"), await create_producer(broker, t2, name="p2")
    c1 = await subscribe(broker, t1, sub="s", name="c1")
    c2 = await subscribe(broker, t2, sub="s", name="c2", kind=pb.ConsumerRequest.Shared)
    call = broker.consumers.ConsumeMux()
    mux = Pipe(call, publish=False)
    try:
        await mux.send(
            pb.ConsumeMuxRequest(
                attach=[
                    pb.MuxAttach(consumer_id=c1, max_messages_per_frame=1, credits=1),
                    pb.MuxAttach(consumer_id=c2, max_messages_per_frame=10, credits=5),
                ]
            )
        )
        await wait_until(
            lambda: broker.registry.consumers[c1].connected and broker.registry.consumers[c2].connected,
            what="both consumers attached",
        )
        pipe = Pipe(broker.producers.PublishMux(), publish=True)
        await pipe.send(mux_batch(p1, 1, [b"a", b"b", b"c"]), mux_batch(p2, 1, [b"x", b"y"]))
        await pipe.read(2)
        pipe.call.cancel()
        # c1 has one credit (one 1-message frame); c2 is not held back by it.
        events = await mux.read(2)
        by = {e.consumer_id: e for e in events}
        assert [m.payload for m in by[c1].delivery.messages] == [b"a"]
        assert [m.payload for m in by[c2].delivery.messages] == [b"x", b"y"]
        await mux.send(
            pb.ConsumeMuxRequest(
                credits=[pb.MuxCredit(consumer_id=c1, frames=5)],
                acks=[
                    pb.MuxAck(request_id=1, consumer_id=c2, topic_offsets=[0, 1]),
                    pb.MuxAck(request_id=2, consumer_id=c2, topic_offsets=[1], cumulative=True),
                    pb.MuxAck(request_id=3, consumer_id=424242, topic_offsets=[0]),
                ],
            )
        )
        rest = await mux.read(5)
        results = {
            e.ack_result.request_id: e.ack_result for e in rest if e.WhichOneof("event") == "ack_result"
        }
        assert not results[1].HasField("error")
        assert results[2].error.code == "FAILED_PRECONDITION"  # cumulative on a shared subscription
        assert results[3].error.code == "CONSUMER_NOT_FOUND"
        later = [m.payload for e in rest if e.WhichOneof("event") == "delivery" for m in e.delivery.messages]
        assert later == [b"b", b"c"]
        assert broker.registry.events is not None and broker.registry.events.mux_open["consume"] == 1
        # An unknown id is refused in-band; the stream goes on.
        await mux.send(pb.ConsumeMuxRequest(attach=[pb.MuxAttach(consumer_id=424242, credits=1)]))
        (closed,) = await mux.read(1)
        assert closed.consumer_id == 424242 and closed.closed.retryable
    finally:
        call.cancel()
