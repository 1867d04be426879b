"""The Markdown table the docs are built from, and the ratios (ours / each peer)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.harness.report import markdown, ratios

pytestmark = pytest.mark.unit


def row(driver: str, rate: float, p99: float, *, target: int = 0, consume: float = 0.0) -> dict[str, Any]:
    lat = {"p50_ms": 1.0, "p99_ms": p99, "p99.9_ms": p99 * 2}
    return {
        "workload": "rel-1p-100b",
        "driver": driver,
        "target_rate": target,
        "publish_rate": rate,
        "consume_rate": consume,
        "publish_mb_s": rate * 100 / 1e6,
        "consume_mb_s": 0.0,
        "publish_latency": lat,
        "e2e_latency": None,
        "cpu_s_per_million": 12.5,
        "notes": ["a note"] if driver == "rabbitmq" else [],
    }


def test_markdown_rows_and_ratios() -> None:
    rows = [row("danube", 100_000, 10.0), row("nats-jetstream", 25_000, 20.0), row("rabbitmq", 4_000, 40.0)]
    md = markdown(rows).splitlines()
    assert md[0].startswith("| workload | driver |") and len(md) == 5
    assert md[2] == "| rel-1p-100b | danube | max | 100,000 | - | 10.0 | 1.00 / 10.00 / 20.00 | - | 12.5 |"
    assert md[4].endswith("| - (a note) | 12.5 |")
    r = ratios(rows)
    assert "rel-1p-100b @ max: danube / nats-jetstream: throughput x4.00, p99 latency x0.50" in r
    assert "rel-1p-100b @ max: danube / rabbitmq: throughput x25.00, p99 latency x0.25" in r
