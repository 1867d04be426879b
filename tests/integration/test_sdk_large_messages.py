"""Compression and chunked large messages through a real broker on real etcd, on the
multiplexed streams and on per-topic streams: a 10 MB message through a 1 MB limit (reliable
and non-reliable), redelivery of the whole message after a nack, a consumer restarted while it
holds part of a chunked message, a producer that died mid-message, and compressed payloads
stored compressed in the write-ahead log."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from danube_common.etcd_server import EtcdProcess
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import ClientTimeout, Compression, Consumer, DanubeClient, DispatchStrategy, SubType
from tests.integration.test_broker_grpc import Broker, batch_of, start_broker
from tests.support import unique, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

LIMIT = 1024 * 1024
BIG = 10 * LIMIT  # 10 MiB: ten chunks of exactly 1 MiB


@pytest.fixture
async def broker(etcd_server: EtcdProcess, cluster_name: str) -> AsyncIterator[Broker]:
    b = await start_broker(etcd_server, cluster_name, max_message_size_bytes=LIMIT)
    try:
        yield b
    finally:
        await b.channel.close()
        if not b.task.done():
            await b.shutdown()


def client_of(b: Broker, multiplex: bool) -> DanubeClient:
    return DanubeClient(b.info.url, multiplex=multiplex, health_check_interval_s=0)


async def none_left(consumer: Consumer[bytes], sentinel: bytes) -> None:
    """The next message is ``sentinel``: nothing of what was acked before came back, not even
    a chunk (chunks before the sentinel would be waiting in the assembler)."""
    msg = await consumer.receive(timeout_s=20)
    assert msg.payload == sentinel, f"expected {sentinel!r} next, got {msg!r}"
    assert all(p.chunks.pending == 0 for p in consumer._parts.values()), "chunks came back"
    await consumer.ack(msg)


@pytest.mark.parametrize("multiplex", [True, False], ids=["mux", "per-topic"])
@pytest.mark.parametrize("dispatch", [DispatchStrategy.RELIABLE, DispatchStrategy.NON_RELIABLE])
async def test_a_10mb_message_passes_a_1mb_limit_in_chunks(
    broker: Broker, multiplex: bool, dispatch: DispatchStrategy
) -> None:
    topic = f"/default/{unique('big')}"
    client = client_of(broker, multiplex)
    try:
        producer = await client.create_producer(topic, dispatch_strategy=dispatch)
        await producer.send(b"first")  # creates the topic
        consumer = await client.subscribe(topic, subscription="s", sub_type=SubType.EXCLUSIVE)
        big = os.urandom(BIG)  # incompressible
        ids = [await producer.send_async(p) for p in (b"before", big, b"after")]
        before, big_id, after = await asyncio.gather(*ids)
        assert big_id.offset == before.offset + 1 and after.offset == before.offset + 11
        got = [await consumer.receive(timeout_s=30) for _ in range(3)]
        assert [len(m.payload) for m in got] == [6, BIG, 5]
        assert got[1].payload == big
        assert got[1].chunk_offsets == tuple(range(big_id.offset, big_id.offset + 10))
        assert (got[0].payload, got[2].payload) == (b"before", b"after")
        for m in got:
            await consumer.ack(m)
        await consumer.flush_acks()
        if dispatch == DispatchStrategy.RELIABLE:
            await wait_until(
                lambda: consumer_backlog(broker, topic) == 0, timeout_s=10, what="every chunk acked"
            )
    finally:
        await client.close()


def consumer_backlog(b: Broker, topic: str) -> int:
    """Delivered-but-unacked messages of ``topic``'s consumers on the broker."""
    return sum(len(c.unacked) for c in b.registry.consumers.values() if c.topic_name == topic)


