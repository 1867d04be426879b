"""Many reliable topics on one broker (in-process, real WAL, real etcd): the broker-wide costs.

- one etcd watch for every topic's policies (not one per topic), and a policy change reaches a
  running topic at once;
- cursors of many topics are written in a few shared fenced transactions and recovered after a
  restart;
- a fenced topic's cursor write is refused while the other topics' cursors land.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from danube_broker.dispatch.reliable.maintenance import Maintenance
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.policies import SubscriptionPolicyRecord
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from tests.integration.test_broker_grpc import Broker, connected
from tests.integration.test_reliable_dispatch import (
    producer,
    publish,
    receive,
    reliable_broker,
    stop,
    subscribe,
)
from tests.support import unique, wait_until

pytestmark = pytest.mark.integration

TOPICS = 40


def maintenance(b: Broker) -> Maintenance:
    return b.registry.reliable.maintenance


async def open_topics(b: Broker, names: list[str], *, acked: int) -> dict[str, tuple[int, Any]]:
    """Each topic gets 3 messages, received by its subscription's consumer, which acks the
    first ``acked``. Returns each topic's consumer id and open stream (cancel when done)."""
    out: dict[str, tuple[int, Any]] = {}

    async def one(name: str) -> None:
        pid = (await producer(b, name)).producer_id
        cid = await subscribe(b, name, window=100)
        stream = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
        await connected(b, cid)
        await publish(b, pid, [b"m0", b"m1", b"m2"])
        got = await receive(stream, 3)
        assert [m.msg_id.topic_offset for m in got] == [0, 1, 2]
        if acked:
            await b.consumers.AckBatch(pb.AckBatchRequest(consumer_id=cid, topic_offsets=list(range(acked))))
        out[name] = (cid, stream)

    sem = asyncio.Semaphore(8)

    async def bounded(name: str) -> None:
        async with sem:
            await one(name)

    await asyncio.gather(*(bounded(n) for n in names))
    return out


def cancel(streams: dict[str, tuple[int, Any]]) -> None:
    for _, stream in streams.values():
        stream.cancel()


async def cursors(res: Resources, keys: Keys, names: list[str]) -> list[object]:
    return [await res.store.get_json(keys.subscription_cursor(TopicName.parse(n), "s")) for n in names]


async def test_cursors_of_many_topics_share_transactions_and_survive_a_restart(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path, etcd_resources: Resources, keys: Keys
) -> None:
    names = [f"/default/{unique('many')}" for _ in range(TOPICS)]
    b = await reliable_broker(etcd_server, cluster_name, tmp_path / "wal", cursor_flush_interval_ms=200)
    try:
        store = b.registry.reliable.resources.store
        watches_before = store.open_watches
        cancel(await open_topics(b, names, acked=2))

        async def all_written() -> bool:
            return await cursors(etcd_resources, keys, names) == [{"cursor": 1}] * TOPICS

        await wait_until(all_written, timeout_s=20, what="every topic's cursor in etcd")
        m = maintenance(b)
        assert m.topics == TOPICS
        # Shared transactions carried the cursors (the acks of 40 topics land within one or
        # two flush intervals), not one transaction per topic.
        assert m.shared_writes >= TOPICS // 2 and m.shared_txns < TOPICS // 4
        assert store.open_watches == watches_before + 1, "one policy watch for every topic"
    finally:
        await stop(b)

    b = await reliable_broker(etcd_server, cluster_name, tmp_path / "wal", cursor_flush_interval_ms=200)
    try:
        for name in names[:5]:
            cid = await subscribe(b, name, window=100)
            stream = b.consumers.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=cid))
            got = await receive(stream, 1)
            assert [m.msg_id.topic_offset for m in got] == [2], "resumes above the recovered cursor"
            stream.cancel()
    finally:
        await stop(b)


async def test_a_fenced_topic_is_refused_while_the_others_land(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path, etcd_resources: Resources, keys: Keys
) -> None:
    names = [f"/default/{unique('fence')}" for _ in range(6)]
    b = await reliable_broker(etcd_server, cluster_name, tmp_path / "wal", cursor_flush_interval_ms=1000)
    try:
        consumers = await open_topics(b, names, acked=0)
        fenced = TopicName.parse(names[3])
        owner = keys.owner(fenced)
        record = await etcd_resources.store.get_json(owner)
        # Another broker took the topic over: its owner key names someone else, at a new epoch.
        await etcd_resources.store.put(owner, json.dumps({**record, "broker_id": "someone-else"}))
        m = maintenance(b)
        refused_before = m.refused_txns
        for cid, _ in consumers.values():
            await b.consumers.AckBatch(pb.AckBatchRequest(consumer_id=cid, topic_offsets=[0, 1, 2]))
        others = [n for n in names if n != names[3]]

        async def others_written() -> bool:
            return await cursors(etcd_resources, keys, others) == [{"cursor": 2}] * len(others)

        await wait_until(others_written, timeout_s=20, what="the other topics' cursors")
        assert await etcd_resources.store.get_json(keys.subscription_cursor(fenced, "s")) is None
        reliable = b.registry.topics[names[3]].reliable
        assert reliable is not None
        await wait_until(lambda: reliable._cursors_fenced, what="the fenced topic stops writing cursors")
        assert m.refused_txns > refused_before, "the shared transaction was refused, then split"
        cancel(consumers)
    finally:
        await stop(b)


async def test_a_policy_change_reaches_a_running_topic_at_once(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path, etcd_resources: Resources
) -> None:
    names = [f"/default/{unique('pol')}" for _ in range(3)]
    b = await reliable_broker(etcd_server, cluster_name, tmp_path / "wal")
    try:
        cancel(await open_topics(b, names, acked=3))
        target = b.registry.topics[names[1]].subscriptions["s"].engine
        other = b.registry.topics[names[0]].subscriptions["s"].engine
        assert target is not None and other is not None
        assert target.policy.max_redeliveries != 7
        await etcd_resources.put_subscription_policy(
            TopicName.parse(names[1]), "s", SubscriptionPolicyRecord.from_json({"max_redeliveries": 7})
        )
        await wait_until(
            lambda: target.policy.max_redeliveries == 7, timeout_s=1.0, what="applied within 1 s"
        )
        assert other.policy.max_redeliveries != 7
    finally:
        await stop(b)
