"""Readers (``DanubeClient.create_reader``) on real etcd and in-process brokers: start positions,
the live tail, nothing stored in etcd, no hold on retention, and a topic move in the middle."""

from __future__ import annotations

import asyncio
import io
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from danube_broker.reliable_topic import ReliableTopic
from danube_common.errors import FailedPrecondition
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from danube_sdk import ClientTimeout, DanubeClient, DispatchStrategy, InitialPosition, Reader, StartPosition
from danube_sdk.cli.produce_consume import build_parser, run_consume
from danube_sdk.producer import Producer
from tests.integration.test_broker_grpc import Broker
from tests.integration.test_reliable_dispatch import receive, reliable_broker, stop
from tests.support import unique, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
async def brokers(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path
) -> AsyncIterator[tuple[Broker, Broker]]:
    small = {"wal": {"segment_max_bytes": 4096}, "move_timeout_s": 20.0}
    a = await reliable_broker(etcd_server, cluster_name, tmp_path / "a", **small)
    b = await reliable_broker(etcd_server, cluster_name, tmp_path / "b", **small)
    try:
        yield a, b
    finally:
        await stop(a)
        await stop(b)


async def reliable_producer(client: DanubeClient, topic: str) -> Producer[bytes]:
    return await client.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE)


async def read(reader: Reader[bytes], n: int, timeout_s: float = 10.0) -> list[tuple[int, bytes]]:
    out = []
    for _ in range(n):
        msg = await reader.receive(timeout_s=timeout_s)
        out.append((msg.offset, msg.payload))
    return out


def owner(brokers: tuple[Broker, Broker], topic: str) -> Broker:
    """The broker the topic is loaded on (placement picks either)."""
    (b,) = [b for b in brokers if topic in b.registry.topics]
    return b


def rt_of(b: Broker, topic: str) -> ReliableTopic:
    rt = b.registry.topics[topic].reliable
    assert rt is not None
    return rt


