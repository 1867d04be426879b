"""Idle topics: what N reliable topics cost a broker when nothing is published.

    .venv/bin/python bench/idle_topics.py [--topics 10000] [--idle-s 20] [--driver danube]
        [--client-procs 1] [--profile [native]] [--out bench/results/idle-<timestamp>/]

Three idle phases on one broker, each ``--idle-s`` long, measured the same way (broker RSS at the end,
broker CPU% = CPU seconds over the phase / its length, 100 = one core):

1. ``empty``: the cluster started, no topic;
2. ``topics``: N reliable topics created (concurrently, as the sweeps do; the creation time is
   reported), no client attached;
3. ``clients``: 1 producer and 1 consumer attached to every topic (in client worker processes, as in
   a run), and no message sent. The workers' CPU% is reported as well.

Targets (issue #17): under 1 GiB of broker RSS and no measurable idle CPU at 10,000 topics.
``--profile`` records the broker with py-spy (``--gil``: Python CPU only) during phases 2 and 3.
Results go to ``idle.json`` in ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.drivers import Driver, make_driver  # noqa: E402
from bench.harness.cpu import all_alive, cpu_seconds, rss_bytes  # noqa: E402
from bench.harness.profile import Profiler  # noqa: E402
from bench.harness.runner import create_topics  # noqa: E402
from bench.harness.workers import WorkerPool  # noqa: E402

MIB = 2**20


async def idle_phase(
    name: str, driver: Driver, client_pids: list[int], idle_s: float, profiler: Profiler | None
) -> dict[str, Any]:
    """Sit idle for ``idle_s`` and report broker RSS and CPU%, and the clients' CPU%."""
    brokers = driver.broker_pids()
    if profiler is not None:
        await profiler.start(f"idle-{name}", {f"broker-{i}": p for i, p in enumerate(brokers)}, idle_s)
    b0, c0, t0 = cpu_seconds(brokers), cpu_seconds(client_pids), time.perf_counter()
    await asyncio.sleep(idle_s)  # the measurement itself: an idle interval of a set length
    b1, c1, t1 = cpu_seconds(brokers), cpu_seconds(client_pids), time.perf_counter()
    if not all_alive(brokers):  # a vanished process reads as 0 CPU seconds: not "idle"
        raise RuntimeError(f"a broker process ({brokers}) exited during the {name} phase")
    if profiler is not None:
        await profiler.finish()
    rss = rss_bytes(brokers)
    row = {
        "phase": name,
        "broker_rss_mib": rss / MIB if rss is not None else None,
        "broker_cpu_pct": 100 * (b1 - b0) / (t1 - t0),
        "clients_cpu_pct": 100 * (c1 - c0) / (t1 - t0) if client_pids else None,
    }
    clients = f", clients {row['clients_cpu_pct']:.1f}% CPU" if client_pids else ""
    print(
        f"== {name}: broker RSS {row['broker_rss_mib']:.0f} MiB, broker {row['broker_cpu_pct']:.1f}% CPU{clients}"
        f" over {t1 - t0:.0f} s idle",
        flush=True,
    )
    return row


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    driver = make_driver(args.driver)
    profiler = Profiler(args.out, native=args.profile == "native") if args.profile else None
    result: dict[str, Any] = {
        "driver": args.driver,
        "topics": args.topics,
        "idle_s": args.idle_s,
        "phases": [],
    }
    await driver.start(workdir / driver.name)
    pool: WorkerPool | None = None
    try:
        result["phases"].append(await idle_phase("empty", driver, [], args.idle_s, None))
        run_id = uuid.uuid4().hex[:6]
        topics = [f"idle-{run_id}-t{i}" for i in range(args.topics)]
        result["create_topics_s"] = await create_topics(driver, topics, 1, reliable=True)
        print(f"== created {args.topics:,} topics in {result['create_topics_s']:.1f} s", flush=True)
        result["phases"].append(await idle_phase("topics", driver, [], args.idle_s, profiler))
        pool = WorkerPool(driver, args.client_procs)
        t0 = time.perf_counter()
        await pool.attach([(t, "sub-0") for t in topics], topics)
        result["attach_s"] = time.perf_counter() - t0
        print(
            f"== attached {args.topics:,} consumers and producers in {result['attach_s']:.1f} s", flush=True
        )
        result["phases"].append(await idle_phase("clients", driver, pool.pids(), args.idle_s, profiler))
    finally:
        if pool is not None:
            await pool.close()
        await driver.stop()
    empty = result["phases"][0]["broker_rss_mib"]
    for ph in result["phases"][1:]:
        if empty is not None and ph["broker_rss_mib"] is not None:
            ph["broker_kib_per_topic"] = (ph["broker_rss_mib"] - empty) * 1024 / args.topics
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topics", type=int, default=10_000)
    p.add_argument("--idle-s", type=float, default=20.0, help="length of each idle phase (s)")
    p.add_argument("--driver", default="danube")
    p.add_argument("--client-procs", type=int, default=1)
    p.add_argument(
        "--profile",
        nargs="?",
        const="python",
        choices=("python", "native"),
        default=None,
        help="py-spy the broker in the idle phases ('native': with C frames, pausing it per sample)",
    )
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    if args.topics < 1 or args.idle_s <= 0 or args.client_procs < 1:
        p.error("--topics and --client-procs must be >= 1, --idle-s > 0")
    args.out = args.out or ROOT / "bench" / "results" / time.strftime("idle-%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    workdir = Path(tempfile.mkdtemp(prefix="danube-idle-"))
    try:
        result = asyncio.run(run(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    path = args.out / "idle.json"
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
