"""The broker's part of a control-plane trace: loading a topic, handing it over, opening its log.

The records that give a topic to this broker, or ask it to hand one over, carry the
``traceparent`` of the span that wrote them (:mod:`danube_common.observability.record_context`):

- ``load {topic}``: an assignment to this broker (the load manager's ``place``, or the previous
  owner's hand-over) loads the topic; for a reliable topic this covers opening its log and
  restoring its subscriptions (``open log {topic}`` is its child, with the offset the log
  continues at);
- ``hand over {topic}``: the owner key marked ``moving_to`` (the load manager's ``move``): seal,
  drain or flush to object storage (the uploader's Flush RPC and its upload are children), and
  the fenced hand-over transaction, whose new assignment carries this span's context to the new
  owner's ``load``.

Only a record with a sampled context makes a span here: a broker (re)starting, or a load
without a traced decision behind it, starts no trace. Nothing runs while tracing is off.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from danube_common.observability import record_context, tracing
from danube_common.records import Ownership

_TRACER_NAME = "danube_broker.ownership"


@contextlib.contextmanager
def _continued(name: str, traceparent: str, attributes: dict[str, Any]) -> Iterator[Span | None]:
    if not tracing.ENABLED or not traceparent:
        yield None
        return
    parent = record_context.parent(traceparent)
    if parent is None:
        yield None
        return
    with tracing.tracer(_TRACER_NAME).start_as_current_span(
        name, context=parent, kind=SpanKind.CONSUMER, attributes=attributes
    ) as span:
        yield span


def loading(
    topic: str, traceparent: str, *, epoch: int, broker_id: str
) -> contextlib.AbstractContextManager[Span | None]:
    """``load {topic}`` (None: not traced), a child of the assignment's writer."""
    return _continued(
        f"load {topic}",
        traceparent,
        {"danube.topic": topic, "danube.broker.id": broker_id, "danube.ownership.epoch": epoch},
    )


def handing_over(
    topic: str, own: Ownership, traceparent: str
) -> contextlib.AbstractContextManager[Span | None]:
    """``hand over {topic}`` (None: not traced), a child of the load manager's move."""
    return _continued(
        f"hand over {topic}",
        traceparent,
        {
            "danube.topic": topic,
            "danube.broker.from": own.broker_id,
            "danube.broker.to": own.moving_to,
            "danube.ownership.epoch": own.epoch,
        },
    )


def opening_log(topic: str) -> contextlib.AbstractContextManager[Span | None]:
    """``open log {topic}``: a child of the current span (a load, a client's call), if sampled."""
    return tracing.child_span(
        tracing.tracer(_TRACER_NAME),
        f"open log {topic}",
        kind=SpanKind.INTERNAL,
        attributes={"danube.topic": topic},
    )


def annotate(span: Span | None, attributes: Mapping[str, Any]) -> None:
    """Set ``attributes`` (those not None) on ``span`` if it records."""
    if span is not None and span.is_recording():
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})


def event(name: str, **attributes: Any) -> None:
    """An event on the current span (a step of a hand-over or of a log's opening), if sampled."""
    if not tracing.ENABLED:
        return
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(name, {k: v for k, v in attributes.items() if v is not None})
