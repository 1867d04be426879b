"""Message tracing in the SDK: a ``send`` span per sampled message on the producer side, a
``process`` span per sampled message on the consumer side, both following OpenTelemetry's
messaging conventions.

The SDK uses the OpenTelemetry API only: the application configures the SDK (a tracer provider
with an exporter and a sampler) as for any instrumented library; the ``danube-cli`` tools do it
from the standard ``OTEL_*`` environment. Without a configured provider nothing is traced and a
message costs one ``is None`` check.

- Producer: each message's ``send {topic}`` span (kind PRODUCER; a child of the span current
  when ``send()`` is called, else a new trace, as the sampler decides) starts when the message
  is handed to the producer and ends when the broker acknowledges it (its offset recorded) or it
  fails. A sampled message carries the span's context in its attributes (``traceparent``), so the
  broker and every consumer continue that trace.
- Consumer: a message that carries a sampled context gets a ``process {topic}`` span (kind
  CONSUMER, child of the producer's span) from the moment the application receives it until it
  is acknowledged or negatively acknowledged. At most ``_MAX_OPEN`` such spans are kept open per
  consumer; older ones end unsettled.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Tracer

from danube_common.observability import tracing
from danube_common.observability.messages import inject, messaging_attributes, sampled_parent

if TYPE_CHECKING:
    from danube_sdk.types import Message

#: Open ``process`` spans kept per consumer (messages received and not yet settled).
_MAX_OPEN = 10_000


def active_tracer() -> Tracer | None:
    """The SDK's tracer when this process exports traces (configured by the application or by
    :func:`danube_common.observability.tracing.configure_tracing`), else None."""
    if tracing.ENABLED:
        return trace.get_tracer("danube_sdk")
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return trace.get_tracer("danube_sdk")


def start_send(tracer: Tracer, topic: str, producer: str, attributes: Any, size: int) -> Span | None:
    """Start a message's ``send`` span; when sampled, put its context in the message's
    ``attributes``. None for an unsampled message (nothing to end)."""
    span = tracer.start_span(
        f"send {topic}",
        kind=SpanKind.PRODUCER,
        attributes=messaging_attributes(
            "send",
            topic,
            {"messaging.client.id": producer, "messaging.message.body.size": size},
        ),
    )
    if not span.is_recording():
        return None
    inject(span, attributes)
    return span


class ProcessSpans:
    """The open ``process`` spans of one consumer, by (topic, offset)."""

    def __init__(self, tracer: Tracer, subscription: str) -> None:
        self._tracer = tracer
        self._subscription = subscription
        self._open: collections.OrderedDict[tuple[str, int], Span] = collections.OrderedDict()

    def received(self, msg: Message[Any]) -> None:
        """The application got ``msg``: start its span if it carries a sampled trace."""
        raw = msg.raw
        parent = sampled_parent(raw.attributes)
        if parent is None:
            return
        key = (msg.topic, msg.offset)
        old = self._open.pop(key, None)
        if old is not None:  # delivered again before it was settled
            old.set_attribute("messaging.danube.settlement", "redelivered")
            old.end()
        span = self._tracer.start_span(
            f"process {msg.topic}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=messaging_attributes(
                "process",
                msg.topic,
                {
                    "messaging.consumer.group.name": self._subscription,
                    "messaging.message.id": str(msg.offset),
                    "messaging.danube.offset": msg.offset,
                    "messaging.danube.redelivery_count": raw.redelivery_count,
                    "messaging.message.body.size": len(raw.payload),
                },
            ),
        )
        self._open[key] = span
        while len(self._open) > _MAX_OPEN:
            _, oldest = self._open.popitem(last=False)
            oldest.set_attribute("messaging.danube.settlement", "none")
            oldest.end()

    def settled(self, topic: str, offset: int, how: str) -> None:
        """``how`` = "ack" / "nack": end the message's span, if it has one."""
        span = self._open.pop((topic, offset), None)
        if span is not None:
            span.set_attribute("messaging.danube.settlement", how)
            span.end()

    def settled_up_to(self, topic: str, offset: int) -> None:
        """A cumulative ack of ``topic`` up to ``offset``."""
        for key in [k for k in self._open if k[0] == topic and k[1] <= offset]:
            self.settled(key[0], key[1], "ack")

    def close(self) -> None:
        while self._open:
            _, span = self._open.popitem(last=False)
            span.set_attribute("messaging.danube.settlement", "none")
            span.end()
