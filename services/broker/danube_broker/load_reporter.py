"""The broker's load report: every ``load_report_interval_s``, on the registration lease.

Rates are counter deltas over the interval (per topic: messages and payload bytes in and out),
CPU is this process's CPU time over the interval (in cores), memory its resident set. A topic
that was idle at the previous report (every rate 0) and carried nothing since (``Topic.traffic``
did not move, same topic object) is reported with the very same :class:`TopicLoad`: an idle topic
costs the report one integer comparison. Each idle topic is also *watched*
(``Topic.watch_traffic``: its next message in or out, ack, nack, or producer or consumer coming or
going adds its name to a set, and the next report reads it in full), so while every topic is
idle, none was watched changing and none came or went (``topics_version``), a report does not
look at the topics at all: an idle broker's report costs the same with 10,000 topics as with none. Other
topics are read through ``Topic.load_figures`` (counters, backlog, producers, consumers: no stats
snapshot). What changes unwatched (an idle topic's backlog cut by retention or moved by a
seek, the topic's kind) is read at the next full refresh: every topic is read in full every
``full_refresh_every`` reports (the broker: ``load_report_full_refresh_s``, 5 minutes). The report
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
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import NoReturn, Protocol

from danube_broker.stats import LoadFigures
from danube_common.errors import DanubeError
from danube_common.keys import Keys
from danube_common.load import LoadReport, TopicLoad, rate
from danube_common.load_history import LoadHistoryWriter
from danube_common.metadata.store import MetadataStore, encode_value
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


class LoadedTopic(Protocol):
    """What the report reads of a topic (``danube_broker.topic.Topic``)."""

    @property
    def is_reliable(self) -> bool: ...

    def load_figures(self) -> LoadFigures: ...

    def traffic(self) -> int: ...

    def watch_traffic(self, woken: set[str]) -> None:
        """Add the topic's name to ``woken`` (once) when it next carries a message or anything
        else the report shows changes (acks, producers, consumers)."""


class TopicSource(Protocol):
    """What the report reads of the registry (``danube_broker.registry.BrokerRegistry``)."""

    @property
    def broker_id(self) -> str: ...

    @property
    def topics(self) -> Mapping[str, LoadedTopic]: ...

    @property
    def topics_version(self) -> int:
        """Moves whenever a topic is added, removed or replaced."""
        ...


#: What the reporter keeps of a topic between reports (see ``LoadReporter._prev``).
_Seen = tuple[LoadFigures, bool, TopicLoad | None, int, LoadedTopic]


class LoadReporter:
    def __init__(
        self,
        registry: TopicSource,
        store: MetadataStore,
        keys: Keys,
        *,
        lease_id: Callable[[], int],
        interval_s: float,
        max_topics: int,
        wall: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
        history: LoadHistoryWriter | None = None,
        full_refresh_every: int = 12,
    ) -> None:
        """``history``: also append every report to the load history (object storage), which the
        Spark planner reads as a window. ``full_refresh_every``: read every topic in full once per
        this many reports (1: at every report)."""
        self._reg = registry
        self._store = store
        self._keys = keys
        self._lease_id = lease_id
        self._interval_s = interval_s
        self._max_topics = max_topics
        self._wall = wall
        self._cpu = cpu
        #: topic -> (its figures and kind when last read in full, its load then if it was idle
        #: (every rate 0) else None, its traffic then, the topic object read)
        self._prev: dict[str, _Seen] = {}
        self._full_refresh_every = max(1, full_refresh_every)
        self._samples = 0
        #: Figures (tests, profiling): topics read in full by the latest sample.
        self.last_read_in_full = 0
        self._prev_wall = wall()
        self._prev_cpu = cpu()
        self.last: LoadReport | None = None
        self._history = history
        #: The rows of the previous sample, in registry order (see :meth:`sample`).
        self._loads: list[TopicLoad] = []
        #: The listed rows last encoded, and their JSON (see :meth:`_encode`).
        self._rows_of: tuple[TopicLoad, ...] | None = None
        self._rows_json = b"[]"
        #: Names of topics found idle that carried something since (``watch_traffic``).
        self._woken: set[str] = set()
        #: Whether every topic was idle at the latest sample, and the registry's topics_version then.
        self._all_idle = False
        self._version = -1

    def sample(self) -> LoadReport:
        """Measure since the previous sample and return the report (pure of I/O but /proc)."""
        now_wall, now_cpu = self._wall(), self._cpu()
        dt = max(now_wall - self._prev_wall, 1e-6)
        prev = self._prev
        full = self._samples % self._full_refresh_every == 0
        self._samples += 1
        version = self._reg.topics_version
        if self._all_idle and not full and not self._woken and version == self._version:
            # Every topic was idle and none has carried anything since (each is watched), no
            # topic came or went: the previous report's rows, without looking at the topics.
            self.last_read_in_full = 0
            return self._idle_report(now_wall, now_cpu, dt)
        woken, self._woken = self._woken, set()  # every idle topic is watched again below
        self._version = version
        idle = 0
        nxt: dict[str, _Seen] = {}
        loads: list[TopicLoad] = []
        read = 0
        before = self._loads
        # True while every topic so far has the very row of the previous report, in the same
        # place: then the totals and the rows listed are the previous report's too.
        same = len(before) == len(self._reg.topics)
        for name, topic in self._reg.topics.items():
            last, traffic = prev.get(name), topic.traffic()
            if (
                not full
                and last is not None
                and last[2] is not None
                and last[3] == traffic
                and last[4] is topic
                and name not in woken
            ):
                nxt[name] = last  # idle then, nothing carried since: the same report row
                if same and before[len(loads)] is not last[2]:
                    same = False
                loads.append(last[2])
                topic.watch_traffic(self._woken)
                idle += 1
                continue
            same = False
            read += 1
            figures, reliable = topic.load_figures(), topic.is_reliable
            if last is not None and last[2] is not None and last[0] == figures and last[1] == reliable:
                load = last[2]  # idle then, unchanged since: the same report row
            else:
                load = topic_load(name, figures, last[0] if last is not None else figures, reliable, dt)
            nxt[name] = (figures, reliable, load if load.weight == 0.0 else None, traffic, topic)
            loads.append(load)
            if load.weight == 0.0:
                topic.watch_traffic(self._woken)
                idle += 1
        self._prev = nxt
        self._loads = loads
        self._all_idle = idle == len(loads)
        self.last_read_in_full = read
        if same and self.last is not None:  # an idle broker: only the process figures moved
            return self._idle_report(now_wall, now_cpu, dt)
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

    def _idle_report(self, now_wall: float, now_cpu: float, dt: float) -> LoadReport:
        """The previous report's rows and totals with this interval's process figures."""
        assert self.last is not None
        report = replace(
            self.last,
            at_ms=now_ms(),
            interval_s=round(dt, 3),
            cpu_usage=round(max(0.0, now_cpu - self._prev_cpu) / dt, 4),
            mem_rss_bytes=rss_bytes(),
            mem_total_bytes=total_memory_bytes(),
        )
        self._prev_wall, self._prev_cpu = now_wall, now_cpu
        self.last = report
        return report

    async def publish(self) -> LoadReport:
        report = self.sample()
        await self._store.put(
            self._keys.load(self._reg.broker_id), self._encode(report), lease=self._lease_id()
        )
        if self._history is not None:
            self._history.add(report)
        return report

    def _encode(self, report: LoadReport) -> bytes:
        """The report as the store's JSON; the rows of the listed topics are encoded again only
        when they changed (an idle broker's report differs only in its process figures)."""
        if report.topics is not self._rows_of:
            self._rows_of = report.topics
            self._rows_json = encode_value([t.row() for t in report.topics])
        head = encode_value(report.to_json(rows=False))
        empty = b'"topics":[]'
        at = head.index(empty)  # keys are sorted: "topics" appears once, as a key
        return head[:at] + b'"topics":' + self._rows_json + head[at + len(empty) :]

    async def run(self) -> NoReturn:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.publish()
            except DanubeError as exc:
                log.warning("load report not written (%s); retrying in %.1fs", exc, self._interval_s)


def topic_load(name: str, now: LoadFigures, before: LoadFigures, reliable: bool, dt: float) -> TopicLoad:
    """A topic's report row: rates from the figures' counters over ``dt`` seconds."""
    msgs_in, bytes_in, msgs_out, bytes_out, backlog, producers, consumers = now
    return TopicLoad(
        topic=name,
        msg_rate_in=rate(msgs_in, before[0], dt),
        byte_rate_in=rate(bytes_in, before[1], dt),
        msg_rate_out=rate(msgs_out, before[2], dt),
        byte_rate_out=rate(bytes_out, before[3], dt),
        backlog=backlog,
        producers=producers,
        consumers=consumers,
        reliable=reliable,
    )
