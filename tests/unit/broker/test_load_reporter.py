"""The broker's load report: rates from counter deltas over the interval, CPU over wall time, and
(with object storage) every report also appended to the load history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from danube_broker.load_reporter import LoadReporter
from danube_broker.stats import LoadFigures
from danube_common.keys import Keys
from danube_common.load import LoadReport
from danube_common.load_history import LoadHistoryReader, LoadHistoryWriter
from danube_common.metadata.memory import MemoryStore
from danube_common.objstore import LocalObjectStore

pytestmark = pytest.mark.unit


class FakeTopic:
    """As ``Topic`` for the report: counters that tell a watcher once when they move."""

    def __init__(self, *, reliable: bool = True, backlog: int = 7, producers: int = 2) -> None:
        self.name = ""  # set by Topics
        self._msgs = 0
        self._watch: tuple[set[str], str] | None = None
        self.is_reliable = reliable
        self.backlog, self.producers = backlog, producers
        self.traffic_reads = 0

    @property
    def msgs(self) -> int:
        return self._msgs

    @msgs.setter
    def msgs(self, n: int) -> None:
        if n != self._msgs and self._watch is not None:
            (woken, name), self._watch = self._watch, None
            woken.add(name)
        self._msgs = n

    def acked(self, backlog: int) -> None:
        """An ack: the backlog moves without traffic (``Topic.ack`` tells the watcher)."""
        self.backlog = backlog
        if self._watch is not None:
            (woken, name), self._watch = self._watch, None
            woken.add(name)

    def load_figures(self) -> LoadFigures:
        m = self.msgs
        return (m, m * 100, m, m * 100, self.backlog, self.producers, 1)

    def traffic(self) -> int:
        self.traffic_reads += 1
        return 2 * self.msgs

    def watch_traffic(self, woken: set[str]) -> None:
        self._watch = (woken, self.name)


class Topics(dict[str, FakeTopic]):
    """As the registry's topics: names its topics, and ``version`` moves with every change."""

    version = 0

    def __setitem__(self, name: str, topic: FakeTopic) -> None:
        topic.name = name
        self.version += 1
        super().__setitem__(name, topic)

    def __delitem__(self, name: str) -> None:
        self.version += 1
        super().__delitem__(name)


class FakeRegistry:
    broker_id = "b1"

    def __init__(self, n: int = 1) -> None:
        self.topics = Topics()
        self.topics["/default/t"] = FakeTopic()
        for i in range(1, n):
            self.topics[f"/default/idle-{i}"] = FakeTopic(backlog=0, producers=0)

    @property
    def topics_version(self) -> int:
        return self.topics.version

    @property
    def msgs(self) -> int:
        return self.topics["/default/t"].msgs

    @msgs.setter
    def msgs(self, n: int) -> None:
        self.topics["/default/t"].msgs = n


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


def report_of(reporter: LoadReporter) -> dict[str, Any]:
    doc = reporter.sample().to_json()
    del doc["at_ms"], doc["mem_rss_bytes"], doc["cpu_usage"]
    return doc


def reporter_of(reg: FakeRegistry, wall: Clock, *, full_refresh_every: int = 12) -> LoadReporter:
    return LoadReporter(
        reg, MemoryStore(), Keys("c"), lease_id=lambda: 0, interval_s=5, max_topics=10, wall=wall,
        full_refresh_every=full_refresh_every,
    )  # fmt: skip


def test_an_idle_topic_is_reported_from_its_previous_row_until_it_moves() -> None:
    """Idle topics reuse their row (the same object); a topic that moves gets rates, then
    reads idle again (rates 0) once it stops; the report's content is the same as the
    report of a reporter that never saw the topics before (no cache)."""
    reg, wall = FakeRegistry(n=3), Clock()
    reporter = reporter_of(reg, wall, full_refresh_every=1)
    wall.t = 5.0
    first = {t.topic: t for t in reporter.sample().topics}
    wall.t = 10.0
    second = {t.topic: t for t in reporter.sample().topics}
    assert all(second[n] is first[n] for n in first)  # idle: the same rows
    reg.msgs, wall.t = 500, 15.0
    busy = {t.topic: t for t in reporter.sample().topics}
    assert busy["/default/t"].msg_rate_in == pytest.approx(100.0)
    assert busy["/default/idle-1"] is first["/default/idle-1"]
    wall.t = 20.0
    calm = {t.topic: t for t in reporter.sample().topics}
    assert calm["/default/t"].msg_rate_in == 0.0 and calm["/default/t"] is not first["/default/t"]
    assert calm["/default/t"] == first["/default/t"]  # same content as before it moved
    reg.topics["/default/idle-2"].is_reliable = False  # its kind changed: a new row
    wall.t = 25.0
    changed = {t.topic: t for t in reporter.sample().topics}
    assert not changed["/default/idle-2"].reliable
    fresh = reporter_of(reg, wall)
    wall.t = 30.0
    cached_doc, fresh_doc = report_of(reporter), report_of(fresh)
    cached_doc["interval_s"] = fresh_doc["interval_s"]
    assert cached_doc == fresh_doc


