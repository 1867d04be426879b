"""A trace sink for a local cluster: an OTLP/gRPC endpoint (the collector's own protobufs) that
keeps the spans it receives, so a message's trace can be read without Jaeger or a collector.

``danube-local up`` starts one in the launcher process (unless ``--no-traces`` or an external
``--otlp-endpoint``), points every service at it (``OTEL_EXPORTER_OTLP_ENDPOINT``) and appends
every span to ``{workdir}/traces/spans.jsonl``; ``danube-local traces`` prints traces from that
file as trees. Tests use the same sink as their OTLP receiver.

The sink is a synchronous gRPC server on its own threads: it outlives any event loop and serves
clusters of child processes.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

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
_STATUS = {0: "unset", 1: "ok", 2: "error"}

#: Spans a sink keeps in memory (the oldest are dropped first; the file keeps them all).
DEFAULT_MAX_SPANS = 200_000


def _value(v: common_pb2.AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
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

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def instance(self) -> str:
        return str(self.resource.get("service.instance.id", ""))

    def __str__(self) -> str:
        return f"{self.service}: {self.name} ({self.kind}) {self.span_id} <- {self.parent_span_id or 'root'}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ReceivedSpan:
        d = dict(d)
        d["links"] = tuple(tuple(x) for x in d.get("links", ()))
        d["events"] = tuple(d.get("events", ()))
        return cls(**d)


def decode(request: trace_service_pb2.ExportTraceServiceRequest) -> list[ReceivedSpan]:
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
                        status=_STATUS.get(s.status.code, "unset"),
                        events=tuple(e.name for e in s.events),
                    )
                )
    return spans


class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: TraceSink) -> None:
        self._sink = sink

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        if self._sink.count_only:
            self._sink.count(sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans))
        else:
            self._sink.add(decode(request))
        return trace_service_pb2.ExportTraceServiceResponse()


#: How long a stopping sink lets exports in flight finish.
STOP_GRACE_S = 1.0


class TraceSink:
    """Collects the spans exported to it; ``endpoint`` is what ``OTEL_EXPORTER_OTLP_ENDPOINT``
    takes. With ``path``, every span is also appended to that JSON-lines file; with
    ``count_only`` spans are only counted (:attr:`received`), as cheaply as possible (benchmarks)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        path: Path | None = None,
        max_spans: int = DEFAULT_MAX_SPANS,
        count_only: bool = False,
    ) -> None:
        self.count_only = count_only
        #: Spans received since the start.
        self.received = 0
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._spans: collections.deque[ReceivedSpan] = collections.deque(maxlen=max_spans)
        self._server: grpc.Server | None = None
        self._path = path
        self._file: IO[str] | None = None
        self.endpoint = ""

    def start(self) -> TraceSink:
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self._path.open("a", encoding="utf-8")
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="trace-sink"))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Servicer(self), server)
        port = server.add_insecure_port(f"{self._host}:{self._port}")
        if port == 0:
            raise OSError(f"cannot listen on {self._host}:{self._port} for traces (OTLP): port in use?")
        server.start()
        self._server = server
        self.endpoint = f"http://{self._host}:{port}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            # Graceful: an export in flight finishes (its spans are kept) instead of being
            # cancelled, which its client logs as a GOAWAY ("Cancelling all calls").
            self._server.stop(grace=STOP_GRACE_S).wait()
            self._server = None
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> TraceSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def env(
        self, *, sampler: str = "parentbased_always_on", sampler_arg: str | None = None
    ) -> dict[str, str]:
        """The environment that makes a process export here, in batches every 100 ms."""
        return exporter_env(self.endpoint, sampler=sampler, sampler_arg=sampler_arg)

    def count(self, n: int) -> None:
        with self._lock:
            self.received += n

    def add(self, spans: list[ReceivedSpan]) -> None:
        with self._lock:
            self.received += len(spans)
            self._spans.extend(spans)
            if self._file is not None:
                for s in spans:
                    self._file.write(json.dumps(s.to_json(), separators=(",", ":")) + "\n")
                self._file.flush()

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
                raise TimeoutError(
                    f"timed out after {timeout_s}s waiting for {count} x {what}; got {len(found)}. "
                    f"Span names received: {names}"
                )
            time.sleep(0.05)


