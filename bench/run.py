"""Run OMB-style workloads (bench/workloads/*.yaml) against Danube and its peers; print and save results.

    .venv/bin/python bench/run.py --workloads w1,w2,np-1p1c-100b --drivers danube,raw-grpc \
        [--duration-s 10] [--warmup-s 2] [--client-procs 1] [--rounds 1] [--out bench/results/<timestamp>/]

``--workloads all`` / ``--drivers all`` run everything. Each driver starts its own servers once (loopback,
free ports) and runs every selected workload on fresh topics; a driver whose servers or client library
are not installed is skipped with the reason. Prints one row per workload x driver x rate and the ratios
of ours (danube, danube-none, danube-cloud, danube-tls, danube-secure) to each peer, and of a variant to
its baseline when both ran (danube-tls / danube: the cost of TLS; danube-secure / danube: of TLS + JWT +
RBAC); writes results.json and PNG plots to --out.

Producers run in producer worker processes and consumers in consumer worker processes, ``--client-procs``
of each per run (default 1; never more than there are producers or consumers); ``--client-procs 0``
runs them all inside this process, as the harness did before workers.

``--sweep topics=10,100,1000,10000`` or ``--sweep partitions=1,2,4,...`` runs one workload shape per
value instead of the workload files (shapes: bench/harness/sweep.py; ``--sweep-rate`` sets the total
rate) and adds a sweep table (delivered rate, e2e p50/p99, CPU s/M, broker and busiest-client CPU%,
broker KiB per topic, topic creation and attach times) and ``sweep-<dimension>.png``.
``--brokers N`` runs the Danube drivers on N brokers (``danube-2b`` ... in the rows); ``--drivers
danube,danube:2`` runs one driver on 1 broker and one on 2 in the same invocation (with ``--rounds``:
interleaved).
``--profile`` records every broker and client worker with py-spy during each window
(``profile-*.txt`` summaries and ``*.raw`` stacks in ``--out``; bench/harness/profile.py).

``--rounds N`` (N > 1) starts every driver's servers at once and runs each workload x rate on every
driver in turn, N times, the order rotating each round; rows carry their ``round`` and the ratios of a
variant to its baseline are given per round and as a median with the range.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
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
from bench.harness import report, sweep_report  # noqa: E402
from bench.harness.profile import Profiler  # noqa: E402
from bench.harness.runner import DEFAULT_CLIENT_PROCS, RunResult, run_workload  # noqa: E402
from bench.harness.sweep import Sweep, parse_sweep, sweep_workload  # noqa: E402
from bench.harness.workload import Workload, WorkloadError, find_workloads  # noqa: E402

WORKLOAD_DIR = ROOT / "bench" / "workloads"


class Options:
    """Per-run settings that every run of one invocation shares (set once by ``main``)."""

    brokers: int = 1
    profiler: Profiler | None = None
    sweeps: dict[str, dict[str, object]] = {}  # workload key -> {"dimension", "value"}
    idle_s: float = 0.0  # > 0: idle CPU% measured before attach and before start (runner)
    partial: Path | None = None  # every row is appended here as it is measured (JSON lines)


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


def _runnable(driver: Driver, workloads: list[Workload], skipped: list[str]) -> list[Workload]:
    """The workloads ``driver`` can run; the others are reported and recorded as skipped."""
    todo = []
    for wl in workloads:
        why = _skip_reason(driver, wl)
        if why:
            print(f"-- skip {wl.key} on {driver.name}: {why}", flush=True)
            skipped.append(f"{wl.key} on {driver.name}: {why}")
        else:
            todo.append(wl)
    return todo


async def _start(driver: Driver, workdir: Path, skipped: list[str]) -> bool:
    try:
        print(f"== {driver.name}: starting servers ...", flush=True)
        await driver.start(workdir / driver.name)
    except DriverUnavailable as exc:
        print(f"-- skip {driver.name}: {exc}", flush=True)
        skipped.append(f"{driver.name}: {exc}")
        await driver.stop()
        return False
    return True


async def _run_one(
    driver: Driver,
    wl: Workload,
    rate: int,
    client_procs: int,
    results: list[RunResult],
    skipped: list[str],
    *,
    round_no: int = 1,
    rounds: int = 1,
) -> None:
    name = driver.name
    label = "max rate" if not rate else f"{rate:,} msg/s"
    of = f" [round {round_no}/{rounds}]" if rounds > 1 else ""
    print(
        f"== {name}: {wl.key} at {label} ({wl.warmup_duration_s:g} s warm-up + {wl.test_duration_s:g} s){of} ...",
        flush=True,
    )
    try:
        res = await run_workload(
            driver, wl, rate, client_procs=client_procs, profiler=Options.profiler, idle_s=Options.idle_s
        )
    except Exception as exc:
        print(f"-- {name}: {wl.key} at {label} failed: {type(exc).__name__}: {exc}", flush=True)
        skipped.append(f"{wl.key} at {label} on {name}{of}: failed: {type(exc).__name__}: {exc}")
        return
    res.round = round_no
    res.sweep = Options.sweeps.get(wl.key)
    results.append(res)
    if Options.partial is not None:  # a long sweep interrupted keeps the rows it measured
        with Options.partial.open("a") as f:
            f.write(json.dumps(res.to_json(), default=str) + "\n")
    print(report.table([res.to_json()]).splitlines()[2], flush=True)


def driver_spec(spec: str, default_brokers: int = 1) -> tuple[str, int]:
    """``danube:2`` -> ("danube", 2): a Danube driver on a 2-broker cluster (so one run, e.g. with
    ``--rounds``, can interleave 1 and 2 brokers); a plain name gets ``default_brokers``."""
    name, sep, n = spec.partition(":")
    if not sep:
        return name, default_brokers
    if not n.isdigit() or int(n) < 1:
        raise DriverUnavailable(f"{spec!r}: the broker count after ':' must be an integer >= 1")
    return name, int(n)


def _make(spec: str, skipped: list[str]) -> Driver | None:
    try:
        name, brokers = driver_spec(spec, Options.brokers)
        driver = make_driver(name)
        if brokers > 1:
            if "brokers" not in inspect.signature(type(driver)).parameters:
                raise DriverUnavailable(f"{name} runs one server set: it takes no broker count")
            driver = make_driver(name, brokers=brokers)
            driver.name = f"{name}-{brokers}b"
        return driver
    except DriverUnavailable as exc:
        print(f"-- skip {spec}: {exc}", flush=True)
        skipped.append(f"{spec}: {exc}")
        return None


async def run_all(
    drivers: list[str],
    workloads: list[Workload],
    out_dir: Path,
    workdir: Path,
    client_procs: int = DEFAULT_CLIENT_PROCS,
) -> tuple[list[RunResult], list[str]]:
    """One driver after the other: start its servers, run every workload on it, stop them."""
    results: list[RunResult] = []
    skipped: list[str] = []
    for name in drivers:
        driver = _make(name, skipped)
        if driver is None:
            continue
        todo = _runnable(driver, workloads, skipped)
        if not todo or not await _start(driver, workdir, skipped):
            continue
        try:
            for wl in todo:
                for rate in wl.producer_rates:
                    await _run_one(driver, wl, rate, client_procs, results, skipped)
        finally:
            await driver.stop()
    return results, skipped


async def run_rounds(
    drivers: list[str],
    workloads: list[Workload],
    workdir: Path,
    rounds: int,
    client_procs: int = DEFAULT_CLIENT_PROCS,
) -> tuple[list[RunResult], list[str]]:
    """Every driver's servers at once; then ``rounds`` times: each workload x rate on every driver
    in turn, the drivers' order rotating by one each round (so no driver always runs first after
    another's load, and a drift of the machine's load falls on all of them alike)."""
    results: list[RunResult] = []
    skipped: list[str] = []
    started: list[tuple[Driver, list[str]]] = []
    try:
        for name in drivers:
            driver = _make(name, skipped)
            if driver is None:
                continue
            todo = _runnable(driver, workloads, skipped)
            if todo and await _start(driver, workdir, skipped):
                started.append((driver, [wl.key for wl in todo]))
        for r in range(1, rounds + 1):
            shift = (r - 1) % max(1, len(started))
            order = started[shift:] + started[:shift]
            for wl in workloads:
                for rate in wl.producer_rates:
                    for driver, keys in order:
                        if wl.key in keys:
                            await _run_one(
                                driver, wl, rate, client_procs, results, skipped, round_no=r, rounds=rounds
                            )
    finally:
        for driver, _ in started:
            await driver.stop()
    return results, skipped


def sweep_workloads(
    sweep: Sweep, rate: int | None, duration_s: float | None, warmup_s: float | None
) -> list[Workload]:
    """One workload per swept value (registered in ``Options.sweeps`` so rows carry their point)."""
    out = []
    for value in sweep.values:
        wl = sweep_workload(
            sweep,
            value,
            rate=rate,
            duration_s=10.0 if duration_s is None else duration_s,
            warmup_s=2.0 if warmup_s is None else warmup_s,
        )
        Options.sweeps[wl.key] = {"dimension": sweep.dimension, "value": value}
        out.append(wl)
    return out


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
        "--rounds",
        type=int,
        default=1,
        help="N > 1: start every driver's servers first, then run each workload x rate on every driver "
        "in turn, N times, rotating the drivers' order each round (ratios then have a spread)",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="results directory (default bench/results/<timestamp>/)"
    )
    p.add_argument("--workloads-dir", type=Path, default=WORKLOAD_DIR)
    p.add_argument(
        "--sweep",
        default=None,
        help="topics=10,100,1000,10000 or partitions=1,2,4,8,16,32,64: one run per value, instead of "
        "--workloads (shapes in bench/harness/sweep.py)",
    )
    p.add_argument(
        "--sweep-rate",
        type=int,
        default=None,
        help="total msg/s of every sweep point (default: topics 5,000; partitions 10,000; 0 = max)",
    )
    p.add_argument(
        "--brokers", type=int, default=1, help="brokers of the Danube drivers' cluster (default 1)"
    )
    p.add_argument(
        "--profile",
        nargs="?",
        const="python",
        choices=("python", "native"),
        default=None,
        help="py-spy every broker and client worker during each window (summaries in --out); "
        "'--profile native' adds C frames (gRPC core, uvloop) and pauses the processes per sample",
    )
    p.add_argument(
        "--idle-s",
        type=float,
        default=0.0,
        help="before each run's clients attach and again before they start, sit idle this long and "
        "record the broker's CPU%% (idle cost of the topics, then of the attached clients)",
    )
    args = p.parse_args()
    if args.client_procs < 0:
        p.error("--client-procs must be >= 0")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")

    if args.brokers < 1:
        p.error("--brokers must be >= 1")
    try:
        if args.sweep:
            workloads = sweep_workloads(
                parse_sweep(args.sweep), args.sweep_rate, args.duration_s, args.warmup_s
            )
        else:
            workloads = [
                w.with_durations(duration_s=args.duration_s, warmup_s=args.warmup_s)
                for w in find_workloads(args.workloads_dir, args.workloads.split(","))
            ]
    except WorkloadError as exc:
        p.error(str(exc))
    drivers = known_names() if args.drivers == "all" else args.drivers.split(",")
    out_dir = args.out or ROOT / "bench" / "results" / time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    Options.brokers = args.brokers
    Options.idle_s = args.idle_s
    Options.partial = out_dir / "results.partial.jsonl"
    if args.profile:
        try:
            Options.profiler = Profiler(out_dir, native=args.profile == "native")
        except RuntimeError as exc:
            p.error(str(exc))
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    workdir = Path(tempfile.mkdtemp(prefix="danube-bench-"))
    try:
        if args.rounds > 1:
            run = run_rounds(drivers, workloads, workdir, args.rounds, args.client_procs)
        else:
            run = run_all(drivers, workloads, out_dir, workdir, args.client_procs)
        results, skipped = asyncio.run(run)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = [r.to_json() for r in results]
    print()
    print(report.table(rows))
    if sweep_report.sweep_rows(rows):
        print("\nsweep:")
        print(sweep_report.table(rows))
        idle = sweep_report.idle_markdown(rows)
        if idle:
            print("\nidle (broker CPU%, 100 = one core):")
            print(idle)
    lines = report.ratios(rows)
    if lines:
        print("\nratios (ours / peer; throughput > 1 and latency < 1 favour ours):")
        print("\n".join("  " + ln for ln in lines))
    variants = report.variant_ratios(rows)
    if variants:
        print("\nratios of a variant to its baseline in this run (throughput < 1 and latency > 1: its cost):")
        print("\n".join("  " + ln for ln in variants))
    if skipped:
        print("\nskipped:")
        print("\n".join("  " + s for s in skipped))
    meta = {
        "machine": machine(),
        "argv": sys.argv[1:],
        "client_procs": args.client_procs,
        "rounds": args.rounds,
        "brokers": args.brokers,
        "sweep": args.sweep,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    path = report.write_json(out_dir, meta, rows, skipped)
    plots = sweep_report.plot(out_dir, rows) if args.sweep else report.plot(out_dir, rows)
    print(f"\nwrote {path} and {len(plots)} plot(s) to {out_dir}")


if __name__ == "__main__":
    main()
