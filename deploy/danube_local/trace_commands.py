"""Tracing in ``danube-local``: the sink ``up`` runs for its services, the lines it prints about
it, the demo's own traced client, and the ``danube-local traces`` command that prints traces
from the sink's file.
"""

from __future__ import annotations

import argparse
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from danube_local.traces import (
    ReceivedSpan,
    TraceSink,
    exporter_env,
    format_trace,
    load_spans,
    message_traces,
)

if TYPE_CHECKING:
    from danube_common.observability.tracing import TracingSetup

TRACES_EPILOG = """\
examples:
  danube-local traces                          # the trace of the latest message, as a tree
  danube-local traces --topic /default/demo    # the latest message of one topic
  danube-local traces --list                   # recent message traces: id, topic, offset, spans
  danube-local traces --trace 4bf92f3577b34da6a3ce929d0e0e4736

A message is traced when its producer samples it: the SDK follows the application's
OpenTelemetry set-up, danube-cli the OTEL_* environment `danube-local up` prints.
"""


def spans_file(workdir: Path) -> Path:
    return Path(workdir) / "traces" / "spans.jsonl"


class LocalTracing:
    """Where ``up``'s services send their spans: its own sink (started here) or an external
    collector."""

    def __init__(self, *, workdir: Path, port: int, endpoint: str | None, host: str = "127.0.0.1") -> None:
        self.sink: TraceSink | None = None
        #: This process's own exporter (the demo's SDK), shut down before the sink stops.
        self.client: TracingSetup | None = None
        self._workdir = Path(workdir)
        if endpoint is None:
            self.sink = TraceSink(host, port, path=spans_file(workdir))
        self._endpoint = endpoint
        self.file = spans_file(workdir)

    def start(self) -> LocalTracing:
        if self.sink is not None:
            try:
                self.sink.start()
            except OSError as exc:
                raise OSError(
                    f"{exc}. Another collector (Jaeger?) may listen there: export to it with "
                    "--otlp-endpoint URL, pick another --traces-port, or --no-traces"
                ) from exc
        return self

    def stop(self) -> None:
        # The demo's exporter first: its last spans reach the sink, and its connection is closed
        # by us rather than refused by a stopping sink (gRPC logs that as a GOAWAY).
        client, self.client = self.client, None
        if client is not None:
            client.shutdown()
        if self.sink is not None:
            self.sink.stop()

    @property
    def endpoint(self) -> str:
        return self.sink.endpoint if self.sink is not None else str(self._endpoint)

    def env(self) -> dict[str, str]:
        """Every service's tracing settings: export here; their own root spans (RPCs, control
        plane) always sampled, messages as their producers decided. Settings of an external
        collector's already in the environment (TLS, headers, sampler) are kept."""
        if self.sink is None:
            return {k: v for k, v in exporter_env(self.endpoint).items() if k not in os.environ}
        return exporter_env(self.endpoint)

    def steps(self) -> str:
        lines = [f"Tracing: every service exports to {self.endpoint} (OTLP/gRPC)."]
        if self.sink is not None:
            lines.append(f"  spans are kept in {self.file}")
        lines += [
            "  trace what danube-cli sends and consumes (every message, or a ratio):",
            f"    export OTEL_EXPORTER_OTLP_ENDPOINT={self.endpoint} OTEL_TRACES_SAMPLER=always_on",
            "    (or OTEL_TRACES_SAMPLER=traceidratio OTEL_TRACES_SAMPLER_ARG=0.01)",
        ]
        if self.sink is not None:
            where = (
                ""
                if self._workdir == Path(".danube-local")
                else f" --workdir {shlex.quote(str(self._workdir))}"
            )
            lines.append(
                f"  then: danube-local traces{where} --topic /default/demo   # a message's trace as a tree"
            )
        return "\n".join(lines)


def trace_demo_client(tracing: LocalTracing) -> Callable[[], None]:
    """Make this process (the demo's SDK) export its spans to the cluster's sink, sampling every
    message; return the function that flushes them."""
    from danube_common.observability.tracing import configure_tracing

    os.environ.update(tracing.env() | {"OTEL_TRACES_SAMPLER": "always_on"})
    setup = configure_tracing("danube-local-demo")
    if setup is None:
        return lambda: None
    tracing.client = setup
    return lambda: setup.provider.force_flush()


def show_demo_trace(
    tracing: LocalTracing, flush: Callable[[], None], topic: str, say: Callable[[str], None]
) -> None:
    """Print the trace of the demo's first message once its spans have arrived."""
    if tracing.sink is None:
        return
    flush()
    sink = tracing.sink
    wanted = {"send", "publish", "deliver", "process"}
    deadline = time.monotonic() + 5.0
    traces: list[str] = []
    while time.monotonic() < deadline:
        traces = message_traces(sink.spans, topic)
        if traces and wanted <= {s.name.split(" ", 1)[0] for s in sink.trace(traces[-1])}:
            break
        time.sleep(0.1)
    if not traces:
        say("demo: no message trace arrived at the trace sink (is tracing on in the services?)")
        return
    say("demo: the trace of its last message (`danube-local traces --topic " + shlex.quote(topic) + "`):")
    say(format_trace(sink.trace(traces[-1])))


def add_traces_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "traces",
        help="print message traces a local cluster's services exported (danube-local up, tracing on)",
        description="Print traces from the trace sink's file of a local cluster (WORKDIR/traces/spans.jsonl) "
        "as trees: every span with its process, start offset and duration.",
        epilog=TRACES_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workdir", type=Path, default=Path(".danube-local"), metavar="DIR",
                   help="the cluster's work directory (default: ./.danube-local)")  # fmt: skip
    p.add_argument("--topic", metavar="TOPIC", help="only messages of this topic (partitions included)")
    p.add_argument("--trace", metavar="TRACE_ID", help="this trace (32 hex digits)")
    p.add_argument(
        "--last", type=int, metavar="N", help="the N latest message traces (default: 1 tree, or a list of 20)"
    )
    p.add_argument("--list", action="store_true", help="list recent message traces instead of printing trees")


def cmd_traces(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    path = spans_file(args.workdir)
    spans = load_spans(path)
    if not spans:
        say(
            f"danube-local traces: no spans in {path}. Is a cluster running with tracing on "
            "(`danube-local up`, not --no-traces), and did a producer sample a message "
            "(OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_TRACES_SAMPLER set for danube-cli)?"
        )
        return 1
    if args.trace:
        chosen = [s for s in spans if s.trace_id == args.trace.lower()]
        if not chosen:
            say(f"danube-local traces: trace {args.trace} is not in {path}")
            return 1
        say(format_trace(chosen))
        return 0
    ids = message_traces(spans, args.topic)
    if not ids:
        where = f" of {args.topic}" if args.topic else ""
        say(f"danube-local traces: no message trace{where} in {path} (no producer sampled one)")
        return 1
    by_trace: dict[str, list[ReceivedSpan]] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    if args.list:
        for tid in ids[-(args.last or 20) :]:
            trace_spans = by_trace[tid]
            send = next(s for s in trace_spans if s.kind == "producer" and s.name.startswith("send "))
            say(
                f"{tid}  {send.attributes.get('messaging.destination.name', '?')}"
                f"@{send.attributes.get('messaging.danube.offset', '?')}  {len(trace_spans)} spans"
            )
        return 0
    for tid in ids[-(args.last or 1) :]:
        say(format_trace(by_trace[tid]))
    return 0
