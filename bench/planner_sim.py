"""The rebalancing planner on a simulated cluster: wall time of both paths, imbalance before/after.

    .venv/bin/python bench/planner_sim.py                      # 500 brokers x 50,000 topics
    .venv/bin/python bench/planner_sim.py --brokers 50 --topics 5000 --history-samples 3
    .venv/bin/python bench/planner_sim.py --skip-spark         # plain Python only (no Java)

The cluster is synthetic: topic loads follow a Zipf law (the topic of rank r carries 1/r^skew
of the top topic's traffic), topics land on brokers with a bias towards the first ones (broker i
of n is picked with weight 1/(1 + 10 i/n): the first gets 11 times the last), so the cluster
starts skewed; each broker's CPU follows its traffic. With a steep Zipf law (skew >= 1) on many
topics the hottest topic alone outweighs a mean broker, and no plan can reach the target. Each broker has a current report (what ``/{cluster}/load/{id}`` holds) and
``--history-samples`` older ones (load history), all as JSON lines, as the planner reads them.

Measured, in the same run: the plain-Python aggregation (the baseline), the Spark DataFrame
aggregation on a ``--master`` session (session start-up reported apart), and the greedy plan
(the same code for both). Printed as a table with each time as a ratio to the baseline. Run it
at full size sparingly on a shared machine: it keeps both cores busy for a minute or more.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import dataclass

from danube_common.load import LoadReport, TopicLoad
from danube_planner.aggregate import aggregate
from danube_planner.cycle import candidates
from danube_planner.model import AggregateParams, Aggregates, OwnerRow, PlannerInputs
from danube_planner.rebalance import PlanLimits, PlanResult, compute_plan

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
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument(
        "--shuffle-partitions", type=int, default=4, help="spark.sql.shuffle.partitions (default 4)"
    )
    p.add_argument("--skip-spark", action="store_true", help="plain Python only")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    t0 = time.perf_counter()
    inp = simulate(
        brokers=args.brokers,
        topics=args.topics,
        skew=args.skew,
        history=args.history_samples,
        namespaces=args.namespaces,
        seed=args.seed,
    )
    lines = len(inp.current_lines) + len(inp.history_lines)
    print(
        f"simulated {args.brokers} brokers x {args.topics} topics ({lines} report lines, "
        f"{sum(map(len, inp.current_lines)) / 1e6:.1f} MB current) in {time.perf_counter() - t0:.1f} s"
    )
    params = AggregateParams()
    limits = PlanLimits(max_moves=args.max_moves, target_cv=args.target_cv, min_age_ms=0)
    rows: list[Row] = []

    t0 = time.perf_counter()
    plain = aggregate(inp, params)
    agg_s = time.perf_counter() - t0
    result, plan_s = plan_for(plain, inp, limits)
    rows.append(Row("plain Python", agg_s, plan_s, result))

    if not args.skip_spark:
        from danube_planner.config import SparkSettings
        from danube_planner.frames import aggregate_spark
        from danube_planner.sparkenv import create_session

        t0 = time.perf_counter()
        spark = create_session(SparkSettings(master=args.master, shuffle_partitions=args.shuffle_partitions))
        print(f"Spark session start ({args.master}): {time.perf_counter() - t0:.1f} s")
        try:
            for label in ("Spark (1st run)", "Spark (warm)"):
                t0 = time.perf_counter()
                frames = aggregate_spark(spark, inp, params)
                agg_s = time.perf_counter() - t0
                result, plan_s = plan_for(frames, inp, limits)
                rows.append(Row(label, agg_s, plan_s, result))
            diff = max(abs(a.score - b.score) for a, b in zip(plain.brokers, frames.brokers, strict=True))
            print(
                f"largest broker score difference Spark vs plain Python: {diff:.2e} (CV {frames.cv:.6f} vs {plain.cv:.6f})"
            )
        finally:
            spark.stop()

    base = rows[0].total_s
    print()
    print(
        f"{'path':<16} {'aggregate s':>12} {'plan s':>8} {'total s':>8} {'x baseline':>11} {'CV before':>10} {'CV after':>9} {'moves':>6}  stopped"
    )
    for r in rows:
        print(
            f"{r.path:<16} {r.aggregate_s:>12.2f} {r.plan_s:>8.2f} {r.total_s:>8.2f} {r.total_s / base:>11.2f} "
            f"{r.result.cv_before:>10.3f} {r.result.cv_after:>9.3f} {len(r.result.moves):>6}  {r.result.stopped}"
        )
    moved = rows[0].result.moves
    if moved:
        share = math.fsum(m.load for m in moved) / math.fsum(plain.active_scores().values())
        print(
            f"\nthe plan moves {len(moved)} of {args.topics} topics, {100 * share:.1f}% of the cluster's load"
        )


if __name__ == "__main__":
    main()
