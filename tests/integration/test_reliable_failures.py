"""Reliable topics when things go wrong: a full disk, a shutdown with unflushed acks, a
dead-letter topic on another broker, re-sent messages (idempotent producers)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import grpc
import pytest

from danube_broker import reliable_topic
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

    monkeypatch.setattr(reliable_topic, "TopicLog", FaultyLog)
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
