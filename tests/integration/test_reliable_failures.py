"""Reliable topics when things go wrong: a full disk, a shutdown with unflushed acks, a
dead-letter topic on another broker, re-sent messages (idempotent producers)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from danube_broker import takeover
from danube_broker.wal import DiskOps, TopicLog
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from tests.integration.test_broker_grpc import Broker, connected, error_code, expect_status
from tests.integration.test_reliable_dispatch import (
    batch,
    broker,  # noqa: F401  (fixture)
    data_dir,  # noqa: F401  (fixture)
    producer,
    publish,
    receive,
    reliable_broker,
    stop,
    subscribe,
)
from tests.support import unique, wait_until

pytestmark = pytest.mark.integration


class DiskSwitch:
    """pwrite that fails with ENOSPC while ``full`` is set."""

    def __init__(self) -> None:
        self.full = False

    def pwrite(self, fd: int, data: bytes | memoryview, pos: int) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.pwrite(fd, data, pos)


async def test_a_full_disk_refuses_batches_in_band_and_the_topic_recovers(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = DiskSwitch()

    class FaultyLog:
        @staticmethod
        async def open(directory: Path, **kw: Any) -> TopicLog:
            return await TopicLog.open(directory, ops=DiskOps(pwrite=disk.pwrite), **kw)

    monkeypatch.setattr(takeover, "TopicLog", FaultyLog)
    b = await reliable_broker(etcd_server, cluster_name, tmp_path / "wal")
    try:
        topic = f"/default/{unique('full')}"
        pid = (await producer(b, topic)).producer_id
        cid = await subscribe(b, topic)
        stream = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
        await connected(b, cid)
        assert (await publish(b, pid, [b"before"])).first_offset == 0
        assert [m.payload for m in await receive(stream, 1)] == [b"before"]

        disk.full = True
        refused = await publish(b, pid, [b"lost-1", b"lost-2"])
        assert refused.error.code == "DISK_FULL" and refused.error.retryable and refused.count == 0
        err = await expect_status(
            b.producers.SendMessage(
                pb.StreamMessage(msg_id=pb.MsgID(producer_id=pid, topic_name=topic), payload=b"lost-3")
            ),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        )
        assert error_code(err) == "DISK_FULL"

        disk.full = False
        ok = await publish(b, pid, [b"after"])
        assert not ok.HasField("error") and ok.first_offset == 1, "nothing of the refused batches was stored"
        assert [m.payload for m in await receive(stream, 1)] == [b"after"]
        stream.cancel()
    finally:
        await stop(b)


async def test_shutdown_writes_the_last_cursor(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path, etcd_resources: Resources, keys: Keys
) -> None:
    b = await reliable_broker(etcd_server, cluster_name, tmp_path / "wal", cursor_flush_interval_ms=600_000)
    topic = f"/default/{unique('flush')}"
    try:
        pid = (await producer(b, topic)).producer_id
        cid = await subscribe(b, topic)
        stream = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
        await connected(b, cid)
        await publish(b, pid, [b"a", b"b", b"c"])
        await receive(stream, 3)
        await b.consumers.AckBatch(pb.AckBatchRequest(consumer_id=cid, topic_offsets=[0, 1]))
        key = keys.subscription_cursor(TopicName.parse(topic), "s")
        assert await etcd_resources.store.get_json(key) is None, "not flushed yet (long interval)"
        stream.cancel()
    finally:
        await stop(b)
    assert await etcd_resources.store.get_json(key) == {"cursor": 1}
    assert await etcd_resources.get_owner(TopicName.parse(topic)) is None, "released after the flush"


async def test_dead_letter_topic_owned_by_another_broker(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path, etcd_resources: Resources, keys: Keys
) -> None:
    a = await reliable_broker(etcd_server, cluster_name, tmp_path / "a")
    b = await reliable_broker(etcd_server, cluster_name, tmp_path / "b")
    try:
        dlq = f"/default/{unique('dlq')}"
        await producer(b, dlq, "dlq-owner")  # the dead-letter topic lives on b
        dcid = await subscribe(b, dlq, sub="ops")
        dstream = b.consumers.ReceiveMessages(pb.ReceiveRequest(consumer_id=dcid))
        await connected(b, dcid)

        topic = f"/default/{unique('src')}"
        pid = (await producer(a, topic)).producer_id
        cid = await subscribe(a, topic, kind=pb.ConsumerRequest.Shared)
        policy = {
            "max_redeliveries": 1,
            "redelivery_backoff_base_ms": 0,
            "poison_policy": "dead_letter",
            "dead_letter_topic": dlq,
        }
        await etcd_resources.store.put(
            keys.subscription_policy(TopicName.parse(topic), "s"), json.dumps(policy)
        )
        engine = a.registry.topics[topic].subscriptions["s"].engine
        assert engine is not None
        await wait_until(lambda: engine.policy.max_redeliveries == 1, what="policy applied")
        stream = a.consumers.ReceiveMessages(pb.ReceiveRequest(consumer_id=cid))
        await connected(a, cid)
        await publish(a, pid, [b"bad"])
        for _ in range(2):
            [m] = await receive(stream, 1)
            await a.consumers.Nack(pb.NackRequest(msg_id=m.msg_id, subscription_name="s", delay_ms=0))
        [copy] = await receive(dstream, 1)
        assert copy.payload == b"bad" and copy.msg_id.topic_name == dlq
        assert copy.attributes["x-original-topic"] == topic
        assert copy.producer_name == "p" and dlq not in a.registry.topics
        await wait_until(lambda: engine.cursor == 0, what="original acked after the remote copy")
        stream.cancel()
        dstream.cancel()
    finally:
        await stop(a)
        await stop(b)


async def test_idempotent_producer_over_grpc(broker: Broker) -> None:  # noqa: F811
    topic = f"/default/{unique('dedup')}"
    resp = await producer(broker, topic, "idem")
    assert resp.last_sequence_id == 0
    pid = resp.producer_id
    first = await publish(broker, pid, [b"1", b"2"], seqs=[1, 2])
    assert (first.first_offset, first.count, list(first.offsets), first.duplicates) == (0, 2, [], 0)
    stream = broker.producers.PublishBatches()
    await stream.write(batch(pid, 1, [b"2", b"3"], seqs=[2, 3]))
    again = await stream.read()
    assert list(again.offsets) == [1, 2] and again.duplicates == 1 and again.count == 2
    await stream.done_writing()
    resp = await producer(broker, topic, "idem")
    assert resp.last_sequence_id == 3, "a reconnecting producer continues above it"


class GatedDisk:
    """pwrite that can be held (until ``open`` is set) and told which calls fail (ENOSPC)."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.held = threading.Event()
        self.fail_at: set[int] = set()
        self.writes = 0

    def hold(self) -> None:
        self.held.clear()
        self.open.clear()

    def pwrite(self, fd: int, data: bytes | memoryview, pos: int) -> int:
        if not self.open.is_set():
            self.held.set()
            self.open.wait(10)
        self.writes += 1
        if self.writes in self.fail_at:
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.pwrite(fd, data, pos)


