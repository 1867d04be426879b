"""How long a WAL commit round takes in a worker thread while the event-loop thread is busy, for
several GIL switch intervals (``sys.setswitchinterval``).

    .venv/bin/python bench/gil_convoy.py [--files 25] [--rounds 20] [--intervals-ms 5,1,0.5,0.2,0.1]

A round writes 1 KB to each of ``--files`` files and fdatasyncs each, as the broker's commit
group does in its worker threads. Every system call releases the GIL and must take it back
afterwards; while another thread runs Python (the broker's event loop), CPython hands the GIL
over only every switch interval, so each call can wait that long. Prints the round time alone
and next to a thread that runs Python without pause (p50 / p90 in ms).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time


def one_round(fds: list[int], payload: bytes) -> float:
    t0 = time.perf_counter()
    for fd in fds:
        os.write(fd, payload)
    for fd in fds:
        os.fdatasync(fd)
    return time.perf_counter() - t0


def rounds_ms(fds: list[int], n: int, *, busy: bool) -> list[float]:
    """``n`` rounds in a worker thread; with ``busy`` the calling thread spins meanwhile."""
    payload = b"x" * 1024
    out: list[float] = []

    def worker() -> None:
        out.extend(one_round(fds, payload) * 1000.0 for _ in range(n))

    t = threading.Thread(target=worker)
    t.start()
    spins = 0
    while busy and t.is_alive():
        spins += 1  # pure Python: holds the GIL except at the switch interval
    t.join()
    return sorted(out)


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=int, default=25, help="files per round (topics with appends)")
    p.add_argument("--rounds", type=int, default=20, help="rounds per measurement")
    p.add_argument("--intervals-ms", default="5,1,0.5,0.2,0.1", help="switch intervals to try")
    p.add_argument("--dir", default=None, help="where the files go (default: a temporary directory)")
    args = p.parse_args(argv)
    before = sys.getswitchinterval()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="gil-convoy-") as d:
        fds = [os.open(os.path.join(d, f"f{i}"), os.O_WRONLY | os.O_CREAT, 0o600) for i in range(args.files)]
        try:
            print(f"{args.files} files per round, {args.rounds} rounds; round time in ms (p50 / p90)")
            print(f"{'switch interval':>16}  {'alone':>15}  {'next to a busy thread':>22}")
            for ms in (float(x) for x in args.intervals_ms.split(",")):
                sys.setswitchinterval(ms / 1000.0)
                alone = rounds_ms(fds, args.rounds, busy=False)
                busy = rounds_ms(fds, args.rounds, busy=True)
                print(
                    f"{ms:>13.2f} ms  {pct(alone, 0.5):>6.2f} / {pct(alone, 0.9):>6.2f}  "
                    f"{pct(busy, 0.5):>9.2f} / {pct(busy, 0.9):>9.2f}   (mean busy {statistics.mean(busy):.2f})"
                )
        finally:
            for fd in fds:
                os.close(fd)
            sys.setswitchinterval(before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
