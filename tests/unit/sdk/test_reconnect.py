"""Topic moves and broken streams: re-lookup, re-create under the same name, nothing lost."""

from __future__ import annotations

import asyncio

import pytest

from danube_common.errors import Timeout
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import DanubeClient
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = "/default/moving"


@pytest.mark.parametrize("redirect", [True, False], ids=["with-redirect", "lookup-only"])
async def test_producer_follows_a_moved_topic_and_resends_unacked(
    client: DanubeClient, cluster: FakeCluster, redirect: bool
) -> None:
    cluster.redirects = redirect
    producer = await client.create_producer(T, producer_name="mover", batching_max_messages=5)
    before = await producer.send_many([b"a%d" % i for i in range(10)])
    assert {m.topic for m in before} == {T}
    lookups_before = len(cluster.calls_of("TopicLookup"))

    cluster.ack_gate.clear()  # the next batches reach broker 0 but are never acknowledged
    futs = [await producer.send_async(b"b%d" % i) for i in range(20)]
    await wait_until(lambda: len(cluster.frames) == 2 + 4, timeout_s=5, what="unacked batches on the wire")
    assert not any(f.done() for f in futs)
    cluster.move(T, 1)  # broker 0 ends the stream with UNAVAILABLE / TOPIC_NOT_OWNED
    cluster.ack_gate.set()

    ids = await asyncio.gather(*futs)
    assert [m.offset for m in ids] == list(range(10, 30))
    assert {m.producer_id for m in ids} == {p.id for p in cluster.producers_by_name("mover") if p.broker == 1}
    # Exactly once each, in order: the held batches were never published on broker 0.
    assert cluster.payloads(T) == [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(20)]
    creates = [r for r in cluster.calls_of("CreateProducer", broker=1) if isinstance(r, pb.ProducerRequest)]
    assert [r.producer_name for r in creates] == ["mover"]
    resent = [m.payload for f in cluster.frames if f.broker == 1 for m in f.messages]
    assert resent == [b"b%d" % i for i in range(20)]
    if not redirect:
        assert len(cluster.calls_of("TopicLookup")) > lookups_before
    # The producer keeps working on the new owner.
    assert (await producer.send(b"after")).offset == 30


async def test_producer_reconnects_after_the_broker_ends_streams_on_shutdown(cluster: FakeCluster) -> None:
    """Ownership changes while the client is between brokers: a lookup finds the new owner."""
    client = DanubeClient(cluster.service_url, health_check_interval_s=0)
    try:
        producer = await client.create_producer(T)
        await producer.send(b"1")
        cluster.move(T, 1)
        assert (await producer.send(b"2")).offset == 1
        cluster.move(T, 0)
        assert (await producer.send(b"3")).offset == 2
        assert cluster.payloads(T) == [b"1", b"2", b"3"]
        owners = [b for b, m, _ in cluster.calls if m == "CreateProducer"]
        assert owners == [0, 1, 0]
    finally:
        await client.close()


async def test_consumer_resubscribes_after_a_move_without_losing_messages(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s", consumer_name="follower")
    producer = await client.create_producer(T)
    await producer.send_many([b"%d" % i for i in range(10)])
    first = [await consumer.receive(timeout_s=5) for _ in range(10)]
    for m in first[:5]:  # acknowledge only half before the move
        await consumer.ack(m)
    await consumer.flush_acks()

    cluster.move(T, 1)
    await wait_until(
        lambda: any(b == 1 for b, m, _ in cluster.calls if m == "Subscribe"), timeout_s=5, what="resubscribe"
    )
    await producer.send_many([b"%d" % i for i in range(10, 15)])

    seen: dict[int, bytes] = {m.offset: m.payload for m in first}
    while len(seen) < 15 or any(o not in seen for o in range(15)):
        m = await consumer.receive(timeout_s=5)
        seen[m.offset] = m.payload
        await consumer.ack(m)
    assert [seen[o] for o in range(15)] == [b"%d" % i for i in range(15)]
    subs = [r for r in cluster.calls_of("Subscribe") if isinstance(r, pb.ConsumerRequest)]
    assert [r.consumer_name for r in subs] == ["follower", "follower"]


async def test_health_check_close_makes_the_consumer_reattach(cluster: FakeCluster) -> None:
    cluster.create_topic(T)
    client = DanubeClient(cluster.service_url, health_check_interval_s=0.05)
    try:
        consumer = await client.subscribe(T, subscription="s", consumer_name="hc")
        await wait_until(lambda: cluster.calls_of("HealthCheck"), timeout_s=5, what="a health check")
        cid = consumer._parts[T].consumer_id
        cluster.health_close.add(cid)
        await wait_until(lambda: len(cluster.calls_of("Subscribe")) == 2, timeout_s=5, what="resubscribe")
        producer = await client.create_producer(T)
        await producer.send(b"still here")
        assert (await consumer.receive(timeout_s=5)).payload == b"still here"
    finally:
        await client.close()


async def test_without_idempotence_a_lost_ack_means_a_duplicate(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    """The stream breaks after the broker published but before the client saw the ack: the
    batch is resent and, without sequence ids, published twice (test_idempotence.py has the
    idempotent case)."""
    producer = await client.create_producer(T, enable_idempotence=False)
    await producer.send(b"warm-up")
    cluster.ack_gate.clear()
    fut = await producer.send_async(b"dup")
    await wait_until(lambda: len(cluster.frames) == 2, timeout_s=5, what="batch on the wire")
    # Publish it behind the client's back, then move: the client never gets the ack.
    cluster.topics[T].log.append(pb.StreamMessage(payload=b"dup"))
    cluster.move(T, 1)
    cluster.ack_gate.set()
    assert (await fut).offset == 2
    assert cluster.payloads(T) == [b"warm-up", b"dup", b"dup"]


async def test_pending_sends_time_out_while_the_owner_is_unreachable_then_recover(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    producer = await client.create_producer(T, send_timeout_s=0.5)
    await producer.send(b"before")
    await cluster.stop_broker(1)
    cluster.move(T, 1)  # lookups now point at a dead broker
    with pytest.raises(Timeout, match="not acknowledged within"):
        await producer.send(b"lost in transit")
    assert producer.pending == 0
    cluster.move(T, 0)  # the topic comes back: the producer, still retrying, finds it
    await wait_until(lambda: len(cluster.calls_of("CreateProducer", broker=0)) == 2, what="reattached")
    assert (await producer.send(b"after")).offset == 1
    assert cluster.payloads(T) == [b"before", b"after"]


async def test_health_check_close_makes_the_producer_reattach(cluster: FakeCluster) -> None:
    client = DanubeClient(cluster.service_url, health_check_interval_s=0.05)
    try:
        producer = await client.create_producer(T, producer_name="hp")
        await producer.send(b"one")
        pid = cluster.producers_by_name("hp")[0].id
        cluster.health_close.add(pid)
        await wait_until(lambda: len(cluster.calls_of("CreateProducer")) == 2, timeout_s=5, what="re-create")
        closes = [r for r in cluster.calls_of("CloseProducer") if isinstance(r, pb.CloseProducerRequest)]
        assert [r.producer_id for r in closes] == [pid]  # same broker: the old registration is freed
        assert (await producer.send(b"two")).offset == 1
    finally:
        await client.close()
