"""One message, one trace: producer -> broker (publish, WAL commit, fsync) -> delivery ->
consumer, across processes and a topic move, exported over OTLP/gRPC to a real receiver.

Every service of the cluster and both CLIs export to :class:`tests.support.otlp.OtlpReceiver`
(a TraceService server built on the collector's protobufs); the assertions walk the parent/child
links of the spans it received.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from danube_local.cluster import LocalCluster
from tests.e2e.conftest import cli
from tests.e2e.traced import admin, app_env, one, run, traced_cluster
from tests.support.otlp import OtlpReceiver, ReceivedSpan, children

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def otlp() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def cluster(otlp: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with traced_cluster(otlp, tmp_path_factory.mktemp("traced")) as c:
        yield c


def produce(cluster: LocalCluster, otlp: OtlpReceiver, topic: str, count: int, **sampler: str) -> None:
    run(
        [cli("danube-cli"), "produce", "-s", cluster.service_url, "-t", topic, "-m", "traced", "-c", str(count),
         "--reliable"],
        env=app_env(otlp, "app-producer", **sampler),
    )  # fmt: skip


def consume(cluster: LocalCluster, otlp: OtlpReceiver, topic: str, count: int, sub: str) -> None:
    run(
        [cli("danube-cli"), "consume", "-s", cluster.service_url, "-t", topic, "-m", sub, "-c", str(count),
         "--initial-position", "earliest", "--sub-type", "exclusive"],
        env=app_env(otlp, "app-consumer"),
    )  # fmt: skip


def sends(otlp: OtlpReceiver, topic: str) -> list[ReceivedSpan]:
    return otlp.find(lambda s: s.name == f"send {topic}" and s.service == "app-producer")


def test_a_message_trace_runs_from_send_to_processing(cluster: LocalCluster, otlp: OtlpReceiver) -> None:
    topic = "/default/traced"
    produce(cluster, otlp, topic, 5)
    consume(cluster, otlp, topic, 5, "audit")
    otlp.wait_for(
        lambda s: s.name == f"process {topic}" and s.attributes.get("messaging.danube.settlement") == "ack",
        count=5,
        what="process spans of acked messages",
    )
    roots = sends(otlp, topic)
    assert len(roots) == 5
    assert len({s.trace_id for s in roots}) == 5, "one trace per message"
    offsets = sorted(s.attributes["messaging.danube.offset"] for s in roots)
    assert offsets == [0, 1, 2, 3, 4]
    for send in roots:
        assert send.kind == "producer" and send.parent_span_id == "", str(send)
        expected = {f"publish {topic}", "wal commit", "fsync", f"deliver {topic}", f"process {topic}"}
        otlp.wait_for(
            lambda s, t=send.trace_id, names=expected: s.trace_id == t and s.name in names,
            count=len(expected),
            what=f"the spans of message {send.attributes['messaging.danube.offset']}",
        )
        spans = otlp.trace(send.trace_id)
        under_send = children(spans, send)
        publish = one([s for s in under_send if s.name == f"publish {topic}"], "broker publish span")
        assert publish.service == "danube-broker" and publish.kind == "server"
        assert publish.attributes["messaging.danube.offset"] == send.attributes["messaging.danube.offset"]
        commit = one([s for s in children(spans, publish) if s.name == "wal commit"], "WAL commit span")
        assert commit.attributes["danube.wal.durability"] == "fsync"
        fsync = one(children(spans, commit), "fsync span")
        assert commit.start_ns <= fsync.start_ns <= fsync.end_ns <= commit.end_ns
        assert publish.start_ns <= commit.start_ns and commit.end_ns <= publish.end_ns
        deliver = one([s for s in under_send if s.name == f"deliver {topic}"], "delivery span")
        assert (
            deliver.service == "danube-broker"
            and deliver.attributes["messaging.consumer.group.name"] == "audit"
        )
        process = one([s for s in under_send if s.name == f"process {topic}"], "consumer process span")
        assert process.service == "app-consumer" and process.kind == "consumer"
        assert process.attributes["messaging.danube.offset"] == send.attributes["messaging.danube.offset"]
        # The order of events along the message's life.
        assert send.start_ns <= publish.start_ns <= deliver.start_ns <= process.start_ns
        assert publish.resource.get("service.instance.id") == deliver.resource.get("service.instance.id")


def test_rpcs_carry_the_callers_context(cluster: LocalCluster, otlp: OtlpReceiver) -> None:
    """The CLI's CreateProducer is a CLIENT span whose child is the broker's SERVER span."""
    calls = otlp.wait_for(
        lambda s: s.name == "danube.ProducerService/CreateProducer" and s.service == "app-producer",
        what="the producer's CreateProducer client span",
    )
    client = calls[0]
    assert client.kind == "client"
    server = otlp.wait_for(
        lambda s: s.parent_span_id == client.span_id and s.trace_id == client.trace_id,
        what="the broker's server span of that call",
    )[0]
    assert server.service == "danube-broker" and server.kind == "server"
    assert server.attributes["rpc.grpc.status_code"] == 0


def test_sampling_is_per_message_and_a_batch_carries_many_traces(
    cluster: LocalCluster, otlp: OtlpReceiver
) -> None:
    topic = "/default/sampled"
    produce(cluster, otlp, topic, 400, sampler="parentbased_traceidratio", sampler_arg="0.25")
    sampled = otlp.wait_for(lambda s: s.name == f"send {topic}", what="sampled send spans")
    publishes = otlp.wait_for(
        lambda s: s.name == f"publish {topic}", count=len(sampled), what="a publish span per sampled message"
    )
    assert 40 <= len(sampled) <= 180, f"about a quarter of 400 sampled, got {len(sampled)}"
    assert len(publishes) == len(sampled), "the broker continues exactly the sampled messages"
    by_trace = {s.trace_id: s for s in sampled}
    assert all(p.trace_id in by_trace and p.parent_span_id == by_trace[p.trace_id].span_id for p in publishes)
    assert max(p.attributes["messaging.batch.message_count"] for p in publishes) > 1, (
        "sampled messages travelled in batches with unsampled ones"
    )


def test_the_trace_follows_the_message_across_a_redelivery_and_a_topic_move(
    cluster: LocalCluster, otlp: OtlpReceiver
) -> None:
    topic = "/default/moved"
    produce(cluster, otlp, topic, 3)
    for _ in range(2):  # delivered, not acknowledged: the subscription delivers them again
        run(
            [cli("danube-cli"), "consume", "-s", cluster.service_url, "-t", topic, "-m", "mover", "-c", "3",
             "--initial-position", "earliest", "--sub-type", "exclusive", "--no-ack"],
            env=app_env(otlp, "app-consumer"),
        )  # fmt: skip
    publish = otlp.wait_for(lambda s: s.name == f"publish {topic}", count=3, what="publish spans")
    first_broker = publish[0].resource["service.instance.id"]
    admin(cluster, "topics", "move", topic)
    consume(cluster, otlp, topic, 3, "mover")
    for p in publish:
        delivers = otlp.wait_for(
            lambda s, t=p.trace_id: s.trace_id == t and s.name == f"deliver {topic}",
            count=3,
            what="three deliveries of the message",
        )
        assert all(d.parent_span_id == p.parent_span_id for d in delivers), "children of the producer's send"
        here = [d for d in delivers if d.resource["service.instance.id"] == first_broker]
        moved = [d for d in delivers if d.resource["service.instance.id"] != first_broker]
        assert max(d.attributes["messaging.danube.redelivery_count"] for d in here) >= 1, (
            f"the second delivery is a redelivery: {[str(d) for d in here]}"
        )
        assert moved, "after the move the other broker delivers the message, in the same trace"
        otlp.wait_for(
            lambda s, t=p.trace_id: (
                s.trace_id == t
                and s.name == f"process {topic}"
                and s.attributes.get("messaging.danube.settlement") == "ack"
            ),
            what="the processing that acknowledged it",
        )
