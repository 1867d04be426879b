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
import random
from typing import TYPE_CHECKING, Any

from opentelemetry import context, trace
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


class SendSampler:
    """Decides which messages get a ``send`` span, cheaply for the ones that do not.

    Asking the tracer for a span costs a few microseconds even when the sampler drops it, which
    is more than a batched publish spends on a message. When a message starts a trace of its own
    (no span is current) and the provider samples new traces by a ratio (``traceidratio``,
    ``parentbased_traceidratio``, ``always_on``/``off`` and their parent-based forms: read from
    an OpenTelemetry SDK provider), the decision is one random draw, and only the chosen
    messages get a span, from a tracer that shares the provider's resource and span processors
    (so they are exported like every other span). Any other set-up, or a message sent while a
    span is current, asks the tracer as usual.
    """

    def __init__(self, tracer: Tracer, *, ratio: float | None = None, chosen: Tracer | None = None) -> None:
        self.tracer = tracer
        #: Share of new traces the provider samples (None: ask the tracer for every message).
        self.ratio = ratio
        self._chosen = chosen
        self._random = random.random

    @classmethod
    def for_provider(cls, tracer: Tracer) -> SendSampler:
        provider = trace.get_tracer_provider()
        ratio = root_ratio(getattr(provider, "sampler", None))
        processor = getattr(provider, "_active_span_processor", None)
        if ratio is None or processor is None:
            return cls(tracer)
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON

        chosen = TracerProvider(
            sampler=ALWAYS_ON,
            resource=provider.resource,  # type: ignore[attr-defined]
            active_span_processor=processor,
            id_generator=provider.id_generator,  # type: ignore[attr-defined]
            shutdown_on_exit=False,
        )
        return cls(tracer, ratio=ratio, chosen=chosen.get_tracer("danube_sdk"))

    def start(self, topic: str, producer: str, attributes: Any, size: int) -> Span | None:
        """Start a message's ``send`` span; when sampled, put its context in the message's
        ``attributes``. None for an unsampled message (nothing to end)."""
        tracer = self.tracer
        if self.ratio is not None and not _in_a_span():
            if self._random() >= self.ratio:
                return None
            assert self._chosen is not None
            tracer = self._chosen
        return start_send(tracer, topic, producer, attributes, size)


def _in_a_span() -> bool:
    ctx = context.get_current()  # usually empty: no span to join, nothing more to look up
    return bool(ctx) and trace.get_current_span(ctx).get_span_context().is_valid


def root_ratio(sampler: Any) -> float | None:
    """The share of new (parentless) traces ``sampler`` keeps, when it is one of the SDK's
    standard samplers; else None."""
    from opentelemetry.sdk.trace import sampling

    if isinstance(sampler, sampling.ParentBased):
        sampler = getattr(sampler, "_root", None)
    if isinstance(sampler, sampling.TraceIdRatioBased):
        return float(sampler.rate)
    if isinstance(sampler, sampling.StaticSampler):
        return {"AlwaysOnSampler": 1.0, "AlwaysOffSampler": 0.0}.get(sampler.get_description())
    return None


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
    """The open ``process`` spans of one consumer, by (topic, offset, index in its pack)."""

    def __init__(self, tracer: Tracer, subscription: str) -> None:
        self._tracer = tracer
        self._subscription = subscription
        self._open: collections.OrderedDict[tuple[str, int, int | None], Span] = collections.OrderedDict()

    def received(self, msg: Message[Any]) -> None:
        """The application got ``msg``: start its span if it carries a sampled trace."""
        raw = msg.raw
        index = msg.batch_index
        parent = sampled_parent(raw.attributes if index is None else msg.properties)
        if parent is None:
            return
        key = (msg.topic, msg.offset, index)
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
                    "messaging.message.body.size": len(raw.payload if index is None else msg.payload),
                },
            ),
        )
        self._open[key] = span
        while len(self._open) > _MAX_OPEN:
            _, oldest = self._open.popitem(last=False)
            oldest.set_attribute("messaging.danube.settlement", "none")
            oldest.end()

    def settled(self, topic: str, offset: int, how: str, batch_index: int | None = None) -> None:
        """``how`` = "ack" / "nack": end the message's span, if it has one."""
        span = self._open.pop((topic, offset, batch_index), None)
        if span is not None:
            span.set_attribute("messaging.danube.settlement", how)
            span.end()

    def settled_up_to(self, topic: str, offset: int) -> None:
        """A cumulative ack of ``topic`` up to ``offset``."""
        for key in [k for k in self._open if k[0] == topic and k[1] <= offset]:
            self.settled(*key[:2], "ack", key[2])

    def close(self) -> None:
        while self._open:
            _, span = self._open.popitem(last=False)
            span.set_attribute("messaging.danube.settlement", "none")
            span.end()