async def test_start_positions_and_the_live_tail(
    brokers: tuple[Broker, Broker], etcd_store: EtcdStore, cluster_name: str
) -> None:
    a, _ = brokers
    topic = f"/default/{unique('rd')}"
    async with DanubeClient(a.info.url) as client:
        producer = await reliable_producer(client, topic)
        for i in range(5):
            await producer.send(f"m{i}".encode())
        # A publish time strictly after the first five (publish times are in ms).
        boundary_ms = time.time_ns() // 1_000_000 + 1
        await wait_until(lambda: time.time_ns() // 1_000_000 > boundary_ms, what="the clock moved on")
        for i in range(5, 10):
            await producer.send(f"m{i}".encode())
        expected = [(i, f"m{i}".encode()) for i in range(10)]

        earliest = await client.create_reader(topic, start="earliest")
        from_offset = await client.create_reader(topic, start=StartPosition.offset(4))
        from_time = await client.create_reader(topic, start=StartPosition.timestamp(boundary_ms))
        latest = await client.create_reader(topic)  # the default: latest
        assert await read(earliest, 10) == expected
        assert await read(from_offset, 6) == expected[4:]
        assert await read(from_time, 5) == expected[5:]
        with pytest.raises(ClientTimeout):
            await latest.receive(timeout_s=0.3)

        # Every reader follows the live tail.
        await producer.send(b"m10")
        for reader in (earliest, from_offset, from_time, latest):
            assert await read(reader, 1) == [(10, b"m10")]
        assert {r.next_offsets[topic] for r in (earliest, from_offset, from_time, latest)} == {11}

        # Nothing of a reader is in etcd: no subscription record, no cursor.
        kvs, _ = await etcd_store.get_prefix(Keys(cluster_name).subscriptions_prefix(TopicName.parse(topic)))
        assert kvs == []
        home = owner(brokers, topic)
        rt = rt_of(home, topic)
        assert len(home.registry.topics[topic].subscriptions) == 4
        for reader in (earliest, from_offset, from_time, latest):
            await reader.close()
        await wait_until(
            lambda: not home.registry.topics[topic].subscriptions, what="readers dropped on close"
        )
        assert rt._persisted == {}


async def test_a_reader_is_refused_on_a_non_reliable_topic_and_a_durable_name(
    brokers: tuple[Broker, Broker],
) -> None:
    a, _ = brokers
    plain = f"/default/{unique('plain')}"
    topic = f"/default/{unique('rd')}"
    async with DanubeClient(a.info.url, operation_timeout_s=5) as client:
        await (await client.create_producer(plain)).send(b"x")
        with pytest.raises(FailedPrecondition, match="not reliable"):
            await client.create_reader(plain, start="earliest")
        await (await reliable_producer(client, topic)).send(b"x")
        await client.subscribe(topic, subscription="durable")
        with pytest.raises(FailedPrecondition, match="durable subscription"):
            await client.create_reader(topic, reader_name="durable")


async def test_retention_does_not_wait_for_a_reader(brokers: tuple[Broker, Broker]) -> None:
    a, _ = brokers
    topic = f"/default/{unique('rd')}"
    async with DanubeClient(a.info.url) as client:
        producer = await reliable_producer(client, topic)
        await producer.send(b"first")
        durable = await client.subscribe(
            topic, subscription="audit", initial_position=InitialPosition.EARLIEST
        )
        reader = await client.create_reader(topic, start="earliest", receiver_queue_size=1)
        assert await read(reader, 1) == [(0, b"first")]  # then it stops reading
        payload = b"x" * 500
        for _ in range(60):  # one batch each: ~8 segments of 4 KiB
            await producer.send(payload)
        for _ in range(61):
            await durable.ack(await durable.receive(timeout_s=10))
        await durable.flush_acks()
        rt = rt_of(owner(brokers, topic), topic)
        await wait_until(lambda: rt._persisted.get("audit") == 60, what="the durable cursor persisted")
        await rt.apply_retention()
        assert rt.local.first_offset > 1, "retention kept the log for the reader at offset 1"
        # The reader goes on: what its dispatcher had already read is delivered, then what the
        # log still keeps; what retention took in between is reported as skipped.
        offsets: list[int] = []
        while not offsets or offsets[-1] < 60:
            offsets.append((await reader.receive(timeout_s=10)).offset)
        assert offsets == sorted(set(offsets)), "in order, no duplicate"
        skipped = [o for start, end in reader.skipped.get(topic, []) for o in range(start, end)]
        assert sorted(offsets + skipped) == list(range(1, 61)), "each offset received or reported skipped"
        # A new reader asking for an offset that is gone is told so, not moved silently.
        late = await client.create_reader(topic, start=1)
        first = (await late.receive(timeout_s=10)).offset
        assert first == rt.local.first_offset > 1
        assert late.skipped == {topic: [(1, first)]}


async def test_a_reader_continues_across_a_topic_move(
    brokers: tuple[Broker, Broker], etcd_store: EtcdStore, cluster_name: str
) -> None:
    topic = f"/default/{unique('rdmove')}"
    res = Resources(etcd_store, Keys(cluster_name))
    async with DanubeClient(brokers[0].info.url, operation_timeout_s=30) as client:
        producer = await reliable_producer(client, topic)
        for i in range(50):
            await producer.send(f"m{i}".encode())
        reader = await client.create_reader(topic, start="earliest")
        assert await read(reader, 30) == [(i, f"m{i}".encode()) for i in range(30)]

        received: list[tuple[int, bytes]] = []

        async def keep_reading() -> None:
            while len(received) < 170:
                received.extend(await read(reader, 1, timeout_s=30))

        reading = asyncio.create_task(keep_reading())
        sends = [await producer.send_async(f"m{i}".encode()) for i in range(50, 100)]
        t = TopicName.parse(topic)
        a = owner(brokers, topic)
        (b,) = [x for x in brokers if x is not a]
        own = await res.get_owner(t)
        assert own is not None and own.broker_id == a.cfg.broker_id
        assert await res.mark_moving(own, b.cfg.broker_id) is not None
        for i in range(100, 200):  # sent while the topic moves: the producer re-attaches too
            sends.append(await producer.send_async(f"m{i}".encode()))
        ids = await asyncio.gather(*sends)
        assert [m.offset for m in ids] == list(range(50, 200))
        await asyncio.wait_for(reading, 60)
        own = await res.get_owner(t)
        assert own is not None and own.broker_id == b.cfg.broker_id, "the topic moved to b"
        assert topic in b.registry.topics and topic not in a.registry.topics
        assert received == [(i, f"m{i}".encode()) for i in range(30, 200)], "no gap, no duplicate"
        assert reader.skipped == {}
        assert reader._consumer._parts[topic].broker_url == b.info.url, "re-attached at the new owner"
        await reader.close()


async def test_danube_cli_consume_reader(
    brokers: tuple[Broker, Broker], etcd_store: EtcdStore, cluster_name: str
) -> None:
    topic = f"/default/{unique('rdcli')}"
    url = brokers[0].info.url
    async with DanubeClient(url) as client:
        producer = await reliable_producer(client, topic)
        for i in range(3):
            await producer.send(f"m{i}".encode())
    out, err = io.StringIO(), io.StringIO()
    args = build_parser({}).parse_args(
        ["consume", "-s", url, "-t", topic, "--reader", "--start", "1", "-c", "2"]
    )
    assert await run_consume(args, out=out, err=err, stop=asyncio.Event()) == 0
    assert out.getvalue().splitlines() == ["1 - m1 -", "2 - m2 -"]
    assert f"reading {topic} from offset 1 as reader" in err.getvalue()
    assert "received 2 messages" in err.getvalue()
    kvs, _ = await etcd_store.get_prefix(Keys(cluster_name).subscriptions_prefix(TopicName.parse(topic)))
    assert kvs == []


async def test_a_reader_that_never_streams_expires_with_its_consumer(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path
) -> None:
    b = await reliable_broker(
        etcd_server, cluster_name, tmp_path / "x", consumer_reconnect_grace_s=0.3, sweep_interval_s=0.1
    )
    topic = f"/default/{unique('rdgone')}"
    try:
        async with DanubeClient(b.info.url) as client:
            await (await reliable_producer(client, topic)).send(b"x")
        # A reader's Subscribe from a client that dies before it opens a stream.
        resp = await b.consumers.Subscribe(
            pb.ConsumerRequest(
                topic_name=topic, consumer_name="r", subscription="r", reader=pb.ReaderStart(earliest=True)
            ),
            timeout=10,
        )
        assert resp.reader_start_offset == 0
        subs = b.registry.topics[topic].subscriptions
        assert subs["r"].non_durable
        await wait_until(lambda: "r" not in subs, timeout_s=10, what="the reader expired with its consumer")
        assert resp.consumer_id not in b.registry.consumers
    finally:
        await stop(b)


async def test_a_move_waits_for_an_attached_reader_to_catch_up(
    brokers: tuple[Broker, Broker], etcd_store: EtcdStore, cluster_name: str
) -> None:
    """Without object storage the new owner has only what is published from the move on: the
    draining move waits for an attached reader as for a durable subscription."""
    topic = f"/default/{unique('rdlag')}"
    res = Resources(etcd_store, Keys(cluster_name))
    async with DanubeClient(brokers[0].info.url, operation_timeout_s=30) as client:
        producer = await reliable_producer(client, topic)
        await producer.send_many([f"m{i}".encode() for i in range(100)])
        reader = await client.create_reader(topic, start="earliest", receiver_queue_size=10)
        assert await read(reader, 5) == [(i, f"m{i}".encode()) for i in range(5)]
        t = TopicName.parse(topic)
        a = owner(brokers, topic)
        (b,) = [x for x in brokers if x is not a]
        own = await res.get_owner(t)
        assert own is not None
        assert await res.mark_moving(own, b.cfg.broker_id) is not None
        got = []
        for _ in range(95):  # slowly: the move must wait for every one of them
            moved = await _owner_is(res, t, b.cfg.broker_id)
            assert not moved, f"the topic moved with the reader at offset {len(got) + 5}"
            got.append((await reader.receive(timeout_s=10)).offset)
        assert got == list(range(5, 100))
        await wait_until(
            lambda: _owner_is(res, t, b.cfg.broker_id), timeout_s=20, what="moved once caught up"
        )
        await producer.send(b"after")
        msg = await reader.receive(timeout_s=20)
        assert (msg.offset, msg.payload) == (100, b"after")
        assert reader.skipped == {}


async def _owner_is(res: Resources, t: TopicName, broker_id: str) -> bool:
    own = await res.get_owner(t)
    return own is not None and own.broker_id == broker_id and not own.moving_to


async def test_a_reader_reattaching_where_it_stopped_gets_no_redelivered_copies(
    brokers: tuple[Broker, Broker],
) -> None:
    """The broker's side of a re-attach: what the broken stream held (delivered, unacked) is not
    redelivered below the offset the reader asks for, even when that is the engine's read
    position (the SDK would drop such copies unacknowledged, and hold its window and a move)."""
    topic = f"/default/{unique('rdre')}"
    async with DanubeClient(brokers[0].info.url) as client:
        producer = await reliable_producer(client, topic)
        await producer.send_many([f"m{i}".encode() for i in range(10)])
        b = owner(brokers, topic)

        async def attach(start: pb.ReaderStart) -> tuple[int, Any]:
            resp = await b.consumers.Subscribe(
                pb.ConsumerRequest(topic_name=topic, consumer_name="r", subscription="r", reader=start),
                timeout=10,
            )
            return resp.consumer_id, b.consumers.ReceiveBatches(
                pb.ReceiveBatchRequest(consumer_id=resp.consumer_id)
            )

        cid, stream = await attach(pb.ReaderStart(earliest=True))
        assert [m.msg_id.topic_offset for m in await receive(stream, 10)] == list(range(10))
        stream.cancel()  # broken before the reader acknowledged anything
        engine = b.registry.topics[topic].subscriptions["r"].engine
        assert engine is not None
        await wait_until(lambda: not b.registry.consumers[cid].connected, what="the stream seen closed")
        cid2, stream2 = await attach(pb.ReaderStart(offset=10))
        assert cid2 == cid
        await producer.send(b"m10")
        first = (await receive(stream2, 1))[0]
        assert first.msg_id.topic_offset == 10, "no copy of 0..9 before the reader's next offset"
        assert engine.backlog() == 1 and engine.cursor == 9
        stream2.cancel()


async def test_a_reader_reassembles_a_chunked_message(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path
) -> None:
    limit = 64 * 1024
    b = await reliable_broker(etcd_server, cluster_name, tmp_path / "c", max_message_size_bytes=limit)
    topic = f"/default/{unique('rdbig')}"
    try:
        async with DanubeClient(b.info.url) as client:
            producer = await reliable_producer(client, topic)
            big = os.urandom(4 * limit)  # incompressible: chunks
            ids = [await producer.send_async(p) for p in (b"before", big, b"after")]
            await asyncio.gather(*ids)
            reader = await client.create_reader(topic, start="earliest")
            got = [await reader.receive(timeout_s=20) for _ in range(3)]
            assert [m.payload for m in got] == [b"before", big, b"after"]
            assert len(got[1].chunk_offsets) > 1
            assert reader.next_offsets[topic] == got[2].offset + 1
    finally:
        await stop(b)
