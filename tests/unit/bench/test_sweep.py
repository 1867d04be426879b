"""Sweeps, concurrent set-up, role CPU, sweep reports and py-spy summaries: no servers, no py-spy."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bench.harness import sweep_report
from bench.harness.clients import bounded_gather
from bench.harness.profile import OTHER, category, render, summarize_raw
from bench.harness.runner import _role_cpu_pct, create_topics, run_workload
from bench.harness.sweep import (
    Sweep,
    memory_per_topic_bytes,
    parse_sweep,
    progress_points,
    sweep_workload,
)
from bench.harness.workload import WorkloadError

from .test_harness import FakeDriver

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


# -- parsing and shapes ------------------------------------------------------------------------


def test_parse_sweep() -> None:
    assert parse_sweep("topics=10,100,1_000") == Sweep("topics", (10, 100, 1000))
    assert parse_sweep("partitions=1, 2,64") == Sweep("partitions", (1, 2, 64))


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("topics", "dimension one of"),
        ("brokers=1,2", "dimension one of"),
        ("topics=", "integers from 1"),
        ("topics=0,10", "integers from 1"),
        ("topics=10,x", "integers from 1"),
        ("topics=1000000", "integers from 1"),
        ("topics=10,10", "repeated"),
    ],
)
def test_parse_sweep_rejects(spec: str, needle: str) -> None:
    with pytest.raises(WorkloadError, match=needle):
        parse_sweep(spec)


def test_topic_sweep_shape_keeps_the_total_rate() -> None:
    wl = sweep_workload(Sweep("topics", (10, 1000)), 1000)
    assert (wl.topics, wl.partitions_per_topic, wl.producers_per_topic) == (1000, 1, 1)
    assert (wl.subscriptions_per_topic, wl.consumers_per_subscription) == (1, 1)
    assert wl.producer_rates == (5000,) and wl.message_size_bytes == 1024 and wl.reliable
    assert wl.key == "sweep-topics-1000"
    assert sweep_workload(Sweep("topics", (10,)), 10, rate=20000).producer_rates == (20000,)


def test_partition_sweep_shape_is_n_producers_one_consumer() -> None:
    wl = sweep_workload(Sweep("partitions", (16,)), 16, duration_s=3, warmup_s=1)
    assert (wl.topics, wl.partitions_per_topic, wl.producers_per_topic) == (1, 16, 16)
    assert wl.consumers_per_subscription == 1 and wl.producer_rates == (10000,)
    assert (wl.test_duration_s, wl.warmup_duration_s) == (3, 1)
    assert sweep_workload(Sweep("partitions", (16,)), 16, rate=0).max_outstanding_per_producer == 5000
    with pytest.raises(WorkloadError, match=">= 0"):
        sweep_workload(Sweep("partitions", (16,)), 16, rate=-1)


def test_memory_per_topic_and_progress_points() -> None:
    assert memory_per_topic_bytes(100, 1100, 10) == 100
    assert memory_per_topic_bytes(None, 1100, 10) is None
    assert memory_per_topic_bytes(100, 1100, 0) is None
    assert progress_points(1000) == {100, 200, 300, 400, 500, 600, 700, 800, 900, 1000}
    assert progress_points(5) == {1, 2, 3, 4, 5}
    assert progress_points(0) == set()


# -- bounded concurrency -----------------------------------------------------------------------


async def test_bounded_gather_keeps_order_and_bound() -> None:
    running = peak = 0

    async def job(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)  # yield so that others start: the bound is what limits them
        running -= 1
        return i * i

    out = await bounded_gather([lambda i=i: job(i) for i in range(50)], limit=4)
    assert out == [i * i for i in range(50)]
    assert peak == 4


async def test_bounded_gather_stops_starting_after_a_failure() -> None:
    started: list[int] = []

    async def job(i: int) -> int:
        started.append(i)
        if i == 2:
            raise ValueError("boom")
        await asyncio.sleep(0)
        return i

    with pytest.raises(ValueError, match="boom"):
        await bounded_gather([lambda i=i: job(i) for i in range(100)], limit=3)
    assert len(started) < 10


async def test_create_topics_concurrently_with_progress() -> None:
    class SlowCreate(FakeDriver):
        def __init__(self) -> None:
            super().__init__()
            self.in_flight = self.peak = 0

        async def create_topic(self, topic: str, partitions: int, *, reliable: bool) -> None:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            await asyncio.sleep(0)
            self.in_flight -= 1
            await super().create_topic(topic, partitions, reliable=reliable)

    d = SlowCreate()
    lines: list[str] = []
    took = await create_topics(d, [f"t{i}" for i in range(400)], 1, reliable=True, log=lines.append)
    assert took >= 0 and d.peak > 1
    assert len(lines) == 10 and "400/400 topics" in lines[-1]


def test_role_cpu_pct() -> None:
    before = {"broker": 1.0, "clients": {7: 0.5, 8: 0.0}}
    after = {"broker": 2.5, "clients": {7: 1.5, 8: 0.25}}
    assert _role_cpu_pct(before, after, 2.0) == {"broker_cpu_pct": 75.0, "client_cpu_pct_max": 50.0}
    assert _role_cpu_pct(before, {"broker": 1.0, "clients": {}}, 1.0)["client_cpu_pct_max"] is None
    assert _role_cpu_pct(before, after, 0.0) == {}


async def test_run_records_setup_figures() -> None:
    wl = sweep_workload(Sweep("topics", (3,)), 3, rate=600, duration_s=0.3, warmup_s=0.1)
    res = await run_workload(FakeDriver(), wl, 600, client_procs=0, log=lambda _: None)
    assert res.topics == 3 and res.create_topics_s is not None and res.attach_s is not None
    assert res.consumed > 0 and res.broker_cpu_pct is not None


# -- sweep report ------------------------------------------------------------------------------


def _row(driver: str, value: int, cpu: float, p99: float | None) -> dict[str, object]:
    return {
        "driver": driver,
        "workload": f"sweep-topics-{value}",
        "target_rate": 5000,
        "message_size_bytes": 1024,
        "publish_rate": 5000.0,
        "consume_rate": 4990.0,
        "cpu_s_per_million": cpu,
        "e2e_latency": {"p50_ms": 1.0, "p99_ms": p99} if p99 is not None else None,
        "broker_mem_per_topic_bytes": 2048.0,
        "create_topics_s": 1.5,
        "attach_s": None,
        "broker_cpu_pct": 80.0,
        "client_cpu_pct_max": 30.0,
        "sweep": {"dimension": "topics", "value": value},
    }


def test_sweep_table_series_and_plot(tmp_path: Path) -> None:
    rows = [_row("danube", 1000, 300.0, 40.0), _row("danube", 10, 100.0, 5.0), _row("nats", 10, 90.0, None)]
    rows.append({"driver": "danube", "workload": "w1", "sweep": None})  # not a sweep row: left out
    text = sweep_report.table(rows)
    assert "topics=1,000" in text and "2.0" in text and text.count("\n") == 3
    assert sweep_report.markdown(rows).count("\n") == 4
    assert sweep_report.series(rows, "cpu_s_per_million") == {
        "danube": [(10, 100.0), (1000, 300.0)],
        "nats": [(10, 90.0)],
    }
    assert sweep_report.series(rows, "e2e_p99") == {"danube": [(10, 5.0), (1000, 40.0)]}
    json.dumps(rows)
    pytest.importorskip("matplotlib")
    (path,) = sweep_report.plot(tmp_path, rows)
    assert path.name == "sweep-topics.png" and path.stat().st_size > 1000


# -- py-spy summaries --------------------------------------------------------------------------


RAW = """\
<module> (danube_broker/__main__.py:10);run (asyncio/base_events.py:600);_run_once (asyncio/base_events.py:1900);publish (danube_broker/grpc_api.py:120);SerializeToString (google/protobuf/message.py:5) 30
<module> (danube_broker/__main__.py:10);run (asyncio/base_events.py:600);_run_once (asyncio/base_events.py:1900) 50
<module> (danube_broker/__main__.py:10);_worker (concurrent/futures/thread.py:80);commit (danube_broker/wal/writer.py:40) 15
<module> (danube_broker/__main__.py:10);tick (danube_broker/health.py:5) 5
not a stack line
"""


def test_summarize_raw_self_total_and_categories() -> None:
    s = summarize_raw(RAW)
    assert s.samples == 100
    assert s.self_counts["_run_once (asyncio/base_events.py:1900)"] == 50
    assert s.total_counts["_run_once (asyncio/base_events.py:1900)"] == 80
    assert s.total_counts["<module> (danube_broker/__main__.py:10)"] == 100
    assert dict(s.categories) == {
        "protobuf": 30,
        "asyncio / event loop": 50,
        "WAL commit / thread hops": 15,
        "timers / health / load reports": 5,
    }
    text = render("broker", s, top=2)
    assert "100 samples" in text and " 50.0%  asyncio / event loop" in text


def test_category_walks_outwards_from_the_leaf() -> None:
    assert category(
        ["x (a.py:1)", "dispatch (danube_broker/dispatch/reliable.py:3)", "len (<builtin>:0)"]
    ) == ("dispatch / subscriptions")
    assert category(["f (mine.py:1)"]) == OTHER
    assert "no samples" in render("empty", summarize_raw(""))


# -- driver specs (bench/run.py) ---------------------------------------------------------------


def test_driver_spec_broker_counts() -> None:
    from bench import run as bench_run
    from bench.drivers.base import DriverUnavailable

    assert bench_run.driver_spec("danube") == ("danube", 1)
    assert bench_run.driver_spec("danube", 3) == ("danube", 3)
    assert bench_run.driver_spec("danube:2") == ("danube", 2)
    for bad in ("danube:0", "danube:x", "danube:"):
        with pytest.raises(DriverUnavailable, match="integer >= 1"):
            bench_run.driver_spec(bad)


def test_make_names_multi_broker_drivers_and_refuses_others() -> None:
    from bench import run as bench_run

    skipped: list[str] = []
    d = bench_run._make("danube:2", skipped)
    assert d is not None and d.name == "danube-2b" and d._brokers == 2  # type: ignore[attr-defined]
    assert bench_run._make("nats-jetstream:2", skipped) is None
    assert "takes no broker count" in skipped[0]


def test_all_alive_tells_a_vanished_process() -> None:
    import os
    import subprocess
    import sys

    from bench.harness.cpu import all_alive, cpu_seconds

    pytest.importorskip("psutil")
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: the pid is gone
    assert all_alive([os.getpid()])
    assert not all_alive([os.getpid(), proc.pid])
    assert cpu_seconds([proc.pid]) == 0.0  # why idle figures must check liveness
