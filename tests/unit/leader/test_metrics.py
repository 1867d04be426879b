"""The leader service's collector: campaigns, elected campaigns and watches per role."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from danube_common.observability.metrics import SeriesBound
from danube_leader.election import Campaign
from danube_leader.metrics import leader_families, role_counts

pytestmark = pytest.mark.unit


class FakeCampaign(Campaign):
    """A campaign as isinstance() sees it, without its etcd machinery."""

    def __init__(self, role: str, elected: bool) -> None:
        self.role, self.elected = role, elected


@dataclass
class FakeWatch:
    role: str


def test_counts_per_role() -> None:
    streams = [
        FakeCampaign("load-manager", True),
        FakeCampaign("load-manager", False),
        FakeCampaign("spark-planner", False),
        FakeWatch("load-manager"),
        FakeWatch("other"),
    ]
    counts = role_counts(streams)  # type: ignore[arg-type]
    assert counts == {"load-manager": (2, 1, 1), "spark-planner": (1, 0, 0), "other": (0, 0, 1)}
    got = {
        (s.name, s.labels["role"]): s.value
        for f in leader_families(counts, SeriesBound(10))
        for s in f.samples
    }
    assert got[("danube_leader_campaigns", "load-manager")] == 2
    assert got[("danube_leader_campaigns_elected", "load-manager")] == 1
    assert got[("danube_leader_watches", "load-manager")] == 1
    assert got[("danube_leader_campaigns_elected", "spark-planner")] == 0
    assert got[("danube_leader_watches", "other")] == 1


def test_roles_beyond_the_bound_sum_under_other() -> None:
    counts = {f"role-{i}": (i, 0, 0) for i in range(1, 5)}
    got = {
        (s.name, s.labels["role"]): s.value
        for f in leader_families(counts, SeriesBound(2))
        for s in f.samples
        if s.name == "danube_leader_campaigns"
    }
    assert got == {
        ("danube_leader_campaigns", "role-4"): 4,
        ("danube_leader_campaigns", "role-3"): 3,
        ("danube_leader_campaigns", "_other"): 3,
    }
