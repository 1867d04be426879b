"""The rebalancing plan: topic moves that lower the imbalance. Pure functions on plain data.

Both engines feed this: the aggregation (plain Python or DataFrames) gives each active broker
its score and each topic its load; :func:`compute_plan` picks moves greedily:

1. A topic is a **candidate** only if it has an owner key, its owner is an active broker, no move of it is in
   progress, no admin pinned it, it was not moved within ``cooldown_ms`` (previous plans), it
   has been on its broker for at least ``min_age_ms``, and its load is > 0.
2. While the CV of the scores is above ``target_cv`` and fewer than ``max_moves`` moves are
   planned: take the least loaded active broker ``dst`` and, from the most loaded broker down,
   the first broker ``src`` with a candidate whose load ``l`` satisfies ``0 < l < gap``
   (``gap = score(src) - score(dst)``); of those, the one closest to ``gap / 2`` (it brings the
   two brokers closest to each other and to the mean). Move it: ``src`` loses ``l``, ``dst``
   gains ``l``. A topic moves at most once per plan.
3. Stop when the target is reached, the budget is spent, or no move would help.

Every move lowers the variance (by ``2 * l * (gap - l) > 0``) and keeps the mean, so the
predicted CV after is never above the CV before; only active brokers are ever targets.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from danube_planner.model import SCHEMA_VERSION, coefficient_of_variation

#: Why a topic was not a candidate, in the order they are checked.
EXCLUSIONS = ("unowned", "not_on_active_broker", "moving", "pinned", "cooling_down", "too_young", "no_load")


@dataclass(frozen=True, slots=True)
class Candidate:
    topic: str
    broker_id: str
    load: float
    assigned_at_ms: int = 0
    #: The owner key's mod_revision when the plan was made.
    epoch: int = 0
    moving: bool = False
    #: False for a topic a report lists but no owner key names (mid-placement): not movable.
    owned: bool = True


@dataclass(frozen=True, slots=True)
class PlanLimits:
    max_moves: int = 10
    target_cv: float = 0.15
    cooldown_ms: int = 600_000
    min_age_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class PlannedMove:
    topic: str
    from_broker: str
    to_broker: str
    load: float
    epoch: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "from": self.from_broker,
            "to": self.to_broker,
            "load": round(self.load, 6),
            "epoch": self.epoch,
            "status": "pending",
            "reason": "",
        }


@dataclass(frozen=True, slots=True)
class PlanResult:
    moves: list[PlannedMove]
    cv_before: float
    cv_after: float
    #: balanced | target_reached | budget_exhausted | no_improving_move
    stopped: str
    #: Topics left out, by reason (:data:`EXCLUSIONS`).
    excluded: dict[str, int] = field(default_factory=dict)
    #: Predicted score of every active broker after the moves.
    scores_after: dict[str, float] = field(default_factory=dict)


def exclusion(
    c: Candidate,
    *,
    active: Collection[str],
    now_ms: int,
    limits: PlanLimits,
    pinned: Collection[str],
    last_moved_ms: Mapping[str, int],
) -> str | None:
    """Why ``c`` may not move now (None: it may)."""
    if not c.owned:
        return "unowned"
    if c.broker_id not in active:
        return "not_on_active_broker"
    if c.moving:
        return "moving"
    if c.topic in pinned:
        return "pinned"
    moved = last_moved_ms.get(c.topic)
    if moved is not None and now_ms - moved < limits.cooldown_ms:
        return "cooling_down"
    if c.assigned_at_ms and now_ms - c.assigned_at_ms < limits.min_age_ms:
        return "too_young"
    if not c.load > 0:
        return "no_load"
    return None


def compute_plan(
    scores: Mapping[str, float],
    topics: Sequence[Candidate],
    *,
    now_ms: int,
    limits: PlanLimits = PlanLimits(),
    pinned: Collection[str] = frozenset(),
    last_moved_ms: Mapping[str, int] | None = None,
) -> PlanResult:
    """The moves to make (see the module docstring). ``scores``: every active broker's score."""
    last = last_moved_ms or {}
    cur = dict(scores)
    before = coefficient_of_variation(cur.values())
    excluded = dict.fromkeys(EXCLUSIONS, 0)
    # Per broker: its candidates as (load, topic), sorted, to find the load nearest gap/2.
    pool: dict[str, list[tuple[float, str]]] = {b: [] for b in cur}
    by_name: dict[str, Candidate] = {}
    for c in topics:
        why = exclusion(c, active=cur, now_ms=now_ms, limits=limits, pinned=pinned, last_moved_ms=last)
        if why is not None:
            excluded[why] += 1
            continue
        pool[c.broker_id].append((c.load, c.topic))
        by_name[c.topic] = c
    for entries in pool.values():
        entries.sort()

    moves: list[PlannedMove] = []
    stopped = "balanced" if before <= limits.target_cv else ""
    while not stopped:
        if coefficient_of_variation(cur.values()) <= limits.target_cv:
            stopped = "target_reached"
        elif len(moves) >= limits.max_moves:
            stopped = "budget_exhausted"
        else:
            step = _best_move(cur, pool)
            if step is None:
                stopped = "no_improving_move"
                break
            src, dst, index = step
            load, name = pool[src].pop(index)
            cur[src] -= load
            cur[dst] += load
            moves.append(PlannedMove(name, src, dst, load, by_name[name].epoch))
    return PlanResult(
        moves=moves,
        cv_before=before,
        cv_after=coefficient_of_variation(cur.values()),
        stopped=stopped,
        excluded={k: v for k, v in excluded.items() if v},
        scores_after=cur,
    )


