"""A planner cycle as a trace (in-memory etcd, Python engine, local object store): a root span
with the plan id and counts, a child per stage, the plan record carrying the cycle's context and
links to the rebalance requests it answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from danube_common.keys import Keys
from danube_common.load_history import LoadHistoryReader
from danube_common.metadata.memory import MemoryStore
from danube_common.objstore.local import LocalObjectStore
from danube_common.observability import record_context, tracing
from danube_planner.config import PlannerConfig
from danube_planner.cycle import Planner, PythonEngine
from tests.support.tracing import capture_spans, children, one, traceparent
from tests.unit.planner.helpers import NOW, zipf_cluster
from tests.unit.planner.test_cycle import lead_of, publish

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


async def test_a_cycle_is_a_trace_with_a_span_per_stage(
    memory_store: MemoryStore, keys: Keys, tmp_path: Path
) -> None:
    syn = zipf_cluster(brokers=4, topics=40, seed=5)
    await publish(memory_store, keys, syn)
    objects = await LocalObjectStore.open(tmp_path / "objects")
    cfg = PlannerConfig(engine="python", leader_endpoints=[], candidate_id="p1", max_moves_per_cycle=3)
    planner = Planner(cfg, memory_store, keys, LoadHistoryReader(objects), PythonEngine())
    lead = await lead_of(memory_store, keys)
    try:
        with capture_spans() as exporter:
            with tracing.tracer("test").start_as_current_span("RequestRebalance") as request:
                doc = {"requested_at_ms": NOW, "dry_run": False, **record_context.current()}
            await memory_store.put(keys.rebalance_request("r1"), doc)
            result = await planner.cycle(lead, now=NOW)
    finally:
        await objects.aclose()
    assert result.written and result.plan_id is not None and result.plan_result is not None
    spans = exporter.get_finished_spans()
    cycle = one(spans, "planner cycle")
    assert cycle.parent is None
    attrs = cycle.attributes or {}
    assert attrs["danube.plan.id"] == result.plan_id
    assert attrs["danube.plan.moves"] == len(result.plan_result.moves) > 0
    assert (attrs["danube.planner.brokers"], attrs["danube.planner.topics"]) == (4, 40)
    assert attrs["danube.planner.term"] == lead.term and attrs["danube.planner.engine"] == "python"
    assert attrs["danube.planner.written"] is True
    assert [ln.context.span_id for ln in cycle.links] == [request.get_span_context().span_id]
    assert [s.name for s in children(spans, cycle)] == [
        "read cluster",
        "read load history",
        "compute report",
        "compute plan",
        "write report and plan",
    ]
    assert one(spans, "compute plan").attributes["danube.plan.moves"] == attrs["danube.plan.moves"]  # type: ignore[index]
    stored = await memory_store.get_json(keys.rebalance_plan(result.plan_id))
    assert stored["traceparent"] == traceparent(cycle), "the load manager's moves link to the cycle"
    assert "traceparent" not in (await memory_store.get_json(keys.load_report()))


async def test_no_span_and_no_context_while_tracing_is_off(memory_store: MemoryStore, keys: Keys) -> None:
    await publish(memory_store, keys, zipf_cluster(brokers=4, topics=40, seed=5))
    cfg = PlannerConfig(engine="python", leader_endpoints=[], max_moves_per_cycle=3)
    with capture_spans() as exporter:
        tracing.set_enabled_for_tests(False)
        result = await Planner(cfg, memory_store, keys, None, PythonEngine()).cycle(None, now=NOW)
    assert exporter.get_finished_spans() == ()
    assert result.plan_id is not None
    assert "traceparent" not in (await memory_store.get_json(keys.rebalance_plan(result.plan_id)))
