"""The load manager's collector and the plan outcomes it counts."""

from __future__ import annotations

from typing import Any

import pytest

from danube_common.records import BrokerRecord
from danube_load_manager.metrics import LmFigures, broker_states, lm_families
from danube_load_manager.rebalance_plans import newly_settled

pytestmark = pytest.mark.unit


def rec(broker_id: str, state: str = "active") -> BrokerRecord:
    return BrokerRecord(broker_id, f"127.0.0.1:{6650 + int(broker_id)}", "http://x", state, 0)


def test_broker_states_follow_the_placement_rule() -> None:
    brokers = {"1": rec("1"), "2": rec("2", "draining"), "3": rec("3"), "4": rec("4")}
    admin = {"3": ("draining", 5), "4": ("drained", 6), "2": ("drained", 7)}
    assert broker_states(brokers, admin) == {"1": "active", "2": "draining", "3": "draining", "4": "drained"}


def test_families() -> None:
    figures = LmFigures(
        leading=True,
        term=42,
        passes=7,
        actions={("place", "applied"): 3, ("move", "refused"): 1},
        moves={"started": 2, "done": 1},
        broker_states={"1": "active", "2": "draining"},
        topics=5,
        moves_in_flight=1,
    )
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in lm_families(figures) for s in f.samples
    }
    assert got == {
        ("danube_leader_election_state", (("role", "load-manager"),)): 1,
        ("danube_leader_term", (("role", "load-manager"),)): 42,
        ("danube_load_manager_passes_total", ()): 7,
        ("danube_load_manager_actions_total", (("kind", "move"), ("result", "refused"))): 1,
        ("danube_load_manager_actions_total", (("kind", "place"), ("result", "applied"))): 3,
        ("danube_rebalancing_moves_total", (("outcome", "done"),)): 1,
        ("danube_rebalancing_moves_total", (("outcome", "started"),)): 2,
        ("danube_cluster_brokers", (("state", "active"),)): 1,
        ("danube_cluster_brokers", (("state", "draining"),)): 1,
        ("danube_cluster_brokers", (("state", "drained"),)): 0,
        ("danube_cluster_topics", ()): 5,
        ("danube_cluster_moves_in_flight", ()): 1,
    }


def plan(*statuses: str) -> dict[str, Any]:
    return {
        "status": "executing",
        "moves": [{"topic": f"/ns/t{i}", "status": s} for i, s in enumerate(statuses)],
    }


@pytest.mark.parametrize(
    ("old", "new", "counted"),
    [
        (plan("pending", "moving"), plan("pending", "done"), {"done": 1}),
        (
            plan("moving", "moving", "pending"),
            plan("failed", "done", "skipped"),
            {"failed": 1, "done": 1, "skipped": 1},
        ),
        (plan("done", "moving"), plan("done", "moving"), {}),  # already settled: not again
        (plan("pending"), plan("moving"), {}),  # started: counted when applied, not here
        ({"moves": "broken"}, plan("done"), {"done": 1}),
    ],
)
def test_newly_settled(old: dict[str, Any], new: dict[str, Any], counted: dict[str, int]) -> None:
    assert newly_settled(old, new) == counted
