"""A planner cycle as a trace: one root span per cycle, a child per stage.

::

    planner cycle                  plan id, counts, imbalance, term; links to the admin requests
      read cluster                 etcd Range children
      read load history            object store GetObject children
      compute report               the engine's aggregation; on Spark, a child per Spark action
        spark <action>             (collect, count: each runs a Spark job)
      compute plan
      write report and plan        etcd Txn children (the report, the plan, the answered requests)

The plan record carries the cycle's ``traceparent``, so the load manager's moves of the plan
(each its own trace) link to it. The cycle links to the trace of each rebalance request it
answers (``danube-admin rebalance``). Nothing here runs while tracing is off; the stages run in
the cycle's context (the compute stage in a worker thread, with the context copied).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind

from danube_common.observability import record_context, tracing

_TRACER_NAME = "danube_planner"


@contextlib.contextmanager
def cycle(attributes: Mapping[str, Any]) -> Iterator[Span | None]:
    """The root span of one cycle (a trace of its own), or None while tracing is off."""
    if not tracing.ENABLED:
        yield None
        return
    with tracing.tracer(_TRACER_NAME).start_as_current_span(
        "planner cycle",
        context=Context(),
        kind=SpanKind.INTERNAL,
        attributes={k: v for k, v in attributes.items() if v is not None},
    ) as span:
        yield span


def stage(
    name: str, attributes: Mapping[str, Any] | None = None
) -> contextlib.AbstractContextManager[Span | None]:
    """A child span of the current cycle (None when tracing is off or the cycle is not sampled)."""
    return tracing.child_span(
        tracing.tracer(_TRACER_NAME), name, kind=SpanKind.INTERNAL, attributes=attributes
    )


def link_requests(span: Span | None, traceparents: Sequence[str]) -> None:
    """Link the cycle to the traces of the rebalance requests it answers."""
    if span is None or not span.is_recording():
        return
    for tp in traceparents:
        ln = record_context.link(tp)
        if ln is not None:
            span.add_link(ln.context, {"danube.link": "rebalance request"})


def annotate(span: Span | None, attributes: Mapping[str, Any]) -> None:
    """Set ``attributes`` (those not None) on ``span`` if it records."""
    if span is not None and span.is_recording():
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})
