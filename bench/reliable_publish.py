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
from collections.abc import Callable
from pathlib import Path

import grpc

from danube_common.grpc_util import strip_scheme
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc


def raw_fsync(directory: Path, seconds: float = 3.0) -> dict[str, float]:
    """One 100-byte write + fdatasync per call, for ``seconds``: rate and latency tail."""
    path = directory / "fsync-probe.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    lat: list[float] = []
    try:
        payload = b"x" * 100
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a = time.perf_counter()
            os.write(fd, payload)
            os.fdatasync(fd)
            lat.append(time.perf_counter() - a)
        q = statistics.quantiles(lat, n=1000)
        return {
            "rate": len(lat) / (time.perf_counter() - t0),
            "p50_ms": q[499] * 1000,
            "p999_ms": q[998] * 1000,
            "max_ms": max(lat) * 1000,
        }
    finally:
        os.close(fd)
        path.unlink()


def create_topic(admin_url: str, name: str, dispatch: str, durability: str) -> None:
    with grpc.insecure_channel(strip_scheme(admin_url)) as ch:
        apb_grpc.TopicAdminStub(ch).CreateTopic(
            apb.CreateTopicRequest(name=name, dispatch_strategy=dispatch, durability=durability), timeout=10
        )


async def publish_at_rate(
    service_url: str, topic: str, rate: float, seconds: float, size: int
) -> dict[str, float]:
    """Publish at a fixed rate; latency counts from each message's intended send time, so a
    stall delays the measurements of everything behind it (no coordinated omission)."""
    from danube_sdk import DanubeClient, DispatchStrategy

    payload = os.urandom(size)
    lat: list[float] = []
    n = int(rate * seconds)
    async with DanubeClient(service_url) as client:
        producer = await client.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE)
        await producer.send(b"warm-up")
        futures = []
        t0 = time.perf_counter()
        for i in range(n):
            intended = t0 + i / rate
            delay = intended - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            fut = await producer.send_async(payload)
            fut.add_done_callback(lambda f, t=intended: lat.append(time.perf_counter() - t))
            futures.append(fut)
        await asyncio.gather(*futures)
        await producer.close()
    q = statistics.quantiles(lat, n=1000)
    return {"rate": rate, "p50_ms": q[499] * 1000, "p99_ms": q[989] * 1000, "p999_ms": q[998] * 1000}


async def publish(
    service_url: str,
    topic: str,
    reliable: bool,
    messages: int,
    payload: bytes,
    before_send: Callable[[], None] | None = None,
) -> dict[str, float]:
    """One SDK producer publishes ``payload`` ``messages`` times as fast as it can (pipelined);
    ``before_send`` runs (in a thread) once the producer is attached, before the measurement."""
    from danube_sdk import DanubeClient, DispatchStrategy

    lat: list[float] = []
    async with DanubeClient(service_url) as client:
        producer = await client.create_producer(
            topic,
            dispatch_strategy=DispatchStrategy.RELIABLE if reliable else DispatchStrategy.NON_RELIABLE,
        )
        await producer.send(payload)
        if before_send is not None:
            await asyncio.to_thread(before_send)
            await asyncio.sleep(0.5)  # brokers follow metadata changes through watches
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
    p.add_argument("--rate", type=float, default=5_000, help="msg/s of the fixed-rate latency run")
    p.add_argument("--rate-seconds", type=float, default=5.0)
    args = p.parse_args()

    from danube_local.cluster import LocalCluster

    rows: list[tuple[str, int, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        disk = raw_fsync(Path(tmp))
        fsync_rate = disk["rate"]
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
                        publish(c.service_url, topic, dispatch == "reliable", args.messages, os.urandom(size))
                    )
                    rows.append((label, size, res))
            topic = "/default/bench-fixed-rate"
            create_topic(c.admin_url, topic, "reliable", "fsync")
            print(
                f"== reliable, fsync, 100 B at a fixed {args.rate:,.0f} msg/s for {args.rate_seconds:.0f} s ..."
            )
            fixed = asyncio.run(publish_at_rate(c.service_url, topic, args.rate, args.rate_seconds, 100))

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
    print(
        f"raw fsync: {fsync_rate:,.0f}/s (one 100-byte write + fdatasync each); latency p50 "
        f"{disk['p50_ms']:.2f} ms, p99.9 {disk['p999_ms']:.2f} ms, max {disk['max_ms']:.1f} ms"
    )
    print("(max-rate latencies above are queueing behind the producer's pending window)")
    print(
        f"fixed rate {fixed['rate']:,.0f} msg/s, reliable fsync, 100 B: publish-to-ack p50 {fixed['p50_ms']:.2f} ms, "
        f"p99 {fixed['p99_ms']:.2f} ms, p99.9 {fixed['p999_ms']:.2f} ms"
    )
    for size in (100, 1024):
        rel = next(r for lbl, s, r in rows if s == size and lbl == "reliable, fsync")
        non = next(r for lbl, s, r in rows if s == size and lbl == "non-reliable")
        print(f"{size} B: reliable fsync / non-reliable throughput = {rel['rate'] / non['rate']:.2f}")


if __name__ == "__main__":
    main()
