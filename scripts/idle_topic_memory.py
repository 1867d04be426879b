"""Where an idle reliable topic's memory goes: tracemalloc, in-process broker, real etcd and WAL.

    .venv/bin/python scripts/idle_topic_memory.py --topics 500 --top 25

Starts etcd and one broker in this process, opens ``--topics`` reliable topics with one
subscription each (a producer and a consumer come and go: the topics stay loaded, idle), and
prints the allocations still held, grouped by source line, as bytes per topic: the fixed cost
tracemalloc sees (Python objects; not the C heaps of grpc or the kernel's fd tables).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import tracemalloc
from pathlib import Path

import grpc.aio

from danube_broker.app import run
from danube_broker.config import BrokerConfig
from danube_common.etcd_server import EtcdProcess
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.service import ServiceReady


async def open_topics(addr: str, n: int) -> None:
    async with grpc.aio.insecure_channel(addr) as ch:
        producers, consumers = pb_grpc.ProducerServiceStub(ch), pb_grpc.ConsumerServiceStub(ch)
        sem = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            name = f"/default/mem-{i:05d}"
            async with sem:
                p = await producers.CreateProducer(
                    pb.ProducerRequest(producer_name=f"p{i}", topic_name=name, dispatch_strategy=pb.Reliable),
                    timeout=30,
                )
                c = await consumers.Subscribe(
                    pb.ConsumerRequest(topic_name=name, consumer_name=f"c{i}", subscription="s"), timeout=30
                )
                await consumers.CloseConsumer(pb.CloseConsumerRequest(consumer_id=c.consumer_id), timeout=30)
                await producers.CloseProducer(pb.CloseProducerRequest(producer_id=p.producer_id), timeout=30)

        await asyncio.gather(*(one(i) for i in range(n)))


async def main_async(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="idle-mem-"))
    etcd = EtcdProcess(data_dir=work / "etcd", log_path=work / "etcd.log")
    etcd.start()
    try:
        cfg = BrokerConfig.model_validate(
            {
                "data_dir": str(work / "wal"),
                "broker_id": "1",
                "listen_addr": "127.0.0.1:0",
                "etcd": {"endpoints": [etcd.endpoint], "cluster": "mem"},
                "shutdown_grace_s": 1.0,
            }
        )
        stop = asyncio.Event()
        ready: asyncio.Future[ServiceReady] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(run(cfg, ready=ready.set_result, stop=stop))
        info = await asyncio.wait_for(ready, 30)
        await open_topics(info.addr, 20)  # warm every code path first
        await asyncio.sleep(1.0)
        gc.collect()
        tracemalloc.start(1)
        before = tracemalloc.take_snapshot()
        await open_topics(info.addr, args.topics)
        await asyncio.sleep(2.0)  # let closes and flushes settle
        gc.collect()
        after = tracemalloc.take_snapshot()
        stats = after.compare_to(before, "lineno")
        total = sum(s.size_diff for s in stats)
        print(f"{args.topics} idle reliable topics: {total / args.topics:.0f} bytes per topic (tracemalloc)")
        for s in stats[: args.top]:
            frame = s.traceback[0]
            where = "/".join(Path(frame.filename).parts[-2:])
            print(
                f"{s.size_diff / args.topics:9.0f} B/topic {s.count_diff / args.topics:7.1f} blocks  {where}:{frame.lineno}"
            )
        tracemalloc.stop()
        stop.set()
        await task
    finally:
        etcd.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=500)
    ap.add_argument("--top", type=int, default=25)
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
