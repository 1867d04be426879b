"""What N idle reliable topics cost one broker: memory, idle CPU, tasks, etcd watches, fds;
or (``--tracemalloc``) where their memory goes.

    .venv/bin/python scripts/idle_topics.py --topics 1000
    .venv/bin/python scripts/idle_topics.py --topics 10000 --concurrency 32 --idle-s 20
    .venv/bin/python scripts/idle_topics.py --tracemalloc --topics 500 --top 25

Starts a LocalCluster (etcd, lookup, one broker) in a scratch directory, measures the broker
with no topic, then creates ``--topics`` reliable topics through the admin API and one
subscription on each through the SDK (a consumer subscribes and goes away: the subscription
stays), ``--concurrency`` at a time. Once every topic is loaded it lets the cluster sit idle for
``--idle-s`` seconds and reports, for the empty and the loaded broker:

- broker RSS (and per topic), open file descriptors, asyncio tasks, etcd watches (the broker's
  own ``danube_broker_asyncio_tasks`` / ``danube_broker_etcd_watches`` gauges);
- broker and etcd CPU% over the idle window (utime + stime from /proc), and the etcd
  transactions and puts made during it (etcd's own /metrics).

The report also gives the time to create the topics and the lookup's and etcd's CPU seconds
spent on it, and the machine's load average at the end (figures are noisy on a shared machine:
compare runs made one after the other).

``--tracemalloc`` instead starts etcd and one broker in this process, opens ``--topics`` reliable
topics with one subscription each (a producer and a consumer come and go: the topics stay loaded,
idle), and prints the allocations still held, grouped by source line, as bytes per topic: the
fixed cost tracemalloc sees (Python objects; not the C heaps of grpc or the kernel's fd tables).

Not a test and not a benchmark (``bench/idle_topics.py`` adds a phase with clients attached): a
measuring tool for issue #17's fixed costs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import tempfile
import time
import tracemalloc
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from danube_broker.app import run
from danube_broker.config import BrokerConfig
from danube_common.etcd_server import EtcdProcess
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.service import ServiceReady
from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int) -> float:
    m = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(m.group(1)) / 1024 if m else 0.0


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def scrape(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    with urllib.request.urlopen(url, timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = out.get(name, 0.0) + float(value)
                except ValueError:
                    continue
    return out


def etcd_counts(lc: LocalCluster) -> tuple[float, float]:
    """(transactions, puts) etcd has applied since it started."""
    endpoint = lc.etcd_endpoint
    m = scrape(f"{endpoint if '://' in endpoint else 'http://' + endpoint}/metrics")
    txns = sum(v for k, v in m.items() if k.startswith("etcd_mvcc_txn_total"))
    puts = sum(v for k, v in m.items() if k.startswith("etcd_mvcc_put_total"))
    return txns, puts


def snapshot(lc: LocalCluster) -> dict[str, Any]:
    broker = lc.brokers[0]
    m = scrape(broker.metrics_url)
    return {
        "rss_mib": round(rss_mib(broker.pid), 1),
        "fds": fds(broker.pid),
        "tasks": int(m.get("danube_broker_asyncio_tasks", -1)),
        "etcd_watches": int(m.get("danube_broker_etcd_watches", -1)),
        "topics_owned": int(m.get("danube_broker_topics_owned", -1)),
    }


def idle_window(lc: LocalCluster, seconds: float) -> dict[str, Any]:
    broker, etcd = lc.brokers[0].pid, lc.etcd.proc.pid  # type: ignore[union-attr]
    t0, b0, e0 = time.monotonic(), cpu_s(broker), cpu_s(etcd)
    x0 = etcd_counts(lc)
    time.sleep(seconds)  # the measurement itself: the cluster is left alone this long
    dt = time.monotonic() - t0
    x1 = etcd_counts(lc)
    return {
        "broker_cpu_pct": round(100 * (cpu_s(broker) - b0) / dt, 2),
        "etcd_cpu_pct": round(100 * (cpu_s(etcd) - e0) / dt, 2),
        "etcd_txns": int(x1[0] - x0[0]),
        "etcd_puts": int(x1[1] - x0[1]),
    }


async def create_topics(lc: LocalCluster, n: int, concurrency: int) -> float:
    sem = asyncio.Semaphore(concurrency)
    t0 = time.monotonic()
    async with grpc.aio.insecure_channel(lc.admin_url.removeprefix("http://")) as ch:
        admin = apb_grpc.TopicAdminStub(ch)
        async with DanubeClient(lc.service_url) as client:

            async def one(i: int) -> None:
                name = f"/default/idle-{i:05d}"
                async with sem:
                    await admin.CreateTopic(
                        apb.CreateTopicRequest(name=name, dispatch_strategy="reliable"), timeout=60
                    )
                    consumer = await client.subscribe(name, subscription="s", consumer_name=f"c{i}")
                    await consumer.close()

            await asyncio.gather(*(one(i) for i in range(n)))
    return time.monotonic() - t0


def wait_owned(lc: LocalCluster, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while snapshot(lc)["topics_owned"] < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {snapshot(lc)['topics_owned']} of {n} topics loaded")
        time.sleep(0.5)


# ------------------------------------------------------------------ --tracemalloc
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


async def memory_profile(args: argparse.Namespace) -> None:
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
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument(
        "--tracemalloc", action="store_true", help="in-process: where the memory of idle topics goes"
    )
    ap.add_argument("--top", type=int, default=25, help="--tracemalloc: source lines shown")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--idle-s", type=float, default=20.0)
    ap.add_argument("--settle-s", type=float, default=5.0, help="wait after loading, before measuring")
    ap.add_argument(
        "--registration-ttl-s",
        type=int,
        default=60,
        help="the broker's lease TTL: long, so a busy shared machine's slow etcd during set-up does not stop it",
    )
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument(
        "--hold-s",
        type=float,
        default=0.0,
        help="keep the cluster up this long after the report (to profile it)",
    )
    args = ap.parse_args()
    if args.tracemalloc:
        asyncio.run(memory_profile(args))
        return
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="idle-topics-"))
    lc = LocalCluster(
        brokers=1,
        workdir=workdir,
        log_level="WARNING",
        extra_env={"DANUBE_BROKER_REGISTRATION_TTL_S": str(args.registration_ttl_s)},
    )
    lc.start(timeout_s=60)
    try:
        time.sleep(args.settle_s)
        empty = {**snapshot(lc), **idle_window(lc, args.idle_s)}
        pids = {"broker": lc.brokers[0].pid, "lookup": lc.lookup.pid, "etcd": lc.etcd.proc.pid}  # type: ignore[union-attr]
        cpu0 = {k: cpu_s(p) for k, p in pids.items()}
        took = asyncio.run(create_topics(lc, args.topics, args.concurrency))
        create_cpu = {f"{k}_cpu_s": round(cpu_s(p) - cpu0[k], 1) for k, p in pids.items()}
        wait_owned(lc, args.topics, timeout_s=600)
        time.sleep(args.settle_s)
        loaded = {**snapshot(lc), **idle_window(lc, args.idle_s)}
        per_topic_kib = (loaded["rss_mib"] - empty["rss_mib"]) * 1024 / max(1, args.topics)
        report = {
            "topics": args.topics,
            "create_s": round(took, 1),
            "create_cpu": create_cpu,
            "empty": empty,
            "loaded": loaded,
            "rss_kib_per_topic": round(per_topic_kib, 1),
            "fds_per_topic": round((loaded["fds"] - empty["fds"]) / max(1, args.topics), 2),
            "tasks_per_topic": round((loaded["tasks"] - empty["tasks"]) / max(1, args.topics), 2),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "workdir": str(workdir),
        }
        if args.json:
            print(json.dumps(report))
        else:
            for k, v in report.items():
                print(f"{k:>20}: {v}")
        if args.hold_s:
            print(f"holding the cluster for {args.hold_s:.0f}s; broker pid {lc.brokers[0].pid}", flush=True)
            time.sleep(args.hold_s)
    finally:
        lc.stop()


if __name__ == "__main__":
    main()
