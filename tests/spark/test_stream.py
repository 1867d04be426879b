"""``format("danube")`` on a local SparkSession against a real local cluster (etcd, lookup and a
broker as child processes):

- the streaming source, restarted after a micro-batch failed half-way: the replayed batch holds
  exactly the rows of the failed attempt, and the output of both runs holds every produced
  message once (partitioned topic, maxMessagesPerTrigger, startingOffsets, new messages between
  the runs);
- the streaming sink, with a micro-batch that fails after it sent its rows and is replayed on
  restart: the topic holds each row once;
- a batch write with keys routed to the partitions the SDK routes them to.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient, DispatchStrategy
from danube_sdk.routing import partition_for_key
from danube_spark.sink import DanubeStreamWriter
from danube_spark.source import DanubeDataSource
from danube_spark.topic_io import run_async
from tests.support import unique

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
ROOT = Path(__file__).resolve().parents[2]
QUERY_TIMEOUT_S = 90


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(brokers=1, workdir=tmp_path_factory.mktemp("stream-cluster"), log_level="WARNING")
    c.start(timeout_s=60)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """The session's SparkSession (tests/spark shares one), with the danube sources registered."""
    from pyspark.sql import SparkSession

    from danube_spark import register

    existed = SparkSession.getActiveSession() is not None
    session = (
        SparkSession.builder.master("local[2]")
        .appName("danube-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    session.dataSource.register(FlakyDanube)
    yield session
    if not existed:
        session.stop()


# ---------------------------------------------------------------- helpers


def admin(cluster: LocalCluster, *args: str) -> None:
    subprocess.run(
        [str(ROOT / ".venv/bin/danube-admin"), "--admin-url", cluster.admin_url, *args],
        check=True,
        capture_output=True,
        timeout=30,
    )


def produce(cluster: LocalCluster, topic: str, items: list[tuple[str, bytes]]) -> None:
    """Send (key, payload) pairs to a reliable topic; return once all are acknowledged."""

    async def go() -> None:
        async with DanubeClient(cluster.service_url) as client:
            producer = await client.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE)
            futs = [await producer.send_async(p, key=k) for k, p in items]
            await asyncio.gather(*futs)

    run_async(go())


def topic_contents(cluster: LocalCluster, topic: str) -> dict[str, list[tuple[str | None, bytes]]]:
    """Every message the topic keeps, per partition, in offset order: read with a reader up to
    the next offset a reader at ``latest`` is told (so nothing is missed and nothing waited for)."""

    async def go() -> dict[str, list[tuple[str | None, bytes]]]:
        out: dict[str, list[tuple[str | None, bytes]]] = {}
        async with DanubeClient(cluster.service_url) as client:
            for p in await client.topic_partitions(topic):
                tail = await client.create_reader(p, start="latest")
                end = tail.next_offsets[p]
                await tail.close()
                assert end is not None
                reader = await client.create_reader(p, start="earliest")
                got, taken = [], 0
                while taken < end:  # offsets are dense: nothing is cut by retention here
                    msg = await reader.receive(timeout_s=10)
                    got.append((msg.key, msg.payload))
                    taken = msg.offset + 1
                await reader.close()
                out[p] = got
        return out

    return run_async(go())


def wait_query(q: Any) -> None:
    """Wait for an availableNow query to finish (it stops by itself once caught up)."""
    finished = q.awaitTermination(QUERY_TIMEOUT_S)
    assert finished, f"query {q.name} did not finish within {QUERY_TIMEOUT_S} s"


# ---------------------------------------------------------------- the source


def test_source_replays_a_failed_batch_exactly_and_resumes_after_a_restart(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    topic = f"/default/{unique('src')}"
    admin(cluster, "topics", "create", topic, "--partitions", "2", "--dispatch-strategy", "reliable")
    first = [(f"k{i % 5}", f"m{i}".encode()) for i in range(40)]
    produce(cluster, topic, first)
    out, ckpt, marker = tmp_path / "out", tmp_path / "ckpt", tmp_path / "failed-once"

    def each_batch(df: Any, batch_id: int) -> None:
        # Idempotent per batch id (overwrite); the first attempt of batch 1 fails once written.
        df.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))
        if batch_id == 1 and not marker.exists():
            df.write.parquet(str(tmp_path / "first-attempt"))
            marker.touch()
            raise RuntimeError("injected failure after batch 1 was written")

    def run() -> Any:
        stream = (
            spark.readStream.format("danube")
            .option("service_url", cluster.service_url)
            .option("topics", topic)
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", 15)
            .load()
        )
        return (
            stream.writeStream.foreachBatch(each_batch)
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )

    q = run()
    with pytest.raises(Exception, match="injected failure"):
        q.awaitTermination(QUERY_TIMEOUT_S)
    assert marker.exists()
    second = [(f"k{i % 5}", f"m{i}".encode()) for i in range(40, 55)]
    produce(cluster, topic, second)

    q = run()  # restart from the checkpoint: batch 1 is replayed, then the rest
    wait_query(q)
    assert all(p["numInputRows"] <= 15 for p in q.recentProgress)

    rows = spark.read.parquet(str(out)).collect()
    got = Counter(r.payload for r in rows)
    assert got == Counter(p for _, p in first + second)  # each message once: no loss, no duplicate
    want_cols = ["topic", "partition", "offset", "publish_time", "key", "attributes", "payload"]
    assert spark.read.parquet(str(out)).columns[: len(want_cols)] == want_cols
    for r in rows:
        assert r.topic == topic and r.partition in (0, 1) and r.producer_name
        assert r.partition == partition_for_key(r.key, 2)
    # Offsets per partition are exactly 0..n-1: contiguous, none twice.
    for part in (0, 1):
        offs = sorted(r.offset for r in rows if r.partition == part)
        assert offs == list(range(len(offs)))
    # The replayed batch read exactly what its failed attempt read.
    replayed = {(r.partition, r.offset, r.payload) for r in spark.read.parquet(str(out / "batch=1")).collect()}
    attempt = {(r.partition, r.offset, r.payload) for r in spark.read.parquet(str(tmp_path / "first-attempt")).collect()}
    assert replayed == attempt and len(replayed) == 15


