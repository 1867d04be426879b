"""Many topics' WALs: one shared CommitGroup vs a writer per log, in one process, same run.

    .venv/bin/python bench/wal_many_topics.py [--seconds 5] [--topics 1,100,1000] [--rate 2000]
        [--repeat 2] [--dir PATH]

For each topic count N: N logs (durability fsync), each with one appender sending one 1 KiB
record at fixed intervals without waiting for the previous one's ack (``--rate`` msg/s in total, spread evenly; open loop: latency counts
from the intended send time, so a stalled commit charges every append scheduled behind it).
Then one log with 8 appenders at max rate (the single busy topic: must not regress).

``shared``: every log in one ``CommitGroup`` (the broker's default, ``wal.shared_commit``);
``per-log``: a private group per log (one thread hop and one fsync per log per round: the
writer task each log had before). Printed: appends/s, append latency p50/p99, CPU seconds per
1,000 appends (this process), fsyncs per round; then shared / per-log ratios per repetition.
Modes alternate within a repetition; timings are noisy on a shared machine: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

from danube_broker.wal import CommitGroup, Durability, TopicLog, WalConfig


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


async def run_fixed_rate(base: Path, n: int, rate: float, seconds: float, shared: bool) -> dict[str, float]:
    shutil.rmtree(base, ignore_errors=True)
    group = CommitGroup() if shared else None
    logs = [
        await TopicLog.open(base / f"t{i}", cfg=WalConfig(), durability=Durability.FSYNC, group=group)
        for i in range(n)
    ]
    rec = [os.urandom(1024)]
    interval = n / rate  # per topic
    lat: list[float] = []
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.2
    end = start + seconds

    futs: list[asyncio.Future[int]] = []

    def done(t: float, _fut: asyncio.Future[int]) -> None:
        lat.append(loop.time() - t)

    async def appender(i: int) -> None:
        t = start + interval * i / n
        while t < end:
            delay = t - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            fut = await logs[i].enqueue(rec, [0])  # open loop: the next send does not wait
            fut.add_done_callback(partial(done, t))
            futs.append(fut)
            t += interval

    cpu0 = time.process_time()
    await asyncio.gather(*(appender(i) for i in range(n)))
    await asyncio.gather(*futs)
    cpu = time.process_time() - cpu0
    commits = sum(lg.stats().commits for lg in logs)
    rounds = group.rounds if group is not None else commits
    for lg in logs:
        await lg.aclose()
    if group is not None:
        await group.aclose()
    return {
        "appends_s": len(lat) / seconds,
        "p50": pct(lat, 0.5),
        "p99": pct(lat, 0.99),
        "cpu_per_k": cpu / max(len(lat), 1) * 1000,
        "per_round": commits / max(rounds, 1),
    }


async def run_busy(base: Path, seconds: float, shared: bool) -> dict[str, float]:
    shutil.rmtree(base, ignore_errors=True)
    group = CommitGroup() if shared else None
    lg = await TopicLog.open(base / "busy", cfg=WalConfig(), durability=Durability.FSYNC, group=group)
    recs = [os.urandom(100)] * 100
    pts = [0] * 100
    lat: list[float] = []
    deadline = time.perf_counter() + seconds

    async def appender() -> None:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            await lg.append(recs, pts)
            lat.append(time.perf_counter() - t0)

    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.gather(*(appender() for _ in range(8)))
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    await lg.aclose()
    if group is not None:
        await group.aclose()
    return {
        "appends_s": len(lat) / elapsed,
        "p50": pct(lat, 0.5),
        "p99": pct(lat, 0.99),
        "cpu_per_k": cpu / max(len(lat), 1) * 1000,
        "per_round": 1.0,
    }


async def main_async(args: argparse.Namespace, base: Path) -> None:
    print(
        f"{'case':<22} {'mode':<8} {'rep':>3} {'appends/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'CPU s/1k':>9} {'logs/round':>10}"
    )
    ratios: list[str] = []
    per_case: dict[str, list[dict[str, float]]] = {}
    cases: list[tuple[str, int]] = [(f"{n} topics @ {args.rate:g}/s", n) for n in args.topics] + [
        ("1 topic, 8 appenders max", 0)
    ]
    for rep in range(1, args.repeat + 1):
        for name, n in cases:
            got: dict[str, dict[str, float]] = {}
            modes = ["shared", "per-log"] if rep % 2 else ["per-log", "shared"]
            for mode in modes:
                shared = mode == "shared"
                if n:
                    r = await run_fixed_rate(base / "run", n, args.rate, args.seconds, shared)
                else:
                    r = await run_busy(base / "run", args.seconds, shared)
                got[mode] = r
                print(
                    f"{name:<22} {mode:<8} {rep:>3} {r['appends_s']:>10.0f} {r['p50']:>8.2f} {r['p99']:>8.2f} "
                    f"{r['cpu_per_k']:>9.3f} {r['per_round']:>10.1f}",
                    flush=True,
                )
            s, p = got["shared"], got["per-log"]
            per_case.setdefault(name, []).append(
                {k: s[k] / p[k] for k in ("appends_s", "p50", "p99", "cpu_per_k")}
            )
            ratios.append(
                f"  {name} [rep {rep}]: appends/s x{s['appends_s'] / p['appends_s']:.2f}, "
                f"p50 x{s['p50'] / p['p50']:.2f}, p99 x{s['p99'] / p['p99']:.2f}, CPU/append x{s['cpu_per_k'] / p['cpu_per_k']:.2f}"
            )
    print("\nshared / per-log (appends/s > 1, latency and CPU < 1 favour the shared group):")
    print("\n".join(ratios))
    print("\nmedian over the repetitions (shared / per-log):")
    for name, rs in per_case.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(
            f"  {name}: appends/s x{med['appends_s']:.2f}, p50 x{med['p50']:.2f}, p99 x{med['p99']:.2f}, "
            f"CPU/append x{med['cpu_per_k']:.2f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--topics", type=lambda s: [int(x) for x in s.split(",")], default=[1, 100, 1000])
    ap.add_argument("--rate", type=float, default=2000.0, help="msg/s in total over all topics")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="wal-many-", dir=args.dir))
    try:
        asyncio.run(main_async(args, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
