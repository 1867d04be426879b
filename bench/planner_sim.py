"""The rebalancing planner on a simulated cluster: wall time of both paths, imbalance before/after.

    .venv/bin/python bench/planner_sim.py                      # 500 brokers x 50,000 topics
    .venv/bin/python bench/planner_sim.py --brokers 50 --topics 5000 --history-samples 3
    .venv/bin/python bench/planner_sim.py --skip-spark         # plain Python only (no Java)
    # local[*] and a standalone cluster (master + 2 workers x 1 core on loopback) in one run:
    .venv/bin/python bench/planner_sim.py --brokers 100 --topics 10000 --history-samples 2 \
        --master 'local[*]' --master standalone

The cluster is synthetic: topic loads follow a Zipf law (the topic of rank r carries 1/r^skew
of the top topic's traffic), topics land on brokers with a bias towards the first ones (broker i
of n is picked with weight 1/(1 + 10 i/n): the first gets 11 times the last), so the cluster
starts skewed; each broker's CPU follows its traffic. With a steep Zipf law (skew >= 1) on many
topics the hottest topic alone outweighs a mean broker, and no plan can reach the target. Each broker has a current report (what ``/{cluster}/load/{id}`` holds) and
``--history-samples`` older ones (load history), as the planner reads them: current reports as
JSON lines (what it reads from etcd), history as objects in a local object store (a temp dir;
one object per broker), which the plain path reads on the driver and the Spark paths on the
executors (the driver lists the keys; ``danube_planner.history_fetch``), as the planner does
(``--also-driver-fetch`` adds a run the old way: the driver fetches and ships the lines).

Measured, in the same run: the plain-Python aggregation (the baseline, history read included),
the Spark DataFrame aggregation on each ``--master`` in turn (session start-up reported apart;
``standalone`` starts a master and two 1-core workers on loopback for the run,
``tests/support/spark_cluster.py``), and the greedy plan (the same code for all). Printed as a
table with each time as a ratio to the baseline. Run it at full size sparingly on a shared
machine: it keeps both cores busy for a minute or more per master.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from danube_common.load import LoadReport, TopicLoad  # noqa: E402
from danube_common.load_history import LoadHistoryReader, object_key  # noqa: E402
from danube_common.objstore import ObjectStoreConfig  # noqa: E402
from danube_common.objstore.local import LocalObjectStore  # noqa: E402
from danube_planner.aggregate import aggregate  # noqa: E402
from danube_planner.cycle import candidates  # noqa: E402
from danube_planner.model import AggregateParams, Aggregates, OwnerRow, PlannerInputs  # noqa: E402
from danube_planner.rebalance import PlanLimits, PlanResult, compute_plan  # noqa: E402

NOW = 1_700_000_000_000


def simulate(
    *, brokers: int, topics: int, skew: float, history: int, namespaces: int, seed: int
) -> PlannerInputs:
    rnd = random.Random(seed)
    ids = [f"broker-{i:04d}" for i in range(brokers)]
    bias = [1.0 / (1.0 + 10.0 * i / brokers) for i in range(brokers)]
    placed: dict[str, list[TopicLoad]] = {b: [] for b in ids}
    owners: dict[str, OwnerRow] = {}
    ranks = list(range(1, topics + 1))
    rnd.shuffle(ranks)
    for i, rank in enumerate(ranks):
        msgs = 50_000.0 / rank**skew
        name = f"/ns-{i % namespaces}/topic-{i}"
        b = rnd.choices(ids, bias)[0]
        placed[b].append(
            TopicLoad(
                name,
                msg_rate_in=msgs,
                byte_rate_in=msgs * 256,
                msg_rate_out=msgs * 2,
                byte_rate_out=msgs * 512,
                backlog=rnd.randint(0, 10_000),
                producers=1,
                consumers=2,
            )
        )
        owners[name] = OwnerRow(name, b, assigned_at_ms=NOW - 86_400_000, epoch=10_000 + i)
    current: list[str] = []
    older: list[str] = []
    for b, ts in placed.items():
        busy = sum(t.weight for t in ts)
        cores = 8
        cpu = min(float(cores), 0.2 + busy / 2e8)
        current.append(_line(b, NOW - 2000, ts, cpu, cores))
        for k in range(history):
            f = 0.8 + 0.4 * rnd.random()
            scaled = [
                TopicLoad(
                    t.topic,
                    msg_rate_in=t.msg_rate_in * f,
                    byte_rate_in=t.byte_rate_in * f,
                    msg_rate_out=t.msg_rate_out * f,
                    byte_rate_out=t.byte_rate_out * f,
                    backlog=t.backlog,
                )
                for t in ts
            ]
            older.append(_line(b, NOW - 5000 * (k + 2), scaled, cpu * f, cores))
    return PlannerInputs(
        now_ms=NOW,
        window_from_ms=NOW - 600_000,
        window_to_ms=NOW,
        current_lines=current,
        history_lines=older,
        owners=owners,
        broker_states=dict.fromkeys(ids, "active"),
    )


def _line(broker: str, at_ms: int, ts: list[TopicLoad], cpu: float, cores: int) -> str:
    r = LoadReport.build(
        broker,
        at_ms,
        ts,
        interval_s=5.0,
        cpu_usage=cpu,
        cpu_cores=cores,
        mem_rss_bytes=(2 << 30) + 4096 * len(ts),
        mem_total_bytes=64 << 30,
        max_topics=2000,
    )
    return json.dumps(r.to_json())


@dataclass
class Row:
    path: str
    aggregate_s: float
    plan_s: float
    result: PlanResult

    @property
    def total_s(self) -> float:
        return self.aggregate_s + self.plan_s


def plan_for(agg: Aggregates, inp: PlannerInputs, limits: PlanLimits) -> tuple[PlanResult, float]:
    t0 = time.perf_counter()
    result = compute_plan(agg.active_scores(), candidates(agg, inp.owners), now_ms=inp.now_ms, limits=limits)
    return result, time.perf_counter() - t0


async def write_history(root: Path, lines: list[str]) -> tuple[list[str], int]:
    """One object per broker holding its history lines (as a writer's batch would); return the
    keys the planner would list for the window, and the bytes written."""
    per_broker: dict[str, list[tuple[int, str]]] = {}
    for text in lines:
        doc = json.loads(text)
        per_broker.setdefault(doc["broker_id"], []).append((int(doc["at_ms"]), text))
    store = await LocalObjectStore.open(root)
    size = 0
    try:
        for broker, rows in per_broker.items():
            rows.sort()
            data = "".join(text + "\n" for _, text in rows).encode()
            await store.put(object_key(broker, rows[0][0]), data)
            size += len(data)
        keys = await LoadHistoryReader(store).list_window(NOW - 600_000, NOW)
    finally:
        await store.aclose()
    return keys, size


async def read_history(root: Path) -> tuple[list[str], list[str]]:
    """What the planner's driver does without executors: list and fetch every line."""
    store = LocalObjectStore(root)
    try:
        return await LoadHistoryReader(store).read_window_lines(NOW - 600_000, NOW)
    finally:
        await store.aclose()


@contextlib.contextmanager
def spark_master(master: str, *, shuffle_partitions: int, executor_memory: str) -> Iterator[tuple[Any, str]]:
    """A SparkSession on ``master`` (``standalone``: a loopback cluster started for the block)."""
    from danube_planner.config import SparkSettings
    from danube_planner.sparkenv import create_session

    with contextlib.ExitStack() as stack:
        conf: dict[str, str] = {}
        label = master
        if master == "standalone":
            from tests.support.spark_cluster import standalone_cluster

            t0 = time.perf_counter()
            cluster = stack.enter_context(standalone_cluster(workers=2, cores_per_worker=1))
            print(f"standalone cluster (master + 2 workers x 1 core) up in {time.perf_counter() - t0:.1f} s")
            master, conf = cluster.master_url, cluster.app_conf(executor_memory=executor_memory)
        t0 = time.perf_counter()
        spark = create_session(SparkSettings(master=master, shuffle_partitions=shuffle_partitions, conf=conf))
        print(f"Spark session start ({master}): {time.perf_counter() - t0:.1f} s")
        try:
            yield spark, label
        finally:
            spark.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--brokers", type=int, default=500, help="simulated brokers (default 500)")
    p.add_argument("--topics", type=int, default=50_000, help="simulated topics (default 50,000)")
    p.add_argument("--skew", type=float, default=0.6, help="Zipf exponent of topic loads (default 0.6)")
    p.add_argument("--history-samples", type=int, default=0, help="older reports per broker (default 0)")
    p.add_argument(
        "--namespaces", type=int, default=20, help="namespaces the topics spread over (default 20)"
    )
    p.add_argument("--max-moves", type=int, default=10_000, help="move budget of the plan (default 10,000)")
    p.add_argument("--target-cv", type=float, default=0.15, help="imbalance to stop at (default 0.15)")
    p.add_argument(
        "--master",
        action="append",
        help="Spark master to measure, repeatable (in order): local[*], local[N], spark://host:port, or "
        "standalone (a master + 2 one-core workers started on loopback for the run); default local[*]",
    )
    p.add_argument(
        "--shuffle-partitions", type=int, default=4, help="spark.sql.shuffle.partitions (default 4)"
    )
    p.add_argument(
        "--executor-memory", default="1g", help="spark.executor.memory on the standalone cluster (default 1g)"
    )
    p.add_argument(
        "--also-driver-fetch",
        action="store_true",
        help="per master, one more warm run the old way: the driver fetches the history and ships the lines",
    )
    p.add_argument("--skip-spark", action="store_true", help="plain Python only")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    masters: list[str] = args.master or ["local[*]"]

    t0 = time.perf_counter()
    inp = simulate(
        brokers=args.brokers,
        topics=args.topics,
        skew=args.skew,
        history=args.history_samples,
        namespaces=args.namespaces,
        seed=args.seed,
    )
    tmpdir = tempfile.TemporaryDirectory(prefix="planner-sim-")  # removed at exit, even on errors
    tmp = Path(tmpdir.name)
    keys, size = asyncio.run(write_history(tmp / "objects", list(inp.history_lines)))
    lines = len(inp.current_lines) + len(inp.history_lines)
    print(
        f"simulated {args.brokers} brokers x {args.topics} topics ({lines} report lines, "
        f"{sum(map(len, inp.current_lines)) / 1e6:.1f} MB current, {len(keys)} history objects "
        f"{size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s"
    )
    params = AggregateParams()
    limits = PlanLimits(max_moves=args.max_moves, target_cv=args.target_cv, min_age_ms=0)
    rows: list[Row] = []

    t0 = time.perf_counter()
    _, history_lines = asyncio.run(read_history(tmp / "objects"))
    plain = aggregate(dataclasses.replace(inp, history_lines=history_lines), params)
    agg_s = time.perf_counter() - t0
    result, plan_s = plan_for(plain, inp, limits)
    rows.append(Row("plain Python", agg_s, plan_s, result))

    if not args.skip_spark:
        from danube_planner.frames import aggregate_spark
        from danube_planner.history_fetch import HistorySource

        source = HistorySource(ObjectStoreConfig(local_dir=str(tmp / "objects")))
        on_executors = dataclasses.replace(inp, history_lines=(), history_keys=keys)
        for master in masters:
            with spark_master(
                master, shuffle_partitions=args.shuffle_partitions, executor_memory=args.executor_memory
            ) as (spark, label):
                for run in ("1st run", "warm"):
                    t0 = time.perf_counter()
                    frames = aggregate_spark(spark, on_executors, params, source)
                    agg_s = time.perf_counter() - t0
                    result, plan_s = plan_for(frames, inp, limits)
                    rows.append(Row(f"{label} ({run})", agg_s, plan_s, result))
                if args.also_driver_fetch:
                    t0 = time.perf_counter()
                    _, shipped = asyncio.run(read_history(tmp / "objects"))
                    frames = aggregate_spark(spark, dataclasses.replace(inp, history_lines=shipped), params)
                    agg_s = time.perf_counter() - t0
                    result, plan_s = plan_for(frames, inp, limits)
                    rows.append(Row(f"{label} (warm, driver fetch)", agg_s, plan_s, result))
                diff = max(abs(a.score - b.score) for a, b in zip(plain.brokers, frames.brokers, strict=True))
                print(
                    f"largest broker score difference {label} vs plain Python: {diff:.2e} "
                    f"(CV {frames.cv:.6f} vs {plain.cv:.6f})"
                )

    base = rows[0].total_s
    width = max(16, *(len(r.path) for r in rows))
    print()
    print(
        f"{'path':<{width}} {'aggregate s':>12} {'plan s':>8} {'total s':>8} {'x baseline':>11} {'CV before':>10} {'CV after':>9} {'moves':>6}  stopped"
    )
    for r in rows:
        print(
            f"{r.path:<{width}} {r.aggregate_s:>12.2f} {r.plan_s:>8.2f} {r.total_s:>8.2f} {r.total_s / base:>11.2f} "
            f"{r.result.cv_before:>10.3f} {r.result.cv_after:>9.3f} {len(r.result.moves):>6}  {r.result.stopped}"
        )
    moved = rows[0].result.moves
    if moved:
        share = math.fsum(m.load for m in moved) / math.fsum(plain.active_scores().values())
        print(
            f"\nthe plan moves {len(moved)} of {args.topics} topics, {100 * share:.1f}% of the cluster's load"
        )
    same = all([m.topic for m in r.result.moves] == [m.topic for m in moved] for r in rows)
    print(f"every path planned the same moves: {same}")
    tmpdir.cleanup()


if __name__ == "__main__":
    main()
