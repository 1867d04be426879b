"""The rebalancing plan on plain Python data: tables for each rule, hypothesis for the bounds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danube_planner.model import coefficient_of_variation
from danube_planner.rebalance import (
    Candidate,
    PlanLimits,
    compute_plan,
    last_moves,
    live_plan,
    plan_json,
    plans_to_delete,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

NOW = 10_000_000_000
OLD = NOW - 3_600_000  # assigned an hour ago: old enough
LIMITS = PlanLimits(max_moves=10, target_cv=0.15, cooldown_ms=600_000, min_age_ms=300_000)


def cluster(loads: dict[str, list[float]]) -> tuple[dict[str, float], list[Candidate]]:
    """Scores = the sum of each broker's topic loads; topics named t{broker}-{i}."""
    scores = {b: sum(ls) for b, ls in loads.items()}
    topics = [
        Candidate(f"/ns/t{b}-{i}", b, load, assigned_at_ms=OLD, epoch=100 + i)
        for b, ls in loads.items()
        for i, load in enumerate(ls)
    ]
    return scores, topics


def test_coefficient_of_variation() -> None:
    assert coefficient_of_variation([]) == 0.0
    assert coefficient_of_variation([5.0]) == 0.0
    assert coefficient_of_variation([0.0, 0.0]) == 0.0
    assert coefficient_of_variation([1.0, 1.0, 1.0]) == 0.0
    assert coefficient_of_variation([1.0, 3.0]) == pytest.approx(0.5)  # sd 1, mean 2


def test_balanced_cluster_gets_an_empty_plan() -> None:
    scores, topics = cluster({"b1": [1.0, 1.0], "b2": [1.0, 1.1], "b3": [0.9, 1.0]})
    result = compute_plan(scores, topics, now_ms=NOW, limits=LIMITS)
    assert result.moves == []
    assert result.stopped == "balanced"
    assert result.cv_after == result.cv_before <= LIMITS.target_cv


def test_one_hot_broker_is_evened_out() -> None:
    scores, topics = cluster({"b1": [3.0, 2.0, 1.0], "b2": [], "b3": []})
    result = compute_plan(scores, topics, now_ms=NOW, limits=LIMITS)
    assert [(m.topic, m.from_broker, m.to_broker) for m in result.moves] == [
        ("/ns/tb1-0", "b1", "b2"),  # 3.0: gap 6, closest to 3
        ("/ns/tb1-2", "b1", "b3"),  # gap 3 (b1 = 3 vs b3 = 0): 1.0 and 2.0 tie around 1.5, the lighter wins
    ]
    # Then b2 (3.0) only holds the topic just moved, and b1's 2.0 would overshoot b3: stop.
    assert result.scores_after == {"b1": 2.0, "b2": 3.0, "b3": 1.0}
    assert result.stopped == "no_improving_move"
    assert result.cv_after < result.cv_before
    assert result.moves[0].epoch == 100


def test_stops_at_the_target() -> None:
    scores, topics = cluster({"b1": [1.0] * 10, "b2": [1.0] * 8})
    result = compute_plan(scores, topics, now_ms=NOW, limits=PlanLimits(target_cv=0.05))
    # 10 vs 8: CV 0.111 > 0.05; one move makes 9 vs 9.
    assert len(result.moves) == 1 and result.stopped == "target_reached"
    assert result.cv_after == 0.0


def test_budget_is_respected() -> None:
    scores, topics = cluster({"b1": [1.0] * 20, "b2": [], "b3": [], "b4": []})
    result = compute_plan(scores, topics, now_ms=NOW, limits=PlanLimits(max_moves=3, target_cv=0.0))
    assert len(result.moves) == 3 and result.stopped == "budget_exhausted"


def test_zero_budget_plans_nothing() -> None:
    scores, topics = cluster({"b1": [1.0] * 4, "b2": []})
    result = compute_plan(scores, topics, now_ms=NOW, limits=PlanLimits(max_moves=0))
    assert result.moves == [] and result.stopped == "budget_exhausted"


def test_no_move_when_only_one_topic_would_overshoot() -> None:
    # b1 = 10 (one topic), b2 = 0: moving it just swaps the imbalance (l == gap), never done.
    scores, topics = cluster({"b1": [10.0], "b2": []})
    result = compute_plan(scores, topics, now_ms=NOW, limits=LIMITS)
    assert result.moves == [] and result.stopped == "no_improving_move"


