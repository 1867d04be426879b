"""The SDK's multiplexed streams against an in-process broker on real etcd: many producers and
consumers of many topics share one PublishMux and one ConsumeMux stream; a topic unloaded from
under one producer/consumer re-attaches only those (no loss, no duplicate with idempotence);
the broker restarting brings everything back; ``multiplex=False`` uses per-topic streams."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator

import pytest

from danube_common.etcd_server import EtcdProcess
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from danube_sdk import ClientClosed, Consumer, DanubeClient, DispatchStrategy, Producer, SubType
from tests.integration.test_broker_grpc import Broker, start_broker
from tests.support import unique, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

TOPICS = 12
PER_TOPIC = 30


@pytest.fixture
async def mux_broker(etcd_server: EtcdProcess, cluster_name: str) -> AsyncIterator[Broker]:
    b = await start_broker(etcd_server, cluster_name)
    try:
        yield b
    finally:
        await b.channel.close()
        if not b.task.done():
            await b.shutdown()


async def attach(
    client: DanubeClient, topics: list[str]
) -> tuple[list[Producer[bytes]], list[Consumer[bytes]]]:
    producers = [
        await client.create_producer(t, producer_name="p", dispatch_strategy=DispatchStrategy.RELIABLE)
        for t in topics
    ]
    consumers = [
        await client.subscribe(t, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE)
        for t in topics
    ]
    return producers, consumers


async def receive_exactly(
    consumer: Consumer[bytes], expected: list[bytes], *, redeliveries: bool = False
) -> None:
    """Receive (and ack) until every ``expected`` payload arrived. A payload stored twice (a
    second offset) always fails; the same message again (same offset: a redelivery after a
    re-attach) only without ``redeliveries``."""
    offsets: dict[bytes, int] = {}
    while len(offsets) < len(expected):
        msg = await consumer.receive(timeout_s=20)
        assert msg.payload in expected, f"unexpected {msg.payload!r}"
        seen = offsets.setdefault(msg.payload, msg.offset)
        assert seen == msg.offset, f"{msg.payload!r} stored twice: offsets {seen} and {msg.offset}"
        await consumer.ack(msg)
        if not redeliveries:
            assert len(offsets) == len(set(offsets)), "duplicate delivery"
    await consumer.flush_acks()


async def publish(producers: list[Producer[bytes]], topics: list[str], start: int, n: int) -> None:
    async def one(p: Producer[bytes], t: str) -> None:
        ids = await asyncio.gather(
            *[await p.send_async(f"{t}:{i}".encode()) for i in range(start, start + n)]
        )
        offsets = [m.offset for m in ids]
        assert offsets == sorted(offsets), f"acks of {t} out of order: {offsets}"

    await asyncio.gather(*(one(p, t) for p, t in zip(producers, topics, strict=True)))


async def test_many_topics_share_one_stream_of_each_kind(mux_broker: Broker) -> None:
    events = mux_broker.registry.events
    assert events is not None
    topics = [f"/default/{unique('many')}" for _ in range(TOPICS)]
    client = DanubeClient(mux_broker.info.url)
    try:
        producers, consumers = await attach(client, topics)
        await publish(producers, topics, 0, PER_TOPIC)
        for c, t in zip(consumers, topics, strict=True):
            await receive_exactly(c, [f"{t}:{i}".encode() for i in range(PER_TOPIC)])
        assert events.mux_open == {"publish": 1, "consume": 1}
        # No per-topic streams and no health checks: every producer is bound to the one stream.
        assert all(p.open_streams == 1 for p in mux_broker.registry.producers.values())
        assert all(c.connected for c in mux_broker.registry.consumers.values())
    finally:
        await client.close()
    await wait_until(lambda: events.mux_open == {"publish": 0, "consume": 0}, what="mux streams closed")


async def test_multiplex_off_uses_a_stream_per_producer_and_consumer(mux_broker: Broker) -> None:
    events = mux_broker.registry.events
    assert events is not None
    topics = [f"/default/{unique('nomux')}" for _ in range(3)]
    client = DanubeClient(mux_broker.info.url, multiplex=False)
    try:
        producers, consumers = await attach(client, topics)
        await publish(producers, topics, 0, 10)
        for c, t in zip(consumers, topics, strict=True):
            await receive_exactly(c, [f"{t}:{i}".encode() for i in range(10)])
        assert events.mux_open == {"publish": 0, "consume": 0}
    finally:
        await client.close()


async def test_an_unloaded_topic_reattaches_only_its_own_clients(
    mux_broker: Broker, etcd_resources: Resources
) -> None:
    topics = [f"/default/{unique('move')}" for _ in range(4)]
    moved = topics[0]
    client = DanubeClient(mux_broker.info.url)
    try:
        producers, consumers = await attach(client, topics)
        await publish(producers, topics, 0, 10)
        ids_before = {p.topic_name: p.id for p in mux_broker.registry.producers.values()}
        # The topic's ownership is released (as in a move): the broker unloads it and tells its
        # producer and consumer in-band; the SDK looks it up again and the broker claims it
        # anew (a new epoch): only those two re-attach, on the same shared streams.
        own = await etcd_resources.get_owner(TopicName.parse(moved))
        assert own is not None and await etcd_resources.release(own)

        def moved_producer_reattached() -> bool:
            now = {p.topic_name: p.id for p in mux_broker.registry.producers.values()}
            return moved in now and now[moved] != ids_before[moved]

        # The unload reaches the broker through its etcd watch: sends before it would still go
        # to the old producer, so wait for the re-attach it causes.
        await wait_until(moved_producer_reattached, what=f"the producer of {moved} re-attached")
        await publish(producers, topics, 10, 10)
        for c, t in zip(consumers, topics, strict=True):
            await receive_exactly(c, [f"{t}:{i}".encode() for i in range(20)], redeliveries=t == moved)
        ids_after = {p.topic_name: p.id for p in mux_broker.registry.producers.values()}
        assert ids_after[moved] != ids_before[moved]
        for t in topics[1:]:
            assert ids_after[t] == ids_before[t], f"{t} re-attached although it did not move"
        assert mux_broker.registry.events is not None
        assert mux_broker.registry.events.mux_open == {"publish": 1, "consume": 1}
    finally:
        await client.close()


async def test_a_broker_restart_reconnects_everything(etcd_server: EtcdProcess, cluster_name: str) -> None:
    data_dir = tempfile.mkdtemp(prefix="danube-mux-wal-")
    first = await start_broker(etcd_server, cluster_name, data_dir=data_dir)
    topics = [f"/default/{unique('restart')}" for _ in range(4)]
    client = DanubeClient(first.info.url)
    second: Broker | None = None
    try:
        producers, consumers = await attach(client, topics)
        await publish(producers, topics, 0, 10)
        await first.channel.close()
        await first.shutdown()
        second = await start_broker(
            etcd_server,
            cluster_name,
            data_dir=data_dir,
            listen_addr=first.info.addr,
            broker_id=first.cfg.broker_id,
        )
        await publish(producers, topics, 10, 10)
        for c, t in zip(consumers, topics, strict=True):
            await receive_exactly(c, [f"{t}:{i}".encode() for i in range(20)], redeliveries=True)
        assert second.registry.events is not None
        assert second.registry.events.mux_open == {"publish": 1, "consume": 1}
    finally:
        await client.close()
        if second is not None:
            await second.channel.close()
            await second.shutdown()


async def test_a_second_consumer_and_producer_of_the_same_name_take_the_first_over(
    mux_broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker knows one consumer (producer) per name; two of them open in one client would
    take each other over in turns on the shared stream. The newer one closes the older."""
    topic = f"/default/{unique('again')}"
    client = DanubeClient(mux_broker.info.url)
    try:
        (p1,), (c1,) = await attach(client, [topic])
        await publish([p1], [topic], 0, 10)
        await receive_exactly(c1, [f"{topic}:{i}".encode() for i in range(10)])
        (p2,), (c2,) = await attach(client, [topic])
        assert p1.closed and c1.closed
        with pytest.raises(ClientClosed, match="taken over"):
            await c1.receive(timeout_s=5)
        with pytest.raises(ClientClosed, match="taken over"):
            await p1.send(b"late")
        # The new producer continues the name's sequence (nothing dropped as a duplicate) and
        # the new consumer resumes after what the first one acked.
        await publish([p2], [topic], 10, 10)
        await receive_exactly(c2, [f"{topic}:{i}".encode() for i in range(10, 20)])
        assert not [r for r in caplog.records if "again on" in r.getMessage()], "lanes taken over in turns"
    finally:
        await client.close()
