"""The lookup service's Prometheus collector: topic lookups and placements, counted by the
resolver behind Discovery and the admin API (:class:`danube_common.placement.Resolver`), read
when ``/metrics`` is scraped. Refused calls (with auth on) are counted by ``start_http``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.metrics_core import Metric

from danube_common.observability import metric_names as mn
from danube_common.observability.metrics import add_samples
from danube_common.placement import Resolver

#: The resolver's counts behind each family's label values.
LOOKUP_SOURCES = ("cached", "resolved")
PLACEMENT_KINDS = ("requested", "placed")


def lookup_families(counts: Mapping[str, int]) -> list[Metric]:
    return [
        add_samples(mn.LOOKUPS.family(), {(k,): counts.get(k, 0) for k in LOOKUP_SOURCES}),
        add_samples(mn.PLACEMENTS.family(), {(k,): counts.get(k, 0) for k in PLACEMENT_KINDS}),
    ]


class LookupCollector:
    def __init__(self, resolver: Resolver) -> None:
        self._resolver = resolver

    def describe(self) -> list[Metric]:
        return [mn.LOOKUPS.family(), mn.PLACEMENTS.family()]

    def collect(self) -> Iterator[Metric]:
        yield from lookup_families(self._resolver.counts)
