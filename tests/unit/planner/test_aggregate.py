"""The aggregation on plain Python data: rates, estimates for unlisted topics, windows, scores."""

from __future__ import annotations

import math

import pytest

from danube_common.load import TopicLoad
from danube_common.load_score import ScoreWeights
from danube_planner.aggregate import aggregate
from danube_planner.model import AggregateParams, OwnerRow, PlannerInputs, coefficient_of_variation
from tests.support.score_table import CASES, Case
from tests.unit.planner.helpers import NOW, Synthetic, report, zipf_cluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def owned(syn: Synthetic, broker: str, *names: str) -> None:
    for n in names:
        syn.owners[n] = OwnerRow(n, broker, assigned_at_ms=NOW - 3_600_000, epoch=1)


def table_inputs(case: Case) -> PlannerInputs:
    """A case of the shared score table as one cycle's inputs (every broker active)."""
    syn = Synthetic(states={b.broker_id: "active" for b in case.brokers})
    syn.current = [b.report(NOW) for b in case.brokers]
    for b in case.brokers:
        owned(syn, b.broker_id, *b.topic_names())
    return syn.inputs()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_broker_scores_match_the_shared_table(case: Case) -> None:
    agg = aggregate(table_inputs(case), AggregateParams(weights=case.weights))
    assert agg.active_scores() == pytest.approx(case.expected)


def test_scores_add_up_and_match_the_load_manager_formula() -> None:
    syn = Synthetic(states={"b1": "active", "b2": "active"})
    syn.current = [
        report(
            "b1", NOW, [TopicLoad("/a/x", msg_rate_in=1000, byte_rate_in=1e6), TopicLoad("/a/y")], cpu=1.0
        ),
        report("b2", NOW, [TopicLoad("/b/z", msg_rate_out=200, byte_rate_out=2e5)], cpu=0.2),
    ]
    owned(syn, "b1", "/a/x", "/a/y")
    owned(syn, "b2", "/b/z")
    agg = aggregate(syn.inputs())
    b1, b2 = agg.brokers
    # means over the two active brokers (floored): topics 1.5, msgs 600, bytes 600k, cpu 0.3, mem 0.125
    assert agg.means == pytest.approx(
        {"topics": 1.5, "msgs": 600.0, "bytes": 600_000.0, "cpu": 0.3, "memory": 0.125}
    )
    w = ScoreWeights()
    expected_b1 = (
        w.topics * 2 / 1.5
        + w.msgs * 1000 / 600
        + w.bytes * 1e6 / 6e5
        + w.cpu * 0.5 / 0.3
        + w.memory * 0.125 / 0.125
    )
    assert b1.score == pytest.approx(expected_b1)
    for b in (b1, b2):
        assert math.fsum(t.load for t in agg.topics if t.broker_id == b.broker_id) == pytest.approx(b.score)
    # The idle topic carries its topic share and no CPU (the busy one carries all of b1's CPU).
    idle = next(t for t in agg.topics if t.topic == "/a/y")
    assert idle.load == pytest.approx(w.topics / 1.5)
    assert agg.cv == pytest.approx(coefficient_of_variation([b1.score, b2.score]))


def test_unlisted_topics_share_what_their_broker_did_not_list() -> None:
    rows = [TopicLoad(f"/n/t{i}", msg_rate_in=100.0 * (i + 1), backlog=10) for i in range(5)]
    syn = Synthetic(states={"b1": "active"})
    syn.current = [report("b1", NOW, rows, max_topics=2)]  # lists t4 and t3 only
    owned(syn, "b1", *(t.topic for t in rows), "/n/new")  # and a brand new topic
    agg = aggregate(syn.inputs())
    by = {t.topic: t for t in agg.topics}
    assert not by["/n/t4"].estimated and by["/n/t4"].msg_rate_in == 500.0
    # left over: 100 + 200 + 300 = 600 msg/s, 30 backlog, over t0, t1, t2 and /n/new
    for name in ("/n/t0", "/n/t1", "/n/t2", "/n/new"):
        assert by[name].estimated
        assert by[name].msg_rate_in == pytest.approx(150.0)
        assert by[name].backlog == pytest.approx(7.5)
    assert agg.brokers[0].msg_rate_in == pytest.approx(1500.0)
    assert agg.brokers[0].topics == 6


