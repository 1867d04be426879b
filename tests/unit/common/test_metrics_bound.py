"""The per-topic series bound (SeriesBound) and the never-decreasing "_other" counters
(OtherTotals), in tables; and the shape of every metric definition."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from danube_common.observability import metric_names as mn
from danube_common.observability.metrics import MetricDef, OtherTotals, SeriesBound

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("limit", "scrapes", "kept"),
    [
        # The busiest get the places.
        (2, [{"a": 1.0, "b": 5.0, "c": 3.0}], {"b", "c"}),
        # Fewer keys than places: all of them.
        (5, [{"a": 0.0, "b": 0.0}], {"a", "b"}),
        # No place at all.
        (0, [{"a": 9.0}], set()),
        # A kept key stays while it exists, even when another becomes busier ...
        (1, [{"a": 1.0, "b": 0.0}, {"a": 1.0, "b": 50.0}], {"a"}),
        # ... unless it went idle: then the busiest other takes its place.
        (1, [{"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 50.0}], {"b"}),
        # An idle key is not replaced by another idle one.
        (1, [{"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 0.0}], {"a"}),
        # A key that is gone frees its place.
        (1, [{"a": 1.0, "b": 0.5}, {"b": 0.5}], {"b"}),
        # Two idle kept keys give way to the two busiest newcomers, not to the third.
        (2, [{"a": 1.0, "b": 1.0}, {"a": 0.0, "b": 0.0, "c": 3.0, "d": 2.0, "e": 1.0}], {"c", "d"}),
    ],
)
def test_series_bound(limit: int, scrapes: list[dict[str, float]], kept: set[str]) -> None:
    bound: SeriesBound[str] = SeriesBound(limit)
    chosen: set[str] = set()
    for activity in scrapes:
        chosen = bound.select(activity)
        assert len(chosen) <= limit
        assert chosen <= set(activity)
    assert chosen == kept


def test_series_bound_many_keys_stay_within_the_limit() -> None:
    bound: SeriesBound[int] = SeriesBound(10)
    for round_ in range(20):
        activity = {k: float((k * 7 + round_) % 13) for k in range(1000)}
        assert len(bound.select(activity)) == 10


@pytest.mark.parametrize(
    ("rounds", "expected"),
    [
        # Plain sums.
        ([{"a": (1, 10), "b": (2, 20)}], [3, 30]),
        # A key leaves (its own series, or unloaded): its last values stay in the sum.
        ([{"a": (1, 10), "b": (2, 20)}, {"b": (5, 50)}], [6, 60]),
        # A key comes back from 0 (its topic was loaded again): the old values stay too.
        ([{"a": (7, 70)}, {"a": (1, 10)}], [8, 80]),
        # Only a component went down: still a reset of the key.
        ([{"a": (7, 70)}, {"a": (9, 5)}], [16, 75]),
        # Nothing at all.
        ([{}], [0, 0]),
    ],
)
def test_other_totals(rounds: list[dict[str, tuple[int, int]]], expected: list[int]) -> None:
    other: OtherTotals[str] = OtherTotals(2)
    last: list[float] = [0.0, 0.0]
    for members in rounds:
        now = other.total(members)
        assert all(n >= p for n, p in zip(now, last, strict=True)), "an _other counter went down"
        last = now
    assert last == expected


def test_a_key_demoted_to_other_adds_only_what_it_counts_from_then_on() -> None:
    other: OtherTotals[str] = OtherTotals(1)
    assert other.total({"b": (10,)}) == [10]  # "a" has a series of its own
    assert other.total({"b": (10,), "a": (500,)}, shown={"a"}) == [10]  # a's 500 were shown already
    assert other.total({"b": (12,), "a": (503,)}, shown=set()) == [15]
    assert other.total({"b": (12,)}) == [15]  # a leaves: what it added stays
    # A key never shown joins with everything it counted.
    assert other.total({"b": (12,), "c": (7,)}) == [22]


def test_other_totals_used_once_summed() -> None:
    other: OtherTotals[str] = OtherTotals(1)
    assert not other.used
    other.total({})
    assert not other.used
    other.total({"a": (1,)})
    assert other.used
    assert other.total({}) == [1]


NAME = re.compile(r"^danube_[a-z0-9_]+$")


@pytest.mark.parametrize("d", mn.ALL, ids=lambda d: d.name)
def test_metric_definitions(d: MetricDef) -> None:
    assert NAME.match(d.name), d.name
    assert not d.name.endswith("_total"), "counters are named without _total (the library adds it)"
    assert d.help.endswith("."), "help text is a sentence"
    if d.kind == "histogram":  # a base unit (latencies in seconds) or what it counts, last
        assert d.name.endswith(("_seconds", "_bytes", "_topics", "_messages")), "histograms name their unit"
    # Each registers on a registry of its own and is exposed under its exposed name.
    registry = CollectorRegistry()
    made = {"counter": d.counter, "gauge": d.gauge, "histogram": d.histogram}[d.kind](registry)
    if d.labels:
        made.labels(*["x"] * len(d.labels))
    text = generate_latest(registry).decode()
    assert f"# TYPE {d.exposed} {d.kind}" in text


def test_metric_names_are_unique() -> None:
    names = [d.name for d in mn.ALL]
    assert len(names) == len(set(names))
    assert len(mn.ALL) > 40
