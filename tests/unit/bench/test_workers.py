"""The harness <-> client worker protocol (bench/harness/workers.py), with a fake driver whose handles
talk through a relay on a loopback port, so producers and consumers work from worker processes.

Marked ``integration``, not ``unit``: these tests spawn worker processes and use a loopback socket,
which the ``unit`` marker excludes. They need no servers and take a few seconds in all.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bench.harness import workers
from bench.harness.runner import run_workload
from bench.harness.workers import WorkerError, WorkerPool
from bench.harness.workload import parse_workload
from tests.unit.bench.fake_driver import LoopbackFakeDriver
from tests.unit.bench.test_harness import FakeDriver

psutil = pytest.importorskip("psutil")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


@pytest.fixture
def worker_pids(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Pids of every worker a pool had when it closed; after the test none of them may be alive."""
    seen: list[int] = []
    close = WorkerPool.close

    async def recording_close(self: WorkerPool) -> None:
        seen.extend(self.pids())
        await close(self)

    monkeypatch.setattr(WorkerPool, "close", recording_close)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield seen
    assert not workers._LIVE
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not left, f"processes outlived the run: {left}"
    for pid in seen:
        assert not psutil.pid_exists(pid), f"worker {pid} outlived the run"


@contextlib.asynccontextmanager
async def started(driver: LoopbackFakeDriver, tmp_path: Path) -> AsyncIterator[LoopbackFakeDriver]:
    await driver.start(tmp_path)
    try:
        yield driver
    finally:
        await driver.stop()


async def test_counts_and_samples_arrive_from_workers(tmp_path: Path, worker_pids: list[int]) -> None:
    wl = parse_workload(
        {
            "name": "wk",
            "topics": 2,
            "messageSize": 64,
            "subscriptionsPerTopic": 2,
            "testDurationSeconds": 0.6,
            "warmupDurationSeconds": 0.2,
        }
    )
    async with started(LoopbackFakeDriver(), tmp_path) as driver:
        res = await run_workload(driver, wl, 2000, client_procs=2)
    # 2 topics: 2 producer workers; 2 topics x 2 subscriptions over 2 consumer workers.
    assert len(worker_pids) == 4
    assert res.client_procs == 2 and res.publish_errors == 0 and not res.notes
    expected = 2000 * res.window_s
    assert 0.6 * expected <= res.published <= 1.3 * expected + 20, (res.published, res.window_s)
    assert res.consumed >= 1.8 * res.published  # every subscription gets every message
    assert res.publish_latency is not None and res.e2e_latency is not None
    assert res.publish_latency["count"] == res.published  # samples: array('q') bytes from the workers
    assert res.e2e_latency["count"] == res.consumed
    assert 0 <= res.e2e_latency["p50_ms"] < 1000
    assert res.cpu_s_per_million > 0  # the workers' CPU (psutil on their pids) is in it


async def test_only_the_window_is_counted(tmp_path: Path, worker_pids: list[int]) -> None:
    async with started(LoopbackFakeDriver(), tmp_path) as driver:
        await driver.create_topic("t", 1, reliable=False)
        pool = WorkerPool(driver, 1)
        try:
            await pool.attach([("t", "s")], ["t"])
            await pool.start_consumers()
            await pool.start_producers(rate=2000, size=32, max_outstanding=100, limit=None)
            await pool.watch(0.3)  # before the window: acked and received, not counted
            before = await pool.totals()
            await pool.set_recording(True)
            await pool.watch(0.3)
            await pool.set_recording(False)
            await pool.watch(0.3)  # after the window
            notes: list[str] = []
            await pool.stop_producers(notes)
            totals = await pool.totals()
            assert await pool.wait_received(totals["acked_total"], 5.0)
            meter = await pool.collect()
        finally:
            await pool.close()
    assert before["acked_total"] >= 300 and before["published"] == 0 and before["consumed"] == 0
    assert not notes and meter.errors == 0
    assert meter.acked_total == totals["acked_total"] and meter.received_total >= meter.acked_total
    assert 0 < meter.published <= 0.5 * meter.acked_total  # ~0.3 s of ~0.9 s
    assert 0 < meter.consumed <= 0.5 * meter.received_total
    assert len(meter.pub_us) == meter.published and len(meter.e2e_us) == meter.consumed


async def test_backlog_build_and_drain_in_workers(tmp_path: Path, worker_pids: list[int]) -> None:
    wl = parse_workload(
        {"name": "bl", "messageSize": 16, "consumerBacklogSizeMessages": 2000, "warmupDurationSeconds": 0}
    )
    async with started(LoopbackFakeDriver(), tmp_path) as driver:
        res = await run_workload(driver, wl, 0, client_procs=1)
    assert res.published == 2000 and res.consumed == 2000
    assert not any("incomplete" in n for n in res.notes)
    assert len(worker_pids) == 2


async def test_a_worker_exception_fails_the_run_with_its_message(
    tmp_path: Path, worker_pids: list[int]
) -> None:
    wl = parse_workload(
        {"name": "bad", "messageSize": 16, "testDurationSeconds": 5, "warmupDurationSeconds": 5}
    )
    async with started(LoopbackFakeDriver(fail="send:50"), tmp_path) as driver:
        with pytest.raises(WorkerError) as err:
            await run_workload(driver, wl, 1000, client_procs=1)
    text = str(err.value)
    assert "producer-0" in text and "fake send failed on purpose at message 50" in text
    assert "Traceback" in text  # the worker's own traceback
    assert len(worker_pids) == 2


async def test_a_worker_crash_fails_the_run(tmp_path: Path, worker_pids: list[int]) -> None:
    wl = parse_workload(
        {"name": "crash", "messageSize": 16, "testDurationSeconds": 5, "warmupDurationSeconds": 5}
    )
    async with started(LoopbackFakeDriver(fail="exit"), tmp_path) as driver:
        with pytest.raises(WorkerError, match=r"consumer-0 \(pid \d+\) exited with code 3"):
            await run_workload(driver, wl, 1000, client_procs=1)
    assert len(worker_pids) == 2


async def test_a_driver_without_client_spec_says_use_client_procs_0(worker_pids: list[int]) -> None:
    wl = parse_workload({"name": "x", "testDurationSeconds": 0.1, "warmupDurationSeconds": 0})
    with pytest.raises(NotImplementedError, match="--client-procs 0"):
        await run_workload(FakeDriver(), wl, 0, client_procs=1)
    assert worker_pids == []
