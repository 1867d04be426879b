"""Multi-topic and pattern subscriptions on a real cluster (etcd, lookup, 2 brokers).

Topics are reliable, so what is published before a consumer reaches a topic is still there
(topics a pattern consumer finds after subscribing start at their earliest message).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter

import pytest

from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient, DispatchStrategy, InitialPosition
from tests.e2e.conftest import cli, subprocess_env
from tests.support import unique, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def admin(cluster: LocalCluster, *args: str) -> None:
    r = subprocess.run(
        [cli("danube-admin"), "--admin-url", cluster.admin_url, *args],
        capture_output=True, text=True, timeout=60, env=subprocess_env(),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr


async def produce(client: DanubeClient, topic: str, payloads: list[bytes]) -> None:
    producer = await client.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE)
    await producer.send_many(payloads)
    await producer.close()


async def test_a_list_of_topics_is_one_fair_consumer(cluster: LocalCluster) -> None:
    p = unique("multi")
    a, b = f"/default/{p}-a", f"/default/{p}-b"
    await asyncio.to_thread(
        admin, cluster, "topics", "create", b, "--partitions", "2", "--dispatch-strategy", "reliable"
    )
    async with DanubeClient(cluster.service_url) as client:
        await produce(client, a, [b"a%d" % i for i in range(300)])
        await produce(client, b, [b"b%d" % i for i in range(300)])
        consumer = await client.subscribe_many(
            [a, b], subscription="s", initial_position=InitialPosition.EARLIEST, receiver_queue_size=60
        )
        assert consumer.topics == [a, f"{b}-part-0", f"{b}-part-1"]
        # The merge is fair among topics with buffered messages: wait until every topic's stream
        # has started (a slow start of one is not unfairness), then check the turns.
        queue = consumer._queue
        await wait_until(
            lambda: all(queue.buffered(t) for t in consumer.topics),
            timeout_s=30,
            what="every topic streaming",
        )
        got = []
        while len(got) < 600:
            for msg in await consumer.receive_many(50, timeout_s=30):
                got.append(msg)
                await consumer.ack(msg)
        await consumer.close()
    assert sorted(m.payload for m in got) == sorted(
        [b"a%d" % i for i in range(300)] + [b"b%d" % i for i in range(300)]
    )
    # Fair merge, one message per topic in turn: a (one topic) gets about a third, not starved by
    # b's two partitions, nor the reverse.
    first = Counter(m.topic == a for m in got[:150])
    print(f"\nfirst 150 messages: {first[True]} from {a}, {first[False]} from {b}'s partitions")
    assert 35 <= first[True] <= 65
    # Order within each topic is kept.
    for t in consumer.topics:
        offsets = [m.offset for m in got if m.topic == t]
        assert offsets == sorted(offsets)


async def test_a_pattern_follows_topics_created_and_deleted(cluster: LocalCluster) -> None:
    p = unique("pat")
    first, later, parted = f"/default/{p}-1", f"/default/{p}-2", f"/default/{p}-3"
    async with DanubeClient(cluster.service_url) as client:
        await produce(client, first, [b"one"])
        await produce(client, f"/default/x{p}-1", [b"not matched"])  # the whole name must match
        consumer = await client.subscribe_many(
            pattern=f"/default/{p}-[0-9]+",
            subscription="s",
            initial_position=InitialPosition.EARLIEST,
            refresh_interval_s=0.5,
        )
        assert consumer.topics == [first]
        msg = await consumer.receive(timeout_s=30)
        assert msg.payload == b"one"
        await consumer.ack(msg)

        created_at = time.monotonic()
        await produce(client, later, [b"two"])  # a new topic: found, read from its start
        msg = await consumer.receive(timeout_s=30)
        picked_up_s = time.monotonic() - created_at
        assert (msg.topic, msg.payload) == (later, b"two")
        await consumer.ack(msg)

        await asyncio.to_thread(
            admin, cluster, "topics", "create", parted, "--partitions", "2", "--dispatch-strategy", "reliable"
        )
        await wait_until(lambda: len(consumer.topics) == 4, timeout_s=20, what="the partitions joined")
        assert consumer.topics == [first, later, f"{parted}-part-0", f"{parted}-part-1"]
        await produce(client, parted, [b"three-a", b"three-b"])
        got = {(await consumer.receive(timeout_s=30)).payload for _ in range(2)}
        assert got == {b"three-a", b"three-b"}

        await asyncio.to_thread(admin, cluster, "topics", "delete", first)
        await wait_until(lambda: first not in consumer.topics, timeout_s=20, what="the deleted topic dropped")
        await produce(client, later, [b"still here"])
        msg = await consumer.receive(timeout_s=30)
        assert msg.payload == b"still here" and not consumer.closed
        await consumer.close()
    print(f"\na topic created after subscribing was delivered from {picked_up_s:.2f} s after its creation")


async def test_cli_consume_pattern(cluster: LocalCluster) -> None:
    p = unique("clipat")
    async with DanubeClient(cluster.service_url) as client:
        await produce(client, f"/default/{p}-a", [b"from-a"])
        proc = await asyncio.create_subprocess_exec(
            cli("danube-cli"), "consume", "-s", cluster.service_url, "--pattern", f"/default/{p}-.*",
            "-m", "s", "--initial-position", "earliest", "-c", "2",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=subprocess_env(),
        )  # fmt: skip
        try:
            assert proc.stderr is not None
            line = await asyncio.wait_for(proc.stderr.readline(), 60)
            assert b"consuming /default/" in line, line
            await produce(client, f"/default/{p}-b", [b"from-b"])
            out, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert b"from-a" in out and b"from-b" in out
