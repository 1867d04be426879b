"""The planner's Prometheus metrics (names: ``danube_common.observability.metric_names``),
observed once per cycle and per term: nothing on any hot path.

- ``danube_leader_election_state{role="spark-planner"}`` 1 while this planner leads, and
  ``danube_leader_term`` its (last) term;
- ``danube_rebalancing_cycle_duration_seconds`` (histogram) and ``danube_rebalancing_cycles_total``
  by result (``written``, ``not_written`` when the term ended first, ``failed``);
- ``danube_rebalancing_plans_total``: plans written;
- ``danube_cluster_imbalance_cv`` as the last cycle measured it, and
  ``danube_rebalancing_imbalance_after_cv`` what its plan should bring it to.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from danube_common.observability import metric_names as mn
from danube_planner.cycle import CycleResult
from danube_planner.model import PLANNER_ROLE

#: Cycle durations: from 10 ms (the python engine on a small cluster) to 10 minutes.
CYCLE_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
CYCLE_RESULTS = ("written", "not_written", "failed")


class PlannerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._state = mn.LEADER_ELECTION_STATE.gauge(registry).labels(PLANNER_ROLE)
        self._term = mn.LEADER_TERM.gauge(registry).labels(PLANNER_ROLE)
        self._duration = mn.PLANNER_CYCLE_DURATION.histogram(registry, buckets=CYCLE_BUCKETS_S)
        cycles = mn.PLANNER_CYCLES.counter(registry)
        self._cycles = {r: cycles.labels(r) for r in CYCLE_RESULTS}
        self._plans = mn.PLANNER_PLANS.counter(registry)
        self._cv = mn.CLUSTER_IMBALANCE.gauge(registry)
        self._cv_after = mn.PLANNER_IMBALANCE_AFTER.gauge(registry)

    def term_started(self, term: int) -> None:
        self._state.set(1)
        self._term.set(term)

    def term_ended(self) -> None:
        self._state.set(0)

    def cycle_done(self, result: CycleResult, seconds: float) -> None:
        self._duration.observe(seconds)
        self._cycles["written" if result.written else "not_written"].inc()
        if result.plan_id is not None:
            self._plans.inc()
        self._cv.set(result.aggregates.cv)
        plan = result.plan_result
        self._cv_after.set(plan.cv_after if plan is not None else result.aggregates.cv)

    def cycle_failed(self, seconds: float) -> None:
        self._duration.observe(seconds)
        self._cycles["failed"].inc()
