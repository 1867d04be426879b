"""An acknowledged message survives ``kill -9`` of the broker, and is delivered, in order.

A producer publishes 40k messages through the SDK to a reliable (fsync) topic while the broker
process is SIGKILLed and restarted twice, at random moments (with up to 5000 sends in flight, so
each kill lands mid-stream). Afterwards one consumer reads the
topic from the earliest offset: every message whose send was acknowledged must be there, in
offset order, and the test reports how many duplicates (resends after a crash whose first copy
had been stored but not acknowledged) it saw. The ``packs`` variant compresses per batch: the
messages travel in packs (many per offset), and each must be found at the (offset, batch index)
its ack reported.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient, DispatchStrategy, InitialPosition, SubType
from tests.support import unique

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

MESSAGES = 40_000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(brokers=1, workdir=tmp_path, extra_env={"DANUBE_BROKER_REGISTRATION_TTL_S": "2"})
    c.start(timeout_s=60)
    try:
        yield c
    finally:
        c.stop()


@pytest.mark.parametrize("packs", [False, True], ids=["plain", "packs"])
async def test_acked_messages_survive_kill9_twice(cluster: LocalCluster, packs: bool) -> None:
    messages = MESSAGES // 2 if packs else MESSAGES
    pad = "-" + "order" * 10 if packs else ""  # compressible: packs shrink
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    kill_points = sorted(rng.sample(range(messages // 10, messages * 9 // 10), 2))
    topic = f"/default/{unique('kill9')}"
    acked: dict[int, tuple[int, int]] = {}  # message index -> (offset, index in its pack or -1)
    failed: list[int] = []
    kills: list[float] = []

    async with DanubeClient(cluster.service_url) as client:
        producer = await client.create_producer(
            topic,
            producer_name="kill9-producer",
            dispatch_strategy=DispatchStrategy.RELIABLE,
            send_timeout_s=90,
            max_pending_messages=5_000,
            compression="zstd" if packs else "none",
        )

        def on_done(i: int, fut: asyncio.Future) -> None:  # type: ignore[type-arg]
            if fut.cancelled() or fut.exception() is not None:
                failed.append(i)
            else:
                mid = fut.result()
                acked[i] = (mid.offset, -1 if mid.batch_index is None else mid.batch_index)

        futures = []
        next_kill = 0
        for i in range(messages):
            if next_kill < len(kill_points) and i == kill_points[next_kill]:
                # Kill once some of what was sent is acknowledged, so a crash lands mid-stream.
                kill_at = time.monotonic()
                await asyncio.to_thread(cluster.restart_broker, 0, kill=True)
                kills.append(time.monotonic() - kill_at)
                next_kill += 1
            fut = await producer.send_async(f"m-{i}{pad}".encode())
            fut.add_done_callback(lambda f, i=i: on_done(i, f))
            futures.append(fut)
        await asyncio.gather(*futures, return_exceptions=True)
        await producer.close()

        print(
            f"\nseed={seed} kill points={kill_points} restart took {[f'{k:.1f}s' for k in kills]}; "
            f"acked {len(acked)}, failed {len(failed)}"
        )
        assert len(kills) == 2
        assert len(acked) >= messages * 0.9, "most sends should be acknowledged across the restarts"
        assert any(b >= 0 for _, b in acked.values()) == packs

        consumer = await client.subscribe(
            topic,
            subscription="verify",
            sub_type=SubType.EXCLUSIVE,
            initial_position=InitialPosition.EARLIEST,
        )
        seen: dict[int, tuple[int, int]] = {}  # index -> first (offset, batch index) seen
        offsets: list[tuple[int, int]] = []
        duplicates = 0
        deadline = time.monotonic() + 120
        while not set(acked) <= set(seen):
            assert time.monotonic() < deadline, f"missing {len(set(acked) - set(seen))} acknowledged messages"
            for msg in await consumer.receive_many(1000, timeout_s=30):
                idx = int(msg.payload.decode().split("-")[1])
                at = (msg.offset, -1 if msg.batch_index is None else msg.batch_index)
                offsets.append(at)
                if idx in seen:
                    duplicates += 1
                else:
                    seen[idx] = at
                await consumer.ack(msg)
        await consumer.close()

    print(f"delivered {len(offsets)} messages, {duplicates} duplicates, all {len(acked)} acked present")
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), (
        "in offset order, each position (offset, batch index) once"
    )
    # Every acknowledged message is there at the position its ack reported.
    assert all(seen[i] == off for i, off in acked.items())
    # Per producer order: the first copies of the messages appear in send order.
    firsts = sorted(seen.items(), key=lambda kv: kv[1])
    assert [i for i, _ in firsts] == sorted(i for i, _ in firsts)
