"""The garbage collector of a service process: fewer, cheaper collections, and their pauses measured.

CPython's cyclic collector runs a young collection every 700 net allocations and, every 10 of
those, an older one; a full collection walks every tracked object of the process. A broker
allocates a few hundred objects per published batch (protobuf wrappers, futures, callbacks), so
with the defaults the collector ran thousands of times a second and took a fifth of a busy
broker's CPU at 100 topics (docs/benchmarks.md), each full collection pausing the event loop
for a walk over the whole heap. What it finds is rare: the data path frees almost everything by
reference counting.

:func:`tune` raises the young threshold and, once the service is serving, freezes what start-up
allocated (config, modules, caches: it lives as long as the process) so that full collections
no longer walk it. :data:`PAUSES` times every collection (``gc.callbacks``) for the
``danube_gc_pause_seconds`` histogram of each service's ``/metrics``.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from pydantic import Field

from danube_common.config import Frozen
from danube_common.observability.metric_names import GC_PAUSES

log = logging.getLogger(__name__)

#: Upper bounds (seconds) of the pause histogram's buckets.
PAUSE_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5)


class GcConfig(Frozen):
    """The cyclic garbage collector of the service's process."""

    #: Net allocations between young-generation collections (CPython's default: 700). 0 leaves
    #: the interpreter's thresholds as they are.
    young_threshold_objects: int = Field(default=50_000, ge=0)
    #: Collections of a generation between collections of the next one (CPython's: 10, 10).
    older_threshold_collections: int = Field(default=20, ge=1)
    #: Once serving, move everything allocated so far out of the collector's reach
    #: (``gc.freeze``): full collections then walk only what was allocated since.
    freeze_at_start: bool = True


class PauseRecorder:
    """Times every collection of the process (one per process: ``gc.callbacks`` is global)."""

    def __init__(self) -> None:
        self._started = 0.0
        #: Per generation: counts per bucket (the last one: over every bound), sum of seconds.
        self._buckets = [[0] * (len(PAUSE_BUCKETS_S) + 1) for _ in range(3)]
        self._sums = [0.0, 0.0, 0.0]
        self._installed = False

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self._on_gc)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._on_gc)
            self._installed = False

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        gen = min(int(info.get("generation", 0)), 2)
        i = 0
        while i < len(PAUSE_BUCKETS_S) and took > PAUSE_BUCKETS_S[i]:
            i += 1
        self._buckets[gen][i] += 1
        self._sums[gen] += took

    def snapshot(self) -> list[tuple[list[int], float]]:
        """Per generation: (counts per bucket, seconds in total)."""
        return [(list(b), s) for b, s in zip(self._buckets, self._sums, strict=True)]


PAUSES = PauseRecorder()


class GcCollector(Collector):
    """``danube_gc_pause_seconds{generation}`` from :data:`PAUSES`, for a service's registry."""

    def __init__(self, recorder: PauseRecorder = PAUSES) -> None:
        self._recorder = recorder

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(GC_PAUSES.name, GC_PAUSES.help, labels=list(GC_PAUSES.labels))

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(GC_PAUSES.name, GC_PAUSES.help, labels=list(GC_PAUSES.labels))
        for gen, (counts, total) in enumerate(self._recorder.snapshot()):
            cumulative, running = [], 0
            for bound, n in zip((*map(str, PAUSE_BUCKETS_S), "+Inf"), counts, strict=True):
                running += n
                cumulative.append((bound, running))
            family.add_metric([str(gen)], cumulative, total)
        yield family


_tuned = False


def tune(cfg: GcConfig) -> None:
    """Set the thresholds and start timing collections: at a service process's start (by
    ``service_main``; a service run inside another program, e.g. a test, leaves its GC alone)."""
    global _tuned
    _tuned = True
    PAUSES.install()
    if cfg.young_threshold_objects:
        older = cfg.older_threshold_collections
        gc.set_threshold(cfg.young_threshold_objects, older, older)


def serving(cfg: GcConfig) -> None:
    """The service is up: freeze what start-up allocated (see :class:`GcConfig`); nothing if
    :func:`tune` was not called in this process."""
    if _tuned and cfg.freeze_at_start:
        gc.collect()
        gc.freeze()
        log.debug("gc: %d start-up objects frozen", gc.get_freeze_count())
