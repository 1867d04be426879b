"""What the active load manager should do now, given the cluster's state. Pure functions.

One pass of :func:`next_actions` turns a :class:`Snapshot` (brokers, their admin states and load
reports, ownership, placement and move requests) into actions, in this order:

1. **Re-place** every topic whose owner is no longer registered (its lease expired).
2. **Place** every requested (unassigned) topic that has no owner yet.
3. **Move** topics an admin asked to move (to the named broker, or the best other one).
4. **Plans**: start the pending moves of rebalancing plans that are still valid (:mod:`rebalance_plans`).
5. **Drain**: move topics off brokers whose admin state is ``draining``, or that are shutting
   down (their registration says ``draining``: a graceful stop hands each topic over while the
   broker still serves it); an admin-drained broker that owns nothing (and has no move in flight)
   is marked ``drained``.

Moves are bounded: at most ``max_moves_in_flight`` topics are mid-move at once (counting those
already marked ``moving_to``), and a topic whose move was started less than ``move_cooldown_s``
ago is not moved again (an abandoned move is retried after the cooldown). Targets are only
``active`` brokers that are registered, never the topic's current owner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from danube_common.load import LoadReport
from danube_common.load_score import ScoreWeights
from danube_common.records import BrokerRecord, Ownership
from danube_load_manager.rebalance_plans import startable
from danube_load_manager.scoring import Placer


@dataclass(frozen=True, slots=True)
class Snapshot:
    brokers: Mapping[str, BrokerRecord]
    #: Admin states (``draining`` / ``drained`` / ``active``) by broker id; absent = active.
    admin_states: Mapping[str, str]
    #: mod_revision of each admin state key (marking ``drained`` is fenced on it).
    admin_state_revisions: Mapping[str, int]
    reports: Mapping[str, LoadReport]
    owners: Mapping[str, Ownership]
    #: Topics with a placement request.
    unassigned: frozenset[str] = frozenset()
    #: Move requests: topic -> target broker ("" = the best other broker).
    move_requests: Mapping[str, str] = field(default_factory=dict)
    #: Rebalancing plans (the Spark planner's), by plan id, and their mod_revisions.
    plans: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    plan_revisions: Mapping[str, int] = field(default_factory=dict)
    #: The ``traceparent`` carried by each placement request, move request (by topic) and admin
    #: state (by broker id), when the writer's span was sampled: decisions continue those traces.
    placement_traces: Mapping[str, str] = field(default_factory=dict)
    move_traces: Mapping[str, str] = field(default_factory=dict)
    drain_traces: Mapping[str, str] = field(default_factory=dict)
    #: Topics per broker and the topics mid-move, when the caller keeps them with ``owners``
    #: (the view does); None: counted from ``owners`` (a walk of every topic).
    counts: Mapping[str, int] | None = None
    moving: frozenset[str] | None = None

    def state_of(self, broker_id: str) -> str:
        """Effective state: the broker's own ``draining`` (shutting down) wins, then the admin's."""
        rec = self.brokers.get(broker_id)
        if rec is not None and rec.state != "active":
            return rec.state
        return self.admin_states.get(broker_id, "active")

    def active_brokers(self) -> list[str]:
        return sorted(b for b in self.brokers if self.state_of(b) == "active")

    def topic_counts(self) -> dict[str, int]:
        if self.counts is not None:
            return dict(self.counts)
        counts: dict[str, int] = {}
        for own in self.owners.values():
            counts[own.broker_id] = counts.get(own.broker_id, 0) + 1
        return counts

    def moves_in_flight(self) -> int:
        if self.moving is not None:
            return len(self.moving)
        return sum(1 for o in self.owners.values() if o.moving_to)

    def orphans(self, counts: Mapping[str, int]) -> list[str]:
        """Topics whose owner is not registered, by name (``counts``: :meth:`topic_counts`; no
        walk of every topic while every owning broker is registered)."""
        if all(b in self.brokers for b, n in counts.items() if n > 0):
            return []
        return sorted(n for n, o in self.owners.items() if o.broker_id not in self.brokers)


#: The candidates' load scores when a target was picked, ``(broker_id, score)`` by broker id
#: (lower is less loaded): why the decision chose ``to``. Empty when no scoring was involved.
Scores = tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class Place:
    topic: str
    to: str
    scores: Scores = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class Replace:
    """``topic``'s owner ``dead`` is unregistered: give the topic to ``to`` (fenced on ``epoch``)."""

    topic: str
    dead: str
    epoch: int
    to: str
    scores: Scores = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    owner: str
    epoch: int
    to: str
    reason: str
    #: (plan_id, index of the move in the plan) for a move of a rebalancing plan.
    plan: tuple[str, int] | None = None
    scores: Scores = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class DropMoveRequest:
    topic: str
    why: str


