"""The Markdown table the docs are built from, and the ratios (ours / each peer)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.harness.report import markdown, ratios, variant_markdown, variant_ratio_rows, variant_ratios

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


def test_variant_ratios_secure_over_plain() -> None:
    plain = row("danube", 100_000, 10.0) | {
        "consume_rate": 90_000.0,
        "e2e_latency": {"p50_ms": 2.0, "p99_ms": 8.0},
    }
    secure = row("danube-secure", 80_000, 15.0) | {
        "consume_rate": 72_000.0,
        "e2e_latency": {"p50_ms": 3.0, "p99_ms": 12.0},
    }
    other_rate = row("danube-secure", 5_000, 1.0, target=5_000)  # no plain row at that rate: no ratio
    rows = [plain, secure, other_rate, row("nats-jetstream", 25_000, 20.0)]
    (v,) = variant_ratio_rows(rows)
    assert (v["variant"], v["baseline"], v["target_rate"]) == ("danube-secure", "danube", 0)
    assert v["publish"] == pytest.approx(0.8) and v["consume"] == pytest.approx(0.8)
    assert v["pub p50"] == pytest.approx(1.0) and v["pub p99"] == pytest.approx(1.5)
    assert v["e2e p50"] == pytest.approx(1.5) and v["e2e p99"] == pytest.approx(1.5)
    (line,) = variant_ratios(rows)
    assert line == (
        "rel-1p-100b @ max: danube-secure / danube: publish x0.80 (80,000 vs 100,000 msg/s), "
        "consume x0.80, CPU s per message x1.00; pub p50 x1.00, pub p99 x1.50, e2e p50 x1.50, e2e p99 x1.50"
    )
    md = variant_markdown(rows).splitlines()
    assert len(md) == 3
    assert md[2] == (
        "| rel-1p-100b | max | 1 | danube-secure / danube | 100,000 -> 80,000 | x0.80 | x0.80 | x1.00 "
        "| x1.00 | x1.50 | x1.50 | x1.50 |"
    )
    # the secure variant is one of ours: compared with the peers like danube
    assert "rel-1p-100b @ max: danube-secure / nats-jetstream: throughput x3.20, p99 latency x0.60" in ratios(
        rows
    )


def test_variant_ratios_over_rounds() -> None:
    rows = []
    for rnd, (plain, secure) in enumerate([(100_000, 70_000), (90_000, 72_000), (80_000, 76_000)], start=1):
        rows += [
            row("danube", plain, 10.0) | {"round": rnd},
            row("danube-secure", secure, 20.0) | {"round": rnd},
        ]
    vrows = variant_ratio_rows(rows)
    assert [v["round"] for v in vrows] == [1, 2, 3]
    assert [round(v["publish"], 2) for v in vrows] == [0.7, 0.8, 0.95]
    lines = variant_ratios(rows)
    assert lines[0].startswith("rel-1p-100b @ max [round 1]: danube-secure / danube: publish x0.70")
    assert lines[-1] == (
        "rel-1p-100b @ max: danube-secure / danube, median (range) of 3 rounds: publish x0.80 (0.70-0.95), "
        "cpu/msg x1.00 (1.00-1.00), pub p50 x1.00 (1.00-1.00), pub p99 x2.00 (2.00-2.00)"
    )
    # the table names each row's round; peer ratios are per round
    assert "danube-secure#3" in markdown(rows)
    more = [*rows, row("nats-jetstream", 10_000, 5.0) | {"round": 2}]
    assert ratios(more) == [
        "rel-1p-100b @ max [round 2]: danube / nats-jetstream: throughput x9.00, p99 latency x2.00",
        "rel-1p-100b @ max [round 2]: danube-secure / nats-jetstream: throughput x7.20, p99 latency x4.00",
    ]
