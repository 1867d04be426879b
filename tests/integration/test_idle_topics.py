"""Many idle reliable topics on real etcd (issue #17).

- placement without a load manager: a few hundred topics created through the admin API, many at
  once, are spread evenly over two brokers (counts from the lookup's watch-fed view, no read of
  every assignment per topic);
- an idle topic's WAL segment file is closed by the broker and opened again by the next publish,
  which is acked once durable and delivered in order after the earlier messages.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path

import grpc.aio
import pytest

from danube_broker.wal import Durability, TopicLog
from danube_common.config import EtcdConfig
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.resources import Resources
from danube_lookup.app import running
from danube_lookup.config import LookupConfig
from tests.integration.test_broker_grpc import connected
from tests.integration.test_lookup_admin import register
from tests.integration.test_reliable_dispatch import (
    producer,
    publish,
    receive,
    reliable_broker,
    stop,
    subscribe,
    topic_log,
)
from tests.support import unique, wait_until
from tests.unit.wal.helpers import cfg as wal_cfg
from tests.unit.wal.helpers import read_all

pytestmark = pytest.mark.integration

TOPICS = 300
CONCURRENCY = 16


@pytest.mark.timeout(120)
async def test_hundreds_of_topics_are_placed_evenly_over_two_brokers(
    etcd_server: EtcdProcess, cluster_name: str, etcd_store: EtcdStore, etcd_resources: Resources, keys: Keys
) -> None:
    await register(etcd_store, keys, "b1", 7101)
    await register(etcd_store, keys, "b2", 7102)
    lookup_cfg = LookupConfig(
        listen_addr="127.0.0.1:0",
        admin_listen_addr="127.0.0.1:0",
        etcd=EtcdConfig(endpoints=[etcd_server.endpoint], cluster=cluster_name),
    )
    async with running(lookup_cfg) as info, grpc.aio.insecure_channel(info.admin_addr) as channel:
        topics = apb_grpc.TopicAdminStub(channel)
        sem = asyncio.Semaphore(CONCURRENCY)

        async def create(i: int) -> str:
            async with sem:
                req = apb.CreateTopicRequest(name=f"/default/idle-{i:04d}", dispatch_strategy="reliable")
                created = (await topics.CreateTopic(req, timeout=30)).topic
                return str(created.broker_id)

        owners = Counter(await asyncio.gather(*(create(i) for i in range(TOPICS))))
    assert sum(owners.values()) == TOPICS and set(owners) == {"b1", "b2"}
    # Placements made at the same moment can pick the same broker: at most CONCURRENCY apart.
    assert abs(owners["b1"] - owners["b2"]) <= CONCURRENCY, owners
    assert await etcd_resources.topic_counts() == dict(owners)


def open_files() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return out


def active_segment(log: TopicLog) -> str:
    return str(log._store.active.path)


@pytest.mark.timeout(60)
async def test_an_idle_topics_segment_file_is_closed_and_the_next_publish_opens_it(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path
) -> None:
    b = await reliable_broker(etcd_server, cluster_name, tmp_path / "wal", wal={"idle_fd_close_s": 0.3})
    topic = f"/default/{unique('idle')}"
    try:
        pid = (await producer(b, topic)).producer_id
        cid = await subscribe(b, topic)
        stream = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
        await connected(b, cid)
        ack = await publish(b, pid, [b"a", b"b", b"c"])
        assert (ack.first_offset, ack.count) == (0, 3)
        assert [m.payload for m in await receive(stream, 3)] == [b"a", b"b", b"c"]
        log = topic_log(b, topic)
        group = b.registry.reliable.commit_group
        assert group is not None
        segment = active_segment(log)
        await wait_until(lambda: segment not in open_files(), timeout_s=10)
        assert group.idle_closed >= 1
        ack = await publish(b, pid, [b"d", b"e"])  # opens the file again
        assert (ack.first_offset, ack.count) == (3, 2)
        assert log.durable_offset >= 5, "acked only once durable"
        got = await receive(stream, 2)
        assert [(m.msg_id.topic_offset, m.payload) for m in got] == [(3, b"d"), (4, b"e")]
        assert active_segment(log) in open_files()
        directory = log.directory
        stream.cancel()
    finally:
        await stop(b)
    again = await TopicLog.open(directory, cfg=wal_cfg(), durability=Durability.FSYNC)
    try:
        assert [e.offset for e in await read_all(again)] == [0, 1, 2, 3, 4]  # recovered after stop
    finally:
        await again.aclose()
