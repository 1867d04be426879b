"""The broker's Prometheus metrics (names: ``danube_common.observability.metric_names``).

Two kinds, both on the broker's own registry (several brokers can share a process in tests):

- :class:`BrokerCollector` reads what the broker keeps anyway (each topic's and subscription's
  counters, producers, consumers, backlog, WAL size) when ``/metrics`` is scraped: nothing is
  done between scrapes. Per-topic series are kept for at most ``metrics.max_topics`` topics and
  per-subscription series for at most as many subscriptions (:class:`SeriesBound`); the rest
  are summed under ``topic="_other"`` (and ``subscription="_other"``). A topic's counters
  start from 0 each time it is loaded here (a move, a restart), which Prometheus reads as a
  counter reset.
- :class:`LeaseCollector` reads the registration lease's surely-alive time and failed renewals.
- :class:`BrokerEvents` counts and times what nothing else keeps, as it happens and never per
  message: a publish (one histogram observation per batch), a WAL group commit and segment roll
  (it is the WAL's :class:`~danube_broker.wal.WalObserver`), a topic loaded, a move.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from danube_broker.stats import SubscriptionStats, TopicStats
from danube_common.metadata.lease import KeptLease
from danube_common.metadata.store import MetadataStore
from danube_common.observability import metric_names as mn
from danube_common.observability.metrics import OTHER_TOPICS, MetricDef, OtherTotals, SeriesBound, add_samples

#: Buckets of "topics per WAL commit round".
ROUND_LOGS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)

if TYPE_CHECKING:
    from danube_broker.registry import BrokerRegistry

#: Families the collector makes, in order.
TOPIC_COUNTERS: tuple[MetricDef, ...] = (
    mn.TOPIC_MESSAGES_IN,
    mn.TOPIC_BYTES_IN,
    mn.TOPIC_MESSAGES_OUT,
    mn.TOPIC_BYTES_OUT,
    mn.TOPIC_MESSAGES_DROPPED,
)
TOPIC_GAUGES: tuple[MetricDef, ...] = (
    mn.TOPIC_ACTIVE_PRODUCERS,
    mn.TOPIC_ACTIVE_CONSUMERS,
    mn.TOPIC_ACTIVE_SUBSCRIPTIONS,
)
SUB_COUNTERS: tuple[MetricDef, ...] = (
    mn.SUBSCRIPTION_REDELIVERIES,
    mn.SUBSCRIPTION_NACKS,
    mn.SUBSCRIPTION_DEAD_LETTERED,
    mn.SUBSCRIPTION_DROPPED,
)
SUB_GAUGES: tuple[MetricDef, ...] = (
    mn.SUBSCRIPTION_BACKLOG,
    mn.SUBSCRIPTION_ACTIVE_CONSUMERS,
    mn.SUBSCRIPTION_PENDING_REDELIVERIES,
    mn.SUBSCRIPTION_BLOCKED,
)
BROKER_GAUGES: tuple[MetricDef, ...] = (mn.TOPICS_OWNED, mn.WAL_DISK_BYTES)

SubKey = tuple[str, str]


def topic_counters(t: TopicStats) -> tuple[float, ...]:
    return (t.msgs_in, t.bytes_in, t.msgs_out, t.bytes_out, t.msgs_dropped)


def topic_gauges(t: TopicStats) -> tuple[float, ...]:
    return (t.producers, t.consumers, t.subscriptions)


def sub_counters(s: SubscriptionStats) -> tuple[float, ...]:
    return (s.redelivered_total, s.nacks, s.dead_lettered_total, s.dropped_total or s.msgs_dropped)


def sub_gauges(s: SubscriptionStats) -> tuple[float, ...]:
    return (s.backlog, s.connected_consumers, s.pending_redeliveries, 1 if s.blocked_at is not None else 0)


def _sum(rows: Iterable[tuple[float, ...]], width: int) -> list[float]:
    out = [0.0] * width
    for row in rows:
        for i, v in enumerate(row):
            out[i] += v
    return out


def _add(families: list[Metric], labels: list[str], values: Iterable[float]) -> None:
    for fam, v in zip(families, values, strict=True):
        fam.add_metric(labels, v)  # type: ignore[attr-defined]


class BrokerSeries:
    """Turns a snapshot of the broker's topics into metric families within the series bound
    (pure but for the memory of its :class:`SeriesBound` and :class:`OtherTotals`)."""

    def __init__(self, max_topics: int) -> None:
        self.topics: SeriesBound[str] = SeriesBound(max_topics)
        self.subscriptions: SeriesBound[SubKey] = SeriesBound(max_topics)
        self._other_topics: OtherTotals[str] = OtherTotals(len(TOPIC_COUNTERS))
        self._other_subs: OtherTotals[SubKey] = OtherTotals(len(SUB_COUNTERS))

    def families(self, stats: Mapping[str, TopicStats]) -> list[Metric]:
        owned, wal = mn.TOPICS_OWNED.family(), mn.WAL_DISK_BYTES.family()
        add_samples(owned, {(): len(stats)})
        add_samples(wal, {(): sum(t.wal_bytes for t in stats.values())})
        t_counters = [d.family() for d in TOPIC_COUNTERS]
        t_gauges = [d.family() for d in TOPIC_GAUGES]
        s_counters = [d.family() for d in SUB_COUNTERS]
        s_gauges = [d.family() for d in SUB_GAUGES]

        shown = self.topics.kept
        kept = self.topics.select({n: t.msg_rate_in + t.msg_rate_out for n, t in stats.items()})
        for name in sorted(kept):
            _add(t_counters, [name], topic_counters(stats[name]))
            _add(t_gauges, [name], topic_gauges(stats[name]))
        others = {n: topic_counters(t) for n, t in stats.items() if n not in kept}
        if others or self._other_topics.used:  # once there, "_other" stays (a counter)
            _add(t_counters, [OTHER_TOPICS], self._other_topics.total(others, shown=shown))
            _add(t_gauges, [OTHER_TOPICS], _sum((topic_gauges(stats[n]) for n in others), len(TOPIC_GAUGES)))

        subs = {(n, s.name): s for n, t in stats.items() for s in t.per_subscription.values()}
        shown_subs = self.subscriptions.kept
        kept_subs = self.subscriptions.select({k: s.msg_rate_out + s.backlog for k, s in subs.items()})
        for key in sorted(kept_subs):
            _add(s_counters, list(key), sub_counters(subs[key]))
            _add(s_gauges, list(key), sub_gauges(subs[key]))
        other_subs = {k: sub_counters(s) for k, s in subs.items() if k not in kept_subs}
        if other_subs or self._other_subs.used:
            labels = [OTHER_TOPICS, OTHER_TOPICS]
            _add(s_counters, labels, self._other_subs.total(other_subs, shown=shown_subs))
            _add(s_gauges, labels, _sum((sub_gauges(subs[k]) for k in other_subs), len(SUB_GAUGES)))
        return [owned, wal, *t_counters, *t_gauges, *s_counters, *s_gauges]


class BrokerCollector:
    """The custom collector: a snapshot of the registry's topics at each scrape."""

    def __init__(self, registry: BrokerRegistry, *, max_topics: int) -> None:
        self._reg = registry
        self._series = BrokerSeries(max_topics)

    def describe(self) -> list[Metric]:
        defs = (*BROKER_GAUGES, *TOPIC_COUNTERS, *TOPIC_GAUGES, *SUB_COUNTERS, *SUB_GAUGES)
        return [d.family() for d in defs]

    def collect(self) -> Iterator[Metric]:
        yield from self._series.families(self._reg.stats())


