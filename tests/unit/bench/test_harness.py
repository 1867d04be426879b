"""The benchmark harness without servers: workload parsing, percentile math, and one short run
against an in-process fake driver."""

from __future__ import annotations

import asyncio
import json
import time
from array import array
from pathlib import Path

import pytest

from bench.drivers.base import ConsumerHandle, Driver, ProducerHandle
from bench.harness import report
from bench.harness.runner import run_workload
from bench.harness.stats import percentile_sorted, summarize_us
from bench.harness.workload import WorkloadError, find_workloads, parse_workload

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

WORKLOADS = Path(__file__).resolve().parents[3] / "bench" / "workloads"


# -- workloads ---------------------------------------------------------------------------------


def test_parse_defaults_and_rates() -> None:
    wl = parse_workload({"name": "x", "producerRates": [1000, 5000], "messageSize": 100, "reliable": True})
    assert wl.producer_rates == (1000, 5000)
    assert wl.message_size_bytes == 100 and wl.reliable
    assert (wl.test_duration_s, wl.warmup_duration_s) == (10.0, 2.0)
    assert parse_workload({"name": "y", "producerRate": 0}).producer_rates == (0,)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"name": "x", "topcis": 1}, "unknown workload field"),
        ({"name": "x", "topics": "1"}, "topics must be int"),
        ({"name": "x", "topics": True}, "topics must be int"),
        ({"name": "x", "producerRate": 1, "producerRates": [1]}, "not both"),
        ({"name": "x", "producerRates": [-1]}, ">= 0"),
        ({"name": "x", "messageSize": 4}, "messageSize must be >= 8"),
        ({"name": "x", "consumerBacklogSizeMessages": 10, "subscriptionsPerTopic": 0}, "backlog"),
        ({"topics": 1}, "needs a name"),
    ],
)
def test_parse_rejects(data: dict[str, object], needle: str) -> None:
    with pytest.raises(WorkloadError, match=needle):
        parse_workload(data)


def test_shipped_workloads_parse_and_select_by_prefix() -> None:
    all_ = find_workloads(WORKLOADS, ["all"])
    assert {w.key for w in all_} >= {
        "w1-1topic-1part-1kb",
        "w2-1topic-16part-1kb-max",
        "w3-backlog-drain",
        "w4-100topics-fanin",
        "np-1p1c-100b",
        "rel-1p-100b",
    }
    (w1,) = find_workloads(WORKLOADS, ["w1"])
    assert w1.producer_rates == (1000, 5000, 10000, 20000)
    with pytest.raises(WorkloadError, match="no workload"):
        find_workloads(WORKLOADS, ["w9"])


# -- percentiles -------------------------------------------------------------------------------


def test_percentile_nearest_rank() -> None:
    data = list(range(1, 1001))  # 1..1000
    assert percentile_sorted(data, 50) == 500
    assert percentile_sorted(data, 99) == 990
    assert percentile_sorted(data, 99.9) == 999
    assert percentile_sorted(data, 100) == 1000
    assert percentile_sorted([7], 99.9) == 7
    with pytest.raises(ValueError):
        percentile_sorted([], 50)


def test_summarize_unsorted_microseconds_to_ms() -> None:
    samples = array("q", reversed(range(1, 10_001)))  # 1 µs .. 10 ms, shuffled order
    s = summarize_us(samples)
    assert s is not None
    assert s["p50_ms"] == 5.0 and s["p99_ms"] == 9.9 and s["p99.9_ms"] == 9.99 and s["max_ms"] == 10.0
    assert s["count"] == 10_000
    assert summarize_us(array("q")) is None


# -- one run against a fake driver -------------------------------------------------------------


class FakeProducer(ProducerHandle):
    def __init__(self, queues: list[asyncio.Queue[bytes]]) -> None:
        self.queues = queues
        self.pending: list[asyncio.Future[None]] = []

    async def send(self, payload: bytes) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for q in self.queues:
            q.put_nowait(payload)
        asyncio.get_running_loop().call_soon(fut.set_result, None)  # acked on the next loop turn
        return fut

    async def flush(self) -> None:
        await asyncio.sleep(0)

    async def close(self) -> None:
        pass


