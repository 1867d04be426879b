"""Trace context carried through etcd records: one trace per control-plane decision.

A control-plane step that hands work to another process through etcd (a placement request, a
move request, an owner key marked ``moving_to``, a hand-over, a rebalancing plan) writes the
W3C ``traceparent`` of its current span into the JSON record it writes; the process that acts
on the record makes its span a child of that context (or, for work that is its own trace, such
as a plan's moves, links to it). The field is optional: records without it (written with
tracing off, or before it existed) are read as before, and readers ignore it otherwise.

Only ``traceparent`` is carried (no ``tracestate``): the records are the cluster's own, and
the control plane sets no trace state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from danube_common.observability import tracing

#: The field of a record that carries the context.
TRACEPARENT = "traceparent"

_PROPAGATOR = TraceContextTextMapPropagator()


def current() -> dict[str, str]:
    """``{"traceparent": ...}`` of the current span when it is sampled, else ``{}`` (tracing
    off, or no sampled span current): merge it into a record being written."""
    if not tracing.ENABLED:
        return {}
    span = trace.get_current_span()
    if not span.is_recording():
        return {}
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    tp = carrier.get(TRACEPARENT)
    return {TRACEPARENT: tp} if tp else {}


def traceparent_of(record: object) -> str:
    """The ``traceparent`` a record carries ("" when it is not a JSON object or has none)."""
    if isinstance(record, Mapping):
        tp = record.get(TRACEPARENT)
        if isinstance(tp, str):
            return tp
    return ""


def span_context(traceparent: str) -> SpanContext | None:
    """The span context a ``traceparent`` names (sampled or not), or None if it is malformed."""
    if not traceparent:
        return None
    ctx = _PROPAGATOR.extract({TRACEPARENT: traceparent})
    sc = trace.get_current_span(ctx).get_span_context()
    return sc if sc.is_valid else None


def parent(traceparent: str) -> Context | None:
    """The context to parent a span on when ``traceparent`` names a sampled span; else None
    (the caller makes no span: an unsampled decision stays unsampled downstream)."""
    sc = span_context(traceparent)
    if sc is None or not sc.trace_flags.sampled:
        return None
    return trace.set_span_in_context(trace.NonRecordingSpan(sc))


def link(traceparent: str, attributes: Mapping[str, Any] | None = None) -> Link | None:
    """A link to the span ``traceparent`` names (sampled ones only), or None."""
    sc = span_context(traceparent)
    if sc is None or not sc.trace_flags.sampled:
        return None
    return Link(sc, attributes=dict(attributes) if attributes else None)
