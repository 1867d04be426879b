"""What tracing costs on the publish path: msg/s with tracing off, at 0.1 %, 1 % and 100 % of
messages sampled, in one run.

    .venv/bin/python bench/tracing_overhead.py [--messages 50000] [--rounds 3]

Two local clusters (etcd + lookup + 1 broker each) run side by side: one with tracing off, one
whose services export to an OTLP/gRPC endpoint in this process (danube_local's trace sink, a
real TraceService server). For each round and each mode, a fresh producer process publishes
``--messages`` 100-byte messages to a reliable (fsync) and to a non-reliable topic, as fast as it
can (pipelined, batched):

- **off**: the plain cluster, no OTEL_* in the producer: no provider, no interceptor anywhere;
- **0.1 %**, **1 %**: the traced cluster, the producer samples that share of messages
  (``OTEL_TRACES_SAMPLER=traceidratio``, arg 0.001 / 0.01): every message pays the sampling decision,
  sampled ones get send / publish / wal commit / fsync / deliver spans;
- **100 %**: the traced cluster, every message sampled.

Modes alternate within each round (so drift of the shared machine hits all of them alike), and each
mode waits for the sink to go quiet (the traced cluster done exporting) before the next one runs; the
table shows the median over rounds and the ratio to "off", plus the spans the sink received.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent

PRODUCER = """
import asyncio, json, os, sys
sys.path.insert(0, {bench!r})
from danube_common.observability.tracing import configure_tracing
setup = configure_tracing("bench-producer")
from reliable_publish import publish
res = asyncio.run(publish({url!r}, {topic!r}, {reliable!r}, {messages!r}, os.urandom(100)))
if setup is not None:
    setup.shutdown()
print(json.dumps(res))
"""

MODES: dict[str, dict[str, str] | None] = {
    "off": None,
    "0.1%": {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.001"},
    "1%": {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"},
    "100%": {"OTEL_TRACES_SAMPLER": "always_on"},
}


def run_producer(
    url: str, topic: str, reliable: bool, messages: int, env: dict[str, str]
) -> dict[str, float]:
    code = PRODUCER.format(bench=str(BENCH), url=url, topic=topic, reliable=reliable, messages=messages)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"producer failed ({out.returncode}):\n{out.stderr[-2000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _quiesce(sink: object, *, quiet_s: float = 1.0, limit_s: float = 60.0) -> None:
    """Wait until the sink has received no span for ``quiet_s`` (at most ``limit_s``): spans of a
    mode still being exported (100 % queues ~250k of them) would otherwise load the machine
    while the next mode is measured."""
    deadline = time.monotonic() + limit_s
    last, since = sink.received, time.monotonic()  # type: ignore[attr-defined]
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = sink.received  # type: ignore[attr-defined]
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()

    from reliable_publish import create_topic  # this directory

    from danube_local.cluster import LocalCluster
    from danube_local.traces import TraceSink

    base_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and "proxy" not in k.lower()}
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    spans: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory() as tmp, TraceSink(count_only=True) as sink:
        plain = LocalCluster(brokers=1, workdir=Path(tmp) / "plain", log_level="WARNING")
        traced = LocalCluster(
            brokers=1, workdir=Path(tmp) / "traced", log_level="WARNING", extra_env=sink.env()
        )
        with plain, traced:
            for cluster in (plain, traced):
                create_topic(cluster.admin_url, "/default/bench-reliable", "reliable", "fsync")
                create_topic(cluster.admin_url, "/default/bench-memory", "non_reliable", "")
            for rnd in range(1, args.rounds + 1):
                for mode, sampler in MODES.items():
                    cluster = plain if sampler is None else traced
                    env = dict(base_env)
                    if sampler is not None:
                        env |= sink.env() | sampler
                    before = sink.received
                    for kind, topic in (
                        ("reliable", "/default/bench-reliable"),
                        ("non-reliable", "/default/bench-memory"),
                    ):
                        print(
                            f"== round {rnd}/{args.rounds}: {mode}, {kind}, {args.messages} x 100 B ...",
                            flush=True,
                        )
                        res = run_producer(cluster.service_url, topic, kind == "reliable", args.messages, env)
                        results.setdefault((mode, kind), []).append(res)
                    _quiesce(sink)  # the traced cluster's exporters finish before the next mode runs
                    spans.setdefault(mode, []).append(sink.received - before)

    print()
    print(
        f"{'mode':<6} {'topic':<13} {'msg/s (median)':>15} {'x off':>7} {'range':>17} {'p50 ms':>7} {'p99 ms':>7}"
    )
    for kind in ("reliable", "non-reliable"):
        off = statistics.median(r["rate"] for r in results[("off", kind)])
        for mode in MODES:
            rows = results[(mode, kind)]
            rate = statistics.median(r["rate"] for r in rows)
            lo, hi = min(r["rate"] for r in rows), max(r["rate"] for r in rows)
            print(
                f"{mode:<6} {kind:<13} {rate:>15,.0f} {rate / off:>7.2f} {f'{lo:,.0f}-{hi:,.0f}':>17} "
                f"{statistics.median(r['p50_ms'] for r in rows):>7.2f} "
                f"{statistics.median(r['p99_ms'] for r in rows):>7.2f}"
            )
    for mode, counts in spans.items():
        print(f"spans received per round, {mode}: {counts} (both topics, {args.messages} messages each)")


if __name__ == "__main__":
    main()
