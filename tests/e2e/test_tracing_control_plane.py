"""One trace per control-plane decision, across processes: a new topic's placement (lookup ->
load manager -> broker), a topic move (lookup -> load manager -> old broker -> new broker, with
the uploader's flush of the log inside), and a planner cycle (the plan id, its etcd writes).

The cluster (tests/e2e/traced.py) exports every process's spans to a real OTLP/gRPC receiver;
the context travels between processes in gRPC metadata and in the etcd records each step writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from danube_local.cluster import LocalCluster
from tests.e2e.conftest import cli
from tests.e2e.traced import admin, app_env, one, run, traced_cluster
from tests.support.otlp import OtlpReceiver, ReceivedSpan, children

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def otlp() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def cluster(otlp: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with traced_cluster(otlp, tmp_path_factory.mktemp("traced-cp"), planner="python") as c:
        yield c


def span(otlp: OtlpReceiver, name: str, service: str, **kw: object) -> ReceivedSpan:
    found = otlp.wait_for(lambda s: s.name == name and s.service == service, what=f"{service}: {name}", **kw)  # type: ignore[arg-type]
    return one(found, f"{service}: {name}")


def child(otlp: OtlpReceiver, parent: ReceivedSpan, name: str, service: str) -> ReceivedSpan:
    """The one span ``name`` of ``service`` whose parent is ``parent`` (waited for)."""
    found = otlp.wait_for(
        lambda s: s.parent_span_id == parent.span_id and s.trace_id == parent.trace_id and s.name == name,
        what=f"{service}: {name} under {parent}",
    )
    got = one(found, f"{name} under {parent}")
    assert got.service == service, str(got)
    return got


def parent(otlp: OtlpReceiver, s: ReceivedSpan) -> ReceivedSpan:
    """The parent of ``s`` (waited for: a parent ends, and is exported, after its children)."""
    found = otlp.wait_for(
        lambda p: p.trace_id == s.trace_id and p.span_id == s.parent_span_id, what=f"the parent of {s}"
    )
    return one(found, f"the parent of {s}")


def instance(s: ReceivedSpan) -> str:
    return str(s.resource.get("service.instance.id"))


def test_a_new_topics_placement_is_one_trace_lookup_load_manager_broker(
    cluster: LocalCluster, otlp: OtlpReceiver
) -> None:
    topic = "/default/cp-placed"
    admin(cluster, "topics", "create", topic, "--dispatch-strategy", "reliable")
    place = span(otlp, f"place {topic}", "danube-load-manager")
    create = parent(otlp, place)
    assert create.service == "danube-lookup" and create.kind == "server", str(create)
    assert create.name.endswith("/CreateTopic") and create.parent_span_id == "", "danube-admin does not trace"
    request = [s for s in children(otlp.trace(create.trace_id), create) if s.name == "etcd Txn"]
    assert any(
        any("/unassigned/default/cp-placed" in k for k in s.attributes["db.etcd.keys"]) for s in request
    ), "the placement request is written under the lookup's span"
    assert place.attributes["danube.lm.action"] == "place" and place.attributes["danube.lm.applied"] is True
    assert place.attributes["danube.topic"] == topic and len(place.attributes["danube.lm.scores"]) == 2
    load = child(otlp, place, f"load {topic}", "danube-broker")
    assert load.attributes["danube.broker.id"] == place.attributes["danube.broker.to"]
    opened = child(otlp, load, f"open log {topic}", "danube-broker")
    assert opened.attributes["danube.log.start_offset"] == 0


def test_a_topic_move_is_one_trace_across_lookup_load_manager_and_both_brokers(
    cluster: LocalCluster, otlp: OtlpReceiver
) -> None:
    topic = "/default/cp-moved"
    run(
        [cli("danube-cli"), "produce", "-s", cluster.service_url, "-t", topic, "-m", "m", "-c", "3", "--reliable"],
        env=app_env(otlp, "app-producer"),
    )  # fmt: skip
    sends = otlp.wait_for(lambda s: s.name == f"send {topic}", count=3, what="the messages' send spans")
    admin(cluster, "topics", "move", topic)

    move = span(otlp, f"move {topic}", "danube-load-manager")
    request = parent(otlp, move)
    assert request.service == "danube-lookup" and request.name.endswith("/MoveTopic"), str(request)
    assert move.attributes["danube.lm.reason"] == "requested"
    old, new = move.attributes["danube.broker.from"], move.attributes["danube.broker.to"]
    assert old != new

    hand_over = child(otlp, move, f"hand over {topic}", "danube-broker")
    assert hand_over.attributes["danube.broker.from"] == old
    assert hand_over.attributes["danube.move.outcome"] == "handed over"
    assert hand_over.attributes["danube.log.next_offset"] == 3
    assert "sealed" in hand_over.events and "flushed to object storage" in hand_over.events
    load = child(otlp, hand_over, f"load {topic}", "danube-broker")
    assert load.attributes["danube.broker.id"] == new and instance(load) != instance(hand_over)
    opened = child(otlp, load, f"open log {topic}", "danube-broker")
    assert opened.attributes["danube.log.start_offset"] == 3, (
        "the new owner continues where the old log ended"
    )

    # The flush the hand-over asked of the old broker's uploader is in the trace, and its upload
    # links to the messages it carried.
    flush = child(otlp, hand_over, "danube.uploader.v1.WalUploader/Flush", "danube-broker")
    served = child(otlp, flush, "danube.uploader.v1.WalUploader/Flush", "danube-wal-uploader")
    upload = child(otlp, served, f"upload {topic}", "danube-wal-uploader")
    assert {(s.trace_id, s.span_id) for s in sends} <= set(upload.links)
    assert any(s.name == "etcd Txn" for s in children(otlp.trace(upload.trace_id), upload))

    services = {s.service for s in otlp.trace(move.trace_id)}
    assert {"danube-lookup", "danube-load-manager", "danube-broker", "danube-wal-uploader"} <= services
    assert len({instance(s) for s in otlp.trace(move.trace_id) if s.service == "danube-broker"}) == 2


def test_a_planner_cycle_is_a_trace_with_the_plan_id_and_its_etcd_writes(
    cluster: LocalCluster, otlp: OtlpReceiver
) -> None:
    plan = json.loads(admin(cluster, "--output", "json", "rebalance", "--dry-run"))
    plan_id = plan["plan_id"]
    cycles = otlp.wait_for(
        lambda s: s.name == "planner cycle" and s.attributes.get("danube.plan.id") == plan_id,
        what=f"the cycle that wrote plan {plan_id}",
    )
    cycle = one(cycles, "cycle span")
    assert cycle.service == "danube-planner" and cycle.parent_span_id == ""
    assert (
        cycle.attributes["danube.planner.written"] is True and cycle.attributes["danube.planner.brokers"] == 2
    )
    assert plan["traceparent"].startswith(f"00-{cycle.trace_id}-{cycle.span_id}-"), (
        "it carries the cycle's context"
    )
    requested = one(
        otlp.wait_for(lambda s: (s.trace_id, s.span_id) in cycle.links, what="the linked rebalance request"),
        "linked span",
    )
    assert requested.service == "danube-lookup" and requested.name.endswith("/RequestRebalance")
    write = child(otlp, cycle, "write report and plan", "danube-planner")
    txns = otlp.wait_for(
        lambda s: s.parent_span_id == write.span_id and s.name == "etcd Txn", what="the cycle's etcd writes"
    )
    plan_key = f"/{cluster.cluster}/rebalance/plans/{plan_id}"
    assert any(plan_key in s.attributes["db.etcd.keys"] for s in txns), [s.attributes for s in txns]
    stages = {s.name for s in children(otlp.trace(cycle.trace_id), cycle)}
    assert {"read cluster", "compute report", "write report and plan"} <= stages
    read = child(otlp, cycle, "read cluster", "danube-planner")
    otlp.wait_for(
        lambda s: s.parent_span_id == read.span_id and s.name == "etcd Range", what="its etcd reads"
    )
