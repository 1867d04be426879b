"""The broker's collector (from TopicStats snapshots, in tables) and event metrics."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from danube_broker.metrics import BrokerEvents, BrokerSeries, LeaseCollector
from danube_broker.stats import SubscriptionStats, TopicStats
from danube_broker.wal import Durability, TopicLog, WalConfig
from danube_common.metadata.lease import KeptLease
from danube_common.metadata.memory import MemoryStore

pytestmark = pytest.mark.unit

Sample = tuple[str, tuple[tuple[str, str], ...]]


def samples(families: Iterable[Metric]) -> dict[Sample, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def sub(name: str, **kw: object) -> SubscriptionStats:
    fields: dict[str, object] = {
        "name": name,
        "sub_type": "Shared",
        "consumers": 1,
        "connected_consumers": 1,
        "msgs_out": 0,
        "bytes_out": 0,
        "msgs_dropped": 0,
        "acks": 0,
        "nacks": 0,
        "backlog": 0,
    }
    fields.update(kw)
    return SubscriptionStats(**fields)  # type: ignore[arg-type]


def topic(name: str, *subs: SubscriptionStats, **kw: object) -> TopicStats:
    fields: dict[str, object] = {
        "topic": name,
        "dispatch_strategy": "reliable",
        "msgs_in": 0,
        "bytes_in": 0,
        "msgs_out": 0,
        "bytes_out": 0,
        "msgs_dropped": 0,
        "producers": 0,
        "consumers": len(subs),
        "subscriptions": len(subs),
        "next_offset": 0,
        "per_subscription": {s.name: s for s in subs},
    }
    fields.update(kw)
    return TopicStats(**fields)  # type: ignore[arg-type]


def T(name: str) -> tuple[tuple[str, str], ...]:
    return (("topic", name),)


def TS(name: str, subscription: str) -> tuple[tuple[str, str], ...]:
    return (("subscription", subscription), ("topic", name))


def test_every_figure_of_a_topic_and_its_subscriptions() -> None:
    t = topic(
        "/ns/a",
        sub(
            "s1",
            backlog=7,
            connected_consumers=2,
            nacks=3,
            redelivered_total=4,
            dead_lettered_total=1,
            dropped_total=2,
            pending_redeliveries=5,
            blocked_at=12,
        ),
        sub("s2", msgs_dropped=6),  # non-reliable: drops counted on the subscription
        msgs_in=10,
        bytes_in=1000,
        msgs_out=20,
        bytes_out=2000,
        msgs_dropped=6,
        producers=2,
        wal_bytes=4096,
    )
    got = samples(BrokerSeries(10).families({"/ns/a": t}))
    expected = {
        ("danube_broker_topics_owned", ()): 1,
        ("danube_wal_disk_bytes", ()): 4096,
        ("danube_topic_messages_in_total", T("/ns/a")): 10,
        ("danube_topic_bytes_in_total", T("/ns/a")): 1000,
        ("danube_consumer_messages_out_total", T("/ns/a")): 20,
        ("danube_consumer_bytes_out_total", T("/ns/a")): 2000,
        ("danube_topic_messages_dropped_total", T("/ns/a")): 6,
        ("danube_topic_active_producers", T("/ns/a")): 2,
        ("danube_topic_active_consumers", T("/ns/a")): 2,
        ("danube_topic_active_subscriptions", T("/ns/a")): 2,
        ("danube_subscription_redelivery_total", TS("/ns/a", "s1")): 4,
        ("danube_subscription_nack_total", TS("/ns/a", "s1")): 3,
        ("danube_subscription_dlq_total", TS("/ns/a", "s1")): 1,
        ("danube_subscription_dropped_total", TS("/ns/a", "s1")): 2,
        ("danube_subscription_lag_messages", TS("/ns/a", "s1")): 7,
        ("danube_subscription_active_consumers", TS("/ns/a", "s1")): 2,
        ("danube_subscription_pending_redelivery", TS("/ns/a", "s1")): 5,
        ("danube_subscription_terminal_blocked", TS("/ns/a", "s1")): 1,
        ("danube_subscription_redelivery_total", TS("/ns/a", "s2")): 0,
        ("danube_subscription_nack_total", TS("/ns/a", "s2")): 0,
        ("danube_subscription_dlq_total", TS("/ns/a", "s2")): 0,
        ("danube_subscription_dropped_total", TS("/ns/a", "s2")): 6,
        ("danube_subscription_lag_messages", TS("/ns/a", "s2")): 0,
        ("danube_subscription_active_consumers", TS("/ns/a", "s2")): 1,
        ("danube_subscription_pending_redelivery", TS("/ns/a", "s2")): 0,
        ("danube_subscription_terminal_blocked", TS("/ns/a", "s2")): 0,
    }
    assert got == expected


def test_no_topic_no_series_but_the_broker_figures() -> None:
    got = samples(BrokerSeries(10).families({}))
    assert got == {("danube_broker_topics_owned", ()): 0, ("danube_wal_disk_bytes", ()): 0}


def test_topics_beyond_the_bound_sum_under_other() -> None:
    stats = {
        f"/ns/t{i}": topic(
            f"/ns/t{i}", sub("s", backlog=i), msgs_in=100 * i, producers=1, msg_rate_in=float(i)
        )
        for i in range(1, 6)
    }
    got = samples(BrokerSeries(2).families(stats))
    topics = {dict(labels)["topic"] for (name, labels) in got if name == "danube_topic_messages_in_total"}
    assert topics == {"/ns/t5", "/ns/t4", "_other"}  # the busiest two, and the rest
    assert got[("danube_topic_messages_in_total", T("_other"))] == 100 + 200 + 300
    assert got[("danube_topic_active_producers", T("_other"))] == 3
    # Subscriptions: the two with the most backlog (rates are 0), the rest under _other/_other.
    subs = {labels for (name, labels) in got if name == "danube_subscription_lag_messages"}
    assert subs == {TS("/ns/t5", "s"), TS("/ns/t4", "s"), TS("_other", "_other")}
    assert got[("danube_subscription_lag_messages", TS("_other", "_other"))] == 1 + 2 + 3
    # Every family stays within the bound: max_topics + 1 series.
    per_family: dict[str, int] = {}
    for name, _labels in got:
        per_family[name] = per_family.get(name, 0) + 1
    assert max(per_family.values()) == 3


def test_other_counters_never_go_down_as_topics_come_and_go() -> None:
    series = BrokerSeries(1)
    stats = {
        "/ns/a": topic("/ns/a", msgs_in=50, msg_rate_in=5.0),
        "/ns/b": topic("/ns/b", msgs_in=10),
        "/ns/c": topic("/ns/c", msgs_in=20),
    }
    first = samples(series.families(stats))[("danube_topic_messages_in_total", T("_other"))]
    assert first == 30
    del stats["/ns/b"]  # unloaded (moved away)
    stats["/ns/c"] = topic("/ns/c", msgs_in=25)
    second = samples(series.families(stats))[("danube_topic_messages_in_total", T("_other"))]
    assert second == 10 + 25
    del stats["/ns/c"]  # now every topic has its own series: "_other" stays, at its total
    third = samples(series.families(stats))[("danube_topic_messages_in_total", T("_other"))]
    assert third == 35


def test_an_idle_topic_gives_its_series_up_without_a_jump_in_other() -> None:
    series = BrokerSeries(1)
    stats = {
        "/ns/a": topic("/ns/a", msgs_in=1000, msg_rate_in=5.0),
        "/ns/b": topic("/ns/b", msgs_in=10),
    }
    got = samples(series.families(stats))
    assert got[("danube_topic_messages_in_total", T("/ns/a"))] == 1000
    assert got[("danube_topic_messages_in_total", T("_other"))] == 10
    # a goes idle, b gets busy: b takes the place; a's 1000 were shown on its own series.
    stats = {
        "/ns/a": topic("/ns/a", msgs_in=1000),
        "/ns/b": topic("/ns/b", msgs_in=20, msg_rate_in=3.0),
    }
    got = samples(series.families(stats))
    assert got[("danube_topic_messages_in_total", T("/ns/b"))] == 20
    assert got[("danube_topic_messages_in_total", T("_other"))] == 10  # b's first 10 stay; a adds 0
    stats["/ns/a"] = topic("/ns/a", msgs_in=1004)
    got = samples(series.families(stats))
    assert got[("danube_topic_messages_in_total", T("_other"))] == 14


def test_events() -> None:
    registry = CollectorRegistry()
    events = BrokerEvents(registry)
    events.published(0.002)
    events.published(0.004)
    events.committed(10, 1500, 0.001)
    events.committed(5, 700, None)  # durability none: no fsync
    events.commit_failed()
    events.rotated()
    events.acquired()
    events.moved("out", "handed_over")
    events.moved("in", "handed_over")
    events.moved("out", "abandoned")

    def v(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert v("danube_producer_send_total") == 2
    assert v("danube_producer_send_latency_seconds_count") == 2
    assert v("danube_producer_send_latency_seconds_sum") == pytest.approx(0.006)
    assert v("danube_producer_send_latency_seconds_bucket", le="0.0025") == 1
    assert v("danube_wal_append_total") == 15
    assert v("danube_wal_append_bytes_total") == 2200
    assert v("danube_wal_flush_latency_seconds_count") == 1
    assert v("danube_wal_flush_errors_total") == 1
    assert v("danube_wal_file_rotate_total") == 1
    assert v("danube_broker_assignments_total") == 1
    assert v("danube_broker_topic_moves_total", direction="out", outcome="handed_over") == 1
    assert v("danube_broker_topic_moves_total", direction="in", outcome="handed_over") == 1
    assert v("danube_broker_topic_moves_total", direction="out", outcome="abandoned") == 1


async def test_the_wal_reports_commits_and_rolls(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    events = BrokerEvents(registry)
    log = await TopicLog.open(
        tmp_path, cfg=WalConfig(segment_max_bytes=1024), durability=Durability.FSYNC, observer=events
    )
    try:
        for _ in range(5):  # five commits of ~600 bytes each
            await log.append([b"r" * 100] * 5, [1] * 5)
        await log.roll()  # sealing on request counts too
    finally:
        await log.aclose()
    assert registry.get_sample_value("danube_wal_append_total") == 25
    assert registry.get_sample_value("danube_wal_flush_latency_seconds_count") == 5
    # Commits 2 to 5 each found the segment too full for them; then the roll on request.
    assert registry.get_sample_value("danube_wal_file_rotate_total") == 5


async def test_lease_collector_reports_the_surely_alive_time_and_failed_renewals() -> None:
    store = MemoryStore()
    holder: list[KeptLease] = []
    collector = LeaseCollector(lambda: holder[0] if holder else None)
    assert list(collector.collect()) == [], "nothing before the broker registered"
    kept = KeptLease(store, 10, margin_s=2.0)
    await kept.start()
    holder.append(kept)
    got = samples(collector.collect())
    left = got[("danube_broker_lease_surely_alive_seconds", ())]
    assert 7.0 < left <= 8.0, "TTL - margin after the grant"
    assert got[("danube_broker_lease_renewal_failures_total", ())] == 0
    kept.renewal_failures = 3
    kept.deadline = 0.0  # past the deadline: 0, never negative
    got = samples(collector.collect())
    assert got[("danube_broker_lease_surely_alive_seconds", ())] == 0.0
    assert got[("danube_broker_lease_renewal_failures_total", ())] == 3
    await kept.aclose()
    await store.aclose()
