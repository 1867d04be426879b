"""Spans in memory for unit tests: a TracerProvider with an InMemorySpanExporter for one test.

::

    with capture_spans() as exporter:
        ...
    names = [s.name for s in exporter.get_finished_spans()]

While it is installed, ``tracing.ENABLED`` is True (the
instrumented code makes spans); afterwards OpenTelemetry's global provider is reset (as its own
test utilities do) and ``tracing.ENABLED`` is False again, so the next test starts clean.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Sampler
from opentelemetry.util._once import Once

from danube_common.observability import tracing


def _reset_globals() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]


@contextlib.contextmanager
def capture_spans(sampler: Sampler | None = None) -> Iterator[InMemorySpanExporter]:
    """Install an in-memory provider for the block (spans are exported as each ends)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_globals()
    tracing.use_provider_for_tests(provider)
    try:
        yield exporter
    finally:
        tracing.set_enabled_for_tests(False)
        provider.shutdown()
        _reset_globals()


def named(spans: Iterable[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: Iterable[ReadableSpan], name: str) -> ReadableSpan:
    found = named(spans, name)
    assert len(found) == 1, f"expected one span {name!r}, got {[s.name for s in spans]}"
    return found[0]


def parent_of(span: ReadableSpan) -> int | None:
    """The parent's span id (None for a root span)."""
    return span.parent.span_id if span.parent is not None else None


def children(spans: Iterable[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    pid = parent.context.span_id
    return [s for s in spans if s.parent is not None and s.parent.span_id == pid]


def traceparent(span: ReadableSpan) -> str:
    """The W3C ``traceparent`` of ``span`` (as a record or a message would carry it)."""
    ctx = span.context
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
