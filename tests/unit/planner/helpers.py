"""Synthetic clusters for the planner tests (plain data, no I/O)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from danube_common.load import LoadReport, TopicLoad
from danube_planner.model import OwnerRow, PlannerInputs

NOW = 1_700_000_000_000


def report(
    broker: str,
    at_ms: int,
    topics: list[TopicLoad],
    *,
    cpu: float = 0.5,
    cores: int = 2,
    rss: int = 1 << 30,
    total: int = 8 << 30,
    max_topics: int = 10_000,
) -> LoadReport:
    return LoadReport.build(
        broker,
        at_ms,
        topics,
        interval_s=5.0,
        cpu_usage=cpu,
        cpu_cores=cores,
        mem_rss_bytes=rss,
        mem_total_bytes=total,
        max_topics=max_topics,
    )


def line(r: LoadReport) -> str:
    return json.dumps(r.to_json())


@dataclass
class Synthetic:
    """A cluster: current reports, owner keys, broker states, and some history."""

    current: list[LoadReport] = field(default_factory=list)
    history: list[LoadReport] = field(default_factory=list)
    owners: dict[str, OwnerRow] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)

    def inputs(self, *, window_ms: int = 600_000) -> PlannerInputs:
        return PlannerInputs(
            now_ms=NOW,
            window_from_ms=NOW - window_ms,
            window_to_ms=NOW,
            current_lines=[line(r) for r in self.current],
            history_lines=[line(r) for r in self.history],
            owners=self.owners,
            broker_states=self.states,
        )


def zipf_cluster(
    *,
    brokers: int,
    topics: int,
    seed: int = 7,
    namespaces: int = 5,
    history_samples: int = 0,
    skew: float = 1.1,
    max_topics: int = 10_000,
) -> Synthetic:
    """Topic loads drawn from a Zipf-like law (rank r gets 1 / r**skew of the traffic), topics
    placed on brokers at random with a bias to the first ones, so the cluster starts skewed."""
    rnd = random.Random(seed)
    ids = [f"b{i:03d}" for i in range(brokers)]
    weights = [1.0 / (i + 1) for i in range(brokers)]  # early brokers get more topics
    placed: dict[str, list[TopicLoad]] = {b: [] for b in ids}
    ranks = list(range(1, topics + 1))
    rnd.shuffle(ranks)
    syn = Synthetic(states=dict.fromkeys(ids, "active"))
    for i, rank in enumerate(ranks):
        msgs = 20_000.0 / rank**skew
        name = f"/ns{i % namespaces}/topic-{i}"
        t = TopicLoad(
            name,
            msg_rate_in=msgs,
            byte_rate_in=msgs * 200,
            msg_rate_out=msgs * 1.5,
            byte_rate_out=msgs * 300,
            backlog=rnd.randint(0, 1000),
            producers=1,
            consumers=1,
        )
        b = rnd.choices(ids, weights)[0]
        placed[b].append(t)
        syn.owners[name] = OwnerRow(name, b, assigned_at_ms=NOW - 3_600_000, epoch=1000 + i)
    for b, ts in placed.items():
        busy = sum(t.weight for t in ts)
        cpu = min(2.0, 0.05 + busy / 5e8)
        syn.current.append(report(b, NOW - 1000, ts, cpu=cpu, max_topics=max_topics))
        for k in range(history_samples):
            scale = 0.8 + 0.4 * rnd.random()
            older = [
                TopicLoad(
                    t.topic,
                    msg_rate_in=t.msg_rate_in * scale,
                    byte_rate_in=t.byte_rate_in * scale,
                    msg_rate_out=t.msg_rate_out * scale,
                    byte_rate_out=t.byte_rate_out * scale,
                    backlog=t.backlog,
                )
                for t in ts
            ]
            syn.history.append(report(b, NOW - 5000 * (k + 2), older, cpu=cpu * scale, max_topics=max_topics))
    return syn
