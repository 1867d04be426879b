"""The broker's load report: every ``load_report_interval_s``, on the registration lease.

Rates are counter deltas over the interval (per topic: messages and payload bytes in and out),
CPU is this process's CPU time over the interval (in cores), memory its resident set. The report
goes to ``/{cluster}/load/{broker_id}`` attached to the registration lease, so it disappears with
the broker. A failed write is logged and retried at the next interval: the report is advisory
(placement falls back to topic counts), never a reason to stop serving. With object storage
configured, every report is also appended to the load history (``danube_common.load_history``,
batched: ``load_history_flush_interval_s``), the window the Spark planner reads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import NoReturn

from danube_broker.registry import BrokerRegistry
from danube_broker.stats import TopicStats
from danube_common.errors import DanubeError
from danube_common.keys import Keys
from danube_common.load import LoadReport, TopicLoad, rate
from danube_common.load_history import LoadHistoryWriter
from danube_common.metadata.store import MetadataStore
from danube_common.records import now_ms

log = logging.getLogger(__name__)

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0


def total_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * _PAGE_BYTES
    except (AttributeError, ValueError, OSError):
        return 0


class LoadReporter:
    def __init__(
        self,
        registry: BrokerRegistry,
        store: MetadataStore,
        keys: Keys,
        *,
        lease_id: Callable[[], int],
        interval_s: float,
        max_topics: int,
        wall: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
        history: LoadHistoryWriter | None = None,
    ) -> None:
        """``history``: also append every report to the load history (object storage), which the
        Spark planner reads as a window."""
        self._reg = registry
        self._store = store
        self._keys = keys
        self._lease_id = lease_id
        self._interval_s = interval_s
        self._max_topics = max_topics
        self._wall = wall
        self._cpu = cpu
        self._prev: dict[str, tuple[int, int, int, int]] = {}
        self._prev_wall = wall()
        self._prev_cpu = cpu()
        self.last: LoadReport | None = None
        self._history = history

    def sample(self) -> LoadReport:
        """Measure since the previous sample and return the report (pure of I/O but /proc)."""
        now_wall, now_cpu = self._wall(), self._cpu()
        dt = max(now_wall - self._prev_wall, 1e-6)
        stats = self._reg.stats()
        loads = [self._topic_load(name, st, dt) for name, st in stats.items()]
        self._prev = {
            name: (st.msgs_in, st.bytes_in, st.msgs_out, st.bytes_out) for name, st in stats.items()
        }
        report = LoadReport.build(
            self._reg.broker_id,
            now_ms(),
            loads,
            interval_s=dt,
            cpu_usage=max(0.0, now_cpu - self._prev_cpu) / dt,
            cpu_cores=os.cpu_count() or 1,
            mem_rss_bytes=rss_bytes(),
            mem_total_bytes=total_memory_bytes(),
            max_topics=self._max_topics,
        )
        self._prev_wall, self._prev_cpu = now_wall, now_cpu
        self.last = report
        return report

    def _topic_load(self, name: str, st: TopicStats, dt: float) -> TopicLoad:
        p_in, p_bin, p_out, p_bout = self._prev.get(
            name, (st.msgs_in, st.bytes_in, st.msgs_out, st.bytes_out)
        )
        return TopicLoad(
            topic=name,
            msg_rate_in=rate(st.msgs_in, p_in, dt),
            byte_rate_in=rate(st.bytes_in, p_bin, dt),
            msg_rate_out=rate(st.msgs_out, p_out, dt),
            byte_rate_out=rate(st.bytes_out, p_bout, dt),
            backlog=sum(s.backlog for s in st.per_subscription.values()),
            producers=st.producers,
            consumers=st.consumers,
            reliable=st.dispatch_strategy == "reliable",
        )

    async def publish(self) -> LoadReport:
        report = self.sample()
        await self._store.put(self._keys.load(self._reg.broker_id), report.to_json(), lease=self._lease_id())
        if self._history is not None:
            self._history.add(report)
        return report

    async def run(self) -> NoReturn:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.publish()
            except DanubeError as exc:
                log.warning("load report not written (%s); retrying in %.1fs", exc, self._interval_s)
