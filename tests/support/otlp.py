"""A real OTLP/gRPC trace endpoint for tests, built on the collector's own protobufs
(opentelemetry-proto): services and CLIs export to it exactly as to a collector, and tests read
back every span it received.

It is a synchronous gRPC server on its own threads, so it outlives any event loop and serves
module-scoped clusters of child processes::

    with OtlpReceiver() as otlp:
        cluster = LocalCluster(..., extra_env=otlp.env())
        ...
        spans = otlp.wait_for(lambda s: s.name == "process /default/t", what="a process span")
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

KINDS = {
    trace_pb2.Span.SPAN_KIND_UNSPECIFIED: "unspecified",
    trace_pb2.Span.SPAN_KIND_INTERNAL: "internal",
    trace_pb2.Span.SPAN_KIND_SERVER: "server",
    trace_pb2.Span.SPAN_KIND_CLIENT: "client",
    trace_pb2.Span.SPAN_KIND_PRODUCER: "producer",
    trace_pb2.Span.SPAN_KIND_CONSUMER: "consumer",
}


def _value(v: common_pb2.AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, which)


def _attrs(kvs: Iterable[common_pb2.KeyValue]) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    #: "" for a root span.
    parent_span_id: str
    name: str
    kind: str
    #: The exporting process's ``service.name``.
    service: str
    resource: dict[str, Any]
    attributes: dict[str, Any]
    #: (trace_id, span_id) of each link.
    links: tuple[tuple[str, str], ...]
    start_ns: int
    end_ns: int
    #: "unset", "ok" or "error".
    status: str
    events: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        return f"{self.service}: {self.name} ({self.kind}) {self.span_id} <- {self.parent_span_id or 'root'}"


class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        spans: list[ReceivedSpan] = []
        for rs in request.resource_spans:
            resource = _attrs(rs.resource.attributes)
            service = str(resource.get("service.name", ""))
            for ss in rs.scope_spans:
                for s in ss.spans:
                    spans.append(
                        ReceivedSpan(
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            name=s.name,
                            kind=KINDS.get(s.kind, str(s.kind)),
                            service=service,
                            resource=resource,
                            attributes=_attrs(s.attributes),
                            links=tuple((ln.trace_id.hex(), ln.span_id.hex()) for ln in s.links),
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            status={0: "unset", 1: "ok", 2: "error"}.get(s.status.code, "unset"),
                            events=tuple(e.name for e in s.events),
                        )
                    )
        self._receiver._add(spans)
        return trace_service_pb2.ExportTraceServiceResponse()


class OtlpReceiver:
    """Collects the spans exported to it; ``endpoint`` is what ``OTEL_EXPORTER_OTLP_ENDPOINT``
    takes."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._host = host
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self._server: grpc.Server | None = None
        self.endpoint = ""

    def start(self) -> OtlpReceiver:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Servicer(self), server)
        port = server.add_insecure_port(f"{self._host}:0")
        server.start()
        self._server = server
        self.endpoint = f"http://{self._host}:{port}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def env(
        self, *, sampler: str = "parentbased_always_on", sampler_arg: str | None = None
    ) -> dict[str, str]:
        """The environment that makes a process export here, in batches every 100 ms."""
        out = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_TRACES_SAMPLER": sampler,
        }
        if sampler_arg is not None:
            out["OTEL_TRACES_SAMPLER_ARG"] = sampler_arg
        return out

    def _add(self, spans: list[ReceivedSpan]) -> None:
        with self._lock:
            self._spans.extend(spans)

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.trace_id == trace_id]

    def find(self, predicate: Callable[[ReceivedSpan], bool]) -> list[ReceivedSpan]:
        return [s for s in self.spans if predicate(s)]

    def wait_for(
        self,
        predicate: Callable[[ReceivedSpan], bool],
        *,
        count: int = 1,
        timeout_s: float = 15.0,
        what: str = "spans",
    ) -> list[ReceivedSpan]:
        """Poll until at least ``count`` received spans match; return them all."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.find(predicate)
            if len(found) >= count:
                return found
            if time.monotonic() >= deadline:
                names = sorted({f"{s.service}:{s.name}" for s in self.spans})
                raise AssertionError(
                    f"timed out after {timeout_s}s waiting for {count} x {what}; got {len(found)}. "
                    f"Span names received: {names}"
                )
            time.sleep(0.05)


def children(spans: Iterable[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return [s for s in spans if s.trace_id == parent.trace_id and s.parent_span_id == parent.span_id]
