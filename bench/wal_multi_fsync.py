"""Making small writes durable in many files per round: which sync strategy (same run).

    .venv/bin/python bench/wal_multi_fsync.py [--seconds 2] [--files 1,10,100,1000] [--dir PATH]

A *round* writes one small record (``--bytes``, default 4 KiB) to each of N files (appending,
as the WAL does) and makes all of them durable; the next round starts when it is done (one
round at a time, like one commit scheduler). Strategies:

- ``seq``:     one fdatasync per file, one after the other, in one thread;
- ``par<k>``:  the N fdatasyncs spread over k threads at once (ext4's jbd2 can merge the
               concurrent ones into one journal commit);
- ``syncfs``:  the writes, then one syncfs(fd) (flushes the whole file system: every other
               writer's dirty pages too; reports write-back errors only since Linux 5.8);
- ``journal``: the N records appended to ONE shared file, one fdatasync (a broker-wide journal).

Printed per N: rounds/s, mean and p99 round latency, and each strategy's rounds/s relative to
``seq`` measured in the same run. Timings are noisy on a shared machine: compare ratios.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)


def syncfs(fd: int) -> None:
    if _libc.syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class Files:
    def __init__(self, directory: Path, n: int) -> None:
        self.fds = [
            os.open(directory / f"f{i:05d}.wal", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            for i in range(n)
        ]
        self.pos = [0] * n
        self.journal = os.open(directory / "journal.wal", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        self.jpos = 0

    def write_all(self, data: bytes) -> None:
        for i, fd in enumerate(self.fds):
            os.pwrite(fd, data, self.pos[i])
            self.pos[i] += len(data)

    def close(self) -> None:
        for fd in [*self.fds, self.journal]:
            os.close(fd)


def strategies(files: Files, data: bytes, pool: ThreadPoolExecutor) -> dict[str, Callable[[], None]]:
    def seq() -> None:
        files.write_all(data)
        for fd in files.fds:
            os.fdatasync(fd)

    def par(k: int) -> Callable[[], None]:
        def run() -> None:
            files.write_all(data)
            fds = files.fds
            chunks = [fds[i::k] for i in range(min(k, len(fds)))]

            def sync_chunk(chunk: list[int]) -> None:
                for fd in chunk:
                    os.fdatasync(fd)

            for f in [pool.submit(sync_chunk, c) for c in chunks]:
                f.result()

        return run

    def one_syncfs() -> None:
        files.write_all(data)
        syncfs(files.fds[0])

    def journal() -> None:
        blob = data * len(files.fds)
        os.pwrite(files.journal, blob, files.jpos)
        files.jpos += len(blob)
        os.fdatasync(files.journal)

    return {"seq": seq, "par4": par(4), "par16": par(16), "syncfs": one_syncfs, "journal": journal}


def measure(fn: Callable[[], None], seconds: float, max_rounds: int) -> list[float]:
    lat: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline and len(lat) < max_rounds:
        t0 = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t0)
    return lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0, help="per strategy and N")
    ap.add_argument("--files", default="1,10,100,1000")
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--dir", type=Path, default=None, help="a directory on the disk to test")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="wal-multi-", dir=args.dir))
    data = os.urandom(args.bytes)
    print(f"dir {base}, record {args.bytes} B per file per round, {args.seconds} s per cell")
    print(f"{'files':>5} {'strategy':<8} {'rounds/s':>9} {'mean ms':>8} {'p99 ms':>8} {'x seq':>6}")
    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            for n in [int(x) for x in args.files.split(",")]:
                d = base / str(n)
                d.mkdir()
                files = Files(d, n)
                seq_rate = 0.0
                try:
                    for name, fn in strategies(files, data, pool).items():
                        fn()  # warm up: create the first block of every file
                        lat = measure(fn, args.seconds, 100_000)
                        rate = len(lat) / sum(lat)
                        if name == "seq":
                            seq_rate = rate
                        p99 = sorted(lat)[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000
                        print(
                            f"{n:>5} {name:<8} {rate:>9.1f} {statistics.fmean(lat) * 1000:>8.2f} "
                            f"{p99:>8.2f} {rate / seq_rate:>6.2f}",
                            flush=True,
                        )
                finally:
                    files.close()
                    shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
