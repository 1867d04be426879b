"""The leader service's Prometheus collector: the campaigns and watches this replica carries,
per role, read from :class:`~danube_leader.election.Elections` when ``/metrics`` is scraped.

Roles are names callers choose: at most ``metrics.max_topics`` of them get series of their own
(the rest are summed under ``role="_other"``). Which candidate leads a role is the elected
services' own metric (``danube_leader_election_state``); here, ``campaigns_elected`` says how
many of the campaigns this replica carries hold their role (summed over the replicas: 1 per
role that has a leader).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import Metric

from danube_common.observability import metric_names as mn
from danube_common.observability.metrics import OTHER_TOPICS, MetricDef, SeriesBound
from danube_leader.election import Campaign, Elections, LeaderWatch

FAMILIES: tuple[MetricDef, ...] = (mn.LEADER_CAMPAIGNS, mn.LEADER_CAMPAIGNS_ELECTED, mn.LEADER_WATCHES)


def role_counts(streams: Iterable[Campaign | LeaderWatch]) -> dict[str, tuple[int, int, int]]:
    """role -> (campaigns, of which elected, watches)."""
    out: dict[str, tuple[int, int, int]] = {}
    for s in streams:
        c, e, w = out.get(s.role, (0, 0, 0))
        if isinstance(s, Campaign):
            out[s.role] = (c + 1, e + int(s.elected), w)
        else:
            out[s.role] = (c, e, w + 1)
    return out


def leader_families(counts: dict[str, tuple[int, int, int]], bound: SeriesBound[str]) -> list[Metric]:
    families = [d.family() for d in FAMILIES]
    kept = bound.select({role: float(sum(v)) for role, v in counts.items()})
    rows = {role: v for role, v in counts.items() if role in kept}
    others = [v for role, v in counts.items() if role not in kept]
    if others:
        rows[OTHER_TOPICS] = (
            sum(v[0] for v in others),
            sum(v[1] for v in others),
            sum(v[2] for v in others),
        )
    for role in sorted(rows):
        for fam, value in zip(families, rows[role], strict=True):
            fam.add_metric([role], value)  # type: ignore[attr-defined]
    return families


class LeaderCollector:
    def __init__(self, elections: Elections, *, max_roles: int) -> None:
        self._elections = elections
        self._bound: SeriesBound[str] = SeriesBound(max_roles)

    def describe(self) -> list[Metric]:
        return [d.family() for d in FAMILIES]

    def collect(self) -> Iterator[Metric]:
        yield from leader_families(role_counts(self._elections.streams), self._bound)