def exporter_env(
    endpoint: str, *, sampler: str = "parentbased_always_on", sampler_arg: str | None = None
) -> dict[str, str]:
    """``OTEL_*`` settings that export every process's spans to ``endpoint`` (OTLP/gRPC;
    plaintext unless it is ``https://``) in batches every 100 ms."""
    out = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_INSECURE": "false" if endpoint.startswith("https://") else "true",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_TRACES_SAMPLER": sampler,
    }
    if sampler_arg is not None:
        out["OTEL_TRACES_SAMPLER_ARG"] = sampler_arg
    return out


# ---------------------------------------------------------------- reading traces back


def load_spans(path: Path) -> list[ReceivedSpan]:
    """Every span of a sink's JSON-lines file (a torn last line is skipped)."""
    out: list[ReceivedSpan] = []
    if not path.exists():
        return out
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                out.append(ReceivedSpan.from_json(json.loads(line)))
            except (ValueError, TypeError, KeyError):
                continue
    return out


def children(spans: Iterable[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return [s for s in spans if s.trace_id == parent.trace_id and s.parent_span_id == parent.span_id]


def message_traces(spans: Iterable[ReceivedSpan], topic: str | None = None) -> list[str]:
    """Trace ids of messages (those with a ``send`` span), oldest first; of ``topic`` when given
    (a partition's messages count for their partitioned topic)."""
    found: dict[str, int] = {}
    for s in spans:
        if s.kind != "producer" or not s.name.startswith("send "):
            continue
        dest = str(s.attributes.get("messaging.destination.name", ""))
        if topic is not None and dest != topic and not dest.startswith(f"{topic}-part-"):
            continue
        found.setdefault(s.trace_id, s.start_ns)
    return sorted(found, key=lambda t: found[t])


def format_trace(spans: list[ReceivedSpan]) -> str:
    """A trace as an indented tree: name, process, duration, and the attributes worth seeing."""
    if not spans:
        return "(no spans)"
    by_id = {s.span_id: s for s in spans}
    kids: dict[str, list[ReceivedSpan]] = collections.defaultdict(list)
    roots: list[ReceivedSpan] = []
    for s in spans:
        if s.parent_span_id and s.parent_span_id in by_id:
            kids[s.parent_span_id].append(s)
        else:
            roots.append(s)
    start = min(s.start_ns for s in spans)
    end = max(s.end_ns for s in spans)
    services = {s.service for s in spans}
    lines = [
        f"trace {spans[0].trace_id}: {len(spans)} spans, {len(services)} processes, {(end - start) / 1e6:.2f} ms"
    ]

    def walk(s: ReceivedSpan, depth: int) -> Iterator[str]:
        # Generated instance ids (UUIDs) say nothing to a reader; configured ones (broker[1]) do.
        who = s.service + (f" {s.instance}" if s.instance and len(s.instance) <= 24 else "")
        offset = (s.start_ns - start) / 1e6
        extra = _notable(s)
        flag = "  ERROR" if s.status == "error" else ""
        yield f"{'  ' * (depth + 1)}{s.name}  [{who}]  +{offset:.2f} ms, {s.duration_ms:.2f} ms{extra}{flag}"
        for k in sorted(kids.get(s.span_id, []), key=lambda x: x.start_ns):
            yield from walk(k, depth + 1)

    for r in sorted(roots, key=lambda x: x.start_ns):
        if r.parent_span_id:
            lines.append(f"  (parent {r.parent_span_id} not received)")
        lines.extend(walk(r, 0))
    return "\n".join(lines)


#: Attributes shown in a trace tree, with their short labels.
_NOTABLE = {
    "messaging.danube.offset": "offset",
    "messaging.consumer.group.name": "subscription",
    "messaging.danube.redelivery_count": "redelivery",
    "messaging.danube.settlement": "settled",
    "danube.wal.round.records": "commit round records",
    "danube.error.code": "error",
    "rpc.grpc.status_code": "grpc status",
}


def _notable(s: ReceivedSpan) -> str:
    parts = [f"{label}={s.attributes[key]}" for key, label in _NOTABLE.items() if key in s.attributes]
    return f"  ({', '.join(parts)})" if parts else ""
