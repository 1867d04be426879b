"""Partitioned topics: key routing (FNV-1a 64), round-robin, and consumers merging partitions."""

from __future__ import annotations

from collections import Counter

import pytest

from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import DanubeClient, RoutingMode, fnv1a64
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = "/default/pt"
PARTS = [f"{T}-part-{i}" for i in range(3)]


async def test_producer_attaches_to_every_partition(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T, partitions=3)
    producer = await client.create_producer(T, producer_name="pp")
    assert producer.partitions == PARTS
    creates = [r for r in cluster.calls_of("CreateProducer") if isinstance(r, pb.ProducerRequest)]
    assert sorted((r.topic_name, r.producer_name) for r in creates) == [
        (p, f"pp-{i}") for i, p in enumerate(PARTS)
    ]


async def test_keys_route_by_fnv1a64_modulo_partitions(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T, partitions=3)
    producer = await client.create_producer(T)
    keys = [f"user-{i}" for i in range(30)]
    ids = [await producer.send(k.encode(), key=k) for k in keys]
    for key, mid in zip(keys, ids, strict=True):
        assert mid.topic == PARTS[fnv1a64(key.encode()) % 3], key
    for part in PARTS:
        for m in cluster.topics[part].log:
            assert m.routing_key == m.payload.decode()
            assert part == PARTS[fnv1a64(m.payload) % 3]
    assert len({mid.topic for mid in ids}) == 3  # these keys do spread


async def test_round_robin_per_message(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T, partitions=3)
    producer = await client.create_producer(T, batching_max_publish_delay_ms=60_000)
    futs = [await producer.send_async(b"%d" % i) for i in range(9)]
    await producer.flush()
    topics = [f.result().topic for f in futs]
    assert topics == [PARTS[i % 3] for i in range(9)]
    assert [cluster.payloads(p) for p in PARTS] == [
        [b"0", b"3", b"6"],
        [b"1", b"4", b"7"],
        [b"2", b"5", b"8"],
    ]


async def test_single_partition_mode(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T, partitions=3)
    producer = await client.create_producer(T, routing_mode=RoutingMode.SINGLE_PARTITION)
    ids = await producer.send_many([b"a", b"b", b"c", b"d"])
    assert len({i.topic for i in ids}) == 1
    assert [i.offset for i in ids] == [0, 1, 2, 3]


async def test_unknown_topic_is_produced_as_plain_topic(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer("/default/brand-new")
    assert producer.partitions == ["/default/brand-new"]
    assert (await producer.send(b"x")).topic == "/default/brand-new"


async def test_consumer_merges_partitions_in_per_partition_order(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T, partitions=3)
    consumer = await client.subscribe(T, subscription="s", consumer_name="c")
    assert consumer.partitions == PARTS
    producer = await client.create_producer(T)
    await producer.send_many([b"%d" % i for i in range(30)])
    got = [await consumer.receive(timeout_s=5) for _ in range(30)]
    by_part: dict[str, list[int]] = {}
    for m in got:
        by_part.setdefault(m.topic, []).append(m.offset)
    assert sorted(by_part) == PARTS
    assert all(offsets == list(range(10)) for offsets in by_part.values())
    assert sorted(int(m.payload) for m in got) == list(range(30))


async def test_acks_are_grouped_per_partition(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T, partitions=3)
    consumer = await client.subscribe(T, subscription="s", ack_flush_interval_ms=60_000, ack_batch_size=1000)
    producer = await client.create_producer(T)
    await producer.send_many([b"%d" % i for i in range(30)])
    msgs = [await consumer.receive(timeout_s=5) for _ in range(30)]
    for m in msgs:
        await consumer.ack(m)
    assert cluster.ack_batches == []  # buffered: neither the count nor the interval is reached
    await consumer.flush_acks()
    assert len(cluster.ack_batches) == 3
    by_topic = {r.topic_name: list(r.topic_offsets) for r in cluster.ack_batches}
    assert by_topic == {p: list(range(10)) for p in PARTS}
    assert all(r.subscription_name == "s" for r in cluster.ack_batches)
    ids = {r.consumer_id for r in cluster.ack_batches}
    assert len(ids) == 3  # one consumer per partition, each acking with its own id


async def test_acks_flush_by_count_and_by_interval(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic("/default/acks")
    by_count = await client.subscribe(
        "/default/acks", subscription="a", ack_batch_size=4, ack_flush_interval_ms=60_000
    )
    by_time = await client.subscribe(
        "/default/acks", subscription="b", ack_batch_size=1000, ack_flush_interval_ms=10
    )
    producer = await client.create_producer("/default/acks")
    await producer.send_many([b"%d" % i for i in range(8)])
    for consumer in (by_count, by_time):
        for _ in range(8):
            await consumer.ack(await consumer.receive(timeout_s=5))

    def offsets(sub: str) -> list[int]:
        return [o for r in cluster.ack_batches if r.subscription_name == sub for o in r.topic_offsets]

    # "a" never reaches its 60 s interval: only the count can have flushed it.
    await wait_until(lambda: offsets("a") == list(range(8)), timeout_s=5, what="count-triggered acks")
    # "b" never reaches its count: only the 10 ms interval can have flushed it.
    await wait_until(lambda: offsets("b") == list(range(8)), timeout_s=5, what="interval-triggered acks")


async def test_key_filters_and_sub_type_reach_the_broker(client: DanubeClient, cluster: FakeCluster) -> None:
    from danube_sdk import SubType

    cluster.create_topic(T)
    await client.subscribe(T, subscription="ks", sub_type=SubType.KEY_SHARED, key_filters=["eu-*"])
    req = cluster.calls_of("Subscribe")[-1]
    assert isinstance(req, pb.ConsumerRequest)
    assert req.subscription_type == pb.ConsumerRequest.KeyShared and list(req.key_filters) == ["eu-*"]


async def test_round_robin_spreads_evenly(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T, partitions=3)
    producer = await client.create_producer(T)
    ids = await producer.send_many([b"x"] * 300)
    assert Counter(i.topic for i in ids) == {p: 100 for p in PARTS}
