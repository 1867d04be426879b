"""Compression per batch (packs) through a real broker on real etcd: a pack is stored as one
record and arrives as its messages (with the ids the producer got), key-shared subscriptions
keep each key on one consumer, a consumer restarted with part of a pack acknowledged gets the
pack again, a Reader reads packs, and per-batch compression stores far fewer bytes than
per-message compression of the same messages."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from danube_sdk import ClientTimeout, Compression, Consumer, DanubeClient, DispatchStrategy, SubType
from tests.integration.test_broker_grpc import Broker
from tests.integration.test_sdk_large_messages import broker, wal_bytes
from tests.support import unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

__all__ = ["broker"]  # the fixture (one broker on real etcd), shared with test_sdk_large_messages

RELIABLE = DispatchStrategy.RELIABLE


def order(i: int) -> bytes:
    """A ~1 KB JSON order: compressible, like most application payloads."""
    items = [{"sku": f"sku-{(i + n) % 40:04d}", "qty": 1 + n % 3, "price_cents": 1999} for n in range(9)]
    return json.dumps(
        {"id": i, "customer": f"customer-{i % 50:04d}", "status": "paid", "items": items}
    ).encode()


@pytest.fixture
async def client(broker: Broker) -> AsyncIterator[DanubeClient]:
    c = DanubeClient(broker.info.url, health_check_interval_s=0)
    try:
        yield c
    finally:
        await c.close()


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
async def test_per_batch_compression_stores_far_less_than_per_message(
    broker: Broker, client: DanubeClient, codec: Compression
) -> None:
    docs = [order(i) for i in range(300)]
    sizes = {}
    for packs in (True, False):
        topic = f"/default/{unique('ratio')}"
        producer = await client.create_producer(
            topic,
            dispatch_strategy=RELIABLE,
            compression=codec,
            pack_batches=packs,
            batching_max_publish_delay_ms=20,
        )
        await producer.send(b"create")
        consumer = await client.subscribe(topic, subscription="s", sub_type=SubType.EXCLUSIVE)
        ids = await producer.send_many(docs)
        got = [await consumer.receive(timeout_s=20) for _ in docs]
        assert [m.payload for m in got] == docs
        assert [m.message_id for m in got] == ids
        assert any(i.batch_index is not None for i in ids) == packs
        for m in got:
            await consumer.ack(m)
        await consumer.flush_acks()
        sizes[packs] = wal_bytes(broker, topic)
        await producer.close()
        await consumer.close()
    assert sizes[True] * 1.5 < sizes[False], (
        f"WAL bytes per batch {sizes[True]} vs per message {sizes[False]}"
    )


async def test_key_shared_keeps_each_key_on_one_consumer_with_packs(
    broker: Broker, client: DanubeClient
) -> None:
    topic = f"/default/{unique('ks')}"
    producer = await client.create_producer(topic, dispatch_strategy=RELIABLE, compression="zstd")
    await producer.send(b"create", key="k0")
    a = await client.subscribe(topic, subscription="s", consumer_name="a", sub_type=SubType.KEY_SHARED)
    b = await client.subscribe(topic, subscription="s", consumer_name="b", sub_type=SubType.KEY_SHARED)
    sent = {f"k{n}": [order(n * 100 + i) for i in range(40)] for n in range(6)}
    futs = []  # bursts of 5 messages per key, the keys interleaved: packs of 5
    for burst in range(8):
        for k, ps in sent.items():
            futs += [await producer.send_async(p, key=k) for p in ps[burst * 5 : burst * 5 + 5]]
    await asyncio.gather(*futs)
    got: dict[str, list[tuple[str, bytes]]] = {"a": [], "b": []}  # (key, payload) in arrival order

    async def drain(name: str, consumer: Consumer[bytes]) -> None:
        while True:
            try:
                m = await consumer.receive(timeout_s=2)
            except ClientTimeout:
                return  # drained
            got[name].append((m.key or "", m.payload))
            await consumer.ack(m)

    await asyncio.gather(drain("a", a), drain("b", b))
    keys_a = {k for k, _ in got["a"]}
    keys_b = {k for k, _ in got["b"]}
    assert not (keys_a & keys_b), f"a key went to both consumers: {keys_a & keys_b}"
    for key, payloads in sent.items():
        mine = got["a"] if key in keys_a else got["b"]
        assert [p for k, p in mine if k == key] == payloads, key  # all of them, in order
    assert any(f.result().batch_index is not None for f in futs)


async def test_a_consumer_restarted_with_part_of_a_pack_acked_gets_the_pack_again(
    broker: Broker, client: DanubeClient
) -> None:
    topic = f"/default/{unique('restart')}"
    producer = await client.create_producer(
        topic, dispatch_strategy=RELIABLE, compression="lz4", batching_max_messages=10
    )
    await producer.send(b"create")
    first = await client.subscribe(topic, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE)
    docs = [order(i) for i in range(10)]
    ids = await producer.send_many(docs)
    assert {i.offset for i in ids} == {ids[0].offset} and [i.batch_index for i in ids] == list(range(10))
    got = [await first.receive(timeout_s=10) for _ in docs]
    for m in got[:6]:
        await first.ack(m)
    await first.flush_acks()
    await first.close()

    second_client = DanubeClient(broker.info.url, health_check_interval_s=0)
    try:
        second = await second_client.subscribe(
            topic, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE
        )
        again = [await second.receive(timeout_s=10) for _ in docs]  # at-least-once: the whole pack
        assert [m.payload for m in again] == docs and [m.batch_index for m in again] == list(range(10))
        for m in again:
            await second.ack(m)
        await second.flush_acks()
        await producer.send(b"sentinel")
        nxt = await second.receive(timeout_s=10)
        assert nxt.payload == b"sentinel"  # the pack's offset was acknowledged: not again
        await second.ack(nxt)
        await second.close()
        third = await second_client.subscribe(
            topic, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE
        )
        await producer.send(b"last")
        assert (await third.receive(timeout_s=10)).payload == b"last"  # nothing of before came back
    finally:
        await second_client.close()


async def test_a_reader_reads_packs_as_their_messages(broker: Broker, client: DanubeClient) -> None:
    topic = f"/default/{unique('reader')}"
    producer = await client.create_producer(topic, dispatch_strategy=RELIABLE, compression="zstd")
    docs = [order(i) for i in range(50)]
    ids = await producer.send_many(docs)
    reader = await client.create_reader(topic, start="earliest")
    try:
        got = [await reader.receive(timeout_s=10) for _ in docs]
    finally:
        await reader.close()
    assert [m.payload for m in got] == docs and [m.message_id for m in got] == ids
    assert len({i.offset for i in ids}) < len(ids)  # they did travel in packs
