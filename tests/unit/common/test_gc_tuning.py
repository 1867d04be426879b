"""The service processes' interpreter settings (garbage collector, GIL switch interval) and the
GC pause histogram."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest

from danube_common import gc_tuning
from danube_common.gc_tuning import GcCollector, GcConfig, PauseRecorder
from danube_common.observability.metrics import new_registry
from danube_common.service import ServiceConfig, tune_process


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    tuned = gc_tuning._tuned
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()
    gc_tuning._tuned = tuned


def make_cycles(n: int) -> None:
    for _ in range(n):
        a: list[object] = []
        a.append(a)


def test_the_recorder_times_each_collection_by_generation() -> None:
    rec = PauseRecorder()
    rec.install()
    try:
        make_cycles(10)
        gc.collect(0)
        gc.collect(2)
    finally:
        rec.uninstall()
    (young, _), _, (full, full_s) = rec.snapshot()
    assert sum(young) >= 1 and sum(full) >= 1
    assert full_s > 0
    gc.collect()
    assert rec.snapshot()[2][0] == full, "an uninstalled recorder counts nothing more"


def test_the_histogram_is_cumulative_and_named_as_documented() -> None:
    rec = PauseRecorder()
    rec.install()
    try:
        for _ in range(3):
            gc.collect(2)
    finally:
        rec.uninstall()
    fam = next(iter(GcCollector(rec).collect()))
    assert fam.name == "danube_gc_pause_seconds"
    full = {
        s.labels["le"]: s.value for s in fam.samples if s.labels.get("generation") == "2" and "le" in s.labels
    }
    values = [full[k] for k in sorted(full, key=lambda k: float(k))]
    assert values == sorted(values) and full["+Inf"] == 3


def test_every_service_registry_exports_the_pauses() -> None:
    registry = new_registry()
    gc.collect()
    text = generate_latest(registry).decode()
    line = next(x for x in text.splitlines() if x.startswith('danube_gc_pause_seconds_count{generation="2"}'))
    assert float(line.split()[-1]) >= 1


def test_tune_sets_the_thresholds_and_serving_freezes_start_up_objects(restore_gc: None) -> None:
    gc_tuning._tuned = False
    cfg = GcConfig(young_threshold_objects=12_345, older_threshold_collections=7)
    gc_tuning.serving(cfg)
    assert gc.get_freeze_count() == 0, "a service run inside another program leaves its GC alone"
    gc_tuning.tune(cfg)
    assert gc.get_threshold() == (12_345, 7, 7)
    gc_tuning.serving(cfg)
    assert gc.get_freeze_count() > 1000


def test_zero_leaves_the_interpreters_thresholds(restore_gc: None) -> None:
    before = gc.get_threshold()
    gc_tuning.tune(GcConfig(young_threshold_objects=0, freeze_at_start=False))
    gc_tuning.serving(GcConfig(young_threshold_objects=0, freeze_at_start=False))
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_service_process_takes_the_configured_switch_interval(restore_gc: None) -> None:
    before = sys.getswitchinterval()
    try:
        tune_process(ServiceConfig(gil_switch_interval_ms=0.25, gc=GcConfig(young_threshold_objects=0)))
        assert sys.getswitchinterval() == pytest.approx(0.00025)
        tune_process(ServiceConfig(gil_switch_interval_ms=0, gc=GcConfig(young_threshold_objects=0)))
        assert sys.getswitchinterval() == pytest.approx(0.00025), "0 leaves it"
    finally:
        sys.setswitchinterval(before)
