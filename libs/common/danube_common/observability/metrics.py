"""Prometheus metrics: one registry per running service (several services can share a process in
tests), the metric definitions' shape, and the per-topic cardinality bound.

Names live in :mod:`.metric_names` (the one place they are spelled). A service exposes two kinds:

- values read when scraped (counts it already keeps: topics, producers, backlog, rates) by a
  custom collector built from :class:`MetricDef` families: no cost between scrapes;
- events observed as they happen (latency histograms, counters of things nobody else counts),
  as prometheus_client objects registered on the service's registry.

Per-topic series are bounded by ``metrics.max_topics``: a :class:`SeriesBound` chooses which
topics (or subscriptions) keep a series of their own, and the rest are summed under
``topic="_other"``; :class:`OtherTotals` keeps that sum of counters from ever going down while
topics come and go (a counter that goes down is a reset to Prometheus).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
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

    @property
    def exposed(self) -> str:
        """The name as scraped (counters get ``_total``)."""
        return f"{self.name}_total" if self.kind == "counter" else self.name

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
    (``process_*``) and garbage-collection pauses (``danube_gc_pause_seconds``).

    Counters and histograms are exposed without prometheus_client's ``*_created`` series (a
    creation timestamp per series, doubling their number; Prometheus does not need them): that
    switch is the library's, for the whole process."""
    disable_created_metrics()
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    # Imported here: gc_tuning takes its metric's name from metric_names, which imports this.
    from danube_common.gc_tuning import PAUSES, GcCollector

    PAUSES.install()
    registry.register(GcCollector())
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


K = TypeVar("K", bound=Hashable)


class SeriesBound(Generic[K]):
    """Which keys (topics, or (topic, subscription) pairs) get a series of their own: at most
    ``limit``, chosen at each scrape from ``activity`` (key -> how busy it is now, e.g. its
    message rate).

    A key keeps its series while it exists, so a series does not come and go with its rate;
    free places go to the busiest of the others; and a kept key that is idle (activity 0) gives
    its place up to a busy one. Everything not chosen is summed under :data:`OTHER_TOPICS`.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self._kept: set[K] = set()

    @property
    def kept(self) -> frozenset[K]:
        """The keys the last :meth:`select` chose."""
        return frozenset(self._kept)

    def select(self, activity: Mapping[K, float]) -> set[K]:
        """The keys of ``activity`` that get their own series now."""
        kept = {k for k in self._kept if k in activity}
        others = sorted((k for k in activity if k not in kept), key=lambda k: -activity[k])
        free = self.limit - len(kept)
        if free > 0:
            kept.update(others[:free])
            others = others[free:]
        busy = [k for k in others if activity[k] > 0]
        if busy:
            idle = [k for k in kept if activity[k] <= 0]
            for newcomer, leaving in zip(busy, idle, strict=False):
                kept.discard(leaving)
                kept.add(newcomer)
        self._kept = kept
        return set(kept)


class OtherTotals(Generic[K]):
    """Counters summed under :data:`OTHER_TOPICS` that never go down, and never jump.

    :meth:`total` gets the current counter values of the keys summed now. A key that leaves the
    sum (it got its own series, or its topic was unloaded) leaves what it added behind; a key
    whose values went down (its topic was loaded again and counts from 0) leaves its old values
    behind too. So the sum only grows, as a Prometheus counter must. A key that joins the sum
    after having had a series of its own (``shown``: its counts were already exposed there) adds
    only what it counts from then on, so the sum does not jump by its history.
    """

    def __init__(self, width: int) -> None:
        self.width = width
        self._retired = [0.0] * width
        self._last: dict[K, tuple[float, ...]] = {}
        #: What each key had counted when it joined (subtracted from its values).
        self._base: dict[K, tuple[float, ...]] = {}
        #: Some key was ever summed: the "_other" series exists and must not vanish.
        self.used = False

    def _retire(self, key: K) -> None:
        last, base = self._last.pop(key), self._base.pop(key)
        for i, (v, b) in enumerate(zip(last, base, strict=True)):
            self._retired[i] += v - b

    def total(self, members: Mapping[K, Sequence[float]], *, shown: Collection[K] = ()) -> list[float]:
        self.used = self.used or bool(members)
        for key in [k for k in self._last if k not in members]:
            self._retire(key)
        zero = (0.0,) * self.width
        for key, values in members.items():
            last = self._last.get(key)
            if last is None:
                base = tuple(values) if key in shown else zero
            elif any(v < old for v, old in zip(values, last, strict=True)):
                self._retire(key)
                base = zero
            else:
                base = self._base[key]
            self._last[key], self._base[key] = tuple(values), base
        sums = list(self._retired)
        for key in members:
            for i, (v, b) in enumerate(zip(self._last[key], self._base[key], strict=True)):
                sums[i] += v - b
        return sums