async def _gated_broker(
    etcd: EtcdProcess, cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disk: GatedDisk
) -> Broker:
    class GatedLog:
        @staticmethod
        async def open(directory: Path, **kw: Any) -> TopicLog:
            return await TopicLog.open(directory, ops=DiskOps(pwrite=disk.pwrite), **kw)

    monkeypatch.setattr(takeover, "TopicLog", GatedLog)
    return await reliable_broker(etcd, cluster, tmp_path / "wal")


async def _hold_first_commit(b: Broker, topic: str, disk: GatedDisk, stream: Any, pid: int, n: int) -> None:
    """Batch 1 goes into a commit held at its write; batches 2..n are then appended behind it
    on the same stream (taking their offsets before batch 1 is acked)."""
    reliable = b.registry.topics[topic].reliable
    assert reliable is not None
    disk.hold()
    await stream.write(batch(pid, 1, [b"m1"]))
    await wait_until(disk.held.is_set, what="the first commit is writing")
    for seq in range(2, n + 1):
        await stream.write(batch(pid, seq, [f"m{seq}".encode()]))
    await wait_until(
        lambda: reliable.log.next_offset == n, what="every batch appended before batch 1 is acked"
    )


async def test_one_stream_pipelines_its_batches_into_shared_commits_acked_in_order(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = GatedDisk()
    b = await _gated_broker(etcd_server, cluster_name, tmp_path, monkeypatch, disk)
    try:
        topic = f"/default/{unique('pipe')}"
        pid = (await producer(b, topic)).producer_id
        stream = b.producers.PublishBatches()
        await _hold_first_commit(b, topic, disk, stream, pid, 4)
        writes = disk.writes
        disk.open.set()
        acks = [await asyncio.wait_for(stream.read(), 10) for _ in range(4)]
        assert [(a.batch_seq, a.first_offset, a.count) for a in acks] == [(s, s - 1, 1) for s in range(1, 5)]
        assert not any(a.HasField("error") for a in acks)
        assert disk.writes - writes == 2, "batches 2-4 shared one commit behind batch 1's"
        await stream.done_writing()
        assert await stream.read() == grpc.aio.EOF
    finally:
        await stop(b)


async def test_a_failed_commit_refuses_exactly_its_batches_on_a_pipelined_stream(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = GatedDisk()
    b = await _gated_broker(etcd_server, cluster_name, tmp_path, monkeypatch, disk)
    try:
        topic = f"/default/{unique('pipefail')}"
        pid = (await producer(b, topic)).producer_id
        cid = await subscribe(b, topic)
        consumer = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
        await connected(b, cid)
        stream = b.producers.PublishBatches()
        await _hold_first_commit(b, topic, disk, stream, pid, 3)
        # The held write is batch 1's commit (succeeds); the next is batches 2 + 3's (fails).
        disk.fail_at = {disk.writes + 2}
        disk.open.set()
        acks = [await asyncio.wait_for(stream.read(), 10) for _ in range(3)]
        assert [a.batch_seq for a in acks] == [1, 2, 3], "acks in batch order"
        assert not acks[0].HasField("error") and acks[0].first_offset == 0
        for refused in acks[1:]:
            assert refused.error.code == "DISK_FULL" and refused.error.retryable and refused.count == 0
        # Batch 4 would overtake the refused 2 and 3: the stream refuses it too (order guard)...
        await stream.write(batch(pid, 4, [b"m4"]))
        kept = await asyncio.wait_for(stream.read(), 10)
        assert kept.batch_seq == 4 and kept.error.code == "STORAGE_FAILED" and kept.error.retryable
        await stream.done_writing()
        assert await stream.read() == grpc.aio.EOF
        # ...and a new stream (the client re-sends 2, 3, 4 in order) reuses the failed offsets;
        # nothing of the refused batches was delivered.
        again = b.producers.PublishBatches()
        oks = []
        for seq, body in ((5, b"m2"), (6, b"m3"), (7, b"m4")):
            await again.write(batch(pid, seq, [body]))
            oks.append(await asyncio.wait_for(again.read(), 10))
        assert [(a.first_offset, a.HasField("error")) for a in oks] == [(1, False), (2, False), (3, False)]
        assert [m.payload for m in await receive(consumer, 4)] == [b"m1", b"m2", b"m3", b"m4"]
        await again.done_writing()
        assert await again.read() == grpc.aio.EOF
        consumer.cancel()
    finally:
        await stop(b)
