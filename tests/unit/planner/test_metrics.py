"""The planner's metrics: one observation per cycle and per term."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from danube_planner.metrics import PlannerMetrics

pytestmark = pytest.mark.unit


@dataclass
class Agg:
    cv: float


@dataclass
class Plan:
    cv_after: float


@dataclass
class Result:
    written: bool
    plan_id: str | None
    aggregates: Agg
    plan_result: Plan | None
    extra: dict[str, Any] = field(default_factory=dict)


def test_cycles_and_terms() -> None:
    registry = CollectorRegistry()
    m = PlannerMetrics(registry)

    def v(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert v("danube_leader_election_state", role="spark-planner") == 0
    m.term_started(17)
    assert v("danube_leader_election_state", role="spark-planner") == 1
    assert v("danube_leader_term", role="spark-planner") == 17
    m.cycle_done(Result(True, "p1", Agg(0.4), Plan(0.1)), 0.2)  # type: ignore[arg-type]
    m.cycle_done(Result(True, None, Agg(0.3), None), 0.02)  # type: ignore[arg-type]
    m.cycle_done(Result(False, None, Agg(0.3), None), 0.03)  # type: ignore[arg-type]
    m.cycle_failed(1.5)
    m.term_ended()
    assert v("danube_leader_election_state", role="spark-planner") == 0
    assert v("danube_leader_term", role="spark-planner") == 17
    assert v("danube_rebalancing_cycles_total", result="written") == 2
    assert v("danube_rebalancing_cycles_total", result="not_written") == 1
    assert v("danube_rebalancing_cycles_total", result="failed") == 1
    assert v("danube_rebalancing_plans_total") == 1
    assert v("danube_rebalancing_cycle_duration_seconds_count") == 4
    assert v("danube_rebalancing_cycle_duration_seconds_bucket", le="0.05") == 2
    assert v("danube_cluster_imbalance_cv") == 0.3
    assert v("danube_rebalancing_imbalance_after_cv") == 0.3  # no plan: stays where it is
