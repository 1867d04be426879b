"""One planner cycle on a skewed cluster: the load manager carries the plan out while clients keep
producing and consuming, and the next load report shows the imbalance reduced.

3 brokers, 2 load managers, 2 leader replicas; 6 reliable topics, 2 per broker; the two topics of
one broker get 20x the traffic of the others. The planner runs as `danube-planner --once`, fenced
through the leader service like the long-running planner, with the plain-Python engine: the Spark
engine computes the same report and plan (checked equal to 1e-9, and a whole cycle on Spark, in
tests/spark), so a JVM here would only add its start-up.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient
from tests.e2e.conftest import cli, subprocess_env
from tests.e2e.control_plane import etcd, full_cluster, owners, start_flow, stop_flow
from tests.support import unique, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with full_cluster(tmp_path_factory.mktemp("rebalance")) as c:
        yield c


def planner_once(cluster: LocalCluster) -> dict[str, Any]:
    env = {
        **subprocess_env(),
        "DANUBE_PLANNER_MIN_TOPIC_AGE_S": "0",
        "DANUBE_PLANNER_MOVE_COOLDOWN_S": "0",
        "DANUBE_PLANNER_MAX_MOVES_PER_CYCLE": "2",
    }
    res = subprocess.run(
        [sys.executable, "-m", "danube_planner", "--once", "--engine", "python",
         "--etcd-endpoints", cluster.etcd_endpoint, "--cluster", cluster.cluster,
         "--leader-endpoints", cluster.leader_endpoints, "--candidate-id", "planner-test"],
        capture_output=True, text=True, timeout=120, env=env, cwd=os.fspath(cluster.workdir),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    admin = subprocess.run(
        [cli("danube-admin"), "--admin-url", cluster.admin_url, "-o", "json", "cluster", "load"],
        capture_output=True, text=True, timeout=30, env=subprocess_env(),
    )  # fmt: skip
    assert admin.returncode == 0, admin.stderr
    report: dict[str, Any] = json.loads(admin.stdout)
    return report


async def test_a_planner_cycle_rebalances_a_skewed_cluster(cluster: LocalCluster) -> None:
    prefix = unique("skew")
    topics = [f"/default/{prefix}-{i}" for i in range(6)]
    async with DanubeClient(cluster.service_url) as client, etcd(cluster) as res:
        flows = {t: await start_flow(client, t, reliable=True, rate_per_s=20) for t in topics}
        own = await owners(res)
        hot_broker = own[topics[0]].broker_id
        hot = [t for t in topics if own[t].broker_id == hot_broker]
        assert len(hot) == 2, {t: own[t].broker_id for t in topics}
        await asyncio.gather(*(stop_flow(flows[t]) for t in hot))
        for t in hot:  # the two topics of one broker get 20x the traffic
            flows[t] = await start_flow(client, t, reliable=True, rate_per_s=400)

        async def skew_reported() -> bool:
            load = await res.store.get_json(res.keys.load(hot_broker))
            # 2 x 400 msg/s against 4 x 20 elsewhere: over 300 is a clear skew, also when a busy
            # machine keeps the producers below their target rate.
            return bool(load) and load["msg_rate_in"] > 300

        await wait_until(skew_reported, timeout_s=30, interval_s=0.2, what="the skew in the load reports")
        at_plan = {t: o.broker_id for t, o in (await owners(res)).items() if t in flows}
        before = await asyncio.to_thread(planner_once, cluster)
        plan_id = before["plan"]["plan_id"]
        assert plan_id, f"a skewed cluster gets a plan: {before['plan']}"

        async def plan_done() -> dict[str, Any] | None:
            doc = await res.store.get_json(res.keys.rebalance_plan(plan_id))
            return doc if doc and doc["status"] == "done" else None

        plan = await wait_until(plan_done, timeout_s=90, interval_s=0.2, what="the plan carried out")
        moved = [m for m in plan["moves"] if m["status"] == "done"]
        # A hot topic left the broker that owned it when the plan was made.
        assert any(m["topic"] in hot and m["from"] == at_plan.get(m["topic"]) for m in moved), (
            hot_broker,
            hot,
            at_plan,
            [(m["topic"], m["from"], m.get("to"), m["status"], m["load"]) for m in plan["moves"]],
        )
        # Measure again from load reports of the new placement only: every broker's current
        # report counts over an interval that began at least 2 s after the plan was done (past
        # the consumers' catch-up after the moves).
        settled_ms = int(time.time() * 1000) + 2000

        async def fresh_reports() -> bool:
            kvs, _ = await res.store.get_prefix(res.keys.load_prefix())
            starts = [kv.json()["at_ms"] - 1000 * kv.json()["interval_s"] for kv in kvs]
            return len(kvs) == 3 and min(starts) >= settled_ms

        await wait_until(fresh_reports, timeout_s=30, interval_s=0.2, what="new load reports")
        after = await asyncio.to_thread(planner_once, cluster)
        for f in flows.values():
            await stop_flow(f)
    cv_before, cv_after = before["imbalance"]["cv"], after["imbalance"]["cv"]
    print(
        f"\nimbalance (CV of broker scores) {cv_before:.3f} -> {cv_after:.3f} after {len(moved)} move(s) "
        f"(predicted {plan['imbalance_after']:.3f})"
    )
    assert cv_after < cv_before
    for t, f in flows.items():
        assert not set(f.acked) - f.received, f"{t}: acknowledged messages lost"
        assert not f.failed, f"{t}: sends failed"


async def test_admin_dry_run_apply_history_and_pin(cluster: LocalCluster) -> None:
    """`danube-admin rebalance --dry-run` asks the planner for a plan that is only proposed;
    `--apply ID` hands it to the load manager; `cluster plans` shows how it ended."""
    pinned = f"/default/{unique('pinned')}"
    async with DanubeClient(cluster.service_url) as client:
        await (await client.create_producer(pinned)).send(b"x")
    r = await asyncio.to_thread(admin, cluster, "topics", "pin", pinned)
    assert r.returncode == 0 and "pinned" in r.stdout, r.stderr
    proc = await asyncio.create_subprocess_exec(
        cli("danube-admin"), "--admin-url", cluster.admin_url, "-o", "json", "rebalance", "--dry-run",
        "--wait-s", "60", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=subprocess_env(),
    )  # fmt: skip
    async with etcd(cluster) as res:
        await wait_until(
            lambda: res.store.get_prefix(res.keys.rebalance_requests_prefix()),
            timeout_s=30,
            what="the request",
        )
        report = await asyncio.to_thread(planner_once, cluster)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        proposed = json.loads(out)
        assert proposed["status"] == "proposed" and proposed["plan_id"] == report["plan"]["plan_id"]
        assert pinned not in {m["topic"] for m in proposed["moves"]}
        doc = await res.store.get_json(res.keys.rebalance_plan(proposed["plan_id"]))
        assert doc["status"] == "proposed", "a dry run is not executed"
        r = await asyncio.to_thread(admin, cluster, "rebalance", "--apply", proposed["plan_id"])
        assert r.returncode == 0 and "applied" in r.stdout, r.stderr

        async def done() -> bool:
            d = await res.store.get_json(res.keys.rebalance_plan(proposed["plan_id"]))
            return bool(d) and d["status"] == "done"

        await wait_until(done, timeout_s=60, interval_s=0.2, what="the applied plan carried out")
        r = await asyncio.to_thread(admin, cluster, "rebalance", "--apply", proposed["plan_id"])
        assert r.returncode == 1 and "only a proposed plan" in r.stderr
    r = await asyncio.to_thread(admin, cluster, "cluster", "plans", "--show", proposed["plan_id"])
    assert r.returncode == 0 and proposed["plan_id"] in r.stdout and "done" in r.stdout, r.stderr
    r = await asyncio.to_thread(admin, cluster, "cluster", "load")
    assert r.returncode == 0 and "imbalance (CV of broker scores)" in r.stdout, r.stderr


def admin(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cli("danube-admin"), "--admin-url", cluster.admin_url, *args],
        capture_output=True, text=True, timeout=30, env=subprocess_env(),
    )  # fmt: skip
