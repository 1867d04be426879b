"""The broker in-process against a real etcd, spoken to with raw grpc.aio stubs."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
import pytest

from danube_broker.app import BrokerFailure, run
from danube_broker.config import BrokerConfig
from danube_broker.registry import BrokerRegistry
from danube_common.errors import MD_ERROR_CODE
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.resources import Resources
from danube_common.service import ServiceReady
from danube_common.topic_name import TopicName
from tests.support import unique, wait_until

pytestmark = pytest.mark.integration

MAX_SIZE = 64 * 1024


@dataclass
class Broker:
    info: ServiceReady
    cfg: BrokerConfig
    channel: grpc.aio.Channel
    stop: asyncio.Event
    task: asyncio.Task[None]
    #: A temporary data_dir made for this broker, removed at shutdown.
    scratch_dir: str | None = None

    @property
    def registry(self) -> BrokerRegistry:
        assert isinstance(self.info.live, BrokerRegistry)
        return self.info.live

    @property
    def producers(self) -> pb_grpc.ProducerServiceStub:
        return pb_grpc.ProducerServiceStub(self.channel)

    @property
    def consumers(self) -> pb_grpc.ConsumerServiceStub:
        return pb_grpc.ConsumerServiceStub(self.channel)

    @property
    def discovery(self) -> pb_grpc.DiscoveryStub:
        return pb_grpc.DiscoveryStub(self.channel)

    @property
    def health(self) -> pb_grpc.HealthCheckStub:
        return pb_grpc.HealthCheckStub(self.channel)

    async def shutdown(self) -> None:
        self.stop.set()
        try:
            await asyncio.wait_for(self.task, 30)
        finally:
            if self.scratch_dir is not None:
                shutil.rmtree(self.scratch_dir, ignore_errors=True)


async def start_broker(etcd: EtcdProcess, cluster: str, **overrides: Any) -> Broker:
    """Start a broker in this event loop (reliable topics' logs under a fresh temporary
    directory unless ``data_dir`` is given)."""
    scratch = None if "data_dir" in overrides else tempfile.mkdtemp(prefix="danube-test-wal-")
    fields: dict[str, Any] = {
        "data_dir": scratch,
        "broker_id": unique("b"),
        "listen_addr": "127.0.0.1:0",
        "etcd": {"endpoints": [etcd.endpoint], "cluster": cluster},
        "max_message_size_bytes": MAX_SIZE,
        "shutdown_grace_s": 2.0,
    }
    fields.update(overrides)
    cfg = BrokerConfig.model_validate(fields)
    stop = asyncio.Event()
    ready: asyncio.Future[ServiceReady] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run(cfg, ready=ready.set_result, stop=stop))
    await asyncio.wait({ready, task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    info = ready.result()
    return Broker(info, cfg, grpc.aio.insecure_channel(info.addr), stop, task, scratch)


@pytest.fixture
async def broker(etcd_server: EtcdProcess, cluster_name: str) -> AsyncIterator[Broker]:
    b = await start_broker(etcd_server, cluster_name)
    try:
        yield b
    finally:
        await b.channel.close()
        if not b.task.done():
            await b.shutdown()


async def create_producer(b: Broker, topic: str, name: str = "p", **kw: Any) -> int:
    resp = await b.producers.CreateProducer(
        pb.ProducerRequest(request_id=7, producer_name=name, topic_name=topic, **kw), timeout=10
    )
    assert resp.request_id == 7 and resp.producer_name == name
    assert resp.max_message_size_bytes == MAX_SIZE
    return int(resp.producer_id)


async def subscribe(b: Broker, topic: str, *, sub: str = "s", name: str = "c", kind: int = 0) -> int:
    resp = await b.consumers.Subscribe(
        pb.ConsumerRequest(
            request_id=3, topic_name=topic, consumer_name=name, subscription=sub, subscription_type=kind
        ),
        timeout=10,
    )
    assert resp.request_id == 3
    return int(resp.consumer_id)


async def connected(b: Broker, consumer_id: int) -> None:
    await wait_until(lambda: b.registry.consumers[consumer_id].connected, what="consumer stream registered")


def batch_of(producer_id: int, seq: int, payloads: list[bytes]) -> pb.PublishBatch:
    return pb.PublishBatch(
        producer_id=producer_id,
        batch_seq=seq,
        messages=[pb.StreamMessage(payload=p, producer_name="p", publish_time=1) for p in payloads],
    )


async def expect_status(awaitable: Any, status: grpc.StatusCode) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await awaitable
    assert err.value.code() == status, err.value
    return err.value


def error_code(err: grpc.aio.AioRpcError) -> str | None:
    for key, value in err.trailing_metadata() or ():
        if key == MD_ERROR_CODE:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


# ---------------------------------------------------------------- publish / receive
async def test_publish_batches_and_receive_batches_round_trip(broker: Broker) -> None:
    topic = f"/default/{unique('rt')}"
    pid = await create_producer(broker, topic)
    cid = await subscribe(broker, topic, kind=pb.ConsumerRequest.Exclusive)
    receive = broker.consumers.ReceiveBatches(
        pb.ReceiveBatchRequest(request_id=1, consumer_id=cid, max_messages_per_frame=4)
    )
    await connected(broker, cid)

    publish = broker.producers.PublishBatches()
    payloads = [f"m{i}".encode() for i in range(10)]
    await publish.write(batch_of(pid, 1, payloads[:6]))
    await publish.write(batch_of(pid, 2, payloads[6:]))
    acks = [await publish.read(), await publish.read()]
    assert [(a.batch_seq, a.first_offset, a.count) for a in acks] == [(1, 0, 6), (2, 6, 4)]
    assert not any(a.HasField("error") for a in acks)

    got: list[pb.StreamMessage] = []
    while len(got) < 10:
        frame = await asyncio.wait_for(receive.read(), 10)
        assert 1 <= len(frame.messages) <= 4
        got.extend(frame.messages)
    assert [m.payload for m in got] == payloads
    assert [m.msg_id.topic_offset for m in got] == list(range(10))
    assert {(m.msg_id.producer_id, m.msg_id.topic_name, m.msg_id.broker_addr) for m in got} == {
        (pid, topic, broker.info.url)
    }
    await publish.done_writing()
    assert await publish.read() == grpc.aio.EOF
    receive.cancel()
    await wait_until(lambda: not broker.registry.consumers[cid].connected, what="stream end noticed")


async def test_oversized_message_refuses_the_batch_and_the_stream_goes_on(broker: Broker) -> None:
    topic = f"/default/{unique('big')}"
    pid = await create_producer(broker, topic)
    cid = await subscribe(broker, topic)
    receive = broker.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
    await connected(broker, cid)
    publish = broker.producers.PublishBatches()
    await publish.write(batch_of(pid, 1, [b"ok", b"x" * (MAX_SIZE + 1)]))
    refused = await publish.read()
    assert refused.batch_seq == 1 and refused.count == 0
    assert refused.error.code == "MESSAGE_TOO_LARGE" and refused.error.grpc_code == 3
    assert not refused.error.retryable
    assert str(MAX_SIZE + 1) in refused.error.message and str(MAX_SIZE) in refused.error.message
    await publish.write(batch_of(pid, 2, [b"after"]))
    ok = await publish.read()
    assert (ok.batch_seq, ok.first_offset, ok.count) == (2, 0, 1) and not ok.HasField("error")
    frame = await asyncio.wait_for(receive.read(), 10)
    assert [m.payload for m in frame.messages] == [b"after"], "nothing of the refused batch was published"
    await publish.done_writing()
    receive.cancel()


async def test_unary_send_message_and_receive_messages(broker: Broker) -> None:
    topic = f"/default/{unique('unary')}"
    pid = await create_producer(broker, topic, dispatch_strategy=pb.Reliable)
    cid = await subscribe(broker, topic, sub="subA", kind=pb.ConsumerRequest.Shared)
    health = await broker.health.HealthCheck(
        pb.HealthCheckRequest(client=pb.HealthCheckRequest.Consumer, id=cid)
    )
    assert health.status == pb.HealthCheckResponse.OK
    receive = broker.consumers.ReceiveMessages(pb.ReceiveRequest(request_id=9, consumer_id=cid))
    await connected(broker, cid)
    sent = []
    for i in range(3):
        msg = pb.StreamMessage(
            request_id=100 + i,
            msg_id=pb.MsgID(producer_id=pid, topic_name=topic, broker_addr="http://elsewhere:1"),
            payload=f"u{i}".encode(),
            publish_time=1_700_000_000_000 + i,
            producer_name="p",
            attributes={"i": str(i)},
            schema_id=5,
            schema_version=2,
            routing_key="k",
        )
        resp = await broker.producers.SendMessage(msg, timeout=10)
        assert resp.request_id == 100 + i
        sent.append(msg)
    for i, want in enumerate(sent):
        got = await asyncio.wait_for(receive.read(), 10)
        assert got.payload == want.payload and got.publish_time == want.publish_time
        assert got.producer_name == "p" and dict(got.attributes) == {"i": str(i)}
        assert got.schema_id == 5 and got.schema_version == 2 and got.routing_key == "k"
        assert got.subscription_name == "subA" and got.request_id == 100 + i
        assert (got.msg_id.producer_id, got.msg_id.topic_name, got.msg_id.topic_offset) == (pid, topic, i)
        assert got.msg_id.broker_addr == broker.info.url
        ack = await broker.consumers.Ack(
            pb.AckRequest(request_id=got.request_id, msg_id=got.msg_id, subscription_name="subA")
        )
        assert ack.request_id == got.request_id
    err = await expect_status(
        broker.producers.SendMessage(
            pb.StreamMessage(msg_id=pb.MsgID(producer_id=pid), payload=b"x" * (MAX_SIZE + 1))
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert error_code(err) == "MESSAGE_TOO_LARGE"
    err = await expect_status(
        broker.consumers.Ack(pb.AckRequest(msg_id=pb.MsgID(topic_name=topic), subscription_name="nope")),
        grpc.StatusCode.NOT_FOUND,
    )
    assert error_code(err) == "SUBSCRIPTION_NOT_FOUND"
    receive.cancel()


async def test_malformed_topic_name_is_invalid_argument_with_our_code(broker: Broker) -> None:
    for call in (
        broker.producers.CreateProducer(pb.ProducerRequest(producer_name="p", topic_name="no-slash")),
        broker.consumers.Subscribe(
            pb.ConsumerRequest(topic_name="/default/a/b", consumer_name="c", subscription="s")
        ),
        broker.discovery.TopicLookup(pb.TopicLookupRequest(topic="/default/sp ace")),
    ):
        err = await expect_status(call, grpc.StatusCode.INVALID_ARGUMENT)
        assert error_code(err) == "INVALID_TOPIC_NAME"
        assert "invalid topic name" in (err.details() or "")


async def test_subscribe_to_a_missing_topic_says_how_to_create_it(broker: Broker) -> None:
    err = await expect_status(
        broker.consumers.Subscribe(
            pb.ConsumerRequest(topic_name=f"/default/{unique('none')}", consumer_name="c", subscription="s")
        ),
        grpc.StatusCode.NOT_FOUND,
    )
    assert error_code(err) == "TOPIC_NOT_FOUND" and "create" in (err.details() or "")


async def test_topic_lookup_and_partitions_on_the_broker(broker: Broker) -> None:
    topic = f"/default/{unique('lk')}"
    resp = await broker.discovery.TopicLookup(pb.TopicLookupRequest(request_id=4, topic=topic), timeout=10)
    assert resp.request_id == 4
    assert resp.response_type == pb.TopicLookupResponse.Connect  # placed on the only broker: us
    assert resp.connect_url == resp.broker_url == broker.info.url
    await create_producer(broker, topic)
    parts = await broker.discovery.TopicPartitions(
        pb.TopicLookupRequest(request_id=5, topic=topic), timeout=10
    )
    assert list(parts.partitions) == [topic]


async def test_exclusive_producer_and_consumer_refusals_are_failed_precondition(broker: Broker) -> None:
    topic = f"/default/{unique('busy')}"
    pid = await create_producer(broker, topic, name="ex", producer_access_mode=pb.Exclusive)
    err = await expect_status(
        broker.producers.CreateProducer(pb.ProducerRequest(producer_name="other", topic_name=topic)),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert error_code(err) == "PRODUCER_BUSY"
    await broker.producers.CloseProducer(pb.CloseProducerRequest(request_id=1, producer_id=pid))
    await create_producer(broker, topic, name="other")
    await subscribe(broker, topic, name="c1")
    err = await expect_status(
        broker.consumers.Subscribe(
            pb.ConsumerRequest(topic_name=topic, consumer_name="c2", subscription="s")
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert error_code(err) == "CONSUMER_BUSY"


# ---------------------------------------------------------------- ownership changes
async def test_unassigned_topic_closes_clients(broker: Broker, etcd_resources: Resources, keys: Keys) -> None:
    topic = f"/default/{unique('move')}"
    pid = await create_producer(broker, topic)
    cid = await subscribe(broker, topic)
    receive = broker.consumers.ReceiveMessages(pb.ReceiveRequest(consumer_id=cid))
    await connected(broker, cid)
    publish = broker.producers.PublishBatches()
    await publish.write(batch_of(pid, 1, [b"before"]))
    assert (await publish.read()).count == 1
    assert (await asyncio.wait_for(receive.read(), 10)).payload == b"before"

    await etcd_resources.store.delete(keys.assignment(broker.info.extra["broker_id"], TopicName.parse(topic)))

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(receive.read(), 10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and error_code(err.value) == "TOPIC_NOT_OWNED"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(publish.read(), 10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and error_code(err.value) == "TOPIC_NOT_OWNED"
    for kind, client_id in ((pb.HealthCheckRequest.Consumer, cid), (pb.HealthCheckRequest.Producer, pid)):
        resp = await broker.health.HealthCheck(pb.HealthCheckRequest(client=kind, id=client_id))
        assert resp.status == pb.HealthCheckResponse.CLOSE
    err2 = await expect_status(
        broker.producers.SendMessage(
            pb.StreamMessage(msg_id=pb.MsgID(producer_id=pid, topic_name=topic), payload=b"x")
        ),
        grpc.StatusCode.UNAVAILABLE,
    )
    assert error_code(err2) == "TOPIC_NOT_OWNED"


async def test_graceful_shutdown_releases_ownership_and_registration(
    etcd_server: EtcdProcess, cluster_name: str, etcd_resources: Resources, keys: Keys
) -> None:
    b = await start_broker(etcd_server, cluster_name)
    try:
        topics = [f"/default/{unique('own')}" for _ in range(3)]
        for t in topics:
            await create_producer(b, t)
        cid = await subscribe(b, topics[0])
        receive = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
        await connected(b, cid)
        assert await etcd_resources.get_broker(b.info.extra["broker_id"]) is not None
        assert all([await etcd_resources.get_owner(TopicName.parse(t)) for t in topics])

        b.stop.set()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await asyncio.wait_for(receive.read(), 10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        await asyncio.wait_for(b.task, 30)
        assert b.task.result() is None
        for t in topics:
            assert await etcd_resources.get_owner(TopicName.parse(t)) is None
        kvs, _ = await etcd_resources.store.get_prefix(
            keys.broker_assignments_prefix(b.info.extra["broker_id"])
        )
        assert kvs == []
        assert await etcd_resources.get_broker(b.info.extra["broker_id"]) is None
    finally:
        await b.channel.close()
        if not b.task.done():
            with contextlib.suppress(Exception):
                await b.shutdown()


async def test_topic_owned_by_another_broker_is_redirected(
    etcd_server: EtcdProcess, cluster_name: str
) -> None:
    a = await start_broker(etcd_server, cluster_name)
    b = await start_broker(etcd_server, cluster_name)
    try:
        topic = f"/default/{unique('two')}"
        await create_producer(a, topic)
        err = await expect_status(
            b.producers.CreateProducer(pb.ProducerRequest(producer_name="p", topic_name=topic)),
            grpc.StatusCode.UNAVAILABLE,
        )
        assert error_code(err) == "TOPIC_NOT_OWNED"
        md = dict(err.trailing_metadata() or ())
        assert md.get("x-danube-redirect") == a.info.url
        lookup = await b.discovery.TopicLookup(pb.TopicLookupRequest(topic=topic))
        assert lookup.response_type == pb.TopicLookupResponse.Redirect and lookup.connect_url == a.info.url
    finally:
        for x in (a, b):
            await x.channel.close()
            await x.shutdown()


async def test_a_crashed_internal_loop_stops_the_broker_loudly(
    etcd_server: EtcdProcess, cluster_name: str, etcd_resources: Resources
) -> None:
    b = await start_broker(etcd_server, cluster_name, sweep_interval_s=0.05)
    try:
        topic = f"/default/{unique('crash')}"
        await create_producer(b, topic)

        def boom() -> None:
            raise RuntimeError("sweep exploded")

        b.registry.sweep = boom  # type: ignore[method-assign]
        with pytest.raises(BrokerFailure, match="expiry sweep ended unexpectedly"):
            await asyncio.wait_for(b.task, 30)
        # Still an ordered stop: ownership released, registration revoked.
        assert await etcd_resources.get_owner(TopicName.parse(topic)) is None
        assert await etcd_resources.get_broker(b.info.extra["broker_id"]) is None
    finally:
        await b.channel.close()
