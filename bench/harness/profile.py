"""Profiles of the processes of a run, with py-spy (``bench/run.py --profile``).

During the measurement window, one ``py-spy record --format raw`` per process (the brokers and the
client workers) samples its Python stacks (``--nonblocking``: the process is not paused, at the
price of an occasional torn stack; ``--gil``: only samples where the thread holds the GIL, i.e. where
the process is spending Python CPU, so idle waits on the event loop's selector are not counted).
Time spent in C under the event loop (uvloop, gRPC's Cython layer) shows as the innermost Python
frame, often ``Runner.run``; ``native=True`` (``--profile native``) adds the C frames.
Each raw file (one line per distinct stack: ``frame;frame;...;leaf count``) is summarised into the
functions with the most samples, self (the leaf) and total (anywhere on the stack), and into
categories (gRPC stream machinery, protobuf, WAL, dispatch, ...). The summary goes into
``profile-<label>.txt`` next to the raw file; the parsing and the categories are pure functions.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

RATE_HZ = 100
TOP_N = 25

#: (category, pattern on "function (file:line)"); the first match wins, tried on the leaf frame,
#: then on its callers from the innermost out (so a leaf in asyncio called by the WAL is "WAL").
CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pat))
    for name, pat in (
        ("protobuf", r"google/protobuf|SerializeToString|ParseFromString|_pb2"),
        ("etcd", r"etcd|metadata_store|/keys\.py"),
        ("WAL commit / thread hops", r"/wal/|fsync|fdatasync|concurrent/futures|threading\.py|to_thread"),
        ("timers / health / load reports", r"health|load_report|lease|keepalive|call_later|linger"),
        ("dispatch / subscriptions", r"dispatch|subscription|cursor|pending|/topic\.py|dedup"),
        ("gRPC stream machinery", r"grpc|_cython|aio/_call|interceptor|grpc_api"),
        ("SDK (client)", r"danube_sdk"),
        ("harness", r"bench/"),
        ("asyncio / event loop", r"asyncio|uvloop|selectors|_run_once"),
    )
)
OTHER = "other"


@dataclass
class Summary:
    samples: int = 0
    self_counts: collections.Counter[str] = field(default_factory=collections.Counter)
    total_counts: collections.Counter[str] = field(default_factory=collections.Counter)
    categories: collections.Counter[str] = field(default_factory=collections.Counter)


def category(stack: list[str]) -> str:
    """The category of one stack (outermost frame first), from its leaf outwards."""
    for frame in reversed(stack):
        for name, pat in CATEGORIES:
            if pat.search(frame):
                return name
    return OTHER


def summarize_raw(text: str) -> Summary:
    """Parse py-spy's raw (collapsed) output: ``f1;f2;...;leaf <count>`` per line."""
    s = Summary()
    for line in text.splitlines():
        stack_s, _, count_s = line.rpartition(" ")
        if not stack_s or not count_s.isdigit():
            continue
        n = int(count_s)
        stack = [f for f in stack_s.split(";") if f]
        if not stack:
            continue
        s.samples += n
        s.self_counts[stack[-1]] += n
        for frame in set(stack):
            s.total_counts[frame] += n
        s.categories[category(stack)] += n
    return s


def render(label: str, s: Summary, *, top: int = TOP_N) -> str:
    if not s.samples:
        return f"== {label}: no samples\n"

    def pct(n: int) -> str:
        return f"{100 * n / s.samples:5.1f}%"

    out = [f"== {label}: {s.samples} samples (GIL held)", "-- by category (leaf outwards):"]
    out += [f"  {pct(n)}  {name}" for name, n in s.categories.most_common()]
    out.append(f"-- top {top} self (leaf) frames:")
    out += [f"  {pct(n)}  {frame}" for frame, n in s.self_counts.most_common(top)]
    out.append(f"-- top {top} total (inclusive) frames:")
    out += [f"  {pct(n)}  {frame}" for frame, n in s.total_counts.most_common(top)]
    return "\n".join(out) + "\n"


class Profiler:
    """Records named pids for a fixed time; ``finish`` waits for py-spy and writes the summaries."""

    def __init__(self, out_dir: Path, *, rate_hz: int = RATE_HZ, native: bool = False) -> None:
        exe = shutil.which("py-spy")
        if exe is None:
            candidate = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "py-spy"
            exe = str(candidate) if candidate.exists() else None
        if exe is None:
            raise RuntimeError("py-spy not installed: pip install -e '.[bench]'")
        self.exe = exe
        self.out_dir = out_dir
        self.rate_hz = rate_hz
        #: Also C frames (gRPC core, uvloop, protobuf's upb): py-spy must then pause the process at
        #: each sample (no --nonblocking), which slows it a little.
        self.native = native
        self._procs: list[tuple[str, Path, asyncio.subprocess.Process]] = []

    async def start(self, run_label: str, pids: dict[str, int], duration_s: float) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for name, pid in pids.items():
            raw = self.out_dir / f"{run_label}-{name}.raw"
            proc = await asyncio.create_subprocess_exec(
                self.exe, "record", "--pid", str(pid), "--duration", str(max(1, round(duration_s))),
                "--rate", str(self.rate_hz), "--format", "raw", "--output", str(raw),
                *(["--native"] if self.native else ["--nonblocking"]), "--gil",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            self._procs.append((f"{run_label}-{name}", raw, proc))

    async def finish(self, timeout_s: float = 60.0) -> list[Path]:
        """Wait for every recorder (killing one that overruns), then write ``profile-<label>.txt``."""
        written: list[Path] = []
        procs, self._procs = self._procs, []
        for label, raw, proc in procs:
            try:
                _, err = await asyncio.wait_for(proc.communicate(), timeout_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
                err = b"py-spy overran its duration: killed"
            text = raw.read_text() if raw.exists() else ""
            summary = render(label, summarize_raw(text))
            if not text and err:
                summary += "py-spy: " + err.decode(errors="replace")[-500:] + "\n"
            path = self.out_dir / f"profile-{label}.txt"
            path.write_text(summary)
            written.append(path)
        return written
