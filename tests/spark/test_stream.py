"""``format("danube")`` on a local SparkSession against a real local cluster (etcd, lookup and a
broker as child processes). To keep the suite's time down, one streaming pipeline checks the
source and the sink together:

- topics matching a pattern -> ``danube`` source -> ``danube`` sink -> topic, a micro-batch
  failing after the sink sent (and the broker stored) its rows, the query restarted from its
  checkpoint with more messages produced meanwhile, to the first topic and to a new one: the replayed batch brings each task exactly the rows, in the same
  order, of the failed attempt (the source reads a planned offset range deterministically); the
  output topic holds every produced message once, with the source's partition and offset
  (exactly once end to end: the sink's replay is deduplicated by the broker);
- a batch write with keys routed to the partitions the SDK routes them to;
- a DataFrame the sink cannot write is refused before anything runs.
"""

from __future__ import annotations

import asyncio
import json
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
from danube_spark.sink import DanubeStreamWriter, messages
from danube_spark.source import DanubeDataSource
from danube_spark.topic_io import run_async
from tests.support import unique

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
QUERY_TIMEOUT_S = 90


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def cluster(danube_cluster: LocalCluster) -> LocalCluster:
    """The session's local Danube cluster (tests/spark/conftest.py)."""
    return danube_cluster


@pytest.fixture(scope="module", autouse=True)
def flaky_sink(spark: Any) -> None:
    """The shared SparkSession (tests/spark/conftest.py) also knows the test sink below."""
    spark.dataSource.register(FlakyDanube)


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


Contents = dict[str, list[tuple[str | None, bytes, dict[str, str]]]]


def topic_contents(cluster: LocalCluster, topic: str) -> Contents:
    """Every message the topic keeps, per partition, in offset order: read with a reader up to
    the next offset a reader at ``latest`` is told (so nothing is missed and nothing waited for)."""

    async def go() -> Contents:
        out: Contents = {}
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
                    got.append((msg.key, msg.payload, dict(msg.properties)))
                    taken = msg.offset + 1
                await reader.close()
                out[p] = got
        return out

    return run_async(go())


def wait_query(q: Any) -> None:
    """Wait for an availableNow query to finish (it stops by itself once caught up)."""
    finished = q.awaitTermination(QUERY_TIMEOUT_S)
    assert finished, f"query {q.name} did not finish within {QUERY_TIMEOUT_S} s"


# ---------------------------------------------------------------- source and sink


#: Tasks of micro-batch 1 (its offset range covers both partitions of the source topic).
BATCH_1_TASKS = 2