@pytest.mark.parametrize("multiplex", [True, False], ids=["mux", "per-topic"])
async def test_a_nack_redelivers_the_whole_chunked_message(broker: Broker, multiplex: bool) -> None:
    topic = f"/default/{unique('nack')}"
    client = client_of(broker, multiplex)
    try:
        producer = await client.create_producer(
            topic, dispatch_strategy=DispatchStrategy.RELIABLE, compression=Compression.ZSTD
        )
        await producer.send(b"create")
        consumer = await client.subscribe(topic, subscription="s", sub_type=SubType.EXCLUSIVE)
        big = os.urandom(3 * LIMIT // 2) + b"z" * LIMIT  # zstd shrinks it, not below the limit
        await producer.send(big)
        first = await consumer.receive(timeout_s=30)
        assert first.payload == big and len(first.chunk_offsets) == 2
        await consumer.nack(first, delay_ms=0)
        again = await consumer.receive(timeout_s=30)
        assert again.payload == big and again.chunk_offsets == first.chunk_offsets
        assert again.redelivery_count == 1
        await consumer.ack(again)
        await producer.send(b"sentinel")
        await none_left(consumer, b"sentinel")
    finally:
        await client.close()


async def test_a_consumer_restarted_mid_message_gets_the_whole_message(broker: Broker) -> None:
    """The first consumer may hold only 3 unacked messages: it receives 3 of the 10 chunks and
    waits for the rest. It is closed (a restart); its successor gets all 10 chunks again from
    the subscription's cursor and acknowledges the whole message, so a third consumer gets
    nothing of it again."""
    topic = f"/default/{unique('restart')}"
    producer_client = client_of(broker, True)
    try:
        producer = await producer_client.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE)
        await producer.send(b"create")
        first_client = client_of(broker, True)
        first = await first_client.subscribe(
            topic, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE, max_unacked_messages=3
        )
        big = os.urandom(BIG)
        await producer.send(big)
        part = first._parts[topic]
        await wait_until(lambda: len(chunks_held(part.chunks)) == 3, timeout_s=20, what="3 chunks held")
        with pytest.raises(ClientTimeout):
            await first.receive(timeout_s=0.2)  # incomplete: nothing delivered
        await first_client.close()

        second_client = client_of(broker, True)
        second = await second_client.subscribe(
            topic, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE
        )
        msg = await second.receive(timeout_s=30)
        assert msg.payload == big and len(msg.chunk_offsets) == 10
        await second.ack(msg)
        await second_client.close()

        third_client = client_of(broker, False)
        third = await third_client.subscribe(
            topic, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE
        )
        await producer.send(b"sentinel")
        await none_left(third, b"sentinel")
        await third_client.close()
    finally:
        await producer_client.close()


def chunks_held(assembler: object) -> list[int]:
    partial = getattr(assembler, "_partial")  # noqa: B009 - test reaches into the assembler
    return [i for p in partial.values() for i in p.chunks]


async def test_chunks_of_a_producer_that_died_mid_message_are_dropped_and_acked(broker: Broker) -> None:
    topic = f"/default/{unique('orphan')}"
    client = client_of(broker, True)
    try:
        producer = await client.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE)
        await producer.send(b"create")
        consumer = await client.subscribe(
            topic, subscription="s", sub_type=SubType.EXCLUSIVE, chunked_message_timeout_s=0.5
        )
        # What a producer leaves behind when it dies after 2 of its 5 chunks: published raw.
        created = await broker.producers.CreateProducer(
            pb.ProducerRequest(producer_name="dying", topic_name=topic, dispatch_strategy=pb.Reliable),
            timeout=10,
        )
        pid = created.producer_id
        orphan = batch_of(pid, 1, [b"a" * 100, b"b" * 100])
        for i, m in enumerate(orphan.messages):
            m.chunk.CopyFrom(pb.MessageChunk(message_uuid="dead", index=i, count=5, total_size=500))
        stream = broker.producers.PublishBatches()
        await stream.write(orphan)
        ack = await stream.read()
        assert not ack.HasField("error") and ack.count == 2
        stream.cancel()
        await producer.send(b"alive")
        assert (await consumer.receive(timeout_s=20)).payload == b"alive"
        await wait_until(lambda: consumer.chunked_dropped == 1, timeout_s=10, what="orphan dropped")
        await consumer.flush_acks()
        await wait_until(lambda: consumer_backlog(broker, topic) <= 1, timeout_s=10, what="orphan acked")
        await consumer.close()
        again = await client.subscribe(topic, subscription="s", sub_type=SubType.EXCLUSIVE)
        await producer.send(b"sentinel")
        msg = await again.receive(timeout_s=20)
        assert msg.payload in (b"alive", b"sentinel")  # "alive" was never acked: it may come back
        if msg.payload == b"alive":
            await again.ack(msg)
            msg = await again.receive(timeout_s=20)
        assert msg.payload == b"sentinel"
    finally:
        await client.close()