def test_idle_topics_are_read_in_full_only_when_they_carry_something_or_at_a_full_refresh() -> None:
    """Between full refreshes an idle topic that carried nothing is not read (its row is reused
    as is, even if its backlog or kind changed meanwhile); one that carried messages, or a new
    topic object under the same name, is read at once; the full refresh reads everything."""
    reg, wall = FakeRegistry(n=4), Clock()
    reporter = reporter_of(reg, wall, full_refresh_every=3)
    wall.t = 5.0
    reporter.sample()  # full
    assert reporter.last_read_in_full == 4
    reg.topics["/default/idle-1"].backlog = 5  # unwatched (retention, a seek): not seen yet
    reg.topics["/default/idle-2"] = FakeTopic(reliable=False, backlog=0, producers=0)  # replaced
    reg.topics["/default/idle-3"].msgs = 10  # carried messages
    wall.t = 10.0
    rows = {t.topic: t for t in reporter.sample().topics}
    assert reporter.last_read_in_full == 2  # idle-2 (a new object) and idle-3 (moved)
    assert rows["/default/idle-1"].backlog == 0
    assert rows["/default/idle-2"].reliable is False
    assert rows["/default/idle-3"].msg_rate_in == pytest.approx(2.0)
    wall.t = 15.0
    reporter.sample()
    assert reporter.last_read_in_full == 1  # only idle-3, which moved at the previous sample
    wall.t = 20.0
    rows = {t.topic: t for t in reporter.sample().topics}  # full refresh
    assert reporter.last_read_in_full == 4
    assert rows["/default/idle-1"].backlog == 5


async def test_an_idle_broker_reuses_its_previous_report_and_encodes_what_a_fresh_build_would() -> None:
    """Every row unchanged: the report is the previous one with new process figures (the very
    same rows, not sorted again) and what is stored equals the report's JSON. Traffic on one
    topic, a topic gone, or a full refresh build the report again."""
    reg, wall = FakeRegistry(n=5), Clock()
    store, keys = MemoryStore(), Keys("c")
    reporter = LoadReporter(
        reg, store, keys, lease_id=lambda: 0, interval_s=5, max_topics=3, wall=wall, full_refresh_every=100,
    )  # type: ignore[arg-type]  # fmt: skip

    async def publish() -> LoadReport:
        wall.t += 5.0
        report = await reporter.publish()
        stored: Any = await store.get_json(keys.load("b1"))
        assert stored == report.to_json() and LoadReport.from_json(stored) == report
        return report

    first = await publish()
    second = await publish()
    assert second.topics is first.topics and second.at_ms >= first.at_ms
    assert (second.topic_count, second.topics_truncated) == (5, True)
    reg.msgs = 50  # traffic: built again, with rates
    busy = await publish()
    assert busy.topics is not second.topics and busy.msg_rate_in == pytest.approx(10.0)
    calm = await publish()  # the topic stopped: its row is new (rates 0)
    assert calm.msg_rate_in == 0.0 and calm.topics is not busy.topics
    assert (await publish()).topics is calm.topics  # idle again
    del reg.topics["/default/idle-4"]
    gone = await publish()
    assert gone.topic_count == 4


def test_an_all_idle_broker_reports_without_looking_at_its_topics() -> None:
    """Once every topic reads idle, reports do not look at the topics (not even their traffic
    counter) until one carries a message, a topic comes or goes, or a full refresh is due; what
    they report is what a reporter that never saw the topics would (no stale row)."""
    reg, wall = FakeRegistry(n=50), Clock()
    reporter = reporter_of(reg, wall, full_refresh_every=6)

    def sample() -> LoadReport:
        wall.t += 5.0
        for t in reg.topics.values():
            t.traffic_reads = 0
        return reporter.sample()

    def looked_at() -> int:
        return sum(t.traffic_reads for t in reg.topics.values())

    sample()  # full: reads everything, "/default/t" has a backlog but no rate: idle
    assert looked_at() == 50 and reporter.last_read_in_full == 50
    quiet = sample()
    assert looked_at() == 0 and reporter.last_read_in_full == 0
    reg.topics["/default/idle-7"].msgs = 3  # carried messages: seen at the next report
    busy = sample()
    assert looked_at() == 50 and reporter.last_read_in_full == 1
    assert busy.msg_rate_in == pytest.approx(0.6) and busy.topics is not quiet.topics
    calm = sample()  # a topic had rates: every topic compared, idle-7 read again (rates 0)
    assert looked_at() == 50 and reporter.last_read_in_full == 1 and calm.msg_rate_in == 0.0
    assert sample().topics is calm.topics and looked_at() == 0  # all idle again
    reg.topics["/default/new"] = FakeTopic(backlog=0, producers=0)  # a topic came: seen
    grown = sample()
    assert looked_at() == 51 and reporter.last_read_in_full == 1 and grown.topic_count == 51
    sample()  # the full refresh (every 6th report)
    assert looked_at() == 51 and reporter.last_read_in_full == 51
    assert sample().topic_count == 51 and looked_at() == 0
    reg.topics["/default/idle-9"].acked(backlog=0)  # no traffic, but watched: read at once
    reg.topics["/default/t"].acked(backlog=4)
    acked = sample()
    assert reporter.last_read_in_full == 2 and acked.backlog == 4
    assert sample().topics is acked.topics and looked_at() == 0
    del reg.topics["/default/idle-3"]  # a topic went: seen
    assert sample().topic_count == 50 and looked_at() == 50
    wall.t += 5.0
    fresh = reporter_of(reg, wall)
    wall.t -= 5.0
    cached_doc, fresh_doc = report_of(reporter), report_of(fresh)
    cached_doc["interval_s"] = fresh_doc["interval_s"]
    assert cached_doc == fresh_doc
