"""One planner cycle on the in-memory etcd fake, the Python engine and a local object store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from danube_common.keys import Keys
from danube_common.leadership import Leadership
from danube_common.load_history import LoadHistoryReader, LoadHistoryWriter
from danube_common.metadata.memory import MemoryStore
from danube_common.objstore.local import LocalObjectStore
from danube_common.records import BrokerRecord
from danube_common.topic_name import TopicName
from danube_planner.config import PlannerConfig
from danube_planner.cycle import Planner, PythonEngine
from tests.unit.planner.helpers import NOW, Synthetic, report, zipf_cluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


@pytest.fixture
async def objects(tmp_path: Path) -> AsyncIterator[LocalObjectStore]:
    s = await LocalObjectStore.open(tmp_path / "objects")
    yield s
    await s.aclose()


async def publish(store: MemoryStore, keys: Keys, syn: Synthetic) -> None:
    """Write the cluster as brokers, the load manager and admins would."""
    for b, state in syn.states.items():
        await store.put(keys.broker(b), BrokerRecord(b, f"{b}:1", f"http://{b}:1").to_json())
        if state != "active":
            await store.put(keys.broker_state(b), {"state": state})
    for r in syn.current:
        await store.put(keys.load(r.broker_id), r.to_json())
    for o in syn.owners.values():
        await store.put(
            keys.owner(TopicName.parse(o.topic)),
            {"broker_id": o.broker_id, "assigned_at_ms": o.assigned_at_ms},
        )


def planner(store: MemoryStore, keys: Keys, objects: LocalObjectStore | None = None, **cfg: Any) -> Planner:
    config = PlannerConfig(engine="python", leader_endpoints=[], **cfg)
    history = LoadHistoryReader(objects) if objects is not None else None
    return Planner(config, store, keys, history, PythonEngine())


async def lead_of(store: MemoryStore, keys: Keys) -> Leadership:
    key = keys.leader_candidate("spark-planner", "p1")
    term = await store.put(key, {"candidate_id": "p1"})
    return Leadership("spark-planner", "p1", term, key, "127.0.0.1:1")


async def test_cycle_writes_the_report_and_a_plan(memory_store: MemoryStore, keys: Keys) -> None:
    syn = zipf_cluster(brokers=6, topics=120, seed=3)
    await publish(memory_store, keys, syn)
    hot = max(syn.owners, key=lambda t: syn.owners[t].epoch % 7)  # any topic: pin it
    await memory_store.put(keys.pinned(TopicName.parse(hot)), {"by": "admin"})
    p = planner(memory_store, keys, max_moves_per_cycle=5)
    result = await p.cycle(None, now=NOW)
    assert result.written and result.plan_id is not None

    report = await memory_store.get_json(keys.load_report())
    assert report == result.report
    assert report["planner"]["fenced"] is False and report["planner"]["engine"] == "python"
    assert len(report["brokers"]) == 6 and report["totals"]["topics"] == 120
    assert report["imbalance"]["cv"] > 0.15
    assert report["plan"]["plan_id"] == result.plan_id

    plan = await memory_store.get_json(keys.rebalance_plan(result.plan_id))
    assert plan["status"] == "pending" and plan["created_at_ms"] == NOW
    assert plan["expires_at_ms"] == NOW + 300_000
    assert 0 < len(plan["moves"]) <= 5
    assert plan["imbalance_after"] < plan["imbalance_before"] == report["imbalance"]["cv"]
    owners = {t: o.broker_id for t, o in syn.owners.items()}
    for m in plan["moves"]:
        assert m["status"] == "pending" and m["from"] == owners[m["topic"]] != m["to"]
        assert m["topic"] != hot
        assert m["epoch"] == (await memory_store.get(keys.owner(TopicName.parse(m["topic"])))).mod_revision  # type: ignore[union-attr]
    assert plan["excluded"].get("pinned") == 1


async def test_a_live_plan_blocks_the_next_and_cooldowns_come_from_plans(
    memory_store: MemoryStore, keys: Keys
) -> None:
    syn = zipf_cluster(brokers=5, topics=80, seed=4)
    await publish(memory_store, keys, syn)
    p = planner(memory_store, keys, max_moves_per_cycle=3)
    first = await p.cycle(None, now=NOW)
    assert first.plan_id is not None
    second = await p.cycle(None, now=NOW + 1000)
    assert second.plan_id is None and "still pending" in second.report["plan"]["skipped"]

    # The load manager finishes the plan (without really moving anything here).
    doc = await memory_store.get_json(keys.rebalance_plan(first.plan_id))
    moved = {m["topic"] for m in doc["moves"]}
    doc["status"] = "done"
    for m in doc["moves"]:
        m.update(status="done", finished_at_ms=NOW + 2000)
    await memory_store.put(keys.rebalance_plan(first.plan_id), doc)
    third = await p.cycle(None, now=NOW + 3000)
    assert third.plan is not None
    assert not moved & {m["topic"] for m in third.plan["moves"]}  # cooling down
    assert third.plan["excluded"]["cooling_down"] == len(moved)


async def test_a_deposed_planner_writes_nothing(memory_store: MemoryStore, keys: Keys) -> None:
    syn = zipf_cluster(brokers=4, topics=40, seed=5)
    await publish(memory_store, keys, syn)
    lead = await lead_of(memory_store, keys)
    p = planner(memory_store, keys)
    ok = await p.cycle(lead, now=NOW)
    assert ok.written and ok.report["planner"] == {
        "candidate_id": p._cfg.candidate_id,
        "term": lead.term,
        "fenced": True,
        "engine": "python",
        "compute_ms": ok.report["planner"]["compute_ms"],
    }
    await memory_store.delete(lead.key)  # the term ends (lease expired)
    await memory_store.delete(keys.load_report())
    late = await p.cycle(lead, now=NOW + 400_000)
    assert not late.written and late.plan_id is None
    assert await memory_store.get(keys.load_report()) is None
    plans, _ = await memory_store.get_prefix(keys.rebalance_plans_prefix())
    assert len(plans) == 1


async def test_a_request_is_answered_with_a_plan_even_when_balanced(
    memory_store: MemoryStore, keys: Keys
) -> None:
    syn = Synthetic(states={"b1": "active", "b2": "active"})
    syn.current = [report("b1", NOW, []), report("b2", NOW, [])]
    await publish(memory_store, keys, syn)
    await memory_store.put(keys.rebalance_request("r1"), {"requested_at_ms": NOW, "by": "admin"})
    p = planner(memory_store, keys)
    result = await p.cycle(None, now=NOW)
    assert result.plan is not None and result.plan["moves"] == [] and result.plan["stopped"] == "balanced"
    assert result.plan["requests"] == ["r1"]
    assert await memory_store.get(keys.rebalance_request("r1")) is None
    again = await p.cycle(None, now=NOW + 600_000)  # no request, nothing to move: no plan
    assert again.plan is None and again.report["plan"]["stopped"] == "balanced"


async def test_history_is_read_from_the_object_store_and_old_plans_pruned(
    memory_store: MemoryStore, keys: Keys, objects: LocalObjectStore
) -> None:
    syn = zipf_cluster(brokers=3, topics=30, seed=6, history_samples=4)
    await publish(memory_store, keys, syn)
    writer = LoadHistoryWriter(objects, max_batch=2)
    for r in syn.history + syn.current:
        writer.add(r)
    await writer.aclose()
    for age_s in (7200, 3600):  # two old finished plans
        plan_id = f"{NOW - age_s * 1000:013d}-old"
        await memory_store.put(
            keys.rebalance_plan(plan_id), {"status": "done", "created_at_ms": NOW - age_s * 1000, "moves": []}
        )
    p = planner(memory_store, keys, objects, plans_keep=1, history_retention_s=0)
    result = await p.cycle(None, now=NOW)
    assert result.report["window"]["samples"] == 3 * 5  # 4 history + the current, once each
    assert result.report["window"]["history_objects"] == 3 * 3
    kvs, _ = await memory_store.get_prefix(keys.rebalance_plans_prefix())
    assert [kv.key for kv in kvs] == [keys.rebalance_plan(result.plan_id)]  # type: ignore[arg-type]
