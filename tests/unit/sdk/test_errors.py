"""Errors reach users as our classes, from the client itself, the broker, or a batch refusal."""

from __future__ import annotations

import pytest

from danube_common.errors import (
    ConsumerBusy,
    InvalidTopicName,
    MessageTooLarge,
    NamespaceNotFound,
    ProducerBusy,
    SubscriptionTypeMismatch,
    Unavailable,
)
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import AccessMode, DanubeClient, SubType
from danube_sdk.batch import error_from_detail
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster, FakeProducer

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = "/default/e"


async def test_invalid_topic_name_is_refused_before_any_call(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    with pytest.raises(InvalidTopicName, match="/namespace/topic"):
        await client.create_producer("no-slash")
    with pytest.raises(InvalidTopicName):
        await client.subscribe("/a/b/c", subscription="s")
    assert cluster.calls == []


async def test_broker_errors_map_to_classes(client: DanubeClient, cluster: FakeCluster) -> None:
    with pytest.raises(NamespaceNotFound, match="namespace nope"):
        await client.create_producer("/nope/t")

    await client.create_producer(T, producer_name="owner", access_mode=AccessMode.EXCLUSIVE)
    with pytest.raises(ProducerBusy) as busy:
        await client.create_producer(T, producer_name="intruder")
    assert busy.value.code == "PRODUCER_BUSY" and not busy.value.retryable

    await client.subscribe(T, subscription="ex", consumer_name="c1", sub_type=SubType.EXCLUSIVE)
    with pytest.raises(ConsumerBusy):
        await client.subscribe(T, subscription="ex", consumer_name="c2", sub_type=SubType.EXCLUSIVE)
    with pytest.raises(SubscriptionTypeMismatch):
        await client.subscribe(T, subscription="ex", consumer_name="c3", sub_type=SubType.SHARED)


async def test_unreachable_service_is_unavailable_after_retries() -> None:
    client = DanubeClient("http://127.0.0.1:1", operation_timeout_s=0.3, rpc_timeout_s=0.2)
    try:
        with pytest.raises(Unavailable, match=r"cannot reach the service at http://127.0.0.1:1"):
            await client.create_producer(T)
    finally:
        await client.close()


def test_batch_refusals_map_like_statuses() -> None:
    busy = error_from_detail(pb.ErrorDetail(code="PRODUCER_BUSY", grpc_code=9, message="taken"))
    assert isinstance(busy, ProducerBusy) and busy.message == "taken"
    big = error_from_detail(pb.ErrorDetail(code="MESSAGE_TOO_LARGE", grpc_code=3, message="x"))
    assert isinstance(big, MessageTooLarge)
    unknown = error_from_detail(pb.ErrorDetail(code="SOMETHING_NEW", grpc_code=14, message="later"))
    assert type(unknown) is Unavailable and unknown.retryable


async def test_producer_fails_pending_and_later_sends_when_reconnect_is_refused(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    producer = await client.create_producer(T, producer_name="p")
    await producer.send(b"ok")
    # Broker 1 already has an exclusive producer of another name for the topic.
    cluster.producers[9999] = FakeProducer(9999, "other", T, broker=1, exclusive=True)
    cluster.ack_gate.clear()
    fut = await producer.send_async(b"pending")
    await wait_until(lambda: len(cluster.frames) == 2, timeout_s=5, what="pending batch sent")
    cluster.move(T, 1)
    cluster.ack_gate.set()
    with pytest.raises(ProducerBusy):
        await fut
    with pytest.raises(ProducerBusy):
        await producer.send(b"later")
    assert producer.pending == 0


async def test_consumer_reports_a_refused_resubscribe_on_receive(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="ex", consumer_name="mine", sub_type=SubType.EXCLUSIVE)
    # By the time it reconnects, someone else holds the exclusive subscription.
    cluster.topics[T].subs["ex"].consumers = {"thief": 4242}
    cluster.move(T, 1)
    with pytest.raises(ConsumerBusy):
        await consumer.receive(timeout_s=5)
