"""Recording spans in-process, for unit tests of instrumented code.

OpenTelemetry allows one tracer provider per process; :func:`recording_spans` installs a fresh
one with an in-memory exporter for the duration of a test, turns the hot paths' checks on
(``tracing.ENABLED``) and afterwards resets OpenTelemetry's globals as its own test utilities do,
so the next test starts with tracing off and no provider.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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
def recording_spans(sampler: Sampler | None = None) -> Iterator[InMemorySpanExporter]:
    """Every span ended while the block runs lands in the yielded exporter
    (``get_finished_spans()``)."""
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


def by_name(spans: tuple[ReadableSpan, ...] | list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]
