"""The broker's part of a message's trace: publish spans for exactly the sampled messages of a
batch, the WAL's commit round under them (reported by a real TopicLog), deliveries, and nothing
at all while tracing is off."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from danube_broker import tracing as broker_tracing
from danube_broker.wal import Durability, StorageFailed, TopicLog
from danube_broker.wal.model import COMMIT_OBSERVER, CommitRound
from danube_common.observability import tracing
from danube_common.observability.messages import inject
from danube_common.pb import DanubeApi_pb2 as pb
from tests.support.tracing import capture_spans, named
from tests.unit.wal.helpers import cfg

pytestmark = pytest.mark.unit

TOPIC = "/default/t"


def batch(sampled: set[int], n: int = 4) -> tuple[list[pb.StreamMessage], list[object]]:
    """``n`` messages; those at ``sampled`` carry the context of their own send span."""
    tr = tracing.tracer("producer")
    msgs, sends = [], []
    for i in range(n):
        m = pb.StreamMessage(payload=b"x" * (i + 1))
        if i in sampled:
            send = tr.start_span(f"send {TOPIC}")
            inject(send, m.attributes)
            sends.append(send)
        msgs.append(m)
    return msgs, sends


def test_publish_spans_for_the_sampled_messages_with_their_commit_round() -> None:
    with capture_spans() as exporter:
        msgs, sends = batch({1, 3})
        with broker_tracing.publishing(TOPIC, "p1", msgs) as spans:
            assert spans is not None
            observer = COMMIT_OBSERVER.get()
            assert observer is not None
            observer(CommitRound(1_000_000, 3_000_000, 0.0005, 40, 4000, 3, "fsync"))
            spans.finished(None, 20)
        assert COMMIT_OBSERVER.get() is None, "the observer is only set while publishing"
        finished = exporter.get_finished_spans()
    publishes = named(finished, f"publish {TOPIC}")
    assert [p.attributes["messaging.danube.offset"] for p in publishes] == [21, 23]  # type: ignore[index]
    for publish, send in zip(publishes, sends, strict=True):
        assert publish.kind == SpanKind.SERVER
        assert publish.parent is not None and publish.parent.span_id == send.get_span_context().span_id  # type: ignore[attr-defined]
        assert publish.attributes["messaging.batch.message_count"] == 4  # type: ignore[index]
    commits = named(finished, "wal commit")
    assert {c.parent.span_id for c in commits} == {p.context.span_id for p in publishes}  # type: ignore[union-attr]
    for c in commits:
        assert (c.start_time, c.end_time) == (1_000_000, 3_000_000)
        assert c.attributes["danube.wal.round.records"] == 40  # type: ignore[index]
    fsyncs = named(finished, "fsync")
    assert len(fsyncs) == 2
    assert all(f.end_time == 3_000_000 and f.start_time == 2_500_000 for f in fsyncs)


def test_a_refused_batch_fails_its_spans() -> None:
    with capture_spans() as exporter:
        msgs, _ = batch({0})
        with broker_tracing.publishing(TOPIC, "p", msgs) as spans:
            assert spans is not None
            spans.failed(StorageFailed("disk broke"))
        (publish,) = named(exporter.get_finished_spans(), f"publish {TOPIC}")
    assert publish.status.status_code == StatusCode.ERROR


def test_nothing_without_a_sampled_message_or_with_tracing_off() -> None:
    with capture_spans() as exporter:
        msgs, _ = batch(set())
        with broker_tracing.publishing(TOPIC, "p", msgs) as spans:
            assert spans is None and COMMIT_OBSERVER.get() is None
        assert broker_tracing.start_deliveries(TOPIC, "s", "c", msgs) is None
        sampled, _ = batch({0})
        tracing.set_enabled_for_tests(False)
        with broker_tracing.publishing(TOPIC, "p", sampled) as spans:
            assert spans is None
        assert broker_tracing.start_deliveries(TOPIC, "s", "c", sampled) is None
        assert not named(exporter.get_finished_spans(), f"publish {TOPIC}")


def test_deliveries_are_children_of_the_send() -> None:
    with capture_spans() as exporter:
        msgs, sends = batch({2})
        msgs[2].msg_id.topic_offset = 7
        msgs[2].redelivery_count = 2
        spans = broker_tracing.start_deliveries(TOPIC, "audit", "c-1", msgs)
        assert spans is not None and len(spans) == 1
        broker_tracing.end_all(spans)
        (deliver,) = named(exporter.get_finished_spans(), f"deliver {TOPIC}")
    assert deliver.parent is not None and deliver.parent.span_id == sends[0].get_span_context().span_id  # type: ignore[attr-defined]
    attrs = deliver.attributes
    assert attrs is not None
    assert (attrs["messaging.danube.offset"], attrs["messaging.danube.redelivery_count"]) == (7, 2)
    assert attrs["messaging.consumer.group.name"] == "audit" and attrs["messaging.client.id"] == "c-1"


async def test_the_wal_reports_the_round_that_made_a_batch_durable(tmp_path: Path) -> None:
    log = await TopicLog.open(tmp_path, cfg=cfg(), durability=Durability.FSYNC)
    rounds: list[CommitRound] = []
    try:
        token = COMMIT_OBSERVER.set(rounds.append)
        try:
            first = await log.append([b"a", b"bb", b"ccc"], [1, 2, 3])
        finally:
            COMMIT_OBSERVER.reset(token)
        await log.append([b"unobserved"], [4])
    finally:
        await log.aclose()
    assert first == 0
    (rnd,) = rounds
    assert rnd.records == 3 and rnd.batches == 1 and rnd.durability == "fsync"
    assert rnd.start_ns <= rnd.end_ns and rnd.fsync_s > 0 and rnd.bytes > 6


async def test_a_failing_observer_does_not_stop_the_log(tmp_path: Path) -> None:
    log = await TopicLog.open(tmp_path, cfg=cfg(), durability=Durability.NONE)

    def broken(_: CommitRound) -> None:
        raise RuntimeError("observer bug")

    try:
        token = COMMIT_OBSERVER.set(broken)
        try:
            assert await log.append([b"a"], [1]) == 0
        finally:
            COMMIT_OBSERVER.reset(token)
        assert await log.append([b"b"], [2]) == 1
    finally:
        await log.aclose()