@dataclass(frozen=True, slots=True)
class MarkDrained:
    broker_id: str
    #: The admin state key's mod_revision that said ``draining``.
    revision: int


Action = Place | Replace | Move | DropMoveRequest | MarkDrained


@dataclass(frozen=True, slots=True)
class Limits:
    max_moves_in_flight: int = 4
    move_cooldown_s: float = 10.0
    weights: ScoreWeights = field(default_factory=ScoreWeights)


def next_actions(
    snap: Snapshot,
    *,
    now_s: float,
    last_move_s: Mapping[str, float],
    limits: Limits = Limits(),
    now_ms: int = 0,
) -> list[Action]:
    """The actions to take now (see the module docstring for the order and the bounds)."""
    active = snap.active_brokers()
    counts = snap.topic_counts()
    placer = Placer(active, counts, snap.reports, limits.weights)
    actions: list[Action] = []

    for name in snap.orphans(counts):
        orphan = snap.owners[name]
        to = placer.pick()
        if to is None:
            break  # no active broker: nothing can be re-placed yet
        actions.append(Replace(name, orphan.broker_id, orphan.epoch, to, placer.last_scores))

    for name in sorted(snap.unassigned):
        if name in snap.owners:
            continue
        to = placer.pick()
        if to is None:
            break
        actions.append(Place(name, to, placer.last_scores))

    in_flight = snap.moves_in_flight()
    budget = max(0, limits.max_moves_in_flight - in_flight)

    def cooling(topic: str) -> bool:
        at = last_move_s.get(topic)
        return at is not None and now_s - at < limits.move_cooldown_s

    for name in sorted(snap.move_requests):
        own = snap.owners.get(name)
        wanted = snap.move_requests[name]
        if own is None:
            actions.append(DropMoveRequest(name, "the topic has no owner"))
            continue
        if own.moving_to or own.broker_id not in snap.brokers or cooling(name):
            continue  # wait: mid-move, or its owner is being replaced, or too soon after the last move
        if wanted and wanted == own.broker_id:
            actions.append(DropMoveRequest(name, f"already on broker {wanted}"))
            continue
        if wanted and wanted not in active:
            actions.append(DropMoveRequest(name, f"broker {wanted} is not an active registered broker"))
            continue
        if budget <= 0:
            break
        to = wanted or placer.pick(exclude=own.broker_id)
        if to is None:
            actions.append(DropMoveRequest(name, "no other active broker"))
            continue
        placer.moved_away(own.broker_id)
        scored = () if wanted else placer.last_scores
        actions.append(Move(name, own.broker_id, own.epoch, to, "requested", scores=scored))
        budget -= 1

    started = {a.topic for a in actions if isinstance(a, Move)}
    for plan_id, index, move in startable(snap.plans, snap.owners, active, now_ms=now_ms):
        name = str(move["topic"])
        if name in started or name in snap.move_requests or cooling(name):
            continue
        if budget <= 0:
            break
        own = snap.owners[name]
        placer.moved_away(own.broker_id)
        actions.append(
            Move(name, own.broker_id, own.epoch, str(move["to"]), f"plan {plan_id}", (plan_id, index))
        )
        started.add(name)
        budget -= 1

    for broker_id in sorted(snap.brokers):
        admin_draining = snap.admin_states.get(broker_id) == "draining"
        # A broker shutting down says ``draining`` in its own registration: its topics are handed
        # over while it still serves them (its lame-duck period), not re-placed after it is gone.
        stopping = snap.brokers[broker_id].state == "draining"
        if not admin_draining and not stopping:
            continue
        owned = sorted(n for n, o in snap.owners.items() if o.broker_id == broker_id)
        if not owned:
            if admin_draining:
                actions.append(MarkDrained(broker_id, snap.admin_state_revisions.get(broker_id, 0)))
            continue
        for name in owned:
            current = snap.owners[name]
            if current.moving_to or cooling(name) or name in snap.move_requests:
                continue
            if budget <= 0:
                break
            to = placer.pick(exclude=broker_id)
            if to is None:
                break
            placer.moved_away(broker_id)
            actions.append(
                Move(
                    name,
                    broker_id,
                    current.epoch,
                    to,
                    f"draining broker {broker_id}",
                    scores=placer.last_scores,
                )
            )
            budget -= 1
    return actions
