"""What a run prints and writes: the table, ratios (ours / each peer), results.json, PNG plots."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

OURS = ("danube", "danube-none", "danube-cloud", "danube-tls", "danube-secure")
PEERS_OF_OURS = {"danube": "fsync", "danube-none": "no fsync", "danube-cloud": "cloud"}
#: A variant of ours -> the driver it is measured against when both ran (one run, same machine):
#: the secured clusters (TLS only; TLS + JWT + RBAC) against the plaintext one.
BASELINE_OF = {"danube-tls": "danube", "danube-secure": "danube"}
#: Latency figures compared by ``variant_ratios``: (label, result key, percentile key).
_VARIANT_LATENCIES = (
    ("pub p50", "publish_latency", "p50_ms"),
    ("pub p99", "publish_latency", "p99_ms"),
    ("e2e p50", "e2e_latency", "p50_ms"),
    ("e2e p99", "e2e_latency", "p99_ms"),
)


def _lat(d: dict[str, float] | None, key: str) -> str:
    return f"{d[key]:.2f}" if d else "-"


def _rate(r: dict[str, Any]) -> str:
    return "max" if not r["target_rate"] else f"{r['target_rate']:,}"


def _labeller(rows: list[dict[str, Any]]) -> Any:
    """Driver names, with ``#round`` when the rows come from several rounds (``--rounds``)."""
    several = any(r.get("round", 1) > 1 for r in rows)
    return lambda r: f"{r['driver']}#{r.get('round', 1)}" if several else r["driver"]


