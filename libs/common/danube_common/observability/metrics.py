"""Prometheus metrics: one registry per running service (several services can share a process in
tests), the metric definitions' shape, and the per-topic cardinality bound.

Names live in :mod:`.metric_names` (the one place they are spelled). A service exposes two kinds:

- values read when scraped (counts it already keeps: topics, producers, backlog, rates) by a
  custom collector built from :class:`MetricDef` families: no cost between scrapes;
- events observed as they happen (latency histograms, counters of things nobody else counts),
  as prometheus_client objects registered on the service's registry.

Per-topic series are bounded by ``metrics.max_topics``: :func:`top_topics` keeps the busiest
topics and the rest are summed under ``topic="_other"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.process_collector import ProcessCollector
from pydantic import Field

from danube_common.config import Frozen

#: The label value that sums every topic beyond ``metrics.max_topics``.
OTHER_TOPICS = "_other"

Kind = Literal["counter", "gauge", "histogram"]

#: Latency buckets in seconds, from 100 us to 10 s.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class MetricsConfig(Frozen):
    """The ``metrics`` section of every service."""

    #: Per-topic (and per-subscription) series are kept for at most this many topics, the
    #: busiest first; the others are summed under ``topic="_other"``. Bounds a scrape's size and
    #: Prometheus's memory: a series costs a few KiB there.
    max_topics: int = Field(default=500, ge=0)


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One metric: its name (counters without the ``_total`` suffix prometheus_client adds),
    type, help text and label names."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()

    def family(self) -> Metric:
        """An empty family to add samples to in a collector's ``collect``."""
        labels = list(self.labels)
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.help, labels=labels)
        if self.kind == "gauge":
            return GaugeMetricFamily(self.name, self.help, labels=labels)
        return HistogramMetricFamily(self.name, self.help, labels=labels)

    def counter(self, registry: CollectorRegistry) -> Counter:
        assert self.kind == "counter", self.name
        return Counter(self.name, self.help, list(self.labels), registry=registry)

    def gauge(self, registry: CollectorRegistry) -> Gauge:
        assert self.kind == "gauge", self.name
        return Gauge(self.name, self.help, list(self.labels), registry=registry)

    def histogram(
        self, registry: CollectorRegistry, buckets: Sequence[float] = LATENCY_BUCKETS_S
    ) -> Histogram:
        assert self.kind == "histogram", self.name
        return Histogram(self.name, self.help, list(self.labels), registry=registry, buckets=buckets)


def new_registry() -> CollectorRegistry:
    """A service's registry, with the process's CPU, memory and file descriptors
    (``process_*``)."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    return registry


T = TypeVar("T")


def top_topics(items: Iterable[T], *, key: Callable[[T], float], limit: int) -> tuple[list[T], list[T]]:
    """Split ``items`` into the ``limit`` with the largest ``key`` (kept as their own series) and
    the rest (summed under :data:`OTHER_TOPICS`)."""
    ordered = sorted(items, key=key, reverse=True)
    return ordered[:limit], ordered[limit:]


def add_samples(family: Metric, rows: Mapping[tuple[str, ...], float]) -> Metric:
    """Add one sample per label-values tuple to a counter/gauge family; return it."""
    for labels, value in rows.items():
        family.add_metric(list(labels), value)  # type: ignore[attr-defined]
    return family
