"""Publish with the unmodified PyPI ``danube-client`` and report what it achieved, as one JSON line.

Runs ONLY under ``.venv-danube-client`` (its top-level package ``danube`` clashes with ours), started by
bench/drivers/danube_client.py. That client has one unary SendMessage per message and no pipelining
API, so ``--concurrency`` sends are kept in flight with asyncio tasks (1 = strictly one after another).
Latency is from the intended send time at a fixed rate (no coordinated omission), else from the call.

    python danube_client_publish.py --service-url http://127.0.0.1:6650 --topic /default/t \
        --size 100 --warmup-s 2 --duration-s 10 [--rate 0] [--concurrency 1] [--reliable]
Prints {"published": n, "errors": e, "window_s": s, "lat_us": [..samples..]} (samples in µs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

from danube import DanubeClientBuilder, DispatchStrategy


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--service-url", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--warmup-s", type=float, default=2.0)
    p.add_argument("--duration-s", type=float, default=10.0)
    p.add_argument("--rate", type=float, default=0.0)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--reliable", action="store_true")
    args = p.parse_args()

    client = await DanubeClientBuilder().service_url(args.service_url).build()
    b = client.new_producer().with_topic(args.topic).with_name(f"bench-{os.getpid()}")
    if args.reliable:
        b = b.with_dispatch_strategy(DispatchStrategy.RELIABLE)
    producer = b.build()
    await asyncio.wait_for(producer.create(), 30)
    pad = os.urandom(args.size - 8)
    state = {"recording": False, "published": 0, "errors": 0}
    lat: list[int] = []
    start = time.monotonic()
    t_rec = start + args.warmup_s
    t_end = t_rec + args.duration_s
    interval = 1 / (args.rate / args.concurrency) if args.rate else 0.0

    async def worker(k: int) -> None:
        i = 0
        base = time.time_ns() + k * int(interval * 1e9 / args.concurrency) if interval else 0
        while time.monotonic() < t_end:
            if interval:
                sent_ns = base + int(i * interval * 1e9)
                delay = (sent_ns - time.time_ns()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)
            else:
                sent_ns = time.time_ns()
            i += 1
            try:
                await asyncio.wait_for(producer.send(sent_ns.to_bytes(8, "little") + pad, None), 30)
            except Exception:
                state["errors"] += 1
                continue
            if state["recording"]:
                state["published"] += 1
                lat.append((time.time_ns() - sent_ns) // 1000)

    async def clock() -> float:
        await asyncio.sleep(max(0.0, t_rec - time.monotonic()))
        state["recording"] = True
        t0 = time.monotonic()
        await asyncio.sleep(max(0.0, t_end - time.monotonic()))
        state["recording"] = False
        return time.monotonic() - t0

    window, *_ = await asyncio.gather(clock(), *(worker(k) for k in range(args.concurrency)))
    print(
        json.dumps(
            {"published": state["published"], "errors": state["errors"], "window_s": window, "lat_us": lat}
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
