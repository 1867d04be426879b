"""Rows per second through ``format("danube")`` next to the SDK alone, in one run.

A local cluster (one broker), a reliable topic of ``--partitions`` partitions holding
``--messages`` messages of ``--size`` bytes; then, on the same machine and data:

1. the SDK: one Reader per partition from the first offset to the end (asyncio, one process);
2. Spark, streaming: ``readStream.format("danube")`` with ``Trigger.AvailableNow`` into the
   ``noop`` sink (the whole topic in micro-batches of ``--max-per-trigger``);
3. Spark, batch write: the rows of a DataFrame to a new topic with ``write.format("danube")``;
4. the SDK: the same rows sent by one idempotent producer with caller-numbered sequence ids.

Prints each figure and the Spark/SDK ratios. Spark's first job pays for its Python workers:
a warm-up query runs first and is not counted.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/spark_stream.py --messages 50000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient, DispatchStrategy
from danube_spark.topic_io import run_async


async def _produce(url: str, topic: str, n: int, size: int) -> None:
    async with DanubeClient(url) as client:
        producer = await client.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE)
        payload = b"x" * size
        futs = [await producer.send_async(payload, key=f"k{i % 64}") for i in range(n)]
        await asyncio.gather(*futs)


async def _read_sdk(url: str, topic: str) -> int:
    async with DanubeClient(url) as client:
        total = 0
        for p in await client.topic_partitions(topic):
            tail = await client.create_reader(p, start="latest")
            end = tail.next_offsets[p] or 0
            await tail.close()
            reader = await client.create_reader(p, start="earliest")
            taken = 0
            while taken < end:
                msg = await reader.receive(timeout_s=30)
                taken = msg.offset + 1
                total += 1
            await reader.close()
        return total


async def _write_sdk(url: str, topic: str, n: int, size: int) -> None:
    async with DanubeClient(url) as client:
        producer = await client.create_producer(
            topic,
            producer_name="bench-sdk",
            dispatch_strategy=DispatchStrategy.RELIABLE,
            enable_chunking=False,
        )
        payload = b"y" * size
        futs = [await producer.send_async(payload, key=f"k{i % 64}", sequence_id=i + 1) for i in range(n)]
        await asyncio.gather(*futs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--max-per-trigger", type=int, default=20_000)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(brokers=1, workdir=Path(tmp) / "cluster", log_level="WARNING")
        cluster.start(timeout_s=60)
        try:
            run(cluster, args, Path(tmp))
        finally:
            cluster.stop()


def run(cluster: LocalCluster, args: argparse.Namespace, tmp: Path) -> None:
    import subprocess

    from pyspark.sql import SparkSession

    from danube_spark import register

    url, n = cluster.service_url, args.messages
    topic = "/default/bench-src"
    admin = [sys.executable, "-m", "danube_sdk.cli.admin", "--admin-url", cluster.admin_url]
    subprocess.run(
        [
            *admin,
            "topics",
            "create",
            topic,
            "--partitions",
            str(args.partitions),
            "--dispatch-strategy",
            "reliable",
        ],
        check=True,
        capture_output=True,
    )
    run_async(_produce(url, topic, n, args.size))
    print(f"{n} messages of {args.size} B in {topic} ({args.partitions} partitions)")

    t0 = time.perf_counter()
    got = run_async(_read_sdk(url, topic))
    sdk_read = got / (time.perf_counter() - t0)
    print(f"SDK readers:          {sdk_read:10.0f} msg/s ({got} messages)")

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    def stream(ckpt: str) -> float:
        t = time.perf_counter()
        q = (
            spark.readStream.format("danube")
            .option("service_url", url)
            .option("topics", topic)
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", args.max_per_trigger)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        rows = sum(p["numInputRows"] for p in q.recentProgress)
        assert rows == n, f"read {rows} rows, expected {n}"
        return rows / (time.perf_counter() - t)

    stream(str(tmp / "warm-up"))
    spark_read = stream(str(tmp / "ckpt"))
    print(f"Spark source (noop):  {spark_read:10.0f} msg/s   ratio to the SDK {spark_read / sdk_read:.2f}")

    df = spark.range(n, numPartitions=2).selectExpr(
        "concat('k', cast(id % 64 AS string)) AS key", f"repeat('y', {args.size}) AS payload"
    )
    df.cache().count()
    t = time.perf_counter()
    df.write.format("danube").option("service_url", url).option("topic", "/default/bench-spark-out").mode(
        "append"
    ).save()
    spark_write = n / (time.perf_counter() - t)
    t = time.perf_counter()
    run_async(_write_sdk(url, "/default/bench-sdk-out", n, args.size))
    sdk_write = n / (time.perf_counter() - t)
    print(f"SDK producer:         {sdk_write:10.0f} msg/s")
    print(f"Spark sink (batch):   {spark_write:10.0f} msg/s   ratio to the SDK {spark_write / sdk_write:.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
