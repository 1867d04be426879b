"""Run OMB-style workloads (bench/workloads/*.yaml) against Danube and its peers; print and save results.

    .venv/bin/python bench/run.py --workloads w1,w2,np-1p1c-100b --drivers danube,raw-grpc \
        [--duration-s 10] [--warmup-s 2] [--client-procs 1] [--out bench/results/<timestamp>/]

``--workloads all`` / ``--drivers all`` run everything. Each driver starts its own servers once (loopback,
free ports) and runs every selected workload on fresh topics; a driver whose servers or client library
are not installed is skipped with the reason. Prints one row per workload x driver x rate and the ratios
of ours (danube, danube-none, danube-cloud) to each peer; writes results.json and PNG plots to --out.

Producers run in producer worker processes and consumers in consumer worker processes, ``--client-procs``
of each per run (default 1; never more than there are producers or consumers); ``--client-procs 0``
runs them all inside this process, as the harness did before workers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.drivers import Driver, DriverUnavailable, known_names, make_driver  # noqa: E402
from bench.harness import report  # noqa: E402
from bench.harness.runner import DEFAULT_CLIENT_PROCS, RunResult, run_workload  # noqa: E402
from bench.harness.workload import Workload, find_workloads  # noqa: E402

WORKLOAD_DIR = ROOT / "bench" / "workloads"


def _skip_reason(driver: Driver, wl: Workload) -> str | None:
    if wl.reliable and not driver.supports_reliable:
        return f"{driver.name} has no reliable topics"
    if not wl.reliable and not driver.supports_non_reliable:
        return f"{driver.name} has no non-reliable topics"
    if not driver.supports_consume and (
        wl.backlog_messages or wl.topics > 1 or wl.partitions_per_topic > 1 or any(wl.producer_rates)
    ):
        return f"{driver.name} only publishes (1 topic, 1 partition, max rate)"
    return None


async def run_all(
    drivers: list[str],
    workloads: list[Workload],
    out_dir: Path,
    workdir: Path,
    client_procs: int = DEFAULT_CLIENT_PROCS,
) -> tuple[list[RunResult], list[str]]:
    results: list[RunResult] = []
    skipped: list[str] = []
    for name in drivers:
        try:
            driver = make_driver(name)
        except DriverUnavailable as exc:
            print(f"-- skip {name}: {exc}", flush=True)
            skipped.append(f"{name}: {exc}")
            continue
        runnable = [(wl, _skip_reason(driver, wl)) for wl in workloads]
        for wl, why in runnable:
            if why:
                print(f"-- skip {wl.key} on {name}: {why}", flush=True)
                skipped.append(f"{wl.key} on {name}: {why}")
        todo = [wl for wl, why in runnable if not why]
        if not todo:
            continue
        try:
            print(f"== {name}: starting servers ...", flush=True)
            await driver.start(workdir / name)
        except DriverUnavailable as exc:
            print(f"-- skip {name}: {exc}", flush=True)
            skipped.append(f"{name}: {exc}")
            await driver.stop()
            continue
        try:
            for wl in todo:
                for rate in wl.producer_rates:
                    label = "max rate" if not rate else f"{rate:,} msg/s"
                    print(
                        f"== {name}: {wl.key} at {label} ({wl.warmup_duration_s:g} s warm-up + "
                        f"{wl.test_duration_s:g} s) ...",
                        flush=True,
                    )
                    try:
                        res = await run_workload(driver, wl, rate, client_procs=client_procs)
                    except Exception as exc:
                        print(
                            f"-- {name}: {wl.key} at {label} failed: {type(exc).__name__}: {exc}", flush=True
                        )
                        skipped.append(f"{wl.key} at {label} on {name}: failed: {type(exc).__name__}: {exc}")
                        continue
                    results.append(res)
                    print(report.table([res.to_json()]).splitlines()[2], flush=True)
        finally:
            await driver.stop()
    return results, skipped


def machine() -> dict[str, object]:
    info: dict[str, object] = {
        "nproc": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
    }
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    return info


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--workloads", default="all", help="comma-separated file stems or prefixes (w1, w2 ...), or all"
    )
    p.add_argument(
        "--drivers", default="danube,raw-grpc", help=f"comma-separated, or all ({', '.join(known_names())})"
    )
    p.add_argument(
        "--duration-s", type=float, default=None, help="override every workload's testDurationSeconds"
    )
    p.add_argument("--warmup-s", type=float, default=None, help="override warmupDurationSeconds")
    p.add_argument(
        "--client-procs",
        type=int,
        default=DEFAULT_CLIENT_PROCS,
        help="producer worker processes and as many consumer worker processes per run "
        f"(default {DEFAULT_CLIENT_PROCS}); 0 = every client inside the harness process",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="results directory (default bench/results/<timestamp>/)"
    )
    p.add_argument("--workloads-dir", type=Path, default=WORKLOAD_DIR)
    args = p.parse_args()
    if args.client_procs < 0:
        p.error("--client-procs must be >= 0")

    workloads = [
        w.with_durations(duration_s=args.duration_s, warmup_s=args.warmup_s)
        for w in find_workloads(args.workloads_dir, args.workloads.split(","))
    ]
    drivers = known_names() if args.drivers == "all" else args.drivers.split(",")
    out_dir = args.out or ROOT / "bench" / "results" / time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    workdir = Path(tempfile.mkdtemp(prefix="danube-bench-"))
    try:
        results, skipped = asyncio.run(run_all(drivers, workloads, out_dir, workdir, args.client_procs))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = [r.to_json() for r in results]
    print()
    print(report.table(rows))
    lines = report.ratios(rows)
    if lines:
        print("\nratios (ours / peer; throughput > 1 and latency < 1 favour ours):")
        print("\n".join("  " + ln for ln in lines))
    if skipped:
        print("\nskipped:")
        print("\n".join("  " + s for s in skipped))
    meta = {
        "machine": machine(),
        "argv": sys.argv[1:],
        "client_procs": args.client_procs,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    path = report.write_json(out_dir, meta, rows, skipped)
    plots = report.plot(out_dir, rows)
    print(f"\nwrote {path} and {len(plots)} plot(s) to {out_dir}")


if __name__ == "__main__":
    main()
