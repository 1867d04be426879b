"""Producer pipeline against the fake broker: batching, pipelining, back-pressure, ids, errors."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import typing
from typing import Any

import pytest

from danube_common.errors import InvalidArgument, MessageTooLarge, Timeout
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import ClientClosed, DanubeClient, MessageId
from danube_sdk.options import ConsumerOptions, ProducerOptions
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = "/default/t"


async def test_send_returns_ids_with_consecutive_offsets(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(T, producer_name="p1")
    first = await producer.send(b"m0", properties={"k": "v"}, key="key-a")
    rest = await producer.send_many([b"m1", b"m2", b"m3"])
    assert first == MessageId(T, 0, first.producer_id)
    assert [m.offset for m in rest] == [1, 2, 3]
    assert all(m.topic == T for m in rest)
    stored = cluster.topics[T].log[0]
    assert stored.payload == b"m0" and dict(stored.attributes) == {"k": "v"}
    assert stored.routing_key == "key-a" and stored.producer_name == "p1"
    assert stored.publish_time > 1_600_000_000_000  # milliseconds since the epoch
    assert cluster.payloads(T) == [b"m0", b"m1", b"m2", b"m3"]
    create = cluster.calls_of("CreateProducer")[0]
    assert isinstance(create, pb.ProducerRequest)
    assert create.producer_name == "p1" and create.topic_name == T


async def test_batches_are_cut_by_count(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(T, batching_max_messages=10, batching_max_publish_delay_ms=60_000)
    futs = [await producer.send_async(b"x%d" % i) for i in range(35)]
    await producer.flush()
    assert [f.result().offset for f in futs] == list(range(35))
    assert [f.count for f in cluster.frames] == [10, 10, 10, 5]
    assert [f.batch_seq for f in cluster.frames] == sorted({f.batch_seq for f in cluster.frames})


async def test_batches_are_cut_by_bytes(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(
        T, batching_max_messages=1000, batching_max_bytes=1000, batching_max_publish_delay_ms=60_000
    )
    for _ in range(10):
        await producer.send_async(b"y" * 300)
    await producer.flush()
    assert [f.count for f in cluster.frames] == [3, 3, 3, 1]


async def test_linger_seals_a_partial_batch_while_others_are_in_flight(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    producer = await client.create_producer(T, batching_max_messages=1000, batching_max_publish_delay_ms=500)
    cluster.ack_gate.clear()
    first = await producer.send_async(b"first")
    await wait_until(lambda: len(cluster.frames) == 1, timeout_s=5, what="first batch in flight")
    futs = []
    for _ in range(5):
        futs.append(await producer.send_async(b"z"))
        for _ in range(10):  # give the sender every chance to send early (it must not)
            await asyncio.sleep(0)
    # Neither count, bytes, flush nor an idle pipe can seal this batch: only the linger.
    await wait_until(lambda: len(cluster.frames) == 2, timeout_s=5, what="lingered batch sent")
    assert [f.count for f in cluster.frames] == [1, 5]
    cluster.ack_gate.set()
    ids = await asyncio.gather(first, *futs)
    assert [i.offset for i in ids] == [0, 1, 2, 3, 4, 5]


async def test_a_partial_batch_goes_once_the_batches_in_flight_are_acked(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    producer = await client.create_producer(
        T, batching_max_messages=1000, batching_max_publish_delay_ms=60_000
    )
    cluster.ack_gate.clear()
    first = await producer.send_async(b"first")
    await wait_until(lambda: len(cluster.frames) == 1, timeout_s=5, what="first batch in flight")
    futs = []
    for i in range(5):
        futs.append(await producer.send_async(b"w%d" % i))
        for _ in range(10):  # give the sender every chance to send early (it must not)
            await asyncio.sleep(0)
    assert len(cluster.frames) == 1  # a slot is free (max_inflight_batches=5): only the ack is awaited
    cluster.ack_gate.set()
    # The ack of the first batch seals the waiting one: not the 60 s cap.
    ids = await asyncio.wait_for(asyncio.gather(first, *futs), 10)
    assert [i.offset for i in ids] == [0, 1, 2, 3, 4, 5]
    assert [f.count for f in cluster.frames] == [1, 5]


@pytest.mark.parametrize(
    ("method", "options"),
    [
        (DanubeClient.create_producer, ProducerOptions),
        (DanubeClient.subscribe, ConsumerOptions),
        (DanubeClient.subscribe_many, ConsumerOptions),
    ],
    ids=["create_producer", "subscribe", "subscribe_many"],
)
def test_signature_defaults_are_the_options_defaults(method: Any, options: type) -> None:
    """DanubeClient restates ProducerOptions' and ConsumerOptions' defaults in its signatures,
    and again in each typing overload (which nothing else checks): none may drift (e.g. the
    partial-batch wait, 100 ms since 29 Nov 2026)."""
    defaults = options()
    fields = {f.name for f in dataclasses.fields(options)}
    signatures = [inspect.signature(method)] + [inspect.signature(o) for o in typing.get_overloads(method)]
    assert len(signatures) == (1 if method is DanubeClient.subscribe_many else 3)
    for sig in signatures:
        checked = [name for name in sig.parameters if name in fields]
        assert len(checked) >= 7, (method.__name__, checked)
        for name in checked:
            expected = getattr(defaults, name)
            got = sig.parameters[name].default
            assert (tuple(got) if name == "key_filters" else got) == expected, (method.__name__, name)
    assert ProducerOptions().batching_max_publish_delay_ms == 100.0


async def test_an_idle_producer_does_not_linger(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(T, batching_max_publish_delay_ms=60_000)
    for i in range(3):  # would take minutes if every send waited for the linger
        assert (await producer.send(b"now")).offset == i
    assert [f.count for f in cluster.frames] == [1, 1, 1]


async def test_several_batches_are_in_flight_before_any_ack(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    producer = await client.create_producer(T, batching_max_messages=2, batching_max_publish_delay_ms=60_000)
    cluster.ack_gate.clear()
    futs = [await producer.send_async(b"%d" % i) for i in range(10)]
    await wait_until(lambda: len(cluster.frames) == 5, timeout_s=5, what="5 frames on the wire")
    assert not any(f.done() for f in futs)
    cluster.ack_gate.set()
    ids = await asyncio.gather(*futs)
    assert [i.offset for i in ids] == list(range(10))
    assert cluster.payloads(T) == [b"%d" % i for i in range(10)]


async def test_send_async_waits_when_pending_is_full(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(
        T, max_pending_messages=4, batching_max_messages=2, batching_max_publish_delay_ms=0
    )
    cluster.ack_gate.clear()
    futs = [await producer.send_async(b"a") for _ in range(4)]
    assert producer.pending == 4
    blocked = asyncio.create_task(producer.send_async(b"b"))
    await wait_until(lambda: len(cluster.frames) == 2, timeout_s=5, what="the 4 pending messages sent")
    assert not blocked.done() and producer.pending == 4
    cluster.ack_gate.set()
    fifth = await blocked
    await asyncio.gather(*futs)
    assert (await fifth).offset == 4


async def test_send_async_waits_when_pending_bytes_are_full(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    producer = await client.create_producer(
        T, max_pending_bytes=1000, batching_max_messages=2, batching_max_publish_delay_ms=0
    )
    cluster.ack_gate.clear()
    futs = [await producer.send_async(b"a" * 300, properties={"k": "vv"}) for _ in range(3)]
    assert producer.pending_bytes == 3 * 303  # payload and property bytes
    blocked = asyncio.create_task(producer.send_async(b"b" * 300))  # 909 + 300 > 1000
    await wait_until(lambda: len(cluster.frames) == 2, timeout_s=5, what="the 3 pending messages sent")
    assert not blocked.done() and producer.pending == 3
    cluster.ack_gate.set()
    fourth = await blocked
    assert [(await f).offset for f in futs] == [0, 1, 2]
    assert (await fourth).offset == 3
    await producer.flush()
    assert producer.pending_bytes == 0 and producer.pending == 0


async def test_a_message_larger_than_max_pending_bytes_goes_alone(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    producer = await client.create_producer(T, max_pending_bytes=100, batching_max_publish_delay_ms=0)
    cluster.ack_gate.clear()
    small = await producer.send_async(b"s" * 10)
    big = asyncio.create_task(producer.send_async(b"B" * 500))  # waits for the pipe to drain
    await wait_until(lambda: len(cluster.frames) == 1, timeout_s=5, what="the small message sent")
    assert not big.done()
    cluster.ack_gate.set()
    assert (await small).offset == 0
    assert (await (await big)).offset == 1
    assert producer.pending_bytes == 0


async def test_failed_messages_free_their_pending_bytes(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(T, max_pending_bytes=1000, send_timeout_s=0.3)
    cluster.refuse_next.append(
        pb.ErrorDetail(code="MESSAGE_TOO_LARGE", grpc_code=3, message="too big for policy", retryable=False)
    )
    with pytest.raises(MessageTooLarge):
        await producer.send(b"y" * 800)
    assert producer.pending_bytes == 0
    assert (await producer.send(b"z" * 800)).offset == 0  # room again: it is not held back
    cluster.ack_gate.clear()
    with pytest.raises(Timeout):
        await producer.send(b"x" * 800)
    assert producer.pending_bytes == 0 and producer.pending == 0


async def test_too_large_message_fails_alone(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(T, batching_max_publish_delay_ms=60_000, enable_chunking=False)
    small1 = await producer.send_async(b"s1")
    big = await producer.send_async(b"B" * 5000)  # the fake's limit is 4096
    small2 = await producer.send_async(b"s2")
    await producer.flush()
    with pytest.raises(MessageTooLarge, match="5000 bytes"):
        await big
    assert [(await small1).offset, (await small2).offset] == [0, 1]
    assert cluster.payloads(T) == [b"s1", b"s2"]
    assert all(len(m.payload) < 5000 for f in cluster.frames for m in f.messages)


async def test_batch_refused_by_broker_fails_its_messages_and_stream_continues(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    producer = await client.create_producer(T)
    cluster.refuse_next.append(
        pb.ErrorDetail(code="MESSAGE_TOO_LARGE", grpc_code=3, message="too big for policy", retryable=False)
    )
    with pytest.raises(MessageTooLarge, match="too big for policy"):
        await producer.send(b"refused")
    assert (await producer.send(b"accepted")).offset == 0
    assert len(cluster.calls_of("CreateProducer")) == 1  # no reconnect was needed


async def test_retryable_refusal_is_retried(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(T)
    cluster.refuse_next.append(
        pb.ErrorDetail(code="PRODUCER_QUEUE_FULL", grpc_code=8, message="slow down", retryable=True)
    )
    mid = await producer.send(b"eventually")
    assert mid.offset == 0
    assert cluster.payloads(T) == [b"eventually"]
    assert [f.count for f in cluster.frames] == [1, 1]  # refused once, then accepted


async def test_unacked_messages_time_out(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(T, send_timeout_s=0.3)
    cluster.ack_gate.clear()
    with pytest.raises(Timeout, match=r"send_timeout_s=0\.3") as exc:
        await producer.send(b"never acked")
    assert isinstance(exc.value, TimeoutError)
    assert producer.pending == 0


async def test_close_flushes_then_rejects_sends(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer(T, batching_max_publish_delay_ms=60_000)
    futs = [await producer.send_async(b"%d" % i) for i in range(3)]
    await producer.close()
    assert all(f.done() and f.exception() is None for f in futs)
    assert len(cluster.calls_of("CloseProducer")) == 1
    with pytest.raises(ClientClosed):
        await producer.send(b"late")
    await producer.close()  # idempotent


async def test_client_close_closes_its_producers(cluster: FakeCluster) -> None:
    async with DanubeClient(cluster.service_url, health_check_interval_s=0) as c:
        producer = await c.create_producer(T)
        fut = await producer.send_async(b"in flight at close")
    assert fut.result().offset == 0
    assert producer.closed


async def test_in_flight_batches_are_capped_and_the_open_batch_grows(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    producer = await client.create_producer(
        T, max_inflight_batches=2, batching_max_messages=1000, batching_max_publish_delay_ms=0
    )
    cluster.ack_gate.clear()
    futs = [await producer.send_async(b"a")]  # idle pipe: goes at once
    await wait_until(lambda: len(cluster.frames) == 1, timeout_s=5, what="first batch in flight")
    futs.append(await producer.send_async(b"b"))  # no linger: a second batch
    await wait_until(lambda: len(cluster.frames) == 2, timeout_s=5, what="second batch in flight")
    for i in range(8):
        futs.append(await producer.send_async(b"c%d" % i))
        for _ in range(10):  # give the sender every chance to send a third batch (it must not)
            await asyncio.sleep(0)
    assert len(cluster.frames) == 2
    cluster.ack_gate.set()
    ids = await asyncio.gather(*futs)
    assert [i.offset for i in ids] == list(range(10))
    assert [f.count for f in cluster.frames] == [1, 1, 8]  # the waiting messages went as one batch


def test_max_inflight_batches_must_be_positive() -> None:
    with pytest.raises(InvalidArgument, match="max_inflight_batches"):
        ProducerOptions(max_inflight_batches=0)


def test_max_pending_bytes_must_not_be_negative() -> None:
    with pytest.raises(InvalidArgument, match="max_pending_bytes"):
        ProducerOptions(max_pending_bytes=-1)