def test_history_in_the_window_is_averaged_once_per_report() -> None:
    syn = Synthetic(states={"b1": "active"})
    now_report = report("b1", NOW, [TopicLoad("/n/t", msg_rate_in=300.0, backlog=5)])
    syn.current = [now_report]
    syn.history = [
        now_report,  # the same report in history: counted once
        report("b1", NOW - 10_000, [TopicLoad("/n/t", msg_rate_in=100.0, backlog=99)]),
        report("b1", NOW - 10_000_000, [TopicLoad("/n/t", msg_rate_in=1e9)]),  # outside the window
    ]
    owned(syn, "b1", "/n/t")
    agg = aggregate(syn.inputs(window_ms=600_000))
    t = agg.topics[0]
    assert t.msg_rate_in == pytest.approx(200.0)
    assert t.backlog == 5  # the newest row's backlog
    assert agg.samples == 2


def test_a_topic_that_moved_keeps_its_history() -> None:
    syn = Synthetic(states={"b1": "active", "b2": "active"})
    syn.current = [report("b1", NOW, []), report("b2", NOW, [TopicLoad("/n/t", msg_rate_in=100.0)])]
    syn.history = [report("b1", NOW - 5000, [TopicLoad("/n/t", msg_rate_in=300.0)])]
    owned(syn, "b2", "/n/t")
    agg = aggregate(syn.inputs())
    assert agg.topics[0].broker_id == "b2" and agg.topics[0].msg_rate_in == pytest.approx(200.0)


def test_only_active_brokers_count_for_means_and_imbalance() -> None:
    syn = Synthetic(states={"b1": "active", "b2": "active", "b3": "draining"})
    syn.current = [
        report("b1", NOW, [TopicLoad("/n/a", msg_rate_in=500)]),
        report("b2", NOW, [TopicLoad("/n/b", msg_rate_in=500)]),
        report("b3", NOW, [TopicLoad("/n/c", msg_rate_in=50_000)]),
    ]
    owned(syn, "b1", "/n/a")
    owned(syn, "b2", "/n/b")
    owned(syn, "b3", "/n/c")
    owned(syn, "gone", "/n/orphan")  # owner not registered: listed as unregistered
    agg = aggregate(syn.inputs())
    states = {b.broker_id: b.state for b in agg.brokers}
    assert states == {"b1": "active", "b2": "active", "b3": "draining", "gone": "unregistered"}
    assert agg.cv == pytest.approx(0.0)
    assert agg.means["msgs"] == pytest.approx(500.0)
    assert agg.active_scores().keys() == {"b1", "b2"}


def test_namespaces_and_hot_topics() -> None:
    syn = zipf_cluster(brokers=4, topics=60, namespaces=3)
    agg = aggregate(syn.inputs(), AggregateParams(hot_topics=5, max_namespaces=2))
    assert len(agg.hot_topics) == 5
    assert [t.load for t in agg.hot_topics] == sorted((t.load for t in agg.topics), reverse=True)[:5]
    assert len(agg.namespaces) == 2
    full = aggregate(syn.inputs(), AggregateParams(max_namespaces=10))
    assert sum(n.topics for n in full.namespaces) == 60
    assert math.fsum(n.load for n in full.namespaces) == pytest.approx(math.fsum(t.load for t in full.topics))
    ns0 = next(n for n in full.namespaces if n.namespace == "ns0")
    assert ns0.msg_rate_in == pytest.approx(
        math.fsum(t.msg_rate_in for t in full.topics if t.namespace == "ns0")
    )
    assert ns0.brokers == len({t.broker_id for t in full.topics if t.namespace == "ns0"})


def test_no_active_broker_uses_the_floors() -> None:
    syn = Synthetic(states={"b1": "drained"})
    syn.current = [report("b1", NOW, [TopicLoad("/n/t", msg_rate_in=5)])]
    agg = aggregate(syn.inputs())
    assert agg.cv == 0.0 and agg.active_scores() == {}
    assert agg.means["msgs"] == 100.0
