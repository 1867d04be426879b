"""The DataFrame path on a local SparkSession: it computes what the plain-Python path computes,
the shared score table's scores, and a plan that evens out a skewed cluster within the move
budget; and one whole planner cycle on the Spark engine.

One Spark engine (the planner's own ``SparkEngine``: local[2], loopback, UI off) is shared by the
module, on the Spark tests' shared local session; each step's wall time is printed (run with -s
to see them).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import pytest
from pyspark.sql import functions as F

from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_planner import frames as fr
from danube_planner.aggregate import aggregate
from danube_planner.app import SparkEngine
from danube_planner.config import PlannerConfig, SparkSettings
from danube_planner.cycle import Planner, candidates
from danube_planner.frames import aggregate_spark
from danube_planner.model import AggregateParams, Aggregates, PlannerInputs
from danube_planner.rebalance import PlanLimits, compute_plan
from tests.support.score_table import CASES
from tests.support.tracing import capture_spans, children, one
from tests.unit.planner.helpers import NOW, Synthetic, zipf_cluster
from tests.unit.planner.test_aggregate import owned
from tests.unit.planner.test_cycle import publish

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(180)]

PARAMS = AggregateParams(hot_topics=10, max_namespaces=100)
BUDGET = 60
SETTINGS = SparkSettings(master="local[2]", shuffle_partitions=2)


@pytest.fixture(scope="module", autouse=True)
def engine(spark: Any) -> SparkEngine:
    """The planner's engine on the shared local session (tests/spark/conftest.py): its
    ``getOrCreate`` hands that session back, so no second one is started. The session outlives
    the module, so the engine is not closed (that would stop it). Autouse: every test runs on
    the session as the planner configures it."""
    t0 = time.monotonic()
    made = SparkEngine(PlannerConfig(engine="spark", leader_endpoints=[], spark=SETTINGS))
    print(f"\nSpark engine on the shared session: {time.monotonic() - t0:.1f} s")
    assert made.session is spark
    spark.sparkContext.setLogLevel("ERROR")  # the engine sets WARN
    return made


@pytest.fixture(scope="module")
def skewed() -> Synthetic:
    # 10 brokers, 300 topics with Zipf loads (rank r: 1/r^1.1), early brokers get more topics;
    # reports list 25 topics at most (the rest are estimated), two history samples each.
    return zipf_cluster(brokers=10, topics=300, skew=1.1, history_samples=2, max_topics=25, namespaces=4)


@pytest.fixture(scope="module")
def both(spark: Any, skewed: Synthetic) -> tuple[Aggregates, Aggregates, PlannerInputs]:
    inp = skewed.inputs()
    t0 = time.monotonic()
    plain = aggregate(inp, PARAMS)
    t1 = time.monotonic()
    frames = aggregate_spark(spark, inp, PARAMS)
    t2 = time.monotonic()
    print(f"aggregate: plain Python {1000 * (t1 - t0):.0f} ms, Spark {1000 * (t2 - t1):.0f} ms")
    return plain, frames, inp


def test_session_is_local_and_quiet(spark: Any) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.master") == "local[2]"
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.driver.host") == "127.0.0.1"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"


def test_dataframe_path_computes_the_plain_python_report(both: tuple[Aggregates, Aggregates, Any]) -> None:
    plain, frames, _ = both
    assert frames.samples == plain.samples == 30
    assert frames.cv == pytest.approx(plain.cv, rel=1e-9)
    assert frames.means == pytest.approx(plain.means, rel=1e-9)
    assert [b.broker_id for b in frames.brokers] == [b.broker_id for b in plain.brokers]
    for f, p in zip(frames.brokers, plain.brokers, strict=True):
        assert (f.state, f.topics) == (p.state, p.topics)
        for name in (
            "msg_rate_in",
            "msg_rate_out",
            "byte_rate_in",
            "byte_rate_out",
            "backlog",
            "cpu",
            "memory",
            "score",
        ):
            assert getattr(f, name) == pytest.approx(getattr(p, name), rel=1e-9, abs=1e-12), (
                f.broker_id,
                name,
            )
    assert len(frames.topics) == len(plain.topics) == 300
    assert sum(t.estimated for t in plain.topics) > 0  # truncated reports exercised the estimate
    for f, p in zip(frames.topics, plain.topics, strict=True):
        assert (f.topic, f.namespace, f.broker_id, f.estimated) == (
            p.topic,
            p.namespace,
            p.broker_id,
            p.estimated,
        )
        assert f.load == pytest.approx(p.load, rel=1e-9)
        assert f.msg_rate_in == pytest.approx(p.msg_rate_in, rel=1e-9)
        assert f.backlog == pytest.approx(p.backlog, rel=1e-9)
    assert [t.topic for t in frames.hot_topics] == [t.topic for t in plain.hot_topics]


def test_dataframe_scores_match_the_shared_table(spark: Any) -> None:
    """Every case of the table at once: the cases' brokers side by side in one input (ids and
    topics prefixed with the case's index, so nothing is shared), through the DataFrame steps
    that make the broker table (the chain of ``aggregate_spark``, whose own wiring the test
    above holds to the plain-Python report), then each case's means and scores with its
    weights, collected in one job. A per-broker step never mixes brokers, so each case gets
    what it would get alone."""
    syn = Synthetic()
    for i, case in enumerate(CASES):
        for b in case.brokers:
            mine = dataclasses.replace(b, broker_id=f"{i}-{b.broker_id}")
            syn.states[mine.broker_id] = "active"
            syn.current.append(mine.report(NOW))
            owned(syn, mine.broker_id, *mine.topic_names())
    inp = syn.inputs()
    parsed = fr.parse_reports(fr.lines_frame(spark, inp.current_lines, inp.history_lines))
    current = parsed.filter(F.col("current")).drop("current")
    samples = fr.window_samples(parsed, inp.window_from_ms, inp.window_to_ms)
    current_rows = fr.topic_rows(current)
    topics = fr.topic_table(
        fr.owners_frame(spark, inp.owners),
        fr.listed_by(current_rows),
        fr.topic_stats(fr.topic_rows(samples)),
        fr.remainders(current, current_rows),
    )
    brokers = fr.broker_table(topics, samples, fr.states_frame(spark, inp.broker_states), current).cache()
    try:
        scored = None
        for i, case in enumerate(CASES):
            own = brokers.filter(F.col("broker_id").startswith(f"{i}-"))
            part = fr.with_scores(own, fr.score_means(own), case.weights).select("broker_id", "score")
            scored = part if scored is None else scored.unionByName(part)
        assert scored is not None
        rows = scored.collect()
    finally:
        brokers.unpersist()
    got: dict[int, dict[str, float]] = {}
    for r in rows:
        i, broker = r["broker_id"].split("-", 1)
        got.setdefault(int(i), {})[broker] = float(r["score"])
    wrong = [
        f"{case.name}: {got.get(i)} != {case.expected}"
        for i, case in enumerate(CASES)
        if got.get(i) != pytest.approx(case.expected)
    ]
    assert not wrong, wrong


def test_namespace_breakdown(both: tuple[Aggregates, Aggregates, Any]) -> None:
    plain, frames, _ = both
    assert [n.namespace for n in frames.namespaces] == [n.namespace for n in plain.namespaces]
    assert {n.namespace for n in frames.namespaces} == {"ns0", "ns1", "ns2", "ns3"}
    for f, p in zip(frames.namespaces, plain.namespaces, strict=True):
        assert (f.topics, f.brokers) == (p.topics, p.brokers)
        assert f.load == pytest.approx(p.load, rel=1e-9)
        assert f.byte_rate_out == pytest.approx(p.byte_rate_out, rel=1e-9)
        mine = [t for t in frames.topics if t.namespace == f.namespace]
        assert f.topics == len(mine) == 75
        assert f.msg_rate_in == pytest.approx(math.fsum(t.msg_rate_in for t in mine), rel=1e-9)
        assert f.brokers == len({t.broker_id for t in mine})
    assert math.fsum(n.load for n in frames.namespaces) == pytest.approx(
        math.fsum(b.score for b in frames.brokers)
    )


def test_plan_brings_the_imbalance_under_target_within_the_budget(
    both: tuple[Aggregates, Aggregates, Any], skewed: Synthetic
) -> None:
    plain, frames, _ = both
    limits = PlanLimits(max_moves=BUDGET, target_cv=0.15)
    t0 = time.monotonic()
    plan = compute_plan(frames.active_scores(), candidates(frames, skewed.owners), now_ms=NOW, limits=limits)
    print(
        f"plan: CV {plan.cv_before:.3f} -> {plan.cv_after:.3f} with {len(plan.moves)} moves "
        f"in {1000 * (time.monotonic() - t0):.0f} ms"
    )
    assert plan.cv_before > 0.5  # the cluster really is skewed
    assert plan.cv_after <= 0.15 and plan.stopped == "target_reached"
    assert 0 < len(plan.moves) <= BUDGET
    same = compute_plan(plain.active_scores(), candidates(plain, skewed.owners), now_ms=NOW, limits=limits)
    assert [m.topic for m in same.moves] == [m.topic for m in plan.moves]  # same input, same plan


async def test_one_cycle_on_spark(engine: SparkEngine, skewed: Synthetic) -> None:
    store = MemoryStore()
    keys = Keys("spark-test")
    await publish(store, keys, skewed)

    cfg = PlannerConfig(engine="spark", leader_endpoints=[], max_moves_per_cycle=BUDGET, spark=SETTINGS)
    t0 = time.monotonic()
    with capture_spans() as exporter:
        result = await Planner(cfg, store, keys, None, engine).cycle(None, now=NOW)
    print(
        f"one cycle (Spark engine, 10 brokers x 300 topics): {1000 * (time.monotonic() - t0):.0f} ms {result.timings_ms}"
    )
    assert result.written and result.plan is not None
    assert result.report["planner"]["engine"] == "spark"
    assert result.plan["imbalance_after"] <= 0.15 < result.plan["imbalance_before"]
    assert await store.get_json(keys.rebalance_plan(result.plan_id)) == result.plan  # type: ignore[arg-type]
    await store.aclose()
    # The trace: each Spark action (a job) is a span under the cycle's "compute report".
    spans = exporter.get_finished_spans()
    compute = one(spans, "compute report")
    assert one(spans, "planner cycle").attributes["danube.plan.id"] == result.plan_id  # type: ignore[index]
    assert [s.name for s in children(spans, compute)] == [
        "spark score means",
        "spark collect brokers",
        "spark collect topics",
        "spark collect namespaces",
        "spark collect hot topics",
        "spark imbalance",
        "spark count samples",
    ]


def test_the_drivers_lines_travel_in_chunks(
    spark: Any, skewed: Synthetic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``TASK_BYTES`` the driver's lines go one chunk per task (here: a few KiB each)."""
    inp = skewed.inputs()
    monkeypatch.setattr(fr, "TASK_BYTES", 4096)
    want = [(line, True) for line in inp.current_lines] + [(line, False) for line in inp.history_lines]
    assert len(fr.pack(want, 4096)) > 5
    frame = fr.lines_frame(spark, inp.current_lines, inp.history_lines)
    assert frame.rdd.getNumPartitions() == len(fr.pack(want, 4096))
    assert sorted((r["line"], r["current"]) for r in frame.collect()) == sorted(want)
