"""Reliable topics end to end: the broker in-process with the real WAL and a real etcd,
spoken to with raw grpc.aio stubs (what danube-client and our SDK send)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from danube_broker.wal import TopicLog
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.pb import DanubeAdmin_pb2 as admin
from danube_common.pb import DanubeAdmin_pb2_grpc as admin_grpc
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from tests.integration.test_broker_grpc import Broker, connected, error_code, expect_status, start_broker
from tests.support import unique, wait_until

pytestmark = pytest.mark.integration

CUMULATIVE_TYPES = (pb.ConsumerRequest.Exclusive, pb.ConsumerRequest.Failover)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "wal"


async def reliable_broker(etcd: EtcdProcess, cluster: str, data_dir: Path, **kw: Any) -> Broker:
    fields: dict[str, Any] = {"data_dir": str(data_dir), "cursor_flush_interval_ms": 20}
    fields.update(kw)
    return await start_broker(etcd, cluster, **fields)


@pytest.fixture
async def broker(etcd_server: EtcdProcess, cluster_name: str, data_dir: Path) -> AsyncIterator[Broker]:
    b = await reliable_broker(etcd_server, cluster_name, data_dir)
    try:
        yield b
    finally:
        await stop(b)


async def stop(b: Broker) -> None:
    await b.channel.close()
    if not b.task.done():
        await b.shutdown()


async def producer(b: Broker, topic: str, name: str = "p") -> pb.ProducerResponse:
    resp: pb.ProducerResponse = await b.producers.CreateProducer(
        pb.ProducerRequest(producer_name=name, topic_name=topic, dispatch_strategy=pb.Reliable), timeout=10
    )
    return resp


async def subscribe(
    b: Broker,
    topic: str,
    *,
    sub: str = "s",
    name: str = "c",
    kind: int = pb.ConsumerRequest.Exclusive,
    earliest: bool = False,
    window: int = 0,
) -> int:
    resp = await b.consumers.Subscribe(
        pb.ConsumerRequest(
            topic_name=topic,
            consumer_name=name,
            subscription=sub,
            subscription_type=kind,
            initial_position=pb.ConsumerRequest.Earliest if earliest else pb.ConsumerRequest.Latest,
            max_unacked_messages=window,
        ),
        timeout=10,
    )
    return int(resp.consumer_id)


def batch(pid: int, seq: int, payloads: list[bytes], *, seqs: list[int] | None = None) -> pb.PublishBatch:
    msgs = [pb.StreamMessage(payload=p) for p in payloads]
    for m, s in zip(msgs, seqs or [], strict=False):
        m.sequence_id = s
    return pb.PublishBatch(producer_id=pid, batch_seq=seq, messages=msgs)


async def publish(b: Broker, pid: int, payloads: list[bytes], **kw: Any) -> pb.PublishAck:
    stream = b.producers.PublishBatches()
    await stream.write(batch(pid, 1, payloads, **kw))
    ack: pb.PublishAck = await stream.read()
    await stream.done_writing()
    assert await stream.read() == grpc.aio.EOF
    return ack


async def receive(stream: Any, n: int) -> list[pb.StreamMessage]:
    got: list[pb.StreamMessage] = []
    while len(got) < n:
        item = await asyncio.wait_for(stream.read(), 10)
        assert item is not grpc.aio.EOF
        got.extend(item.messages if isinstance(item, pb.MessageBatch) else [item])
    return got


def topic_log(b: Broker, topic: str) -> TopicLog:
    reliable = b.registry.topics[topic].reliable
    assert reliable is not None
    return reliable.log  # type: ignore[return-value]


# ---------------------------------------------------------------- publish and durability
async def test_publish_is_acked_once_durable_and_consumed_with_acks(broker: Broker) -> None:
    topic = f"/default/{unique('rel')}"
    pid = (await producer(broker, topic)).producer_id
    cid = await subscribe(broker, topic)
    stream = broker.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
    await connected(broker, cid)

    ack = await publish(broker, pid, [b"a", b"b", b"c"])
    assert (ack.first_offset, ack.count) == (0, 3) and not ack.HasField("error")
    log = topic_log(broker, topic)
    assert log.durable_offset >= 3, "acked only after the append is durable"
    got = await receive(stream, 3)
    assert [m.payload for m in got] == [b"a", b"b", b"c"]
    assert [m.msg_id.topic_offset for m in got] == [0, 1, 2]
    assert {m.redelivery_count for m in got} == {0}
    await broker.consumers.AckBatch(
        pb.AckBatchRequest(consumer_id=cid, topic_offsets=[m.msg_id.topic_offset for m in got])
    )
    sub = broker.registry.topics[topic].subscriptions["s"]
    assert sub.engine is not None and sub.engine.cursor == 2
    stream.cancel()


async def test_unacked_messages_come_back_after_a_restart_and_acked_ones_do_not(
    etcd_server: EtcdProcess, cluster_name: str, data_dir: Path, etcd_resources: Resources, keys: Keys
) -> None:
    topic = f"/default/{unique('restart')}"
    b = await reliable_broker(etcd_server, cluster_name, data_dir)
    try:
        pid = (await producer(b, topic)).producer_id
        cid = await subscribe(b, topic, window=100)
        stream = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
        await connected(b, cid)
        await publish(b, pid, [f"m{i}".encode() for i in range(6)])
        got = await receive(stream, 6)
        await b.consumers.AckBatch(pb.AckBatchRequest(consumer_id=cid, topic_offsets=[0, 1, 2, 4]))
        cursor_key = keys.subscription_cursor(TopicName.parse(topic), "s")
        await wait_until(lambda: etcd_resources.store.get_json(cursor_key), what="cursor written to etcd")
        # The cursor, and the ack above the gap at 3 with it.
        assert await etcd_resources.store.get_json(cursor_key) == {"cursor": 2, "acked": [[4, 4]]}
        assert len(got) == 6
        stream.cancel()
    finally:
        await stop(b)

    b = await reliable_broker(etcd_server, cluster_name, data_dir)
    try:
        cid = await subscribe(b, topic, window=100)
        stream = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
        got = await receive(stream, 2)
        assert [m.msg_id.topic_offset for m in got] == [3, 5], "4 was acknowledged: not again"
        assert [m.payload for m in got] == [b"m3", b"m5"]
        pid = (await producer(b, topic)).producer_id
        ack = await publish(b, pid, [b"after"])
        assert ack.first_offset == 6, "offsets continue from the log"
        assert [m.payload for m in await receive(stream, 1)] == [b"after"]
        stream.cancel()
    finally:
        await stop(b)


async def test_unary_ack_and_nack_redeliver_the_same_offset(broker: Broker) -> None:
    """What danube-client does: ReceiveMessages, then unary Ack / Nack by msg_id."""
    topic = f"/default/{unique('nack')}"
    pid = (await producer(broker, topic)).producer_id
    cid = await subscribe(broker, topic, kind=pb.ConsumerRequest.Shared)
    stream = broker.consumers.ReceiveMessages(pb.ReceiveRequest(request_id=5, consumer_id=cid))
    await connected(broker, cid)
    for i in range(2):
        await broker.producers.SendMessage(
            pb.StreamMessage(
                request_id=10 + i,
                msg_id=pb.MsgID(producer_id=pid, topic_name=topic),
                payload=f"u{i}".encode(),
            ),
            timeout=10,
        )
    first, second = await receive(stream, 2)
    assert first.subscription_name == "s" and first.msg_id.topic_offset == 0
    await broker.consumers.Ack(pb.AckRequest(msg_id=second.msg_id, subscription_name="s"))
    await broker.consumers.Nack(
        pb.NackRequest(msg_id=first.msg_id, subscription_name="s", delay_ms=0, reason="retry me")
    )
    [again] = await receive(stream, 1)
    assert again.msg_id.topic_offset == 0 and again.payload == b"u0" and again.redelivery_count == 1
    await broker.consumers.Ack(pb.AckRequest(msg_id=again.msg_id, subscription_name="s"))
    engine = broker.registry.topics[topic].subscriptions["s"].engine
    assert engine is not None
    await wait_until(lambda: engine.cursor == 1, what="cursor after both acks")
    stream.cancel()


async def test_cumulative_ack_and_its_refusal_on_shared(broker: Broker) -> None:
    topic = f"/default/{unique('cum')}"
    pid = (await producer(broker, topic)).producer_id
    cid = await subscribe(broker, topic, sub="fo", kind=pb.ConsumerRequest.Failover)
    shared = await subscribe(broker, topic, sub="sh", kind=pb.ConsumerRequest.Shared)
    stream = broker.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
    await connected(broker, cid)
    await publish(broker, pid, [b"0", b"1", b"2", b"3"])
    await receive(stream, 4)
    await broker.consumers.AckBatch(pb.AckBatchRequest(consumer_id=cid, topic_offsets=[2], cumulative=True))
    engine = broker.registry.topics[topic].subscriptions["fo"].engine
    assert engine is not None and engine.cursor == 2 and engine.unacked_in_flight == 1
    err = await expect_status(
        broker.consumers.AckBatch(pb.AckBatchRequest(consumer_id=shared, topic_offsets=[2], cumulative=True)),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert "cumulative" in (err.details() or "") and error_code(err) == "FAILED_PRECONDITION"
    stream.cancel()


async def test_seek_by_offset_and_by_time(broker: Broker) -> None:
    topic = f"/default/{unique('seek')}"
    pid = (await producer(broker, topic)).producer_id
    cid = await subscribe(broker, topic, window=100)
    stream = broker.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
    await connected(broker, cid)
    await publish(broker, pid, [f"m{i}".encode() for i in range(5)])
    got = await receive(stream, 5)
    await broker.consumers.AckBatch(pb.AckBatchRequest(consumer_id=cid, topic_offsets=[0, 1, 2, 3, 4]))
    resp = await broker.consumers.Seek(pb.SeekRequest(request_id=3, consumer_id=cid, offset=1))
    assert (resp.request_id, resp.offset) == (3, 1)
    assert [m.msg_id.topic_offset for m in await receive(stream, 4)] == [1, 2, 3, 4]
    resp = await broker.consumers.Seek(pb.SeekRequest(consumer_id=cid, publish_time_ms=got[3].publish_time))
    assert resp.offset <= 3
    again = await receive(stream, 5 - resp.offset)
    assert again[-1].msg_id.topic_offset == 4
    stream.cancel()


async def test_dead_letter_to_a_second_reliable_topic(
    broker: Broker, etcd_resources: Resources, keys: Keys
) -> None:
    topic = f"/default/{unique('poison')}"
    dlq = f"/default/{unique('dlq')}"
    pid = (await producer(broker, topic)).producer_id
    cid = await subscribe(broker, topic, kind=pb.ConsumerRequest.Shared)
    policy = {
        "max_redeliveries": 1,
        "redelivery_backoff_base_ms": 0,
        "poison_policy": "dead_letter",
        "dead_letter_topic": dlq,
    }
    await etcd_resources.store.put(keys.subscription_policy(TopicName.parse(topic), "s"), json.dumps(policy))
    engine = broker.registry.topics[topic].subscriptions["s"].engine
    assert engine is not None
    await wait_until(lambda: engine.policy.poison_policy == "dead_letter", what="policy applied")
    stream = broker.consumers.ReceiveMessages(pb.ReceiveRequest(consumer_id=cid))
    await connected(broker, cid)
    await publish(broker, pid, [b"poison"])
    for attempt in range(2):
        [m] = await receive(stream, 1)
        assert m.redelivery_count == attempt
        await broker.consumers.Nack(pb.NackRequest(msg_id=m.msg_id, subscription_name="s", reason="bad"))
    await wait_until(lambda: engine.cursor == 0, what="original acked after the dead-letter copy")
    dcid = await subscribe(broker, dlq, sub="ops", earliest=True)
    dstream = broker.consumers.ReceiveMessages(pb.ReceiveRequest(consumer_id=dcid))
    [copy] = await receive(dstream, 1)
    assert copy.payload == b"poison" and copy.msg_id.topic_name == dlq
    attrs = dict(copy.attributes)
    assert attrs["x-original-topic"] == topic and attrs["x-original-subscription"] == "s"
    assert attrs["x-original-offset"] == "0" and attrs["x-delivery-attempts"] == "2"
    assert attrs["x-failure-reason"] == "nack: bad"
    assert engine.dead_lettered_total == 1
    stream.cancel()
    dstream.cancel()


async def test_stats_rpc(broker: Broker) -> None:
    topic = f"/default/{unique('stats')}"
    pid = (await producer(broker, topic)).producer_id
    cid = await subscribe(broker, topic, window=10)
    stream = broker.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
    await connected(broker, cid)
    await publish(broker, pid, [b"x" * 10] * 4)
    await receive(stream, 4)
    await broker.consumers.AckBatch(pb.AckBatchRequest(consumer_id=cid, topic_offsets=[0, 1]))
    stub = admin_grpc.BrokerStatsServiceStub(broker.channel)
    stats = await stub.GetTopicStats(admin.TopicStatsRequest(name=topic))
    assert stats.name == topic and stats.broker_id == broker.info.extra["broker_id"]
    assert stats.dispatch_strategy == "reliable" and stats.durability == "fsync"
    assert (stats.first_offset, stats.next_offset) == (0, 4)
    assert stats.msgs_in_total == 4 and stats.bytes_in_total == 40 and stats.msg_rate_in > 0
    assert stats.wal_bytes > 40 and stats.wal_segments >= 1 and stats.producers == 1
    [s] = stats.subscriptions
    assert (s.name, s.type, s.consumers) == ("s", "exclusive", 1)
    assert s.has_cursor and s.cursor == 1 and s.backlog == 2 and s.unacked_in_flight == 2
    assert s.delivered_total == 4 and s.redelivered_total == 0
    whole = await stub.GetBrokerStats(admin.BrokerStatsRequest())
    assert whole.broker_id == broker.info.extra["broker_id"] and whole.topics >= 1
    assert whole.wal_bytes >= stats.wal_bytes and whole.disk_free_bytes > 0
    err = await expect_status(
        stub.GetTopicStats(admin.TopicStatsRequest(name=f"/default/{unique('none')}")),
        grpc.StatusCode.NOT_FOUND,
    )
    assert error_code(err) == "TOPIC_NOT_FOUND"
    stream.cancel()
