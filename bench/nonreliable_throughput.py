"""Non-reliable throughput of our SDK, 1 producer -> 1 consumer, next to the raw gRPC ceiling.

    .venv/bin/python bench/nonreliable_throughput.py [--messages 200000] [--size 100]

Both figures come from this one run on this machine:
- **raw ceiling**: the same client-side frames (StreamMessage batches of --batch messages)
  pushed through bench/raw_grpc_relay.py, a server process that only acks and relays frames.
- **danube**: a real local cluster (etcd + lookup + 1 broker as processes); our SDK's producer
  publishes --messages messages of --size bytes while one exclusive consumer receives them.
Rate = messages delivered to the consumer / (first send -> last receive). Both the producer
and the consumer run in this process, as in the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc.aio

from danube_common.grpc_util import CHANNEL_OPTIONS
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parent.parent


def start_relay(tmp: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start bench/raw_grpc_relay.py; return the process and its address."""
    ready = Path(tmp) / "relay.json"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "raw_grpc_relay.py"), "--ready-file", str(ready)],
        start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("the raw gRPC relay did not start")
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())["addr"]


async def raw_ceiling(addr: str, messages: int, size: int, batch: int) -> float:
    async with grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS) as ch:
        prod = pb_grpc.ProducerServiceStub(ch)
        cons = pb_grpc.ConsumerServiceStub(ch)
        payload = os.urandom(size)
        frames = messages // batch
        received = 0
        done = asyncio.Event()

        async def consume() -> None:
            nonlocal received
            async for mb in cons.ReceiveBatches(pb.ReceiveBatchRequest(consumer_id=1)):
                received += len(mb.messages)
                if received >= frames * batch:
                    done.set()
                    return

        ctask = asyncio.create_task(consume())

        async def reqs():  # type: ignore[no-untyped-def]
            for seq in range(frames):
                yield pb.PublishBatch(
                    producer_id=1,
                    batch_seq=seq,
                    messages=[
                        pb.StreamMessage(payload=payload, publish_time=0, producer_name="raw")
                        for _ in range(batch)
                    ],
                )

        t0 = time.perf_counter()
        async for _ack in prod.PublishBatches(reqs()):
            pass
        await asyncio.wait_for(done.wait(), 120)
        elapsed = time.perf_counter() - t0
        await ctask
        return received / elapsed


async def danube_rate(service_url: str, messages: int, size: int, batch: int) -> tuple[float, int]:
    from danube_sdk import DanubeClient, SubType

    client = DanubeClient(service_url)
    try:
        topic = f"/default/bench-{os.getpid()}"
        producer = await client.create_producer(topic, batching_max_messages=batch)
        consumer = await client.subscribe(topic, subscription="bench", sub_type=SubType.EXCLUSIVE)
        payload = os.urandom(size)
        # Warm-up: one acked round trip so connections and the consumer stream are up.
        await producer.send(b"warm-up")
        await consumer.receive(timeout_s=10)

        received = 0
        last = 0.0

        async def consume() -> None:
            nonlocal received, last
            while received < messages:
                try:
                    received += len(await consumer.receive_many(batch, timeout_s=5))
                except TimeoutError:
                    return  # non-reliable: what was dropped does not come
            last = time.perf_counter()

        ctask = asyncio.create_task(consume())
        t0 = time.perf_counter()
        for _ in range(messages):
            await producer.send_async(payload)
        await producer.flush()
        await ctask
        elapsed = (last or time.perf_counter()) - t0
        return received / elapsed, received
    finally:
        await client.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100, help="payload bytes")
    p.add_argument("--batch", type=int, default=500, help="messages per frame (both runs)")
    args = p.parse_args()

    print(
        f"== raw gRPC batched-stream ceiling ({args.messages} x {args.size} B, {args.batch}/frame) ...",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        proc, addr = start_relay(tmp)
        try:
            raw = asyncio.run(raw_ceiling(addr, args.messages, args.size, args.batch))
        finally:
            proc.terminate()
            proc.wait(timeout=10)

    from danube_local.cluster import LocalCluster

    print("== starting a local cluster (etcd + lookup + 1 broker) ...", flush=True)
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(brokers=1, workdir=Path(tmp), log_level="WARNING") as c,
    ):
        print("== danube SDK, non-reliable, 1 producer -> 1 consumer ...", flush=True)
        ours, received = asyncio.run(danube_rate(c.service_url, args.messages, args.size, args.batch))

    print()
    print(f"{'path':<44} {'msg/s':>12} {'MB/s':>8}")
    print(f"{'raw gRPC batched stream (relay, ceiling)':<44} {raw:>12,.0f} {raw * args.size / 1e6:>8.1f}")
    print(f"{'danube non-reliable, SDK 1p -> 1c':<44} {ours:>12,.0f} {ours * args.size / 1e6:>8.1f}")
    print(f"delivered {received}/{args.messages} messages (non-reliable: drops allowed under overload)")
    print(f"ratio danube / raw ceiling: {ours / raw:.2f}")


if __name__ == "__main__":
    main()
