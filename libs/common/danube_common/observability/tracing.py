"""Tracing: one OpenTelemetry tracer provider per process, set up from the standard ``OTEL_*``
environment when the process starts.

Tracing is **off** unless an exporter is configured:

- ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` (OTLP; protocol from
  ``OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL``: ``grpc``, the default here, or ``http/protobuf``),
- or ``OTEL_TRACES_EXPORTER`` = ``otlp`` | ``console`` (``none`` turns it off),

and ``OTEL_SDK_DISABLED`` is not ``true``. Everything else is the SDK's own: ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` (default
``parentbased_always_on``), ``OTEL_BSP_*`` (batching), ``OTEL_EXPORTER_OTLP_*`` (headers, TLS,
timeout).

While off, :data:`ENABLED` is False and every instrumented place costs one attribute check: no
interceptor is installed, no span object is made. Spans are exported in batches by a background
thread; :meth:`TracingSetup.shutdown` flushes them when the process stops.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

log = logging.getLogger(__name__)

#: True once :func:`configure_tracing` installed an exporting provider in this process. Hot paths
#: read it (``tracing.ENABLED``) before touching anything else of OpenTelemetry.
ENABLED = False

#: The ``messaging.system`` of every messaging span.
MESSAGING_SYSTEM = "danube"

_TRUE = ("1", "true", "yes", "on")


def enabled() -> bool:
    return ENABLED


def in_sampled_span() -> bool:
    """Is tracing on and a sampled (recording) span current? Instrumented calls made on behalf
    of a span (etcd, object storage) check this before building a span's attributes."""
    return ENABLED and trace.get_current_span().is_recording()


_TRACERS: dict[str, tuple[object, Tracer]] = {}


def tracer(name: str) -> Tracer:
    """A tracer of the process's current provider (a no-op one while tracing is off). Take it
    when a span is made, not at import: a module-level tracer would stay bound to the first
    provider (tests install one per test). Cached per provider: making one costs tens of
    microseconds."""
    provider = trace.get_tracer_provider()
    cached = _TRACERS.get(name)
    if cached is not None and cached[0] is provider:
        return cached[1]
    made = provider.get_tracer(name)
    _TRACERS[name] = (provider, made)
    return made


@dataclass(frozen=True, slots=True)
class ExporterChoice:
    """What the environment asks for: ``kind`` is ``otlp`` or ``console``; ``protocol`` is
    ``grpc`` or ``http/protobuf`` (OTLP only)."""

    kind: str
    protocol: str = "grpc"


