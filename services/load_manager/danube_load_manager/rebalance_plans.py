"""Carrying out the Spark planner's rebalancing plans (spark/README.md has the plan schema). Pure.

A plan (``/{cluster}/rebalance/plans/{plan_id}``) is a list of moves ``{topic, from, to, status}``.
The load manager, while it leads, takes each **pending** move of a live plan (status ``pending``
or ``executing``, not expired) and re-validates it against the cluster as it is now:

- the topic still exists and is owned by ``from`` (not mid-move),
- ``to`` is a registered, active broker other than ``from``,
- the topic is not cooling down from another move, and the move budget has room.

A move that can no longer be valid (topic gone, owned elsewhere, target gone) is recorded
``skipped`` with the reason; one that only has to wait (budget, cooldown) stays ``pending``. A valid
one is started with the topic move protocol and recorded ``moving`` (``started_at_ms``). On later
passes a ``moving`` move becomes ``done`` when ``to`` owns the topic, or ``failed`` when the old
owner kept it (the hand-over was abandoned) or it went elsewhere (a broker died). When every move is
settled the plan is ``done``; pending moves of an expired plan are ``skipped`` ("plan expired").
Every plan update is written fenced by the load manager's term and the plan's mod_revision.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any

from danube_common.records import Ownership

LIVE = ("pending", "executing")
SETTLED = ("done", "skipped", "failed")


def permanent_obstacle(
    move: Mapping[str, Any], owners: Mapping[str, Ownership], active: Collection[str]
) -> str | None:
    """Why a pending move can never be made as planned (None: it still can, now or later)."""
    topic, src, dst = move.get("topic"), move.get("from"), move.get("to")
    if not isinstance(topic, str) or not isinstance(src, str) or not isinstance(dst, str) or src == dst:
        return "malformed move"
    own = owners.get(topic)
    if own is None:
        return "the topic has no owner any more"
    if own.broker_id != src:
        return f"the topic is on broker {own.broker_id} now, not {src}"
    if dst not in active:
        return f"broker {dst} is not an active registered broker"
    return None


def settle(
    doc: Mapping[str, Any],
    owners: Mapping[str, Ownership],
    active: Collection[str],
    *,
    now_ms: int,
) -> dict[str, Any] | None:
    """The plan with every move's status brought up to date (None: nothing changed)."""
    if doc.get("status") not in LIVE:
        return None
    new = copy.deepcopy(dict(doc))
    moves: list[dict[str, Any]] = [m for m in new.get("moves") or [] if isinstance(m, dict)]
    expired = int(new.get("expires_at_ms") or 0) <= now_ms
    changed = False

    def finish(m: dict[str, Any], status: str, reason: str = "") -> None:
        nonlocal changed
        m["status"], m["reason"], m["finished_at_ms"] = status, reason, now_ms
        changed = True

    for m in moves:
        status = m.get("status")
        if status == "pending":
            why = "plan expired" if expired else permanent_obstacle(m, owners, active)
            if why is not None:
                finish(m, "skipped", why)
        elif status == "moving":
            own = owners.get(str(m.get("topic")))
            if own is None:
                finish(m, "failed", "the topic was deleted during the move")
            elif own.moving_to:
                continue
            elif own.broker_id == m.get("to"):
                finish(m, "done")
            elif own.broker_id == m.get("from"):
                finish(m, "failed", "the old owner kept the topic (hand-over abandoned: see its log)")
            else:
                finish(m, "failed", f"the topic went to broker {own.broker_id} instead (a broker died?)")
    if not moves or all(m.get("status") in SETTLED for m in moves):
        new["status"], new["finished_at_ms"] = "done", now_ms
        changed = True
    elif any(m.get("status") != "pending" for m in moves) and new.get("status") == "pending":
        new["status"] = "executing"
        changed = True
    return new if changed else None


def mark_started(doc: Mapping[str, Any], indexes: Collection[int], *, now_ms: int) -> dict[str, Any]:
    """``moving`` for the moves just started (by index), and the plan ``executing``."""
    new = copy.deepcopy(dict(doc))
    moves = new.get("moves") or []
    for i in indexes:
        moves[i]["status"], moves[i]["started_at_ms"] = "moving", now_ms
    if indexes and new.get("status") == "pending":
        new["status"] = "executing"
    return new


def startable(
    plans: Mapping[str, Mapping[str, Any]],
    owners: Mapping[str, Ownership],
    active: Collection[str],
    *,
    now_ms: int,
) -> list[tuple[str, int, Mapping[str, Any]]]:
    """(plan_id, index, move) of every pending move that is valid now, oldest plan first."""
    out = []
    for plan_id in sorted(plans):
        doc = plans[plan_id]
        if doc.get("status") not in LIVE or int(doc.get("expires_at_ms") or 0) <= now_ms:
            continue
        for i, m in enumerate(doc.get("moves") or []):
            if not isinstance(m, Mapping) or m.get("status") != "pending":
                continue
            if permanent_obstacle(m, owners, active) is None and not owners[str(m["topic"])].moving_to:
                out.append((plan_id, i, m))
    return out


def newly_settled(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, int]:
    """How many moves ``new`` records as settled (``done``, ``skipped``, ``failed``) that ``old``
    did not, by status (moves are matched by index)."""
    before = [m.get("status") if isinstance(m, Mapping) else None for m in old.get("moves") or []]
    out: dict[str, int] = {}
    for i, m in enumerate(new.get("moves") or []):
        status = m.get("status") if isinstance(m, Mapping) else None
        if status in SETTLED and (i >= len(before) or before[i] != status):
            out[str(status)] = out.get(str(status), 0) + 1
    return out