# ---------------------------------------------------------------- the sink


class FlakyStreamWriter(DanubeStreamWriter):
    """Fails the first attempt of micro-batch 0 after every row was sent and acknowledged."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        super().__init__({k: v for k, v in options.items() if k.lower() != "marker"}, schema)
        self.marker = options["marker"]

    def write(self, iterator: Iterator[Any]) -> Any:
        from pyspark import TaskContext

        result = super().write(iterator)
        ctx = TaskContext.get()
        marker = Path(self.marker) / f"p{ctx.partitionId() if ctx else 0}"
        if ctx is not None and ctx.getLocalProperty("streaming.sql.batchId") == "0" and not marker.exists():
            marker.write_text(str(result.rows))
            raise RuntimeError("injected failure after the rows were sent")
        return result


class FlakyDanube(DanubeDataSource):
    @classmethod
    def name(cls) -> str:
        return "danube-flaky"

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        return FlakyStreamWriter(self.options, schema)


def test_sink_replayed_batch_is_not_duplicated(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    import pyspark.cloudpickle as cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers get these classes
    src, dst = f"/default/{unique('in')}", f"/default/{unique('out')}"
    produce(cluster, src, [(f"k{i}", f"order-{i}".encode()) for i in range(30)])
    marker = tmp_path / "marker"
    marker.mkdir()

    def run() -> Any:
        return (
            spark.readStream.format("danube")
            .option("service_url", cluster.service_url)
            .option("topics", src)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("key", "concat(payload, cast('!' as binary)) AS payload", "map('src', topic) AS attributes")
            .writeStream.format("danube-flaky")
            .option("service_url", cluster.service_url)
            .option("topic", dst)
            .option("marker", str(marker))
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )

    q = run()
    with pytest.raises(Exception, match="injected failure"):
        q.awaitTermination(QUERY_TIMEOUT_S)
    sent_first = sum(int(f.read_text()) for f in marker.iterdir())
    assert sent_first == 30  # the failed attempt had stored every row
    q = run()
    wait_query(q)

    (part,) = topic_contents(cluster, dst).values()
    assert Counter(p for _, p in part) == Counter(f"order-{i}!".encode() for i in range(30))
    assert {k for k, _ in part} == {f"k{i}" for i in range(30)}


def test_batch_write_routes_keys_to_partitions(spark: Any, cluster: LocalCluster) -> None:
    topic = f"/default/{unique('bw')}"
    admin(cluster, "topics", "create", topic, "--partitions", "3", "--dispatch-strategy", "reliable")
    df = spark.createDataFrame(
        [(f"user-{i % 7}", f"event-{i}", {"n": str(i)}) for i in range(60)], "key string, payload string, attributes map<string,string>"
    ).repartition(3)
    t0 = time.monotonic()
    df.write.format("danube").option("service_url", cluster.service_url).option("topic", topic).mode("append").save()
    print(f"\nbatch write of 60 rows: {time.monotonic() - t0:.2f} s")

    contents = topic_contents(cluster, topic)
    assert sum(len(v) for v in contents.values()) == 60
    for p, msgs in contents.items():
        n = int(p.rsplit("-part-", 1)[1])
        for key, payload in msgs:
            assert partition_for_key(key, 3) == n, (key, p)
    assert Counter(payload for msgs in contents.values() for _, payload in msgs) == Counter(
        f"event-{i}".encode() for i in range(60)
    )


def test_bad_options_and_columns_are_refused_with_what_is_allowed(spark: Any, cluster: LocalCluster) -> None:
    with pytest.raises(Exception, match="exactly one of the options topics"):
        spark.readStream.format("danube").option("service_url", cluster.service_url).load().writeStream.format(
            "console"
        ).start()
    df = spark.createDataFrame([(1, "x")], "id int, payload string")
    with pytest.raises(Exception, match="select them"):
        df.write.format("danube").option("service_url", cluster.service_url).option("topic", "/default/x").mode(
            "append"
        ).save()
