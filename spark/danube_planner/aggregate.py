"""The aggregation on plain Python data: reports -> per topic, per broker, per namespace loads.

:mod:`danube_planner.frames` computes exactly this with Spark DataFrames (the Spark test checks
they agree); this path serves small clusters (``engine: python``), the unit tests and the
benchmark's baseline. The steps, shared by both:

1. **Samples**: the current reports (always) and the history reports taken in the window,
   without duplicates (a broker's current report is usually in history too: same broker and
   ``at_ms`` = same report).
2. **Topic rates**: for every topic row of the samples, the mean of each rate over its rows (a
   topic that moved within the window keeps its history); backlog from its newest row.
3. **Topics** are those with an owner key plus those a current report lists. The owner is the
   owner key's broker, else the current report listing it (the newest, then the largest broker
   id, if two do mid-move).
4. **Unlisted topics** (owned, but listed by no current report: truncated reports, new topics)
   share evenly what their owner's current totals leave over after its listed rows
   (``estimated``).
5. **Brokers**: registered, reporting or named by an owner key. Rates are the sums over the
   topics they own; CPU and memory the mean over their samples; then the score
   (:mod:`danube_planner.model`).
6. **Topic loads**, **namespaces**, **hot topics** and the **imbalance** (CV over the active
   brokers).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from danube_common.load import LoadReport
from danube_common.load_score import cpu_fraction, floored_means, memory_fraction, score
from danube_planner.model import (
    AggregateParams,
    Aggregates,
    BrokerAgg,
    NamespaceAgg,
    PlannerInputs,
    TopicAgg,
    coefficient_of_variation,
    namespace_of,
    traffic_weight,
)

RATES = ("msg_rate_in", "msg_rate_out", "byte_rate_in", "byte_rate_out")


@dataclass(slots=True)
class _Rates:
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    byte_rate_in: float = 0.0
    byte_rate_out: float = 0.0
    backlog: float = 0.0


def parse_lines(lines: Sequence[str]) -> list[LoadReport]:
    return [LoadReport.from_json(json.loads(line)) for line in lines]


def samples_of(inp: PlannerInputs) -> tuple[list[LoadReport], list[LoadReport]]:
    """(current reports, every sample without duplicates)."""
    if inp.history_keys:
        raise ValueError(
            "the plain-Python aggregation needs the load history as lines (history_lines): "
            f"{len(inp.history_keys)} history object(s) were passed unread (history_keys)"
        )
    current = parse_lines(inp.current_lines)
    seen: dict[tuple[str, int], LoadReport] = {}
    for r in parse_lines(inp.history_lines):
        if inp.window_from_ms <= r.at_ms < inp.window_to_ms:
            seen[(r.broker_id, r.at_ms)] = r
    for r in current:
        seen[(r.broker_id, r.at_ms)] = r
    return current, list(seen.values())


def aggregate(inp: PlannerInputs, params: AggregateParams = AggregateParams()) -> Aggregates:
    current, samples = samples_of(inp)
    w = params.weights

    # 2. topic rates over the samples
    sums: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    newest: dict[str, tuple[int, str, float]] = {}
    for r in samples:
        for row in r.topics:
            acc = sums.setdefault(row.topic, [0.0, 0.0, 0.0, 0.0])
            acc[0] += row.msg_rate_in
            acc[1] += row.msg_rate_out
            acc[2] += row.byte_rate_in
            acc[3] += row.byte_rate_out
            counts[row.topic] = counts.get(row.topic, 0) + 1
            stamp = (r.at_ms, r.broker_id, float(row.backlog))
            if row.topic not in newest or stamp[:2] > newest[row.topic][:2]:
                newest[row.topic] = stamp

    # 3. which topics, and who owns them
    listed: dict[str, tuple[int, str]] = {}
    for r in current:
        for row in r.topics:
            key = (r.at_ms, r.broker_id)
            if row.topic not in listed or key > listed[row.topic]:
                listed[row.topic] = key
    owner: dict[str, str] = {t: o.broker_id for t, o in inp.owners.items()}
    for t, (_, b) in listed.items():
        owner.setdefault(t, b)

    # 4. what each broker's totals leave unlisted, shared by its unlisted topics
    unlisted_count: dict[str, int] = {}
    for t, b in owner.items():
        if t not in listed:
            unlisted_count[b] = unlisted_count.get(b, 0) + 1
    share: dict[str, _Rates] = {}
    for r in current:
        n = unlisted_count.get(r.broker_id, 0)
        if n == 0:
            continue
        share[r.broker_id] = _Rates(
            msg_rate_in=max(0.0, r.msg_rate_in - math.fsum(x.msg_rate_in for x in r.topics)) / n,
            msg_rate_out=max(0.0, r.msg_rate_out - math.fsum(x.msg_rate_out for x in r.topics)) / n,
            byte_rate_in=max(0.0, r.byte_rate_in - math.fsum(x.byte_rate_in for x in r.topics)) / n,
            byte_rate_out=max(0.0, r.byte_rate_out - math.fsum(x.byte_rate_out for x in r.topics)) / n,
            backlog=max(0.0, float(r.backlog - sum(x.backlog for x in r.topics))) / n,
        )

    rates: dict[str, _Rates] = {}
    for t in owner:
        if t in listed:
            s, n = sums[t], counts[t]
            rates[t] = _Rates(s[0] / n, s[1] / n, s[2] / n, s[3] / n, newest[t][2])
        else:
            rates[t] = share.get(owner[t], _Rates())

    # 5. brokers
    broker_ids = set(inp.broker_states) | {r.broker_id for r in current} | set(owner.values())
    cpu_sum: dict[str, float] = {}
    mem_sum: dict[str, float] = {}
    n_samples: dict[str, int] = {}
    for r in samples:
        cpu_sum[r.broker_id] = cpu_sum.get(r.broker_id, 0.0) + cpu_fraction(r)
        mem_sum[r.broker_id] = mem_sum.get(r.broker_id, 0.0) + memory_fraction(r)
        n_samples[r.broker_id] = n_samples.get(r.broker_id, 0) + 1
    owned: dict[str, list[str]] = {b: [] for b in broker_ids}
    for t, b in owner.items():
        owned[b].append(t)

    bare: list[BrokerAgg] = []
    for b in sorted(broker_ids):
        ts = owned[b]
        n = n_samples.get(b, 0)
        bare.append(
            BrokerAgg(
                broker_id=b,
                state=inp.broker_states.get(b, "unregistered"),
                topics=len(ts),
                msg_rate_in=math.fsum(rates[t].msg_rate_in for t in ts),
                msg_rate_out=math.fsum(rates[t].msg_rate_out for t in ts),
                byte_rate_in=math.fsum(rates[t].byte_rate_in for t in ts),
                byte_rate_out=math.fsum(rates[t].byte_rate_out for t in ts),
                backlog=math.fsum(rates[t].backlog for t in ts),
                cpu=cpu_sum.get(b, 0.0) / n if n else 0.0,
                memory=mem_sum.get(b, 0.0) / n if n else 0.0,
                score=0.0,
            )
        )
    means = floored_means([b.load() for b in bare if b.state == "active"])
    brokers = [
        BrokerAgg(
            **{
                **{f: getattr(b, f) for f in BrokerAgg.__dataclass_fields__},
                "score": score(b.load(), means, w),
            }
        )
        for b in bare
    ]

    # 6. topic loads
    by_id = {b.broker_id: b for b in brokers}
    weight_sum: dict[str, float] = {}
    for t, b in owner.items():
        x = rates[t]
        weight_sum[b] = weight_sum.get(b, 0.0) + traffic_weight(
            x.msg_rate_in + x.msg_rate_out, x.byte_rate_in + x.byte_rate_out
        )
    topics: list[TopicAgg] = []
    for t in sorted(owner):
        b, x = owner[t], rates[t]
        ba = by_id[b]
        msgs, bytes_ = x.msg_rate_in + x.msg_rate_out, x.byte_rate_in + x.byte_rate_out
        total_w = weight_sum.get(b, 0.0)
        part = traffic_weight(msgs, bytes_) / total_w if total_w > 0 else 1.0 / ba.topics
        extra = w.cpu * ba.cpu / means["cpu"] + w.memory * ba.memory / means["memory"]
        load = (
            w.topics / means["topics"] + w.msgs * msgs / means["msgs"] + w.bytes * bytes_ / means["bytes"]
        ) + extra * part
        topics.append(
            TopicAgg(
                topic=t,
                namespace=namespace_of(t),
                broker_id=b,
                msg_rate_in=x.msg_rate_in,
                msg_rate_out=x.msg_rate_out,
                byte_rate_in=x.byte_rate_in,
                byte_rate_out=x.byte_rate_out,
                backlog=x.backlog,
                estimated=t not in listed,
                load=load,
            )
        )

    ns_topics: dict[str, list[TopicAgg]] = {}
    for ta in topics:
        ns_topics.setdefault(ta.namespace, []).append(ta)
    namespaces = [
        NamespaceAgg(
            namespace=ns,
            topics=len(ts),
            brokers=len({x.broker_id for x in ts}),
            msg_rate_in=math.fsum(x.msg_rate_in for x in ts),
            msg_rate_out=math.fsum(x.msg_rate_out for x in ts),
            byte_rate_in=math.fsum(x.byte_rate_in for x in ts),
            byte_rate_out=math.fsum(x.byte_rate_out for x in ts),
            backlog=math.fsum(x.backlog for x in ts),
            load=math.fsum(x.load for x in ts),
        )
        for ns, ts in ns_topics.items()
    ]
    namespaces.sort(key=lambda n: (-n.load, n.namespace))
    hot = sorted(topics, key=lambda x: (-x.load, x.topic))[: max(0, params.hot_topics)]
    cv = coefficient_of_variation(b.score for b in brokers if b.state == "active")
    return Aggregates(
        brokers=brokers,
        topics=topics,
        namespaces=namespaces[: max(0, params.max_namespaces)],
        hot_topics=hot,
        means=means,
        cv=cv,
        samples=len(samples),
    )