def exporter_from_env(env: Mapping[str, str]) -> ExporterChoice | None:
    """The exporter ``env`` configures, or None (tracing off). ValueError for a value this
    process cannot honour, saying what is allowed."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return None
    named = [x.strip().lower() for x in env.get("OTEL_TRACES_EXPORTER", "").split(",") if x.strip()]
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not named:
        named = ["otlp"] if endpoint else []
    named = [n for n in named if n != "none"]
    if not named:
        return None
    kind = named[0]
    if kind not in ("otlp", "console"):
        raise ValueError(f"OTEL_TRACES_EXPORTER={kind!r} is not supported here: use otlp, console or none")
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    ).strip()
    if kind == "otlp" and protocol not in ("grpc", "http/protobuf"):
        raise ValueError(
            f"OTLP protocol {protocol!r} is not supported here: use grpc (default) or http/protobuf"
        )
    return ExporterChoice(kind, protocol)


class TracingSetup:
    """The provider this process exports through; :meth:`shutdown` flushes it (idempotent)."""

    def __init__(self, provider: Any, choice: ExporterChoice) -> None:
        self.provider = provider
        self.choice = choice
        self._closed = False

    def shutdown(self) -> None:
        global ENABLED
        if self._closed:
            return
        self._closed = True
        ENABLED = False
        try:
            self.provider.shutdown()
        except Exception as exc:  # an exporter that cannot flush must not fail the stop
            log.warning("tracing: flushing the last spans failed: %s", exc)


_SETUP: TracingSetup | None = None


def configure_tracing(
    service_name: str,
    *,
    instance_id: str | None = None,
    env: Mapping[str, str] | None = None,
    attributes: Mapping[str, str] | None = None,
) -> TracingSetup | None:
    """Install the process's tracer provider from the environment (None: tracing stays off).

    ``service_name`` is used when ``OTEL_SERVICE_NAME`` is not set; ``instance_id`` becomes
    ``service.instance.id``. Call once, at start-up; a second call returns the first setup.
    ValueError when the environment asks for something unsupported.
    """
    global ENABLED, _SETUP
    if _SETUP is not None:
        return _SETUP
    env = os.environ if env is None else env
    choice = exporter_from_env(env)
    if choice is None:
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource_attrs: dict[str, str] = {"service.name": env.get("OTEL_SERVICE_NAME") or service_name}
    if instance_id:
        resource_attrs["service.instance.id"] = instance_id
    resource_attrs.update(attributes or {})
    # Resource.create merges OTEL_RESOURCE_ATTRIBUTES (ours win for the keys above).
    provider = TracerProvider(resource=Resource.create(resource_attrs))
    provider.add_span_processor(BatchSpanProcessor(_exporter(choice)))
    trace.set_tracer_provider(provider)
    logging.getLogger(_EXPORT_QUEUE_LOGGER).addFilter(QueueFullFilter())
    _SETUP = TracingSetup(provider, choice)
    ENABLED = True
    log.info(
        "tracing on: %s exporter%s, service.name=%s",
        choice.kind,
        f" ({choice.protocol})" if choice.kind == "otlp" else "",
        resource_attrs["service.name"],
    )
    return _SETUP


@contextlib.contextmanager
def process_tracing(
    service: str, *, instance_id: str | None = None, attributes: Mapping[str, str] | None = None
) -> Iterator[bool]:
    """Tracing for this process while the block runs (from ``OTEL_*``; off when none is
    configured), flushed at the end. Yields False, after printing why to stderr, when the
    environment asks for something unsupported (the caller exits 2)."""
    try:
        setup = configure_tracing(service, instance_id=instance_id, attributes=attributes)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        yield False
        return
    try:
        yield True
    finally:
        if setup is not None:
            setup.shutdown()


#: The SDK's logger that reports each span dropped because the export queue is full.
_EXPORT_QUEUE_LOGGER = "opentelemetry.sdk._shared_internal"


class QueueFullFilter(logging.Filter):
    """One WARNING per ``interval_s`` about spans dropped because the export queue is full
    (sampling more than the exporter ships), with how many, instead of one line per span."""

    def __init__(self, interval_s: float = 10.0, clock: Any = time.monotonic) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._clock = clock
        self._last = -interval_s
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Queue full"):
            return True
        self._dropped += 1
        now = self._clock()
        if now - self._last < self._interval_s:
            return False
        record.msg = (
            "tracing: %d span(s) dropped since the last report: the export queue is full (more spans "
            "than the exporter ships: lower OTEL_TRACES_SAMPLER_ARG, or raise OTEL_BSP_MAX_QUEUE_SIZE)"
        )
        record.args = (self._dropped,)
        self._dropped = 0
        self._last = now
        return True


def _exporter(choice: ExporterChoice) -> Any:
    if choice.kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if choice.protocol == "http/protobuf":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise ValueError(
                "OTLP over http/protobuf needs the package opentelemetry-exporter-otlp-proto-http "
                "(pip install it), or set OTEL_EXPORTER_OTLP_PROTOCOL=grpc"
            ) from exc
        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

    return GrpcExporter()


def use_provider_for_tests(provider: Any) -> None:
    """Install ``provider`` (e.g. with an in-memory exporter) as this process's and turn the hot
    paths' checks on: unit tests of instrumented code. The provider is global to the process."""
    global ENABLED
    trace.set_tracer_provider(provider)
    ENABLED = True


def set_enabled_for_tests(on: bool) -> None:
    global ENABLED
    ENABLED = on


@contextlib.contextmanager
def child_span(
    tr: Tracer,
    name: str,
    *,
    kind: SpanKind = SpanKind.CLIENT,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span | None]:
    """A span for a call made on behalf of the current span (etcd, S3, a broker RPC), or None:
    nothing is recorded when tracing is off or no sampled span is current, so background loops
    (lease keep-alives, load reports) do not start traces of their own."""
    if not in_sampled_span():
        yield None
        return
    with tr.start_as_current_span(name, kind=kind, attributes=attributes) as span:
        yield span


def record_failure(span: Span | None, exc: BaseException) -> None:
    """Mark ``span`` failed with ``exc`` (its Danube error code when it has one)."""
    if span is None or not span.is_recording():
        return
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        span.set_attribute("danube.error.code", code)
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