def table(rows: Iterable[dict[str, Any]]) -> str:
    rows = list(rows)
    label = _labeller(rows)
    head = (
        f"{'workload':<24} {'driver':<15} {'rate':>7} {'durability':<34} {'pub msg/s':>10} {'cons msg/s':>10} "
        f"{'MB/s':>6} {'pub p50':>8} {'p99':>8} {'p99.9':>8} {'e2e p50':>8} {'p99':>8} {'p99.9':>8} {'CPU s/M':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        pub, e2e = r["publish_latency"], r["e2e_latency"]
        mb = max(r["publish_mb_s"], r["consume_mb_s"])
        cpu = r["cpu_s_per_million"]
        lines.append(
            f"{r['workload']:<24} {label(r):<15} {_rate(r):>7} {r['durability'][:34]:<34} "
            f"{r['publish_rate']:>10,.0f} {r['consume_rate']:>10,.0f} {mb:>6.1f} "
            f"{_lat(pub, 'p50_ms'):>8} {_lat(pub, 'p99_ms'):>8} {_lat(pub, 'p99.9_ms'):>8} "
            f"{_lat(e2e, 'p50_ms'):>8} {_lat(e2e, 'p99_ms'):>8} {_lat(e2e, 'p99.9_ms'):>8} "
            f"{cpu:>8.1f}" + (f"  [{'; '.join(r['notes'])}]" if r.get("notes") else "")
        )
    lines.append(
        "latencies in ms (fixed rates: from the intended send time); CPU s/M = CPU seconds per million messages"
    )
    legend = dict.fromkeys((r["driver"], r["reliable"], r["durability"]) for r in rows)
    if any(len(d) > 34 for _, _, d in legend):
        lines.append("durability in full:")
        lines.extend(
            f"  {drv} ({'reliable' if rel else 'non-reliable'} topics): {d}" for drv, rel, d in legend
        )
    return "\n".join(lines)


def markdown(rows: Iterable[dict[str, Any]]) -> str:
    """The table as Markdown (for docs/benchmarks.md): one row per workload x driver x rate."""
    rows = list(rows)
    label = _labeller(rows)
    out = [
        "| workload | driver | rate | pub msg/s | cons msg/s | MB/s | pub p50 / p99 / p99.9 ms "
        "| e2e p50 / p99 / p99.9 ms | CPU s/M |",
        "|---|---|---|---:|---:|---:|---|---|---:|",
    ]
    for r in rows:
        pub, e2e = r["publish_latency"], r["e2e_latency"]

        def trio(d: dict[str, float] | None) -> str:
            return " / ".join(_lat(d, k) for k in ("p50_ms", "p99_ms", "p99.9_ms")) if d else "-"

        notes = f" ({'; '.join(r['notes'])})" if r.get("notes") else ""
        cons = f"{r['consume_rate']:,.0f}" if r["consume_rate"] else "-"
        out.append(
            f"| {r['workload']} | {label(r)} | {_rate(r)} | {r['publish_rate']:,.0f} | {cons} "
            f"| {max(r['publish_mb_s'], r['consume_mb_s']):.1f} | {trio(pub)} | {trio(e2e)}{notes} "
            f"| {r['cpu_s_per_million']:.1f} |"
        )
    return "\n".join(out)


def ratios(rows: list[dict[str, Any]]) -> list[str]:
    """For each workload x rate: each of ours / each peer, on throughput (max of publish and consume)
    and on p99 end-to-end (or publish) latency. > 1 on throughput, < 1 on latency: ours is better."""
    out: list[str] = []
    several = any(r.get("round", 1) > 1 for r in rows)
    keyed: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for r in rows:
        keyed.setdefault((r["workload"], r["target_rate"], r.get("round", 1)), []).append(r)
    for (wl, rate, rnd), group in keyed.items():
        where = f"{wl} @ {rate or 'max'}" + (f" [round {rnd}]" if several else "")
        for ours in (r for r in group if r["driver"] in OURS):
            for peer in (r for r in group if r["driver"] not in OURS):
                t_ours, t_peer = _thr(ours), _thr(peer)
                l_ours, l_peer = _p99(ours), _p99(peer)
                thr = f"{t_ours / t_peer:.2f}" if t_peer else "-"
                lat = f"{l_ours / l_peer:.2f}" if l_ours and l_peer else "-"
                out.append(
                    f"{where}: {ours['driver']} / {peer['driver']}: throughput x{thr}, p99 latency x{lat}"
                )
    return out


def _finite(x: float | None) -> float | None:
    """A CPU figure, None when it was not measured (NaN: psutil missing)."""
    return x if x is not None and math.isfinite(x) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def variant_ratio_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each workload x rate (x round) where a variant (``BASELINE_OF``) and its baseline both ran:
    variant / baseline of publish and consume throughput, of CPU seconds per message (servers +
    clients + harness) and of publish and end-to-end latency p50 / p99 (None where either lacks
    the figure). Throughput < 1, CPU and latency > 1: the variant costs that much. On a machine
    shared with other work, CPU per message moves least with the others' load."""
    out: list[dict[str, Any]] = []
    keyed: dict[tuple[str, int, int, str], dict[str, Any]] = {}
    for r in rows:
        keyed.setdefault((r["workload"], r["target_rate"], r.get("round", 1), r["driver"]), r)
    for (wl, rate, rnd, drv), var in keyed.items():
        base = keyed.get((wl, rate, rnd, BASELINE_OF.get(drv, "")))
        if base is None:
            continue
        item: dict[str, Any] = {
            "workload": wl,
            "target_rate": rate,
            "round": rnd,
            "variant": drv,
            "baseline": base["driver"],
            "publish_rate": (base["publish_rate"], var["publish_rate"]),
            "publish": _ratio(var["publish_rate"], base["publish_rate"]),
            "consume": _ratio(var["consume_rate"] or None, base["consume_rate"] or None),
            "cpu/msg": _ratio(_finite(var["cpu_s_per_million"]), _finite(base["cpu_s_per_million"])),
        }
        for label, key, pct in _VARIANT_LATENCIES:
            b, v = base[key], var[key]
            item[label] = _ratio(v[pct] if v else None, b[pct] if b else None)
        out.append(item)
    return out


def _x(v: float | None) -> str:
    return f"x{v:.2f}" if v is not None else "-"


_RATIO_KEYS = ("publish", "consume", "cpu/msg", *(label for label, _, _ in _VARIANT_LATENCIES))


def variant_ratios(rows: list[dict[str, Any]]) -> list[str]:
    """``variant_ratio_rows`` as text lines (what bench/run.py prints); with several rounds, one
    line per round and then each ratio's median and range over the rounds."""
    vrows = variant_ratio_rows(rows)
    several = any(v["round"] > 1 for v in vrows)
    out = []
    for v in vrows:
        base_rate, var_rate = v["publish_rate"]
        lats = ", ".join(f"{label} {_x(v[label])}" for label, _, _ in _VARIANT_LATENCIES if v[label])
        where = f"{v['workload']} @ {v['target_rate'] or 'max'}" + (
            f" [round {v['round']}]" if several else ""
        )
        out.append(
            f"{where}: {v['variant']} / {v['baseline']}: "
            f"publish x{v['publish'] or 0:.2f} ({var_rate:,.0f} vs {base_rate:,.0f} msg/s), "
            f"consume {_x(v['consume'])}, CPU s per message {_x(v['cpu/msg'])}; {lats or 'no latencies'}"
        )
    if several:
        for s in variant_summary(vrows):
            parts = ", ".join(
                f"{k} x{m:.2f} ({lo:.2f}-{hi:.2f})" for k, (m, lo, hi) in s["ratios"].items() if m is not None
            )
            out.append(
                f"{s['workload']} @ {s['target_rate'] or 'max'}: {s['variant']} / {s['baseline']}, "
                f"median (range) of {s['rounds']} rounds: {parts}"
            )
    return out


def variant_summary(vrows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Over the rounds of each workload x rate x variant: every ratio's (median, min, max)."""
    groups: dict[tuple[str, int, str, str], list[dict[str, Any]]] = {}
    for v in vrows:
        groups.setdefault((v["workload"], v["target_rate"], v["variant"], v["baseline"]), []).append(v)
    out = []
    for (wl, rate, var, base), group in groups.items():
        ratios_: dict[str, tuple[float, float, float]] = {}
        for k in _RATIO_KEYS:
            xs = sorted(v[k] for v in group if v[k] is not None)
            if xs:
                ratios_[k] = (statistics.median(xs), xs[0], xs[-1])
        out.append(
            {
                "workload": wl,
                "target_rate": rate,
                "variant": var,
                "baseline": base,
                "rounds": len(group),
                "ratios": ratios_,
            }
        )
    return out


def variant_markdown(rows: list[dict[str, Any]]) -> str:
    """``variant_ratio_rows`` as a Markdown table (for docs/benchmarks.md)."""
    out = [
        "| workload | rate | round | variant / baseline | pub msg/s (baseline -> variant) | publish | consume | CPU/msg "
        + "".join(f"| {label} " for label, _, _ in _VARIANT_LATENCIES)
        + "|",
        "|---|---|---:|---|---:|---:|---:|---:" + "|---:" * len(_VARIANT_LATENCIES) + "|",
    ]
    for v in variant_ratio_rows(rows):
        base_rate, var_rate = v["publish_rate"]
        rate = f"{v['target_rate']:,}" if v["target_rate"] else "max"
        out.append(
            f"| {v['workload']} | {rate} | {v['round']} | {v['variant']} / {v['baseline']} "
            f"| {base_rate:,.0f} -> {var_rate:,.0f} | {_x(v['publish'])} | {_x(v['consume'])} | {_x(v['cpu/msg'])} "
            + "".join(f"| {_x(v[label])} " for label, _, _ in _VARIANT_LATENCIES)
            + "|"
        )
    return "\n".join(out)


def _thr(r: dict[str, Any]) -> float:
    return float(max(r["publish_rate"], r["consume_rate"]))


def _p99(r: dict[str, Any]) -> float | None:
    d = r["e2e_latency"] or r["publish_latency"]
    return d["p99_ms"] if d else None


def write_json(out_dir: Path, meta: dict[str, Any], rows: list[dict[str, Any]], skipped: list[str]) -> Path:
    path = out_dir / "results.json"
    path.write_text(json.dumps({"meta": meta, "results": rows, "skipped": skipped}, indent=2, default=_nan))
    return path


def _nan(obj: Any) -> Any:
    return None if isinstance(obj, float) and math.isnan(obj) else str(obj)


def plot(out_dir: Path, rows: list[dict[str, Any]]) -> list[Path]:
    """Throughput bars per workload; latency vs rate lines for workloads run at several fixed rates."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written: list[Path] = []
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    for wl in workloads:
        group = [r for r in rows if r["workload"] == wl]
        rates = sorted({r["target_rate"] for r in group})
        if len(rates) > 1:
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for drv in dict.fromkeys(r["driver"] for r in group):
                mine = sorted(
                    (r for r in group if r["driver"] == drv and r["e2e_latency"]),
                    key=lambda r: r["target_rate"],
                )
                if not mine:  # publish-only drivers have no end-to-end latency
                    continue
                xs = [r["target_rate"] for r in mine]
                line = ax.plot(
                    xs, [r["e2e_latency"]["p99_ms"] for r in mine], marker="o", label=f"{drv} p99"
                )[0]
                ax.plot(
                    xs,
                    [r["e2e_latency"]["p50_ms"] for r in mine],
                    marker=".",
                    linestyle="--",
                    color=line.get_color(),
                    label=f"{drv} p50",
                )
            ax.set_xlabel("target rate (msg/s)")
            ax.set_ylabel("end-to-end latency (ms, log)")
            ax.set_yscale("log")
            ax.set_title(f"{wl}: latency vs rate")
            ax.legend(fontsize=8)
            ax.grid(True, alpha=0.3)
            fig.tight_layout()
            path = out_dir / f"{wl}-latency.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        labels = [f"{r['driver']}\n@{_rate(r)}" for r in group]
        ax.bar(range(len(group)), [_thr(r) for r in group], color="tab:blue")
        ax.set_xticks(range(len(group)), labels, fontsize=7, rotation=0)
        ax.set_ylabel("msg/s (max of publish, consume)")
        ax.set_title(f"{wl}: throughput ({group[0]['message_size_bytes']} B messages)")
        ax.grid(True, axis="y", alpha=0.3)
        fig.tight_layout()
        path = out_dir / f"{wl}-throughput.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


if __name__ == "__main__":  # print a saved run as Markdown: python -m bench.harness.report results.json
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m bench.harness.report bench/results/<run>/results.json")
    data = json.loads(Path(sys.argv[1]).read_text())
    print(markdown(data["results"]))
    print()
    print("\n".join(ratios(data["results"])))
    if variant_ratio_rows(data["results"]):
        print()
        print(variant_markdown(data["results"]))
