"""The WAL's append throughput next to this disk's raw fsync rate, measured in the same run.

    .venv/bin/python bench/wal_fsync.py [--seconds 1.2] [--dir /path/on/the/disk/to/test]

1. **raw**: one thread writing 100 bytes then fdatasync (what the WAL uses) in a loop, and the
   same with fsync: the ceiling for "one durable append per sync".
2. **wal**: TopicLog.append from 1 and from 8 concurrent appenders (each waits for its ack
   before appending again, as a producer with one batch in flight), records of 100 B and 1 KiB,
   batches of 1 and of 100 records, durability fsync and none.
   Printed: appends/s and records/s, appends per commit (group commit at work), and appends/s
   divided by the raw fdatasync rate (> 1 means several appends share one fsync).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

from danube_broker.wal import Durability, TopicLog, WalConfig


def raw_sync_rate(directory: Path, seconds: float, sync: str) -> float:
    path = directory / f"raw-{sync}.bin"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    fn = os.fdatasync if sync == "fdatasync" else os.fsync
    data = b"x" * 100
    n = 0
    pos = 0
    try:
        deadline = time.perf_counter() + seconds
        t0 = time.perf_counter()
        while time.perf_counter() < deadline:
            os.pwrite(fd, data, pos)
            pos += len(data)
            fn(fd)
            n += 1
        return n / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()


async def wal_run(
    directory: Path, *, appenders: int, size: int, batch: int, durability: Durability, seconds: float
) -> dict[str, float]:
    shutil.rmtree(directory, ignore_errors=True)
    log = await TopicLog.open(directory, cfg=WalConfig(), durability=durability)
    recs = [os.urandom(size) for _ in range(batch)]
    pts = [int(time.time() * 1000)] * batch
    counts = [0] * appenders
    deadline = time.perf_counter() + seconds

    async def appender(i: int) -> None:
        while time.perf_counter() < deadline:
            await log.append(recs, pts)
            counts[i] += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(appender(i) for i in range(appenders)))
    elapsed = time.perf_counter() - t0
    stats = log.stats()
    await log.aclose()
    appends = sum(counts)
    return {
        "appends_s": appends / elapsed,
        "records_s": appends * batch / elapsed,
        "per_commit": appends / max(stats.commits, 1),
        "fsync_p50_ms": stats.fsync_p50_ms,
    }


async def main_async(args: argparse.Namespace, base: Path, raw: float) -> None:
    print(
        f"\n{'durability':<10} {'appenders':>9} {'record':>7} {'batch':>5} {'appends/s':>10} "
        f"{'records/s':>10} {'appends/commit':>14} {'fsync p50':>9} {'x raw':>6}"
    )
    for durability in (Durability.FSYNC, Durability.NONE):
        for appenders in (1, 8):
            for size in (100, 1024):
                for batch in (1, 100):
                    r = await wal_run(
                        base / "topic",
                        appenders=appenders,
                        size=size,
                        batch=batch,
                        durability=durability,
                        seconds=args.seconds,
                    )
                    p50 = f"{r['fsync_p50_ms']:.2f}ms" if durability is Durability.FSYNC else "-"
                    print(
                        f"{durability.value:<10} {appenders:>9} {size:>6}B {batch:>5} {r['appends_s']:>10,.0f} "
                        f"{r['records_s']:>10,.0f} {r['per_commit']:>14.1f} {p50:>9} "
                        f"{r['appends_s'] / raw:>6.2f}"
                    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=1.2, help="per measurement (16 WAL runs + 2 raw)")
    parser.add_argument(
        "--dir", default=None, help="a directory on the disk to measure (default: a temp dir)"
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="wal-bench-", dir=args.dir))
    try:
        raw = raw_sync_rate(base, args.seconds, "fdatasync")
        raw_fsync = raw_sync_rate(base, args.seconds, "fsync")
        print(f"disk under {base}")
        print(f"raw 100 B write + fdatasync: {raw:,.0f}/s ({1e6 / raw:.0f} us each)")
        print(f"raw 100 B write + fsync:     {raw_fsync:,.0f}/s ({1e6 / raw_fsync:.0f} us each)")
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            print("event loop: asyncio; 'x raw' = appends/s over the raw fdatasync rate")
            asyncio.run(main_async(args, base, raw))
        else:  # the broker runs on uvloop
            print("event loop: uvloop; 'x raw' = appends/s over the raw fdatasync rate")
            uvloop.run(main_async(args, base, raw))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