class FlakyStreamWriter(DanubeStreamWriter):
    """The ``danube`` stream writer, recording each attempt's rows (``{dir}/b{batch}-p{part}-{n}.json``)
    and failing the first attempt of micro-batch 1 after its rows were sent and acknowledged.

    Only task 0 fails, and only once every task of the batch has recorded its rows: a task that
    Spark cancels (the batch failed) before it recorded them would otherwise have its first
    record written by the replay, which would then fail as well."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        super().__init__({k: v for k, v in options.items() if k.lower() != "record_dir"}, schema)
        self.record_dir = Path(options["record_dir"])

    def write(self, iterator: Iterator[Any]) -> Any:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        batches = list(iterator)  # Arrow record batches
        rows = [(k, p.decode(), a) for p, k, a in messages(iter(batches))]
        prefix = f"b{batch}-p{ctx.partitionId()}-"
        n = sum(1 for f in self.record_dir.iterdir() if f.name.startswith(prefix))
        (self.record_dir / f"{prefix}{n}.json").write_text(json.dumps(rows))
        result = super().write(iter(batches))
        if batch == "1" and n == 0 and ctx.partitionId() == 0:
            deadline = time.monotonic() + QUERY_TIMEOUT_S
            while self._first_records(batch) < BATCH_1_TASKS and time.monotonic() < deadline:
                time.sleep(0.05)  # polling for the other tasks' record files
            raise RuntimeError("injected failure after the rows were sent")
        return result

    def _first_records(self, batch: str) -> int:
        return sum(
            1
            for f in self.record_dir.iterdir()
            if f.name.startswith(f"b{batch}-") and f.name.endswith("-0.json")
        )


class FlakyDanube(DanubeDataSource):
    @classmethod
    def name(cls) -> str:
        return "danube-flaky"

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        return FlakyStreamWriter(self.options, schema)


def test_a_failed_micro_batch_is_replayed_exactly_and_written_once(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    import pyspark.cloudpickle as cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers get these classes
    prefix = unique("src")
    src, later, dst = f"/default/{prefix}-a", f"/default/{prefix}-b", f"/default/{unique('dst')}"
    admin(cluster, "topics", "create", src, "--partitions", "2", "--dispatch-strategy", "reliable")
    first = [(f"k{i % 5}", f"m{i}".encode()) for i in range(40)]
    produce(cluster, src, first)
    records = tmp_path / "records"
    records.mkdir()

    def run() -> Any:
        return (
            spark.readStream.format("danube")
            .option("service_url", cluster.service_url)
            .option("pattern", f"/default/{prefix}-.*")
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", 20)
            .load()
            .selectExpr(
                "key",
                "payload",
                "map('topic', topic, 'partition', coalesce(cast(partition AS string), '-'),"
                " 'offset', cast(offset AS string), 'producer', producer_name) AS attributes",
            )
            .writeStream.format("danube-flaky")
            .option("service_url", cluster.service_url)
            .option("topic", dst)
            .option("record_dir", str(records))
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )

    q = run()
    with pytest.raises(Exception, match="injected failure"):
        q.awaitTermination(QUERY_TIMEOUT_S)
    second = [(f"k{i % 5}", f"m{i}".encode()) for i in range(40, 52)]
    produce(cluster, src, second)
    # A topic the pattern matches, created while the query is down: read from its first offset.
    new_topic = [(f"n{i}", f"n{i}".encode()) for i in range(5)]
    produce(cluster, later, new_topic)
    q = run()  # restart from the checkpoint: micro-batch 1 is replayed, then the rest is read
    wait_query(q)
    assert q.recentProgress and all(p["numInputRows"] <= 20 for p in q.recentProgress)

    # The replay of micro-batch 1 brought every task the same rows in the same order (a task
    # other than 0 may have succeeded the first time; the whole batch is replayed all the same).
    attempts = sorted(f.name for f in records.iterdir() if f.name.startswith("b1-"))
    assert len(attempts) == 2 * BATCH_1_TASKS, attempts
    for name in attempts[::2]:
        replay = name.replace("-0.json", "-1.json")
        assert json.loads((records / name).read_text()) == json.loads((records / replay).read_text())
    assert sum(len(json.loads((records / n).read_text())) for n in attempts[::2]) == 20

    # The output topic holds every produced message once, with the source's partitions and offsets.
    (out,) = topic_contents(cluster, dst).values()
    assert Counter(p for _, p, _ in out) == Counter(p for _, p in first + second + new_topic)
    by_partition: dict[str, list[int]] = {}
    for key, _, attrs in out:
        assert attrs["producer"]
        if attrs["topic"] == src:
            assert int(attrs["partition"]) == partition_for_key(key or "", 2)
        else:
            assert attrs["topic"] == later and attrs["partition"] == "-"  # not partitioned
        by_partition.setdefault(attrs["topic"] + attrs["partition"], []).append(int(attrs["offset"]))
    for offsets in by_partition.values():  # each source offset once, written in offset order
        assert offsets == list(range(len(offsets)))


# ---------------------------------------------------------------- batch writes


def test_batch_write_routes_keys_to_partitions(spark: Any, cluster: LocalCluster) -> None:
    topic = f"/default/{unique('bw')}"
    admin(cluster, "topics", "create", topic, "--partitions", "3", "--dispatch-strategy", "reliable")
    df = spark.createDataFrame(
        [(f"user-{i % 7}", f"event-{i}", {"n": str(i)}) for i in range(60)],
        "key string, payload string, attributes map<string,string>",
    )
    df.write.format("danube").option("service_url", cluster.service_url).option("topic", topic).mode(
        "append"
    ).save()

    contents = topic_contents(cluster, topic)
    assert sum(len(v) for v in contents.values()) == 60
    for p, msgs in contents.items():
        n = int(p.rsplit("-part-", 1)[1])
        for key, payload, attrs in msgs:
            assert key is not None and partition_for_key(key, 3) == n, (key, p)
            assert payload == f"event-{attrs['n']}".encode()
    assert Counter(payload for msgs in contents.values() for _, payload, _ in msgs) == Counter(
        f"event-{i}".encode() for i in range(60)
    )


def test_a_dataframe_the_sink_cannot_write_is_refused(spark: Any, cluster: LocalCluster) -> None:
    df = spark.createDataFrame([(1, "x")], "id int, payload string")
    with pytest.raises(Exception, match="select them"):
        df.write.format("danube").option("service_url", cluster.service_url).option(
            "topic", "/default/never"
        ).mode("append").save()
