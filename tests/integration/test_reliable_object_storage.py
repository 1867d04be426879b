"""Reliable topics with object storage: real etcd, S3 on moto_server (through a FaultyProxy),
brokers in-process, and an in-process fake WAL uploader (tests/support/segments.py) that ships
the broker's WAL segments the way the real sidecar does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc.aio
import pytest

from danube_broker.reliable_topic import ReliableTopic
from danube_broker.stats_api import topic_proto
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.log_state import LogState
from danube_common.metadata.etcd import EtcdStore
from danube_common.objstore import ObjectStore, ObjectStoreConfig, open_object_store
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.policies import topic_policies
from danube_common.resources import Resources
from danube_common.storage import SegmentDescriptor, find
from danube_common.topic_name import TopicName
from tests.integration.test_broker_grpc import Broker, connected
from tests.integration.test_reliable_dispatch import (
    batch,
    producer,
    receive,
    reliable_broker,
    stop,
    subscribe,
)
from tests.support import unique, wait_until
from tests.support.faulty_proxy import FaultyProxy
from tests.support.moto import MOTO_ACCESS_KEY_ID, MOTO_REGION, MOTO_SECRET_ACCESS_KEY, MotoServer
from tests.support.segments import FakeUploader, serving

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


def store_config(endpoint_url: str, bucket: str) -> dict[str, Any]:
    return {
        "backend": "s3",
        "prefix": "danube/",
        "s3": {
            "endpoint_url": endpoint_url,
            "bucket": bucket,
            "region": MOTO_REGION,
            "access_key_id": MOTO_ACCESS_KEY_ID,
            "secret_access_key": MOTO_SECRET_ACCESS_KEY,
            "path_style": True,
            "create_bucket": True,
            "connect_timeout_s": 1.0,
            "read_timeout_s": 3.0,
            "request_timeout_s": 5.0,
            "max_attempts": 1,
        },
    }


@dataclass
class Node:
    """A broker with its WAL uploader sidecar (same data directory)."""

    broker: Broker
    uploader: FakeUploader
    data_dir: Path


@dataclass
class Rig:
    etcd: EtcdProcess
    cluster: str
    store: EtcdStore
    keys: Keys
    proxy: FaultyProxy
    objects: ObjectStore
    bucket: str
    tmp: Path
    nodes: list[Node] = field(default_factory=list)
    _stack: list[Any] = field(default_factory=list)

    @property
    def resources(self) -> Resources:
        return Resources(self.store, self.keys)

    async def start_node(self, **overrides: Any) -> Node:
        data_dir = self.tmp / unique("data")
        uploader = FakeUploader(data_dir, self.objects, self.store, self.keys)
        serve = serving(uploader)
        addr = await serve.__aenter__()
        self._stack.append(serve)
        fields: dict[str, Any] = {
            "object_store": store_config(self.proxy.endpoint_url, self.bucket),
            "uploader_addr": addr,
            "uploader_rpc_timeout_s": 5.0,
            "cloud_flush_interval_ms": 20,
            "remote_chunk_bytes": 16 * 1024,
            "wal": {"segment_max_bytes": 4096},
        }
        fields.update(overrides)
        broker = await reliable_broker(self.etcd, self.cluster, data_dir, **fields)
        node = Node(broker, uploader, data_dir)
        self.nodes.append(node)
        return node

    async def descriptors(self, topic: TopicName) -> list[SegmentDescriptor]:
        kvs, _ = await self.store.get_prefix(self.keys.segments_prefix(topic))
        return sorted((SegmentDescriptor.from_json(kv.json()) for kv in kvs), key=lambda d: d.start_offset)

    async def aclose(self) -> None:
        self.proxy.set_mode("pass")
        for node in self.nodes:
            await stop(node.broker)
        for serve in reversed(self._stack):
            await serve.__aexit__(None, None, None)


@pytest.fixture
async def rig(
    etcd_server: EtcdProcess, cluster_name: str, etcd_store: EtcdStore, moto: MotoServer, tmp_path: Path
) -> AsyncIterator[Rig]:
    proxy = await FaultyProxy("127.0.0.1", moto.port).start()
    bucket = unique("b").lower()
    objects = await open_object_store(
        ObjectStoreConfig.model_validate(store_config(proxy.endpoint_url, bucket))
    )
    r = Rig(etcd_server, cluster_name, etcd_store, Keys(cluster_name), proxy, objects, bucket, tmp_path)
    try:
        yield r
    finally:
        await r.aclose()
        await objects.aclose()
        await proxy.aclose()


def reliable(b: Broker, topic: str) -> ReliableTopic:
    rt = b.registry.topics[topic].reliable
    assert rt is not None
    return rt


async def ack_all(b: Broker, cid: int, msgs: list[pb.StreamMessage]) -> None:
    await b.consumers.AckBatch(
        pb.AckBatchRequest(consumer_id=cid, topic_offsets=[m.msg_id.topic_offset for m in msgs])
    )


def payload(i: int) -> bytes:
    return f"message-{i:06d}-".encode() * 4


async def publish_segments(b: Broker, topic: str, n: int) -> tuple[int, int, list[pb.StreamMessage]]:
    """Publish ``n`` messages to ``topic`` in batches of 50 (one commit, one WAL segment each),
    received by subscription "s": (producer id, consumer id, the messages received)."""
    pid = (await producer(b, topic)).producer_id
    cid = await subscribe(b, topic, window=2000)
    stream = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
    await connected(b, cid)
    pub = b.producers.PublishBatches()
    for seq in range(n // 50):
        await pub.write(batch(pid, seq, [payload(i) for i in range(seq * 50, seq * 50 + 50)]))
        assert not (await pub.read()).HasField("error")
    await pub.done_writing()
    got = await receive(stream, n)
    stream.cancel()
    return pid, cid, got


# ---------------------------------------------------------------- replay from S3
async def test_a_replay_from_earliest_reads_trimmed_history_from_s3_then_the_live_tail(rig: Rig) -> None:
    node = await rig.start_node()
    b = node.broker
    topic = f"/default/{unique('replay')}"
    t = TopicName.parse(topic)
    n = 1500
    pid, cid, got = await publish_segments(b, topic, n)
    await ack_all(b, cid, got)
    rt = reliable(b, topic)
    assert rt.local.stats().segments >= 20, "many segments rolled"
    cursor_key = rig.keys.subscription_cursor(t, "s")
    await wait_until(lambda: _cursor_is(rig, cursor_key, n - 1), what="cursor persisted")

    assert await node.uploader.upload(t, rt.local.durable_offset) == n  # the sidecar ships the segments
    await rt.apply_retention()
    local_first = rt.local.first_offset
    assert local_first > n // 2, (
        f"local segments trimmed below the upload checkpoint (local starts at {local_first})"
    )
    stats = b.registry.stats()[topic]
    assert stats.first_offset == 0, "first_offset is object storage's"
    assert stats.tiered is not None and stats.tiered.history_first_offset == 0
    assert stats.local_first_offset == local_first
    # What GetTopicStats answers (the web console's log offsets): the checkpoint is read anew.
    shown = topic_proto(stats, "1", uploaded=await rt.uploaded_range())
    assert shown.local_first_offset == local_first
    assert (shown.has_uploaded, shown.uploaded_first_offset, shown.uploaded_next_offset) == (True, 0, n)

    replay = await subscribe(b, topic, sub="replay", name="r", earliest=True, window=5000)
    rstream = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=replay))
    await connected(b, replay)
    t0 = time.perf_counter()
    old = await receive(rstream, n)
    elapsed = time.perf_counter() - t0
    assert [m.msg_id.topic_offset for m in old] == list(range(n)), "every message once, in order"
    assert [m.payload for m in old] == [payload(i) for i in range(n)]
    tiered = b.registry.stats()[topic].tiered
    assert tiered is not None
    assert tiered.remote_entries >= local_first and tiered.remote_gets > 0, (
        "served from S3 below the local log"
    )
    assert tiered.remote_errors == 0
    shown = topic_proto(b.registry.stats()[topic], "1")
    assert (shown.remote_entries, shown.remote_gets) == (tiered.remote_entries, tiered.remote_gets)

    pub2 = b.producers.PublishBatches()
    await pub2.write(batch(pid, 999, [b"live-1", b"live-2"]))
    assert (await pub2.read()).first_offset == n
    await pub2.done_writing()
    live = await receive(rstream, 2)
    assert [(m.msg_id.topic_offset, m.payload) for m in live] == [(n, b"live-1"), (n + 1, b"live-2")]
    rstream.cancel()
    # A later upload shows in GetTopicStats at once, though the descriptors listed here are older.
    assert await node.uploader.upload(t, rt.local.durable_offset) == n + 2
    assert rt.history is not None and rt.history.end_offset == n
    assert await rt.uploaded_range() == (0, n + 2)
    print(f"\nreplayed {n} messages ({local_first} from S3) in {elapsed * 1000:.0f} ms")


# ---------------------------------------------------------------- retention in S3
async def test_retention_deletes_acknowledged_history_from_s3_beyond_the_size_limit(rig: Rig) -> None:
    """A topic with retention_size_bytes: once its history is uploaded and acknowledged, the
    oldest objects go from S3 (descriptors first, fenced on the owner's epoch in etcd), the
    newest that fit stay, and a replay from the earliest offset starts at the first kept one."""
    topic = f"/default/{unique('archive')}"
    t = TopicName.parse(topic)
    limit = 20_000  # two to three of its ~8 KB segments
    node = await rig.start_node()
    await rig.resources.create_topic(
        t, dispatch_strategy="reliable", policies=topic_policies("reliable", retention_size_bytes=limit)
    )
    b = node.broker
    n = 1000
    _, cid, got = await publish_segments(b, topic, n)
    rt = reliable(b, topic)
    assert await node.uploader.upload(t, rt.local.durable_offset) == n
    await rt.apply_retention()
    uploaded = await rig.descriptors(t)
    assert len(uploaded) >= 10 and len(await rig.objects.list(f"{t.namespace}/{t.local}/")) == len(uploaded)
    assert rt.log.first_offset == 0, "nothing acknowledged yet: S3 keeps it all"

    await ack_all(b, cid, got)

    async def settled() -> bool:  # the broker's own pass, run once the cursor is written
        kept = await rig.descriptors(t)
        in_s3 = await rig.objects.list(f"{t.namespace}/{t.local}/")
        return sum(d.size_bytes for d in kept) <= limit and len(in_s3) == len(kept)

    await wait_until(settled, timeout_s=20, what="retention deleting what the limit lets go")
    await rt.apply_retention()  # a pass now finds nothing more
    kept = await rig.descriptors(t)
    assert 0 < len(kept) < len(uploaded)
    assert kept == uploaded[len(uploaded) - len(kept) :], "the oldest went, whole"
    kept_bytes = sum(d.size_bytes for d in kept)
    assert kept_bytes <= limit < kept_bytes + uploaded[-len(kept) - 1].size_bytes
    in_s3 = [o.key for o in await rig.objects.list(f"{t.namespace}/{t.local}/")]
    assert sorted(in_s3) == sorted(d.object_key for d in kept), "their objects are gone from S3"
    first = kept[0].start_offset
    stats = b.registry.stats()[topic]
    assert stats.first_offset == first
    assert stats.tiered is not None and stats.tiered.retention_deleted_segments == len(uploaded) - len(kept)
    shown = topic_proto(stats, "1", uploaded=await rt.uploaded_range())  # GetTopicStats' answer
    assert (shown.retention_deleted_segments, shown.uploaded_first_offset) == (
        len(uploaded) - len(kept),
        first,
    )
    assert shown.retention_deleted_bytes == sum(d.size_bytes for d in uploaded) - kept_bytes

    replay = await subscribe(b, topic, sub="replay", name="r", earliest=True, window=5000)
    rstream = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=replay))
    await connected(b, replay)
    old = await receive(rstream, n - first)
    assert [m.msg_id.topic_offset for m in old] == list(range(first, n))
    assert [m.payload for m in old] == [payload(i) for i in range(first, n)]
    rstream.cancel()


async def _cursor_is(rig: Rig, key: str, value: int) -> bool:
    stored = await rig.store.get_json(key)
    return stored is not None and stored.get("cursor") == value


# ---------------------------------------------------------------- cloud durability
async def test_a_cloud_publish_is_acked_only_after_its_object_exists(rig: Rig) -> None:
    node = await rig.start_node()
    b = node.broker
    topic = f"/default/{unique('cloud')}"
    t = TopicName.parse(topic)
    await rig.resources.create_topic(t, dispatch_strategy="reliable", policies={"durability": "cloud"})
    pid = (await producer(b, topic)).producer_id
    pub = b.producers.PublishBatches()
    latencies: list[float] = []
    for seq in range(10):
        sent = time.perf_counter()
        await pub.write(batch(pid, seq, [payload(seq * 5 + i) for i in range(5)]))
        ack = await asyncio.wait_for(pub.read(), 10)
        latencies.append(time.perf_counter() - sent)
        assert not ack.HasField("error") and ack.first_offset == seq * 5
        last = ack.first_offset + ack.count - 1
        # Right after the ack: a descriptor covers the batch and its object is in S3.
        d = find(await rig.descriptors(t), last)
        assert d is not None, f"acked offset {last} has no descriptor"
        info = await rig.objects.head(d.object_key)
        assert info.size == d.size_bytes
        checkpoint = await rig.store.get_json(rig.keys.upload_checkpoint(t))
        assert checkpoint["next_offset"] > last
    await pub.done_writing()
    assert reliable(b, topic).policies.durability.value == "cloud"
    latencies.sort()
    print(f"\ncloud publish-to-ack: p50 {latencies[5] * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms")


async def test_s3_refusing_stalls_cloud_acks_but_not_fsync_topics(rig: Rig) -> None:
    node = await rig.start_node()
    b = node.broker
    cloud = f"/default/{unique('cloud')}"
    local = f"/default/{unique('fsync')}"
    await rig.resources.create_topic(
        TopicName.parse(cloud), dispatch_strategy="reliable", policies={"durability": "cloud"}
    )
    cpid = (await producer(b, cloud, "pc")).producer_id
    fpid = (await producer(b, local, "pf")).producer_id
    cpub = b.producers.PublishBatches()
    fpub = b.producers.PublishBatches()
    await cpub.write(batch(cpid, 1, [b"before"]))
    assert (await asyncio.wait_for(cpub.read(), 10)).first_offset == 0

    rig.proxy.set_mode("refuse")
    calls = len(node.uploader.calls)
    await cpub.write(batch(cpid, 2, [b"during-1", b"during-2"]))
    pending = asyncio.ensure_future(cpub.read())
    await wait_until(
        lambda: (s := b.registry.stats()[cloud].tiered) is not None and s.cloud_flush_failures >= 2,
        timeout_s=20,
        what="flushes failing while S3 refuses connections",
    )
    assert len(node.uploader.calls) > calls
    assert not pending.done(), "no ack while the batch is not in object storage"
    assert reliable(b, cloud).local.durable_offset == 3, "but it is durable locally"
    for seq in range(3):
        await fpub.write(batch(fpid, seq, [f"f{seq}".encode()]))
        ack = await asyncio.wait_for(fpub.read(), 5)
        assert not ack.HasField("error") and ack.first_offset == seq, "fsync topics keep being acked"
    assert not pending.done()

    rig.proxy.set_mode("pass")
    ack = await asyncio.wait_for(pending, 20)
    assert not ack.HasField("error") and (ack.first_offset, ack.count) == (1, 2)
    d = find(await rig.descriptors(TopicName.parse(cloud)), 2)
    assert d is not None
    await cpub.done_writing()
    await fpub.done_writing()


# ---------------------------------------------------------------- hand-over without drain
async def test_a_move_hands_over_without_draining_and_the_new_owner_reads_the_backlog_from_s3(
    rig: Rig,
) -> None:
    a = await rig.start_node()
    b = await rig.start_node()
    topic = f"/default/{unique('move')}"
    t = TopicName.parse(topic)
    pid = (await producer(a.broker, topic)).producer_id
    cid = await subscribe(a.broker, topic, window=1000)
    stream = a.broker.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
    await connected(a.broker, cid)
    pub = a.broker.producers.PublishBatches()
    for seq in range(8):
        await pub.write(batch(pid, seq, [payload(seq * 25 + i) for i in range(25)]))
        assert not (await pub.read()).HasField("error")
    got = await receive(stream, 200)
    await ack_all(a.broker, cid, got[:50])  # a backlog of 150 unacknowledged: a drain would wait
    await wait_until(
        lambda: _cursor_is(rig, rig.keys.subscription_cursor(t, "s"), 49), what="cursor persisted"
    )

    res = rig.resources
    own = await res.get_owner(t)
    assert own is not None and own.broker_id == a.broker.cfg.broker_id
    assert await res.mark_moving(own, b.broker.cfg.broker_id) is not None
    await wait_until(
        lambda: _owner_is(res, t, b.broker.cfg.broker_id), timeout_s=20, what="handed over without a drain"
    )
    state = LogState.from_json(await rig.store.get_json(rig.keys.storage_state(t)))
    # Closed by the hand-over at 200, or already the new owner's stint continuing there.
    if state.open:
        assert state.start_offset == 200 and state.previous is not None
        assert (state.previous["closed_by"], state.previous["next_offset"]) == ("hand_over", 200)
    else:
        assert (state.closed_by, state.next_offset) == ("hand_over", 200)
    descs = await rig.descriptors(t)
    assert descs and descs[-1].next_offset == 200, "flushed to object storage before the hand-over"

    await wait_until(lambda: topic in b.broker.registry.topics, what="loaded on the new owner")
    cid2 = await subscribe(b.broker, topic, window=1000)
    stream2 = b.broker.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid2))
    backlog = await receive(stream2, 150)
    assert [m.msg_id.topic_offset for m in backlog] == list(range(50, 200)), "the backlog, from S3, in order"
    assert [m.payload for m in backlog] == [payload(i) for i in range(50, 200)]
    rt = reliable(b.broker, topic)
    assert rt.local.first_offset == 200 and rt.log.first_offset == 0
    tiered = b.broker.registry.stats()[topic].tiered
    assert tiered is not None and tiered.remote_entries >= 150

    pid2 = (await producer(b.broker, topic, "p2")).producer_id
    pub2 = b.broker.producers.PublishBatches()
    await pub2.write(batch(pid2, 1, [b"after-move"]))
    assert (await pub2.read()).first_offset == 200
    await pub2.done_writing()
    assert [(m.msg_id.topic_offset, m.payload) for m in await receive(stream2, 1)] == [(200, b"after-move")]
    stream.cancel()
    stream2.cancel()
    await _drain_stream(pub)


async def _owner_is(res: Resources, t: TopicName, broker_id: str) -> bool:
    own = await res.get_owner(t)
    return own is not None and own.broker_id == broker_id and not own.moving_to


async def _drain_stream(call: Any) -> None:
    try:
        await call.done_writing()
        while await call.read() != grpc.aio.EOF:
            pass
    except grpc.aio.AioRpcError:
        pass  # the producer was detached by the move
