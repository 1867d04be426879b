"""What the blocking SDK (danube_sdk.sync) costs next to the asyncio SDK, in one run.

    .venv/bin/python bench/sync_overhead.py [--messages 20000] [--rounds 3] [--latency-sends 300]

One local cluster (etcd + lookup + 1 broker, as processes); every mode publishes 100-byte
messages to a fresh reliable (fsync) topic, modes alternating within each round:

- **async pipelined**: ``await producer.send_async(...)`` for every message, then wait for all;
- **sync pipelined, 1 thread**: ``producer.send_async(...)`` (concurrent futures) from one thread;
- **sync pipelined, 4 threads**: the same, the messages split over 4 threads sharing the producer;
- **async send()** / **sync send()**: one message at a time, waiting for each ack (latency).

The table shows the median over rounds and the ratio to the asyncio mode of the same kind.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient, DispatchStrategy
from danube_sdk import sync as dsync

PAYLOAD = os.urandom(100)


def topic() -> str:
    return f"/default/sync-bench-{uuid.uuid4().hex[:8]}"


async def async_pipelined(url: str, n: int) -> float:
    async with DanubeClient(url) as client:
        producer = await client.create_producer(topic(), dispatch_strategy=DispatchStrategy.RELIABLE)
        await producer.send(PAYLOAD)
        start = time.perf_counter()
        futs = [await producer.send_async(PAYLOAD) for _ in range(n)]
        await asyncio.gather(*futs)
        return n / (time.perf_counter() - start)


def sync_pipelined(url: str, n: int, threads: int) -> float:
    with dsync.DanubeClient(url) as client:
        producer = client.create_producer(topic(), dispatch_strategy=DispatchStrategy.RELIABLE)
        producer.send(PAYLOAD)

        def part(count: int) -> None:
            futs = [producer.send_async(PAYLOAD) for _ in range(count)]
            for f in futs:
                f.result()

        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            for f in [pool.submit(part, n // threads) for _ in range(threads)]:
                f.result()
        return (n // threads * threads) / (time.perf_counter() - start)


async def async_latency(url: str, n: int) -> float:
    async with DanubeClient(url) as client:
        producer = await client.create_producer(topic(), dispatch_strategy=DispatchStrategy.RELIABLE)
        await producer.send(PAYLOAD)
        lat = []
        for _ in range(n):
            t = time.perf_counter()
            await producer.send(PAYLOAD)
            lat.append(time.perf_counter() - t)
        return statistics.median(lat) * 1e6


def sync_latency(url: str, n: int) -> float:
    with dsync.DanubeClient(url) as client:
        producer = client.create_producer(topic(), dispatch_strategy=DispatchStrategy.RELIABLE)
        producer.send(PAYLOAD)
        lat = []
        for _ in range(n):
            t = time.perf_counter()
            producer.send(PAYLOAD)
            lat.append(time.perf_counter() - t)
        return statistics.median(lat) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-sends", type=int, default=300)
    args = ap.parse_args()
    modes: dict[str, Callable[[str], float]] = {
        "async pipelined (msg/s)": lambda u: asyncio.run(async_pipelined(u, args.messages)),
        "sync pipelined, 1 thread (msg/s)": lambda u: sync_pipelined(u, args.messages, 1),
        "sync pipelined, 4 threads (msg/s)": lambda u: sync_pipelined(u, args.messages, 4),
        "async send() median (us)": lambda u: asyncio.run(async_latency(u, args.latency_sends)),
        "sync send() median (us)": lambda u: sync_latency(u, args.latency_sends),
    }
    results: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="danube-sync-bench-") as tmp:
        cluster = LocalCluster(brokers=1, workdir=Path(tmp), log_level="WARNING")
        cluster.start(timeout_s=60)
        try:
            for r in range(args.rounds):
                for mode, run in modes.items():
                    results[mode].append(run(cluster.service_url))
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        finally:
            cluster.stop()
    med = {m: statistics.median(v) for m, v in results.items()}
    base_tput = med["async pipelined (msg/s)"]
    base_lat = med["async send() median (us)"]
    print(f"{'mode':38} {'median':>10} {'vs async':>9}")
    for mode, value in med.items():
        base = base_lat if "(us)" in mode else base_tput
        print(f"{mode:38} {value:10.0f} {value / base:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
