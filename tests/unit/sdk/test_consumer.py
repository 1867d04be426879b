"""Consumer against the fake broker: receive, message fields, ack, nack, timeouts, close."""

from __future__ import annotations

import pytest

from danube_common.errors import InvalidArgument, Timeout, TopicNotFound
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import ClientClosed, DanubeClient, MessageId
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = "/default/c"


async def test_receive_gives_every_field(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s", consumer_name="c1")
    producer = await client.create_producer(T, producer_name="p1")
    sent = await producer.send(b"hello", properties={"a": "1"}, key="k1")
    await producer.send(b"no key")
    msg = await consumer.receive(timeout_s=5)
    assert msg.payload == b"hello" and msg.properties == {"a": "1"} and msg.key == "k1"
    assert msg.message_id == MessageId(T, 0, sent.producer_id) and msg.offset == 0
    assert msg.topic == T and msg.producer_name == "p1" and msg.publish_time_ms > 0
    second = await consumer.receive(timeout_s=5)
    assert second.key is None and second.properties == {} and second.offset == 1
    sub = cluster.calls_of("Subscribe")[0]
    assert isinstance(sub, pb.ConsumerRequest)
    assert (sub.consumer_name, sub.subscription, sub.subscription_type) == (
        "c1",
        "s",
        pb.ConsumerRequest.Shared,
    )


async def test_async_iteration_and_ack(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s")
    producer = await client.create_producer(T)
    await producer.send_many([b"%d" % i for i in range(5)])
    got = []
    async for msg in consumer:
        got.append(msg.payload)
        await consumer.ack(msg)
        if len(got) == 5:
            break
    assert got == [b"0", b"1", b"2", b"3", b"4"]
    await consumer.close()
    assert [o for r in cluster.ack_batches for o in r.topic_offsets] == [0, 1, 2, 3, 4]
    assert [m async for m in consumer] == []  # a closed consumer ends iteration


async def test_nack_redelivers_the_same_offset(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s")
    producer = await client.create_producer(T)
    await producer.send(b"retry me")
    first = await consumer.receive(timeout_s=5)
    await consumer.nack(first, delay_ms=250)
    again = await consumer.receive(timeout_s=5)
    assert again.offset == first.offset and again.payload == b"retry me"
    nack = cluster.nacks[0]
    assert nack.delay_ms == 250 and nack.msg_id.topic_offset == 0 and nack.msg_id.topic_name == T


async def test_receive_timeout(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s")
    with pytest.raises(Timeout, match="no message") as exc:
        await consumer.receive(timeout_s=0.05)
    assert isinstance(exc.value, TimeoutError) and exc.value.code == "TIMEOUT"  # either except works


async def test_subscribe_to_unknown_topic_says_how_to_create_it(client: DanubeClient) -> None:
    with pytest.raises(TopicNotFound, match="danube-admin topics create /default/missing"):
        await client.subscribe("/default/missing", subscription="s")


async def test_close_and_unsubscribe(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="gone")
    assert "gone" in cluster.topics[T].subs
    await consumer.unsubscribe()
    req = cluster.calls_of("CloseConsumer")[0]
    assert isinstance(req, pb.CloseConsumerRequest) and req.unsubscribe
    assert "gone" not in cluster.topics[T].subs
    with pytest.raises(ClientClosed):
        await consumer.receive(timeout_s=1)


async def test_slow_consumer_bounds_its_buffer(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s", receiver_queue_size=10)
    producer = await client.create_producer(T)
    await producer.send_many([b"x"] * 200)
    # The reader stops once the queue holds >= 10 (it may overshoot by one frame of <= 10).
    await wait_until(lambda: len(consumer._queue) >= 10, timeout_s=5, what="queue filled")
    assert len(consumer._queue) <= 20  # not the 200 the broker has
    got = [await consumer.receive(timeout_s=5) for _ in range(200)]
    assert [m.offset for m in got] == list(range(200))


async def test_receive_many_returns_what_is_buffered_in_order(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s")
    producer = await client.create_producer(T)
    await producer.send_many([b"%d" % i for i in range(10)])
    got: list[bytes] = []
    while len(got) < 10:
        batch = await consumer.receive_many(4, timeout_s=5)
        assert 1 <= len(batch) <= 4
        got += [m.payload for m in batch]
    assert got == [b"%d" % i for i in range(10)]
    with pytest.raises(Timeout):
        await consumer.receive_many(4, timeout_s=0.05)
    with pytest.raises(InvalidArgument) as err:
        await consumer.receive_many(0)
    assert "at least 1" in str(err.value)
