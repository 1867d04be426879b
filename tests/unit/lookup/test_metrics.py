"""The lookup service's collector: lookups and placements from the resolver's counts."""

from __future__ import annotations

import pytest

from danube_lookup.metrics import lookup_families

pytestmark = pytest.mark.unit


def test_families() -> None:
    counts = {"cached": 5, "resolved": 2, "requested": 1, "placed": 0}
    got = {(s.name, tuple(s.labels.values())): s.value for f in lookup_families(counts) for s in f.samples}
    assert got == {
        ("danube_lookup_topic_lookups_total", ("cached",)): 5,
        ("danube_lookup_topic_lookups_total", ("resolved",)): 2,
        ("danube_lookup_placements_total", ("requested",)): 1,
        ("danube_lookup_placements_total", ("placed",)): 0,
    }


def test_missing_counts_read_as_zero() -> None:
    got = [s.value for f in lookup_families({}) for s in f.samples]
    assert got == [0, 0, 0, 0]
