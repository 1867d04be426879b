"""The broker's load report: rates from counter deltas over the interval, CPU over wall time, and
(with object storage) every report also appended to the load history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from danube_broker.load_reporter import LoadReporter
from danube_broker.stats import SubscriptionStats, TopicStats
from danube_common.keys import Keys
from danube_common.load import LoadReport
from danube_common.load_history import LoadHistoryReader, LoadHistoryWriter
from danube_common.metadata.memory import MemoryStore
from danube_common.objstore import LocalObjectStore

pytestmark = pytest.mark.unit


class FakeRegistry:
    broker_id = "b1"

    def __init__(self) -> None:
        self.msgs = 0

    def stats(self) -> dict[str, TopicStats]:
        sub = SubscriptionStats("s", "Shared", 1, 1, 0, 0, 0, 0, 0, backlog=7)
        t = TopicStats(
            "/default/t", "reliable", self.msgs, self.msgs * 100, self.msgs, self.msgs * 100, 0, 2, 1, 1, 0,
            per_subscription={"s": sub},
        )  # fmt: skip
        return {t.topic: t}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def test_rates_cpu_and_history(tmp_path: Path) -> None:
    reg, wall, cpu = FakeRegistry(), Clock(), Clock()
    store, keys = MemoryStore(), Keys("c")
    objects = await LocalObjectStore.open(tmp_path)
    history = LoadHistoryWriter(objects, flush_interval_s=60, max_batch=10)
    reporter = LoadReporter(
        reg, store, keys, lease_id=lambda: 0, interval_s=5, max_topics=10,
        wall=wall, cpu=cpu, history=history,
    )  # type: ignore[arg-type]  # fmt: skip
    reg.msgs, wall.t, cpu.t = 1000, 2.0, 1.0
    await reporter.publish()
    reg.msgs, wall.t, cpu.t = 3000, 4.0, 1.5
    report = await reporter.publish()
    assert report.msg_rate_in == pytest.approx(1000.0)  # 2000 more messages over 2 s
    assert report.byte_rate_in == pytest.approx(100_000.0)
    assert report.cpu_usage == pytest.approx(0.25)  # 0.5 s of CPU over 2 s
    assert report.backlog == 7 and report.producers == 2 and report.topics[0].reliable
    stored: Any = await store.get_json(keys.load("b1"))
    assert LoadReport.from_json(stored) == report
    assert history.pending == 2
    assert await history.flush() == 1
    reader = LoadHistoryReader(objects)
    (key,) = await reader.list_window(report.at_ms - 3_600_000, report.at_ms + 1)
    assert [r.msg_rate_in for r in await reader.read(key)] == [0.0, pytest.approx(1000.0)]
    await history.aclose()
    await objects.aclose()
