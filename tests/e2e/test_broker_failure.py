"""A broker dies (SIGKILL): its topics come back on another broker and SDK clients keep flowing.

Before the load manager exists, the lookup service re-places a topic whose owner's registration
lease expired (fenced on the ownership epoch). The cluster here uses a 3 s registration TTL.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest

from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient, SubType
from tests.e2e.conftest import cli, subprocess_env
from tests.support import unique, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def owner_of(cluster: LocalCluster, topic: str) -> str:
    res = subprocess.run(
        [cli("danube-admin"), "--admin-url", cluster.admin_url, "--output", "json", "topics", "describe", topic],
        capture_output=True, text=True, timeout=30, env=subprocess_env(),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)["broker_id"])


async def test_kill_owner_broker_clients_keep_flowing(cluster: LocalCluster, client: DanubeClient) -> None:
    topic = f"/default/{unique('failure')}"
    producer = await client.create_producer(topic, producer_name="survivor")
    consumer = await client.subscribe(topic, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE)
    await producer.send(b"before")
    assert (await consumer.receive(timeout_s=10)).payload == b"before"

    victim = owner_of(cluster, topic)
    cluster.stop_broker(victim, kill=True)
    killed_at = time.monotonic()

    # Keep publishing; non-reliable messages sent while no broker owns the topic may be lost,
    # but once the topic is re-placed, new messages must reach the same consumer object.
    received: list[bytes] = []
    stop = asyncio.Event()

    async def publish() -> None:
        i = 0
        while not stop.is_set():
            await producer.send(f"after-{i}".encode())
            i += 1

    async def consume() -> None:
        while not stop.is_set():
            try:
                msg = await consumer.receive(timeout_s=0.5)
            except TimeoutError:
                continue
            received.append(msg.payload)

    tasks = [asyncio.create_task(publish()), asyncio.create_task(consume())]
    try:
        await wait_until(lambda: len(received) >= 20, timeout_s=40, what="messages after the broker died")
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    pause_s = time.monotonic() - killed_at
    print(f"\nflow resumed {pause_s:.1f}s after SIGKILL of the owner (registration TTL 3 s)")
    new_owner = owner_of(cluster, topic)
    assert new_owner != victim
    assert all(p.startswith(b"after-") for p in received)
    idx = [int(p.split(b"-")[1]) for p in received]
    assert idx == sorted(idx), "order kept per producer across the move"
