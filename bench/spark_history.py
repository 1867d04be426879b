"""A topic's history read three ways, in one run: rows/s through a broker subscription, by
Spark from object storage (``danube-history``), and by the same decoding code in one plain
Python process (no Spark: what the per-row work costs without Spark's overhead).

    .venv/bin/python bench/spark_history.py [--messages 200000] [--partitions 4] [--payload-bytes 200]
                                            [--master local[2]] [--rounds 3]

One local cluster (etcd + lookup + 1 broker + its WAL uploader, local directory object store).
A partitioned reliable topic with durability ``cloud`` (a message is acknowledged once its batch
is uploaded, so every message is in object storage when the producer is done) gets
``--messages`` messages (key, two attributes, a payload of ``--payload-bytes``).

- **subscription**: an exclusive subscription from the earliest offset of the partitioned
  topic, in this process (SDK, batched delivery), receives and acknowledges every message; the
  broker serves them from its local WAL (nothing was trimmed) - the fastest a broker can do.
- **spark**: ``spark.read.format("danube-history")`` with etcd descriptors, one task per object
  (or a few), forced to build every row: ``count(*)`` and ``sum(length(payload))``. The first
  query is a warm-up (Python workers start); the others are timed.
- **direct**: the planner and the executor code of ``danube-history`` run in this process, one
  task after another, without Spark (planning included).

Each timed figure is the median of ``--rounds``; the subscription read is repeated the same
number of times on fresh subscriptions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

ROOT = Path(__file__).resolve().parents[1]


def create_topic(admin_url: str, topic: str, partitions: int) -> None:
    subprocess.run(
        [str(ROOT / ".venv/bin/danube-admin"), "--admin-url", admin_url, "topics", "create", topic,
         "--partitions", str(partitions), "--dispatch-strategy", "reliable", "--durability", "cloud"],
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


async def produce(service_url: str, topic: str, n: int, payload_bytes: int) -> float:
    from danube_sdk import DanubeClient, DispatchStrategy

    async with DanubeClient(service_url) as client:
        producer = await client.create_producer(
            topic,
            dispatch_strategy=DispatchStrategy.RELIABLE,
            max_pending_messages=50_000,
            send_timeout_s=120,
        )
        pad = b"x" * max(0, payload_bytes - 12)
        t0 = time.perf_counter()
        futs = []
        for i in range(n):
            futs.append(
                await producer.send_async(
                    f"{i:012d}".encode() + pad, key=f"k{i % 64}", properties={"i": str(i), "src": "bench"}
                )
            )
        await asyncio.gather(*futs)
        took = time.perf_counter() - t0
        await producer.close()
    return n / took


async def subscription_read(service_url: str, topic: str, n: int, name: str) -> tuple[float, int]:
    from danube_sdk import DanubeClient, InitialPosition, SubType

    async with DanubeClient(service_url) as client:
        consumer = await client.subscribe(
            topic, subscription=name, sub_type=SubType.EXCLUSIVE, initial_position=InitialPosition.EARLIEST
        )
        got = size = 0
        t0 = time.perf_counter()
        while got < n:
            for m in await consumer.receive_many(2000, timeout_s=60):
                size += len(m.payload)
                await consumer.ack(m)
                got += 1
        took = time.perf_counter() - t0
        await consumer.close()
    return got / took, size


def spark_read(spark: Any, options: dict[str, str], topic: str) -> tuple[float, int, int, int]:
    from pyspark.sql import functions as F

    reader = spark.read.format("danube-history")
    for k, v in options.items():
        reader = reader.option(k, v)
    t0 = time.perf_counter()
    df = reader.load(topic)
    row = df.agg(F.count("*").alias("n"), F.sum(F.length("payload")).alias("b")).collect()[0]
    took = time.perf_counter() - t0
    return row.n / took, row.n, row.b, df.rdd.getNumPartitions()


def direct_read(options: dict[str, str], topic: str) -> tuple[float, int]:
    from danube_spark.history_options import parse_options
    from danube_spark.history_plan import plan_history
    from danube_spark.history_rows import read_task

    t0 = time.perf_counter()
    opts = parse_options({"topic": topic, **options})
    n = 0
    for task in plan_history(opts).tasks:
        for batch in read_task(task, opts):
            n += batch.num_rows
    return n / (time.perf_counter() - t0), n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--payload-bytes", type=int, default=200)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--segment-bytes", type=int, default=4 * 1024 * 1024, help="broker WAL segment size")
    args = p.parse_args()

    from pyspark.sql import SparkSession

    from danube_local.cluster import LocalCluster
    from danube_spark import register

    env = {
        "DANUBE_BROKER_WAL__SEGMENT_MAX_BYTES": str(args.segment_bytes),
        "DANUBE_BROKER_CLOUD_FLUSH_INTERVAL_MS": "20",
    }
    topic = "/default/bench-history"
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(brokers=1, uploaders=True, workdir=Path(tmp), log_level="WARNING", extra_env=env) as c,
    ):
        create_topic(c.admin_url, topic, args.partitions)
        print(
            f"producing {args.messages:,} x {args.payload_bytes} B to {topic} ({args.partitions} partitions, cloud)...",
            flush=True,
        )
        pub = asyncio.run(produce(c.service_url, topic, args.messages, args.payload_bytes))
        print(f"  published at {pub:,.0f} msg/s (durability cloud)", flush=True)
        objects = sorted(Path(c.objects_dir).rglob("*.wal"))
        print(
            f"  {len(objects)} objects, {sum(o.stat().st_size for o in objects) / 1e6:.1f} MB in object storage"
        )

        options = {
            "object_store.local_dir": str(c.objects_dir),
            "etcd.endpoints": c.etcd_endpoint,
            "etcd.cluster": c.cluster,
        }
        t0 = time.perf_counter()
        spark = (
            SparkSession.builder.master(args.master)
            .appName("bench-spark-history")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        print(f"  Spark ({args.master}) up in {time.perf_counter() - t0:.1f} s", flush=True)
        warm, n, _, parts = spark_read(spark, options, topic)
        assert n == args.messages, f"Spark read {n} rows, {args.messages} were produced"
        print(f"  Spark warm-up query: {warm:,.0f} rows/s ({parts} Spark partitions)", flush=True)

        sub: list[float] = []
        spk: list[float] = []
        dct: list[float] = []
        for rnd in range(args.rounds):
            rate, size = asyncio.run(subscription_read(c.service_url, topic, args.messages, f"bench-{rnd}"))
            sub.append(rate)
            rate, n, b2, _ = spark_read(spark, options, topic)
            assert (n, b2) == (args.messages, size), "Spark and the subscription saw the same messages"
            spk.append(rate)
            rate, n = direct_read(options, topic)
            assert n == args.messages
            dct.append(rate)
            print(
                f"  round {rnd + 1}: subscription {sub[-1]:,.0f}, spark {spk[-1]:,.0f}, direct {dct[-1]:,.0f} rows/s",
                flush=True,
            )
        spark.stop()

    base = statistics.median(sub)
    print()
    print(f"{args.messages:,} messages x {args.payload_bytes} B, {args.partitions} partitions, "
          f"{len(objects)} objects; median of {args.rounds} rounds; Spark master {args.master}")  # fmt: skip
    print(f"{'read path':<34} {'rows/s':>10} {'vs subscription':>16}")
    for name, vals in (
        ("broker subscription (SDK)", sub),
        ("Spark danube-history", spk),
        ("danube-history code, no Spark", dct),
    ):
        med = statistics.median(vals)
        print(f"{name:<34} {med:>10,.0f} {med / base:>15.2f}x")


if __name__ == "__main__":
    main()