@pytest.mark.parametrize(
    ("candidate", "kwargs", "reason"),
    [
        (Candidate("/ns/a", "b1", 5.0, OLD, moving=True), {}, "moving"),
        (Candidate("/ns/a", "b1", 5.0, OLD), {"pinned": {"/ns/a"}}, "pinned"),
        (Candidate("/ns/a", "b1", 5.0, OLD), {"last_moved_ms": {"/ns/a": NOW - 60_000}}, "cooling_down"),
        (Candidate("/ns/a", "b1", 5.0, NOW - 60_000), {}, "too_young"),
        (Candidate("/ns/a", "b1", 0.0, OLD), {}, "no_load"),
        (Candidate("/ns/a", "b1", 5.0, OLD, owned=False), {}, "unowned"),
        (Candidate("/ns/a", "gone", 5.0, OLD), {}, "not_on_active_broker"),
    ],
)
def test_excluded_topics_never_move(candidate: Candidate, kwargs: dict[str, object], reason: str) -> None:
    scores = {"b1": 10.0, "b2": 0.0, "b3": 0.0}
    filler = [Candidate(f"/ns/f{i}", "b1", 1.0, OLD) for i in range(5)]
    result = compute_plan(scores, [candidate, *filler], now_ms=NOW, limits=LIMITS, **kwargs)  # type: ignore[arg-type]
    assert candidate.topic not in {m.topic for m in result.moves}
    assert result.excluded[reason] == 1
    assert result.moves  # the others still move


def test_cooldown_over_and_age_reached_allow_a_move() -> None:
    scores = {"b1": 4.0, "b2": 0.0}
    topic = Candidate("/ns/a", "b1", 2.0, NOW - LIMITS.min_age_ms)
    result = compute_plan(
        scores,
        [topic, Candidate("/ns/b", "b1", 2.0, OLD)],
        now_ms=NOW,
        limits=LIMITS,
        last_moved_ms={"/ns/a": NOW - LIMITS.cooldown_ms},
    )
    assert len(result.moves) == 1


def test_never_moves_to_a_broker_outside_the_scores() -> None:
    # b3 (draining) is not among the active brokers' scores: never a target, even though idle.
    scores = {"b1": 6.0, "b2": 5.0}
    topics = [Candidate(f"/ns/t{i}", "b1", 1.0, OLD) for i in range(6)]
    result = compute_plan(scores, topics, now_ms=NOW, limits=PlanLimits(target_cv=0.0))
    assert {m.to_broker for m in result.moves} <= {"b2"}


# ---------------------------------------------------------------- properties
@st.composite
def clusters(
    draw: st.DrawFn,
) -> tuple[dict[str, float], list[Candidate], set[str], dict[str, int], PlanLimits]:
    n_brokers = draw(st.integers(1, 8))
    active = [f"b{i}" for i in range(n_brokers)]
    inactive = draw(st.sampled_from([[], ["drained"], ["draining", "gone"]]))
    topics: list[Candidate] = []
    for i in range(draw(st.integers(0, 40))):
        topics.append(
            Candidate(
                topic=f"/ns/t{i}",
                broker_id=draw(st.sampled_from(active + inactive)),
                load=draw(st.floats(0.0, 100.0, allow_nan=False)),
                assigned_at_ms=draw(st.sampled_from([0, OLD, NOW - 1000])),
                epoch=i + 1,
                moving=draw(st.booleans()) and draw(st.booleans()),
                owned=draw(st.integers(0, 9)) > 0,
            )
        )
    scores = {b: sum(t.load for t in topics if t.broker_id == b) for b in active}
    for b in active:  # CPU and memory not carried by any topic
        scores[b] += draw(st.floats(0.0, 20.0, allow_nan=False))
    names = [t.topic for t in topics]
    pinned = set(draw(st.lists(st.sampled_from(names), max_size=5))) if names else set()
    cooling = {
        t: NOW - draw(st.integers(0, 1_200_000))
        for t in (draw(st.lists(st.sampled_from(names), max_size=5)) if names else [])
    }
    limits = PlanLimits(
        max_moves=draw(st.integers(0, 15)),
        target_cv=draw(st.sampled_from([0.0, 0.05, 0.15, 0.5])),
        cooldown_ms=600_000,
        min_age_ms=300_000,
    )
    return scores, topics, pinned, cooling, limits


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_plan_bounds(
    case: tuple[dict[str, float], list[Candidate], set[str], dict[str, int], PlanLimits],
) -> None:
    scores, topics, pinned, cooling, limits = case
    result = compute_plan(scores, topics, now_ms=NOW, limits=limits, pinned=pinned, last_moved_ms=cooling)
    by_name = {t.topic: t for t in topics}
    assert len(result.moves) <= limits.max_moves
    assert len({m.topic for m in result.moves}) == len(result.moves)  # a topic moves at most once
    for m in result.moves:
        t = by_name[m.topic]
        assert m.from_broker == t.broker_id in scores
        assert m.to_broker in scores and m.to_broker != m.from_broker  # only active brokers
        assert t.owned and not t.moving and m.topic not in pinned
        assert m.topic not in cooling or NOW - cooling[m.topic] >= limits.cooldown_ms
        assert not t.assigned_at_ms or NOW - t.assigned_at_ms >= limits.min_age_ms
        assert t.load > 0
    assert result.cv_after <= result.cv_before + 1e-12
    # The predicted scores are the old ones with each move's load carried over.
    expected = dict(scores)
    for m in result.moves:
        expected[m.from_broker] -= m.load
        expected[m.to_broker] += m.load
    assert result.scores_after == pytest.approx(expected)
    assert result.cv_after == pytest.approx(coefficient_of_variation(expected.values()))
    if result.cv_before <= limits.target_cv:
        assert result.moves == [] and result.stopped == "balanced"


