"""The tracing core: which environment turns tracing on, child spans only under a sampled
parent, failures recorded with their Danube code, and trace context inside message attributes."""

from __future__ import annotations

import re

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import StatusCode

from danube_common.errors import TopicNotFound
from danube_common.observability import tracing
from danube_common.observability.messages import (
    TRACEPARENT,
    TRACESTATE,
    inject,
    is_sampled,
    messaging_attributes,
    sampled_parent,
    span_context_of,
)
from danube_common.observability.tracing import ExporterChoice, exporter_from_env
from tests.support.tracing import capture_spans, named

pytestmark = pytest.mark.unit

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        (ENDPOINT, ExporterChoice("otlp", "grpc")),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317"}, ExporterChoice("otlp", "grpc")),
        (
            {**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
            ExporterChoice("otlp", "http/protobuf"),
        ),
        (
            {
                **ENDPOINT,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
            },
            ExporterChoice("otlp", "grpc"),
        ),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ExporterChoice("otlp", "grpc")),
        ({"OTEL_TRACES_EXPORTER": "console"}, ExporterChoice("console", "grpc")),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, None),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "true"}, None),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "false"}, ExporterChoice("otlp", "grpc")),
    ],
)
def test_exporter_from_env(env: dict[str, str], expected: ExporterChoice | None) -> None:
    assert exporter_from_env(env) == expected


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "use otlp, console or none"),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, "use grpc (default) or http/protobuf"),
    ],
)
def test_unsupported_settings_say_what_is_allowed(env: dict[str, str], says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        exporter_from_env(env)


def test_tracing_is_off_unless_configured() -> None:
    assert tracing.ENABLED is False
    assert tracing.configure_tracing("x", env={}) is None
    assert tracing.ENABLED is False


def test_child_spans_only_under_a_sampled_parent() -> None:
    with capture_spans() as spans:
        tr = tracing.tracer("t")
        with tracing.child_span(tr, "orphan") as span:
            assert span is None, "no current span: background work starts no trace"
        with tr.start_as_current_span("parent"), tracing.child_span(tr, "etcd Range") as span:
            assert span is not None
        tracing.set_enabled_for_tests(False)
        with tr.start_as_current_span("parent2"), tracing.child_span(tr, "off") as span:
            assert span is None, "tracing off: nothing, even under a span"
        finished = spans.get_finished_spans()
    child = named(finished, "etcd Range")[0]
    parent = named(finished, "parent")[0]
    assert child.parent is not None and child.parent.span_id == parent.context.span_id
    assert child.kind == trace.SpanKind.CLIENT
    assert not named(finished, "orphan") and not named(finished, "off")


def test_record_failure_keeps_the_danube_code() -> None:
    with capture_spans() as spans:
        span = tracing.tracer("t").start_span("call")
        tracing.record_failure(span, TopicNotFound("topic /default/x does not exist"))
        span.end()
        tracing.record_failure(None, TopicNotFound("ignored"))  # no span: nothing to do
        (done,) = spans.get_finished_spans()
    assert done.status.status_code == StatusCode.ERROR
    assert done.attributes is not None and done.attributes["danube.error.code"] == "TOPIC_NOT_FOUND"
    assert [e.name for e in done.events] == ["exception"]


# ---------------------------------------------------------------- context inside messages

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"


@pytest.mark.parametrize(
    ("traceparent", "sampled"),
    [
        (f"00-{TRACE_ID}-{SPAN_ID}-01", True),
        (f"00-{TRACE_ID}-{SPAN_ID}-00", False),
        (f"00-{TRACE_ID}-{SPAN_ID}-03", True),  # other flags set too
        (f"00-{TRACE_ID}-{SPAN_ID}-02", False),
        ("garbage", False),
        ("", False),
    ],
)
def test_is_sampled_reads_the_flags(traceparent: str, sampled: bool) -> None:
    assert is_sampled({TRACEPARENT: traceparent}) is sampled


def test_no_context_no_parent() -> None:
    assert not is_sampled({"other": "x"})
    assert sampled_parent({"other": "x"}) is None
    assert span_context_of({}) is None
    # A sampled-looking but invalid context (all-zero trace id) is not a parent.
    assert sampled_parent({TRACEPARENT: f"00-{'0' * 32}-{SPAN_ID}-01"}) is None


def test_inject_then_extract_round_trips_the_span_and_its_state() -> None:
    with capture_spans():
        span = tracing.tracer("t").start_span("send /default/t")
        attrs: dict[str, str] = {"app": "kept"}
        inject(span, attrs)
        assert attrs["app"] == "kept" and is_sampled(attrs)
        ctx = sampled_parent({**attrs, TRACESTATE: "vendor=1"})
        assert ctx is not None
        parent = trace.get_current_span(ctx).get_span_context()
        assert parent.trace_id == span.get_span_context().trace_id
        assert parent.span_id == span.get_span_context().span_id
        assert parent.is_remote and parent.trace_state.get("vendor") == "1"
        span.end()


def test_an_unsampled_span_injects_an_unsampled_context() -> None:
    with capture_spans(sampler=ALWAYS_OFF):
        span = tracing.tracer("t").start_span("send")
        attrs: dict[str, str] = {}
        inject(span, attrs)
    assert not is_sampled(attrs) and sampled_parent(attrs) is None


def test_messaging_attributes_drop_empty_values() -> None:
    assert messaging_attributes("send", "/default/t", {"messaging.client.id": "p", "x": None}) == {
        "messaging.system": "danube",
        "messaging.operation.type": "send",
        "messaging.destination.name": "/default/t",
        "messaging.client.id": "p",
    }


def test_dropped_spans_are_reported_once_per_interval() -> None:
    import logging

    now = [0.0]
    f = tracing.QueueFullFilter(interval_s=10.0, clock=lambda: now[0])

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord(
            "opentelemetry.sdk._shared_internal", logging.WARNING, "", 0, msg, ("span",), None
        )

    first = record("Queue full, dropping %s.")
    assert f.filter(first) and first.getMessage().startswith("tracing: 1 span(s) dropped")
    assert not any(f.filter(record("Queue full, dropping %s.")) for _ in range(99))
    now[0] = 10.5
    later = record("Queue full, dropping %s.")
    assert f.filter(later) and "100 span(s) dropped" in later.getMessage()
    assert f.filter(record("Exception while exporting %s.")), "other messages pass untouched"
