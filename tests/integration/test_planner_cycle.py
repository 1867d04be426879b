"""The planner against a real etcd: one cycle as the CLI runs it (``--once`` in a subprocess, with
the Python engine: tests/spark runs a cycle on the Spark engine and checks it computes the same),
cycles fenced through the real leader service (in-process), on-demand requests, and the CLI's
errors when Java cannot be found.

The cluster is written as brokers and the load manager would write it: registrations, load
reports (``LoadReport.to_json()`` at ``Keys.load(id)``), owner keys with ``assigned_at_ms``; its
history goes to a local object store directory through ``LoadHistoryWriter``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.load_history import LoadHistoryWriter
from danube_common.metadata.etcd import EtcdStore
from danube_common.objstore.local import LocalObjectStore
from danube_common.records import BrokerRecord
from danube_common.topic_name import TopicName
from danube_leader.app import running as leader_running
from danube_leader.config import LeaderConfig
from danube_planner.aggregate import aggregate
from danube_planner.app import run as planner_run
from danube_planner.config import PlannerConfig
from danube_planner.cycle import candidates
from danube_planner.rebalance import PlanLimits, compute_plan
from tests.support import wait_until
from tests.unit.planner.helpers import Synthetic, zipf_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

REPORT_KEYS = {
    "version", "generated_at_ms", "window", "planner", "score", "imbalance", "totals",
    "brokers", "namespaces", "hot_topics", "plan",
}  # fmt: skip
PLAN_KEYS = {
    "version", "plan_id", "status", "created_at_ms", "expires_at_ms", "planner", "requests",
    "imbalance_before", "imbalance_after", "target_imbalance", "stopped", "limits", "excluded", "moves",
}  # fmt: skip
MOVE_KEYS = {"topic", "from", "to", "load", "epoch", "status", "reason"}


def now_ms() -> int:
    return int(time.time() * 1000)


async def publish(store: EtcdStore, keys: Keys, syn: Synthetic) -> None:
    for b in syn.states:
        await store.put(keys.broker(b), BrokerRecord(b, f"{b}:1", f"http://{b}:1").to_json())
    for r in syn.current:
        await store.put(keys.load(r.broker_id), r.to_json())
    for o in syn.owners.values():
        await store.put(
            keys.owner(TopicName.parse(o.topic)),
            {"broker_id": o.broker_id, "assigned_at_ms": o.assigned_at_ms},
        )


def first_move(syn: Synthetic, limits: PlanLimits) -> str:
    """The topic the planner would move first (to pin it)."""
    agg = aggregate(syn.inputs())
    plan = compute_plan(agg.active_scores(), candidates(agg, syn.owners), now_ms=syn_now(syn), limits=limits)
    assert plan.moves
    return plan.moves[0].topic


def syn_now(syn: Synthetic) -> int:
    return max(r.at_ms for r in syn.current) + 1000


def fresh(seed: int, brokers: int = 6, topics: int = 90, history: int = 0) -> Synthetic:
    """A skewed cluster stamped with the real clock (the planner runs with it)."""
    syn = zipf_cluster(brokers=brokers, topics=topics, seed=seed, history_samples=history, namespaces=3)
    shift = now_ms() - syn_now(syn)
    syn.current = [replace(r, at_ms=r.at_ms + shift) for r in syn.current]
    syn.history = [replace(r, at_ms=r.at_ms + shift) for r in syn.history]
    syn.owners = {t: replace(o, assigned_at_ms=o.assigned_at_ms + shift) for t, o in syn.owners.items()}
    return syn


def check_schema(report: dict[str, Any], plan: dict[str, Any] | None) -> None:
    assert set(report) == REPORT_KEYS
    assert set(report["imbalance"]) == {"cv", "active_brokers", "mean_score", "min_score", "max_score"}
    assert set(report["brokers"][0]) == {
        "broker_id", "state", "topics", "msg_rate_in", "msg_rate_out", "byte_rate_in",
        "byte_rate_out", "backlog", "cpu", "memory", "score",
    }  # fmt: skip
    assert set(report["hot_topics"][0]) == {
        "topic", "broker_id", "load", "msg_rate_in", "msg_rate_out", "byte_rate_in",
        "byte_rate_out", "backlog", "estimated",
    }  # fmt: skip
    if plan is not None:
        assert set(plan) == PLAN_KEYS
        assert plan["status"] == "pending"
        for m in plan["moves"]:
            assert set(m) == MOVE_KEYS and m["status"] == "pending"
        assert report["plan"]["plan_id"] == plan["plan_id"]


async def test_once_cli_writes_the_report_and_a_plan(
    etcd_server: EtcdProcess, etcd_store: EtcdStore, keys: Keys, tmp_path: Path
) -> None:
    syn = fresh(seed=11, history=2)
    limits = PlanLimits(max_moves=8, target_cv=0.15, min_age_ms=0)
    pinned = first_move(syn, limits)
    await publish(etcd_store, keys, syn)
    await etcd_store.put(keys.pinned(TopicName.parse(pinned)), {"by": "test", "reason": "keep"})
    history = tmp_path / "history"
    objects = await LocalObjectStore.open(history)
    writer = LoadHistoryWriter(objects, max_batch=5)
    for r in syn.history:
        writer.add(r)
    await writer.aclose()
    await objects.aclose()

    cmd = [
        sys.executable, "-m", "danube_planner", "--once", "--leader-endpoints", "",
        "--etcd-endpoints", etcd_server.endpoint, "--cluster", keys.cluster,
        "--history-dir", str(history), "--max-moves", "8", "--engine", "python",
    ]  # fmt: skip
    env = {**os.environ, "DANUBE_PLANNER_MIN_TOPIC_AGE_S": "0"}
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *cmd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=100)
    log = out.decode(errors="replace")
    print(
        f"\ndanube-planner --once ({len(syn.states)} brokers x {len(syn.owners)} topics): {time.monotonic() - t0:.1f} s"
    )
    assert proc.returncode == 0, log
    assert "WITHOUT fencing" in log and "UNFENCED" in log

    report = await etcd_store.get_json(keys.load_report())
    plans, _ = await etcd_store.get_prefix(keys.rebalance_plans_prefix())
    assert len(plans) == 1
    plan = plans[0].json()
    check_schema(report, plan)
    assert report["planner"]["engine"] == "python" and report["planner"]["fenced"] is False
    assert report["window"]["history_objects"] > 0 and report["window"]["samples"] == 3 * len(syn.states)
    assert report["totals"]["topics"] == len(syn.owners)
    assert 0 < len(plan["moves"]) <= 8
    assert pinned not in {m["topic"] for m in plan["moves"]}
    assert plan["excluded"]["pinned"] == 1
    assert plan["imbalance_after"] < plan["imbalance_before"] == report["imbalance"]["cv"]
    for m in plan["moves"]:
        owner = await etcd_store.get(keys.owner(TopicName.parse(m["topic"])))
        assert (
            owner is not None and owner.json()["broker_id"] == m["from"] and owner.mod_revision == m["epoch"]
        )


@contextlib.asynccontextmanager
async def leader_service(etcd: EtcdProcess, cluster: str) -> Any:
    cfg = LeaderConfig.model_validate(
        {
            "listen_addr": "127.0.0.1:0",
            "etcd": {"endpoints": [etcd.endpoint], "cluster": cluster},
            "heartbeat_interval_s": 0.5,
        }
    )
    async with leader_running(cfg) as info:
        yield info.addr


def planner_cfg(etcd: EtcdProcess, cluster: str, tmp_path: Path, leader: str, **over: Any) -> PlannerConfig:
    return PlannerConfig.model_validate(
        {
            "engine": "python",
            "candidate_id": "planner-1",
            "leader_endpoints": [leader],
            "leadership_ttl_s": 2,
            "etcd": {"endpoints": [etcd.endpoint], "cluster": cluster},
            "object_store": {"local_dir": str(tmp_path / "history")},
            "min_topic_age_s": 0,
            **over,
        }
    )


async def test_cycles_are_fenced_by_the_spark_planner_term(
    etcd_server: EtcdProcess, etcd_store: EtcdStore, keys: Keys, tmp_path: Path
) -> None:
    await publish(etcd_store, keys, fresh(seed=12))
    async with leader_service(etcd_server, keys.cluster) as leader:
        cfg = planner_cfg(etcd_server, keys.cluster, tmp_path, leader)
        results: list[Any] = []
        await asyncio.wait_for(planner_run(cfg, once=True, on_cycle=results.append), timeout=60)
    (result,) = results
    assert result.written
    report = await etcd_store.get_json(keys.load_report())
    plan = await etcd_store.get_json(keys.rebalance_plan(result.plan_id))
    check_schema(report, plan)
    assert report["planner"]["fenced"] is True and plan["planner"]["fenced"] is True
    # The term is the create_revision of the planner's election key (gone now: it resigned).
    term = report["planner"]["term"]
    assert isinstance(term, int) and term > 0
    assert await etcd_store.get(keys.leader_candidate("spark-planner", "planner-1")) is None


async def test_a_request_key_starts_a_cycle_at_once(
    etcd_server: EtcdProcess, etcd_store: EtcdStore, keys: Keys, tmp_path: Path
) -> None:
    await publish(etcd_store, keys, fresh(seed=13))
    async with leader_service(etcd_server, keys.cluster) as leader:
        cfg = planner_cfg(etcd_server, keys.cluster, tmp_path, leader, interval_s=3600.0)
        stop = asyncio.Event()
        task = asyncio.create_task(planner_run(cfg, stop=stop))
        try:
            first = await wait_until(
                lambda: etcd_store.get_json(keys.load_report()), timeout_s=30, what="the first cycle's report"
            )
            assert first["plan"]["plan_id"]  # the skewed cluster got a plan
            # The load manager finishes it, so the next cycle may plan again.
            plan = await etcd_store.get_json(keys.rebalance_plan(first["plan"]["plan_id"]))
            await etcd_store.put(keys.rebalance_plan(plan["plan_id"]), {**plan, "status": "done"})
            await etcd_store.put(keys.rebalance_request("r1"), {"requested_at_ms": now_ms(), "by": "test"})

            async def answered() -> bool:
                return await etcd_store.get(keys.rebalance_request("r1")) is None

            await wait_until(answered, timeout_s=30, what="the request answered (interval is an hour)")
            report = await etcd_store.get_json(keys.load_report())
            assert report["generated_at_ms"] > first["generated_at_ms"]
            plan2 = await etcd_store.get_json(keys.rebalance_plan(report["plan"]["plan_id"]))
            assert plan2["requests"] == ["r1"]
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=30)


def test_cli_without_java_exits_1_with_what_to_install(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java here (the interpreter is named by its full path)
    proc = subprocess.run(
        [sys.executable, "-m", "danube_planner", "--once", "--leader-endpoints", ""],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert "Java was not found" in proc.stderr and "apt-get install openjdk-17-jre-headless" in proc.stderr
    assert "Traceback" not in proc.stderr and "py4j" not in proc.stderr.lower()
