"""Trace context carried inside messages (W3C Trace Context in the message's attributes).

A producer that samples a message puts the context of its ``send`` span in the message's
attributes (``traceparent``, and ``tracestate`` when there is one); the message keeps them
through the WAL, object storage, moves and redeliveries, so every process that handles it later
(the broker publishing it, the dispatcher delivering it, the consumer processing it) makes its
span a child of the producer's. Sampling is per message: one batch carries many traces.

The checks are made for batches on hot paths: :func:`sampled_parent` looks at one attribute and
its last two characters before parsing anything, so an unsampled message costs a dict lookup.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

_PROPAGATOR = TraceContextTextMapPropagator()


def inject(span: Span, attributes: MutableMapping[str, str]) -> None:
    """Write ``span``'s context into ``attributes`` (a message's attribute map)."""
    _PROPAGATOR.inject(attributes, context=trace.set_span_in_context(span))


def is_sampled(attributes: Mapping[str, str]) -> bool:
    """Does the message carry the context of a sampled trace? (flags ``01``: the last byte's
    low bit; W3C's traceparent is ``version-traceid-spanid-flags``)."""
    tp = attributes.get(TRACEPARENT)
    return tp is not None and len(tp) >= 55 and tp[-1] in "13579bdf"


def sampled_parent(attributes: Mapping[str, str]) -> Context | None:
    """The context to parent a span on, if the message carries a sampled trace; else None."""
    if not is_sampled(attributes):
        return None
    carrier = {TRACEPARENT: attributes[TRACEPARENT]}
    state = attributes.get(TRACESTATE)
    if state:
        carrier[TRACESTATE] = state
    ctx = _PROPAGATOR.extract(carrier)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def span_context_of(attributes: Mapping[str, str]) -> trace.SpanContext | None:
    """The producer's span context a message carries (sampled or not), or None: for links."""
    if TRACEPARENT not in attributes:
        return None
    ctx = _PROPAGATOR.extract({TRACEPARENT: attributes[TRACEPARENT]})
    sc = trace.get_current_span(ctx).get_span_context()
    return sc if sc.is_valid else None


def messaging_attributes(
    operation: str, destination: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The OpenTelemetry messaging attributes of a span about ``destination`` (a topic), plus
    ``extra`` (entries whose value is None are left out)."""
    attrs: dict[str, Any] = {
        "messaging.system": "danube",
        "messaging.operation.type": operation,
        "messaging.destination.name": destination,
    }
    if extra:
        attrs.update({k: v for k, v in extra.items() if v is not None})
    return attrs
