"""The SDK's message spans: a sampled message carries its send span's context and the span ends
with the message's offset (or its failure); a received message that carries a sampled context
gets a process span, child of the producer's, ended by its ack/nack; open ones are bounded."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags

from danube_common.errors import Unavailable
from danube_common.observability import tracing
from danube_common.observability.messages import TRACEPARENT, inject
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import tracing as sdk_tracing
from danube_sdk.batch import Batch
from danube_sdk.tracing import ProcessSpans, active_tracer, start_send
from danube_sdk.types import Message
from tests.support.tracing import capture_spans, named

pytestmark = pytest.mark.unit


def test_no_provider_no_tracer() -> None:
    assert tracing.ENABLED is False
    assert active_tracer() is None


async def test_send_spans_end_with_the_offsets_the_broker_gave() -> None:
    loop = asyncio.get_running_loop()
    with capture_spans() as exporter:
        tracer = active_tracer()
        assert tracer is not None
        batch = Batch(0.0, None, loop.create_future())
        for i in range(3):
            m = batch.messages.add(payload=b"x" * (i + 1))
            span = start_send(tracer, "/default/t", "p1", m.attributes, len(m.payload))
            assert span is not None and TRACEPARENT in m.attributes
            batch.spans = [*(batch.spans or []), (i, span)]
            batch.futures.append(loop.create_future())
        batch.resolve("/default/t", 10, 7, offsets=[10, 4, 11])  # the second was a duplicate
        spans = named(exporter.get_finished_spans(), "send /default/t")
    assert [s.attributes["messaging.danube.offset"] for s in spans] == [10, 4, 11]  # type: ignore[index]
    assert all(s.kind == SpanKind.PRODUCER for s in spans)
    assert spans[0].attributes["messaging.client.id"] == "p1"  # type: ignore[index]
    assert spans[2].attributes["messaging.message.body.size"] == 3  # type: ignore[index]


async def test_a_failed_batch_fails_its_spans() -> None:
    loop = asyncio.get_running_loop()
    with capture_spans() as exporter:
        tracer = active_tracer()
        assert tracer is not None
        batch = Batch(0.0, None, loop.create_future())
        m = batch.messages.add(payload=b"x")
        batch.spans = [(0, start_send(tracer, "/default/t", "p", m.attributes, 1))]  # type: ignore[list-item]
        batch.futures.append(loop.create_future())
        batch.fail(Unavailable("broker gone"))
        (span,) = exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes is not None and span.attributes["danube.error.code"] == "UNAVAILABLE"


def test_an_unsampled_message_carries_no_sampled_context() -> None:
    with capture_spans(sampler=ALWAYS_OFF) as exporter:
        tracer = active_tracer()
        assert tracer is not None
        attrs: dict[str, str] = {}
        assert start_send(tracer, "/default/t", "p", attrs, 1) is None
        assert attrs == {}, "nothing to continue: the message stays as it was"
        assert exporter.get_finished_spans() == ()


def _received(tracer_parent: object, offset: int, topic: str = "/default/t") -> Message[bytes]:
    raw = pb.StreamMessage(payload=b"p", redelivery_count=1)
    raw.msg_id.topic_offset = offset
    raw.msg_id.topic_name = topic
    inject(tracer_parent, raw.attributes)  # type: ignore[arg-type]
    return Message(raw)


def test_process_spans_are_children_of_the_send_and_end_when_settled() -> None:
    with capture_spans() as exporter:
        tracer = active_tracer()
        assert tracer is not None
        send = tracer.start_span("send /default/t")
        spans = ProcessSpans(tracer, "audit")
        for offset in range(4):
            spans.received(_received(send, offset))
        spans.settled("/default/t", 0, "ack")
        spans.settled("/default/t", 1, "nack")
        spans.settled_up_to("/default/t", 2)  # cumulative: 2 (0 and 1 are already settled)
        spans.settled("/default/t", 99, "ack")  # unknown: nothing
        assert len(exporter.get_finished_spans()) == 3
        spans.close()  # 3 was never settled
        send.end()
        done = named(exporter.get_finished_spans(), "process /default/t")
    settled = {
        s.attributes["messaging.danube.offset"]: s.attributes["messaging.danube.settlement"] for s in done
    }  # type: ignore[index]
    assert settled == {0: "ack", 1: "nack", 2: "ack", 3: "none"}
    for s in done:
        assert s.kind == SpanKind.CONSUMER
        assert s.parent is not None and s.parent.span_id == send.get_span_context().span_id
        assert s.attributes is not None and s.attributes["messaging.consumer.group.name"] == "audit"
        assert s.attributes["messaging.danube.redelivery_count"] == 1


def test_open_process_spans_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdk_tracing, "_MAX_OPEN", 2)
    with capture_spans() as exporter:
        tracer = active_tracer()
        assert tracer is not None
        send = tracer.start_span("send")
        spans = ProcessSpans(tracer, "s")
        for offset in range(3):
            spans.received(_received(send, offset))
        (evicted,) = exporter.get_finished_spans()
        assert evicted.attributes is not None and evicted.attributes["messaging.danube.offset"] == 0
        assert evicted.attributes["messaging.danube.settlement"] == "none"
        # Delivered again before it was settled: the old span ends, a new one starts.
        spans.received(_received(send, 2))
        assert (
            named(exporter.get_finished_spans(), "process /default/t")[-1].attributes[  # type: ignore[index]
                "messaging.danube.settlement"
            ]
            == "redelivered"
        )


def test_a_message_without_a_sampled_context_gets_no_span() -> None:
    with capture_spans() as exporter:
        tracer = active_tracer()
        assert tracer is not None
        spans = ProcessSpans(tracer, "s")
        raw = pb.StreamMessage(payload=b"p")
        raw.attributes[TRACEPARENT] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
        spans.received(Message(raw))
        spans.close()
        assert exporter.get_finished_spans() == ()


# ---------------------------------------------------------------- the per-message sampling decision


@pytest.mark.parametrize(
    ("sampler", "ratio"),
    [
        ("parentbased_traceidratio:0.25", 0.25),
        ("traceidratio:0.01", 0.01),
        ("always_on", 1.0),
        ("always_off", 0.0),
        ("parentbased_always_on", 1.0),
        ("custom", None),
    ],
)
def test_root_ratio_of_the_standard_samplers(sampler: str, ratio: float | None) -> None:
    from opentelemetry.sdk.trace import sampling

    from danube_sdk.tracing import root_ratio

    name, _, arg = sampler.partition(":")
    built = {
        "parentbased_traceidratio": lambda: sampling.ParentBased(sampling.TraceIdRatioBased(float(arg))),
        "traceidratio": lambda: sampling.TraceIdRatioBased(float(arg)),
        "always_on": lambda: sampling.ALWAYS_ON,
        "always_off": lambda: sampling.ALWAYS_OFF,
        "parentbased_always_on": lambda: sampling.DEFAULT_ON,
        "custom": lambda: object(),
    }[name]()
    assert root_ratio(built) == ratio


def test_new_traces_are_decided_by_one_draw_and_exported_like_any_span() -> None:
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    from danube_sdk.tracing import SendSampler

    with capture_spans(sampler=ParentBased(TraceIdRatioBased(0.3))) as exporter:
        tracer = active_tracer()
        assert tracer is not None
        sends = SendSampler.for_provider(tracer)
        assert sends.ratio == 0.3
        draws = iter([0.1, 0.5, 0.29, 0.3, 0.99])
        sends._random = lambda: next(draws)
        started = [sends.start("/default/t", "p", {}, 1) for _ in range(5)]
        assert [s is not None for s in started] == [True, False, True, False, False]
        for s in started:
            if s is not None:
                s.end()
        assert len(named(exporter.get_finished_spans(), "send /default/t")) == 2
        # Inside a span of the application's (here: a request traced upstream, sampled), the
        # message joins that trace: the parent decides, the draw is not consulted.
        sends._random = lambda: 0.99
        upstream = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        with trace.use_span(NonRecordingSpan(upstream)):
            span = sends.start("/default/t", "p", {}, 1)
        assert span is not None
        span.end()
        joined = named(exporter.get_finished_spans(), "send /default/t")[-1]
        assert joined.parent is not None and joined.parent.span_id == 0xDEF
        assert joined.context.trace_id == 0xABC
