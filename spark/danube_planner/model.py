"""The planner's values: what a cycle reads (:class:`PlannerInputs`), what the aggregation makes of
it (:class:`Aggregates`, the same from the plain-Python path and the DataFrame path), the load
score, and the cluster load report's JSON. Pure: no I/O, no Spark.

**Load score** per broker: :mod:`danube_common.load_score` (the load manager's placement score;
the means are over the **active** brokers). The **imbalance** is the coefficient of variation
(population standard deviation / mean) of the active brokers' scores: 0 is perfectly even, 0.15
means brokers typically sit 15% off the mean.

**Topic load** splits a broker's score over its topics, so moving a topic moves its load::

    load(t) = w_topics / mean(topics) + w_msgs * msgs(t) / mean + w_bytes * bytes(t) / mean
            + (w_cpu * cpu(b) / mean + w_memory * memory(b) / mean) * share(t)

where ``share(t)`` is the topic's part of its broker's traffic weight (bytes in + out plus 100
bytes per message, as ``TopicLoad.weight``; an even split when the broker has no traffic). The
loads of a broker's topics add up to its score. Predictions assume a moved topic takes its
share of CPU and memory with it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from danube_common.load import MSG_COST_BYTES, LoadReport
from danube_common.load_score import BrokerLoad, ScoreWeights

#: The planner's role in the leader service.
PLANNER_ROLE = "spark-planner"
#: Version of the report and plan JSON documents.
SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class OwnerRow:
    """One ``/{cluster}/owners/{ns}/{t}`` key."""

    topic: str
    broker_id: str
    #: When the topic was given to this broker (0: unknown, treated as old).
    assigned_at_ms: int = 0
    #: The owner key's mod_revision (the ownership epoch the load manager fences a move on).
    epoch: int = 0
    #: Set while a move is in progress.
    moving_to: str = ""


def split_report_lines(lines: Iterable[str]) -> tuple[list[str], int]:
    """``(lines that parse as load reports, how many did not)``: a malformed line is skipped,
    the same way by the driver and by the executors that fetch history themselves."""
    out: list[str] = []
    bad = 0
    for line in lines:
        try:
            LoadReport.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError):
            bad += 1
            continue
        out.append(line)
    return out, bad


@dataclass(frozen=True, slots=True)
class PlannerInputs:
    """Everything one cycle aggregates. Reports are JSON lines (``LoadReport.to_json()``), the
    form they have in etcd and in load history, so both paths parse the same text."""

    now_ms: int
    #: History reports taken in ``[window_from_ms, window_to_ms)`` count; current ones always do.
    window_from_ms: int
    window_to_ms: int
    #: The brokers' latest reports (``/{cluster}/load/{id}``).
    current_lines: Sequence[str]
    #: Load history lines (any time: filtered by the window).
    history_lines: Sequence[str] = ()
    #: Load history objects not read yet (keys in the object store): an engine that fetches
    #: history itself (the Spark engine's executors, :mod:`danube_planner.history_fetch`) reads
    #: them; the driver then holds only the keys. Empty for the plain-Python engine.
    history_keys: Sequence[str] = ()
    owners: Mapping[str, OwnerRow] = field(default_factory=dict)
    #: Registered brokers -> effective state (active, draining, drained).
    broker_states: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AggregateParams:
    weights: ScoreWeights = field(default_factory=ScoreWeights)
    hot_topics: int = 20
    max_namespaces: int = 1000


@dataclass(frozen=True, slots=True)
class TopicAgg:
    topic: str
    namespace: str
    broker_id: str
    msg_rate_in: float
    msg_rate_out: float
    byte_rate_in: float
    byte_rate_out: float
    backlog: float
    #: True when no current report lists the topic (the broker's report was truncated, or the
    #: topic is new): its rates are an even share of what its broker's totals leave unlisted.
    estimated: bool
    load: float


@dataclass(frozen=True, slots=True)
class BrokerAgg:
    broker_id: str
    #: active, draining, drained, or unregistered (a report or owner key names it, but it has
    #: no registration).
    state: str
    topics: int
    msg_rate_in: float
    msg_rate_out: float
    byte_rate_in: float
    byte_rate_out: float
    backlog: float
    #: CPU used / cores, averaged over the window's reports.
    cpu: float
    #: Resident memory / machine memory, averaged over the window's reports.
    memory: float
    score: float

    def load(self) -> BrokerLoad:
        """What the shared load score looks at."""
        return BrokerLoad(
            self.broker_id,
            self.topics,
            msgs=self.msg_rate_in + self.msg_rate_out,
            bytes=self.byte_rate_in + self.byte_rate_out,
            cpu=self.cpu,
            memory=self.memory,
        )


@dataclass(frozen=True, slots=True)
class NamespaceAgg:
    namespace: str
    topics: int
    brokers: int
    msg_rate_in: float
    msg_rate_out: float
    byte_rate_in: float
    byte_rate_out: float
    backlog: float
    load: float


@dataclass(frozen=True, slots=True)
class Aggregates:
    #: Every known broker, by id.
    brokers: list[BrokerAgg]
    #: Every topic (owned or listed by a current report), by name.
    topics: list[TopicAgg]
    #: The busiest namespaces (by load, then name), at most ``max_namespaces``.
    namespaces: list[NamespaceAgg]
    #: The ``hot_topics`` busiest topics (by load, then name).
    hot_topics: list[TopicAgg]
    #: The floored mean of each score dimension over the active brokers.
    means: dict[str, float]
    #: Coefficient of variation of the active brokers' scores.
    cv: float
    #: Reports aggregated (current + history in the window, without duplicates).
    samples: int

    def active_scores(self) -> dict[str, float]:
        return {b.broker_id: b.score for b in self.brokers if b.state == "active"}


# ---------------------------------------------------------------- pure helpers
def namespace_of(topic: str) -> str:
    """``/ns/t`` -> ``ns`` (``""`` for a malformed name)."""
    parts = topic.split("/")
    return parts[1] if len(parts) >= 3 else ""


def coefficient_of_variation(values: Iterable[float]) -> float:
    """Population standard deviation / mean; 0 for fewer than two values or a mean <= 0."""
    xs = list(values)
    if len(xs) < 2:
        return 0.0
    mean = math.fsum(xs) / len(xs)
    if mean <= 0:
        return 0.0
    var = math.fsum((x - mean) ** 2 for x in xs) / len(xs)
    return math.sqrt(var) / mean


def traffic_weight(msgs: float, bytes_: float) -> float:
    return bytes_ + MSG_COST_BYTES * msgs


def _r(x: float, digits: int = 6) -> float:
    return round(x, digits)


def broker_json(b: BrokerAgg) -> dict[str, Any]:
    return {
        "broker_id": b.broker_id,
        "state": b.state,
        "topics": b.topics,
        "msg_rate_in": _r(b.msg_rate_in, 3),
        "msg_rate_out": _r(b.msg_rate_out, 3),
        "byte_rate_in": _r(b.byte_rate_in, 3),
        "byte_rate_out": _r(b.byte_rate_out, 3),
        "backlog": round(b.backlog),
        "cpu": _r(b.cpu),
        "memory": _r(b.memory),
        "score": _r(b.score),
    }


def topic_json(t: TopicAgg) -> dict[str, Any]:
    return {
        "topic": t.topic,
        "broker_id": t.broker_id,
        "load": _r(t.load),
        "msg_rate_in": _r(t.msg_rate_in, 3),
        "msg_rate_out": _r(t.msg_rate_out, 3),
        "byte_rate_in": _r(t.byte_rate_in, 3),
        "byte_rate_out": _r(t.byte_rate_out, 3),
        "backlog": round(t.backlog),
        "estimated": t.estimated,
    }


def namespace_json(n: NamespaceAgg) -> dict[str, Any]:
    return {
        "namespace": n.namespace,
        "topics": n.topics,
        "brokers": n.brokers,
        "msg_rate_in": _r(n.msg_rate_in, 3),
        "msg_rate_out": _r(n.msg_rate_out, 3),
        "byte_rate_in": _r(n.byte_rate_in, 3),
        "byte_rate_out": _r(n.byte_rate_out, 3),
        "backlog": round(n.backlog),
        "load": _r(n.load),
    }


def report_json(
    agg: Aggregates,
    *,
    generated_at_ms: int,
    window_from_ms: int,
    window_to_ms: int,
    history_objects: int,
    weights: ScoreWeights,
    planner: Mapping[str, Any],
    plan: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The cluster load report written to ``/{cluster}/load_report`` (schema: spark/README.md)."""
    active = agg.active_scores()
    scores = list(active.values())
    return {
        "version": SCHEMA_VERSION,
        "generated_at_ms": generated_at_ms,
        "window": {
            "from_ms": window_from_ms,
            "to_ms": window_to_ms,
            "history_objects": history_objects,
            "samples": agg.samples,
        },
        "planner": dict(planner),
        "score": {"weights": weights.to_json(), "means": {k: _r(v) for k, v in agg.means.items()}},
        "imbalance": {
            "cv": _r(agg.cv),
            "active_brokers": len(scores),
            "mean_score": _r(math.fsum(scores) / len(scores)) if scores else 0.0,
            "min_score": _r(min(scores)) if scores else 0.0,
            "max_score": _r(max(scores)) if scores else 0.0,
        },
        "totals": {
            "brokers": len(agg.brokers),
            "topics": len(agg.topics),
            "msg_rate_in": _r(math.fsum(t.msg_rate_in for t in agg.topics), 3),
            "msg_rate_out": _r(math.fsum(t.msg_rate_out for t in agg.topics), 3),
            "byte_rate_in": _r(math.fsum(t.byte_rate_in for t in agg.topics), 3),
            "byte_rate_out": _r(math.fsum(t.byte_rate_out for t in agg.topics), 3),
            "backlog": round(math.fsum(t.backlog for t in agg.topics)),
        },
        "brokers": [broker_json(b) for b in agg.brokers],
        "namespaces": [namespace_json(n) for n in agg.namespaces],
        "hot_topics": [topic_json(t) for t in agg.hot_topics],
        "plan": dict(plan) if plan is not None else None,
    }
