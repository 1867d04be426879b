"""The planner on a real Spark standalone cluster (a master and two workers on loopback,
``tests/support/spark_cluster.py``): its executors fetch the load history from the object store
themselves, and the cycle computes what the plain-Python engine computes on the same history: the
same report (to 1e-9) and the same plan (``test_planner_spark.py`` checks ``local[2]`` against the
plain-Python engine the same way). On the same cluster session, the connectors run on the
executors: ``danube-history`` reads a topic's uploaded segments, and a streaming query
(availableNow, micro-batches of at most 10 messages) reads a topic of a real local Danube
cluster with the ``danube`` source and writes it to another topic with the ``danube`` sink: the
output topic holds each produced message exactly once.

The history is a local object-store directory (one machine: the executors see the same path).
The shared local session is stopped before the cluster's (one SparkContext per process); the
cluster's session is made active and default on each thread that uses it, and cleared with it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from danube_common.keys import Keys
from danube_common.load_history import LoadHistoryReader, LoadHistoryWriter
from danube_common.metadata.memory import MemoryStore
from danube_common.objstore import ObjectStoreConfig
from danube_common.objstore.local import LocalObjectStore
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.storage import object_key
from danube_common.topic_name import TopicName
from danube_local.cluster import LocalCluster
from danube_planner.app import SparkEngine
from danube_planner.config import PlannerConfig, SparkSettings
from danube_planner.cycle import CycleResult, Engine, Planner, PythonEngine
from danube_planner.model import Aggregates
from tests.spark.test_stream import QUERY_TIMEOUT_S, admin, produce, topic_contents
from tests.support import spark_session as ss
from tests.support import unique
from tests.support.segments import segment_object
from tests.support.spark_cluster import StandaloneCluster
from tests.unit.planner.helpers import NOW, Synthetic, zipf_cluster
from tests.unit.planner.test_cycle import publish

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(300)]

BUDGET = 40
APP = "danube-planner-standalone-test"


@dataclass
class Cycles:
    python: CycleResult
    standalone: CycleResult
    history_objects: int
    #: The application as the master listed it while it ran.
    app: dict[str, object]
    executors: int
    #: (offset, payload) of every row ``danube-history`` read on the cluster, and its partitions.
    history_rows: list[tuple[int, bytes]]
    history_partitions: int
    #: The streaming query: the payloads produced to its input topic, those its output topic
    #: holds afterwards (in offset order), and the input rows of each micro-batch.
    streamed_in: list[bytes]
    streamed_out: list[bytes]
    stream_batches: list[int]


def config(objects: Path, settings: SparkSettings | None = None) -> PlannerConfig:
    return PlannerConfig(
        engine="python" if settings is None else "spark",
        leader_endpoints=[],
        max_moves_per_cycle=BUDGET,
        object_store=ObjectStoreConfig(local_dir=str(objects)),
        history_read_concurrency=4,
        **({} if settings is None else {"spark": settings}),
    )


async def one_cycle(
    cfg: PlannerConfig, syn: Synthetic, objects: LocalObjectStore, engine: Engine
) -> CycleResult:
    """A cycle on a fresh in-memory etcd holding ``syn`` (so no earlier plan blocks it)."""
    store = MemoryStore()
    keys = Keys("standalone-test")
    await publish(store, keys, syn)
    try:
        return await Planner(cfg, store, keys, LoadHistoryReader(objects), engine).cycle(None, now=NOW)
    finally:
        await store.aclose()


@pytest.fixture(scope="module")
def cycles(
    no_local_spark: None,
    spark_standalone: StandaloneCluster,
    danube_cluster: LocalCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Cycles:
    return asyncio.run(
        run_cycles(spark_standalone, danube_cluster, tmp_path_factory.mktemp("history") / "objects")
    )


async def run_cycles(cluster: StandaloneCluster, danube: LocalCluster, root: Path) -> Cycles:
    # 8 brokers x 200 topics, skewed; 3 history reports per broker, batched 2 per object.
    syn = zipf_cluster(brokers=8, topics=200, skew=1.0, history_samples=3, max_topics=40, namespaces=4)
    objects = await LocalObjectStore.open(root)
    writer = LoadHistoryWriter(objects, max_batch=2)
    for r in syn.history:
        writer.add(r)
    await writer.aclose()
    listed = await LoadHistoryReader(objects).list_window(NOW - 600_000, NOW)

    python = await one_cycle(config(root), syn, objects, PythonEngine())

    cluster_settings = SparkSettings(
        master=cluster.master_url,
        app_name=APP,
        shuffle_partitions=2,
        conf=cluster.app_conf(),
    )
    t0 = time.monotonic()
    cluster_engine = await asyncio.to_thread(SparkEngine, config(root, cluster_settings))
    try:
        standalone = await one_cycle(config(root, cluster_settings), syn, objects, cluster_engine)
        apps = [a for a in cluster.status().get("activeapps", []) if a.get("name") == APP]
        executors = cluster_engine.session.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        rows, parts = await asyncio.to_thread(read_history_on, cluster_engine.session, root.parent / "wal")
        t1 = time.monotonic()
        streamed = await asyncio.to_thread(stream_on, cluster_engine.session, danube, root.parent / "ckpt")
        print(f"standalone: topic -> topic stream {time.monotonic() - t1:.1f} s")
    finally:
        await asyncio.to_thread(close_session, cluster_engine)
        ss.release()  # this thread's view too
    print(f"standalone: session and cycle {time.monotonic() - t0:.1f} s, {standalone.timings_ms}")
    await objects.aclose()
    return Cycles(
        python, standalone, len(listed), apps[0] if len(apps) == 1 else {}, executors, rows, parts, *streamed
    )


def close_session(engine: SparkEngine) -> None:
    """Stop the cluster's session; neither it nor a stopped one stays active or default."""
    session = engine.session
    engine.close()
    ss.release(session)


