"""Reliable publish throughput and publish-to-ack latency, next to this run's baselines.

    .venv/bin/python bench/reliable_publish.py [--messages 50000]

One local cluster (etcd + lookup + 1 broker, WAL on this machine's disk). For 100-byte and
1 KB messages, one SDK producer publishes as fast as it can (pipelined, batched) to:
- a reliable topic with durability ``fsync`` (acked only after the batch is fsync'ed),
- a reliable topic with durability ``none`` (acked once written to the page cache),
- a non-reliable topic (in memory),
and the script prints msg/s, MB/s and p50/p99 publish-to-ack latency for each, plus the raw
fsync rate of the same disk (one 100-byte write + fsync per call): the ratio reliable msg/s /
raw fsync/s shows how many messages group commit puts behind each fsync.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import grpc

from danube_common.grpc_util import strip_scheme
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc


def raw_fsync_rate(directory: Path, seconds: float = 2.0) -> float:
    path = directory / "fsync-probe.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        n = 0
        payload = b"x" * 100
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            os.write(fd, payload)
            os.fsync(fd)
            n += 1
        return n / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()


def create_topic(admin_url: str, name: str, dispatch: str, durability: str) -> None:
    with grpc.insecure_channel(strip_scheme(admin_url)) as ch:
        apb_grpc.TopicAdminStub(ch).CreateTopic(
            apb.CreateTopicRequest(name=name, dispatch_strategy=dispatch, durability=durability), timeout=10
        )


async def publish(service_url: str, topic: str, reliable: bool, messages: int, size: int) -> dict[str, float]:
    from danube_sdk import DanubeClient, DispatchStrategy

    payload = os.urandom(size)
    lat: list[float] = []
    async with DanubeClient(service_url) as client:
        producer = await client.create_producer(
            topic,
            dispatch_strategy=DispatchStrategy.RELIABLE if reliable else DispatchStrategy.NON_RELIABLE,
        )
        await producer.send(b"warm-up")
        futures = []
        t0 = time.perf_counter()
        for _ in range(messages):
            sent = time.perf_counter()
            fut = await producer.send_async(payload)
            fut.add_done_callback(lambda f, sent=sent: lat.append(time.perf_counter() - sent))
            futures.append(fut)
        await asyncio.gather(*futures)
        elapsed = time.perf_counter() - t0
        await producer.close()
    q = statistics.quantiles(lat, n=100)
    return {"rate": messages / elapsed, "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=50_000)
    args = p.parse_args()

    from danube_local.cluster import LocalCluster

    rows: list[tuple[str, int, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        fsync_rate = raw_fsync_rate(Path(tmp))
        print(f"== raw fsync rate of this disk: {fsync_rate:,.0f}/s", flush=True)
        with LocalCluster(brokers=1, workdir=Path(tmp), log_level="WARNING") as c:
            for size in (100, 1024):
                for label, dispatch, durability in (
                    ("reliable, fsync", "reliable", "fsync"),
                    ("reliable, none", "reliable", "none"),
                    ("non-reliable", "non_reliable", ""),
                ):
                    topic = f"/default/bench-{dispatch}-{durability or 'mem'}-{size}"
                    create_topic(c.admin_url, topic, dispatch, durability)
                    print(f"== {label}, {size} B x {args.messages} ...", flush=True)
                    res = asyncio.run(
                        publish(c.service_url, topic, dispatch == "reliable", args.messages, size)
                    )
                    rows.append((label, size, res))

    print()
    print(
        f"{'topic':<18} {'size':>6} {'msg/s':>10} {'MB/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'msgs/fsync':>11}"
    )
    for label, size, r in rows:
        per_fsync = f"{r['rate'] / fsync_rate:>11.1f}" if "fsync" in label else f"{'':>11}"
        print(
            f"{label:<18} {size:>6} {r['rate']:>10,.0f} {r['rate'] * size / 1e6:>7.1f} "
            f"{r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {per_fsync}"
        )
    print(f"raw fsync rate: {fsync_rate:,.0f}/s (one 100-byte write + fsync each)")
    for size in (100, 1024):
        rel = next(r for lbl, s, r in rows if s == size and lbl == "reliable, fsync")
        non = next(r for lbl, s, r in rows if s == size and lbl == "non-reliable")
        print(f"{size} B: reliable fsync / non-reliable throughput = {rel['rate'] / non['rate']:.2f}")


if __name__ == "__main__":
    main()
