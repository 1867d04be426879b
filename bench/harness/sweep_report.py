"""What a sweep prints and plots: one row per driver x swept value, and cost / p99 against the value.

Rows are ordinary results (``RunResult.to_json()``) that carry ``sweep`` = {"dimension", "value"}.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

HEADER = (
    "driver",
    "value",
    "pub msg/s",
    "delivered msg/s",
    "e2e p50 ms",
    "e2e p99 ms",
    "CPU s/M",
    "broker CPU%",
    "busiest client CPU%",
    "broker KiB/partition",
    "create s",
    "attach s",
)


def sweep_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("sweep")]


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def cells(r: dict[str, Any]) -> list[str]:
    e2e = r.get("e2e_latency") or {}
    mem = r.get("broker_mem_per_topic_bytes")
    return [
        r["driver"],
        f"{r['sweep']['dimension']}={r['sweep']['value']:,}",
        _num(r["publish_rate"], ",.0f"),
        _num(r["consume_rate"], ",.0f"),
        _num(e2e.get("p50_ms"), ".1f"),
        _num(e2e.get("p99_ms"), ".1f"),
        _num(r["cpu_s_per_million"], ".1f"),
        _num(r.get("broker_cpu_pct"), ".0f"),
        _num(r.get("client_cpu_pct_max"), ".0f"),
        _num(mem / 1024 if mem is not None else None, ".1f"),
        _num(r.get("create_topics_s"), ".1f"),
        _num(r.get("attach_s"), ".1f"),
    ]


def table(rows: list[dict[str, Any]]) -> str:
    body = [list(HEADER)] + [cells(r) for r in sweep_rows(rows)]
    widths = [max(len(line[i]) for line in body) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in body)


def markdown(rows: list[dict[str, Any]]) -> str:
    out = ["| " + " | ".join(HEADER) + " |", "|---|---|" + "---:|" * (len(HEADER) - 2)]
    out += ["| " + " | ".join(cells(r)) + " |" for r in sweep_rows(rows)]
    return "\n".join(out)


IDLE_HEADER = (
    "driver",
    "value",
    "broker MiB, topics only",
    "idle CPU%, no clients",
    "idle CPU%, clients",
    "clients CPU%",
)


def idle_markdown(rows: list[dict[str, Any]]) -> str:
    """The idle figures of the rows that have them (``--idle-s``); empty when none has."""
    mine = [r for r in sweep_rows(rows) if r.get("idle_broker_cpu_pct_no_clients") is not None]
    if not mine:
        return ""
    out = ["| " + " | ".join(IDLE_HEADER) + " |", "|---|---|" + "---:|" * (len(IDLE_HEADER) - 2)]
    for r in mine:
        rss = r.get("broker_rss_topics_only_bytes")
        out.append(
            "| "
            + " | ".join(
                [
                    r["driver"],
                    f"{r['sweep']['dimension']}={r['sweep']['value']:,}",
                    _num(rss / 2**20 if rss is not None else None, ".0f"),
                    _num(r.get("idle_broker_cpu_pct_no_clients"), ".1f"),
                    _num(r.get("idle_broker_cpu_pct_clients"), ".1f"),
                    _num(r.get("idle_clients_cpu_pct"), ".1f"),
                ]
            )
            + " |"
        )
    return "\n".join(out)


def series(rows: list[dict[str, Any]], key: str) -> dict[str, list[tuple[int, float]]]:
    """{driver: [(swept value, figure), ...] sorted by value}; rows without the figure are left out.
    ``key`` is a result field, or ``e2e_p99`` for the end-to-end p99 (ms)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for r in sweep_rows(rows):
        v = (r.get("e2e_latency") or {}).get("p99_ms") if key == "e2e_p99" else r.get(key)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        out.setdefault(r["driver"], []).append((int(r["sweep"]["value"]), float(v)))
    return {d: sorted(pts) for d, pts in out.items()}


def plot(out_dir: Path, rows: list[dict[str, Any]]) -> list[Path]:
    """Per swept dimension: CPU s/M msg and e2e p99 against the value (log-log), one line a driver."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written: list[Path] = []
    for dim in dict.fromkeys(r["sweep"]["dimension"] for r in sweep_rows(rows)):
        mine = [r for r in sweep_rows(rows) if r["sweep"]["dimension"] == dim]
        rate = mine[0]["target_rate"]
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
        for key, ax, label in (
            ("cpu_s_per_million", ax1, "CPU s per million messages"),
            ("e2e_p99", ax2, "end-to-end p99 (ms)"),
        ):
            for drv, pts in series(mine, key).items():
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=drv)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(dim)
            ax.set_ylabel(label + " (log)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        at = "max rate" if not rate else f"{rate:,} msg/s in total"
        fig.suptitle(f"cost and p99 vs {dim} ({at}, {mine[0]['message_size_bytes']} B, reliable)")
        fig.tight_layout()
        path = out_dir / f"sweep-{dim}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


if (
    __name__ == "__main__"
):  # merge saved sweeps: python -m bench.harness.sweep_report OUT_DIR a.json b.json ...
    import json
    import sys

    if len(sys.argv) < 3:
        sys.exit("usage: python -m bench.harness.sweep_report OUT_DIR results.json [results.json ...]")
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    merged: list[dict[str, Any]] = []
    for name in sys.argv[2:]:
        merged += json.loads(Path(name).read_text())["results"]
    print(markdown(merged))
    idle = idle_markdown(merged)
    if idle:
        print()
        print(idle)
    for path in plot(out_dir, merged):
        print(f"wrote {path}")
