"""Executing the Spark planner's plans: which moves start, and how each move's outcome is recorded."""

from __future__ import annotations

from typing import Any

import pytest

from danube_common.records import BrokerRecord, Ownership
from danube_load_manager.decide import Limits, Move, Snapshot, next_actions
from danube_load_manager.rebalance_plans import mark_started, settle, startable

pytestmark = pytest.mark.unit

NOW = 1_000_000


def own(topic: str, broker: str, epoch: int = 10, moving_to: str = "") -> Ownership:
    return Ownership(f"/default/{topic}", broker, epoch, moving_to)


def plan(
    *moves: tuple[str, str, str, str], status: str = "pending", expires: int = NOW + 60_000
) -> dict[str, Any]:
    return {
        "plan_id": "p1",
        "status": status,
        "expires_at_ms": expires,
        "moves": [
            {"topic": f"/default/{t}", "from": a, "to": b, "status": st, "reason": ""}
            for t, a, b, st in moves
        ],
    }


OWNERS = {
    o.topic: o for o in [own("a", "b1"), own("b", "b1"), own("c", "b2"), own("d", "b1", moving_to="b3")]
}
ACTIVE = ["b1", "b2", "b3"]


def test_pending_moves_that_can_never_happen_are_skipped_with_the_reason() -> None:
    doc = plan(
        ("a", "b1", "b2", "pending"),  # fine: stays pending
        ("c", "b1", "b3", "pending"),  # c is on b2 now
        ("zz", "b1", "b2", "pending"),  # no such topic
        ("b", "b1", "b9", "pending"),  # target gone
    )
    new = settle(doc, OWNERS, ACTIVE, now_ms=NOW)
    assert new is not None
    assert [(m["status"], m["reason"]) for m in new["moves"]] == [
        ("pending", ""),
        ("skipped", "the topic is on broker b2 now, not b1"),
        ("skipped", "the topic has no owner any more"),
        ("skipped", "broker b9 is not an active registered broker"),
    ]
    assert new["status"] == "executing" and doc["moves"][1]["status"] == "pending", "the input is not changed"


@pytest.mark.parametrize(
    ("owner", "status", "reason"),
    [
        (own("a", "b2"), "done", ""),
        (own("a", "b1"), "failed", "the old owner kept the topic (hand-over abandoned: see its log)"),
        (own("a", "b3"), "failed", "the topic went to broker b3 instead (a broker died?)"),
        (None, "failed", "the topic was deleted during the move"),
        (own("a", "b1", moving_to="b2"), "moving", None),
    ],
)
def test_moving_moves_settle_from_ownership(owner: Ownership | None, status: str, reason: str | None) -> None:
    doc = plan(("a", "b1", "b2", "moving"), status="executing")
    owners = {"/default/a": owner} if owner else {}
    new = settle(doc, owners, ACTIVE, now_ms=NOW)
    if status == "moving":
        assert new is None
        return
    assert new is not None and new["moves"][0]["status"] == status and new["moves"][0]["reason"] == reason
    assert new["status"] == "done" and new["finished_at_ms"] == NOW  # every move settled


def test_an_expired_plan_skips_what_did_not_start() -> None:
    doc = plan(("a", "b1", "b2", "pending"), ("b", "b1", "b3", "done"), expires=NOW)
    new = settle(doc, OWNERS, ACTIVE, now_ms=NOW)
    assert (
        new is not None
        and new["moves"][0]["status"] == "skipped"
        and new["moves"][0]["reason"] == "plan expired"
    )
    assert new["status"] == "done"
    assert startable({"p1": doc}, OWNERS, ACTIVE, now_ms=NOW) == []


def test_settled_plans_are_left_alone_and_started_moves_are_marked() -> None:
    assert settle(plan(("a", "b1", "b2", "done"), status="done"), OWNERS, ACTIVE, now_ms=NOW) is None
    doc = plan(("a", "b1", "b2", "pending"), ("b", "b1", "b3", "pending"))
    new = mark_started(doc, [1], now_ms=NOW)
    assert [m["status"] for m in new["moves"]] == ["pending", "moving"]
    assert new["moves"][1]["started_at_ms"] == NOW and new["status"] == "executing"


def snap(plans: dict[str, dict[str, Any]], **kw: Any) -> Snapshot:
    brokers = {b: BrokerRecord(b, f"{b}:1", f"http://{b}:1") for b in ACTIVE}
    return Snapshot(
        brokers=brokers,
        admin_states={},
        admin_state_revisions={},
        reports={},
        owners=OWNERS,
        plans=plans,
        plan_revisions={p: 1 for p in plans},
        **kw,
    )


def test_plan_moves_start_within_the_budget_and_respect_cooldown_and_requests() -> None:
    doc = plan(("a", "b1", "b2", "pending"), ("b", "b1", "b3", "pending"), ("d", "b1", "b2", "pending"))
    actions = next_actions(snap({"p1": doc}), now_s=100, last_move_s={}, now_ms=NOW)
    assert actions == [
        Move("/default/a", "b1", 10, "b2", "plan p1", ("p1", 0)),
        Move("/default/b", "b1", 10, "b3", "plan p1", ("p1", 1)),
    ]  # d is mid-move already: it waits
    limited = next_actions(
        snap({"p1": doc}), now_s=100, last_move_s={}, now_ms=NOW, limits=Limits(max_moves_in_flight=2)
    )
    assert [a.topic for a in limited] == ["/default/a"]  # d's move in flight takes one of the two slots
    cooling = next_actions(snap({"p1": doc}), now_s=100, last_move_s={"/default/a": 95}, now_ms=NOW)
    assert [a.topic for a in cooling] == ["/default/b"]
    requested = next_actions(
        snap({"p1": doc}, move_requests={"/default/a": "b3"}), now_s=100, last_move_s={}, now_ms=NOW
    )
    assert [(a.topic, a.to, a.plan) for a in requested] == [
        ("/default/a", "b3", None),
        ("/default/b", "b3", ("p1", 1)),
    ]