class FakeConsumer(ConsumerHandle):
    def __init__(self, q: asyncio.Queue[bytes]) -> None:
        self.q = q

    async def receive(self) -> list[bytes]:
        out = [await self.q.get()]
        while not self.q.empty() and len(out) < 100:
            out.append(self.q.get_nowait())
        return out

    async def close(self) -> None:
        pass


class FakeDriver(Driver):
    name = "fake"
    durability = "in memory (fake)"

    def __init__(self) -> None:
        self.subs: dict[str, dict[str, asyncio.Queue[bytes]]] = {}

    async def start(self, workdir: Path) -> None:
        pass

    async def stop(self) -> None:
        pass

    def server_pids(self) -> list[int]:
        return []

    async def create_topic(self, topic: str, partitions: int, *, reliable: bool) -> None:
        self.subs[topic] = {}

    async def producer(self, topic: str) -> ProducerHandle:
        return FakeProducer(list(self.subs[topic].values()))

    async def consumer(self, topic: str, subscription: str) -> ConsumerHandle:
        q = self.subs[topic].setdefault(subscription, asyncio.Queue())
        return FakeConsumer(q)


async def test_fixed_rate_run_counts_and_latency() -> None:
    wl = parse_workload(
        {
            "name": "smoke",
            "messageSize": 64,
            "subscriptionsPerTopic": 2,
            "testDurationSeconds": 0.5,
            "warmupDurationSeconds": 0.1,
        }
    )
    t0 = time.perf_counter()
    res = await run_workload(FakeDriver(), wl, 2000, client_procs=0)
    assert time.perf_counter() - t0 < 5
    assert res.publish_errors == 0
    assert 500 <= res.published <= 1300  # ~2000 msg/s over 0.5 s (loose: shared CI machines)
    assert res.consumed >= res.published  # two subscriptions each get every message
    assert res.publish_latency is not None and res.e2e_latency is not None
    assert 0 <= res.publish_latency["p50_ms"] < 1000
    row = res.to_json()
    assert "smoke" in report.table([row]) and json.dumps(row)


async def test_max_rate_and_backlog_runs() -> None:
    wl = parse_workload(
        {"name": "m", "messageSize": 16, "testDurationSeconds": 0.2, "warmupDurationSeconds": 0}
    )
    res = await run_workload(FakeDriver(), wl, 0, client_procs=0)
    assert res.published > 0 and res.consumed > 0
    bl = parse_workload(
        {"name": "b", "messageSize": 16, "consumerBacklogSizeMessages": 3000, "warmupDurationSeconds": 0}
    )
    res = await run_workload(FakeDriver(), bl, 0, client_procs=0)
    assert res.published == 3000 and res.consumed == 3000
    assert not any("incomplete" in n for n in res.notes)


def test_ratios_and_plots(tmp_path: Path) -> None:
    base = {
        "workload": "w1",
        "message_size_bytes": 1024,
        "durability": "d",
        "consume_rate": 0.0,
        "notes": [],
        "cpu_s_per_million": 1.0,
        "publish_mb_s": 0.0,
        "consume_mb_s": 0.0,
    }
    rows = [
        {
            **base,
            "driver": d,
            "target_rate": rate,
            "publish_rate": thr,
            "publish_latency": {"p50_ms": 1.0, "p99_ms": p99},
            "e2e_latency": {"p50_ms": 1.0, "p99_ms": p99},
        }
        for d, thr, p99 in (("danube", 2000.0, 2.0), ("peer", 1000.0, 4.0))
        for rate in (1000, 2000)
    ]
    lines = report.ratios(rows)
    assert "w1 @ 1000: danube / peer: throughput x2.00, p99 latency x0.50" in lines
    plots = report.plot(tmp_path, rows)
    if plots:  # matplotlib installed (the bench extra)
        assert {p.name for p in plots} == {"w1-latency.png", "w1-throughput.png"}