def _best_move(
    cur: Mapping[str, float], pool: Mapping[str, list[tuple[float, str]]]
) -> tuple[str, str, int] | None:
    """(src, dst, index into pool[src]) of the next move; None when no move lowers the spread."""
    if len(cur) < 2:
        return None
    dst = min(cur, key=lambda b: (cur[b], b))
    for src in sorted(cur, key=lambda b: (-cur[b], b)):
        gap = cur[src] - cur[dst]
        if gap <= 0:
            return None
        entries = pool[src]
        if not entries:
            continue
        half = gap / 2
        i = bisect.bisect_left(entries, (half, ""))
        best: int | None = None
        for j in (i - 1, i):
            if 0 <= j < len(entries):
                load = entries[j][0]
                if 0 < load < gap * (1 - 1e-9) and (
                    best is None or abs(load - half) < abs(entries[best][0] - half)
                ):
                    best = j
        if best is not None:
            return src, dst, best
    return None


def plan_json(
    plan_id: str,
    result: PlanResult,
    *,
    created_at_ms: int,
    expires_at_ms: int,
    limits: PlanLimits,
    planner: Mapping[str, Any],
    requests: Sequence[str] = (),
) -> dict[str, Any]:
    """The plan written to ``/{cluster}/rebalance/plans/{plan_id}`` (schema: spark/README.md)."""
    return {
        "version": SCHEMA_VERSION,
        "plan_id": plan_id,
        "status": "pending",
        "created_at_ms": created_at_ms,
        "expires_at_ms": expires_at_ms,
        "planner": dict(planner),
        "requests": list(requests),
        "imbalance_before": round(result.cv_before, 6),
        "imbalance_after": round(result.cv_after, 6),
        "target_imbalance": limits.target_cv,
        "stopped": result.stopped,
        "limits": {
            "max_moves": limits.max_moves,
            "cooldown_s": limits.cooldown_ms / 1000,
            "min_topic_age_s": limits.min_age_ms / 1000,
        },
        "excluded": dict(result.excluded),
        "moves": [m.to_json() for m in result.moves],
    }


# ---------------------------------------------------------------- previous plans (pure)
#: Plan statuses whose moves may still start.
LIVE_STATUSES = ("pending", "executing")
#: Move statuses that count for a topic's cooldown (a topic that moved, or is about to).
MOVED_STATUSES = ("moving", "done")


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def is_live(doc: Mapping[str, Any], now_ms: int) -> bool:
    """The plan may still start moves: pending or executing, and not expired."""
    return doc.get("status") in LIVE_STATUSES and _int(doc.get("expires_at_ms")) > now_ms


def live_plan(plans: Sequence[tuple[str, Mapping[str, Any]]], now_ms: int) -> str | None:
    """The id of a plan whose moves may still start (then no new plan is made), else None."""
    for plan_id, doc in plans:
        if is_live(doc, now_ms):
            return plan_id
    return None


def last_moves(plans: Sequence[tuple[str, Mapping[str, Any]]], now_ms: int) -> dict[str, int]:
    """topic -> when a plan last moved it (or will: a pending move of a live plan), for cooldowns.

    A move counts from its ``finished_at_ms``, else its ``started_at_ms``, else the plan's
    ``created_at_ms``; skipped and failed moves, and pending moves of expired plans, do not count.
    """
    out: dict[str, int] = {}
    for _, doc in plans:
        live = is_live(doc, now_ms)
        created = _int(doc.get("created_at_ms"))
        for move in doc.get("moves") or []:
            if not isinstance(move, Mapping) or not isinstance(move.get("topic"), str):
                continue
            status = move.get("status")
            if not (status in MOVED_STATUSES or (status == "pending" and live)):
                continue
            at = _int(move.get("finished_at_ms")) or _int(move.get("started_at_ms")) or created
            out[move["topic"]] = max(out.get(move["topic"], 0), at)
    return out


def plans_to_delete(
    plans: Sequence[tuple[str, Mapping[str, Any]]], *, now_ms: int, keep: int, cooldown_ms: int
) -> list[str]:
    """Plans to delete: all but the newest ``keep`` (ids sort by creation time), except those
    still live, with a move still ``moving`` (the load manager is settling it), or created within
    ``cooldown_ms`` (their moves still count for cooldowns)."""
    ordered = sorted(plans, key=lambda p: p[0])
    old = ordered[: max(0, len(ordered) - keep)]
    return [
        plan_id
        for plan_id, doc in old
        if not is_live(doc, now_ms)
        and not any(isinstance(m, Mapping) and m.get("status") == "moving" for m in doc.get("moves") or [])
        and now_ms - _int(doc.get("created_at_ms")) >= cooldown_ms
    ]