class RuntimeCollector:
    """The broker's fixed costs, read at each scrape: tasks on its event loop and etcd watches
    it holds open (``loop`` is the broker's: a scrape may be served from another thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, store: MetadataStore) -> None:
        self._loop = loop
        self._store = store

    def describe(self) -> list[Metric]:
        return [mn.ASYNCIO_TASKS.family(), mn.ETCD_WATCHES.family()]

    def collect(self) -> Iterator[Metric]:
        tasks, watches = mn.ASYNCIO_TASKS.family(), mn.ETCD_WATCHES.family()
        add_samples(tasks, {(): len(asyncio.all_tasks(self._loop))})
        add_samples(watches, {(): self._store.open_watches})
        yield tasks
        yield watches


class LeaseCollector:
    """The registration lease, read at each scrape (from any thread: two plain numbers)."""

    def __init__(self, lease: Callable[[], KeptLease | None]) -> None:
        self._lease = lease

    def describe(self) -> list[Metric]:
        return [mn.LEASE_SURELY_ALIVE.family(), mn.LEASE_RENEWAL_FAILURES.family()]

    def collect(self) -> Iterator[Metric]:
        lease = self._lease()
        if lease is None:  # not registered yet
            return
        yield add_samples(mn.LEASE_SURELY_ALIVE.family(), {(): lease.remaining_s()})
        yield add_samples(mn.LEASE_RENEWAL_FAILURES.family(), {(): lease.renewal_failures})


class BrokerEvents:
    """Event metrics of one broker, registered on its registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._publish_latency = mn.PUBLISH_LATENCY.histogram(registry)
        self._publishes = mn.PUBLISH_BATCHES.counter(registry)
        self._wal_records = mn.WAL_APPENDS.counter(registry)
        self._wal_bytes = mn.WAL_APPEND_BYTES.counter(registry)
        self._wal_fsync = mn.WAL_FSYNC_LATENCY.histogram(registry)
        self._wal_failures = mn.WAL_COMMIT_FAILURES.counter(registry)
        self._wal_round_logs = mn.WAL_ROUND_LOGS.histogram(registry, ROUND_LOGS_BUCKETS)
        self._wal_round_latency = mn.WAL_ROUND_LATENCY.histogram(registry)
        self._wal_rotations = mn.WAL_SEGMENT_ROTATIONS.counter(registry)
        self._wal_idle_closed = mn.WAL_IDLE_FILES_CLOSED.counter(registry)
        self._history_deleted = mn.RETENTION_OBJECTS_DELETED.counter(registry)
        self._history_deleted_bytes = mn.RETENTION_OBJECT_BYTES_DELETED.counter(registry)
        self._compactions = mn.COMPACTIONS.counter(registry)
        self._compaction_latency = mn.COMPACTION_LATENCY.histogram(registry)
        self._acquired = mn.OWNERSHIP_ACQUIRED.counter(registry)
        self._moves = mn.TOPIC_MOVES.counter(registry)
        self._mux = mn.MUX_STREAMS.gauge(registry)
        self._policy_messages = mn.POLICY_MESSAGES.counter(registry)
        self._policy_waits = mn.POLICY_WAITS.counter(registry)
        #: The two policy counters' values by label, readable in-process.
        self.policy_counts: dict[str, int] = {}
        #: Multiplexed streams open now, by kind (the gauge's values, readable in-process).
        self.mux_open: dict[str, int] = {"publish": 0, "consume": 0}

    def published(self, seconds: float) -> None:
        """A batch was published and is being acknowledged ``seconds`` after it arrived."""
        self._publish_latency.observe(seconds)
        self._publishes.inc()

    def mux_stream(self, kind: str, delta: int) -> None:
        """A multiplexed stream of ``kind`` (``publish``, ``consume``) opened (+1) or ended (-1)."""
        self._mux.labels(kind).inc(delta)
        self.mux_open[kind] = self.mux_open.get(kind, 0) + delta

    # ---- WalObserver
    def committed(self, records: int, nbytes: int, fsync_s: float | None) -> None:
        self._wal_records.inc(records)
        self._wal_bytes.inc(nbytes)
        if fsync_s is not None:
            self._wal_fsync.observe(fsync_s)

    def commit_failed(self) -> None:
        self._wal_failures.inc()

    def rotated(self) -> None:
        self._wal_rotations.inc()

    def history_deleted(self, segments: int, nbytes: int) -> None:
        self._history_deleted.inc(segments)
        self._history_deleted_bytes.inc(nbytes)

    def compacted(self, seconds: float | None) -> None:
        if seconds is None:
            self._compactions.labels("failed").inc()
        else:
            self._compactions.labels("ok").inc()
            self._compaction_latency.observe(seconds)

    # ---- the WAL's CommitGroup (RoundObserver)
    def round_committed(self, logs: int, nbytes: int, seconds: float) -> None:
        self._wal_round_logs.observe(logs)
        self._wal_round_latency.observe(seconds)

    def idle_file_closed(self) -> None:
        self._wal_idle_closed.inc()

    # ---- namespace policies
    def policy_messages(self, action: str, count: int) -> None:
        """``count`` messages were acknowledged by a policy (``expired``, ``evicted``)."""
        self._policy_messages.labels(action).inc(count)
        self.policy_counts[action] = self.policy_counts.get(action, 0) + count

    def policy_wait(self, reason: str) -> None:
        """A publish batch was held back (``rate``, ``backlog``)."""
        self._policy_waits.labels(reason).inc()
        self.policy_counts[reason] = self.policy_counts.get(reason, 0) + 1

    # ---- ownership
    def acquired(self) -> None:
        self._acquired.inc()

    def moved(self, direction: str, outcome: str) -> None:
        """A move of a topic ``direction`` (``out`` of or ``in`` to this broker) ended with
        ``outcome`` (``handed_over``, ``abandoned``, ``lost``, ``failed``)."""
        self._moves.labels(direction, outcome).inc()