# ---------------------------------------------------------------- previous plans
def plan_doc(status: str, created: int, moves: list[tuple[str, str]], **extra: object) -> dict[str, object]:
    return {
        "status": status,
        "created_at_ms": created,
        "expires_at_ms": created + 300_000,
        "moves": [{"topic": t, "status": s, **extra} for t, s in moves],
    }


def test_live_plan_blocks_until_done_or_expired() -> None:
    plans = [
        ("1", plan_doc("done", NOW - 1000, [])),
        ("2", plan_doc("pending", NOW - 1000, [])),
    ]
    assert live_plan(plans, NOW) == "2"
    assert live_plan(plans, NOW + 300_000) is None  # expired
    assert live_plan([("3", plan_doc("executing", NOW, []))], NOW) == "3"
    assert live_plan([("4", plan_doc("done", NOW, []))], NOW) is None


def test_last_moves_counts_moved_and_live_pending_moves_only() -> None:
    plans = [
        ("1", plan_doc("done", NOW - 50_000, [("/a", "done"), ("/b", "skipped"), ("/c", "failed")])),
        ("2", plan_doc("pending", NOW - 10_000, [("/d", "pending")])),
        ("3", plan_doc("pending", NOW - 900_000, [("/e", "pending")])),  # expired: never started
        ("4", plan_doc("done", NOW - 900_000, [("/a", "done")], finished_at_ms=NOW - 20_000)),
    ]
    assert last_moves(plans, NOW) == {"/a": NOW - 20_000, "/d": NOW - 10_000}


def test_plans_to_delete_keeps_the_newest_live_and_cooling_plans() -> None:
    plans = [
        (f"{NOW - age:013d}-x", plan_doc(status, NOW - age, []))
        for age, status in [
            (5_000_000, "done"),  # old, finished: deleted
            (4_000_000, "pending"),  # expired pending: deleted
            (3_000_000, "executing"),  # expired, but a move is still settling: kept
            (100_000, "done"),  # within the cooldown: kept
            (50_000, "pending"),  # live: kept
            (10_000, "done"),  # among the newest: kept
        ]
    ]
    plans[2][1]["moves"] = [{"topic": "/t", "status": "moving"}]
    gone = plans_to_delete(plans, now_ms=NOW, keep=1, cooldown_ms=600_000)
    assert gone == [plans[0][0], plans[1][0]]
    assert plans_to_delete(plans, now_ms=NOW, keep=10, cooldown_ms=0) == []


def test_plan_json_shape() -> None:
    scores, topics = cluster({"b1": [3.0, 2.0, 1.0], "b2": []})
    result = compute_plan(scores, topics, now_ms=NOW, limits=LIMITS)
    doc = plan_json(
        "p1",
        result,
        created_at_ms=NOW,
        expires_at_ms=NOW + 1,
        limits=LIMITS,
        planner={"candidate_id": "x", "term": 7, "fenced": True},
        requests=["r1"],
    )
    assert doc["status"] == "pending" and doc["plan_id"] == "p1" and doc["requests"] == ["r1"]
    assert doc["imbalance_after"] < doc["imbalance_before"]
    assert doc["moves"][0] == {
        "topic": "/ns/tb1-0",
        "from": "b1",
        "to": "b2",
        "load": 3.0,
        "epoch": 100,
        "status": "pending",
        "reason": "",
    }