def stream_on(
    session: Any, danube: LocalCluster, checkpoint: Path
) -> tuple[list[bytes], list[bytes], list[int]]:
    """A topic of 2 partitions -> ``danube`` source -> ``danube`` sink -> a topic, run to the end
    (availableNow) in micro-batches of at most 10 messages on ``session``'s executors."""
    from danube_spark import register

    ss.activate(session)  # a streaming write looks its sink up in this thread's active session
    register(session)
    src, dst = f"/default/{unique('sa-src')}", f"/default/{unique('sa-dst')}"
    admin(danube, "topics", "create", src, "--partitions", "2", "--dispatch-strategy", "reliable")
    given = [(f"k{i % 3}", b"s%d" % i) for i in range(30)]
    produce(danube, src, given)
    query = (
        session.readStream.format("danube")
        .option("service_url", danube.service_url)
        .option("topics", src)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", 10)
        .load()
        .select("payload", "key")
        .writeStream.format("danube")
        .option("service_url", danube.service_url)
        .option("topic", dst)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the streaming query did not finish"
    assert query.exception() is None, query.exception()
    (out,) = topic_contents(danube, dst).values()
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
    return [p for _, p in given], [p for _, p, _ in out], batches


#: The topic the history reader reads on the cluster: 3 uploaded segments of 4 messages each.
HISTORY_TOPIC = TopicName("default", "standalone-history")


def read_history_on(session: Any, root: Path) -> tuple[list[tuple[int, bytes]], int]:
    """Write 3 segment objects of ``HISTORY_TOPIC`` to a local object store at ``root`` and read
    them with ``danube-history`` on ``session``'s executors, one object per input partition."""
    from danube_spark import register

    async def put() -> None:
        async with await LocalObjectStore.open(root) as store:
            for start in (0, 4, 8):
                recs = [
                    pb.StreamMessage(payload=b"m%d" % i).SerializeToString() for i in range(start, start + 4)
                ]
                data = segment_object(start, recs, [1_000 + i for i in range(start, start + 4)])
                await store.put(object_key(HISTORY_TOPIC, start, start + 4, incarnation=1, revision=1), data)

    asyncio.run(put())
    register(session)
    df = (
        session.read.format("danube-history")
        .option("topic", str(HISTORY_TOPIC))
        .option("object_store.local_dir", str(root))
        .option("max_objects_per_partition", "1")
        .load()
    )
    rows = sorted((r.offset, bytes(r.payload)) for r in df.select("offset", "payload").collect())
    return rows, df.rdd.getNumPartitions()


def assert_same_report(got: Aggregates, want: Aggregates) -> None:
    assert got.samples == want.samples
    assert got.cv == pytest.approx(want.cv, rel=1e-9)
    assert got.means == pytest.approx(want.means, rel=1e-9)
    assert [(b.broker_id, b.state, b.topics) for b in got.brokers] == [
        (b.broker_id, b.state, b.topics) for b in want.brokers
    ]
    for g, w in zip(got.brokers, want.brokers, strict=True):
        assert g.score == pytest.approx(w.score, rel=1e-9), g.broker_id
        assert g.cpu == pytest.approx(w.cpu, rel=1e-9), g.broker_id
    assert [(t.topic, t.broker_id, t.estimated) for t in got.topics] == [
        (t.topic, t.broker_id, t.estimated) for t in want.topics
    ]
    for g, w in zip(got.topics, want.topics, strict=True):
        assert g.load == pytest.approx(w.load, rel=1e-9), g.topic
        assert g.msg_rate_in == pytest.approx(w.msg_rate_in, rel=1e-9), g.topic


def test_the_cluster_ran_the_cycle_on_its_executors(
    cycles: Cycles, spark_standalone: StandaloneCluster
) -> None:
    assert cycles.app, "the master did not list the planner's application while it ran"
    assert cycles.app["cores"] == spark_standalone.total_cores == 2
    assert cycles.executors == 2
    report = cycles.standalone.report
    assert report["planner"]["engine"] == "spark"
    assert report["window"]["history_objects"] == cycles.history_objects == 8 * 2
    assert report["window"]["samples"] == 8 * 4  # 3 history reports + the current one per broker


def test_the_history_reader_reads_uploaded_segments_on_the_cluster(cycles: Cycles) -> None:
    assert cycles.history_partitions == 3  # one task per object, run by the workers' executors
    assert cycles.history_rows == [(i, b"m%d" % i) for i in range(12)]


def test_a_stream_from_topic_to_topic_runs_on_the_cluster_exactly_once(cycles: Cycles) -> None:
    assert len(cycles.streamed_in) == 30
    assert Counter(cycles.streamed_out) == Counter(cycles.streamed_in)  # nothing lost
    assert len(set(cycles.streamed_out)) == len(cycles.streamed_out)  # nothing twice
    assert cycles.stream_batches == [10, 10, 10]  # 30 messages, at most 10 per micro-batch


def test_standalone_and_python_compute_the_same_report(cycles: Cycles) -> None:
    assert cycles.python.aggregates.samples == 8 * 4
    assert_same_report(cycles.standalone.aggregates, cycles.python.aggregates)


def test_standalone_and_python_make_the_same_plan(cycles: Cycles) -> None:
    plans = [c.plan for c in (cycles.python, cycles.standalone)]
    assert all(p is not None for p in plans)
    moves = [[(m["topic"], m["from"], m["to"]) for m in p["moves"]] for p in plans if p is not None]
    assert moves[0] and moves[0] == moves[1]
    before = [p["imbalance_before"] for p in plans if p is not None]
    after = [p["imbalance_after"] for p in plans if p is not None]
    assert before == pytest.approx([before[0]] * 2, rel=1e-9)
    assert after == pytest.approx([after[0]] * 2, rel=1e-9)
    assert after[0] < before[0]