async def test_a_slow_application_does_not_lose_a_chunked_message_to_the_timeout(broker: Broker) -> None:
    """The chunk timeout does not run while the partition's reader waits for room in the
    receive queue (the application is behind, not the producer dead)."""
    topic = f"/default/{unique('slow')}"
    client = client_of(broker, True)
    try:
        producer = await client.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE)
        await producer.send(b"create")
        consumer = await client.subscribe(
            topic,
            subscription="s",
            sub_type=SubType.EXCLUSIVE,
            receiver_queue_size=1,
            chunked_message_timeout_s=0.3,
        )
        created = await broker.producers.CreateProducer(
            pb.ProducerRequest(producer_name="raw", topic_name=topic, dispatch_strategy=pb.Reliable),
            timeout=10,
        )
        stream = broker.producers.PublishBatches()

        async def publish(seq: int, payload: bytes, index: int | None = None) -> None:
            batch = batch_of(created.producer_id, seq, [payload])
            if index is not None:
                batch.messages[0].chunk.CopyFrom(
                    pb.MessageChunk(message_uuid="slow", index=index, count=2, total_size=4)
                )
            await stream.write(batch)
            ack = await stream.read()
            assert not ack.HasField("error"), ack

        part = consumer._parts[topic]
        await publish(1, b"c0", index=0)
        await publish(2, b"p1")
        await wait_until(lambda: part.chunks.pending == 1, timeout_s=10, what="first chunk held")
        await publish(3, b"p2")
        await wait_until(lambda: part.waiting_for_room, timeout_s=10, what="reader waiting for room")
        await asyncio.sleep(1.0)  # the application is slow: three chunk timeouts pass
        assert consumer.chunked_dropped == 0
        await publish(4, b"c1", index=1)
        got = [await consumer.receive(timeout_s=10) for _ in range(3)]
        assert [m.payload for m in got] == [b"p1", b"p2", b"c0c1"]
        assert consumer.chunked_dropped == 0
        stream.cancel()
    finally:
        await client.close()


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
async def test_compressed_payloads_are_stored_compressed_and_arrive_plain(
    broker: Broker, codec: Compression
) -> None:
    topic = f"/default/{unique('packed')}"
    doc = b'{"id": 1, "customer": "customer-0001", "status": "active", "items": []}' * 14  # ~1 KB
    client = client_of(broker, True)
    try:
        plain = await client.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE)
        await plain.send(b"create")
        consumer = await client.subscribe(topic, subscription="s", sub_type=SubType.EXCLUSIVE)
        packed = await client.create_producer(  # per message (packs: test_sdk_packs.py)
            topic, dispatch_strategy=DispatchStrategy.RELIABLE, compression=codec, pack_batches=False
        )
        await packed.send_many([doc] * 200)
        got = [await consumer.receive(timeout_s=20) for _ in range(200)]
        assert all(m.payload == doc for m in got)
        assert {m.raw.compression for m in got} == {int(codec)}
        assert all(len(m.raw.payload) < len(doc) // 3 for m in got)
        wal = wal_bytes(broker, topic)
        assert wal < 200 * len(doc) // 3, f"WAL holds {wal} bytes for 200 x {len(doc)} B compressible"
    finally:
        await client.close()


def wal_bytes(b: Broker, topic: str) -> int:
    root = Path(str(b.cfg.data_dir)) / topic.strip("/")
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


async def test_compression_on_a_non_reliable_topic(broker: Broker) -> None:
    topic = f"/default/{unique('packed-np')}"
    doc = b'{"id": 1, "customer": "customer-0001", "status": "active"}' * 20
    client = client_of(broker, False)
    try:
        producer = await client.create_producer(topic, compression="lz4")
        await producer.send(b"create")
        consumer = await client.subscribe(topic, subscription="s", sub_type=SubType.SHARED)
        await producer.send_many([doc] * 50)
        got = [await consumer.receive(timeout_s=20) for _ in range(50)]
        assert all(m.payload == doc and m.raw.compression == Compression.LZ4 for m in got)
        records = {m.offset: len(m.raw.payload) for m in got}  # a pack's messages share one
        assert sum(records.values()) < 50 * len(doc) // 3
    finally:
        await client.close()


@pytest.mark.parametrize("dispatch", [DispatchStrategy.RELIABLE, DispatchStrategy.NON_RELIABLE])
async def test_a_shared_subscription_gives_each_chunked_message_to_one_consumer(
    broker: Broker, dispatch: DispatchStrategy
) -> None:
    """Two consumers on one shared subscription, large messages between small ones: every large
    message arrives whole at one of them (the broker keeps a message's chunks together), and
    every message arrives exactly once."""
    topic = f"/default/{unique('shared')}"
    clients = [client_of(broker, True) for _ in range(3)]
    try:
        producer = await clients[0].create_producer(topic, dispatch_strategy=dispatch)
        await producer.send(b"create")
        consumers = [
            await c.subscribe(topic, subscription="s", sub_type=SubType.SHARED, consumer_name=f"c{i}")
            for i, c in enumerate(clients[1:])
        ]
        bigs = [os.urandom(2 * LIMIT + 100 * i) for i in range(4)]  # three chunks each
        sent: list[bytes] = []
        for i, big in enumerate(bigs):
            sent += [f"small-{i}".encode(), big]
        await asyncio.gather(*[await producer.send_async(p) for p in sent])
        got: list[bytes] = []

        async def drain(consumer: Consumer[bytes]) -> None:
            while len(got) < len(sent):
                try:
                    msg = await consumer.receive(timeout_s=0.5)
                except ClientTimeout:
                    continue
                got.append(msg.payload)
                await consumer.ack(msg)

        await asyncio.wait_for(asyncio.gather(*(drain(c) for c in consumers)), timeout=60)
        assert sorted(got) == sorted(sent)  # whole, once each: nothing split between consumers
        assert all(p.chunks.pending == 0 for c in consumers for p in c._parts.values())
    finally:
        for c in clients:
            await c.close()
