"""danube-local's trace sink: a real OTLP exporter's spans arrive decoded and in the file; the
file is read back (a torn line skipped); message traces are found by topic and printed as
trees; the `traces` command says what to do when there is nothing to show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from danube_local.__main__ import main
from danube_local.traces import ReceivedSpan, TraceSink, format_trace, load_spans, message_traces

pytestmark = pytest.mark.unit


def span(name: str, span_id: str, parent: str = "", *, trace_id: str = "a" * 32, kind: str = "internal",
         start: int = 0, end: int = 1_000_000, service: str = "svc", **attrs: object) -> ReceivedSpan:  # fmt: skip
    return ReceivedSpan(trace_id, span_id, parent, name, kind, service, {"service.name": service}, dict(attrs),
                        (), start, end, "unset")  # fmt: skip


def test_a_real_exporter_reaches_the_sink_and_its_file(tmp_path: Path) -> None:
    path = tmp_path / "traces" / "spans.jsonl"
    with TraceSink(path=path) as sink:
        provider = TracerProvider(resource=Resource.create({"service.name": "unit"}))
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=sink.endpoint, insecure=True))
        )
        tracer = provider.get_tracer("t")
        with (
            tracer.start_as_current_span("send /default/t", kind=SpanKind.PRODUCER, attributes={"n": 3}),
            tracer.start_as_current_span("child"),
        ):
            pass
        provider.shutdown()
        got = sink.wait_for(lambda s: s.name == "send /default/t", what="the root span")
    root = got[0]
    assert (root.kind, root.service, root.parent_span_id, root.attributes["n"]) == ("producer", "unit", "", 3)
    (child,) = [s for s in sink.spans if s.name == "child"]
    assert child.parent_span_id == root.span_id and child.trace_id == root.trace_id
    assert load_spans(path) == sink.spans


def test_load_spans_skips_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    good = span("send /default/t", "1" * 16)
    path.write_text(json.dumps(good.to_json()) + "\n" + '{"trace_id": "ab')
    assert load_spans(path) == [good]
    assert load_spans(tmp_path / "missing.jsonl") == []


def test_message_traces_by_topic_oldest_first() -> None:
    spans = [
        span("send /default/b", "1" * 16, trace_id="b" * 32, kind="producer", start=5,
             **{"messaging.destination.name": "/default/b"}),
        span("send /default/a-part-1", "2" * 16, trace_id="c" * 32, kind="producer", start=3,
             **{"messaging.destination.name": "/default/a-part-1"}),
        span("send /default/a", "3" * 16, trace_id="d" * 32, kind="producer", start=9,
             **{"messaging.destination.name": "/default/a"}),
        span("publish /default/a", "4" * 16, "3" * 16, trace_id="d" * 32, kind="server"),
    ]  # fmt: skip
    assert message_traces(spans) == ["c" * 32, "b" * 32, "d" * 32]
    assert message_traces(spans, "/default/a") == ["c" * 32, "d" * 32], "partitions count for their topic"
    assert message_traces(spans, "/default/none") == []


def test_format_trace_draws_the_tree() -> None:
    spans = [
        span("process /default/t", "4" * 16, "1" * 16, start=3_000_000, end=4_000_000, service="app",
             **{"messaging.danube.settlement": "ack"}),
        span("send /default/t", "1" * 16, start=0, end=2_000_000, service="app",
             **{"messaging.danube.offset": 7}),
        span("publish /default/t", "2" * 16, "1" * 16, start=500_000, end=1_500_000, service="danube-broker"),
        span("wal commit", "3" * 16, "2" * 16, start=600_000, end=1_400_000, service="danube-broker"),
        span("orphan", "5" * 16, "9" * 16, start=100, end=200),
    ]  # fmt: skip
    text = format_trace(spans).splitlines()
    assert text[0] == f"trace {'a' * 32}: 5 spans, 3 processes, 4.00 ms"
    assert text[1] == "  send /default/t  [app]  +0.00 ms, 2.00 ms  (offset=7)"
    assert text[2] == "    publish /default/t  [danube-broker]  +0.50 ms, 1.00 ms"
    assert text[3] == "      wal commit  [danube-broker]  +0.60 ms, 0.80 ms"
    assert text[4] == "    process /default/t  [app]  +3.00 ms, 1.00 ms  (settled=ack)"
    assert text[5:] == [f"  (parent {'9' * 16} not received)", "  orphan  [svc]  +0.00 ms, 0.00 ms"]
    assert format_trace([]) == "(no spans)"


def test_traces_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["traces", "--workdir", str(tmp_path)]) == 1
    assert "no spans in" in capsys.readouterr().out
    path = tmp_path / "traces" / "spans.jsonl"
    path.parent.mkdir()
    spans = [
        span("send /default/t", "1" * 16, kind="producer", **{"messaging.destination.name": "/default/t",
             "messaging.danube.offset": 0}),
        span("publish /default/t", "2" * 16, "1" * 16),
    ]  # fmt: skip
    path.write_text("".join(json.dumps(s.to_json()) + "\n" for s in spans))
    assert main(["traces", "--workdir", str(tmp_path), "--topic", "/default/t"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"trace {'a' * 32}: 2 spans") and "publish /default/t" in out
    assert main(["traces", "--workdir", str(tmp_path), "--list"]) == 0
    assert capsys.readouterr().out.strip() == f"{'a' * 32}  /default/t@0  2 spans"
    assert main(["traces", "--workdir", str(tmp_path), "--topic", "/default/other"]) == 1
    assert main(["traces", "--workdir", str(tmp_path), "--trace", "f" * 32]) == 1
    assert main(["traces", "--workdir", str(tmp_path), "--trace", "A" * 32]) == 0
